/* SPDX-License-Identifier: MIT */
/*
 * release.c - resil_release: a permit's release into the record and
 * mapping it was granted under, whatever happened to the name since.
 * The design: docs/internals/libresil.md, "Permits".
 *
 * Shared-memory words this file touches: each component's (shm/), and
 * the record's gen, read as a seqlock (gen before and after a copy) for a
 * permit of a record the handle is no longer bound to: a record reused
 * since (another tag, or 0 while the daemon rewrites it) drops the
 * release, so it never writes into another policy's block.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "budget.h"
#include "conf.h"
#include "binding.h"
#include "internal.h"
#include "bulkhead.h"
#include "stats.h"
#include "limit.h"
#include "resil.pb-c.h"

/* A release into a record the handle is no longer bound to: into a whole
 * copy of it if it still carries the permit's tag (seqlock reader: gen,
 * copy, gen; the daemon stores gen 0 before it rewrites a reused record
 * and the new gen last), else nowhere: the record was reused, and the
 * block the permit came from with it. */
static RESIL_COLD __attribute__((noinline)) void
release_old(struct resil *r, struct resil_map *m, const struct resil_rec *rec, uint32_t tag,
	    struct resil_permit_priv *pm, int outcome)
{
	uint32_t g1 = ld_acquire((ra32 *)&rec->gen), g2;
	struct resil_rec copy;
	struct resil_ctx x;

	if (g1 == 0 || (g1 & 0xffffu) != tag) {
		pm->flags = 0;
		return;
	}
	memcpy(&copy, rec, sizeof(copy));
	atomic_thread_fence(memory_order_acquire);
	g2 = ld_relaxed((ra32 *)&rec->gen);
	if (g2 != g1) {
		pm->flags = 0;
		return;
	}
	fill_ctx(r, m, &x);
	x.rec = &copy;
	x.counts = count_base(m, copy.slot);
	resil_policy_release(&x, &copy, pm, outcome);
	pm->flags = 0;
}

/* For resil_call (libcall.c), which holds a record across the call: is
 * it still the one it granted the permit under? */
bool resil_priv_rec_current(const struct resil_rec *rec, uint32_t gen)
{
	return ld_acquire((ra32 *)&rec->gen) == gen;
}

/* A release of a permit granted under the record the handle is bound to,
 * through the general path: the whole context and resil_policy_release. */
static __attribute__((noinline, flatten)) void release_general(struct resil *r,
							       const struct resil_binding *b,
							       struct resil_permit_priv *pm,
							       int outcome)
{
	struct resil_ctx x;

	binding_ctx(r, b, &x);
	resil_policy_release(&x, b->rec, pm, outcome);
	pm->flags = 0;
}

/* A release of a permit of a record the handle is no longer bound to
 * (see release_old). */
static RESIL_COLD __attribute__((noinline)) void
release_unbound(struct resil *r, struct resil_permit_priv *pm, uint32_t tag, int outcome)
{
	uint32_t seq32 = pm->where >> RESIL_PERMIT_IDX_BITS;
	uint32_t idx = pm->where & (RESIL_PERMIT_IDX_MAX - 1);
	struct resil_map *m = ld_acquire(&r->cur);

	if (RESIL_UNLIKELY((m->seq % 32) != seq32))
		m = resil_priv_find_map(r, seq32);
	if (RESIL_UNLIKELY(!m || idx == 0 || idx > m->seg->cfg->rec_cap)) {
		pm->flags = 0;
		return;
	}
	release_old(r, m, resil_seg_rec(m->seg, idx - 1), tag, pm, outcome);
}

/*
 * The end of every release the binding's branches decide, in
 * resil_policy_release's order after the breaker: the limiter has nothing
 * to give back (resil_limit_release reads no context and clears its
 * flags, which the end clears anyway); the bulkhead's slot (a fail-fast
 * one of host scope scans no waiter; any other is the bulkhead's own
 * release, out of line: release_bulkhead); the count.
 */
static __attribute__((noinline, flatten)) void
release_bulkhead(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome);

static inline __attribute__((always_inline)) void
release_end(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	if (b->steps & RESIL_STEP_BULKHEAD) {
		if (RESIL_UNLIKELY(!b->bh_n)) {
			release_bulkhead(b, pm, outcome);
			return;
		}
		if (resil_bulkhead_release_scan_n(b->bh_st, b->bh_n, pm))
			resil_count_released(b->cnt, 1);
	}
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* The bulkhead's own release (callers that wait, packed slots, global
 * scope: it reads no context), then the count. */
static __attribute__((noinline, flatten)) void
release_bulkhead(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	uint32_t held = pm->flags & RESIL_PERMIT_BULKHEAD;

	resil_bulkhead_release(NULL, &b->rec->conf.bulkhead, b->bh_st, pm, outcome);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
	if (held)
		resil_count_released(b->cnt, 1);
}

/* The breaker's success recorded over a slot of its window that held
 * another outcome (v: RESIL_BK_LEAN_AFTER | its code): the counters, and
 * the transition they may call for, with the whole context; then the
 * release's end. */
static RESIL_COLD __attribute__((noinline)) void breaker_after(struct resil *r,
							       const struct resil_binding *b,
							       struct resil_permit_priv *pm,
							       int outcome, uint32_t v)
{
	struct resil_ctx x;

	binding_ctx(r, b, &x);
	resil_breaker_lean_after(&x, &b->rec->conf.breaker, b->bk_st, pm->breaker_gen, v);
	release_end(b, pm, outcome);
}

/* The breaker's release: a success in CLOSED recorded with no context,
 * then the end; any other record (RESIL_BK_LEAN_NO: a failure, another
 * state) is the general release's, of every component. Its own function:
 * the record's registers are no other step's. */
static __attribute__((noinline, flatten)) void release_breaker(struct resil *r,
							       const struct resil_binding *b,
							       struct resil_permit_priv *pm,
							       int outcome)
{
	uint32_t v =
	    resil_breaker_release_lean(&b->rec->conf.breaker, b->bk_st, pm, outcome, b->bk_off);

	if (RESIL_UNLIKELY(v == RESIL_BK_LEAN_NO)) {
		release_general(r, b, pm, outcome);
		return;
	}
	if (RESIL_UNLIKELY(v != RESIL_BK_LEAN_DONE)) {
		breaker_after(r, b, pm, outcome, v);
		return;
	}
	release_end(b, pm, outcome);
}

/* A release in a forked child: see acquire_forked. */
static RESIL_COLD __attribute__((noinline)) void release_forked(resil_policy_t *p,
								resil_permit_t *permit, int outcome)
{
	fork_check(p->r);
	resil_release(p, permit, outcome);
}

/*
 * The one release, in resil_policy_release's order. A release goes to
 * the record (and so the state block) the permit was granted under,
 * whatever happened to the name since: a changed configuration, a
 * delete, a re-attach to a new daemon. Mappings stay until resil_close,
 * so the permit's (mapping, record, tag) is all it takes: no directory
 * on this path. The handle's binding serves while its slot word is
 * unchanged (one load: a record still named by its slot is not retired,
 * so not reused); else the record is read as a seqlock, and one reused
 * since (another tag, or 0 while free) drops the release: the handle's
 * cached block may be another policy's.
 */
RESIL_API __attribute__((flatten)) void resil_release(resil_policy_t *p, resil_permit_t *permit,
						      int outcome)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;
	struct resil *r;

	/* 1. the arguments: a permit not held releases nothing */
	if (RESIL_UNLIKELY(!p || !permit || !(pm->flags & RESIL_PERMIT_HELD)))
		return;
	if (outcome != RESIL_SUCCESS && outcome != RESIL_FAILURE && outcome != RESIL_IGNORED)
		outcome = RESIL_IGNORED;
	/* 2. a forked child takes its own identity first */
	r = p->r;
	if (forked(r)) {
		release_forked(p, permit, outcome);
		return;
	}
	/* 3. the binding, if the permit was granted under its record (where
	 * and the tag in one test; b->word != 0 implies b->rec) and the
	 * record is still its slot's */
	/* acquire: pairs with bind's release, so the binding is whole */
	b = ld_acquire(&p->b);
	if (RESIL_UNLIKELY(!(
		((b->where ^ pm->where) | ((b->held ^ pm->flags) >> RESIL_PERMIT_TAG_SHIFT)) == 0 &&
		b->word && ld_acquire(b->slotp) == b->word))) {
		release_unbound(r, pm, pm->flags >> RESIL_PERMIT_TAG_SHIFT, outcome);
		return;
	}
	/* 4. a policy the branches do not decide; 5. the breaker, which
	 * ends the release its own way */
	if (b->steps & (RESIL_STEP_GENERAL | RESIL_STEP_BREAKER)) {
		if (b->steps & RESIL_STEP_GENERAL)
			release_general(r, b, pm, outcome);
		else
			release_breaker(r, b, pm, outcome);
		return;
	}
	/* 6. the limiter, the bulkhead, the count */
	release_end(b, pm, outcome);
}

RESIL_API int64_t resil_permit_wait_ns(const resil_permit_t *permit)
{
	const struct resil_permit_priv *pm = (const struct resil_permit_priv *)permit;

	if (!permit)
		return -EINVAL;
	return pm->wait_ns;
}

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
	resil_policy_release(&x, &copy, pm, outcome);
	pm->flags = 0;
}

/* For resil_call (libcall.c), which holds a record across the call: is
 * it still the one it granted the permit under? */
bool resil_priv_rec_current(const struct resil_rec *rec, uint32_t gen)
{
	return ld_acquire((ra32 *)&rec->gen) == gen;
}

/* A release of a permit granted under the record the handle is bound to
 * (rec, in mapping m), through the general path. Inline: a call, its
 * prologue and the binding's fields passed again cost the general path
 * more (bench shed.acq_rel, bench/untrusted.md) than the larger frame
 * costs the lean releases. */
static inline __attribute__((always_inline)) void
release_bound(struct resil *r, struct resil_map *m, const struct resil_rec *rec, uint32_t bk_off,
	      struct resil_permit_priv *pm, int outcome)
{
	struct resil_ctx x;

	fill_ctx(r, m, &x);
	x.rec = rec;
	x.bk_conf = &rec->conf.breaker;
	x.bk_off = bk_off;
	resil_policy_release(&x, rec, pm, outcome);
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

/* The end of a lean release off the hot function's own path: the count
 * (one call site for the lean releases out of line, so that the counters'
 * function stays inlined where the general path calls it). */
static __attribute__((noinline, flatten)) void
release_count(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean breaker's success recorded over a slot that held another
 * outcome (v: RESIL_BK_LEAN_AFTER | its code): the counters, and the
 * transition they may call for, with a context; then the count. */
static RESIL_COLD __attribute__((noinline)) void breaker_after(struct resil *r,
							       const struct resil_binding *b,
							       const struct resil_permit_priv *pm,
							       uint32_t v)
{
	struct resil_ctx x;

	fill_ctx(r, b->m, &x);
	x.rec = b->rec;
	resil_breaker_lean_after(&x, &b->rec->conf.breaker, b->lean_st, pm->breaker_gen, v);
}

static RESIL_COLD __attribute__((noinline)) void release_lean_after(struct resil *r,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    uint32_t v, int outcome)
{
	breaker_after(r, b, pm, v);
	release_count(b, pm, outcome);
}

/* A release in a forked child: see acquire_forked. */
static RESIL_COLD __attribute__((noinline)) void release_forked(resil_policy_t *p,
								resil_permit_t *permit, int outcome)
{
	fork_check(p->r);
	resil_release(p, permit, outcome);
}

/* The general path of a release, from the binding b (see acquire_general:
 * each path of a release is its own function too). */
static __attribute__((noinline, flatten)) void release_general(struct resil *r,
							       const struct resil_binding *b,
							       struct resil_permit_priv *pm,
							       int outcome)
{
	release_bound(r, b->m, b->rec, LEAN_BK_OFF(b->lean), pm, outcome);
}

/* release_lean_bulkhead for a bulkhead of global scope, whose callers
 * wait or of packed slots: the slot count, the stride and the wait from
 * the configuration (resil_bulkhead_release reads no context). Out of
 * line: its wake (a call) would give the fail-fast release a frame. */
static __attribute__((noinline, flatten)) void
release_lean_bulkhead_conf(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	resil_bulkhead_release(NULL, &b->rec->conf.bulkhead, b->lean_st, pm, outcome);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean bulkhead's release and the count, in one function: the scan's
 * CAS and the count's add with no call between them, and the permit's
 * flags stored once. */
static __attribute__((noinline, flatten)) void
release_lean_bulkhead(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	uint32_t n = LEAN_BH_N(b->lean);

	if (RESIL_UNLIKELY(!n))
		return release_lean_bulkhead_conf(b, pm, outcome);
	resil_bulkhead_release_scan_n(b->lean_st, n, pm);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean breaker's release (see "Lean decisions"): a success in CLOSED
 * recorded without a context, anything else by the general release. */
static __attribute__((noinline, flatten)) void release_lean_breaker(struct resil *r,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    int outcome)
{
	uint32_t v = resil_breaker_release_lean(&b->rec->conf.breaker, b->lean_st, pm, outcome,
						LEAN_BK_OFF(b->lean));

	if (RESIL_UNLIKELY(v == RESIL_BK_LEAN_NO)) {
		/* not a success in CLOSED */
		release_general(r, b, pm, outcome);
		return;
	}
	if (RESIL_UNLIKELY(v != RESIL_BK_LEAN_DONE)) {
		release_lean_after(r, b, pm, v, outcome);
		return;
	}
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean stack's release, in resil_policy_release's order: the breaker's
 * success recorded lean (any other record: the general release, of every
 * component, from the same binding), the bulkhead's slot (the limiter
 * has nothing to give back), the count. */
static __attribute__((noinline, flatten)) void release_lean_stack(struct resil *r,
								  const struct resil_binding *b,
								  struct resil_permit_priv *pm,
								  int outcome)
{
	uint32_t v;

	if (b->lean_st) {
		v = resil_breaker_release_lean(&b->rec->conf.breaker, b->lean_st, pm, outcome,
					       LEAN_BK_OFF(b->lean));
		if (RESIL_UNLIKELY(v == RESIL_BK_LEAN_NO)) {
			release_general(r, b, pm, outcome);
			return;
		}
		if (RESIL_UNLIKELY(v != RESIL_BK_LEAN_DONE))
			breaker_after(r, b, pm, v);
	}
	if (b->bh_st)
		resil_bulkhead_release_scan_n(b->bh_st, b->bh_n, pm);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean limiter's release (it reads no context here) and the count. */
static __attribute__((noinline, flatten)) void
release_lean_limit(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	struct resil_ctx lx = {.client_id = 0};

	resil_limit_release(&lx, &b->rec->conf.limit, b->lean_st, pm, outcome);
	release_count(b, pm, outcome);
}

RESIL_API __attribute__((flatten)) void resil_release(resil_policy_t *p, resil_permit_t *permit,
						      int outcome)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	struct resil *r;
	const struct resil_binding *b;
	uint32_t kind;

	if (RESIL_UNLIKELY(!p || !permit || !(pm->flags & RESIL_PERMIT_HELD)))
		return;
	if (outcome != RESIL_SUCCESS && outcome != RESIL_FAILURE && outcome != RESIL_IGNORED)
		outcome = RESIL_IGNORED;
	r = p->r;
	/*
	 * A release goes to the record (and so the state block) the permit
	 * was granted under, whatever happened to the name since: a changed
	 * configuration, a delete, a re-attach to a new daemon. Mappings stay
	 * until resil_close, so the permit's (mapping, record, tag) is all it
	 * takes: no directory on this path. The handle's binding serves while
	 * its slot word is unchanged (one load: a record still named by its
	 * slot is not retired, so not reused); else the record is read as a
	 * seqlock, and one reused since (another tag, or 0 while free) drops
	 * the release: the handle's cached block may be another policy's.
	 */
	if (forked(r)) {
		release_forked(p, permit, outcome);
		return;
	}
	/* acquire: pairs with bind's release, so the binding is whole */
	b = ld_acquire(&p->b);
	/* b->word != 0 implies b->rec (bind); where and the tag in one test */
	if (RESIL_UNLIKELY(!(
		((b->where ^ pm->where) | ((b->held ^ pm->flags) >> RESIL_PERMIT_TAG_SHIFT)) == 0 &&
		b->word && ld_acquire(b->slotp) == b->word))) {
		release_unbound(r, pm, pm->flags >> RESIL_PERMIT_TAG_SHIFT, outcome);
		return;
	}
	/* the record the handle is bound to, still its slot's (not retired,
	 * so not reused either): no walk */
	/* the kinds tested one by one, each path a tail call, so that none
	 * pays for the registers of another (a jump table would) */
	kind = LEAN_KIND(b->lean);
	if (kind == RESIL_LEAN_BREAKER) {
		release_lean_breaker(r, b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_BULKHEAD) {
		release_lean_bulkhead(b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_LIMIT) {
		release_lean_limit(b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_STACK) {
		release_lean_stack(r, b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_NONE) {
		release_general(r, b, pm, outcome);
		return;
	}
	/* the counters read no context (and, last, nothing is kept across
	 * their add) */
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

RESIL_API int64_t resil_permit_wait_ns(const resil_permit_t *permit)
{
	const struct resil_permit_priv *pm = (const struct resil_permit_priv *)permit;

	if (!permit)
		return -EINVAL;
	return pm->wait_ns;
}

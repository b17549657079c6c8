/* SPDX-License-Identifier: MIT */
/*
 * policy.c - composing a policy's components into one acquire and one
 * release, and laying out its state block.
 *
 * A state block is the concatenation of the components' states, each
 * 128-byte aligned, in a fixed order: the decision components first
 * (breaker, limit, bulkhead, adaptive, shed), then the counters (always
 * there) and the retry budget. rec->comp_off[] says where each one starts;
 * a component absent from the configuration has no state.
 *
 * policy.scope = process: each client row gets a copy of the decision
 * components only, the block's prefix up to the counters (rec->proc_stride
 * bytes, so one comp_off[] addresses the main block and every copy). What
 * a process's decision needs is its own; the counters, the histogram and
 * the retry budget are observations and a shared budget, kept once per
 * policy in the main block and added to by every process (one add per
 * word on the CPU's stripe, relaxed: stats.c), with the writers, readers
 * and memory orders they have under fleet scope. Crash window of the
 * shared counters: each update is one add on one word, so a process
 * SIGKILLed within a release loses at most the counts it had not added
 * yet (its histogram sample, one call); nothing decides on them and
 * nothing repairs them.
 *
 * Acquire order (see policy.h): the breaker's read-only check first, so an
 * OPEN breaker costs a load and spends nothing; then the shedder; then what
 * spends, each given back (undo) if a later step rejects; the breaker's
 * probe last, because a probe is the scarcest thing to hold.
 *
 * Crash window: a process killed between a component's acquire and the
 * undo of an earlier one (a later one rejected) keeps that earlier item:
 * a rate-limit token is simply spent (bounded error, no repair needed),
 * a bulkhead or adaptive permit is owned by the client's row and comes back
 * through resil_policy_reclaim when the daemon sees the process die.
 *
 * Count tables: a pool's claim and each slot freed are counted in the
 * deciding process's own table (c->counts, count_table.h: written by that
 * process only, read by resild), acquired before the claim and released
 * after the free; killed between a count and its CAS, the process leaves
 * acquired - released one too high (resild frees fewer, never more).
 */
#include <errno.h>
#include <string.h>

#include "policy.h"
#include "comp.h"
#include "breaker.h"
#include "limit.h"
#include "bulkhead.h"
#include "adaptive.h"
#include "shed.h"
#include "budget.h"
#include "stats.h"
#include "count_table.h"

#ifdef RESIL_COMP_HOOKS
/* A build whose table has rows with decision hooks (comp.h: acquired,
 * released; the build defines RESIL_COMP_HOOKS): the hot path below keeps
 * its code under a _core name, and the wrappers at the end of this file
 * call the hooks through the table. The product's build has none: its
 * acquire and release are the functions below, unwrapped. */
#define resil_policy_acquire resil_policy_acquire_core
#define resil_policy_release resil_policy_release_core
#endif

/* A component's row in the table, NULL when this build has none. */
static const struct resil_comp_ops *comp_row(enum resil_comp comp)
{
	resil_comp_foreach (op)
		if ((*op)->id == comp)
			return *op;
	return NULL;
}

/* A component's state size, 0 when the configuration has none. */
static uint64_t comp_size(const struct resil_conf *c, enum resil_comp comp)
{
	const struct resil_comp_ops *op = comp_row(comp);

	return op ? op->state_size(c) : 0;
}

/* The decision components first (a process's copy is that prefix), then
 * what is fleet-wide whatever the scope. */
static const enum resil_comp layout_order[] = {
    RESIL_C_BREAKER, RESIL_C_LIMIT, RESIL_C_BULKHEAD, RESIL_C_ADAPTIVE,
    RESIL_C_SHED,    RESIL_C_STATS, RESIL_C_BUDGET,
};
static uint64_t lay(const struct resil_conf *conf, uint32_t comp_off[RESIL_C_MAX],
		    uint32_t *components, uint64_t *copy)
{
	uint64_t off = 0;
	uint32_t comps = 0;

	memset(comp_off, 0, sizeof(uint32_t) * RESIL_C_MAX);
	*copy = 0;
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(layout_order); i++) {
		enum resil_comp comp = layout_order[i];
		uint64_t size = comp_size(conf, comp);

		if (comp == RESIL_C_STATS && !*copy)
			*copy = off;
		if (!size && comp != RESIL_C_STATS)
			continue;
		comp_off[comp] = (uint32_t)off;
		comps |= 1u << comp;
		off += resil_align_up(size, RESIL_HOT_ALIGN);
	}
	/* rows of the table outside the fixed order (a build's own
	 * components, fleet-wide): after it, in table order */
	resil_comp_foreach (op) {
		enum resil_comp comp = (*op)->id;
		uint64_t size = (*op)->state_size(conf);
		bool known = false;

		for (size_t i = 0; i < RESIL_ARRAY_SIZE(layout_order); i++)
			known |= layout_order[i] == comp;
		if (known || !size)
			continue;
		comp_off[comp] = (uint32_t)off;
		comps |= 1u << comp;
		off += resil_align_up(size, RESIL_HOT_ALIGN);
	}
	*components = comps;
	if (!*copy)
		*copy = RESIL_HOT_ALIGN; /* no decision component: a copy of one line */
	return off ? off : RESIL_HOT_ALIGN;
}

uint64_t resil_policy_state_layout(const struct resil_conf *conf, uint32_t comp_off[RESIL_C_MAX],
				   uint32_t *components)
{
	uint64_t copy;

	return lay(conf, comp_off, components, &copy);
}

uint64_t resil_policy_copy_size(const struct resil_conf *conf)
{
	uint32_t off[RESIL_C_MAX], comps;
	uint64_t copy;

	(void)lay(conf, off, &comps, &copy);
	return conf->scope == RESIL_SCOPE_PROCESS ? copy : 0;
}

bool resil_policy_layout_ok(const struct resil_rec *rec)
{
	uint32_t off[RESIL_C_MAX], comps;
	uint64_t size, copy;
	bool proc = rec->conf.scope == RESIL_SCOPE_PROCESS;

	size = lay(&rec->conf, off, &comps, &copy);
	return comps == rec->components && size == rec->state_size &&
	       memcmp(off, rec->comp_off, sizeof(off)) == 0 &&
	       rec->proc_stride == (proc ? copy : 0);
}

/* A component's state in the block at base (the main block, or one
 * process's copy under policy.scope = process). */
static void *blk(const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
		 enum resil_comp comp)
{
	return (char *)s->st + base + rec->comp_off[comp];
}

/* The block holding the decision components for this caller. */
static uint64_t decision_base(const struct resil_ctx *c, const struct resil_rec *rec)
{
	uint32_t row;

	if (RESIL_LIKELY(!rec->proc_stride))
		return rec->state_off;
	/* no row (0) and an id past the table (a pid tag, seg.h) wrap */
	row = c->client_id - 1;
	if (row >= c->seg->geo.client_cap)
		return rec->state_off;
	return rec->proc_off + (uint64_t)row * rec->proc_stride;
}

/* A pool's claim in the deciding process's count table (c->counts,
 * shm/count_table.h): acquired before the claim (pool_claiming), and
 * released too when it ends without a slot (pool_claimed); each slot
 * freed later, by a release or an undo, released (pool_released). */
static inline void pool_claiming(struct resil_ctx *c)
{
	if (c->counts)
		resil_count_acquired(c->counts, 1);
}

static inline int pool_claimed(struct resil_ctx *c, int v)
{
	if (v && c->counts)
		resil_count_released(c->counts, 1);
	return v;
}

static inline void pool_released(struct resil_ctx *c)
{
	if (c->counts)
		resil_count_released(c->counts, 1);
}

/* The decision components of the block at base, which every caller has
 * zeroed: each component's init for a zeroed block where it has one. */
static void init_decisions(const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
			   int64_t now)
{
	resil_comp_foreach (op)
		if ((*op)->decision && resil_has(rec, (*op)->id))
			((*op)->state_init_zeroed ? (*op)->state_init_zeroed : (*op)->state_init)(
			    blk(s, rec, base, (*op)->id), &rec->conf, now);
}

void resil_policy_state_init(const struct resil_seg *s, struct resil_rec *rec, int64_t now)
{
	/* zero without touching what stays zero: a keyed table of a million
	 * keys costs the daemon nothing until clients use it; the components'
	 * inits write only what is not zero */
	resil_seg_zero(s, rec->state_off, rec->state_size);
	/* the fleet-wide components (the counters, the retry budget) */
	resil_comp_foreach (op)
		if (!(*op)->decision && resil_has(rec, (*op)->id))
			(*op)->state_init(resil_comp_state(s, rec, (*op)->id), &rec->conf, now);
	init_decisions(s, rec, rec->state_off, now);
	/* process scope: every row's copy starts fresh (this touches the
	 * copies' pages once: client_cap x proc_stride bytes) */
	for (uint32_t i = 0; rec->proc_stride && i < s->geo.client_cap; i++) {
		uint64_t base = rec->proc_off + (uint64_t)i * rec->proc_stride;

		memset(resil_seg_state(s, base), 0, rec->proc_stride);
		init_decisions(s, rec, base, now);
	}
}

bool resil_policy_same_shape(const struct resil_conf *a, const struct resil_conf *b)
{
	if (a->scope != b->scope)
		return false;
	resil_comp_foreach (op) {
		bool has = (*op)->state_size(a) != 0;

		if (has != ((*op)->state_size(b) != 0))
			return false;
		if (has && !(*op)->same_shape(a, b))
			return false;
	}
	return true;
}

static void carry_decisions(const struct resil_seg *ns, struct resil_rec *nrec, uint64_t nbase,
			    const struct resil_seg *os, const struct resil_rec *orec,
			    uint64_t obase, int64_t now)
{
	resil_comp_foreach (op) {
		enum resil_comp comp = (*op)->id;

		if ((*op)->decision && resil_has(nrec, comp) && resil_has(orec, comp))
			(*op)->carry(blk(ns, nrec, nbase, comp), &nrec->conf,
				     blk(os, orec, obase, comp), &orec->conf, now);
	}
}

void resil_policy_carry_from(const struct resil_seg *ns, struct resil_rec *nrec,
			     const struct resil_seg *os, const struct resil_rec *orec, int64_t now)
{
	uint32_t rows =
	    ns->geo.client_cap < os->geo.client_cap ? ns->geo.client_cap : os->geo.client_cap;

	resil_comp_foreach (op) {
		enum resil_comp comp = (*op)->id;

		if (!(*op)->decision && resil_has(nrec, comp) && resil_has(orec, comp))
			(*op)->carry(resil_comp_state(ns, nrec, comp), &nrec->conf,
				     resil_comp_state(os, orec, comp), &orec->conf, now);
	}
	carry_decisions(ns, nrec, nrec->state_off, os, orec, orec->state_off, now);
	/* a change of shape within process scope keeps each row's OPEN state */
	for (uint32_t i = 0; nrec->proc_stride && orec->proc_stride && i < rows; i++)
		carry_decisions(ns, nrec, nrec->proc_off + (uint64_t)i * nrec->proc_stride, os,
				orec, orec->proc_off + (uint64_t)i * orec->proc_stride, now);
}

void resil_policy_carry(const struct resil_seg *s, struct resil_rec *nrec,
			const struct resil_rec *orec, int64_t now)
{
	resil_policy_carry_from(s, nrec, s, orec, now);
}

int resil_policy_acquire(struct resil_ctx *c, const struct resil_rec *rec,
			 struct resil_permit_priv *pm, const void *key, size_t key_len)
{
	const struct resil_seg *s = c->seg;
	const struct resil_conf *cf = &rec->conf;
	void *bst = NULL, *lst = NULL, *hst = NULL, *ast = NULL, *sst = NULL;
	uint64_t base = decision_base(c, rec);
	int v;

	c->rec = rec;
	c->key = key;
	c->key_len = key_len;
	pm->flags = 0;

	if (resil_has(rec, RESIL_C_BREAKER)) {
		bst = blk(s, rec, base, RESIL_C_BREAKER);
		v = resil_breaker_check(c, &cf->breaker, bst, pm);
		if (v)
			goto rejected;
	}
	if (resil_has(rec, RESIL_C_SHED)) {
		sst = blk(s, rec, base, RESIL_C_SHED);
		v = resil_shed_acquire(c, &cf->shed, sst, pm);
		if (v)
			goto rejected;
	}
	if (resil_has(rec, RESIL_C_LIMIT)) {
		lst = blk(s, rec, base, RESIL_C_LIMIT);
		v = resil_limit_acquire(c, &cf->limit, lst, pm);
		if (v)
			goto undo_shed;
	}
	/* the pools' claims, counted (pool_claimed) */
	if (resil_has(rec, RESIL_C_BULKHEAD)) {
		hst = blk(s, rec, base, RESIL_C_BULKHEAD);
		pool_claiming(c);
		v = pool_claimed(c, resil_bulkhead_acquire(c, &cf->bulkhead, hst, pm));
		if (v)
			goto undo_limit;
	}
	if (resil_has(rec, RESIL_C_ADAPTIVE)) {
		ast = blk(s, rec, base, RESIL_C_ADAPTIVE);
		pool_claiming(c);
		v = pool_claimed(c, resil_adaptive_acquire(c, &cf->adaptive, ast, pm));
		if (v)
			goto undo_bulkhead;
	}
	if (bst) {
		v = resil_breaker_acquire(c, &cf->breaker, bst, pm);
		if (v)
			goto undo_adaptive;
	}
	if (cf->histogram && !(pm->flags & RESIL_PERMIT_TIMED)) {
		pm->start_ns = resil_ctx_now(c);
		pm->flags |= RESIL_PERMIT_TIMED;
	}
	pm->flags |= RESIL_PERMIT_HELD;
	return 0;

undo_adaptive:
	if (ast) {
		resil_adaptive_undo(c, &cf->adaptive, ast, pm);
		pool_released(c);
	}
undo_bulkhead:
	if (hst) {
		resil_bulkhead_undo(c, &cf->bulkhead, hst, pm);
		pool_released(c);
	}
undo_limit:
	if (lst)
		resil_limit_undo(c, &cf->limit, lst, pm);
undo_shed:
	if (sst)
		resil_shed_undo(c, &cf->shed, sst, pm);
rejected:
	/* a Retry-After only from who knows one (the limiter, an OPEN
	 * breaker): not a reservation an undone limiter made */
	if (v != RESIL_REJECT_LIMITED && v != RESIL_REJECT_OPEN)
		pm->wait_ns = 0;
	resil_stats_rejected(c, resil_comp_state(s, rec, RESIL_C_STATS), v);
	return v;
}

void resil_policy_release(struct resil_ctx *c, const struct resil_rec *rec,
			  struct resil_permit_priv *pm, int outcome)
{
	const struct resil_seg *s = c->seg;
	const struct resil_conf *cf = &rec->conf;
	uint64_t base = decision_base(c, rec);

	if (!(pm->flags & RESIL_PERMIT_HELD))
		return;
	c->rec = rec;
	if (resil_has(rec, RESIL_C_BREAKER))
		resil_breaker_release(c, &cf->breaker, blk(s, rec, base, RESIL_C_BREAKER), pm,
				      outcome);
	if (pm->flags & RESIL_PERMIT_ADAPTIVE) {
		resil_adaptive_release(c, &cf->adaptive, blk(s, rec, base, RESIL_C_ADAPTIVE), pm,
				       outcome);
		pool_released(c);
	}
	if (pm->flags & RESIL_PERMIT_BULKHEAD) {
		resil_bulkhead_release(c, &cf->bulkhead, blk(s, rec, base, RESIL_C_BULKHEAD), pm,
				       outcome);
		pool_released(c);
	}
	if (resil_has(rec, RESIL_C_LIMIT))
		resil_limit_release(c, &cf->limit, blk(s, rec, base, RESIL_C_LIMIT), pm, outcome);
	if (resil_has(rec, RESIL_C_SHED))
		resil_shed_release(c, &cf->shed, blk(s, rec, base, RESIL_C_SHED), pm, outcome);
	resil_stats_released(c, cf, resil_comp_state(s, rec, RESIL_C_STATS), pm, outcome,
			     (pm->flags & RESIL_PERMIT_TIMED)
				 ? resil_max64(resil_ctx_now(c) - pm->start_ns, 0)
				 : -1);
	pm->flags = 0;
}

static void maintain_block(struct resil_ctx *c, const struct resil_rec *rec, uint64_t base)
{
	resil_comp_foreach (op)
		if ((*op)->decision && (*op)->maintain && resil_has(rec, (*op)->id))
			(*op)->maintain(c, &rec->conf, blk(c->seg, rec, base, (*op)->id));
}

void resil_policy_maintain(struct resil_ctx *c, const struct resil_rec *rec)
{
	c->rec = rec;
	/* fleet-wide only: the counters and the retry budget */
	resil_comp_foreach (op)
		if (!(*op)->decision && (*op)->maintain && resil_has(rec, (*op)->id))
			(*op)->maintain(c, &rec->conf, resil_comp_state(c->seg, rec, (*op)->id));
	maintain_block(c, rec, rec->state_off);
	/* process scope: the copies of live rows only */
	for (uint32_t i = 0; rec->proc_stride && i < c->seg->geo.client_cap; i++)
		if (ld_relaxed(&resil_seg_client(c->seg, i)->owner))
			maintain_block(c, rec, rec->proc_off + (uint64_t)i * rec->proc_stride);
}

/*
 * Adoption. A component block carries copies of its layout, written at
 * init from the configuration (the breaker's window kind, size, bucket
 * span, probe count and offsets; the bulkhead's and the adaptive pool's
 * slot count, stride and offset; the shedder's bucket
 * width). Nothing addresses memory through them, and on a live block the
 * tick rewrites them (a client scribbled on words it cannot steer anyone
 * with). A block handed over by the fd store whose copies are not its
 * configuration's was not written for that configuration as far as
 * anything in it can tell: its slots, buckets and counters cannot be
 * read as this configuration's, and no word says what they should be.
 * Such a block is reset (X_state_init: a fresh breaker, empty pool and
 * window; permits held in it are released by CAS into a free slot and
 * change nothing), counted, and the daemon makes it an event. Every other
 * bad word, in any component, is repairable alone and is left to the
 * tick's checks, run right after (resil_policy_maintain). The counters,
 * the limiter and the retry budget keep no layout copies: never reset.
 */
static uint32_t adopt_block(struct resil_ctx *c, const struct resil_rec *rec, uint64_t base,
			    int64_t now)
{
	uint32_t n = 0;

	resil_comp_foreach (op) {
		void *b;

		if (!(*op)->decision || !(*op)->layout_ok || !resil_has(rec, (*op)->id))
			continue;
		b = blk(c->seg, rec, base, (*op)->id);
		if (!(*op)->layout_ok(&rec->conf, b)) {
			/* a component's init takes a zeroed block (the components
			 * write only what is not zero) */
			memset(b, 0, (*op)->state_size(&rec->conf));
			(*op)->state_init(b, &rec->conf, now);
			n++;
		}
	}
	return n;
}

void resil_policy_adopt(struct resil_ctx *c, const struct resil_rec *rec)
{
	int64_t now = resil_ctx_now(c);

	c->rec = rec;
	c->resets += adopt_block(c, rec, rec->state_off, now);
	/* process scope: every row's copy (a row that is free now may be
	 * claimed before the next tick) */
	for (uint32_t i = 0; rec->proc_stride && i < c->seg->geo.client_cap; i++)
		c->resets +=
		    adopt_block(c, rec, rec->proc_off + (uint64_t)i * rec->proc_stride, now);
	resil_policy_maintain(c, rec);
}

static void reclaim_block(struct resil_ctx *c, const struct resil_rec *rec, uint64_t base,
			  uint32_t dead, struct resil_reclaim_counts *counts)
{
	resil_comp_foreach (op)
		if ((*op)->decision && (*op)->reclaim && resil_has(rec, (*op)->id))
			(*op)->reclaim(c, &rec->conf, blk(c->seg, rec, base, (*op)->id), dead,
				       counts);
}

void resil_policy_reclaim(struct resil_ctx *c, const struct resil_rec *rec, uint32_t dead_client,
			  struct resil_reclaim_counts *counts)
{
	c->rec = rec;
	reclaim_block(c, rec, rec->state_off, dead_client, counts);
	if (rec->proc_stride && dead_client && dead_client <= c->seg->geo.client_cap) {
		/* the dead process's own copy: take back what it held, then
		 * start it fresh for the next process that gets this row */
		uint64_t base = rec->proc_off + (uint64_t)(dead_client - 1) * rec->proc_stride;

		reclaim_block(c, rec, base, dead_client, counts);
		memset(resil_seg_state(c->seg, base), 0, rec->proc_stride);
		init_decisions(c->seg, rec, base, resil_ctx_now(c));
	}
}

/* The permit pools' sweep (bulkhead, adaptive), the bulkhead's waiter
 * claims too when waiters. */
static uint32_t sweep_pools(struct resil_ctx *c, const struct resil_rec *rec, bool waiters,
			    resil_stray_fn stray, void *ctx)
{
	const struct resil_seg *s = c->seg;
	uint32_t n = 0;

	c->rec = rec;
	if (resil_has(rec, RESIL_C_BULKHEAD))
		n += resil_bulkhead_sweep(c, &rec->conf.bulkhead,
					  blk(s, rec, rec->state_off, RESIL_C_BULKHEAD), waiters,
					  stray, ctx);
	if (resil_has(rec, RESIL_C_ADAPTIVE))
		n +=
		    resil_adaptive_sweep(c, &rec->conf.adaptive,
					 blk(s, rec, rec->state_off, RESIL_C_ADAPTIVE), stray, ctx);
	return n;
}

uint32_t resil_policy_sweep(struct resil_ctx *c, const struct resil_rec *rec, resil_stray_fn stray,
			    void *ctx)
{
	const struct resil_seg *s = c->seg;
	uint32_t n = 0;

	c->rec = rec;
	/* probes are swept like permits: a probe held by no live client
	 * would hold HALF_OPEN as long as half_open_max_wait (for good with
	 * 0). The fleet block's; a process-scope copy belongs to one row,
	 * and is started fresh for the row's next process */
	if (resil_has(rec, RESIL_C_BREAKER))
		n += resil_breaker_sweep(c, &rec->conf.breaker,
					 blk(s, rec, rec->state_off, RESIL_C_BREAKER), stray, ctx);
	return n + sweep_pools(c, rec, true, stray, ctx);
}

uint32_t resil_policy_sweep_pools(struct resil_ctx *c, const struct resil_rec *rec,
				  resil_stray_fn stray, void *ctx)
{
	return sweep_pools(c, rec, false, stray, ctx);
}

uint32_t resil_policy_pool_slots(const struct resil_rec *rec)
{
	uint32_t n = 1; /* a policy without pools still costs its visit */

	if (resil_has(rec, RESIL_C_BREAKER)) {
		const struct resil_breaker_conf *b = &rec->conf.breaker;
		uint32_t np =
		    b->half_open_concurrent ? b->half_open_concurrent : b->half_open_calls;

		n += np < RESIL_BK_PROBES_MAX ? np : RESIL_BK_PROBES_MAX;
	}
	if (resil_has(rec, RESIL_C_BULKHEAD))
		n += resil_bulkhead_max_of(&rec->conf.bulkhead);
	if (resil_has(rec, RESIL_C_ADAPTIVE))
		n += resil_adaptive_max(&rec->conf.adaptive);
	return n;
}

void resil_policy_holders(const struct resil_seg *s, const struct resil_rec *rec,
			  resil_holder_fn fn, void *ctx)
{
	if (resil_has(rec, RESIL_C_BULKHEAD))
		resil_bulkhead_holders(&rec->conf.bulkhead,
				       blk(s, rec, rec->state_off, RESIL_C_BULKHEAD), fn, ctx);
	if (resil_has(rec, RESIL_C_ADAPTIVE))
		resil_adaptive_holders(&rec->conf.adaptive,
				       blk(s, rec, rec->state_off, RESIL_C_ADAPTIVE), fn, ctx);
}

void resil_policy_reset_copy(const struct resil_seg *s, const struct resil_rec *rec,
			     uint32_t client_id, int64_t now)
{
	uint64_t base;

	if (!rec->proc_stride || client_id == 0 || client_id > s->geo.client_cap)
		return;
	/* Crash window: none that matters: the row is ours (just claimed),
	 * nobody else decides on this copy; a daemon tick maintaining it
	 * meanwhile works on a zeroed or a fresh copy, both valid. */
	base = rec->proc_off + (uint64_t)(client_id - 1) * rec->proc_stride;
	memset(resil_seg_state(s, base), 0, rec->proc_stride);
	init_decisions(s, rec, base, now);
}

int resil_policy_breaker_state(const struct resil_seg *s, const struct resil_rec *rec)
{
	if (!resil_has(rec, RESIL_C_BREAKER))
		return -ENODATA;
	return resil_breaker_state(resil_comp_state(s, rec, RESIL_C_BREAKER));
}

int resil_policy_breaker_state_of(const struct resil_seg *s, const struct resil_rec *rec,
				  uint32_t client_id)
{
	struct resil_ctx c = {.seg = s, .client_id = client_id};

	if (!resil_has(rec, RESIL_C_BREAKER))
		return -ENODATA;
	return resil_breaker_state(blk(s, rec, decision_base(&c, rec), RESIL_C_BREAKER));
}

int resil_policy_breaker_settle(struct resil_ctx *c, const struct resil_rec *rec)
{
	if (!resil_has(rec, RESIL_C_BREAKER))
		return -ENODATA;
	c->rec = rec;
	return resil_breaker_settle(c, &rec->conf.breaker,
				    blk(c->seg, rec, decision_base(c, rec), RESIL_C_BREAKER));
}

int resil_policy_force(struct resil_ctx *c, const struct resil_rec *rec, int state)
{
	int r;

	if (!resil_has(rec, RESIL_C_BREAKER))
		return -ENODATA;
	c->rec = rec;
	r = resil_breaker_force(c, &rec->conf.breaker,
				resil_comp_state(c->seg, rec, RESIL_C_BREAKER), state);
	/* an operator's force applies to every process's copy */
	for (uint32_t i = 0; r >= 0 && rec->proc_stride && i < c->seg->geo.client_cap; i++)
		r = resil_breaker_force(c, &rec->conf.breaker,
					blk(c->seg, rec,
					    rec->proc_off + (uint64_t)i * rec->proc_stride,
					    RESIL_C_BREAKER),
					state);
	return r;
}

#ifdef RESIL_COMP_HOOKS
/* The hooks of the table's rows that have them, for the policies whose
 * block has the row's component, on the main block (the fleet-wide state:
 * such a row is not a decision component of the layout's prefix). An
 * acquire's hooks run once it is admitted; a release's before the
 * components give back what the permit holds. */
#undef resil_policy_acquire
#undef resil_policy_release
int resil_policy_acquire(struct resil_ctx *c, const struct resil_rec *rec,
			 struct resil_permit_priv *pm, const void *key, size_t key_len)
{
	int v = resil_policy_acquire_core(c, rec, pm, key, key_len);

	resil_comp_foreach (op)
		if (v == 0 && (*op)->acquired && resil_has(rec, (*op)->id))
			(*op)->acquired(c, &rec->conf, resil_comp_state(c->seg, rec, (*op)->id));
	return v;
}

void resil_policy_release(struct resil_ctx *c, const struct resil_rec *rec,
			  struct resil_permit_priv *pm, int outcome)
{
	resil_comp_foreach (op)
		if ((*op)->released && resil_has(rec, (*op)->id))
			(*op)->released(c, &rec->conf, resil_comp_state(c->seg, rec, (*op)->id));
	resil_policy_release_core(c, rec, pm, outcome);
}
#endif

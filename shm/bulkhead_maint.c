/* SPDX-License-Identifier: MIT */
/*
 * bulkhead_maint.c - the bulkhead outside the decision: the block's size,
 * layout, init and carry; the global scope's lease and parking, written
 * by the daemon (daemon/cluster_bulkhead.c); the daemon's maintenance
 * (the geometry words, a full hint a release missed, the waiter count),
 * reclaim of a dead client's slots and sweep of stray ones; the holders
 * for observers.
 *
 * It writes the slots only by CAS (a dead or stray id -> 0, 0 <-> PARKED),
 * the full hint by plain relaxed stores, the lease words last-released
 * (lease_expiry_ns and fallback_until_ns, release: a claim acquires them),
 * and the geometry words plainly. After freeing slots it loads the waiter
 * count seq_cst (the releaser's half of waiting's Dekker pair) and wakes
 * one waiter. Who writes which word is bulkhead.c's top comment; the
 * design is docs/internals/bulkhead.md.
 */
#include <string.h>

#include "bulkhead_priv.h"

/* ---- state ---- */

uint64_t resil_bulkhead_state_size(const struct resil_bulkhead_conf *c)
{
	return sizeof(struct resil_bulkhead_state) + resil_pool_bytes(resil_bulkhead_max_of(c));
}

/* The geometry words, from the configuration (no code reads them: they
 * are for a dump of the segment): the daemon rewrites them at each tick.
 * Stores only when a word differs: the line stays clean and shared
 * otherwise. */
static void layout_repair(struct resil_bulkhead_state *s, const struct resil_bulkhead_conf *c)
{
	uint32_t n = resil_bulkhead_max_of(c), shift = resil_pool_shift(n);

	if (s->nslots != n)
		s->nslots = n;
	if (s->shift != shift)
		s->shift = shift;
	if (s->slots_off != sizeof(*s))
		s->slots_off = sizeof(*s);
}

bool resil_bulkhead_layout_ok(const struct resil_bulkhead_conf *c, const void *st)
{
	const struct resil_bulkhead_state *s = st;
	uint32_t n = resil_bulkhead_max_of(c);

	return s->nslots == n && s->shift == resil_pool_shift(n) && s->slots_off == sizeof(*s);
}

void resil_bulkhead_state_init(void *st, const struct resil_bulkhead_conf *c, int64_t now)
{
	struct resil_bulkhead_state *s = st;

	/* Nobody else sees the block before the record that points at it is
	 * published (release), so plain initialisation is enough. */
	memset(s, 0, resil_bulkhead_state_size(c));
	layout_repair(s, c);
}

bool resil_bulkhead_same_shape(const struct resil_bulkhead_conf *a,
			       const struct resil_bulkhead_conf *b)
{
	/* a fail-fast permit's release does not look for waiters */
	return resil_bulkhead_max_of(a) == resil_bulkhead_max_of(b) &&
	       (a->wait_ns > 0) == (b->wait_ns > 0);
}

void resil_bulkhead_carry(void *nst, const struct resil_bulkhead_conf *nc, const void *ost,
			  const struct resil_bulkhead_conf *oc, int64_t now)
{
	const struct resil_bulkhead_state *o = ost;
	struct resil_bulkhead_state *s = nst;

	/* Permits stay in the block they were granted in (docs/internals/bulkhead.md, "Reshaping").
	 * Only the statistics carry over. */
	st_relaxed(&s->reclaimed, ld_relaxed(&o->reclaimed));
	st_relaxed(&s->repaired, ld_relaxed(&o->repaired));
	st_relaxed(&s->waits, ld_relaxed(&o->waits));
}

uint32_t resil_bulkhead_held(const struct resil_bulkhead_conf *c, const void *st)
{
	struct resil_pool p = conf_pool((struct resil_bulkhead_state *)st, c);

	return resil_pool_claimed(&p);
}

/* ---- global scope: the lease and parking ---- */

uint32_t resil_bulkhead_park(const struct resil_bulkhead_conf *c, void *st, uint32_t target,
			     uint32_t *busy)
{
	struct resil_bulkhead_state *s = st;
	uint32_t n = resil_bulkhead_max_of(c), parked = 0, held = 0;
	/* spread or packed alike (a global pool is spread: conf.c; a move's
	 * bridge parks either, daemon/segmove.c) */
	uint32_t sh = resil_bulkhead_spread(c) ? SPREAD : PACKED;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t v = ld_acquire(scan_slot(s, i, sh));

		parked += v == RESIL_BULKHEAD_PARKED;
		held += v != 0 && v != RESIL_BULKHEAD_PARKED;
	}
	*busy = held;
	if (target == UINT32_MAX)
		return parked; /* a count only */
	if (target > n)
		target = n;
	for (uint32_t i = n; i-- > n - target;) {
		uint32_t exp = 0;

		if (ld_relaxed(scan_slot(s, i, sh)) == 0 &&
		    cas_acq_rel(scan_slot(s, i, sh), &exp, RESIL_BULKHEAD_PARKED))
			parked++;
	}
	for (uint32_t i = 0; i < n - target; i++) {
		uint32_t exp = RESIL_BULKHEAD_PARKED;

		if (ld_relaxed(scan_slot(s, i, sh)) == RESIL_BULKHEAD_PARKED &&
		    cas_acq_rel(scan_slot(s, i, sh), &exp, 0)) {
			parked--;
			if (ld_relaxed(&s->full))
				st_relaxed(&s->full, 0); /* a slot is free now */
		}
	}
	return parked;
}

void resil_bulkhead_lease_set(void *st, int64_t expiry_ns, uint32_t slots, uint32_t fallback_slots)
{
	struct resil_bulkhead_state *s = st;
	uint32_t sure = slots < fallback_slots ? slots : fallback_slots;

	/* a fallback with an end: only what its after tier allows too (the
	 * daemon's own words, set before this call) */
	if (ld_relaxed(&s->fallback_until_ns) && ld_relaxed(&s->after_slots) < sure)
		sure = ld_relaxed(&s->after_slots);
	st_relaxed(&s->lease_slots, slots);
	st_relaxed(&s->fallback_slots, fallback_slots);
	/* release: pairs with global_claim's acquire of it */
	atomic_store_explicit(&s->sure_slots, sure, memory_order_release);
	/* last, release: pairs with global_claim's acquire */
	atomic_store_explicit(&s->lease_expiry_ns, (uint64_t)expiry_ns, memory_order_release);
}

void resil_bulkhead_fallback_end_set(void *st, int64_t until_ns, uint32_t after_slots)
{
	struct resil_bulkhead_state *s = st;

	st_relaxed(&s->after_slots, after_slots);
	/* last, release: pairs with fallback_claim's acquire */
	atomic_store_explicit(&s->fallback_until_ns, (uint64_t)until_ns, memory_order_release);
}

/* ---- maintenance, sweep, reclaim ---- */

void resil_bulkhead_maintain(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool covered = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t v = ld_relaxed(&s->full);

	layout_repair(s, c);
	/* a hint that a release missed: cleared when a slot it covers is
	 * free (SHARED: the shared part's; ALL, or a word no code writes:
	 * any) */
	if (v == RESIL_BULKHEAD_FULL_SHARED)
		covered.n = resil_bulkhead_shared(c, covered.n);
	if (RESIL_UNLIKELY(v) && resil_pool_claimed(&covered) < covered.n) {
		st_relaxed(&s->full, 0);
		faa_relaxed(&s->repaired, 1);
	}
	/* the waiters are counted */
	if (c->wait_ns > 0 && resil_pool_repair(&wp, &s->prev_wexcess))
		faa_relaxed(&s->repaired, 1);
}

uint32_t resil_bulkhead_sweep(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			      bool waiters, resil_stray_fn stray, void *ctx)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool p = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t n = resil_pool_sweep(&p, false, stray, ctx);

	/* waiter claims too: a stray one would keep every release paying a
	 * wake (the count is repaired by maintain, the claim only here) */
	if (waiters && c->wait_ns > 0)
		(void)resil_pool_sweep(&wp, true, stray, ctx);
	if (n) {
		faa_relaxed(&s->reclaimed, n);
		if (ld_relaxed(&s->full))
			st_relaxed(&s->full, 0); /* slots are free now */
		/* after the sweep's seq_cst CASes: the releaser's half of the
		 * Dekker pair ("Waiting") */
		if (c->wait_ns > 0 && seq_ld(&s->nwait) != 0)
			resil_bulkhead_priv_wake_one(s);
	}
	return n;
}

void resil_bulkhead_holders(const struct resil_bulkhead_conf *c, const void *st, resil_holder_fn fn,
			    void *ctx)
{
	struct resil_pool p = conf_pool((struct resil_bulkhead_state *)st, c);

	resil_pool_holders(&p, fn, ctx);
}

void resil_bulkhead_reclaim(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			    uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool p = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t n = resil_pool_reclaim(&p, false, dead_client);
	uint32_t w = c->wait_ns > 0 ? resil_pool_reclaim(&wp, true, dead_client) : 0;

	if (n && ld_relaxed(&s->full))
		st_relaxed(&s->full, 0); /* slots are free now */
	if (n) {
		faa_relaxed(&s->reclaimed, n);
		/* freed permits may let a waiter in (after a seq_cst RMW, the
		 * releaser's half of "Waiting": the slot's CAS) */
		if (c->wait_ns > 0 && seq_ld(&s->nwait) != 0)
			resil_bulkhead_priv_wake_one(s);
	}
	if (counts) {
		counts->permits += n;
		counts->waiters += w;
	}
}

/* SPDX-License-Identifier: MIT */
/*
 * bulkhead.h - bulkhead: crash-exact permits claimed by CAS of the client id, futex waits.
 *
 * The component interface is described in decision.h, the design in
 * docs/internals/bulkhead.md. The permit pool below
 * (resil_pool_*) is shared with the adaptive limit (adaptive.c): the same
 * crash-exact slots against a limit that changes.
 */
#ifndef RESIL_SHM_BULKHEAD_H
#define RESIL_SHM_BULKHEAD_H

#include "decision.h"

/* The claim value of a process without a client row (the table was full,
 * or it never registered). Such permits are counted, never reclaimed:
 * nobody can tell that their holder died. */
#define RESIL_CLIENT_UNREGISTERED 0xffffffffu

/* Largest bulkhead.max / adaptive.max accepted by the parser. */
#define RESIL_POOL_MAX 65536u
/* Pools up to this size give each slot its own 128-byte line (claims by
 * different processes never share a line); larger pools pack the slots. */
#define RESIL_POOL_SPREAD_MAX	1024u
#define RESIL_POOL_SPREAD_SHIFT 5 /* 32 words = 128 bytes */

/* The full hint (state word `full`): 0 none; ALL: the last
 * walk of every slot found them taken; SHARED: the last walk of the slots
 * below resil_bulkhead_shared found them taken (a partition's callers
 * other than critical ones; critical callers walk on). */
#define RESIL_BULKHEAD_FULL_ALL	   1u
#define RESIL_BULKHEAD_FULL_SHARED 2u

/* Callers that may wait at once on one bulkhead; more fail fast. */
#define RESIL_BULKHEAD_WAITERS 64u

/*
 * A bulkhead's slots (bulkhead.c says why and how): no in-flight word; an
 * admission is one CAS on a slot, a release one CAS from the holder's id
 * (and, with bulkhead.wait, one load of the waiter count); a partition
 * (bulkhead.critical) is a bound on the slots a caller may claim. Up to
 * RESIL_POOL_SPREAD_MAX permits the slots are spread one per 128-byte
 * line, above they are packed (resil_pool_shift).
 * Whether callers wait is part of the state's shape: a change publishes
 * a fresh block.
 */
/* A thread that rejects on the full hint walks the slots anyway every
 * this many times per 128 slots (resil_bulkhead_recheck): the repair of a
 * stale hint that needs no release and no daemon. */
#define RESIL_BULKHEAD_RECHECK 16u

/* Every how many rejections on the full hint a thread walks a pool of n
 * slots (1..RESIL_POOL_MAX): RESIL_BULKHEAD_RECHECK per 128 slots,
 * rounded up to a power of two (16 up to 128, 128 from 513 to 1024, 8192
 * above 32768), so that a saturated pool's rejection reads about 8 slots
 * on average at any size. */
static inline uint32_t resil_bulkhead_recheck(uint32_t n)
{
	uint32_t r = RESIL_BULKHEAD_RECHECK;

	for (uint32_t k = 128; k < n; k *= 2)
		r *= 2;
	return r;
}

/*
 * A pool of permits: `count` is the in-flight hint (a fast-reject hint,
 * read as a signed number), `slots` the claims: 0 free, else the holder's
 * client id. Slot i lives at slots[i << shift]. The claims are the truth;
 * the daemon recomputes the hint from them (resil_pool_repair).
 */
struct resil_pool {
	ra32 *count;
	ra32 *slots;
	uint32_t n;
	uint32_t shift;
};

/* Claim a permit against limit: slot + 1, or 0 when full. *inflight gets
 * the hint value including this claim (0 if rejected). Never a syscall. */
uint32_t resil_pool_claim(const struct resil_pool *p, uint32_t limit, uint32_t id,
			  uint32_t *inflight);
/* Give back the permit idx (slot + 1) returned by resil_pool_claim for
 * id: a CAS id -> 0, so a slot reclaimed meanwhile (and perhaps claimed
 * by another client) is left alone. true: it was ours and is free now. */
bool resil_pool_free(const struct resil_pool *p, uint32_t idx, uint32_t id);
/* Free every slot held by id (and its hint unit with each when counted);
 * returns how many. Daemon side. */
uint32_t resil_pool_reclaim(const struct resil_pool *p, bool counted, uint32_t id);
/* Claimed slots right now (a scan). */
uint32_t resil_pool_claimed(const struct resil_pool *p);
/* Free every slot whose id stray() calls a stray claim (CAS id -> 0, and
 * the hint unit with it when counted); returns how many. Daemon side. */
uint32_t resil_pool_sweep(const struct resil_pool *p, bool counted, resil_stray_fn stray,
			  void *ctx);
/* Each claimed slot's id, in slot order (observers: who holds what). */
void resil_pool_holders(const struct resil_pool *p, resil_holder_fn fn, void *ctx);
/* Daemon tick: correct the hint by the part of its excess over the claims
 * that persisted since the previous tick (*prev_excess: daemon-private).
 * Returns the correction applied (0: none). */
int32_t resil_pool_repair(const struct resil_pool *p, int32_t *prev_excess);
/* Slot stride (log2 of words) for a pool of n slots. */
static inline uint32_t resil_pool_shift(uint32_t n)
{
	return n <= RESIL_POOL_SPREAD_MAX ? RESIL_POOL_SPREAD_SHIFT : 0;
}
static inline uint64_t resil_pool_bytes(uint32_t n)
{
	return resil_align_up((uint64_t)n * 4u << resil_pool_shift(n), RESIL_HOT_ALIGN);
}

/* bulkhead.max as the state sees it: 1..RESIL_POOL_MAX. */
static inline uint32_t resil_bulkhead_max_of(const struct resil_bulkhead_conf *c)
{
	if (c->max == 0)
		return 1;
	return c->max > RESIL_POOL_MAX ? RESIL_POOL_MAX : c->max;
}

/* Whether the slots are spread one per line (bulkhead.max <= 1024): the
 * lean paths' scan functions below and the global scope take only such
 * pools. c->max, not resil_bulkhead_max_of: the same answer (max 0 is 1
 * slot) for one compare less on the hot path. */
static inline bool resil_bulkhead_spread(const struct resil_bulkhead_conf *c)
{
	return c->max <= RESIL_POOL_SPREAD_MAX;
}

/* The permits of a pool of n that callers other than RESIL_PRIO_CRITICAL
 * may hold: n less bulkhead.critical's share of it: the slots below it
 * (the shared part); critical callers claim any. */
static inline uint32_t resil_bulkhead_shared(const struct resil_bulkhead_conf *c, uint32_t n)
{
	if (RESIL_LIKELY(c->critical_bp == 0))
		return n; /* no partition: no multiply and divide */
	return n - (uint32_t)((uint64_t)n * c->critical_bp / 10000u);
}

/* A fail-fast bulkhead: no wait, no partition, slots spread. Its
 * decisions need nothing but the slots (the lean paths' claim of the
 * last slot, stacks, global scope). */
static inline bool resil_bulkhead_fail_fast(const struct resil_bulkhead_conf *c)
{
	return c->wait_ns == 0 && c->critical_bp == 0 && resil_bulkhead_spread(c);
}

/*
 * State block. Lines:
 *   0  full, the read-mostly "every slot taken" (or "every slot of the
 *      shared part") hint, set by a walk that found no slot, cleared by
 *      releasers;
 *   1  waiting (bulkhead.wait > 0): wake_seq (futex word:
 *      releasers bump it and wake one, only when nwait != 0), nwait
 *      (waiters' hint, the count word of the waiter pool), read by every
 *      releaser, written by waiters;
 *   2  geometry (written at init before publication, rewritten from the
 *      configuration by the daemon's tick; for dumps: every reader in the
 *      code takes the geometry from the configuration) and
 *      daemon-private repair memory;
 *   3  the waiter slots (claims of client ids, like permits);
 *   4+ the permit slots (resil_pool_shift: one per 128-byte line up to
 *      RESIL_POOL_SPREAD_MAX, packed above).
 */
struct resil_bulkhead_state {
	alignas(RESIL_HOT_ALIGN) ra32 full; /* RESIL_BULKHEAD_FULL_* (bulkhead.c) */

	alignas(RESIL_HOT_ALIGN) ra32 wake_seq;
	ra32 nwait;

	alignas(RESIL_HOT_ALIGN) uint32_t nslots; /* = bulkhead.max at init */
	uint32_t shift;
	uint32_t slots_off;	 /* from the start of this block */
	int32_t prev_excess;	 /* daemon only: hint excess seen at the last tick */
	int32_t prev_wexcess;	 /* same for nwait */
	RESIL_A8 ra64 reclaimed; /* permits taken back from dead clients (daemon) */
	RESIL_A8 ra64 repaired;	 /* hint corrections applied (daemon) */
	RESIL_A8 ra64 waits;	 /* waits entered (waiters) */
	/* policy.scope = global (bulkhead.c, "Global scope"): the daemon only */
	RESIL_A8 ra64 lease_expiry_ns; /* CLOCK_MONOTONIC end of the lease; 0: none */
	ra32 fallback_slots;	       /* past it: claims only below this slot */
	ra32 lease_slots;	       /* under it: claims only below this slot */
	ra32 sure_slots;	       /* min of the two: claimed without the clock */
	RESIL_A8 ra64 fallback_until_ns; /* the fallback's end (0: none); past it, after_slots */
	ra32 after_slots;		 /* past fallback_until_ns: claims only below this slot */
	ra32 fleet_hosts;		 /* the fleet's size the daemon last learned (its own) */

	alignas(RESIL_HOT_ALIGN) ra32 wslots[RESIL_BULKHEAD_WAITERS];
};
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, full) == 0, "bulkhead full hint");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, wake_seq) == 128, "bulkhead line 1");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, nslots) == 256, "bulkhead line 2");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, reclaimed) == 280, "bulkhead stats");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, lease_expiry_ns) == 304,
		    "bulkhead lease");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, fallback_slots) == 312,
		    "bulkhead fallback");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, lease_slots) == 316,
		    "bulkhead lease slots");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, sure_slots) == 320,
		    "bulkhead sure slots");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, fallback_until_ns) == 328,
		    "bulkhead fallback's end");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, fleet_hosts) == 340,
		    "bulkhead fleet size");
RESIL_STATIC_ASSERT(offsetof(struct resil_bulkhead_state, wslots) == 384, "bulkhead waiters");
RESIL_STATIC_ASSERT(sizeof(struct resil_bulkhead_state) == 640, "bulkhead state size");

/* The permit slots as a pool, by the geometry words of the block (dumps,
 * tests); uncounted: no count word. */
static inline struct resil_pool resil_bulkhead_pool(struct resil_bulkhead_state *s)
{
	struct resil_pool p = {
	    .count = NULL,
	    .slots = (ra32 *)((char *)s + s->slots_off),
	    .n = s->nslots,
	    .shift = s->shift,
	};
	return p;
}

/* Permits held right now (a scan of the claims, not the hint), by the
 * geometry words of the block. */
uint32_t resil_bulkhead_held(const struct resil_bulkhead_conf *c, const void *st);

void resil_bulkhead_conf_defaults(struct resil_bulkhead_conf *c);
/* Its keys (conf.c dispatches bulkhead.*): 0, -ENOENT for a key that is not
 * one of them, -EINVAL with a message in err. */
int resil_bulkhead_conf_set(struct resil_bulkhead_conf *c, const char *key, const char *value,
			    char *err, size_t errlen);
size_t resil_bulkhead_conf_format(const struct resil_bulkhead_conf *c, char *buf, size_t len);

uint64_t resil_bulkhead_state_size(const struct resil_bulkhead_conf *c);
void resil_bulkhead_state_init(void *st, const struct resil_bulkhead_conf *c, int64_t now);
bool resil_bulkhead_same_shape(const struct resil_bulkhead_conf *a,
			       const struct resil_bulkhead_conf *b);
void resil_bulkhead_carry(void *nst, const struct resil_bulkhead_conf *nc, const void *ost,
			  const struct resil_bulkhead_conf *oc, int64_t now);
int resil_bulkhead_acquire(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			   struct resil_permit_priv *pm);
/* What a bulkhead's claim reads of its decision, and all it reads of it
 * (resil_bulkhead_acquire takes them from a whole context): who claims,
 * whether the policy is of global scope, the clock a global bulkhead
 * reads its lease by; now, the decision's reading (0: none), which a wait
 * sets to 0 (time went by: the next reading must be fresh). */
struct resil_bulkhead_claimant {
	uint32_t id; /* resil_client_claim_id, never 0 */
	bool global; /* policy.scope = global */
	const struct resil_clock *clock;
	int64_t now;
};
/* resil_bulkhead_acquire from those alone. */
int resil_bulkhead_claim(struct resil_bulkhead_claimant *w, const struct resil_bulkhead_conf *c,
			 void *st, struct resil_permit_priv *pm);
/* The lean paths' acquires and releases below take a pool whose slots
 * are spread (resil_bulkhead_spread: the bind checks it); the others take
 * any (a lean bulkhead that waits, has a critical share or packed slots
 * decides with resil_bulkhead_acquire and _release). */
int resil_bulkhead_acquire_scan(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
				struct resil_permit_priv *pm);
/* The same for a global bulkhead (policy.scope = global): claims below
 * the host's live lease, or on the fallback past its expiry; x holds the
 * client id and the clock. */
int resil_bulkhead_acquire_scan_global(struct resil_ctx *x, const struct resil_bulkhead_conf *c,
				       void *st, struct resil_permit_priv *pm);
/* A spread pool's host-scope claim of this thread's last slot (one load,
 * one CAS): its index (1-based); RESIL_BULKHEAD_LAST_FULL when it is taken
 * and the full hint says the pool is (a rejection, RESIL_REJECT_FULL);
 * else 0: resil_bulkhead_claim_walk decides (a walk). mine: the calling
 * thread's own entry of the process's count table (count_table.h),
 * counted acquired before the CAS, and released too when the CAS fails;
 * nothing counted when no CAS was tried. n =
 * resil_bulkhead_max_of(c), which a caller may take once from the
 * read-only configuration; the release of such a permit with the same n:
 * resil_bulkhead_release_scan_n. */
#define RESIL_BULKHEAD_LAST_FULL 0xffffffffu
struct resil_count;
uint32_t resil_bulkhead_claim_last(void *st, uint32_t n, uint32_t id, struct resil_count *mine);
/* resil_bulkhead_acquire_scan after resil_bulkhead_claim_last returned 0:
 * a walk, by claim id (resil_client_claim_id, never 0). */
int resil_bulkhead_claim_walk(uint32_t id, const struct resil_bulkhead_conf *c, void *st,
			      struct resil_permit_priv *pm);
/* A fail-fast bulkhead's release (no waiter to look for) with the n of
 * resil_bulkhead_claim_last; false: pm held no slot. */
bool resil_bulkhead_release_scan_n(void *st, uint32_t n, struct resil_permit_priv *pm);
void resil_bulkhead_undo(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			 struct resil_permit_priv *pm);
/* Any pool's release, waking a waiter when c has them; x is not read (a
 * lean release passes NULL). */
void resil_bulkhead_release(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			    struct resil_permit_priv *pm, int outcome);
void resil_bulkhead_maintain(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st);
/* The block's geometry copies are the configuration's (adoption: a block
 * that is not is reset, see policy.c). */
bool resil_bulkhead_layout_ok(const struct resil_bulkhead_conf *c, const void *st);
/* Daemon tick: free the claims stray() names (see resil_pool_sweep), the
 * waiters' too when waiters; returns how many permits. */
uint32_t resil_bulkhead_sweep(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			      bool waiters, resil_stray_fn stray, void *ctx);
/* Each held permit's holder id (observers). */
void resil_bulkhead_holders(const struct resil_bulkhead_conf *c, const void *st, resil_holder_fn fn,
			    void *ctx);
void resil_bulkhead_reclaim(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			    uint32_t dead_client, struct resil_reclaim_counts *counts);

/*
 * policy.scope = global (fail-fast only: conf.c). The daemon parks the
 * slots its host may not use: a claim with this id, which no client
 * releases and no reclaim or sweep frees, so the hot path counts the
 * host's share with the slots it already counts.
 */
#define RESIL_BULKHEAD_PARKED 0xfffffffeu
/* Daemon: park the free slots of the top `target` (a slot held by a call
 * is never taken: it is parked once freed, at a later call) and unpark
 * the parked ones below them; UINT32_MAX: only count. Returns the slots
 * parked now; *busy gets the slots held by calls. */
uint32_t resil_bulkhead_park(const struct resil_bulkhead_conf *c, void *st, uint32_t target,
			     uint32_t *busy);
/* Daemon: publish the lease (after parking for it, and after the
 * fallback's end below): its end, the slots a client may claim under it
 * (below that index) and past it (below that index, parked or free). */
void resil_bulkhead_lease_set(void *st, int64_t expiry_ns, uint32_t slots, uint32_t fallback_slots);
/* Daemon: the fallback's end: past the lease, fallback_slots until
 * until_ns (0: for good), after_slots past it (bulkhead.c, "Global
 * scope"). */
void resil_bulkhead_fallback_end_set(void *st, int64_t until_ns, uint32_t after_slots);

#endif

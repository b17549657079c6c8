/* SPDX-License-Identifier: MIT */
/*
 * limit.h - rate limiter: GCRA in one word, exact sliding window, keyed tables.
 *
 * The component interface is described in decision.h; limit.c's top comment
 * says who writes which word; the design (algorithms, crash windows, error
 * bounds) is docs/internals/limit.md.
 *
 * State block (128-byte aligned, in the state segment):
 *
 *   line 0   word: the hot word every admission CASes (GCRA: the TAT;
 *            sliding: the admission sequence, a hint; sliding-approx
 *            unkeyed: the window word)
 *   line 1   counters written by clients on rare events (keyed table,
 *            heals, and the calls limit.dry_run admits instead of rejecting)
 *   line 2   daemon-written words (maintenance)
 *   then     the sliding ring (count x 8 bytes) or the keyed table
 *            (buckets of 4 x 16-byte entries, one cache line each)
 */
#ifndef RESIL_SHM_LIMIT_H
#define RESIL_SHM_LIMIT_H

#include "decision.h"

/* Most admissions a sliding ring or a sliding-approx counter holds. */
#define RESIL_LIMIT_SLIDING_MAX (1u << 20)
#define RESIL_LIMIT_APPROX_MAX	((1u << 20) - 1)
/* Largest keyed table (keys). */
#define RESIL_LIMIT_KEYS_MAX (1u << 24)
/* The coarse clock is used when the emission interval is at least this
 * many times its resolution (docs/internals/limit.md, "The clock": the
 * worst-case error). */
#define RESIL_LIMIT_COARSE_FACTOR 16

/* Keyed table entry: 16 bytes, 4 per cache-line bucket. */
#define RESIL_LIMIT_FP_EMPTY 0ULL /* never used */
#define RESIL_LIMIT_FP_TOMB  1ULL /* freed; claimable, does not end a lookup */
struct resil_limit_entry {
	ra64 fp; /* SipHash-1-3 fingerprint of the key (>= 2), or EMPTY / TOMB */
	ra64 st; /* gcra: TAT in ns; sliding-approx: window word */
};
#define RESIL_LIMIT_BUCKET 4

struct resil_limit_state {
	/* line 0: every admission CASes it (clients) */
	alignas(RESIL_HOT_ALIGN) ra64 word;
	/* line 1: clients, rare (inserts, evictions, full table, heals; under
	 * limit.dry_run every call that would be rejected) */
	alignas(RESIL_HOT_ALIGN) ra64 used; /* keys in the table (entries neither EMPTY nor TOMB) */
	ra64 evictions;			    /* a key replaced to make room for another */
	ra64 full_rejects;		    /* no room: limit.when_full = reject decided */
	ra64 full_admits;		    /* no room: limit.when_full = admit decided */
	ra64 merges;	      /* the same key inserted twice at once, folded into one */
	ra64 heals;	      /* a state further ahead than any writer sets, repaired */
	ra64 full_event_ns;   /* when the last RESIL_EV_KEYS_FULL was pushed (0: never) */
	ra64 dry_run_rejects; /* limit.dry_run: calls admitted that would have been rejected */
	ra64 empty_keys;      /* keyed: calls with an empty key (limit.empty_key decided) */
	/* line 2: daemon only (maintenance) */
	alignas(RESIL_HOT_ALIGN) ra64 swept; /* idle keys freed */
	ra64 repairs;			     /* `used` recounted after a writer died mid-insert */
	ra64 ticks;
	/* policy.scope = global (daemon/cluster.c writes, every client of a
	 * global policy reads on each decision; docs/internals/limit.md,
	 * "Global scope") */
	ra64 lease_ns;	      /* emission interval of the host's share; 0: no share */
	ra64 lease_expiry_ns; /* CLOCK_MONOTONIC end of the lease; 0: none yet */
	ra64 fallback_ns;     /* past expiry: 0 the configured rate, -1 reject, else T */
	ra64 fallback_until_ns; /* and only until then (0: no end); past it, after_ns */
	ra64 after_ns;		/* past fallback_until_ns: as fallback_ns (0: reject) */
	ra64 fleet_hosts;	/* the fleet's size the daemon last learned (its own word) */
	alignas(RESIL_HOT_ALIGN) uint8_t data[]; /* ring or table */
};
RESIL_STATIC_ASSERT(sizeof(struct resil_limit_entry) == 16, "limit entry size");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, word) == 0, "limit word");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, used) == 128, "limit line 1");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, dry_run_rejects) == 184, "limit dry run");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, empty_keys) == 192, "limit empty keys");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, swept) == 256, "limit line 2");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, lease_ns) == 280, "limit lease");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, fallback_ns) == 296, "limit fallback");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, fallback_until_ns) == 304,
		    "limit fallback's end");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, fleet_hosts) == 320, "limit fleet size");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_state, data) == 384, "limit data");
RESIL_STATIC_ASSERT(sizeof(struct resil_limit_state) == 384, "limit state size");

/* fallback_ns: reject every call past the lease's expiry */
#define RESIL_LIMIT_FALLBACK_REJECT (-1)

/*
 * policy.scope = global: publish the host's lease (daemon only). lease_ns:
 * emission interval of the share (0: no share), expiry_ns: CLOCK_MONOTONIC
 * end of the lease, fallback_ns: what clients apply past it (0: the
 * configured rate, RESIL_LIMIT_FALLBACK_REJECT, else an emission interval).
 */
void resil_limit_lease_set(void *st, int64_t lease_ns, int64_t expiry_ns, int64_t fallback_ns);
/* The fallback's end (daemon only): past the lease's expiry, fallback_ns
 * applies until until_ns (0: for good), after_ns past it (an emission
 * interval, 0 or RESIL_LIMIT_FALLBACK_REJECT: reject). A daemon that dies
 * leaves its clients on these: its host's share of the fleet's rate is
 * held in Redis for no longer (daemon/cluster.c, "The fallback"). */
void resil_limit_fallback_end_set(void *st, int64_t until_ns, int64_t after_ns);
/* What a client of a global limiter applies at `now`: the emission
 * interval (0: reject); *leased tells whether a live lease decided it. */
int64_t resil_limit_lease_T(const struct resil_limit_conf *c, const void *st, int64_t now,
			    bool *leased);

/* For `resilctl show`. */
struct resil_limit_info {
	uint32_t algorithm; /* enum resil_limit_algo, as it is applied */
	uint32_t keyed;
	uint64_t size;	   /* keys in use (counted in the table) */
	uint64_t capacity; /* limit.keys */
	uint64_t evictions;
	uint64_t full_rejects;
	uint64_t full_admits;
	uint64_t merges;
	uint64_t dry_run_rejects; /* limit.dry_run: admitted, would have been rejected */
	uint64_t empty_keys;	  /* keyed: calls with an empty key */
	int64_t word; /* unkeyed: the TAT (gcra), admissions so far (sliding), window word */
};

uint64_t resil_limit_state_size(const struct resil_limit_conf *c);
void resil_limit_state_init(void *st, const struct resil_limit_conf *c, int64_t now);
/* The same on a block known to be zero: writes no word that is zero, so
 * a keyed table's pages stay untouched (the component table's init of a
 * new block, policy.c). */
void resil_limit_state_init_zeroed(void *st, const struct resil_limit_conf *c, int64_t now);
bool resil_limit_same_shape(const struct resil_limit_conf *a, const struct resil_limit_conf *b);
void resil_limit_carry(void *nst, const struct resil_limit_conf *nc, const void *ost,
		       const struct resil_limit_conf *oc, int64_t now);
int resil_limit_acquire(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			struct resil_permit_priv *pm);
/* An unkeyed GCRA of host scope (resil_limit_lean_gcra: the client's lean
 * limiter) decided from the clock alone, as resil_limit_acquire decides it;
 * *now: the precise reading taken, 0 after a coarse one. */
bool resil_limit_lean_gcra(const struct resil_limit_conf *c, uint32_t scope);
int resil_limit_acquire_gcra(const struct resil_clock *clk, const struct resil_limit_conf *c,
			     void *st, struct resil_permit_priv *pm, int64_t *now);
/* A keyed limiter (resil_limit_lean_keyed) decided without the context
 * when the key is found where most keys are (limit.c); RESIL_LIMIT_ASK:
 * not found there, nothing written, ask resil_limit_acquire. */
#define RESIL_LIMIT_ASK (1 << 16)
bool resil_limit_lean_keyed(const struct resil_limit_conf *c);
/* The seeds a key is hashed with in seg's tables (fixed for its life). */
void resil_limit_key_seeds(const struct resil_seg *seg, uint64_t k[2]);
int resil_limit_acquire_keyed(const struct resil_clock *clk, const struct resil_limit_conf *c,
			      void *st, const uint64_t k[2], const void *key, size_t len,
			      struct resil_permit_priv *pm, int64_t *now);
void resil_limit_undo(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
		      struct resil_permit_priv *pm);
void resil_limit_release(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 struct resil_permit_priv *pm, int outcome);
void resil_limit_maintain(struct resil_ctx *x, const struct resil_limit_conf *c, void *st);
void resil_limit_reclaim(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 uint32_t dead_client, struct resil_reclaim_counts *counts);

/* Configuration: defaults, cross-key check, "limit.x = y\n" lines
 * (snprintf semantics: the length it needed, NUL-terminated if len > 0). */
void resil_limit_conf_defaults(struct resil_limit_conf *c);
/* Its keys (conf.c dispatches limit.*): 0, -ENOENT for a key that is not
 * one of them, -EINVAL with a message in err. */
int resil_limit_conf_set(struct resil_limit_conf *c, const char *key, const char *value, char *err,
			 size_t errlen);
int resil_limit_conf_check(const struct resil_limit_conf *c, char *err, size_t errlen);
size_t resil_limit_conf_format(const struct resil_limit_conf *c, char *buf, size_t len);

/* The algorithm a configuration runs: a keyed `sliding` runs sliding-approx. */
static inline unsigned resil_limit_algo(const struct resil_limit_conf *c)
{
	if (c->keys && c->algorithm == RESIL_LIMIT_SLIDING)
		return RESIL_LIMIT_SLIDING_APPROX;
	return c->algorithm;
}

/*
 * An admitted permit that was reserved (limit.wait): how long the caller
 * sleeps before the call, in ns; 0 when it may go at once. The library's
 * acquire sleeps (clock_nanosleep) for it; the value is also pm->wait_ns
 * with RESIL_PERMIT_LIMIT_WAIT set.
 */
static inline int64_t resil_limit_reserved_wait(const struct resil_permit_priv *pm)
{
	return (pm->flags & RESIL_PERMIT_LIMIT_WAIT) ? pm->wait_ns : 0;
}

void resil_limit_info(const struct resil_limit_conf *c, const void *st,
		      struct resil_limit_info *out);
/* limit.dry_run's count alone (resil_limit_info's dry_run_rejects), without
 * the pass over a keyed table: for metrics, on every scrape. */
uint64_t resil_limit_dry_run_rejects(const void *st);
/*
 * One key's state (key NULL: the unkeyed limiter, or the word a keyed
 * limiter uses for calls without a key). tat_or_count: gcra the
 * TAT, sliding-approx the weighted count in the window, sliding the
 * admissions in the last period; wait_ns: how long until one permit would
 * be admitted (0: now). 0, -ENOENT (the key holds no state: fresh).
 */
int resil_limit_key_info(struct resil_ctx *x, const struct resil_limit_conf *c, const void *st,
			 const void *key, size_t len, int64_t *tat_or_count, int64_t *wait_ns);
/* The entry of the key whose fingerprint is fp: found within the bounded
 * walk the daemon's maintenance uses, else, when insert, added as a
 * client's first call adds it (its state 0). -1: absent, no room, or a
 * chain too long to walk. (limit_global.c charges the fleet's admissions
 * through it.) */
int64_t resil_limit_key_entry(const struct resil_limit_conf *c, void *st, uint64_t fp, int64_t now,
			      bool insert);

/* limit.global (limit_global.h): a keyed table carries, after its
 * entries, one 32-bit counter per entry, the admissions made through it
 * since the daemon last read it. */
/* Bytes of counters after a keyed table (0 unless limit.global). */
static inline uint64_t resil_limit_global_counts_size(const struct resil_limit_conf *c)
{
	uint64_t n = (uint64_t)(c->keys / 2 ? c->keys / 2 : 1) * RESIL_LIMIT_BUCKET;

	if (!c->keys || !c->global)
		return 0;
	return resil_align_up(n * sizeof(ra32), RESIL_HOT_ALIGN);
}

/* The counters: entry i's is [i]. */
static inline ra32 *resil_limit_global_counts(const struct resil_limit_conf *c, void *st)
{
	struct resil_limit_state *s = st;
	uint64_t n = (uint64_t)(c->keys / 2 ? c->keys / 2 : 1) * RESIL_LIMIT_BUCKET;

	return (ra32 *)(void *)(s->data + n * sizeof(struct resil_limit_entry));
}

/*
 * Permits the unkeyed word (an unkeyed limiter, or a keyed one's calls
 * without a key) would admit at once now, without limit.wait: gcra
 * (tau - max(0, TAT - now)) / T, sliding and sliding-approx count minus
 * the (weighted) admissions in the window; never negative. -EINVAL for a
 * configuration without a rate.
 */
int64_t resil_limit_available(struct resil_ctx *x, const struct resil_limit_conf *c,
			      const void *st);

#endif

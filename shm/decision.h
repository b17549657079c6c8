/* SPDX-License-Identifier: MIT */
/*
 * decision.h - what every component of a policy takes: the context of one
 * decision, the permit it fills, what a reclaim counts, and the interface
 * each component follows. policy.h (policy.c) composes the components
 * over it.
 *
 * Component interface (breaker.h, limit.h, bulkhead.h, adaptive.h, shed.h,
 * budget.h, stats.h): each has
 *   size_t X_state_size(const conf *)      bytes of state in the arena
 *   void   X_state_init(void *st, const conf *, int64_t now)
 *   bool   X_same_shape(const conf *a, const conf *b)  state reusable as is
 *   void   X_carry(void *nst, const conf *nc, const void *ost, const conf *oc, int64_t now)
 *   int    X_acquire(ctx, const conf *, void *st, permit)  0 or RESIL_REJECT_*
 *   void   X_undo(ctx, const conf *, void *st, permit)     give back what acquire spent
 *   void   X_release(ctx, const conf *, void *st, permit, outcome)
 *   void   X_maintain(ctx, const conf *, void *st)         daemon tick, idle policies
 *   void   X_reclaim(ctx, const conf *, void *st, uint32_t dead_client_id, counts)
 * State blocks are 128-byte aligned; their hot words follow the cache-line
 * rules of seg.h. Everything but acquire, undo and release reaches the
 * components through the component table (comp.h), one row each.
 */
#ifndef RESIL_SHM_DECISION_H
#define RESIL_SHM_DECISION_H

#include "seg.h"

/* What one process brings to a decision. */
struct resil_count;

struct resil_ctx {
	const struct resil_seg *seg;
	const struct resil_rec *rec; /* the policy being decided (slot, gen, name) */
	const void *key;	     /* keyed limiter: the key of this call */
	size_t key_len;
	struct resil_clock clock;
	struct resil_random random;
	uint32_t client_id; /* resil_client_id(row); 0 = unregistered */
	uint32_t pid;
	int64_t now; /* cached reading, 0 = not read yet */
	/* The breaker window's offset in the block (resil_breaker_win_off),
	 * computed from the read-only configuration when the caller bound it:
	 * used only when bk_conf is the configuration decided with (NULL:
	 * none, the breaker computes it). */
	const struct resil_breaker_conf *bk_conf;
	uint32_t bk_off;
	/* State words found out of range and repaired (the daemon's checks
	 * in maintain; clients only heal what they must to go on): a count
	 * and the last word (enum resil_word), for the caller to count and
	 * report. */
	uint32_t repairs;
	uint32_t repair_word;
	/* Component blocks found beyond repair and reset (adoption). */
	uint32_t resets;
	/* The deciding process's count table, rec's slot's block
	 * (shm/count_table.h): resil_policy_acquire and _release count the
	 * pools' claims and releases there; NULL: none (resild). */
	struct resil_count *counts;
};

static inline void resil_repaired(struct resil_ctx *c, uint32_t word)
{
	c->repairs++;
	c->repair_word = word;
}

static inline int64_t resil_ctx_now(struct resil_ctx *c)
{
	if (c->now == 0)
		c->now = resil_clock_now(&c->clock);
	return c->now;
}

/* The inside of resil_permit_t (64 bytes, on the caller's stack). */
struct resil_permit_priv {
	uint32_t flags;		   /* RESIL_PERMIT_* */
	uint32_t holder;	   /* the client id the bulkhead/adaptive slots were claimed
				    * with: a release is a CAS from it (0: none) */
	uint32_t breaker_gen;	   /* breaker generation at grant */
	uint32_t bulkhead_idx;	   /* claimed permit slot + 1 (0: none) */
	uint32_t adaptive_idx;	   /* claimed adaptive slot + 1 */
	uint32_t probe_idx;	   /* claimed half-open probe slot + 1 */
	RESIL_A8 int64_t start_ns; /* 0: not measured */
	RESIL_A8 int64_t wait_ns;  /* after RESIL_REJECT_LIMITED: Retry-After */
	uint32_t key_idx;	   /* keyed limiter entry + 1 */
	uint32_t limit_permits;
	uint32_t priority;
	uint32_t where;		     /* libresil: the mapping and record it was granted under */
	RESIL_A8 uint64_t limit_tat; /* undo information for the limiter */
};
RESIL_STATIC_ASSERT(sizeof(struct resil_permit_priv) == 64, "permit size");

#define RESIL_PERMIT_HELD	0x1u /* between a successful acquire and release */
#define RESIL_PERMIT_PROBE	0x2u /* a half-open probe */
#define RESIL_PERMIT_BULKHEAD	0x4u
#define RESIL_PERMIT_ADAPTIVE	0x8u
#define RESIL_PERMIT_LIMIT	0x10u
#define RESIL_PERMIT_TIMED	0x20u /* start_ns is a clock reading */
#define RESIL_PERMIT_SHED	0x40u /* counted as a request by the shedder */
#define RESIL_PERMIT_LIMIT_WAIT 0x80u /* reserved (limit.wait): sleep wait_ns before the call */

/* What a reclaim gave back (each component's X_reclaim adds its part). */
struct resil_reclaim_counts {
	uint32_t permits;
	uint32_t probes;
	uint32_t waiters;
	uint32_t repaired; /* counters repaired from window contents */
};

/* Stray claims: is id (a permit slot's word, not 0) held by nobody the
 * caller knows alive? The daemon's answer, from its client registry. */
typedef bool (*resil_stray_fn)(uint32_t id, void *ctx);
/* A permit slot's holder id, for observers. */
typedef void (*resil_holder_fn)(uint32_t id, void *ctx);

/* A component's block in rec's state, and whether rec has that component. */
static inline void *resil_comp_state(const struct resil_seg *s, const struct resil_rec *rec,
				     enum resil_comp comp)
{
	return (char *)s->st + rec->state_off + rec->comp_off[comp];
}
static inline bool resil_has(const struct resil_rec *rec, enum resil_comp comp)
{
	return rec->components & (1u << comp);
}

#endif

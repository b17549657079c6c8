/* SPDX-License-Identifier: MIT */
/*
 * policy.h - one policy = the components named in its configuration,
 * applied in one acquire and one release.
 *
 * Order of acquire (nothing is spent when a later component rejects):
 *   1. breaker check, read-only: OPEN (wait not over) or FORCED_OPEN rejects;
 *   2. shedder: a random number against the published probability;
 *   3. what spends: rate-limit token, bulkhead permit, adaptive permit,
 *      breaker probe (HALF_OPEN);
 *   each spent item is given back if a later one rejects.
 * Release reports the outcome to the breaker, frees permits, feeds the
 * adaptive limit and the shedder, and counts.
 *
 * The clock is read at most once before and once after a call, and only if
 * some component needs a time (resil_ctx_now caches the reading).
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
#ifndef RESIL_SHM_POLICY_H
#define RESIL_SHM_POLICY_H

#include "seg.h"

/* What one process brings to a decision. */
struct resil_ctx {
	const struct resil_seg *seg;
	const struct resil_rec *rec; /* the policy being decided (slot, gen, name) */
	const void *key;             /* keyed limiter: the key of this call */
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
	uint32_t flags;       /* RESIL_PERMIT_* */
	uint32_t holder;      /* the client id the bulkhead/adaptive slots were claimed
			       * with: a release is a CAS from it (0: none) */
	uint32_t breaker_gen; /* breaker generation at grant */
	uint32_t bulkhead_idx; /* claimed permit slot + 1 (0: none) */
	uint32_t adaptive_idx; /* claimed adaptive slot + 1 */
	uint32_t probe_idx;    /* claimed half-open probe slot + 1 */
	RESIL_A8 int64_t start_ns; /* 0: not measured */
	RESIL_A8 int64_t wait_ns;  /* after RESIL_REJECT_LIMITED: Retry-After */
	uint32_t key_idx;          /* keyed limiter entry + 1 */
	uint32_t limit_permits;
	uint32_t priority;
	uint32_t where;		     /* libresil: the mapping and record it was granted under */
	RESIL_A8 uint64_t limit_tat; /* undo information for the limiter */
};
RESIL_STATIC_ASSERT(sizeof(struct resil_permit_priv) == 64, "permit size");

#define RESIL_PERMIT_HELD     0x1u  /* between a successful acquire and release */
#define RESIL_PERMIT_PROBE    0x2u  /* a half-open probe */
#define RESIL_PERMIT_BULKHEAD 0x4u
#define RESIL_PERMIT_ADAPTIVE 0x8u
#define RESIL_PERMIT_LIMIT    0x10u
#define RESIL_PERMIT_TIMED    0x20u /* start_ns is a clock reading */
#define RESIL_PERMIT_SHED     0x40u /* counted as a request by the shedder */
#define RESIL_PERMIT_LIMIT_WAIT 0x80u /* reserved (limit.wait): sleep wait_ns before the call */

/* Composite operations (policy.c). rec and its state block must be current. */
int resil_policy_acquire(struct resil_ctx *c, const struct resil_rec *rec,
			 struct resil_permit_priv *pm, const void *key, size_t key_len);
void resil_policy_release(struct resil_ctx *c, const struct resil_rec *rec,
			  struct resil_permit_priv *pm, int outcome);
/* State block: size, init, same shape, carry over (used by resil_seg_define). */
uint64_t resil_policy_state_layout(const struct resil_conf *conf, uint32_t comp_off[RESIL_C_MAX],
				   uint32_t *components);
/* policy.scope = process: the bytes of one process's copy (the decision
 * components, the block's prefix; RESIL_HOT_ALIGN when there are none);
 * 0 for any other scope. */
uint64_t resil_policy_copy_size(const struct resil_conf *conf);
/* rec's components, offsets, size and copy stride are the ones this build
 * computes for rec->conf, or the ones builds before the prefix copies did
 * (counters first, copies of the whole block). */
bool resil_policy_layout_ok(const struct resil_rec *rec);
void resil_policy_state_init(const struct resil_seg *s, struct resil_rec *rec, int64_t now);
bool resil_policy_same_shape(const struct resil_conf *a, const struct resil_conf *b);
void resil_policy_carry(const struct resil_seg *s, struct resil_rec *nrec,
			const struct resil_rec *orec, int64_t now);
/* The same from a record of another segment pair (the daemon moving the
 * policies into segments of new sizes): process-scope copies row by row,
 * up to the smaller client table. */
void resil_policy_carry_from(const struct resil_seg *ns, struct resil_rec *nrec,
			     const struct resil_seg *os, const struct resil_rec *orec, int64_t now);
/* Daemon tick for one policy: the periodic work nobody's request did,
 * and the checks of the state words it acts on (c->repairs). */
void resil_policy_maintain(struct resil_ctx *c, const struct resil_rec *rec);
/* A daemon adopting the segments (fd store): every component block of
 * rec, the main one and every process-scope copy, checked; one whose
 * layout copies are not the configuration's cannot be repaired and is
 * reset to its initial state (c->resets), then the tick's checks repair
 * and count the rest (c->repairs). policy.c says which blocks and why. */
void resil_policy_adopt(struct resil_ctx *c, const struct resil_rec *rec);
/* Give back everything dead_client held in this policy; counts what. */
struct resil_reclaim_counts {
	uint32_t permits;
	uint32_t probes;
	uint32_t waiters;
	uint32_t repaired; /* counters repaired from window contents */
};
void resil_policy_reclaim(struct resil_ctx *c, const struct resil_rec *rec, uint32_t dead_client,
			  struct resil_reclaim_counts *counts);

/* Stray claims: is id (a permit slot's word, not 0) held by nobody the
 * caller knows alive? The daemon's answer, from its client registry. */
typedef bool (*resil_stray_fn)(uint32_t id, void *ctx);
/* A permit slot's holder id, for observers. */
typedef void (*resil_holder_fn)(uint32_t id, void *ctx);
/* Daemon tick: free the bulkhead and adaptive claims (fleet block) whose
 * id stray() says no live client holds; returns how many. */
uint32_t resil_policy_sweep(struct resil_ctx *c, const struct resil_rec *rec, resil_stray_fn stray,
			    void *ctx);
/* Slots resil_policy_sweep visits for rec (the daemon's tick budget). */
uint32_t resil_policy_pool_slots(const struct resil_rec *rec);
/* Each held bulkhead and adaptive permit's holder id (fleet block). */
void resil_policy_holders(const struct resil_seg *s, const struct resil_rec *rec,
			  resil_holder_fn fn, void *ctx);
/* policy.scope = process: start client_id's copy afresh (a row just
 * claimed: the copy a previous process on that row left, e.g. an OPEN
 * breaker, is not the new process's). No-op for fleet scope. */
void resil_policy_reset_copy(const struct resil_seg *s, const struct resil_rec *rec,
			     uint32_t client_id, int64_t now);

/* The breaker's RESIL_STATE_*, -ENODATA when the policy has no breaker. */
int resil_policy_breaker_state(const struct resil_seg *s, const struct resil_rec *rec);
/* The breaker state a given client decides on: its own copy under
 * policy.scope = process, the fleet's otherwise. */
int resil_policy_breaker_state_of(const struct resil_seg *s, const struct resil_rec *rec,
				  uint32_t client_id);
/* The breaker state the process of c decides on, once what its next
 * decision would settle first is settled (resil_breaker_settle): a state
 * read that says what a decision would find. -ENODATA without a breaker. */
int resil_policy_breaker_settle(struct resil_ctx *c, const struct resil_rec *rec);
/* Force a breaker state (RESIL_STATE_* of resil.h; CLOSED = back to normal,
 * fresh). -ENODATA when the policy has no breaker. */
int resil_policy_force(struct resil_ctx *c, const struct resil_rec *rec, int state);

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

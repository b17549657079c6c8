/* SPDX-License-Identifier: MIT */
/*
 * policy.h - one policy = the components named in its configuration,
 * applied in one acquire and one release: policy.c's operations. What a
 * component takes (the decision context, the permit, the component
 * interface) is decision.h, under the components; this header is over
 * them.
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
 */
#ifndef RESIL_SHM_POLICY_H
#define RESIL_SHM_POLICY_H

#include "decision.h"
#include "seg.h"

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
 * computes for rec->conf (an adopted record is checked by it). */
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
/* Give back everything dead_client held in this policy; counts what
 * (struct resil_reclaim_counts, decision.h). */
void resil_policy_reclaim(struct resil_ctx *c, const struct resil_rec *rec, uint32_t dead_client,
			  struct resil_reclaim_counts *counts);

/* Daemon tick: free the bulkhead and adaptive claims (fleet block) whose
 * id stray() says no live client holds; returns how many. */
uint32_t resil_policy_sweep(struct resil_ctx *c, const struct resil_rec *rec, resil_stray_fn stray,
			    void *ctx);
/* resil_policy_sweep of the permits only (the claims resil_policy_holders
 * lists): not the half-open probes, not a bulkhead's waiter claims. */
uint32_t resil_policy_sweep_pools(struct resil_ctx *c, const struct resil_rec *rec,
				  resil_stray_fn stray, void *ctx);
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

#endif

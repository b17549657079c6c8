/* SPDX-License-Identifier: MIT */
/*
 * bulkhead_priv.h - what bulkhead.c (the pool, the slots' scan, waiting,
 * the global claim) and bulkhead_maint.c (layout, lease and parking,
 * maintenance, reclaim, sweep) share: the slots' stride and address, the
 * pool of the configuration, the seq_cst load of the waiter count and the
 * wakeup. Nothing outside the two includes it. Who writes which word is
 * bulkhead.c's top comment; the design is docs/internals/bulkhead.md.
 */
#ifndef RESIL_SHM_BULKHEAD_PRIV_H
#define RESIL_SHM_BULKHEAD_PRIV_H

#include "bulkhead.h"
#include "resil.h"

#define seq_ld(p) atomic_load_explicit((p), memory_order_seq_cst)

/* The slots' stride (log2 of words), a constant in each copy of the
 * always_inline helpers below: the lean paths' scan functions and the
 * global scope see SPREAD only; resil_bulkhead_acquire and _release pick
 * one from the configuration. */
#define SPREAD RESIL_POOL_SPREAD_SHIFT
#define PACKED 0u

static inline ra32 *scan_slot(struct resil_bulkhead_state *s, uint32_t i, uint32_t sh)
{
	return (ra32 *)(s + 1) + ((size_t)i << sh);
}

/* The pool, from the configuration (never from the block's geometry
 * words, which clients can write). Uncounted (no count word): only
 * resil_pool_claimed, _sweep and _reclaim (uncounted) and _holders read
 * the pool. */
static inline struct resil_pool conf_pool(struct resil_bulkhead_state *s,
					  const struct resil_bulkhead_conf *c)
{
	uint32_t n = resil_bulkhead_max_of(c);
	struct resil_pool p = {
	    .count = NULL,
	    .slots = (ra32 *)(s + 1),
	    .n = n,
	    .shift = resil_pool_shift(n),
	};
	return p;
}

/* A wakeup for one waiter (bulkhead.c): after a free that a waiter may
 * have missed, once the waiter count was seen non-zero. */
__attribute__((noinline, cold)) void resil_bulkhead_priv_wake_one(struct resil_bulkhead_state *s);

#endif

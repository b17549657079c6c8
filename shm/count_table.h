/* SPDX-License-Identifier: MIT */
/*
 * count_table.h - a process's count table: the permits it claimed and released
 * in each policy's pools (bulkhead and adaptive limit), which resild
 * compares with the claims that name the process's id in the state
 * segment (daemon/counts.c; the design: docs/trust.md, "What is not
 * covered: claims forged under a live client's id").
 *
 * The table is a memfd the process creates and hands resild over its
 * connection (CountTable, SCM_RIGHTS), sealed against shrinking and
 * growing (F_SEAL_SHRINK | F_SEAL_GROW): slot_cap blocks, one per policy
 * slot, of RESIL_COUNT_STRIPES entries, one per stripe, each on a cache
 * line of its own (threads of one process counting one policy share no
 * line), so a stripe's entry is the slot's block plus a constant: the
 * decision path adds the thread's offset, no multiply. Only the process
 * and resild map it: no other uid can write it. Pages of slots the
 * process never claims in stay holes (a block is 1 KiB).
 *
 * Words: acquired and released of each entry are written by the process
 * only (stripes 1.. by one thread each: a plain add, resil_count_own_add;
 * stripe 0 by the threads without one: atomic adds), read by resild
 * (acquire).
 *   acquired  incremented before each claim's CAS of a slot (a claim
 *             that ends without a slot adds to released too), so a
 *             claim resild sees in a slot is counted here once it
 *             reads this word after the slot;
 *   released  incremented after each release's CAS (or its failure:
 *             resild freed the slot), in release order, so a release
 *             counted here is no longer in its slot.
 * Both only grow: acquired - released read as "released before the
 * slots, acquired after" bounds from above what the process held when
 * resild looked at the slots.
 */
#ifndef RESIL_COUNT_TABLE_H
#define RESIL_COUNT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define RESIL_COUNT_STRIPES 16u

struct resil_count {
	_Alignas(64) ra64 acquired;
	ra64 released;
};

/* n onto a counter of the calling thread's own stripe: no other thread
 * writes it and resild only loads it, so a plain add (on x86-64 one
 * instruction), whose 8-byte aligned store is single-copy atomic. No
 * compiler barrier: a caller that needs one orders it (an atomic CAS
 * after it, or a fence before it). x86-64 keeps stores in order after
 * the release's CAS; elsewhere the store is a release one for that. */
static inline __attribute__((always_inline)) void resil_count_own_add(ra64 *w, uint64_t n)
{
#if defined(__x86_64__)
	__asm__ volatile("addq %1, %0" : "+m"(*(uint64_t *)w) : "er"(n));
#else
	atomic_store_explicit(w, ld_relaxed(w) + n, memory_order_release);
#endif
}

/* The calling thread's stripe, as its entry's offset in a slot's block
 * (stripe x sizeof(struct resil_count)); 0: none of its own, so stripe
 * 0, shared, with atomic adds. Written by its thread only (libresil
 * takes one: client/counts.c). */
extern _Thread_local __attribute__((tls_model("initial-exec"))) uint64_t resil_count_stripe_off;

/* The thread's own entry in a slot's block (off: resil_count_stripe_off,
 * not 0). */
static inline __attribute__((always_inline)) struct resil_count *
resil_count_mine(struct resil_count *block, uint64_t off)
{
	return (struct resil_count *)((char *)block + off);
}

/* n claims about to be tried, counted before their CAS (an acq_rel CAS
 * after it orders it before the slot, for resild's acquire fence after
 * its slot loads). */
static inline __attribute__((always_inline)) void resil_count_acquired(struct resil_count *block,
								       uint64_t n)
{
	uint64_t off = resil_count_stripe_off;

	if (RESIL_LIKELY(off))
		resil_count_own_add(&resil_count_mine(block, off)->acquired, n);
	else
		faa_relaxed(&block->acquired, n);
}

/* n slots released (or claims that ended without one), counted after
 * the release's CAS, which may be a release one only: the compiler keeps
 * the add after it (x86-64 keeps stores in order; the shared stripe's
 * add is a release), so a release resild counts is no longer in its
 * slot. */
static inline __attribute__((always_inline)) void resil_count_released(struct resil_count *block,
								       uint64_t n)
{
	uint64_t off = resil_count_stripe_off;

	atomic_signal_fence(memory_order_seq_cst);
	if (RESIL_LIKELY(off))
		resil_count_own_add(&resil_count_mine(block, off)->released, n);
	else
		atomic_fetch_add_explicit(&block->released, n, memory_order_release);
}

/* The table's size for a config segment of slot_cap policy slots. */
static inline uint64_t resil_count_table_size(uint32_t slot_cap)
{
	return (uint64_t)RESIL_COUNT_STRIPES * slot_cap * sizeof(struct resil_count);
}

/* The entry of policy slot `slot` in stripe `stripe`. */
static inline struct resil_count *resil_count_at(void *table, uint32_t slot_cap, uint32_t stripe,
						 uint32_t slot)
{
	(void)slot_cap;
	return (struct resil_count *)table + (uint64_t)slot * RESIL_COUNT_STRIPES + stripe;
}

#endif

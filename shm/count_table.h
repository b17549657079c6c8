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
 * growing (F_SEAL_SHRINK | F_SEAL_GROW): RESIL_COUNT_STRIPES stripes of
 * slot_cap entries, stripe-major. Only the process and resild map it: no
 * other uid can write it.
 *
 * Words: acquired and released of each entry are written by the process
 * only (one thread a stripe: relaxed load and store; threads sharing a
 * stripe: relaxed fetch_add), read by resild (acquire).
 *   acquired  incremented before each claim's CAS of a slot (a claim
 *             that ends without a slot adds to released too), so a
 *             claim resild sees in a slot is counted here once it
 *             reads this word after the slot;
 *   released  incremented after each release's CAS (release order), so
 *             a release counted here is no longer in its slot.
 * Both only grow: acquired - released read as "released before the
 * slots, acquired after" bounds from above what the process held when
 * resild looked at the slots.
 */
#ifndef RESIL_COUNT_TABLE_H
#define RESIL_COUNT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define RESIL_COUNT_STRIPES 64u

struct resil_count {
	ra64 acquired;
	ra64 released;
};

/* The table's size for a config segment of slot_cap policy slots. */
static inline uint64_t resil_count_table_size(uint32_t slot_cap)
{
	return (uint64_t)RESIL_COUNT_STRIPES * slot_cap * sizeof(struct resil_count);
}

/* The entry of policy slot `slot` in stripe `stripe`. */
static inline struct resil_count *resil_count_at(void *table, uint32_t slot_cap, uint32_t stripe,
						 uint32_t slot)
{
	return (struct resil_count *)table + (uint64_t)stripe * slot_cap + slot;
}

#endif

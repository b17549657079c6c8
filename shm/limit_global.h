/* SPDX-License-Identifier: MIT */
/*
 * limit_global.h - policy.scope = global for keyed limiters: the shm side
 * of the cluster exchange (design: docs/internals/cluster_keyed.md).
 *
 * A global keyed table carries, after its entries, one 32-bit counter
 * per entry: the admissions made through that entry since the daemon
 * last read it. Clients add to it (one relaxed add per admission, only
 * when limit.global); the daemon reads and zeroes it every cluster
 * interval, publishes the counts and charges the other hosts' counts to
 * the keys' TATs. The counters are the limiter's layout
 * (resil_limit_global_counts, limit.h); a key's entry is found or added
 * by limit.c's resil_limit_key_entry.
 */
#ifndef RESIL_SHM_LIMIT_GLOBAL_H
#define RESIL_SHM_LIMIT_GLOBAL_H

#include "limit.h"

/* The daemon, at each exchange: every key admitted since the last call,
 * with its count (read and zeroed). fn gets the key's fingerprint and a
 * count in 1..cap (a larger count, which no client can have made, is cut
 * to cap). Returns how many keys fn got. */
typedef void (*resil_limit_global_fn)(void *arg, uint64_t fp, uint32_t n);
uint64_t resil_limit_global_collect(const struct resil_limit_conf *c, void *st, uint32_t cap,
				    resil_limit_global_fn fn, void *arg);

/* How far a charge moves a TAT past a full bucket (tau + limit.wait): a
 * debt beyond that waits in the daemon (docs/internals/cluster_keyed.md,
 * "The debt"). Half a client's heal slack, so a client's reading stale by
 * less than that never heals a charged TAT. */
#define RESIL_LIMIT_GLOBAL_AHEAD_NS (5 * RESIL_NS_PER_S)

/* n admissions as a debt of TAT: n x T, saturated at
 * resil_limit_global_debt_max (0 for no keyed table). */
int64_t resil_limit_global_debt(const struct resil_limit_conf *c, uint64_t n);
int64_t resil_limit_global_debt_max(const struct resil_limit_conf *c);

/* The daemon: charge debt_ns of TAT (resil_limit_global_debt of the other
 * hosts' admissions, or a debt left by an earlier call) to the key whose
 * fingerprint is fp, inserting it when this host's table lacks it:
 * TAT = max(TAT, now) + debt, up to now + tau + limit.wait +
 * RESIL_LIMIT_GLOBAL_AHEAD_NS; *left_ns gets what did not fit (charge it
 * again later). 0, -EINVAL (not a keyed gcra table, a fingerprint no key
 * has), -ENOSPC (no room for the key: the charge is dropped). */
int resil_limit_global_charge(const struct resil_limit_conf *c, void *st, uint64_t fp,
			      int64_t debt_ns, int64_t now, int64_t *left_ns);

/* Admissions of one collect at most, for a key: what a GCRA with this
 * configuration can admit in span ns from full (burst, the span's
 * permits, the reservations of limit.wait, one more for rounding). */
uint32_t resil_limit_global_cap(const struct resil_limit_conf *c, int64_t span_ns);

#endif

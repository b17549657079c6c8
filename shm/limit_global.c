/* SPDX-License-Identifier: MIT */
/*
 * limit_global.c - policy.scope = global for keyed limiters (per IP, per
 * API key across hosts): the shm side.
 *
 * What. Every host runs the whole per-key GCRA locally (the hot path is
 * the host keyed limiter's), and learns the other hosts' admissions of
 * each key through the daemons' exchange (daemon/cluster_keyed.c): each
 * daemon publishes the keys its clients admitted since the last exchange,
 * with their counts, and charges what the other hosts published to the
 * same keys here: TAT = max(TAT, now) + n * T, as if its own clients had
 * taken those n permits. A charge is not cut where a full bucket is: it
 * moves the TAT up to AHEAD past a full bucket and returns what does not
 * fit (*left_ns), the debt the daemon charges again at its next tick.
 * Entries hold SipHash fingerprints under the segment's hash key, which a
 * cluster's daemon sets from the cluster's name and password: one key has
 * one fingerprint on every host. The design (the charge, the debt, key
 * identity, the bounded errors, the overshoot bound) is
 * docs/internals/cluster_keyed.md.
 *
 * The counters. After the entries of a table with limit.global, one
 * 32-bit counter per entry (laid out by limit.h): a client adds its permits
 * with one relaxed fetch_add after the admission's CAS (keyed_take; the
 * only cost global adds to a keyed admission, behind a test of the
 * configuration word). The daemon takes them with an exchange (relaxed:
 * the counter publishes nothing else; fetch_add and exchange are RMWs on
 * one word, so no admission is counted twice or lost between them), and
 * loads the entry's fingerprint (acquire, as lookups do) to name the key.
 * Clients write the whole segment: a count above what a GCRA can admit
 * between two collects (resil_limit_global_cap) is cut to that, a word
 * that is no fingerprint is skipped, and charges saturate, so nothing a
 * client writes makes the daemon overflow or charge without bound.
 *
 * Who writes what. Counters: clients (fetch_add), the daemon (exchange).
 * Entries: as limit.c says; the daemon's charge is one more CAS writer of
 * a TAT, and its inserts are a client's.
 *
 * Nothing here runs on a client's path but the counter's add.
 */
#include <errno.h>
#include <stdint.h>

#include "limit.h"
#include "limit_global.h"

#define FP_OVF (1ULL << 63) /* limit.c: the chain mark in a bucket's first word */
/* A debt further than this many full buckets (plus limit.wait and the
 * margin) is no fleet's: a count another client of Redis made up */
#define DEBT_ROOMS 256

uint32_t resil_limit_global_cap(const struct resil_limit_conf *c, int64_t span_ns)
{
	uint64_t T = (uint64_t)c->interval_ns, n;

	if (!c->keys || c->interval_ns <= 0)
		return 0;
	if (span_ns < 0)
		span_ns = 0;
	n = (uint64_t)c->burst + 1 + (uint64_t)c->wait_ns / T + (uint64_t)span_ns / T;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint64_t resil_limit_global_collect(const struct resil_limit_conf *c, void *st, uint32_t cap,
				    resil_limit_global_fn fn, void *arg)
{
	struct resil_limit_state *s = st;
	struct resil_limit_entry *t = (struct resil_limit_entry *)(void *)s->data;
	ra32 *cnt;
	uint64_t n, i, keys = 0;

	if (!c->keys || !c->global)
		return 0;
	cnt = resil_limit_global_counts(c, st);
	n = (uint64_t)(c->keys / 2 ? c->keys / 2 : 1) * RESIL_LIMIT_BUCKET;
	for (i = 0; i < n; i++) {
		uint32_t v;
		uint64_t fp;

		if (!ld_relaxed(&cnt[i]))
			continue;
		v = atomic_exchange_explicit(&cnt[i], 0, memory_order_relaxed);
		fp = ld_acquire(&t[i].fp) & ~FP_OVF;
		if (!v || fp < 2)
			continue; /* emptied meanwhile, or no key holds the entry */
		fn(arg, fp, v > cap ? cap : v);
		keys++;
	}
	return keys;
}

int64_t resil_limit_global_debt(const struct resil_limit_conf *c, uint64_t n)
{
	int64_t T = c->interval_ns, most = resil_limit_global_debt_max(c);

	if (!c->keys || T <= 0 || !n)
		return 0;
	return n > (uint64_t)(most / T) ? most : (int64_t)n * T;
}

int64_t resil_limit_global_debt_max(const struct resil_limit_conf *c)
{
	int64_t tau = c->interval_ns * (int64_t)(c->burst ? c->burst : 1);

	return DEBT_ROOMS * (tau + c->wait_ns + RESIL_LIMIT_GLOBAL_AHEAD_NS);
}

int resil_limit_global_charge(const struct resil_limit_conf *c, void *st, uint64_t fp,
			      int64_t debt_ns, int64_t now, int64_t *left_ns)
{
	struct resil_limit_state *s = st;
	struct resil_limit_entry *t = (struct resil_limit_entry *)(void *)s->data;
	int64_t T = c->interval_ns, tau, cap, idx;
	uint64_t v;

	*left_ns = 0;
	if (!c->keys || T <= 0 || resil_limit_algo(c) != RESIL_LIMIT_GCRA || fp < 2 ||
	    (fp & FP_OVF))
		return -EINVAL;
	if (debt_ns <= 0)
		return 0;
	if (debt_ns > resil_limit_global_debt_max(c))
		debt_ns = resil_limit_global_debt_max(c);
	idx = resil_limit_key_entry(c, st, fp, now, true);
	if (idx < 0)
		return -ENOSPC;
	tau = T * (int64_t)(c->burst ? c->burst : 1);
	cap = now + tau + c->wait_ns + RESIL_LIMIT_GLOBAL_AHEAD_NS;
	v = ld_relaxed(&t[idx].st);
	for (;;) {
		int64_t base = (int64_t)v > now ? (int64_t)v : now, room;

		/* past the cap already: a word a client wrote (its heal is
		 * the client's), or this charge's own earlier part; the rest
		 * waits for the next call */
		room = base >= cap ? 0 : cap - base;
		if (room == 0) {
			*left_ns = debt_ns;
			return 0;
		}
		if (cas_relaxed(&t[idx].st, &v, (uint64_t)(base + resil_min64(room, debt_ns)))) {
			*left_ns = debt_ns > room ? debt_ns - room : 0;
			return 0;
		}
	}
}

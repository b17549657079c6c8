/* SPDX-License-Identifier: MIT */
/*
 * stats.h - per-policy counters and an optional latency histogram
 * (component RESIL_C_STATS: every policy has it).
 *
 * Counters are striped by CPU: RESIL_STATS_STRIPES stripes of one 128-byte
 * line each, a stripe holding every counter of the CPUs that map to it
 * (pcpu.h: on hosts of up to 15 CPUs a plain add on the CPU's own stripe
 * in a restartable sequence, else a relaxed fetch_add on cpu % 16). A
 * reader sums the stripes. With `histogram = off` a call costs one such
 * add (the outcome on release, or the verdict on a rejection); with
 * `histogram = on` a timed success or failure adds one to a log-linear
 * bucket and its duration to a per-stripe sum (three adds).
 *
 * Calls = the sum of the outcomes and the rejections.
 */
#ifndef RESIL_SHM_STATS_H
#define RESIL_SHM_STATS_H

#include "decision.h"

enum resil_stat {
	RESIL_STAT_SUCCESS,
	RESIL_STAT_FAILURE,
	RESIL_STAT_IGNORED,
	RESIL_STAT_SLOW, /* counted by resil_stats_released (breaker.slow_call), not by callers */
	RESIL_STAT_REJ_OPEN,
	RESIL_STAT_REJ_FULL,
	RESIL_STAT_REJ_LIMITED,
	RESIL_STAT_REJ_SHED,
	RESIL_STAT_REJ_BUDGET,
	RESIL_STAT_RETRIES,
	RESIL_STAT_GIVEUPS,
	RESIL_STAT_TRANSITIONS,
	RESIL_STAT_EVICTIONS,
	RESIL_STAT__MAX
};

#define RESIL_STATS_STRIPES 16 /* power of two */

/*
 * Histogram: durations in units of 128 ns (u = ns >> 7). u < 8 goes to
 * bucket u (linear, 0..1 us); above, bucket 8 * (k - 2) + the 3 bits below
 * the leading one of u, where k = floor(log2 u). Each power of two has 8
 * sub-buckets, so a bucket is at most 12.5% of its lower bound wide. The
 * last bucket (lower bound 2^36 + 7 * 2^33 ns, about 129 s) takes everything
 * above; up to about 129 s every value has that precision.
 */
#define RESIL_HIST_SHIFT   7
#define RESIL_HIST_SUB	   8
#define RESIL_HIST_BUCKETS 224

/* Bucket of a duration, and the bounds of a bucket: [lo, hi) in ns; the
 * last bucket's hi is INT64_MAX. */
static inline unsigned resil_hist_index(int64_t ns)
{
	uint64_t u = ns > 0 ? (uint64_t)ns >> RESIL_HIST_SHIFT : 0;
	unsigned k, i;

	if (u < RESIL_HIST_SUB)
		return (unsigned)u;
	k = 63u - (unsigned)__builtin_clzll(u);
	i = RESIL_HIST_SUB * (k - 2) + (unsigned)((u >> (k - 3)) & (RESIL_HIST_SUB - 1));
	return i < RESIL_HIST_BUCKETS ? i : RESIL_HIST_BUCKETS - 1;
}
int64_t resil_hist_lower_ns(unsigned bucket);
int64_t resil_hist_upper_ns(unsigned bucket);

/* ---- component interface (decision.h) ---- */

/* Bytes of state: counters always, the histogram if c->histogram. */
uint64_t resil_stats_state_size(const struct resil_conf *c);
void resil_stats_state_init(void *st, const struct resil_conf *c, int64_t now);
/* The state can be reused as is (histogram on/off unchanged). */
bool resil_stats_same_shape(const struct resil_conf *a, const struct resil_conf *b);
/* A new block after a change of shape: counters carry over, and the
 * histogram if both have one. nst is initialized already. */
void resil_stats_carry(void *nst, const struct resil_conf *nc, const void *ost,
		       const struct resil_conf *oc, int64_t now);

/* A rejection: verdict is a RESIL_REJECT_*; anything else is ignored. */
void resil_stats_rejected(struct resil_ctx *x, void *st, int verdict);
/* A release: outcome RESIL_SUCCESS/FAILURE/IGNORED; dur_ns < 0 when the
 * call was not timed. Counts RESIL_STAT_SLOW when the policy has a breaker
 * and dur_ns >= breaker.slow_call; feeds the histogram (successes and
 * failures) when c->histogram. */
void resil_stats_released(struct resil_ctx *x, const struct resil_conf *c, void *st,
			  const struct resil_permit_priv *pm, int outcome, int64_t dur_ns);
/* Give-ups by reason (a RESIL_RSTOP_* of budget.h, < RESIL_GIVEUP_REASONS),
 * besides RESIL_STAT_GIVEUPS: one word each, not striped (rare). */
#define RESIL_GIVEUP_REASONS 8
void resil_stats_giveup(struct resil_ctx *x, void *st, unsigned reason);
uint64_t resil_stats_giveups_by(const void *st, unsigned reason);

/* Daemon tick: checks the p95 cache (stats.c), repairs and counts. */
void resil_stats_maintain(struct resil_ctx *x, const struct resil_conf *c, void *st);

/* Any counter: retries, give-ups, transitions, evictions, budget refusals. */
void resil_stats_add(struct resil_ctx *x, void *st, enum resil_stat which, uint64_t n);

/* ---- readers (resilctl, metrics, the daemon, hedging) ---- */

/* rec's stats state, or NULL when rec has none or its offsets point
 * outside the mapped state segment (the segment is untrusted input). */
void *resil_stats_state_of(const struct resil_seg *s, const struct resil_rec *rec);

/* One counter summed over the stripes. Stripes are read one by one, so a
 * snapshot taken while calls run is not atomic across counters. */
uint64_t resil_stats_read(const void *st, enum resil_stat which);
/* Every counter at once. */
void resil_stats_read_all(const void *st, uint64_t out[RESIL_STAT__MAX]);
/* calls = outcomes + rejections */
uint64_t resil_stats_calls(const uint64_t v[RESIL_STAT__MAX]);

/* The histogram summed over the stripes: counts[RESIL_HIST_BUCKETS], the
 * total count and the sum of durations. -ENODATA without a histogram. */
int resil_stats_hist_read(const void *st, const struct resil_conf *c, uint64_t *counts,
			  uint64_t *count, uint64_t *sum_ns);
/* Quantile q in [0, 1] of the recorded durations: the middle of the bucket
 * that holds it (within half a bucket, 6.25%). -ENODATA without a histogram
 * or without samples, -EINVAL for q outside [0, 1]. */
int resil_stats_percentile_ns(const void *st, const struct resil_conf *c, double q, int64_t *ns);
/* The fleet-wide p95 for hedging, -1 when there is none (no histogram, no
 * samples). Cached in the state and recomputed when the number of calls
 * moved by 1/16 since (or by 16 calls early on): cheap to call per request. */
int64_t resil_stats_p95_ns(const struct resil_seg *s, const struct resil_rec *rec);

/* "success", "failure", ..., NULL outside the enum. */
const char *resil_stat_name(enum resil_stat which);

/* "name value\n" lines for `resilctl show` (calls, each counter, and
 * p50/p95/p99 in ns when there is a histogram); snprintf semantics: the
 * length needed is returned, buf may be NULL when len is 0. */
size_t resil_stats_format(const struct resil_seg *s, const struct resil_rec *rec, char *buf,
			  size_t len);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * stats.c - per-policy counters and latency histogram (RESIL_C_STATS).
 *
 * What: every policy counts its outcomes, rejections, retries, give-ups,
 * transitions and evictions; with `histogram = on` it also keeps a
 * log-linear latency histogram (stats.h) from which p50/p95/p99 are read,
 * and the fleet-wide p95 that hedging waits for.
 *
 * Why striped: every process of the fleet counts into the same policy. One
 * counter line written by every CPU would bounce between caches on every
 * call (BENCHMARKS.md, "Several processes": the fetch_add floor on one
 * shared word against one line each, bench case mp.fetch_add). So each
 * counter exists once per stripe, a stripe is one 128-byte line holding
 * every counter, and a caller writes
 * the stripe of the CPU it runs on. On hosts of up to 15 CPUs a stripe
 * belongs to one CPU and the add is a plain add inside a restartable
 * sequence, no lock prefix (pcpu.h: no locked RMW); the last
 * stripe takes what runs without rseq (a thread, or a whole process: the
 * mode is the host's, so a fleet mixing both stays exact). On larger hosts, a locked
 * fetch_add on the stripe cpu % 16. Exact either way.
 *
 * Layout of the state block (offsets static_asserted below):
 *   stripe[16]      one line each; writers: every client (and the daemon
 *                   for transitions it makes), resil_pcpu_add (a plain
 *                   add on the owner CPU, else fetch_add relaxed); readers:
 *                   observers, relaxed loads summed. Relaxed is enough:
 *                   a counter publishes nothing but itself and fetch_add on
 *                   one word is totally ordered on its own.
 *   p95 cache line  p95_ns, p95_calls: written by whoever recomputes the
 *                   p95 (clients on the hedging path), read relaxed.
 *   hist[16][224]   only with `histogram = on`: per-stripe buckets, 14
 *                   lines per stripe, resil_pcpu_add.
 *
 * Invariants: counters only grow (free-running, compared by difference);
 * sum over stripes = number of events counted. calls = outcomes +
 * rejections.
 *
 * Crash windows: every update is one add on one word, so a process
 * killed between two of them leaves every word whole. A release makes one
 * (the outcome, slow or not, in its own word), or three with a histogram
 * (outcome, bucket, sum): killed in between, the histogram holds one
 * sample less than the outcome counters, or _sum lacks one duration. No
 * repair: the error is one call per crash, and the histogram's _count is
 * the sum of its own buckets, so it stays self-consistent. The p95 cache is two words written
 * separately: a reader may pair a new count with an old value, which only delays the next
 * recomputation.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "resil.h"
#include "stats.h"
#include "pcpu.h"

/*
 * A slow success or failure is counted in one word of its own (w[SLOW_OK],
 * w[SLOW_FAIL]) instead of two (the outcome and SLOW): so every call costs
 * one fetch_add with histograms off. Readers fold them back:
 *   success = w[SUCCESS] + w[SLOW_OK], failure = w[FAILURE] + w[SLOW_FAIL],
 *   slow = w[SLOW] (resil_stats_add) + w[SLOW_OK] + w[SLOW_FAIL].
 */
enum { W_SLOW_OK = RESIL_STAT__MAX, W_SLOW_FAIL, W_HIST_SUM, W__MAX };

struct resil_stats_stripe {
	ra64 w[W__MAX]; /* w[W_HIST_SUM]: sum of the durations in this stripe's buckets */
};

struct resil_stats_state {
	alignas(RESIL_HOT_ALIGN) struct resil_stats_stripe stripe[RESIL_STATS_STRIPES];
	/* line: the p95 cache, written rarely by whoever recomputes it */
	alignas(RESIL_HOT_ALIGN) rai64 p95_ns; /* 0: not computed yet */
	ra64 p95_calls;			       /* timed outcomes when it was computed */
	/* give-ups by reason (RESIL_RSTOP_* of budget.h): rare, so one word
	 * each, not striped; fetch_add relaxed by the giving-up client */
	ra64 giveup_by[RESIL_GIVEUP_REASONS];
	RESIL_A8 uint64_t pad[14 - RESIL_GIVEUP_REASONS];
	/* with a histogram: ra64 hist[RESIL_STATS_STRIPES][RESIL_HIST_BUCKETS] follows */
};

RESIL_STATIC_ASSERT(sizeof(struct resil_stats_stripe) == RESIL_HOT_ALIGN, "one stripe, one line");
RESIL_STATIC_ASSERT(W__MAX == 16, "counters fill a stripe");
RESIL_STATIC_ASSERT(RESIL_GIVEUP_REASONS <= 14, "give-up counters fit the p95 line");
RESIL_STATIC_ASSERT((RESIL_STATS_STRIPES & (RESIL_STATS_STRIPES - 1)) == 0, "stripes pow2");
RESIL_STATIC_ASSERT(offsetof(struct resil_stats_state, stripe) == 0, "stripes first");
RESIL_STATIC_ASSERT(offsetof(struct resil_stats_state, p95_ns) ==
			RESIL_STATS_STRIPES * RESIL_HOT_ALIGN,
		    "p95 line");
RESIL_STATIC_ASSERT(sizeof(struct resil_stats_state) == (RESIL_STATS_STRIPES + 1) * RESIL_HOT_ALIGN,
		    "stats state size");
RESIL_STATIC_ASSERT((RESIL_HIST_BUCKETS * 8) % RESIL_HOT_ALIGN == 0, "hist stripe in lines");
RESIL_STATIC_ASSERT(RESIL_HIST_SUB == 8 && RESIL_HIST_BUCKETS % RESIL_HIST_SUB == 0,
		    "hist geometry");

#define HIST_OFF	  sizeof(struct resil_stats_state)
#define HIST_STRIPE_BYTES ((uint64_t)RESIL_HIST_BUCKETS * sizeof(uint64_t))

static inline ra64 *hist_of(const void *st, unsigned stripe)
{
	return (ra64 *)((char *)st + HIST_OFF + stripe * HIST_STRIPE_BYTES);
}

/* pcpu.h: the words of one counter are its RESIL_STATS_STRIPES stripes. */
RESIL_STATIC_ASSERT(RESIL_STATS_STRIPES == RESIL_PCPU_SPARE + 1, "a stripe per pcpu word");

int resil_pcpu_owned;
int resil_pcpu_spare;
long resil_pcpu_off;

/* pcpu.h: the host decides owned or not (its CPUs), the process only how
 * it takes part (plain adds with rseq, else locked adds on the spare). */
static __attribute__((constructor)) void pcpu_mode(void)
{
#if defined(__x86_64__) || defined(__i386__)
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	int owned_host = !(cpus > (long)RESIL_PCPU_SPARE);

#ifdef RESIL_PCPU_RSEQ
	resil_pcpu_off = (long)__rseq_offset;
	resil_pcpu_owned = owned_host && __rseq_size != 0;
#endif
	resil_pcpu_spare = owned_host && !resil_pcpu_owned;
#endif
}

/* Add n to counter w of the calling CPU's stripe. */
static inline void stripe_add(struct resil_stats_state *t, unsigned w, uint64_t n)
{
	resil_pcpu_add(&t->stripe[0].w[w], sizeof(t->stripe[0]), n);
}

int64_t resil_hist_lower_ns(unsigned b)
{
	unsigned k;
	uint64_t u;

	if (b >= RESIL_HIST_BUCKETS)
		return INT64_MAX;
	if (b < RESIL_HIST_SUB)
		return (int64_t)b << RESIL_HIST_SHIFT;
	k = b / RESIL_HIST_SUB + 2;
	u = (uint64_t)(RESIL_HIST_SUB + b % RESIL_HIST_SUB) << (k - 3);
	return (int64_t)(u << RESIL_HIST_SHIFT);
}

int64_t resil_hist_upper_ns(unsigned b)
{
	if (b + 1 >= RESIL_HIST_BUCKETS)
		return INT64_MAX;
	return resil_hist_lower_ns(b + 1);
}

uint64_t resil_stats_state_size(const struct resil_conf *c)
{
	uint64_t n = sizeof(struct resil_stats_state);

	if (c->histogram)
		n += RESIL_STATS_STRIPES * HIST_STRIPE_BYTES;
	return n;
}

void resil_stats_state_init(void *st, const struct resil_conf *c, int64_t now)
{
	(void)now;
	/* Before the block is published (slot word, release): plain stores. */
	memset(st, 0, resil_stats_state_size(c));
}

bool resil_stats_same_shape(const struct resil_conf *a, const struct resil_conf *b)
{
	return !a->histogram == !b->histogram;
}

void resil_stats_carry(void *nst, const struct resil_conf *nc, const void *ost,
		       const struct resil_conf *oc, int64_t now)
{
	struct resil_stats_state *n = nst;
	const struct resil_stats_state *o = ost;

	(void)now;
	/*
	 * Called before the new block is published; calls still running on
	 * the old block keep counting there until their handles re-resolve,
	 * and those few increments are lost (statistics, not decisions).
	 */
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++) {
		for (unsigned i = 0; i < W_HIST_SUM; i++)
			st_relaxed(&n->stripe[s].w[i], ld_relaxed(&o->stripe[s].w[i]));
		if (nc->histogram && oc->histogram)
			st_relaxed(&n->stripe[s].w[W_HIST_SUM],
				   ld_relaxed(&o->stripe[s].w[W_HIST_SUM]));
	}
	if (!(nc->histogram && oc->histogram))
		return;
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++) {
		ra64 *nh = hist_of(nst, s), *oh = hist_of(ost, s);

		for (unsigned b = 0; b < RESIL_HIST_BUCKETS; b++)
			st_relaxed(&nh[b], ld_relaxed(&oh[b]));
	}
}

void resil_stats_rejected(struct resil_ctx *x, void *st, int verdict)
{
	struct resil_stats_state *t = st;
	enum resil_stat w;

	(void)x;
	switch (verdict) {
	case RESIL_REJECT_OPEN:
		w = RESIL_STAT_REJ_OPEN;
		break;
	case RESIL_REJECT_FULL:
		w = RESIL_STAT_REJ_FULL;
		break;
	case RESIL_REJECT_LIMITED:
		w = RESIL_STAT_REJ_LIMITED;
		break;
	case RESIL_REJECT_SHED:
		w = RESIL_STAT_REJ_SHED;
		break;
	case RESIL_REJECT_BUDGET:
		w = RESIL_STAT_REJ_BUDGET;
		break;
	default:
		return;
	}
	stripe_add(t, w, 1);
}

/* always_inline: every release ends here, and under link-time
 * optimization the callers in other files (shm/policy.c, the client's
 * release) take it inline, its one add with theirs, as this file's own
 * would. */
inline __attribute__((always_inline)) void
resil_stats_released(struct resil_ctx *x, const struct resil_conf *c, void *st,
		     const struct resil_permit_priv *pm, int outcome, int64_t dur_ns)
{
	struct resil_stats_state *t = st;
	unsigned w;
	bool slow = dur_ns >= 0 && c->breaker.on && dur_ns >= c->breaker.slow_call_ns;

	(void)x;
	(void)pm;
	if (outcome == RESIL_SUCCESS)
		w = slow ? W_SLOW_OK : RESIL_STAT_SUCCESS;
	else if (outcome == RESIL_FAILURE)
		w = slow ? W_SLOW_FAIL : RESIL_STAT_FAILURE;
	else
		w = RESIL_STAT_IGNORED; /* or a value out of range, counted the same way */
	stripe_add(t, w, 1);
	if (dur_ns < 0 || w == RESIL_STAT_IGNORED || !c->histogram)
		return;
	/* a bucket and the sum may land on another CPU's stripe than the
	 * outcome (a migration in between): each sum stays exact */
	resil_pcpu_add(&hist_of(st, 0)[resil_hist_index(dur_ns)], HIST_STRIPE_BYTES, 1);
	stripe_add(t, W_HIST_SUM, (uint64_t)dur_ns);
}

void resil_stats_add(struct resil_ctx *x, void *st, enum resil_stat which, uint64_t n)
{
	struct resil_stats_state *t = st;

	(void)x;
	if ((unsigned)which >= RESIL_STAT__MAX || !n)
		return;
	stripe_add(t, which, n);
}

void *resil_stats_state_of(const struct resil_seg *s, const struct resil_rec *rec)
{
	uint64_t off, need;

	if (!s || !s->st || !rec || !resil_has(rec, RESIL_C_STATS))
		return NULL;
	/* the policy's block inside the mapping, the stats state inside the block */
	if (rec->state_off > s->st_size || rec->state_size > s->st_size - rec->state_off)
		return NULL;
	off = rec->comp_off[RESIL_C_STATS];
	need = resil_stats_state_size(&rec->conf);
	if (off > rec->state_size || need > rec->state_size - off || (rec->state_off + off) % 8)
		return NULL;
	return resil_seg_state(s, rec->state_off + off);
}

uint64_t resil_stats_read(const void *st, enum resil_stat which)
{
	const struct resil_stats_state *t = st;
	uint64_t sum = 0;

	if ((unsigned)which >= RESIL_STAT__MAX)
		return 0;
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++) {
		const ra64 *w = t->stripe[s].w;

		sum += ld_relaxed(&w[which]);
		if (which == RESIL_STAT_SUCCESS || which == RESIL_STAT_SLOW)
			sum += ld_relaxed(&w[W_SLOW_OK]);
		if (which == RESIL_STAT_FAILURE || which == RESIL_STAT_SLOW)
			sum += ld_relaxed(&w[W_SLOW_FAIL]);
	}
	return sum;
}

void resil_stats_read_all(const void *st, uint64_t out[RESIL_STAT__MAX])
{
	const struct resil_stats_state *t = st;

	memset(out, 0, sizeof(uint64_t) * RESIL_STAT__MAX);
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++) {
		const ra64 *w = t->stripe[s].w;
		uint64_t ok = ld_relaxed(&w[W_SLOW_OK]), fail = ld_relaxed(&w[W_SLOW_FAIL]);

		for (unsigned i = 0; i < RESIL_STAT__MAX; i++)
			out[i] += ld_relaxed(&w[i]);
		out[RESIL_STAT_SUCCESS] += ok;
		out[RESIL_STAT_FAILURE] += fail;
		out[RESIL_STAT_SLOW] += ok + fail;
	}
}

uint64_t resil_stats_calls(const uint64_t v[RESIL_STAT__MAX])
{
	return v[RESIL_STAT_SUCCESS] + v[RESIL_STAT_FAILURE] + v[RESIL_STAT_IGNORED] +
	       v[RESIL_STAT_REJ_OPEN] + v[RESIL_STAT_REJ_FULL] + v[RESIL_STAT_REJ_LIMITED] +
	       v[RESIL_STAT_REJ_SHED] + v[RESIL_STAT_REJ_BUDGET];
}

int resil_stats_hist_read(const void *st, const struct resil_conf *c, uint64_t *counts,
			  uint64_t *count, uint64_t *sum_ns)
{
	const struct resil_stats_state *t = st;
	uint64_t n = 0, sum = 0;

	if (!c->histogram)
		return -ENODATA;
	if (counts)
		memset(counts, 0, sizeof(uint64_t) * RESIL_HIST_BUCKETS);
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++) {
		const ra64 *h = hist_of(st, s);

		for (unsigned b = 0; b < RESIL_HIST_BUCKETS; b++) {
			uint64_t v = ld_relaxed(&h[b]);

			if (counts)
				counts[b] += v;
			n += v;
		}
		sum += ld_relaxed(&t->stripe[s].w[W_HIST_SUM]);
	}
	if (count)
		*count = n;
	if (sum_ns)
		*sum_ns = sum;
	return 0;
}

/* The middle of the bucket holding the rank-th smallest sample (1-based). */
static int64_t quantile_of(const uint64_t *counts, uint64_t total, double q)
{
	uint64_t rank, cum = 0;
	double r = q * (double)total;

	rank = (uint64_t)r;
	if ((double)rank < r)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > total)
		rank = total;
	for (unsigned b = 0; b < RESIL_HIST_BUCKETS; b++) {
		cum += counts[b];
		if (cum >= rank) {
			int64_t lo = resil_hist_lower_ns(b), hi = resil_hist_upper_ns(b);

			return hi == INT64_MAX ? lo : lo + (hi - lo) / 2;
		}
	}
	return resil_hist_lower_ns(RESIL_HIST_BUCKETS - 1);
}

int resil_stats_percentile_ns(const void *st, const struct resil_conf *c, double q, int64_t *ns)
{
	uint64_t counts[RESIL_HIST_BUCKETS], total;
	int r;

	if (!(q >= 0.0 && q <= 1.0))
		return -EINVAL;
	r = resil_stats_hist_read(st, c, counts, &total, NULL);
	if (r)
		return r;
	if (!total)
		return -ENODATA;
	*ns = quantile_of(counts, total, q);
	return 0;
}

/* Timed outcomes (successes and failures) summed over the stripes. */
static uint64_t timed_calls(const struct resil_stats_state *t)
{
	uint64_t calls = 0;

	for (unsigned i = 0; i < RESIL_STATS_STRIPES; i++) {
		const ra64 *w = t->stripe[i].w;

		calls += ld_relaxed(&w[RESIL_STAT_SUCCESS]) + ld_relaxed(&w[RESIL_STAT_FAILURE]) +
			 ld_relaxed(&w[W_SLOW_OK]) + ld_relaxed(&w[W_SLOW_FAIL]);
	}
	return calls;
}

/* A cached p95 no computation can give: outside the histogram's range,
 * or computed at more calls than were ever counted. */
static bool p95_bad(int64_t p, uint64_t last, uint64_t calls)
{
	return p < 0 || p > resil_hist_lower_ns(RESIL_HIST_BUCKETS - 1) || last > calls;
}

int64_t resil_stats_p95_ns(const struct resil_seg *s, const struct resil_rec *rec)
{
	struct resil_stats_state *t;
	uint64_t calls, last, step;
	int64_t p, v;

	if (!rec || !rec->conf.histogram)
		return -1;
	t = resil_stats_state_of(s, rec);
	if (!t)
		return -1;
	calls = timed_calls(t);
	p = ld_relaxed(&t->p95_ns);
	last = ld_relaxed(&t->p95_calls);
	step = last / 16 > 16 ? last / 16 : 16;
	/* a cache no computation can have left is recomputed, not believed
	 * (the words are any client's to write) */
	if (p > 0 && !p95_bad(p, last, calls) && calls - last < step)
		return p;
	if (resil_stats_percentile_ns(t, &rec->conf, 0.95, &v))
		return -1;
	/* Racing recomputations store values that are both valid: last one wins. */
	st_relaxed(&t->p95_ns, v > 0 ? v : 1);
	st_relaxed(&t->p95_calls, calls);
	return v;
}

static const char *const stat_names[RESIL_STAT__MAX] = {
    [RESIL_STAT_SUCCESS] = "success",
    [RESIL_STAT_FAILURE] = "failure",
    [RESIL_STAT_IGNORED] = "ignored",
    [RESIL_STAT_SLOW] = "slow",
    [RESIL_STAT_REJ_OPEN] = "rejected_open",
    [RESIL_STAT_REJ_FULL] = "rejected_full",
    [RESIL_STAT_REJ_LIMITED] = "rejected_limited",
    [RESIL_STAT_REJ_SHED] = "rejected_shed",
    [RESIL_STAT_REJ_BUDGET] = "rejected_budget",
    [RESIL_STAT_RETRIES] = "retries",
    [RESIL_STAT_GIVEUPS] = "giveups",
    [RESIL_STAT_TRANSITIONS] = "transitions",
    [RESIL_STAT_EVICTIONS] = "evictions",
};

/*
 * The daemon's check of the one word pair it can judge: the p95 cache
 * (hedging waits for it). A cache no computation can give (p95_bad) is
 * cleared, so the next caller recomputes it, and counted. Counters and
 * buckets are free-running sums of any values: readers add them as they
 * are (unsigned, wrapping), and no index is ever taken from them (a
 * bucket's index comes from the caller's own duration).
 */
void resil_stats_maintain(struct resil_ctx *x, const struct resil_conf *c, void *st)
{
	struct resil_stats_state *t = st;
	int64_t p;
	uint64_t last;

	if (!c->histogram)
		return;
	p = ld_relaxed(&t->p95_ns);
	last = ld_relaxed(&t->p95_calls);
	if (!p95_bad(p, last, timed_calls(t)))
		return;
	st_relaxed(&t->p95_ns, 0);
	st_relaxed(&t->p95_calls, 0);
	resil_repaired(x, RESIL_W_STATS_P95);
}

const char *resil_stat_name(enum resil_stat which)
{
	if ((unsigned)which >= RESIL_STAT__MAX)
		return NULL;
	return stat_names[which];
}

/* snprintf into buf at *pos, keeping count of what would be needed. */
static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*pos < len ? buf + *pos : NULL, *pos < len ? len - *pos : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

size_t resil_stats_format(const struct resil_seg *s, const struct resil_rec *rec, char *buf,
			  size_t len)
{
	static const struct {
		const char *name;
		double q;
	} qs[] = {{"latency_p50_ns", 0.50}, {"latency_p95_ns", 0.95}, {"latency_p99_ns", 0.99}};
	uint64_t v[RESIL_STAT__MAX], count, sum;
	size_t pos = 0;
	void *st;

	if (buf && len)
		buf[0] = '\0';
	st = resil_stats_state_of(s, rec);
	if (!st)
		return 0;
	resil_stats_read_all(st, v);
	put(buf, len, &pos, "calls %" PRIu64 "\n", resil_stats_calls(v));
	for (unsigned i = 0; i < RESIL_STAT__MAX; i++)
		put(buf, len, &pos, "%s %" PRIu64 "\n", stat_names[i], v[i]);
	if (resil_stats_hist_read(st, &rec->conf, NULL, &count, &sum) == 0) {
		put(buf, len, &pos, "latency_count %" PRIu64 "\n", count);
		put(buf, len, &pos, "latency_sum_ns %" PRIu64 "\n", sum);
		for (unsigned i = 0; i < RESIL_ARRAY_SIZE(qs); i++) {
			int64_t ns;

			if (resil_stats_percentile_ns(st, &rec->conf, qs[i].q, &ns) == 0)
				put(buf, len, &pos, "%s %" PRId64 "\n", qs[i].name, ns);
		}
	}
	return pos;
}

void resil_stats_giveup(struct resil_ctx *x, void *st, unsigned reason)
{
	struct resil_stats_state *s = st;

	(void)x;
	if (!s || reason >= RESIL_GIVEUP_REASONS)
		return;
	faa_relaxed(&s->giveup_by[reason], 1);
}

uint64_t resil_stats_giveups_by(const void *st, unsigned reason)
{
	const struct resil_stats_state *s = st;

	if (!s || reason >= RESIL_GIVEUP_REASONS)
		return 0;
	return ld_relaxed((ra64 *)&s->giveup_by[reason]);
}

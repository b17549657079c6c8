/* SPDX-License-Identifier: MIT */
/*
 * unit_stats.c - counters and the latency histogram (shm/stats.c).
 *
 *   - bucket geometry: every value lies in its bucket, buckets are
 *     contiguous, at most 12.5% wide;
 *   - counters exact after a known workload: one process, and forked
 *     processes on one MAP_SHARED region (pinned to different CPUs, so
 *     they write different stripes, and unpinned);
 *   - the stripe is the CPU's (pinned writes land on stripe cpu % 16);
 *   - percentiles within the bucket precision on known distributions
 *     (uniform, exponential from a seeded generator, a constant);
 *   - the p95 cache; the "name value" format;
 *   - through the library in embedded mode on a manual clock: the
 *     policy's release feeds the counters and the histogram;
 *   - no syscall on the counting path (sched_getcpu from rseq), checked
 *     with strace when it can trace;
 *   - figures (not asserted): ns per counted call, histogram off and on,
 *     one and two processes.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h> /* NAN only */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf.h"
#include "internal.h"
#include "pcpu.h"
#include "stats.h"
#include "testutil.h"
#include <pthread.h>

static void *map_shared(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void conf_hist(struct resil_conf *c, bool hist, int64_t slow_ns)
{
	resil_conf_init(c);
	c->histogram = hist;
	if (slow_ns > 0) {
		c->breaker.on = 1;
		c->breaker.slow_call_ns = slow_ns;
	}
}

static void *new_state(const struct resil_conf *c)
{
	size_t n = resil_stats_state_size(c);
	void *st = map_shared(n);

	resil_stats_state_init(st, c, 0);
	return st;
}

/* The documented layout: stripe i is the i-th 128-byte line, counter w
 * its w-th word (static_asserted in stats.c). */
static uint64_t stripe_word(const void *st, unsigned stripe, enum resil_stat w)
{
	const ra64 *p = (const ra64 *)((const char *)st + stripe * RESIL_HOT_ALIGN);

	return ld_relaxed(&p[w]);
}

static bool pin_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) == 0 && sched_getcpu() == cpu;
}

static int ncpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return CPU_COUNT(&set);
}

static void test_hist_geometry(void **state)
{
	int64_t prev_hi = 0;

	/* contiguous, increasing, 12.5% at most above the linear part */
	for (unsigned b = 0; b < RESIL_HIST_BUCKETS; b++) {
		int64_t lo = resil_hist_lower_ns(b), hi = resil_hist_upper_ns(b);

		assert_int_equal(lo, prev_hi);
		assert_true(hi > lo);
		if (b + 1 < RESIL_HIST_BUCKETS) {
			assert_int_equal(resil_hist_index(lo), b);
			assert_int_equal(resil_hist_index(hi - 1), b);
			if (b >= RESIL_HIST_SUB)
				assert_true((hi - lo) * 8 <= lo);
			else
				assert_int_equal(hi - lo, 128);
		}
		prev_hi = hi;
	}
	assert_int_equal(resil_hist_upper_ns(RESIL_HIST_BUCKETS - 1), INT64_MAX);
	/* the range named in stats.h: 1 us .. 60 s keep their precision */
	assert_true(resil_hist_index(60 * RESIL_NS_PER_S) < RESIL_HIST_BUCKETS - 1);
	assert_int_equal(resil_hist_index(1000 * RESIL_NS_PER_S), RESIL_HIST_BUCKETS - 1);
	assert_int_equal(resil_hist_index(INT64_MAX), RESIL_HIST_BUCKETS - 1);
	assert_int_equal(resil_hist_index(0), 0);
	assert_int_equal(resil_hist_index(-5), 0);
	assert_int_equal(resil_hist_index(1023), 7);
	assert_int_equal(resil_hist_index(1024), 8);
	/* pseudo-random values land in their bucket */
	uint64_t seed = 42;
	for (int i = 0; i < 100000; i++) {
		int64_t v = (int64_t)(resil_splitmix64(&seed) >> (20 + i % 40));
		unsigned b = resil_hist_index(v);

		assert_true(resil_hist_lower_ns(b) <= v);
		assert_true(v < resil_hist_upper_ns(b));
	}
}

/* A known mix: i-th call of n. */
struct mix {
	uint64_t v[RESIL_STAT__MAX];
	uint64_t hist;
	uint64_t sum;
};

static void run_mix(void *st, const struct resil_conf *c, uint64_t n, uint64_t salt, struct mix *m)
{
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};

	for (uint64_t i = 0; i < n; i++) {
		uint64_t k = (i + salt) % 10;
		int64_t d =
		    (int64_t)((i * 7919 + salt) % 200) * RESIL_NS_PER_MS / 2; /* 0..99.5ms */

		if (k < 5) {
			resil_stats_released(&x, c, st, &pm, RESIL_SUCCESS, d);
			if (m) {
				m->v[RESIL_STAT_SUCCESS]++;
				m->hist++;
				m->sum += (uint64_t)d;
				if (c->breaker.on && d >= c->breaker.slow_call_ns)
					m->v[RESIL_STAT_SLOW]++;
			}
		} else if (k < 7) {
			resil_stats_released(&x, c, st, &pm, RESIL_FAILURE, -1);
			if (m)
				m->v[RESIL_STAT_FAILURE]++;
		} else if (k == 7) {
			resil_stats_released(&x, c, st, &pm, RESIL_IGNORED, d);
			if (m)
				m->v[RESIL_STAT_IGNORED]++;
		} else if (k == 8) {
			int verdict = RESIL_REJECT_OPEN + (int)(i / 10 % 5);

			resil_stats_rejected(&x, st, verdict);
			if (m)
				m->v[RESIL_STAT_REJ_OPEN + (verdict - RESIL_REJECT_OPEN)]++;
		} else {
			resil_stats_add(&x, st, RESIL_STAT_RETRIES, 2);
			resil_stats_add(&x, st, RESIL_STAT_TRANSITIONS, 1);
			if (m) {
				m->v[RESIL_STAT_RETRIES] += 2;
				m->v[RESIL_STAT_TRANSITIONS]++;
			}
		}
	}
}

static void check_mix(const void *st, const struct resil_conf *c, const struct mix *m)
{
	uint64_t v[RESIL_STAT__MAX], count, sum, calls = 0;

	resil_stats_read_all(st, v);
	for (unsigned i = 0; i < RESIL_STAT__MAX; i++) {
		if (v[i] != m->v[i])
			fail_msg("%s: %" PRIu64 ", expected %" PRIu64, resil_stat_name(i), v[i],
				 m->v[i]);
		assert_int_equal(resil_stats_read(st, i), m->v[i]);
	}
	for (unsigned i = RESIL_STAT_SUCCESS; i <= RESIL_STAT_IGNORED; i++)
		calls += m->v[i];
	for (unsigned i = RESIL_STAT_REJ_OPEN; i <= RESIL_STAT_REJ_BUDGET; i++)
		calls += m->v[i];
	assert_int_equal(resil_stats_calls(v), calls);
	if (c->histogram) {
		assert_int_equal(resil_stats_hist_read(st, c, NULL, &count, &sum), 0);
		assert_int_equal(count, m->hist);
		assert_int_equal(sum, m->sum);
	} else {
		assert_int_equal(resil_stats_hist_read(st, c, NULL, &count, &sum), -ENODATA);
	}
}

static void test_counters_single(void **state)
{
	for (int hist = 0; hist < 2; hist++) {
		struct resil_conf c;
		struct mix m = {0};
		void *st;

		conf_hist(&c, hist, 50 * RESIL_NS_PER_MS);
		st = new_state(&c);
		run_mix(st, &c, 10007, 3, &m);
		check_mix(st, &c, &m);
		assert_true(m.v[RESIL_STAT_SLOW] > 0);
		assert_true(m.v[RESIL_STAT_REJ_BUDGET] > 0);
		/* out-of-range inputs count nothing (or as ignored: documented) */
		resil_stats_rejected(NULL, st, 0);
		resil_stats_rejected(NULL, st, 99);
		resil_stats_add(NULL, st, RESIL_STAT__MAX, 5);
		resil_stats_add(NULL, st, (enum resil_stat) - 1, 5);
		check_mix(st, &c, &m);
		munmap(st, resil_stats_state_size(&c));
	}
}

/* Every word of every stripe (16 per stripe, the last one the histogram's
 * sum): what one call changed. */
static uint64_t raw_words(const void *st, uint64_t *sum_words)
{
	const ra64 *w = st;
	uint64_t n = 0, sums = 0;

	for (unsigned i = 0; i < RESIL_STATS_STRIPES * 16; i++) {
		if (i % 16 == 15)
			sums += ld_relaxed(&w[i]);
		else
			n += ld_relaxed(&w[i]);
	}
	if (sum_words)
		*sum_words = sums;
	return n;
}

/* Histograms off: one fetch_add of 1 per call, whatever the call (a slow
 * success or failure included); on: the same, plus one bucket and the sum. */
static void test_one_atomic_per_call(void **state)
{
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};

	for (int hist = 0; hist < 2; hist++) {
		struct resil_conf c;
		void *st;
		uint64_t before, sums0, sums1;
		struct {
			int outcome;
			int64_t dur;
		} calls[] = {
		    {RESIL_SUCCESS, 1000},
		    {RESIL_SUCCESS, 60 * RESIL_NS_PER_MS},
		    {RESIL_FAILURE, -1},
		    {RESIL_FAILURE, 60 * RESIL_NS_PER_MS},
		    {RESIL_IGNORED, 60 * RESIL_NS_PER_MS},
		    {42, 5},
		};

		conf_hist(&c, hist, 50 * RESIL_NS_PER_MS);
		st = new_state(&c);
		for (unsigned i = 0; i < RESIL_ARRAY_SIZE(calls); i++) {
			uint64_t hc0 = 0, hc1 = 0;

			if (hist)
				resil_stats_hist_read(st, &c, NULL, &hc0, NULL);
			before = raw_words(st, &sums0);
			resil_stats_released(&x, &c, st, &pm, calls[i].outcome, calls[i].dur);
			assert_int_equal(raw_words(st, &sums1), before + 1);
			if (hist)
				resil_stats_hist_read(st, &c, NULL, &hc1, NULL);
			bool timed = calls[i].dur >= 0 && (calls[i].outcome == RESIL_SUCCESS ||
							   calls[i].outcome == RESIL_FAILURE);
			assert_int_equal(hc1 - hc0, hist && timed ? 1 : 0);
			assert_int_equal(sums1 - sums0, hist && timed ? (uint64_t)calls[i].dur : 0);
		}
		before = raw_words(st, NULL);
		resil_stats_rejected(&x, st, RESIL_REJECT_SHED);
		assert_int_equal(raw_words(st, NULL), before + 1);
		/* the folded reading: 2 successes (1 slow), 2 failures (1 slow) */
		assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), 2);
		assert_int_equal(resil_stats_read(st, RESIL_STAT_FAILURE), 2);
		assert_int_equal(resil_stats_read(st, RESIL_STAT_SLOW), 2);
		assert_int_equal(resil_stats_read(st, RESIL_STAT_IGNORED), 2);
		resil_stats_add(&x, st, RESIL_STAT_SLOW, 3);
		assert_int_equal(resil_stats_read(st, RESIL_STAT_SLOW), 5);
		munmap(st, resil_stats_state_size(&c));
	}
}

/* nproc processes, forked, on one MAP_SHARED state; pinned: child i on CPU
 * i % ncpus. Totals must be exact. */
static void forked_mix(bool pinned)
{
	int n = 4, cpus = ncpus();
	uint64_t per = 50000 * (uint64_t)resil_test_scale();
	struct resil_conf c;
	struct mix m = {0};
	void *st;

	conf_hist(&c, true, 50 * RESIL_NS_PER_MS);
	st = new_state(&c);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0) {
			if (pinned)
				pin_cpu(i % cpus);
			run_mix(st, &c, per, (uint64_t)i, NULL);
			_exit(0);
		}
	}
	for (int i = 0; i < n; i++) {
		int ws;

		assert_true(wait(&ws) > 0);
		assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	/* the expected totals: the same mixes, counted in private memory */
	for (int i = 0; i < n; i++) {
		void *priv = new_state(&c);

		run_mix(priv, &c, per, (uint64_t)i, &m);
		munmap(priv, resil_stats_state_size(&c));
	}
	check_mix(st, &c, &m);
	if (pinned && cpus > 1) {
		/* children pinned to CPUs 0 and 1 wrote stripes 0 and 1 */
		assert_true(stripe_word(st, 0, RESIL_STAT_SUCCESS) > 0);
		assert_true(stripe_word(st, 1, RESIL_STAT_SUCCESS) > 0);
	}
	munmap(st, resil_stats_state_size(&c));
}

static void test_counters_forked_pinned(void **state)
{
	forked_mix(true);
}

static void test_counters_forked_unpinned(void **state)
{
	forked_mix(false);
}

static void test_stripe_is_cpu(void **state)
{
	uint64_t expect[RESIL_STATS_STRIPES] = {0};
	struct resil_conf c;
	cpu_set_t saved;
	void *st;
	int pinned = 0;

	assert_int_equal(sched_getaffinity(0, sizeof(saved), &saved), 0);
	conf_hist(&c, false, 0);
	st = new_state(&c);
	for (int cpu = 0; cpu < CPU_SETSIZE && pinned < 2 * RESIL_STATS_STRIPES; cpu++) {
		if (!CPU_ISSET(cpu, &saved) || !pin_cpu(cpu))
			continue;
		pinned++;
		resil_stats_add(NULL, st, RESIL_STAT_EVICTIONS, (uint64_t)cpu + 1);
		/* the CPU's stripe; with rseq, the spare one if the thread was
		 * preempted inside the add (pcpu.h): rare, but allowed; a
		 * process without rseq on an owned host: always the spare */
		if (resil_pcpu_spare ||
		    (resil_pcpu_owned && stripe_word(st, RESIL_PCPU_SPARE, RESIL_STAT_EVICTIONS) !=
					     expect[RESIL_PCPU_SPARE]))
			expect[RESIL_PCPU_SPARE] += (uint64_t)cpu + 1;
		else
			expect[cpu % RESIL_STATS_STRIPES] += (uint64_t)cpu + 1;
		for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++)
			assert_int_equal(stripe_word(st, s, RESIL_STAT_EVICTIONS), expect[s]);
	}
	assert_true(pinned >= 1);
	sched_setaffinity(0, sizeof(saved), &saved);
	munmap(st, resil_stats_state_size(&c));
}

/* More threads than CPUs, so they are preempted and migrated inside their
 * adds: with rseq every add lands once (its CPU's stripe, or the spare
 * after an abort), and the sum is exact. */
#define PCPU_THREADS 8

struct pcpu_arg {
	void *st;
	uint64_t n;
};

static void *pcpu_worker(void *arg)
{
	struct pcpu_arg *a = arg;

	for (uint64_t i = 0; i < a->n; i++)
		resil_stats_add(NULL, a->st, RESIL_STAT_RETRIES, 1);
	return NULL;
}

static void test_pcpu_threads_exact(void **state)
{
	struct pcpu_arg a;
	pthread_t t[PCPU_THREADS];
	struct resil_conf c;
	uint64_t sum = 0;

	conf_hist(&c, false, 0);
	a.st = new_state(&c);
	a.n = 2000000ull * (uint64_t)resil_test_scale();
	for (int i = 0; i < PCPU_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, pcpu_worker, &a), 0);
	for (int i = 0; i < PCPU_THREADS; i++)
		pthread_join(t[i], NULL);
	for (unsigned s = 0; s < RESIL_STATS_STRIPES; s++)
		sum += stripe_word(a.st, s, RESIL_STAT_RETRIES);
	assert_int_equal(sum, a.n * PCPU_THREADS);
	assert_int_equal(resil_stats_read(a.st, RESIL_STAT_RETRIES), a.n * PCPU_THREADS);
	print_message("pcpu mode: %s\n", resil_pcpu_owned   ? "owned (rseq)"
					 : resil_pcpu_spare ? "fetch_add on the spare"
							    : "fetch_add");
	munmap(a.st, resil_stats_state_size(&c));
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* The estimate is the middle of the bucket that holds the exact quantile
 * (the rank-th smallest, rank = ceil(q n)): so within half a bucket. */
static void check_quantiles(const void *st, const struct resil_conf *c, int64_t *vals, size_t n)
{
	static const double qs[] = {0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0};

	qsort(vals, n, sizeof(*vals), cmp_i64);
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(qs); i++) {
		double r = qs[i] * (double)n;
		size_t rank = (size_t)r;
		int64_t exact, est, lo, hi;
		unsigned b;

		if ((double)rank < r)
			rank++;
		if (rank < 1)
			rank = 1;
		exact = vals[rank - 1];
		b = resil_hist_index(exact);
		lo = resil_hist_lower_ns(b);
		hi = resil_hist_upper_ns(b);
		assert_int_equal(resil_stats_percentile_ns(st, c, qs[i], &est), 0);
		if (est != lo + (hi - lo) / 2)
			fail_msg("q %.3f: estimate %" PRId64 ", exact %" PRId64 " in [%" PRId64
				 ", %" PRId64 ")",
				 qs[i], est, exact, lo, hi);
		/* the promise in words: within 6.25% (or 64 ns below 1 us) */
		assert_true(llabs(est - exact) <= (exact >= 1024 ? exact / 16 + 1 : 64));
	}
}

static void test_percentiles(void **state)
{
	size_t n = 20000;
	int64_t *vals = calloc(n, sizeof(*vals));
	struct resil_conf c;
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};
	uint64_t seed = 7;
	int64_t ns;

	assert_non_null(vals);
	conf_hist(&c, true, 0);

	/* uniform 1 ms .. 100 ms */
	void *st = new_state(&c);
	assert_int_equal(resil_stats_percentile_ns(st, &c, 0.5, &ns), -ENODATA);
	assert_int_equal(resil_stats_percentile_ns(st, &c, 1.5, &ns), -EINVAL);
	assert_int_equal(resil_stats_percentile_ns(st, &c, NAN, &ns), -EINVAL);
	for (size_t i = 0; i < n; i++) {
		vals[i] =
		    RESIL_NS_PER_MS + (int64_t)(resil_splitmix64(&seed) % (99 * RESIL_NS_PER_MS));
		resil_stats_released(&x, &c, st, &pm, i % 3 ? RESIL_SUCCESS : RESIL_FAILURE,
				     vals[i]);
	}
	check_quantiles(st, &c, vals, n);
	assert_int_equal(resil_stats_percentile_ns(st, &c, 0.5, &ns), 0);
	assert_true(ns > 47 * RESIL_NS_PER_MS && ns < 54 * RESIL_NS_PER_MS);
	munmap(st, resil_stats_state_size(&c));

	/* Pareto (alpha 1, from 1 ms, seeded): a long tail up to seconds */
	st = new_state(&c);
	for (size_t i = 0; i < n; i++) {
		uint64_t u = (resil_splitmix64(&seed) >> 40) + 1; /* 1 .. 2^24 */

		vals[i] = (int64_t)((RESIL_NS_PER_MS << 24) / u);
		resil_stats_released(&x, &c, st, &pm, RESIL_SUCCESS, vals[i]);
	}
	check_quantiles(st, &c, vals, n);
	/* P(v > t) = 1 ms / t: p95 = 20 ms */
	assert_int_equal(resil_stats_percentile_ns(st, &c, 0.95, &ns), 0);
	assert_true(ns > 18 * RESIL_NS_PER_MS && ns < 22 * RESIL_NS_PER_MS);
	munmap(st, resil_stats_state_size(&c));

	/* sub-microsecond values and one constant */
	st = new_state(&c);
	for (size_t i = 0; i < 1000; i++) {
		vals[i] = (int64_t)(i % 2 ? 300 : 250 * RESIL_NS_PER_US);
		resil_stats_released(&x, &c, st, &pm, RESIL_SUCCESS, vals[i]);
	}
	check_quantiles(st, &c, vals, 1000);
	munmap(st, resil_stats_state_size(&c));
	free(vals);
}

/* A fake mapping: state header room, then one policy's stats block. */
struct fake {
	struct resil_seg seg;
	struct resil_rec rec;
	void *mem;
	size_t size;
};

static void *fake_init(struct fake *f, bool hist)
{
	memset(f, 0, sizeof(*f));
	conf_hist(&f->rec.conf, hist, 0);
	strcpy(f->rec.name, "payments");
	f->rec.components = 1u << RESIL_C_STATS;
	f->rec.state_off = 4096;
	f->rec.state_size = resil_stats_state_size(&f->rec.conf);
	f->size = 4096 + f->rec.state_size;
	f->mem = map_shared(f->size);
	f->seg.st = f->mem;
	f->seg.st_size = f->size;
	resil_stats_state_init((char *)f->mem + 4096, &f->rec.conf, 0);
	return (char *)f->mem + 4096;
}

static void test_p95_cache(void **state)
{
	struct fake f;
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};
	void *st = fake_init(&f, true);
	int64_t p, q;

	assert_int_equal(resil_stats_p95_ns(&f.seg, &f.rec), -1);
	for (int i = 0; i < 100; i++)
		resil_stats_released(&x, &f.rec.conf, st, &pm, RESIL_SUCCESS,
				     (i + 1) * RESIL_NS_PER_MS);
	p = resil_stats_p95_ns(&f.seg, &f.rec);
	assert_int_equal(resil_stats_percentile_ns(st, &f.rec.conf, 0.95, &q), 0);
	assert_int_equal(p, q);
	/* 15 more slow calls (under the step of 16): the cached value stays */
	for (int i = 0; i < 15; i++)
		resil_stats_released(&x, &f.rec.conf, st, &pm, RESIL_SUCCESS, 10 * RESIL_NS_PER_S);
	assert_int_equal(resil_stats_p95_ns(&f.seg, &f.rec), p);
	/* one more reaches it: recomputed, and now in the slow bucket */
	resil_stats_released(&x, &f.rec.conf, st, &pm, RESIL_SUCCESS, 10 * RESIL_NS_PER_S);
	q = resil_stats_p95_ns(&f.seg, &f.rec);
	assert_true(q > 9 * RESIL_NS_PER_S && q < 11 * RESIL_NS_PER_S);

	/* no histogram: none */
	f.rec.conf.histogram = 0;
	assert_int_equal(resil_stats_p95_ns(&f.seg, &f.rec), -1);
	f.rec.conf.histogram = 1;
	/* a record whose state lies outside the mapping is refused */
	f.rec.state_off = f.size - 64;
	assert_null(resil_stats_state_of(&f.seg, &f.rec));
	assert_int_equal(resil_stats_p95_ns(&f.seg, &f.rec), -1);
	f.rec.state_off = UINT64_MAX - 8;
	assert_null(resil_stats_state_of(&f.seg, &f.rec));
	munmap(f.mem, f.size);
}

static void test_format(void **state)
{
	struct fake f;
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};
	void *st = fake_init(&f, true);
	char buf[2048], small[16];
	size_t n;

	for (int i = 0; i < 10; i++)
		resil_stats_released(&x, &f.rec.conf, st, &pm, RESIL_SUCCESS, 2 * RESIL_NS_PER_MS);
	resil_stats_released(&x, &f.rec.conf, st, &pm, RESIL_FAILURE, 2 * RESIL_NS_PER_MS);
	resil_stats_rejected(&x, st, RESIL_REJECT_LIMITED);
	n = resil_stats_format(&f.seg, &f.rec, buf, sizeof(buf));
	assert_int_equal(n, strlen(buf));
	assert_non_null(strstr(buf, "calls 12\n"));
	assert_non_null(strstr(buf, "success 10\n"));
	assert_non_null(strstr(buf, "failure 1\n"));
	assert_non_null(strstr(buf, "rejected_limited 1\n"));
	assert_non_null(strstr(buf, "latency_count 11\n"));
	assert_non_null(strstr(buf, "latency_sum_ns 22000000\n"));
	assert_non_null(strstr(buf, "latency_p99_ns "));
	/* snprintf semantics: the length needed, a cut but terminated text */
	assert_int_equal(resil_stats_format(&f.seg, &f.rec, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_int_equal(resil_stats_format(&f.seg, &f.rec, NULL, 0), n);
	for (unsigned i = 0; i < RESIL_STAT__MAX; i++)
		assert_non_null(resil_stat_name(i));
	assert_null(resil_stat_name(RESIL_STAT__MAX));
	munmap(f.mem, f.size);
}

static void test_carry(void **state)
{
	struct resil_conf a, b;
	struct mix m = {0};
	void *o, *n;

	conf_hist(&a, true, 50 * RESIL_NS_PER_MS);
	conf_hist(&b, true, 50 * RESIL_NS_PER_MS);
	assert_true(resil_stats_same_shape(&a, &b));
	b.histogram = 0;
	assert_false(resil_stats_same_shape(&a, &b));
	o = new_state(&a);
	run_mix(o, &a, 1000, 1, &m);
	n = new_state(&a);
	resil_stats_carry(n, &a, o, &a, 0);
	check_mix(n, &a, &m);
	munmap(n, resil_stats_state_size(&a));
	n = new_state(&b);
	resil_stats_carry(n, &b, o, &a, 0);
	m.hist = m.sum = 0;
	check_mix(n, &b, &m);
	munmap(n, resil_stats_state_size(&b));
	munmap(o, resil_stats_state_size(&a));
}

/* Through the library: embedded mode, manual clock. Depends on the
 * policy's acquire/release calling the stats hooks. */
static void test_through_policy(void **state)
{
	struct test_clock *clk = test_clock_new(1000 * RESIL_NS_PER_S);
	resil_t *r;
	resil_policy_t *p;
	const struct resil_rec *rec;
	uint32_t slot;
	uint64_t word, count, sum;
	void *st;
	int64_t ns;
	int ok = 0, slow = 0;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, test_clock_fn, clk), 0);
	assert_int_equal(resil_define(r, "db",
				      "histogram = on; breaker.slow_call = 40ms; "
				      "breaker.min_calls = 1000; bulkhead.max = 1"),
			 0);
	assert_int_equal(resil_policy(r, "db", &p), 0);
	for (int i = 0; i < 100; i++) {
		resil_permit_t pm, pm2;

		assert_int_equal(resil_acquire(p, &pm), 0);
		/* the bulkhead is full: a counted rejection */
		assert_int_equal(resil_acquire(p, &pm2), RESIL_REJECT_FULL);
		test_clock_advance(clk, (i + 1) * RESIL_NS_PER_MS / 2); /* 0.5 .. 50 ms */
		resil_release(p, &pm, i % 4 ? RESIL_SUCCESS : RESIL_FAILURE);
		ok++;
		slow += (i + 1) * RESIL_NS_PER_MS / 2 >= 40 * RESIL_NS_PER_MS;
	}
	assert_int_equal(resil_seg_lookup(&r->seg, "db", &slot, &word), 0);
	rec = resil_seg_rec_of(&r->seg, word);
	assert_non_null(rec);
	st = resil_stats_state_of(&r->seg, rec);
	assert_non_null(st);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), 75);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_FAILURE), 25);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_REJ_FULL), 100);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SLOW), slow);
	assert_int_equal(resil_stats_hist_read(st, &rec->conf, NULL, &count, &sum), 0);
	assert_int_equal(count, ok);
	assert_int_equal(sum, 5050 * RESIL_NS_PER_MS / 2); /* 0.5 ms * (1 + ... + 100) */
	/* the durations were exact (manual clock): p50 is the 50th, 25 ms */
	assert_int_equal(resil_stats_percentile_ns(st, &rec->conf, 0.5, &ns), 0);
	assert_true(llabs(ns - 25 * RESIL_NS_PER_MS) <= 25 * RESIL_NS_PER_MS / 16);
	assert_true(resil_stats_p95_ns(&r->seg, rec) > 0);
	resil_close(r);
	test_clock_free(clk);
}

/* Forked processes of one embedded instance, through the library: the
 * counters add up exactly. */
static void test_through_policy_forked(void **state)
{
	int nproc = 3, per = 20000 * resil_test_scale();
	resil_t *r;
	resil_policy_t *p;
	uint32_t slot;
	uint64_t word;
	const struct resil_rec *rec;
	void *st;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_define(r, "fleet",
				      "breaker.min_calls = 1000000; limit.rate = 1/h; "
				      "limit.burst = 1"),
			 0);
	assert_int_equal(resil_define(r, "wide", "breaker.min_calls = 1000000"), 0);
	assert_int_equal(resil_policy(r, "wide", &p), 0);
	for (int i = 0; i < nproc; i++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0) {
			resil_policy_t *f;

			TEST_CHECK(resil_policy(r, "fleet", &f) == 0);
			for (int k = 0; k < per; k++) {
				resil_permit_t pm;

				TEST_CHECK(resil_acquire(p, &pm) == 0);
				resil_release(p, &pm, k % 5 ? RESIL_SUCCESS : RESIL_FAILURE);
				/* one token for the whole fleet, then rejections */
				if (resil_acquire(f, &pm) == 0)
					resil_release(f, &pm, RESIL_SUCCESS);
			}
			_exit(0);
		}
	}
	for (int i = 0; i < nproc; i++) {
		int ws;

		assert_true(wait(&ws) > 0);
		assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	assert_int_equal(resil_seg_lookup(&r->seg, "wide", &slot, &word), 0);
	rec = resil_seg_rec_of(&r->seg, word);
	st = resil_stats_state_of(&r->seg, rec);
	assert_non_null(st);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), (uint64_t)nproc * per * 4 / 5);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_FAILURE), (uint64_t)nproc * per / 5);
	assert_int_equal(resil_seg_lookup(&r->seg, "fleet", &slot, &word), 0);
	rec = resil_seg_rec_of(&r->seg, word);
	st = resil_stats_state_of(&r->seg, rec);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), 1);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_REJ_LIMITED), (uint64_t)nproc * per - 1);
	resil_close(r);
}

/* ---- no syscall on the counting path ---- */

/* Child mode: count n calls between two getppid() markers. */
static int hot_loop(long n)
{
	struct resil_conf c;
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};
	void *st;

	conf_hist(&c, true, 10 * RESIL_NS_PER_MS);
	st = mmap(NULL, resil_stats_state_size(&c), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (st == MAP_FAILED)
		return 1;
	resil_stats_state_init(st, &c, 0);
	/* warm: the first sched_getcpu() may resolve symbols */
	resil_stats_released(&x, &c, st, &pm, RESIL_SUCCESS, 1);
	syscall(SYS_getppid);
	for (long i = 0; i < n; i++) {
		resil_stats_released(&x, &c, st, &pm, RESIL_SUCCESS, i * 1000);
		resil_stats_rejected(&x, st, RESIL_REJECT_OPEN);
		resil_stats_add(&x, st, RESIL_STAT_RETRIES, 1);
	}
	syscall(SYS_getppid);
	return resil_stats_read(st, RESIL_STAT_RETRIES) == (uint64_t)n ? 0 : 1;
}

static void test_no_syscall_strace(void **state)
{
	char out[PATH_MAX], self[PATH_MAX], line[512], tmp[] = "/tmp/resil-stats-XXXXXX";
	int markers = 0, between = 0;
	ssize_t sl;
	FILE *f;
	int rc;

	if (access("/usr/bin/strace", X_OK)) {
		print_message("strace not installed: skipped\n");
		skip();
	}
	assert_non_null(mkdtemp(tmp));
	snprintf(out, sizeof(out), "%s/trace", tmp);
	sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(sl > 0);
	self[sl] = '\0';
	{
		const char *argv[] = {"/usr/bin/strace", "-f",	   "-qq", "-o", out, self,
				      "--hot-loop",	 "100000", NULL};
		char msg[4096];

		/* LeakSanitizer cannot run under ptrace: off in the traced child */
		const char *env[] = {"ASAN_OPTIONS=detect_leaks=0", NULL};

		rc = test_run(argv, env, msg, sizeof(msg));
		if (rc != 0 && strstr(msg, "PTRACE")) {
			print_message("strace cannot trace here (%s): skipped\n", msg);
			unlink(out);
			rmdir(tmp);
			skip();
		}
		if (rc != 0) {
			unlink(out);
			rmdir(tmp);
			fail_msg("strace run: %d: %s", rc, msg);
		}
	}
	f = fopen(out, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "getppid(")) {
			markers++;
			continue;
		}
		if (markers == 1) {
			between++;
			fprintf(stderr, "syscall on the counting path: %s", line);
		}
	}
	fclose(f);
	unlink(out);
	rmdir(tmp);
	/* strace saw both markers (so it traced), and nothing between them */
	assert_int_equal(markers, 2);
	assert_int_equal(between, 0);
}

/* ---- figures ---- */

static double ns_per_op(void *st, const struct resil_conf *c, long n)
{
	struct resil_ctx x = {0};
	struct resil_permit_priv pm = {0};
	int64_t t0 = test_mono_ns();

	for (long i = 0; i < n; i++)
		resil_stats_released(&x, c, st, &pm, RESIL_SUCCESS, (i & 1023) * 1000);
	return (double)(test_mono_ns() - t0) / (double)n;
}

static void test_bench(void **state)
{
	long n = 2000000L * resil_test_scale();

	for (int hist = 0; hist < 2; hist++) {
		struct resil_conf c;
		void *st;
		double one, two[2] = {0, 0};
		double *res;

		conf_hist(&c, hist, 0);
		st = new_state(&c);
		ns_per_op(st, &c, n / 10); /* warm */
		one = ns_per_op(st, &c, n);
		res = map_shared(4096);
		for (int i = 0; i < 2; i++) {
			pid_t pid = fork();

			assert_true(pid >= 0);
			if (pid == 0) {
				if (ncpus() > 1)
					pin_cpu(i);
				res[i] = ns_per_op(st, &c, n);
				_exit(0);
			}
		}
		for (int i = 0; i < 2; i++)
			assert_true(wait(NULL) > 0);
		two[0] = res[0];
		two[1] = res[1];
		print_message("stats release, histogram %s: 1 process %.2f ns/op; 2 processes "
			      "(pinned, own stripes) %.2f / %.2f ns/op\n",
			      hist ? "on " : "off", one, two[0], two[1]);
		munmap(res, 4096);
		munmap(st, resil_stats_state_size(&c));
	}
	/* through the library: acquire + release of a breaker policy, embedded */
	{
		static const char *const confs[] = {"breaker.window = count:100",
						    "breaker.window = count:100; histogram = on"};
		resil_t *r;

		assert_int_equal(resil_open_embedded(&r, NULL), 0);
		for (int h = 0; h < 2; h++) {
			char name[16];
			resil_policy_t *p;
			int64_t t0;
			long m = n / 4;

			snprintf(name, sizeof(name), "bench%d", h);
			assert_int_equal(resil_define(r, name, confs[h]), 0);
			assert_int_equal(resil_policy(r, name, &p), 0);
			t0 = test_mono_ns();
			for (long i = 0; i < m; i++) {
				resil_permit_t pm;

				if (resil_acquire(p, &pm) == 0)
					resil_release(p, &pm, RESIL_SUCCESS);
			}
			print_message("resil_acquire + resil_release, breaker, histogram %s: %.2f "
				      "ns/op\n",
				      h ? "on " : "off", (double)(test_mono_ns() - t0) / (double)m);
		}
		resil_close(r);
	}
	/* the same two processes on ONE line, for comparison: what striping avoids */
	{
		ra64 *word = map_shared(4096);
		double *res = map_shared(4096);

		for (int i = 0; i < 2; i++) {
			pid_t pid = fork();

			assert_true(pid >= 0);
			if (pid == 0) {
				int64_t t0;

				if (ncpus() > 1)
					pin_cpu(i);
				t0 = test_mono_ns();
				for (long k = 0; k < n; k++)
					faa_relaxed(word, 1);
				res[i] = (double)(test_mono_ns() - t0) / (double)n;
				_exit(0);
			}
		}
		for (int i = 0; i < 2; i++)
			assert_true(wait(NULL) > 0);
		assert_int_equal(ld_relaxed(word), 2 * (uint64_t)n);
		print_message("one shared counter line, 2 processes: %.2f / %.2f ns/op\n", res[0],
			      res[1]);
		munmap(res, 4096);
		munmap((void *)word, 4096);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_geometry),
	    cmocka_unit_test(test_counters_single),
	    cmocka_unit_test(test_one_atomic_per_call),
	    cmocka_unit_test(test_counters_forked_pinned),
	    cmocka_unit_test(test_counters_forked_unpinned),
	    cmocka_unit_test(test_stripe_is_cpu),
	    cmocka_unit_test(test_percentiles),
	    cmocka_unit_test(test_p95_cache),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_carry),
	    cmocka_unit_test(test_pcpu_threads_exact),
	    cmocka_unit_test(test_through_policy),
	    cmocka_unit_test(test_through_policy_forked),
	    cmocka_unit_test(test_no_syscall_strace),
	    cmocka_unit_test(test_bench),
	};

	if (argc == 3 && strcmp(argv[1], "--hot-loop") == 0)
		return hot_loop(atol(argv[2]));
	/* for callgrind: N acquire + release of an embedded breaker policy */
	if (argc == 4 && strcmp(argv[1], "--policy-loop") == 0) {
		long n = atol(argv[2]);
		resil_t *r;
		resil_policy_t *p;

		if (resil_open_embedded(&r, NULL) ||
		    resil_define(r, "b",
				 atoi(argv[3]) ? "histogram = on" : "breaker.min_calls = 100") ||
		    resil_policy(r, "b", &p))
			return 1;
		for (long i = 0; i < n; i++) {
			resil_permit_t pm;

			if (resil_acquire(p, &pm) == 0)
				resil_release(p, &pm, RESIL_SUCCESS);
		}
		resil_close(r);
		return 0;
	}
	/* for callgrind: N counted releases, histogram off (0) or on (1) */
	if (argc == 4 && strcmp(argv[1], "--count-loop") == 0) {
		struct resil_conf c;
		void *st;

		conf_hist(&c, atoi(argv[3]), 0);
		st = mmap(NULL, resil_stats_state_size(&c), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (st == MAP_FAILED)
			return 1;
		resil_stats_state_init(st, &c, 0);
		ns_per_op(st, &c, atol(argv[2]));
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

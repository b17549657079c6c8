/* SPDX-License-Identifier: MIT */
/*
 * unit_repair.c - hostile words in the blocks unit_trust.c does not cover
 * (adaptive limit, retry budget, counters and histogram, keyed limiter
 * tables, the breaker's window size copy), and adoption: on a real segment pair
 * (resil_seg_create) and a manual clock, a caller's acquire and release
 * and the daemon's maintain neither crash nor overflow (UBSan in the
 * sanitizer pass), the maintain pass repairs and counts what it acts on,
 * and decisions are sane afterwards:
 *   - adaptive: geometry copies, a phase outside the enum, the published
 *     limit at 0 (rejected every call until a window with samples) and
 *     at all ones, the estimate at the ends of uint64, epochs near
 *     INT64_MAX (a signed overflow once) and far ahead (no window was
 *     ever decided again), a probe far ahead, RTT sums that overflow a
 *     double's conversion;
 *   - retry budget: tokens at INT64_MAX (a signed overflow once, in the
 *     gRPC test and in the refill), INT64_MIN, the exhausted flag at 7;
 *   - counters: a p95 cache computed "at" more calls than were counted
 *     (hedging believed its value for ever), every counter and bucket at
 *     all ones;
 *   - keyed limiter: `used` above limit.keys, every bucket marked
 *     overflowing, fingerprints and key states at the ends of their range;
 *   - breaker: the window size copy at 0, 1 and all ones (had the callers
 *     taken their slot from it: a division by zero, or every record in
 *     one slot and a count window that never opens);
 *   - adoption: blocks whose layout copies are not the configuration's
 *     are reset and counted, a block with only a repairable word is not.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf.h"
#include "adaptive.h"
#include "breaker.h"
#include "budget.h"
#include "bulkhead.h"
#include "limit.h"
#include "policy.h"
#include "resil.h"
#include "seg.h"
#include "shed.h"
#include "stats.h"
#include "segfix.h"

/* One call: acquire, then release with outcome (or the verdict). */
static int call(struct resil_seg *s, const struct resil_rec *rec, int outcome, const char *key)
{
	struct resil_permit_priv pm = {0};
	struct resil_ctx x;
	int v;

	ctx_init(&x, s);
	v = resil_policy_acquire(&x, rec, &pm, key, key ? strlen(key) : 0);
	if (v == 0) {
		now_ns += RESIL_NS_PER_MS;
		ctx_init(&x, s);
		resil_policy_release(&x, rec, &pm, outcome);
	}
	return v;
}

/* The daemon's tick on rec: its repairs (the last word in *word). */
static uint32_t maintain(struct resil_seg *s, const struct resil_rec *rec, uint32_t *word)
{
	struct resil_ctx x;

	ctx_init(&x, s);
	resil_policy_maintain(&x, rec);
	if (word)
		*word = x.repair_word;
	return x.repairs;
}

/* Calls of every outcome for a while, a tick now and then: no crash. */
static uint32_t exercise(struct resil_seg *s, const struct resil_rec *rec, const char *key)
{
	uint32_t n = 0;

	for (int i = 0; i < 60; i++) {
		call(s, rec, i % 3 ? RESIL_SUCCESS : RESIL_FAILURE, key);
		now_ns += RESIL_NS_PER_S / 16;
		if (i % 20 == 19)
			n += maintain(s, rec, NULL);
	}
	return n;
}

/* ---- adaptive ---- */

static void test_adaptive(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec[2];
	const char *algo[2] = {"adaptive.algorithm = gradient2; adaptive.max = 40; "
			       "adaptive.window = 100ms; adaptive.probe = 5s",
			       "adaptive.algorithm = vegas; adaptive.max = 40; "
			       "adaptive.window = 100ms; adaptive.probe = 5s"};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec[0] = define(&s, "grad", algo[0]);
	rec[1] = define(&s, "vegas", algo[1]);
	for (int k = 0; k < 2; k++) {
		struct resil_adaptive_state *a = resil_comp_state(&s, rec[k], RESIL_C_ADAPTIVE);
		const uint64_t epochs[] = {(uint64_t)INT64_MAX - 1, (uint64_t)INT64_MAX, UINT64_MAX,
					   UINT64_MAX - 1, 0};
		uint32_t word;

		for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]); i++) {
			a->nslots = 0xffffffffu;
			a->shift = 31;
			a->slots_off = 0x7ffffff0u;
			a->prev_excess = INT32_MIN;
			st_relaxed(&a->phase, 7);
			st_relaxed(&a->limit, i % 2 ? 0xffffffffu : 0);
			st_relaxed(&a->limit_milli, i % 2 ? UINT64_MAX : 0);
			st_relaxed(&a->saved_milli, UINT64_MAX);
			st_relaxed(&a->epoch, epochs[i]);
			st_relaxed(&a->probe_at, i % 2 ? UINT64_MAX - 1 : (uint64_t)INT64_MAX - 5);
			st_relaxed(&a->long_rtt_x1k, UINT64_MAX);
			st_relaxed(&a->noload_ns, UINT64_MAX);
			st_relaxed(&a->rtt_sum, UINT64_MAX);
			st_relaxed(&a->rtt_count, 100);
			st_relaxed(&a->inflight, 0x80000000u);
			/* the tick first: what it repairs, then what the next
			 * callers decide on */
			assert_true(maintain(&s, rec[k], &word) >= 3);
			assert_true(ld_relaxed(&a->phase) <= RESIL_ADAPTIVE_PROBE_MEASURE);
			assert_int_equal(a->nslots, 40);
			assert_true(resil_adaptive_limit(a) >= 1 && resil_adaptive_limit(a) <= 40);
			assert_true(ld_relaxed(&a->limit_milli) >= 1000 &&
				    ld_relaxed(&a->limit_milli) <= 40000);
			/* far ahead: scheduled anew (all ones reads as due) */
			if (i % 2 == 0)
				assert_true(ld_relaxed(&a->probe_at) <=
					    (uint64_t)(now_ns + 7 * RESIL_NS_PER_S));
			/* the hint repaired over two ticks: a call is admitted */
			maintain(&s, rec[k], NULL);
			assert_int_equal(call(&s, rec[k], RESIL_SUCCESS, NULL), 0);
			exercise(&s, rec[k], NULL);
		}
		/* an epoch far ahead of the daemon's clock stopped every window */
		{
			uint64_t w0;

			st_relaxed(&a->epoch, (uint64_t)(now_ns + 3600 * RESIL_NS_PER_S) & ~1ull);
			assert_true(maintain(&s, rec[k], &word) >= 1);
			w0 = ld_relaxed(&a->windows);
			for (int i = 0; i < 200; i++) {
				call(&s, rec[k], RESIL_SUCCESS, NULL);
				now_ns += 2 * RESIL_NS_PER_MS;
			}
			assert_true(ld_relaxed(&a->windows) > w0);
		}
		/* sane: at most the limit at once, never more than adaptive.max */
		{
			struct resil_permit_priv pm[64];
			uint32_t got = 0, lim = resil_adaptive_limit(a);

			for (int i = 0; i < 64; i++) {
				struct resil_ctx x;

				memset(&pm[i], 0, sizeof(pm[i]));
				ctx_init(&x, &s);
				if (resil_policy_acquire(&x, rec[k], &pm[i], NULL, 0) == 0)
					got++;
			}
			assert_int_equal(got, lim);
			for (int i = 0; i < 64; i++) {
				struct resil_ctx x;

				ctx_init(&x, &s);
				resil_policy_release(&x, rec[k], &pm[i], RESIL_IGNORED);
			}
			assert_int_equal(resil_adaptive_held(&rec[k]->conf.adaptive, a), 0);
		}
	}
	resil_seg_unmap(&s);
}

/* ---- retry budget ---- */

static void test_budget(void **state)
{
	struct resil_seg s;
	const struct resil_rec *g, *a;
	struct resil_budget_state *b;
	const int64_t tokens[] = {INT64_MAX, INT64_MIN, -1, INT64_MAX - 500};
	uint32_t cost, word;
	bool first;

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	g = define(&s, "grpc", "retry.budget = grpc:10:0.1");
	a = define(&s, "aws", "retry.budget = aws:20");
	for (int k = 0; k < 2; k++) {
		const struct resil_rec *rec = k ? a : g;
		const struct resil_retry_conf *bc = &rec->conf.retry;

		b = resil_comp_state(&s, rec, RESIL_C_BUDGET);
		for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
			st_relaxed(&b->tokens_milli, tokens[i]);
			st_relaxed(&b->exhausted, 0xffffffffu);
			/* callers first: no overflow whatever the word holds */
			resil_budget_try_retry(b, bc, RESIL_ERR_TRANSIENT, false, now_ns, &cost,
					       &first);
			resil_budget_record(b, bc, true, false, 1, 0);
			resil_budget_record(b, bc, false, true, 2, 0);
			st_relaxed(&b->tokens_milli, tokens[i]);
			st_relaxed(&b->exhausted, 7);
			/* the tick: both words repaired and counted */
			assert_int_equal(maintain(&s, rec, &word), 2);
			assert_true(ld_relaxed(&b->tokens_milli) >= 0 &&
				    ld_relaxed(&b->tokens_milli) <= (int64_t)bc->budget_max * 1000);
			assert_true(ld_relaxed(&b->exhausted) <= 1);
			assert_int_equal(maintain(&s, rec, NULL), 0);
		}
		/* sane: full again, a retry is paid and allowed */
		st_relaxed(&b->tokens_milli, (int64_t)bc->budget_max * 1000);
		assert_int_equal(resil_budget_try_retry(b, bc, RESIL_ERR_TRANSIENT, false, now_ns,
							&cost, &first),
				 0);
	}
	resil_seg_unmap(&s);
}

/* ---- counters and histogram ---- */

static void test_stats(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec;
	void *st;
	uint32_t word;
	int64_t p95, lo, hi;
	char buf[4096];

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec = define(&s, "hist", "histogram = on");
	st = resil_comp_state(&s, rec, RESIL_C_STATS);
	for (int i = 0; i < 200; i++)
		call(&s, rec, RESIL_SUCCESS, NULL); /* 1 ms each */
	p95 = resil_stats_p95_ns(&s, rec);
	assert_true(p95 > 0);
	/* the cache "computed" at more calls than were counted, at a value no
	 * histogram gives: believed until the count caught up (never) */
	{
		rai64 *p95w = (rai64 *)((char *)st + RESIL_STATS_STRIPES * RESIL_HOT_ALIGN);
		ra64 *calls = (ra64 *)(p95w + 1);

		st_relaxed(p95w, INT64_MAX);
		st_relaxed(calls, UINT64_MAX);
		/* a caller recomputes it at once */
		assert_int_equal(resil_stats_p95_ns(&s, rec), p95);
		st_relaxed(p95w, INT64_MAX);
		st_relaxed(calls, UINT64_MAX);
		assert_int_equal(maintain(&s, rec, &word), 1);
		assert_int_equal(word, RESIL_W_STATS_P95);
		assert_int_equal(ld_relaxed(p95w), 0);
		assert_int_equal(resil_stats_p95_ns(&s, rec), p95);
		assert_int_equal(maintain(&s, rec, NULL), 0);
	}
	/* every counter and bucket at all ones: readers sum, nothing breaks */
	memset(st, 0xff, resil_stats_state_size(&rec->conf));
	assert_true(resil_stats_format(&s, rec, buf, sizeof(buf)) > 0);
	maintain(&s, rec, NULL);
	p95 = resil_stats_p95_ns(&s, rec);
	lo = resil_hist_lower_ns(0);
	hi = resil_hist_lower_ns(RESIL_HIST_BUCKETS - 1);
	assert_true(p95 >= lo && p95 <= hi);
	exercise(&s, rec, NULL);
	resil_seg_unmap(&s);
}

/* ---- keyed limiter ---- */

static void test_limit_keyed(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec[2];
	uint32_t word;
	char key[32];

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec[0] = define(&s, "kg", "limit.rate = 100/s; limit.keys = 64");
	rec[1] = define(&s, "ks", "limit.rate = 100/s; limit.keys = 64; limit.algorithm = sliding");
	for (int k = 0; k < 2; k++) {
		struct resil_limit_state *ls = resil_comp_state(&s, rec[k], RESIL_C_LIMIT);
		struct resil_limit_entry *t = (struct resil_limit_entry *)(void *)ls->data;
		uint32_t n = 64 / 2 * RESIL_LIMIT_BUCKET;
		struct resil_limit_info info;

		for (int i = 0; i < 20; i++) {
			snprintf(key, sizeof(key), "key-%d", i);
			assert_int_equal(call(&s, rec[k], RESIL_SUCCESS, key), 0);
		}
		/* a count above limit.keys: no key could be added any more */
		st_relaxed(&ls->used, UINT64_MAX);
		assert_int_equal(maintain(&s, rec[k], &word), 1);
		assert_int_equal(word, RESIL_W_LIMIT_USED);
		assert_int_equal(ld_relaxed(&ls->used), 20);
		snprintf(key, sizeof(key), "key-new");
		assert_int_equal(call(&s, rec[k], RESIL_SUCCESS, key), 0);
		/* every bucket "overflowing", fingerprints and states at the ends
		 * of their ranges: every lookup walks the table, the tick walks a
		 * bounded part of each chain; nothing crashes or overflows */
		for (uint32_t i = 0; i < n; i++) {
			const uint64_t fps[] = {UINT64_MAX, 1ULL << 63 | 2, 2, 1ULL << 63 | 1};
			const uint64_t sts[] = {UINT64_MAX, (uint64_t)INT64_MAX, 1ULL << 63, 0};

			st_relaxed(&t[i].fp,
				   fps[i % 4] | (i % RESIL_LIMIT_BUCKET ? 0 : 1ULL << 63));
			st_relaxed(&t[i].st, sts[(i / 4) % 4]);
		}
		st_relaxed(&ls->used, 64);
		for (int i = 0; i < 40; i++) {
			snprintf(key, sizeof(key), "k2-%d", i % 10);
			call(&s, rec[k], i % 2 ? RESIL_SUCCESS : RESIL_FAILURE, key);
			now_ns += RESIL_NS_PER_S / 4;
			if (i % 10 == 9)
				maintain(&s, rec[k], NULL);
		}
		resil_limit_info(&rec[k]->conf.limit, ls, &info);
		assert_true(info.size <= 64);
		/* sane: once the tick freed what is idle, new keys go in */
		now_ns += 10 * RESIL_NS_PER_S;
		maintain(&s, rec[k], NULL);
		now_ns += 2 * RESIL_NS_PER_S;
		maintain(&s, rec[k], NULL);
		snprintf(key, sizeof(key), "fresh");
		assert_int_equal(call(&s, rec[k], RESIL_SUCCESS, key), 0);
	}
	resil_seg_unmap(&s);
}

/* ---- breaker window size copy ---- */

static void test_breaker_size_copy(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec;
	struct resil_breaker_state *b;
	const uint32_t sizes[] = {0, 1, UINT32_MAX};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec = define(&s, "fm",
		     "breaker.window = count:10; breaker.min_calls = 10; "
		     "breaker.failure_rate = 50%; breaker.wait = 1h");
	b = resil_comp_state(&s, rec, RESIL_C_BREAKER);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct resil_ctx x;

		ctx_init(&x, &s);
		assert_int_equal(resil_policy_force(&x, rec, RESIL_STATE_CLOSED), 0);
		/* between two ticks: the callers' slot choice alone */
		b->size = sizes[i];
		for (int k = 0; k < 10; k++)
			call(&s, rec, RESIL_FAILURE, NULL);
		assert_int_equal(resil_breaker_state(b), RESIL_STATE_OPEN);
	}
	resil_seg_unmap(&s);
}

/* ---- adoption ---- */

static uint32_t adopt(struct resil_seg *s, const struct resil_rec *rec, uint32_t *repairs)
{
	struct resil_ctx x;

	ctx_init(&x, s);
	resil_policy_adopt(&x, rec);
	if (repairs)
		*repairs = x.repairs;
	return x.resets;
}

static void test_adopt(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec, *proc;
	struct resil_breaker_state *b;
	struct resil_bulkhead_state *h;
	struct resil_adaptive_state *a;
	struct resil_shed_state *sh;
	uint32_t repairs;

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec = define(&s, "all",
		     "breaker.window = count:10; breaker.wait = 1h; bulkhead.max = 4; "
		     "adaptive.max = 8; shed.window = 2s; limit.rate = 10/s; limit.burst = 10; "
		     "limit.keys = 8; histogram = on; retry.budget = grpc:10:0.1");
	b = resil_comp_state(&s, rec, RESIL_C_BREAKER);
	h = resil_comp_state(&s, rec, RESIL_C_BULKHEAD);
	a = resil_comp_state(&s, rec, RESIL_C_ADAPTIVE);
	sh = resil_comp_state(&s, rec, RESIL_C_SHED);

	/* a healthy block: nothing reset, nothing repaired */
	assert_int_equal(adopt(&s, rec, &repairs), 0);
	assert_int_equal(repairs, 0);

	/* repairable alone (layout intact): repaired, not reset */
	st_relaxed(&b->word, (ld_relaxed(&b->word) & ~7ULL) | 7);
	sh->width_ns = 2 * RESIL_NS_PER_S / RESIL_SHED_BUCKETS;
	assert_int_equal(adopt(&s, rec, &repairs), 0);
	assert_true(repairs >= 1);
	assert_int_equal(resil_breaker_state(b), RESIL_STATE_CLOSED);

	/* every block's layout copies scribbled on: each reset, fresh */
	{
		struct resil_ctx x;

		ctx_init(&x, &s);
		assert_int_equal(resil_policy_force(&x, rec, RESIL_STATE_FORCED_OPEN), 0);
	}
	b->win_off = 0xfffffff0u;
	h->nslots = 0;
	a->slots_off = 12;
	sh->width_ns = 0;
	assert_false(resil_breaker_layout_ok(&rec->conf.breaker, b));
	assert_false(resil_bulkhead_layout_ok(&rec->conf.bulkhead, h));
	assert_false(resil_adaptive_layout_ok(&rec->conf.adaptive, a));
	assert_false(resil_shed_layout_ok(&rec->conf.shed, sh));
	assert_int_equal(adopt(&s, rec, &repairs), 4);
	assert_int_equal(resil_breaker_state(b), RESIL_STATE_CLOSED);
	assert_true(resil_breaker_layout_ok(&rec->conf.breaker, b));
	assert_true(resil_bulkhead_layout_ok(&rec->conf.bulkhead, h));
	assert_true(resil_adaptive_layout_ok(&rec->conf.adaptive, a));
	assert_true(resil_shed_layout_ok(&rec->conf.shed, sh));
	assert_int_equal(adopt(&s, rec, &repairs), 0);
	assert_int_equal(repairs, 0);
	/* and decides: four permits of the bulkhead, then full */
	{
		struct resil_permit_priv pm[5];
		int got = 0;

		for (int i = 0; i < 5; i++) {
			struct resil_ctx x;

			memset(&pm[i], 0, sizeof(pm[i]));
			ctx_init(&x, &s);
			/* a key (the limiter is keyed: none would be -EINVAL) */
			got += resil_policy_acquire(&x, rec, &pm[i], "k", 1) == 0;
		}
		assert_int_equal(got, 4);
		for (int i = 0; i < 5; i++) {
			struct resil_ctx x;

			ctx_init(&x, &s);
			resil_policy_release(&x, rec, &pm[i], RESIL_SUCCESS);
		}
	}

	/* process scope: a copy of a row nobody holds is checked too */
	proc = define(&s, "proc", "policy.scope = process; breaker.window = count:10");
	{
		struct resil_breaker_state *pb =
		    (struct resil_breaker_state *)((char *)s.st + proc->proc_off +
						   3 * proc->proc_stride +
						   proc->comp_off[RESIL_C_BREAKER]);

		pb->size = 12345;
		assert_int_equal(adopt(&s, proc, NULL), 1);
		assert_true(resil_breaker_layout_ok(&proc->conf.breaker, pb));
	}
	resil_seg_unmap(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_adaptive),
	    cmocka_unit_test(test_budget),
	    cmocka_unit_test(test_stats),
	    cmocka_unit_test(test_limit_keyed),
	    cmocka_unit_test(test_breaker_size_copy),
	    cmocka_unit_test(test_adopt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

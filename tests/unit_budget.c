/* SPDX-License-Identifier: MIT */
/*
 * unit_budget.c - retry budgets (shm/budget.c) on a simulated dependency
 * that fails a fraction of the attempts, seeded: AWS retry quota drains
 * above its thresholds and not below (4 forked processes on one budget in
 * a MAP_SHARED page for the main cases), gRPC throttling stops retries at
 * half, the ratio budget caps retries per window on a manual clock.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "budget.h"
#include "conf.h"

#define S RESIL_NS_PER_S

static int scale(void)
{
	const char *s = getenv("RESIL_TEST_SCALE");
	int v = s ? atoi(s) : 1;

	return v > 0 ? v : 1;
}

static void *shared_budget(const struct resil_retry_conf *c)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	resil_budget_state_init(p, c, 0);
	return p;
}

static void conf_budget(struct resil_retry_conf *c, const char *budget)
{
	char err[256];

	resil_retry_conf_defaults(c);
	if (resil_retry_conf_set(c, "retry.budget", budget, err, sizeof(err)) != 0)
		fail_msg("%s", err);
}

struct sim {
	uint64_t requests, attempts, retries, refused, failed_requests;
	int64_t min_tokens;
};

/*
 * n requests against a dependency failing each attempt with probability
 * fail_pm / 1000 with class cls; retries decided by the engine and paid by
 * the budget. Time does not move (no deadline).
 */
static void simulate(const struct resil_retry_conf *c, void *budget, uint64_t seed, int n,
		     uint32_t fail_pm, uint32_t cls, struct sim *out)
{
	struct resil_random rnd = {0};
	uint64_t s = seed;

	memset(out, 0, sizeof(*out));
	out->min_tokens = INT64_MAX;
	for (int i = 0; i < n; i++) {
		struct resil_retry_priv rt = {0};

		resil_retry_engine_begin(&rt, 1 * S, 0);
		resil_budget_begin(budget, c, 1 * S);
		out->requests++;
		for (;;) {
			bool fails = resil_splitmix64(&s) % 1000 < fail_pm;
			int64_t d;

			out->attempts++;
			d = resil_retry_engine_next(&rt, c, budget, c, fails ? cls : RESIL_ERR_NONE,
						    0, 1 * S, &rnd);
			if (d < 0) {
				if (rt.reason == RESIL_RSTOP_BUDGET)
					out->refused++;
				if (rt.reason != RESIL_RSTOP_SUCCESS)
					out->failed_requests++;
				break;
			}
			out->retries++;
		}
		int64_t t = resil_budget_tokens_milli(budget, c, 1 * S);

		if (t < out->min_tokens)
			out->min_tokens = t;
	}
}

/* 4 processes share one budget; the parent sums what they saw. */
static void simulate_fleet(const struct resil_retry_conf *c, void *budget, int per_proc,
			   uint32_t fail_pm, uint32_t cls, struct sim *sum)
{
	struct sim *res =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[4];

	assert_true(res != MAP_FAILED);
	for (int k = 0; k < 4; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			simulate(c, budget, 0x5eed0000u + (uint64_t)k, per_proc, fail_pm, cls,
				 &res[k]);
			_exit(0);
		}
	}
	memset(sum, 0, sizeof(*sum));
	sum->min_tokens = INT64_MAX;
	for (int k = 0; k < 4; k++) {
		int st;

		assert_int_equal(waitpid(pids[k], &st, 0), pids[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		sum->requests += res[k].requests;
		sum->attempts += res[k].attempts;
		sum->retries += res[k].retries;
		sum->refused += res[k].refused;
		if (res[k].min_tokens < sum->min_tokens)
			sum->min_tokens = res[k].min_tokens;
	}
	munmap(res, 4096);
}

static void test_aws_fleet_30_drains_15_not(void **state)
{
	struct resil_retry_conf c;
	struct resil_budget_state *b;
	struct sim s;
	int n = 2000 * scale();

	(void)state;
	conf_budget(&c, "aws:500");
	assert_int_equal(c.max_attempts, 3);

	b = shared_budget(&c);
	assert_int_equal(ld_relaxed(&b->tokens_milli), 500 * 1000);
	simulate_fleet(&c, b, n, 300, RESIL_ERR_TRANSIENT, &s);
	assert_int_equal(s.requests, 4 * (uint64_t)n);
	/* drained: retries refused, the bucket below one retry's cost */
	assert_true(s.refused > 0);
	assert_true(s.min_tokens < RESIL_AWS_COST_TRANSIENT * 1000);
	assert_int_equal(ld_relaxed(&b->counters[RESIL_BUDGET_CNT_REFUSED]), s.refused);
	assert_int_equal(ld_relaxed(&b->counters[RESIL_BUDGET_CNT_RETRIES]), s.retries);
	munmap(b, 4096);

	b = shared_budget(&c);
	simulate_fleet(&c, b, n, 150, RESIL_ERR_TRANSIENT, &s);
	assert_int_equal(s.refused, 0);
	assert_true(s.retries > 0);
	/* never came near empty */
	assert_true(s.min_tokens > 300 * 1000);
	munmap(b, 4096);
}

/* The thresholds of seed 002: ~22% transient, ~32% throttling. */
static void test_aws_thresholds(void **state)
{
	static const struct {
		uint32_t fail_pm, cls;
		bool drains;
	} cases[] = {
	    {180, RESIL_ERR_TRANSIENT, false}, {260, RESIL_ERR_TRANSIENT, true},
	    {280, RESIL_ERR_THROTTLED, false}, {360, RESIL_ERR_THROTTLED, true},
	    {180, RESIL_ERR_TIMEOUT, false},   {260, RESIL_ERR_TIMEOUT, true},
	};
	struct resil_retry_conf c;

	(void)state;
	conf_budget(&c, "aws:500");
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(cases); i++) {
		void *b = shared_budget(&c);
		struct sim s;

		simulate(&c, b, 42 + i, 8000 * scale(), cases[i].fail_pm, cases[i].cls, &s);
		if (cases[i].drains)
			assert_true(s.refused > 0);
		else
			assert_int_equal(s.refused, 0);
		munmap(b, 4096);
	}
}

static void test_aws_exact(void **state)
{
	struct resil_retry_conf c;
	struct resil_random rnd = {0};
	struct resil_retry_priv rt;
	void *b;

	(void)state;
	conf_budget(&c, "aws:20");
	b = shared_budget(&c);
	/* a first attempt that succeeds refunds 1 (capped at the max) */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_NONE, 0, 1, &rnd) < 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 20000);
	/* a retry after a transient error costs 14; success refunds it */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_TRANSIENT, 0, 1, &rnd) >= 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 6000);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_NONE, 0, 1, &rnd) < 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 20000);
	/* throttling costs 5; a give-up refunds nothing */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_THROTTLED, 0, 1, &rnd) >= 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_THROTTLED, 0, 1, &rnd) >= 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 10000);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_THROTTLED, 0, 1, &rnd) < 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_ATTEMPTS);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 10000);
	/* 10 left: a transient retry (14) is refused, a throttled one (5) is not */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_TRANSIENT, 0, 1, &rnd) < 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_BUDGET);
	{
		char buf[128];

		assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
				    "retry budget exhausted");
	}
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_THROTTLED, 0, 1, &rnd) >= 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 5000);
	munmap(b, 4096);
}

static void test_grpc(void **state)
{
	struct resil_retry_conf c;
	struct resil_random rnd = {0};
	struct resil_retry_priv rt;
	void *b;
	int retries = 0;

	(void)state;
	conf_budget(&c, "grpc:10:0.1");
	b = shared_budget(&c);
	/* always failing: 10 -> 9 (retry) -> 8 (retry) -> 7 (3 attempts);
	 * 6 (retry) -> 5: not above half, refused */
	for (int i = 0; i < 3; i++) {
		resil_retry_engine_begin(&rt, 1, 0);
		while (resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_TRANSIENT, 0, 1, &rnd) >=
		       0)
			retries++;
		if (rt.reason == RESIL_RSTOP_BUDGET)
			break;
	}
	assert_int_equal(retries, 3);
	assert_int_equal(rt.reason, RESIL_RSTOP_BUDGET);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 5000);
	/* permanent errors are not retryable: they cost nothing */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_PERMANENT, 0, 1, &rnd) < 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 5000);
	/* one success: 5.1 > 5, retries allowed again */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_NONE, 0, 1, &rnd) < 0);
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 5100);
	resil_retry_engine_begin(&rt, 1, 0);
	/* this failure costs 1 first: 4.1, refused */
	assert_true(resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_TRANSIENT, 0, 1, &rnd) < 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_BUDGET);
	for (int i = 0; i < 100; i++) {
		resil_retry_engine_begin(&rt, 1, 0);
		resil_retry_engine_next(&rt, &c, b, &c, RESIL_ERR_NONE, 0, 1, &rnd);
	}
	/* capped at max */
	assert_int_equal(resil_budget_tokens_milli(b, &c, 1), 10000);
	munmap(b, 4096);
}

/* 4 processes at 60% failures on grpc:100:0.1: the tokens settle around
 * half and retries are refused; no process sees them above the max. */
static void test_grpc_fleet(void **state)
{
	struct resil_retry_conf c;
	struct sim s;
	void *b;

	(void)state;
	conf_budget(&c, "grpc:100:0.1");
	b = shared_budget(&c);
	simulate_fleet(&c, b, 1000 * scale(), 600, RESIL_ERR_TRANSIENT, &s);
	assert_true(s.refused > 0);
	assert_true(s.min_tokens <= 50 * 1000);
	assert_true(resil_budget_tokens_milli(b, &c, 1) <= 100 * 1000);
	/* with retries refused below half, they are a small part of the
	 * attempts: far from the 2 retries per request an unbounded loop makes */
	assert_true(s.retries * 4 < s.requests);
	munmap(b, 4096);
}

/* try a retry at time t; *first: the refusal started an exhaustion episode */
static int try_at(void *b, const struct resil_retry_conf *c, int64_t t, bool *first)
{
	uint32_t cost;

	return resil_budget_try_retry(b, c, RESIL_ERR_TRANSIENT, false, t, &cost, first);
}

static void test_ratio(void **state)
{
	struct resil_retry_conf c;
	int64_t t = 1000 * S;
	bool first;
	void *b;

	(void)state;
	conf_budget(&c, "ratio:10");
	b = shared_budget(&c);
	/* nothing begun: no retry; the first refusal of an episode says so */
	assert_int_equal(try_at(b, &c, t, &first), RESIL_REJECT_BUDGET);
	assert_true(first);
	assert_int_equal(try_at(b, &c, t, &first), RESIL_REJECT_BUDGET);
	assert_false(first);
	for (int i = 0; i < 100; i++)
		resil_budget_begin(b, &c, t + (i % 5) * S);
	for (int i = 0; i < 10; i++)
		assert_int_equal(try_at(b, &c, t + 5 * S, &first), 0);
	assert_int_equal(try_at(b, &c, t + 5 * S, &first), RESIL_REJECT_BUDGET);
	assert_true(first);
	/* at t + 11 s the buckets of t + 0 s, 1 s and 2 s left the window: 40
	 * requests remain, the 10 retries of t + 5 s stay: 4 < 11 */
	assert_int_equal(try_at(b, &c, t + 11 * S + 1, &first), RESIL_REJECT_BUDGET);
	assert_false(first);
	/* all gone after the window */
	assert_int_equal(resil_budget_tokens_milli(b, &c, t + 30 * S), 0);
	for (int i = 0; i < 20; i++)
		resil_budget_begin(b, &c, t + 30 * S);
	assert_int_equal(try_at(b, &c, t + 30 * S, &first), 0);
	assert_int_equal(try_at(b, &c, t + 30 * S, &first), 0);
	assert_int_equal(try_at(b, &c, t + 30 * S, &first), RESIL_REJECT_BUDGET);
	assert_true(first);
	munmap(b, 4096);
}

static void test_carry(void **state)
{
	struct resil_retry_conf a, g;
	void *ob, *nb;

	(void)state;
	conf_budget(&a, "aws:500");
	conf_budget(&g, "grpc:10:0.5");
	ob = shared_budget(&a);
	nb = shared_budget(&g);
	st_relaxed(&((struct resil_budget_state *)ob)->tokens_milli, 100 * 1000);
	assert_true(resil_budget_same_shape(&a, &a));
	assert_false(resil_budget_same_shape(&a, &g));
	resil_budget_carry(nb, &g, ob, &a, 0);
	/* a fifth of the bucket left stays a fifth */
	assert_int_equal(resil_budget_tokens_milli(nb, &g, 0), 2000);
	munmap(ob, 4096);
	munmap(nb, 4096);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_aws_exact),
	    cmocka_unit_test(test_aws_fleet_30_drains_15_not),
	    cmocka_unit_test(test_aws_thresholds),
	    cmocka_unit_test(test_grpc),
	    cmocka_unit_test(test_grpc_fleet),
	    cmocka_unit_test(test_ratio),
	    cmocka_unit_test(test_carry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

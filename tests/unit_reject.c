/* SPDX-License-Identifier: MIT */
/*
 * unit_reject.c - what a refusal says, and which calls are mistakes
 * (embedded mode, a manual clock: every figure exact).
 *
 *   - Retry-After: an OPEN breaker's rejection carries the time to its
 *     next probe (resil_permit_wait_ns), on the lean path (a breaker
 *     alone, a wait of 100 ms or more), the general path (a slow-call
 *     rate) and a short wait; FORCED_OPEN and a full bulkhead carry none,
 *     a bulkhead refusing after a limiter's reservation neither; a
 *     limiter's refusal keeps its wait;
 *   - keys: a call without a key on a keyed limiter is -EINVAL, unless
 *     limit.default_key names the key it then counts against; a key on a
 *     policy without a keyed limiter is -EINVAL on every kind of decision
 *     (each lean one, the general one, a handle not bound yet), holding
 *     nothing and counting nothing; limit.default_key without limit.keys
 *     is refused;
 *   - resil_reset of a policy whose only state is a retry budget fills it
 *     again (it had no breaker to close).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "budget.h"
#include "stats.h"
#include "testutil.h"

#define MS (1000 * 1000LL)
#define S  (1000 * MS)

struct env {
	resil_t *r;
	struct test_clock *clk;
};

static int setup(void **state)
{
	static struct env e;

	assert_int_equal(resil_open_embedded(&e.r, NULL), 0);
	e.clk = test_clock_new(1000 * S);
	assert_int_equal(resil_set_clock(e.r, test_clock_fn, e.clk), 0);
	*state = &e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	resil_close(e->r);
	test_clock_free(e->clk);
	return 0;
}

static resil_policy_t *def(resil_t *r, const char *name, const char *config)
{
	resil_policy_t *p = NULL;

	assert_int_equal(resil_define(r, name, config), 0);
	assert_int_equal(resil_policy(r, name, &p), 0);
	return p;
}

/* One call that fails, to open a consecutive:1 breaker. */
static void fail_once(resil_policy_t *p)
{
	resil_permit_t pm;

	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_FAILURE);
}

static void test_open_retry_after(void **state)
{
	struct env *e = *state;
	resil_policy_t *lean, *gen, *quick;
	resil_permit_t pm;

	lean = def(e->r, "ra_lean", "breaker.window = consecutive:1; breaker.wait = 10s");
	gen =
	    def(e->r, "ra_gen",
		"breaker.window = consecutive:1; breaker.wait = 10s; breaker.slow_call_rate = 50");
	quick = def(e->r, "ra_quick", "breaker.window = consecutive:1; breaker.wait = 50ms");
	fail_once(lean);
	fail_once(gen);
	fail_once(quick);
	/* all three opened at 1000 s */
	test_clock_advance(e->clk, 20 * MS);
	assert_int_equal(resil_acquire(quick, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_permit_wait_ns(&pm), 30 * MS);
	test_clock_set(e->clk, 1003 * S);
	assert_int_equal(resil_acquire(lean, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_permit_wait_ns(&pm), 7 * S);
	assert_int_equal(resil_acquire(gen, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_permit_wait_ns(&pm), 7 * S);
	test_clock_advance(e->clk, 6 * S);
	assert_int_equal(resil_acquire(lean, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_permit_wait_ns(&pm), 1 * S);
	/* on the process's clock (a coarse reading, which may lag the one
	 * the breaker opened at): never above the wait */
	{
		resil_policy_t *real;

		assert_int_equal(resil_set_clock(e->r, NULL, NULL), 0);
		real = def(e->r, "ra_real", "breaker.window = consecutive:1; breaker.wait = 30s");
		fail_once(real);
		for (int i = 0; i < 1000; i++) {
			assert_int_equal(resil_acquire(real, &pm), RESIL_REJECT_OPEN);
			assert_true(resil_permit_wait_ns(&pm) > 29 * S);
			assert_true(resil_permit_wait_ns(&pm) <= 30 * S);
		}
		assert_int_equal(resil_set_clock(e->r, test_clock_fn, e->clk), 0);
	}
	/* forced open: no probe to wait for */
	assert_int_equal(resil_force_state(e->r, "ra_lean", RESIL_STATE_OPEN), 0);
	assert_int_equal(resil_acquire(lean, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_permit_wait_ns(&pm), 0);
}

static void test_full_no_retry_after(void **state)
{
	struct env *e = *state;
	resil_policy_t *bh, *both;
	resil_permit_t held, pm;

	bh = def(e->r, "na_bh", "bulkhead.max = 1");
	assert_int_equal(resil_acquire(bh, &held), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bh, &pm), RESIL_REJECT_FULL);
	assert_int_equal(resil_permit_wait_ns(&pm), 0);
	resil_release(bh, &held, RESIL_SUCCESS);
	/* a limiter that reserves (a wait) before a full bulkhead */
	both = def(e->r, "na_both",
		   "limit.rate = 1/s; limit.burst = 1; limit.wait = 5s; bulkhead.max = 1");
	assert_int_equal(resil_acquire(both, &held), RESIL_ADMIT);
	assert_int_equal(resil_acquire(both, &pm), RESIL_REJECT_FULL);
	assert_int_equal(resil_permit_wait_ns(&pm), 0);
	resil_release(both, &held, RESIL_SUCCESS);
}

static void test_limited_keeps_wait(void **state)
{
	struct env *e = *state;
	resil_policy_t *p = def(e->r, "lw", "limit.rate = 1/10s; limit.burst = 1");
	resil_permit_t pm;

	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&pm), 10 * S);
}

static int key_call(resil_policy_t *p, const char *key)
{
	resil_permit_t pm;
	int v = key ? resil_acquire_key(p, key, strlen(key), &pm) : resil_acquire(p, &pm);

	if (v == RESIL_ADMIT)
		resil_release(p, &pm, RESIL_SUCCESS);
	return v;
}

static void test_keys(void **state)
{
	struct env *e = *state;
	resil_policy_t *k, *kd, *ks;

	k = def(e->r, "k", "limit.rate = 1/h; limit.burst = 1; limit.keys = 100");
	assert_int_equal(resil_policy_keyed(k), 1);
	assert_int_equal(key_call(k, NULL), -EINVAL);
	assert_int_equal(key_call(k, "a"), RESIL_ADMIT);
	assert_int_equal(key_call(k, "a"), RESIL_REJECT_LIMITED);
	/* the keyed limiter of the general path too (sliding, with a breaker) */
	ks = def(e->r, "ks",
		 "limit.rate = 1/h; limit.burst = 1; limit.keys = 100; "
		 "limit.algorithm = sliding-approx; breaker.failure_rate = 50");
	assert_int_equal(key_call(ks, NULL), -EINVAL);
	assert_int_equal(key_call(ks, "a"), RESIL_ADMIT);
	/* a default key: keyless calls count against it */
	kd = def(e->r, "kd",
		 "limit.rate = 1/h; limit.burst = 1; limit.keys = 100; "
		 "limit.default_key = anonymous");
	assert_int_equal(key_call(kd, NULL), RESIL_ADMIT);
	assert_int_equal(key_call(kd, NULL), RESIL_REJECT_LIMITED);
	assert_int_equal(key_call(kd, "anonymous"), RESIL_REJECT_LIMITED);
	assert_int_equal(key_call(kd, "b"), RESIL_ADMIT);
	assert_int_equal(resil_define(e->r, "kbad", "limit.rate = 1/s; limit.default_key = x"),
			 -EINVAL);
	assert_non_null(strstr(resil_last_error(), "limit.default_key"));
	assert_int_equal(resil_define(e->r, "kbad",
				      "limit.rate = 1/s; limit.keys = 10; "
				      "limit.default_key = a b"),
			 -EINVAL);
}

static void test_key_on_unkeyed(void **state)
{
	static const struct {
		const char *name, *config;
	} kinds[] = {
	    {"u_stats", "policy.scope = fleet"},
	    {"u_breaker", "breaker.window = consecutive:5"},
	    {"u_gcra", "limit.rate = 100/s"},
	    {"u_sliding", "limit.rate = 100/s; limit.algorithm = sliding"},
	    {"u_bulkhead", "bulkhead.max = 2"},
	    {"u_bulkhead_wait", "bulkhead.max = 2; bulkhead.wait = 1s"},
	    {"u_stack", "breaker.window = consecutive:5; limit.rate = 100/s; bulkhead.max = 2"},
	    {"u_general", "adaptive.max = 10; shed.k = 2"},
	};
	struct env *e = *state;

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		resil_policy_t *p = def(e->r, kinds[i].name, kinds[i].config);
		const struct resil_rec *rec = test_rec_of(e->r, kinds[i].name);
		const void *st = resil_stats_state_of(&e->r->seg, rec);
		struct resil_req req = {.key = "k", .key_len = 1, .priority = RESIL_PRIO_CRITICAL};
		resil_permit_t pm;

		assert_int_equal(resil_policy_keyed(p), 0);
		assert_int_equal(key_call(p, "k"), -EINVAL);
		assert_int_equal(resil_acquire_ex(p, &req, &pm), -EINVAL);
		/* held nothing, counted nothing */
		assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), 0);
		assert_int_equal(key_call(p, NULL), RESIL_ADMIT);
		/* a handle not bound yet (its policy re-defined) */
		assert_int_equal(resil_define(e->r, kinds[i].name, kinds[i].config), 0);
		assert_int_equal(resil_define(e->r, kinds[i].name, "histogram = on"), 0);
		assert_int_equal(key_call(p, "k"), -EINVAL);
	}
}

static void test_reset_budget(void **state)
{
	struct env *e = *state;
	const struct resil_rec *rec;
	struct resil_budget_state *b;

	(void)def(e->r, "rb", "retry.budget = grpc:10:0.1");
	rec = test_rec_of(e->r, "rb");
	b = resil_comp_state(&e->r->seg, rec, RESIL_C_BUDGET);
	assert_int_equal(ld_relaxed(&b->tokens_milli), 10000);
	st_relaxed(&b->tokens_milli, 1500);
	st_relaxed(&b->exhausted, 1);
	assert_int_equal(resil_reset(e->r, "rb"), 0);
	assert_int_equal(ld_relaxed(&b->tokens_milli), 10000);
	assert_int_equal(ld_relaxed(&b->exhausted), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_open_retry_after, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_full_no_retry_after, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_limited_keeps_wait, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_on_unkeyed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reset_budget, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

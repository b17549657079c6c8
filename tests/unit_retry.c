/* SPDX-License-Identifier: MIT */
/*
 * unit_retry.c - the retry engine (shm/budget.c) on a manual clock and a
 * seeded random source: exact delay sequences for every jitter kind, rule
 * order, attempts, Retry-After, the deadline stop and its reason, and the
 * retry.* configuration keys.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "budget.h"
#include "conf.h"

#define MS RESIL_NS_PER_MS
#define S  RESIL_NS_PER_S

/* A random source that hands out a fixed list of draws, then repeats. */
struct draws {
	const uint64_t *v;
	size_t n, i;
};
static uint64_t draws_fn(void *ctx)
{
	struct draws *d = ctx;
	uint64_t r = d->v[d->i % d->n];

	d->i++;
	return r;
}

/* The same arithmetic as the engine, written independently: the high 64
 * bits of r * span. */
static uint64_t ref_mulhi(uint64_t r, uint64_t span)
{
	return (uint64_t)(((unsigned __int128)r * span) >> 64);
}

static void conf_with(struct resil_retry_conf *c, const char *const *kv)
{
	char err[256];

	resil_retry_conf_defaults(c);
	for (; kv && kv[0]; kv += 2) {
		int r = resil_retry_conf_set(c, kv[0], kv[1], err, sizeof(err));

		if (r != 0)
			fail_msg("%s = %s: %s", kv[0], kv[1], err);
	}
}

/* Run failures of class cls at manual time `now` (not advancing) and
 * collect delays until the engine stops. */
static int run(const struct resil_retry_conf *c, struct resil_random *rnd, uint32_t cls,
	       int64_t *out, int max, struct resil_retry_priv *rt)
{
	int n = 0;

	memset(rt, 0, sizeof(*rt));
	resil_retry_engine_begin(rt, 1 * S, 0);
	for (;;) {
		int64_t d = resil_retry_engine_next(rt, c, NULL, NULL, cls, 0, 1 * S, rnd);

		if (d < 0)
			break;
		assert_true(n < max);
		out[n++] = d;
	}
	return n;
}

static void test_jitter_none(void **state)
{
	const char *kv[] = {
	    "retry.max_attempts", "8",	  "retry.base", "100ms", "retry.max_delay", "1s",
	    "retry.jitter",	  "none", NULL};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	struct resil_random rnd = {0};
	int64_t d[16];
	const int64_t want[] = {100 * MS, 200 * MS, 400 * MS, 800 * MS, 1 * S, 1 * S, 1 * S};
	char buf[160];

	(void)state;
	conf_with(&c, kv);
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 16, &rt), 7);
	for (int i = 0; i < 7; i++)
		assert_int_equal(d[i], want[i]);
	assert_int_equal(rt.reason, RESIL_RSTOP_ATTEMPTS);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
			    "8 attempts made (retry.max_attempts)");
}

static void test_jitter_full(void **state)
{
	const char *kv[] = {"retry.max_attempts", "6",	   "retry.base", "50ms",
			    "retry.max_delay",	  "300ms", NULL};
	const uint64_t v[] = {1ULL << 63, 0, UINT64_MAX, 0x123456789abcdef0ULL, 1ULL << 62};
	struct draws dr = {v, 5, 0};
	struct resil_random rnd = {draws_fn, &dr};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	int64_t d[8], ceil[] = {50 * MS, 100 * MS, 200 * MS, 300 * MS, 300 * MS};

	(void)state;
	conf_with(&c, kv);
	assert_int_equal(c.jitter, RESIL_JITTER_FULL);
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TIMEOUT, d, 8, &rt), 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(d[i], (int64_t)ref_mulhi(v[i], (uint64_t)ceil[i] + 1));
	/* the bounds: r = 0 gives 0, r = max gives the ceiling */
	assert_int_equal(d[1], 0);
	assert_int_equal(d[2], 200 * MS);
	assert_int_equal(d[0], 25 * MS); /* (50ms + 1) / 2 */
}

static void test_jitter_equal(void **state)
{
	const char *kv[] = {"retry.max_attempts",
			    "5",
			    "retry.base",
			    "1s",
			    "retry.multiplier",
			    "3",
			    "retry.max_delay",
			    "20s",
			    "retry.jitter",
			    "equal",
			    NULL};
	const uint64_t v[] = {0, UINT64_MAX, 1ULL << 63, 7};
	struct draws dr = {v, 4, 0};
	struct resil_random rnd = {draws_fn, &dr};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	int64_t d[8], ceil[] = {1 * S, 3 * S, 9 * S, 20 * S};

	(void)state;
	conf_with(&c, kv);
	assert_int_equal(run(&c, &rnd, RESIL_ERR_THROTTLED, d, 8, &rt), 4);
	for (int i = 0; i < 4; i++) {
		int64_t half = ceil[i] / 2;

		assert_int_equal(d[i],
				 half + (int64_t)ref_mulhi(v[i], (uint64_t)(ceil[i] - half) + 1));
	}
	assert_int_equal(d[0], 500 * MS);
	assert_int_equal(d[1], 3 * S);
}

static void test_jitter_decorrelated(void **state)
{
	const char *kv[] = {"retry.max_attempts",
			    "7",
			    "retry.base",
			    "10ms",
			    "retry.max_delay",
			    "500ms",
			    "retry.jitter",
			    "decorrelated",
			    NULL};
	const uint64_t top[] = {UINT64_MAX};
	const uint64_t low[] = {0};
	struct draws dr = {top, 1, 0};
	struct resil_random rnd = {draws_fn, &dr};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	int64_t d[8];
	const int64_t want[] = {30 * MS, 90 * MS, 270 * MS, 500 * MS, 500 * MS, 500 * MS};

	(void)state;
	conf_with(&c, kv);
	/* r = max: random(base, prev * 3) = prev * 3, capped */
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(d[i], want[i]);
	/* r = 0: always base */
	dr.v = low;
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(d[i], 10 * MS);
	/* a middle draw, by the formula: min(cap, base + r*(3 prev - base + 1)) */
	{
		const uint64_t mid[] = {1ULL << 63};
		int64_t prev = 10 * MS;

		dr.v = mid;
		dr.i = 0;
		assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 6);
		for (int i = 0; i < 6; i++) {
			int64_t hi = prev * 3, x;

			x = 10 * MS + (int64_t)ref_mulhi(1ULL << 63, (uint64_t)(hi - 10 * MS) + 1);
			if (x > 500 * MS)
				x = 500 * MS;
			assert_int_equal(d[i], x);
			prev = x;
		}
	}
}

static void test_rules_first_match(void **state)
{
	const char *kv[] = {"retry.jitter",
			    "none",
			    "retry.on.throttled",
			    "base:1s attempts:6 max_delay:60s multiplier:2 jitter:none",
			    "retry.on.all",
			    "never",
			    "retry.on.throttled",
			    "base:2s attempts:4",
			    NULL};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	struct resil_random rnd = {0};
	int64_t d[8];
	char buf[160];

	(void)state;
	conf_with(&c, kv);
	/* throttled given twice: replaced where it stands (first), not moved */
	assert_int_equal(c.nrules, 2);
	assert_int_equal(c.rules[0].error_class, RESIL_ERR_THROTTLED);
	assert_int_equal(c.rules[0].base_ns, 2 * S);
	assert_int_equal(run(&c, &rnd, RESIL_ERR_THROTTLED, d, 8, &rt), 3);
	assert_int_equal(d[0], 2 * S);
	assert_int_equal(d[1], 4 * S);
	assert_int_equal(d[2], 8 * S);
	resil_retry_engine_reason(&rt, buf, sizeof(buf));
	assert_string_equal(buf, "4 attempts made (retry.on rule 1, throttled)");
	/* transient matches 'all = never' */
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_NOT_RETRIED);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
			    "transient error, never retried (retry.on rule 2)");

	/* 'all' first: the later rule is decorative */
	{
		const char *kv2[] = {"retry.on.all", "never", "retry.on.throttled", "attempts:6",
				     NULL};

		conf_with(&c, kv2);
		assert_int_equal(run(&c, &rnd, RESIL_ERR_THROTTLED, d, 8, &rt), 0);
	}
}

static void test_defaults_and_permanent(void **state)
{
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	struct resil_random rnd = {0};
	int64_t d[8];
	char buf[160];

	(void)state;
	conf_with(&c, NULL);
	assert_int_equal(c.max_attempts, 3);
	assert_int_equal(c.base_ns, 50 * MS);
	assert_int_equal(c.max_delay_ns, 20 * S);
	assert_int_equal(c.multiplier_milli, 2000);
	assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 2);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
			    "3 attempts made (retry.max_attempts)");
	assert_int_equal(run(&c, &rnd, RESIL_ERR_PERMANENT, d, 8, &rt), 0);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)), "permanent error");
	/* user classes are not retried without a rule */
	assert_int_equal(run(&c, &rnd, 101, d, 8, &rt), 0);
	/* max_attempts = 1 disables retries */
	{
		const char *kv[] = {"retry.max_attempts", "1", NULL};

		conf_with(&c, kv);
		assert_int_equal(run(&c, &rnd, RESIL_ERR_TRANSIENT, d, 8, &rt), 0);
		assert_int_equal(rt.reason, RESIL_RSTOP_ATTEMPTS);
	}
	/* a user class with a rule */
	{
		const char *kv[] = {"retry.on.150", "attempts:2 base:5ms jitter:none", NULL};

		conf_with(&c, kv);
		assert_int_equal(run(&c, &rnd, 150, d, 8, &rt), 1);
		assert_int_equal(d[0], 5 * MS);
	}
	/* success stops with its own reason */
	resil_retry_engine_begin(&rt, 1, 0);
	assert_true(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_NONE, 0, 1, &rnd) < 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_SUCCESS);
	/* once stopped, it stays stopped */
	assert_true(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0, 1, &rnd) <
		    0);
	assert_int_equal(rt.reason, RESIL_RSTOP_SUCCESS);
}

static void test_retry_after(void **state)
{
	const char *kv[] = {
	    "retry.max_attempts", "4", "retry.max_delay", "2s", "retry.jitter", "none", NULL};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	struct resil_random rnd = {0};

	(void)state;
	conf_with(&c, kv);
	resil_retry_engine_begin(&rt, 1 * S, 0);
	/* replaces the computed 50 ms */
	assert_int_equal(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_THROTTLED, 700 * MS,
						 1 * S, &rnd),
			 700 * MS);
	/* capped by max_delay */
	assert_int_equal(
	    resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_THROTTLED, 30 * S, 2 * S, &rnd),
	    2 * S);
	/* none given: back to the backoff of the third failure (50ms * 4) */
	assert_int_equal(
	    resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_THROTTLED, 0, 5 * S, &rnd),
	    200 * MS);
}

static void test_deadline(void **state)
{
	const char *kv[] = {"retry.max_attempts", "5",	  "retry.base", "1s",
			    "retry.jitter",	  "none", NULL};
	struct resil_retry_conf c;
	struct resil_retry_priv rt;
	struct resil_random rnd = {0};
	int64_t t0 = 100 * S, now = t0, d;
	char buf[160];

	(void)state;
	conf_with(&c, kv);
	resil_retry_engine_begin(&rt, t0, t0 + 5 * S);
	d = resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0, now, &rnd);
	assert_int_equal(d, 1 * S);
	now += d;
	d = resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0, now, &rnd);
	assert_int_equal(d, 2 * S);
	now += d;
	d = resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0, now, &rnd);
	assert_true(d < 0);
	assert_int_equal(rt.reason, RESIL_RSTOP_DEADLINE);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
			    "attempt 4 would start at 7 s, after the 5 s deadline");
	/* a retry that would start exactly at the deadline is not made either */
	resil_retry_engine_begin(&rt, t0, t0 + 1 * S);
	assert_true(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0, t0, &rnd) <
		    0);
	/* with fractions */
	resil_retry_engine_begin(&rt, t0, t0 + 1500 * MS);
	assert_int_equal(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0,
						 t0 + 250 * MS, &rnd),
			 1 * S);
	assert_true(resil_retry_engine_next(&rt, &c, NULL, NULL, RESIL_ERR_TRANSIENT, 0,
					    t0 + 1250 * MS, &rnd) < 0);
	assert_string_equal(resil_retry_engine_reason(&rt, buf, sizeof(buf)),
			    "attempt 3 would start at 3.25 s, after the 1.5 s deadline");
}

static void test_conf_keys(void **state)
{
	struct resil_retry_conf c, c2;
	char err[256], out[1024];
	size_t n;

	(void)state;
	resil_retry_conf_defaults(&c);
	assert_int_equal(c.on, 0);
	assert_int_equal(resil_retry_conf_set(&c, "retry.jitter", "sideways", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "full, equal, decorrelated or none"));
	assert_int_equal(resil_retry_conf_set(&c, "retry.nope", "1", err, sizeof(err)), -ENOENT);
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.bogus", "never", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.transient", "base:x", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.99", "never", err, sizeof(err)),
			 -EINVAL);
	/* separators only: no rule (it would format to "retry.on.transient =",
	 * which the parser refuses) */
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.transient", ",", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "names no field"));
	assert_int_equal(c.nrules, 0);
	assert_int_equal(resil_retry_conf_set(&c, "retry.budget", "aws", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_retry_conf_set(&c, "retry.budget", "grpc:10:0.1", err, sizeof(err)),
			 0);
	assert_int_equal(c.budget_kind, RESIL_BUDGET_GRPC);
	assert_int_equal(c.budget_max, 10);
	assert_int_equal(c.budget_ratio_milli, 100);
	assert_int_equal(resil_retry_conf_set(&c, "retry.budget", "ratio:10", err, sizeof(err)), 0);
	assert_int_equal(c.budget_kind, RESIL_BUDGET_RATIO);
	assert_int_equal(c.budget_ratio_milli, 100);
	assert_int_equal(resil_retry_conf_set(&c, "retry.budget", "@payments", err, sizeof(err)),
			 0);
	assert_int_equal(c.budget_kind, RESIL_BUDGET_SHARED);
	assert_string_equal(c.budget_name, "payments");
	assert_int_equal(resil_retry_conf_set(&c, "retry.budget", "aws:500", err, sizeof(err)), 0);
	assert_int_equal(c.budget_kind, RESIL_BUDGET_AWS);
	assert_int_equal(c.budget_max, 500);
	assert_int_equal(resil_retry_conf_set(&c, "timeout", "250ms", err, sizeof(err)), 0);
	assert_int_equal(resil_retry_conf_set(&c, "timeout.interrupt", "SIGUSR2", err, sizeof(err)),
			 0);
	assert_int_equal(c.interrupt_signal, SIGUSR2);
	assert_int_equal(resil_retry_conf_set(&c, "hedge.delay", "p95", err, sizeof(err)), 0);
	assert_int_equal(c.hedge_delay_ns, -1);
	/* hedging needs idempotent = yes */
	assert_int_equal(resil_retry_conf_check(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "idempotent"));
	assert_int_equal(resil_retry_conf_set(&c, "idempotent", "yes", err, sizeof(err)), 0);
	assert_int_equal(resil_retry_conf_check(&c, err, sizeof(err)), 0);
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.throttled",
					      "base:1s attempts:6 max_delay:60s jitter:none", err,
					      sizeof(err)),
			 0);
	assert_int_equal(resil_retry_conf_set(&c, "retry.on.permanent", "never", err, sizeof(err)),
			 0);
	assert_int_equal(c.on, 1);
	/* format, then parse the lines back: the same configuration */
	n = resil_retry_conf_format(&c, out, sizeof(out));
	assert_true(n > 0 && n < sizeof(out));
	assert_int_equal(resil_retry_conf_format(&c, NULL, 0), n);
	assert_non_null(strstr(out, "retry.budget = aws:500\n"));
	assert_non_null(strstr(out, "retry.on.throttled = base:1s attempts:6 max_delay:1m "
				    "jitter:none\n"));
	resil_retry_conf_defaults(&c2);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char *eq = strstr(line, " = ");

		assert_non_null(eq);
		*eq = '\0';
		assert_int_equal(resil_retry_conf_set(&c2, line, eq + 3, err, sizeof(err)), 0);
	}
	assert_memory_equal(&c, &c2, sizeof(c));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_jitter_none),	      cmocka_unit_test(test_jitter_full),
	    cmocka_unit_test(test_jitter_equal),      cmocka_unit_test(test_jitter_decorrelated),
	    cmocka_unit_test(test_rules_first_match), cmocka_unit_test(test_defaults_and_permanent),
	    cmocka_unit_test(test_retry_after),	      cmocka_unit_test(test_deadline),
	    cmocka_unit_test(test_conf_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

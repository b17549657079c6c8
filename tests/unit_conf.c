/* SPDX-License-Identifier: MIT */
/*
 * unit_conf.c - value parsers and the "key = value" text format: units,
 * rates, percents, errors with their line, round trips through format.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "conf.h"
#include "parse.h"

static void test_durations(void **state)
{
	int64_t ns;

	assert_int_equal(resil_parse_duration("250ms", &ns), 0);
	assert_int_equal(ns, 250 * RESIL_NS_PER_MS);
	assert_int_equal(resil_parse_duration(" 2m ", &ns), 0);
	assert_int_equal(ns, 120 * RESIL_NS_PER_S);
	assert_int_equal(resil_parse_duration("1.5s", &ns), 0);
	assert_int_equal(ns, 1500 * RESIL_NS_PER_MS);
	assert_int_equal(resil_parse_duration("1h", &ns), 0);
	assert_int_equal(ns, 3600 * RESIL_NS_PER_S);
	assert_int_equal(resil_parse_duration("10us", &ns), 0);
	assert_int_equal(ns, 10000);
	assert_int_equal(resil_parse_duration("7ns", &ns), 0);
	assert_int_equal(ns, 7);
	assert_int_equal(resil_parse_duration("0", &ns), 0);
	assert_int_equal(ns, 0);
	assert_int_equal(resil_parse_duration("5", &ns), -EINVAL);  /* unit required */
	assert_int_equal(resil_parse_duration("5 parsecs", &ns), -EINVAL);
	assert_int_equal(resil_parse_duration("-5s", &ns), -EINVAL);
	assert_int_equal(resil_parse_duration("s", &ns), -EINVAL);
	assert_int_equal(resil_parse_duration("5sx", &ns), -EINVAL);
	assert_int_not_equal(resil_parse_duration("99999999999999999999h", &ns), 0);

	/* the range is int64 nanoseconds whatever the unit: every duration
	 * resil_format_duration prints, in the largest unit dividing it,
	 * reads back (20111111112.111ms printed as 20111111112111us was
	 * once refused, its digits over a cap meant for milliseconds) */
	assert_int_equal(resil_parse_duration("20111111112.1111110ms", &ns), 0);
	assert_int_equal(ns, 20111111112111000);
	char buf[32];

	resil_format_duration(ns, buf, sizeof(buf));
	assert_string_equal(buf, "20111111112111us");
	assert_int_equal(resil_parse_duration(buf, &ns), 0);
	assert_int_equal(ns, 20111111112111000);
	assert_int_equal(resil_parse_duration("9223372036854775807ns", &ns), 0);
	assert_int_equal(ns, INT64_MAX);
	assert_int_equal(resil_parse_duration("9223372036854775808ns", &ns), -ERANGE);
	assert_int_equal(resil_parse_duration("2562047h", &ns), 0);
	assert_int_equal(resil_parse_duration("2562048h", &ns), -ERANGE);
	assert_int_equal(resil_parse_duration("0.5", &ns), -EINVAL); /* unit required */
	assert_int_equal(resil_parse_duration("0.0", &ns), 0);
	assert_int_equal(ns, 0);
}

static void test_rates_percents(void **state)
{
	uint32_t n, bp, m;
	int64_t p;

	assert_int_equal(resil_parse_rate("100/s", &n, &p), 0);
	assert_int_equal(n, 100);
	assert_int_equal(p, RESIL_NS_PER_S);
	assert_int_equal(resil_parse_rate("5/2m", &n, &p), 0);
	assert_int_equal(n, 5);
	assert_int_equal(p, 120 * RESIL_NS_PER_S);
	assert_int_equal(resil_parse_rate("100/60s", &n, &p), 0);
	assert_int_equal(p, 60 * RESIL_NS_PER_S);
	assert_int_equal(resil_parse_rate("0/s", &n, &p), -EINVAL);
	assert_int_equal(resil_parse_rate("100", &n, &p), -EINVAL);
	assert_int_equal(resil_parse_rate("100/0s", &n, &p), -EINVAL);
	assert_int_equal(resil_parse_percent_bp("50", &bp), 0);
	assert_int_equal(bp, 5000);
	assert_int_equal(resil_parse_percent_bp("12.5%", &bp), 0);
	assert_int_equal(bp, 1250);
	assert_int_equal(resil_parse_percent_bp("100", &bp), 0);
	assert_int_equal(bp, 10000);
	assert_int_not_equal(resil_parse_percent_bp("101", &bp), 0);
	assert_int_not_equal(resil_parse_percent_bp("abc", &bp), 0);
	assert_int_equal(resil_parse_milli("1.5", &m), 0);
	assert_int_equal(m, 1500);
	assert_int_equal(resil_parse_milli("2", &m), 0);
	assert_int_equal(m, 2000);
}

static void test_parse_text(void **state)
{
	struct resil_conf c;
	char err[256];

	resil_conf_init(&c);
	assert_false(c.breaker.on);
	assert_int_equal(resil_conf_parse(&c,
					  "breaker.window = consecutive:5; breaker.wait = 2s\n"
					  "# a comment\n"
					  "\n"
					  "policy.scope = process   # trailing comment\n",
					  1, err, sizeof(err)),
			 0);
	assert_true(c.breaker.on);
	assert_int_equal(c.breaker.window_kind, RESIL_WINDOW_CONSECUTIVE);
	assert_int_equal(c.breaker.window_size, 5);
	assert_int_equal(c.breaker.wait_ns, 2 * RESIL_NS_PER_S);
	assert_int_equal(c.scope, RESIL_SCOPE_PROCESS);
	assert_false(c.limit.on);

	/* errors name the line and the key */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.wait = 1s\nbreaker.wiat = 2s", 10, err,
					  sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "line 11"));
	assert_non_null(strstr(err, "breaker.wiat"));
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.wait = soon", 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "in 'breaker.wait = soon'"));
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "just words", 3, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 3"));
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.wait =", 1, err, sizeof(err)), -EINVAL);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = galaxy", 1, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_conf_parse(NULL, "", 1, err, sizeof(err)), -EINVAL);
}

/* What format prints parses back to the same configuration. */
static void test_round_trip(void **state)
{
	static const char *texts[] = {
	    "breaker.window = consecutive:5; breaker.wait = 2s",
	    "breaker.window = count:100; breaker.failure_rate = 25; breaker.min_calls = 10",
	    "limit.rate = 100/s; limit.burst = 10",
	    "limit.rate = 5/s; limit.dry_run = yes",
	    "limit.rate = 5/s; limit.keys = 8; limit.wait = 1s; limit.dry_run = no",
	    "bulkhead.max = 10",
	    "histogram = on; policy.scope = process",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct resil_conf a, b;
		char err[256], out[4096];

		resil_conf_init(&a);
		assert_int_equal(resil_conf_parse(&a, texts[i], 1, err, sizeof(err)), 0);
		assert_true(resil_conf_format(&a, out, sizeof(out)) < sizeof(out));
		resil_conf_init(&b);
		if (resil_conf_parse(&b, out, 1, err, sizeof(err)) != 0)
			fail_msg("'%s' formatted as '%s' does not parse: %s", texts[i], out, err);
		assert_memory_equal(&a, &b, sizeof(a));
	}
}

/* policy.scope = global: what can be shared across hosts, and clear
 * errors for what cannot. */
static void test_global_scope(void **state)
{
	struct resil_conf c;
	char err[256], buf[1024];

	(void)state;
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "policy.scope = global; limit.rate = 100/s", 1, err, sizeof(err)),
	    0);
	assert_int_equal(c.scope, RESIL_SCOPE_GLOBAL);
	resil_conf_format(&c, buf, sizeof(buf));
	assert_non_null(strstr(buf, "policy.scope = global\n"));

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = global; breaker.window = time:10s", 1,
					  err, sizeof(err)),
			 0);

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = global; breaker.window = count:100",
					  1, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "time window"));
	assert_non_null(strstr(err, "count window"));

	/* keyed gcra: shared per key across hosts (limit.global set with the
	 * scope, whichever comes first); keyed sliding is refused */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "policy.scope = global; limit.rate = 10/s; "
					  "limit.keys = 100",
					  1, err, sizeof(err)),
			 0);
	assert_int_equal(c.limit.global, 1);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "limit.rate = 10/s; limit.keys = 100; "
					  "policy.scope = global",
					  1, err, sizeof(err)),
			 0);
	assert_int_equal(c.limit.global, 1);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "policy.scope = global; limit.rate = 10/s; "
					  "limit.keys = 100; limit.algorithm = sliding",
					  1, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "gcra"));

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "policy.scope = global; limit.rate = 10/s; "
					  "limit.algorithm = sliding",
					  1, err, sizeof(err)),
			 -EINVAL);

	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "policy.scope = global; shed.k = 2", 1, err, sizeof(err)),
	    -EINVAL);
	assert_non_null(strstr(err, "needs limit.rate, a time-window breaker, bulkhead.max or a "
				    "retry.budget"));

	/* a global bulkhead: fail fast, at most 1024 permits */
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "policy.scope = global; bulkhead.max = 3", 1, err, sizeof(err)),
	    0);
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "policy.scope = global; bulkhead.max = 1024", 1, err, sizeof(err)),
	    0);
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "policy.scope = global; bulkhead.max = 1025", 1, err, sizeof(err)),
	    -EINVAL);
	assert_non_null(strstr(err, "fail-fast bulkheads of at most 1024 permits"));
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "policy.scope = global; bulkhead.max = 3; "
					  "bulkhead.wait = 100ms",
					  1, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "fail-fast bulkheads of at most 1024 permits"));

	/* a retry budget of its own is shared fleet-wide; a shared one's
	 * owner (@NAME) decides */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = global; retry.budget = grpc:10:1", 1,
					  err, sizeof(err)),
			 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = global; retry.budget = ratio:10%", 1,
					  err, sizeof(err)),
			 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "policy.scope = global; retry.budget = @shared", 1,
					  err, sizeof(err)),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durations),	 cmocka_unit_test(test_rates_percents),
	    cmocka_unit_test(test_parse_text),	 cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_global_scope),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

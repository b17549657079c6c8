/* SPDX-License-Identifier: MIT */
/*
 * unit_confmsg.c - configuration mistakes refused with the words that
 * name them: a window past its longest duration names the limit, an
 * adaptive minimum above the maximum, a key given twice.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "conf.h"

static void test_long_durations(void **state)
{
	struct resil_conf c;
	char err[512] = "";
	int64_t ns;

	(void)state;
	/* a duration that fits int64 nanoseconds parses, exactly */
	assert_int_equal(resil_parse_duration("10000h", &ns), 0);
	assert_true(ns == 10000LL * 3600 * RESIL_NS_PER_S);
	assert_int_equal(resil_parse_duration("2562047h", &ns), 0);
	assert_int_equal(resil_parse_duration("2562048h", &ns), -ERANGE);
	assert_int_equal(resil_parse_duration("1.5h", &ns), 0);
	assert_true(ns == 5400 * RESIL_NS_PER_S);

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.window = time:10000h", 1, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "at most 24h"));
	assert_null(strstr(err, "above 0"));
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "breaker.window = time:99999999999h", 1, err, sizeof(err)),
	    -EINVAL);
	assert_non_null(strstr(err, "at most 24h"));
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.window = time:24h", 1, err, sizeof(err)), 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.window = time:0s", 1, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "above 0"));
}

static void test_adaptive_bounds(void **state)
{
	struct resil_conf c;
	char err[512] = "";

	(void)state;
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "adaptive.min = 50; adaptive.max = 10", 1, err, sizeof(err)),
	    -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "adaptive.min = 50 is above adaptive.max = 10"));
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "adaptive.min = 10; adaptive.max = 50", 1, err, sizeof(err)), 0);
}

static void test_duplicate_keys(void **state)
{
	struct resil_conf c;
	char err[512] = "";

	(void)state;
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c,
					  "bulkhead.max = 3\nbreaker.wait = 1s\nbulkhead.max = 4",
					  1, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "line 3: key 'bulkhead.max' given twice (first on line 1)"));
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "bulkhead.max = 3; bulkhead.wait = 1s", 1, err, sizeof(err)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_long_durations),
	    cmocka_unit_test(test_adaptive_bounds),
	    cmocka_unit_test(test_duplicate_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * unit_confmsg.c - configuration mistakes refused with the words that
 * name them: a window past its longest duration names the limit, an
 * adaptive minimum above the maximum, a key given twice, an unknown key
 * with the nearest known one, a bare number where a duration is wanted,
 * and where: the pair in a one-line ';' text, the line in a text of lines.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "conf.h"
#include "parse.h"

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
	assert_int_equal(resil_conf_parse(&c, "bulkhead.max = 3; breaker.wait = 1s; bulkhead.max=4",
					  1, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_string_equal(err, "in 'bulkhead.max=4': key 'bulkhead.max' given twice (first in "
				 "'bulkhead.max = 3')");
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "bulkhead.max = 3; bulkhead.wait = 1s", 1, err, sizeof(err)), 0);
}

static void test_nearest_key(void **state)
{
	struct resil_conf c;
	char err[512] = "";

	(void)state;
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.windwo = count:10", 1, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_string_equal(err, "in 'breaker.windwo = count:10': unknown key 'breaker.windwo': "
				 "did you mean breaker.window?");
	/* a transposition, a missing letter, a wrong prefix */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_set(&c, "limit.rtae", "10/s", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "did you mean limit.rate?"));
	assert_int_equal(resil_conf_set(&c, "bulkhed.max", "3", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown key 'bulkhed.max': did you mean bulkhead.max?"));
	assert_int_equal(resil_conf_set(&c, "breaker.failure_rat", "50", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "did you mean breaker.failure_rate?"));
	/* nothing near: no guess */
	assert_int_equal(resil_conf_set(&c, "colour", "blue", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "unknown key 'colour'");
	assert_string_equal(resil_conf_nearest_key("breaker.wiat"), "breaker.wait");
	assert_null(resil_conf_nearest_key("zzzzzzzzzzzz"));
	/* every key of the table is known to the parsers: a bad value is
	 * refused for the value, never as an unknown key */
	for (size_t i = 0; resil_conf_key(i); i++) {
		resil_conf_init(&c);
		err[0] = '\0';
		resil_conf_set(&c, resil_conf_key(i), "\x01", err, sizeof(err));
		if (strstr(err, "unknown key"))
			fail_msg("%s: %s", resil_conf_key(i), err);
		assert_string_equal(resil_conf_nearest_key(resil_conf_key(i)), resil_conf_key(i));
	}
}

static void test_duration_unit(void **state)
{
	struct resil_conf c;
	char err[512] = "";

	(void)state;
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.wait = 30", 1, err, sizeof(err)), -EINVAL);
	printf("%s\n", err);
	assert_string_equal(err, "in 'breaker.wait = 30': breaker.wait: '30' is not a duration: "
				 "add a unit, e.g. 30s");
	/* inside a value, and with decimals */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_set(&c, "breaker.window", "time:60", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "'60' is not a duration: add a unit, e.g. 60s"));
	assert_int_equal(resil_conf_set(&c, "retry.base", "0.5", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'0.5' is not a duration: add a unit, e.g. 0.5s"));
	assert_int_equal(resil_conf_set(&c, "limit.rate", "100/10", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'10' is not a duration"));
	/* a number where a number is wanted is not taken for a duration */
	assert_int_equal(resil_conf_set(&c, "bulkhead.max", "0", err, sizeof(err)), -EINVAL);
	assert_null(strstr(err, "duration"));
	/* the refused value changed nothing */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_set(&c, "breaker.wait", "30", err, sizeof(err)), -EINVAL);
	assert_false(c.breaker.on);
	/* with a unit it passes */
	assert_int_equal(resil_conf_set(&c, "breaker.wait", "30s", err, sizeof(err)), 0);
}

static void test_where(void **state)
{
	struct resil_conf c;
	char err[512] = "";

	(void)state;
	/* one line of ';' pairs: the pair, never "line 1" */
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "bulkhead.max = 3; breaker.window = x", 1, err, sizeof(err)),
	    -EINVAL);
	printf("%s\n", err);
	assert_true(strncmp(err, "in 'breaker.window = x': ", 25) == 0);
	assert_null(strstr(err, "line 1"));
	/* a trailing newline does not make a text of lines */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.wait = soon\n", 1, err, sizeof(err)),
			 -EINVAL);
	assert_true(strncmp(err, "in 'breaker.wait = soon': ", 26) == 0);
	/* a text of lines, or a file's section: the line */
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "bulkhead.max = 3\nbreaker.window = x", 1, err, sizeof(err)),
	    -EINVAL);
	assert_true(strncmp(err, "line 2: ", 8) == 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.window = x", 7, err, sizeof(err)), -EINVAL);
	assert_true(strncmp(err, "line 7: ", 8) == 0);
	/* a comment is not part of the pair named */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "bulkhead.max = lots # many", 1, err, sizeof(err)),
			 -EINVAL);
	assert_true(strncmp(err, "in 'bulkhead.max = lots': ", 26) == 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "bulkhead.max = 3; words", 1, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "expected 'key = value', got 'words'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_long_durations), cmocka_unit_test(test_adaptive_bounds),
	    cmocka_unit_test(test_duplicate_keys), cmocka_unit_test(test_nearest_key),
	    cmocka_unit_test(test_duration_unit),  cmocka_unit_test(test_where),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

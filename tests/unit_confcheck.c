/* SPDX-License-Identifier: MIT */
/*
 * unit_confcheck.c - resil_config_check: a declaration checked as
 * resil_define takes it, with no handle and no daemon, and what
 * RESIL_CHECK_NO_WAIT refuses.
 *
 *   - a good declaration is 0, with or without RESIL_CHECK_NO_WAIT;
 *   - what resil_define refuses (a bad key, a bad value, an empty
 *     configuration, a bad name) is -EINVAL here too, with the same
 *     words in resil_last_error();
 *   - bulkhead.wait and limit.wait are refused under RESIL_CHECK_NO_WAIT
 *     only, each named; a wait of 0 is not a wait;
 *   - a NULL configuration checks the name alone;
 *   - an unknown flag is -EINVAL.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "resil.h"

static void refused(const char *name, const char *config, unsigned flags, const char *why)
{
	assert_int_equal(resil_config_check(name, config, flags), -EINVAL);
	if (!strstr(resil_last_error(), why))
		fail_msg("'%s': '%s' does not say '%s'", config, resil_last_error(), why);
}

static void test_same_as_define(void **state)
{
	resil_t *r;
	const char *bad[] = {"limit.rate = fast", "breaker.windw = count:10",
			     "limit.rate = 10/s\n"
			     "limit.burst = 0"};

	(void)state;
	assert_int_equal(resil_config_check("api", "limit.rate = 20/s; limit.burst = 5", 0), 0);
	assert_int_equal(resil_config_check("api",
					    "breaker.window = consecutive:5; "
					    "bulkhead.max = 3",
					    RESIL_CHECK_NO_WAIT),
			 0);
	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char said[512];

		assert_int_equal(resil_define(r, "x", bad[i]), -EINVAL);
		strncpy(said, resil_last_error(), sizeof(said) - 1);
		said[sizeof(said) - 1] = 0;
		assert_true(said[0] != 0);
		refused("x", bad[i], 0, said);
	}
	resil_close(r);
	refused("x", "limit.rate = 10/s\nlimit.burst = 0", 0, "line 2");
	refused("x", "  ", 0, "empty configuration");
	refused("", "limit.rate = 1/s", 0, "policy name");
	refused("a-name-longer-than-the-sixty-three-bytes-a-policy-name-may-have-x",
		"limit.rate = 1/s", 0, "policy name");
	/* the name alone */
	assert_int_equal(resil_config_check("x", NULL, 0), 0);
	refused("", NULL, 0, "policy name");
}

static void test_no_wait(void **state)
{
	(void)state;
	assert_int_equal(resil_config_check("b", "bulkhead.max = 3; bulkhead.wait = 10ms", 0), 0);
	refused("b", "bulkhead.max = 3; bulkhead.wait = 10ms", RESIL_CHECK_NO_WAIT,
		"bulkhead.wait");
	assert_int_equal(resil_config_check("l", "limit.rate = 5/s; limit.wait = 1s", 0), 0);
	refused("l", "limit.rate = 5/s; limit.wait = 1s", RESIL_CHECK_NO_WAIT, "limit.wait");
	assert_int_equal(resil_config_check("l",
					    "limit.rate = 5/s; limit.wait = 0; "
					    "bulkhead.wait = 0",
					    RESIL_CHECK_NO_WAIT),
			 0);
	assert_int_equal(resil_config_check("l", "limit.rate = 5/s", 1u << 7), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_as_define),
	    cmocka_unit_test(test_no_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * int_halfopen_wait.c - daemon mode and embedded mode decide alike on
 * breaker.half_open_max_wait, on the real clock: a probe that never
 * answers re-opens the breaker once it is older than the wait, although
 * two of the three probe slots are free. In daemon mode resild's tick may
 * get there first; in embedded mode there is no tick and the next caller
 * does it. Either way the caller after the wait is rejected and the
 * breaker is OPEN (for 10 s: a repeated open, wait_multiplier = 100).
 * unit_halfopen_wait pins the instant on a manual clock.
 *
 * Waits are "until the clock passed the probe's wait" (a condition on the
 * clock, not a sleep of a guessed length) and "eventually, within 10 s".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common.h"
#include "resil.h"
#include "testutil.h"

#define MS RESIL_NS_PER_MS

static const char conf[] = "breaker.window = consecutive:1; breaker.wait = 50ms;"
			   "breaker.wait_multiplier = 100; breaker.wait_max = 1h;"
			   "breaker.half_open_calls = 3; breaker.half_open_max_wait = 200ms";

static void scenario(resil_t *r, const char *name)
{
	resil_policy_t *p;
	resil_permit_t pm, hung;
	int64_t claimed;

	assert_int_equal(resil_define(r, name, conf), 0);
	assert_int_equal(resil_policy(r, name, &p), 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_FAILURE);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	/* after the 50 ms wait, a probe; it never answers */
	assert_true(TEST_EVENTUALLY(resil_acquire(p, &hung) == RESIL_ADMIT));
	claimed = test_mono_ns();
	assert_int_equal(resil_policy_state(p), RESIL_STATE_HALF_OPEN);
	/* past the probe's wait (with room for the clocks' resolution) */
	while (test_mono_ns() < claimed + 200 * MS + 20 * MS)
		test_sleep_ms(5);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	/* its late answer decides nothing */
	resil_release(p, &hung, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_OPEN);
}

static struct test_daemon daemon_;
static bool daemon_up;

static int setup(void **state)
{
	(void)state;
	if (test_daemon_init(&daemon_) < 0)
		return -1;
	if (test_daemon_start(&daemon_, NULL) < 0) {
		test_daemon_fini(&daemon_);
		return -1;
	}
	daemon_up = true;
	return 0;
}

/* a failed assertion still stops the daemon */
static int teardown(void **state)
{
	(void)state;
	if (daemon_up)
		test_daemon_fini(&daemon_);
	return 0;
}

static void test_daemon_mode(void **unused)
{
	resil_t *r;

	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	scenario(r, "hung-daemon");
	resil_close(r);
}

static void test_embedded_mode(void **unused)
{
	struct resil_embedded_opts o = {.slots = 16, .clients = 16, .state_size = 1 << 22};
	resil_t *r;

	assert_int_equal(resil_open_embedded(&r, &o), 0);
	scenario(r, "hung-embedded");
	resil_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_daemon_mode),
	    cmocka_unit_test(test_embedded_mode),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

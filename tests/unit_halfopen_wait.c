/* SPDX-License-Identifier: MIT */
/*
 * unit_halfopen_wait.c - breaker.half_open_max_wait in embedded mode (no
 * daemon, no tick), on a manual clock: a probe that never answers sends
 * the breaker back to OPEN once it is older than the wait, even while
 * other probe slots are free (Resilience4j:
 * circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState), as
 * resild's tick does in daemon mode; 0 turns it off. int_halfopen_wait
 * checks that daemon and embedded mode agree on the real clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "resil.h"
#include "common.h"
#include "testutil.h"

#define S RESIL_NS_PER_S

struct fix {
	resil_t *r;
	resil_policy_t *p;
	struct test_clock *clk;
};

static void fix_open(struct fix *f, const char *conf)
{
	struct resil_embedded_opts o = {.slots = 16, .clients = 16, .state_size = 1 << 22};
	resil_permit_t pm;

	f->clk = test_clock_new(1000 * S);
	assert_non_null(f->clk);
	assert_int_equal(resil_open_embedded(&f->r, &o), 0);
	assert_int_equal(resil_set_clock(f->r, test_clock_fn, f->clk), 0);
	assert_int_equal(resil_define(f->r, "p", conf), 0);
	assert_int_equal(resil_policy(f->r, "p", &f->p), 0);
	/* one failure opens it (consecutive:1) */
	assert_int_equal(resil_acquire(f->p, &pm), RESIL_ADMIT);
	resil_release(f->p, &pm, RESIL_FAILURE);
	assert_int_equal(resil_policy_state(f->p), RESIL_STATE_OPEN);
}

static void fix_close(struct fix *f)
{
	resil_close(f->r);
	test_clock_free(f->clk);
}

/* Three probe slots; one probe hangs. Before its wait is over the others
 * still probe; at the wait, the next caller re-opens the breaker instead
 * of taking a free slot, and the re-open counts as a repeated one (the
 * longer wait of wait_multiplier). */
static void test_hung_probe_reopens(void **unused)
{
	struct fix f;
	resil_permit_t hung, pm;

	fix_open(&f, "breaker.window = consecutive:1; breaker.wait = 2s;"
		     "breaker.wait_multiplier = 10; breaker.wait_max = 1h;"
		     "breaker.half_open_calls = 3; breaker.half_open_max_wait = 5s");
	test_clock_advance(f.clk, 2 * S);
	assert_int_equal(resil_acquire(f.p, &hung), RESIL_ADMIT);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);

	test_clock_advance(f.clk, 5 * S - 1);
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_ADMIT); /* a free slot */
	resil_release(f.p, &pm, RESIL_IGNORED);			/* given back */
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);

	test_clock_advance(f.clk, 1);
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_OPEN);
	/* the hung probe's late answer belongs to a gen that is over */
	resil_release(f.p, &hung, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_OPEN);

	/* streak 1: 20 s of OPEN now, not 2 */
	test_clock_advance(f.clk, 20 * S - 1);
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_REJECT_OPEN);
	test_clock_advance(f.clk, 1);
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_ADMIT);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);
	resil_release(f.p, &pm, RESIL_IGNORED);
	fix_close(&f);
}

/* A state read alone says what the next decision would find: past
 * half_open_max_wait with a probe held, OPEN, before any other call
 * (Resilience4j's test reads the state without a call). */
static void test_state_read_reopens(void **unused)
{
	struct fix f;
	resil_permit_t hung, pm;

	fix_open(&f, "breaker.window = consecutive:1; breaker.wait = 2s;"
		     "breaker.half_open_calls = 2; breaker.half_open_max_wait = 5s");
	test_clock_advance(f.clk, 2 * S);
	assert_int_equal(resil_acquire(f.p, &hung), RESIL_ADMIT);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);
	test_clock_advance(f.clk, 5 * S - 1);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);
	test_clock_advance(f.clk, 1);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_OPEN);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_OPEN);
	/* and the decision agrees */
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_REJECT_OPEN);
	resil_release(f.p, &hung, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_OPEN);
	fix_close(&f);
}

/* half_open_max_wait = 0 turns the check off: the hung probe holds its
 * slot for good and the other slots keep probing. */
static void test_off_holds(void **unused)
{
	struct fix f;
	resil_permit_t hung, pm;

	fix_open(&f, "breaker.window = consecutive:1; breaker.wait = 2s;"
		     "breaker.half_open_calls = 3; breaker.half_open_max_wait = 0");
	test_clock_advance(f.clk, 2 * S);
	assert_int_equal(resil_acquire(f.p, &hung), RESIL_ADMIT);
	test_clock_advance(f.clk, 3600 * S);
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_ADMIT);
	resil_release(f.p, &pm, RESIL_IGNORED);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);
	resil_release(f.p, &hung, RESIL_IGNORED);
	fix_close(&f);
}

/* Answered probes do not count against the wait, only held ones: probes
 * that answer in time and leave the breaker HALF_OPEN (3 needed) do not
 * re-open it however long HALF_OPEN lasts. */
static void test_answered_probes_do_not_time_out(void **unused)
{
	struct fix f;
	resil_permit_t pm;

	fix_open(&f, "breaker.window = consecutive:1; breaker.wait = 2s;"
		     "breaker.half_open_calls = 3; breaker.half_open_max_wait = 5s");
	test_clock_advance(f.clk, 2 * S);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(resil_acquire(f.p, &pm), RESIL_ADMIT);
		test_clock_advance(f.clk, 4 * S);
		resil_release(f.p, &pm, RESIL_SUCCESS);
		assert_int_equal(resil_policy_state(f.p), RESIL_STATE_HALF_OPEN);
	}
	assert_int_equal(resil_acquire(f.p, &pm), RESIL_ADMIT);
	resil_release(f.p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(f.p), RESIL_STATE_CLOSED);
	fix_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hung_probe_reopens),
	    cmocka_unit_test(test_state_read_reopens),
	    cmocka_unit_test(test_off_holds),
	    cmocka_unit_test(test_answered_probes_do_not_time_out),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

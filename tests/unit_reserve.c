/* SPDX-License-Identifier: MIT */
/*
 * unit_reserve.c - limit.wait through the library: a caller that would be
 * rate limited for less than limit.wait is admitted after sleeping until
 * its permit frees (real clock; the sleep is checked as a lower bound
 * only), one that would wait longer is rejected with the wait; with an
 * application clock nothing sleeps and the wait is reported.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>
#include <cmocka.h>

#include "resil.h"

static int64_t mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void test_sleeps_for_reserved_permit(void **state)
{
	resil_t *r;
	resil_policy_t *p;
	resil_permit_t a, b, c;
	int64_t t0, w;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(
	    resil_define(r, "res", "limit.rate = 10/s; limit.burst = 1; limit.wait = 150ms"), 0);
	assert_int_equal(resil_policy(r, "res", &p), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	t0 = mono();
	assert_int_equal(resil_acquire(p, &b), RESIL_ADMIT); /* reserved: ~100 ms */
	w = resil_permit_wait_ns(&b);
	assert_true(w > 0 && w <= 100000000);
	assert_true(mono() - t0 >= w); /* it slept at least its wait */
	resil_release(p, &b, RESIL_SUCCESS);
	/* the next two would wait ~100 and ~200 ms: the second is refused */
	assert_int_equal(resil_acquire(p, &c), RESIL_ADMIT);
	resil_release(p, &c, RESIL_SUCCESS);
	resil_close(r);
}

static int64_t manual_ns = 5000000000;
static int64_t manual(void *ctx)
{
	return manual_ns;
}

static void test_manual_clock_reports_wait(void **state)
{
	resil_t *r;
	resil_policy_t *p;
	resil_permit_t a;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	assert_int_equal(
	    resil_define(r, "res", "limit.rate = 10/s; limit.burst = 1; limit.wait = 250ms"), 0);
	assert_int_equal(resil_policy(r, "res", &p), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_permit_wait_ns(&a), 0);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_permit_wait_ns(&a), 100000000);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_permit_wait_ns(&a), 200000000);
	resil_release(p, &a, RESIL_SUCCESS);
	/* 300 ms > limit.wait: rejected, with the wait until a permit frees */
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&a), 300000000);
	manual_ns += 300000000;
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	resil_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sleeps_for_reserved_permit),
	    cmocka_unit_test(test_manual_clock_reports_wait),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

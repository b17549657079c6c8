/* SPDX-License-Identifier: MIT */
/*
 * unit_dryrun.c - limit.dry_run through the public API (embedded mode, a
 * manual clock): a limiter that counts what it would reject and rejects
 * nothing.
 *
 *   - lean path (a policy that is only a limiter, limit.wait = 0): every
 *     resil_acquire / resil_acquire_key is admitted, the limiter's
 *     dry_run_rejects moves by the calls it would have rejected, the
 *     policy's rejected_limited stays 0 (they were admitted), the TAT is
 *     the one the real admissions give, Retry-After is 0;
 *   - the live switch: resil_define with the same keys minus
 *     limit.dry_run keeps the state, and the next call at the same instant
 *     gets the ordinary rejection and Retry-After; -E2BIG stays an error;
 *   - keyed, with a full table: a new key is admitted and counted;
 *   - limit.wait (the general path): no reservation, wait 0, counted; the
 *     reservation comes back when dry run goes off;
 *   - with a later component rejecting (a bulkhead): the dry-run permit
 *     gives nothing back to the limiter.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "internal.h"
#include "limit.h"
#include "stats.h"
#include "testutil.h"

#define MS 1000000LL
#define S  1000000000LL

/* Admitted, no Retry-After, released as a success. */
static void admit(resil_policy_t *p, const char *key)
{
	resil_permit_t pm;

	if (key)
		assert_int_equal(resil_acquire_key(p, key, strlen(key), &pm), RESIL_ADMIT);
	else
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	assert_int_equal(resil_permit_wait_ns(&pm), 0);
	resil_release(p, &pm, RESIL_SUCCESS);
}

static void test_lean_unkeyed(void **state)
{
	struct resil_req req = {.permits = 3};
	resil_policy_t *p;
	resil_permit_t pm;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "shadow",
				      "limit.rate = 10/s; limit.burst = 2; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "shadow", &p), 0);
	for (int i = 0; i < 5; i++) {
		admit(p, NULL);
		assert_int_equal(test_branch_of(p), 2); /* bound lean: the path under test */
		assert_int_equal(atomic_load(&p->b)->lim_way, 1); /* GCRA: no context */
	}
	assert_int_equal(test_emb_limit("shadow").dry_run_rejects, 3);
	assert_int_equal(test_emb_limit("shadow").word, 1000 * S + 200 * MS); /* two admissions */
	assert_int_equal(test_emb_stat("shadow", RESIL_STAT_REJ_LIMITED), 0);
	assert_int_equal(test_emb_stat("shadow", RESIL_STAT_SUCCESS), 5);
	/* more permits than the configuration can ever give: an error still */
	assert_int_equal(resil_acquire_ex(p, &req, &pm), -E2BIG);

	/* dry run off, live: the state stays, the next call is rejected as an
	 * ordinary limiter rejects it */
	assert_int_equal(resil_define(test_emb_r, "shadow", "limit.rate = 10/s; limit.burst = 2"),
			 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&pm), 100 * MS);
	assert_int_equal(test_branch_of(p), 2);
	assert_int_equal(atomic_load(&p->b)->lim_way, 1);
	assert_int_equal(test_emb_stat("shadow", RESIL_STAT_REJ_LIMITED), 1);
	assert_int_equal(test_emb_limit("shadow").dry_run_rejects, 3);
	/* and on again */
	assert_int_equal(resil_define(test_emb_r, "shadow",
				      "limit.rate = 10/s; limit.burst = 2; limit.dry_run = yes"),
			 0);
	admit(p, NULL);
	assert_int_equal(test_emb_limit("shadow").dry_run_rejects, 4);
	assert_int_equal(test_emb_stat("shadow", RESIL_STAT_REJ_LIMITED), 1);
}

static void test_lean_keyed(void **state)
{
	resil_policy_t *p;
	struct resil_limit_info li;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "shadow-keys",
				      "limit.rate = 1/h; limit.keys = 1; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "shadow-keys", &p), 0);
	admit(p, "10.0.0.1"); /* admitted, holds the one place */
	assert_int_equal(test_branch_of(p), 2);
	admit(p, "10.0.0.1"); /* limited for an hour: dry run */
	admit(p, "10.0.0.2"); /* no room, the holder limited: dry run */
	admit(p, "10.0.0.2");
	li = test_emb_limit("shadow-keys");
	assert_int_equal(li.dry_run_rejects, 3);
	assert_int_equal(li.size, 1);
	assert_int_equal(li.full_rejects, 2); /* what the limiter decided */
	assert_int_equal(test_emb_stat("shadow-keys", RESIL_STAT_REJ_LIMITED), 0);
	assert_int_equal(test_emb_stat("shadow-keys", RESIL_STAT_SUCCESS), 4);
}

static void test_wait(void **state)
{
	resil_policy_t *p;
	resil_permit_t pm;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "shadow-wait",
				      "limit.rate = 10/s; limit.wait = 1s; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "shadow-wait", &p), 0);
	for (int i = 0; i < 3; i++) {
		admit(p, NULL);		      /* goes at once: would have waited 100, 200 ms */
		assert_int_equal(test_branch_of(p), 0); /* a wait: the general path */
	}
	assert_int_equal(test_emb_limit("shadow-wait").dry_run_rejects, 2);
	assert_int_equal(test_emb_limit("shadow-wait").word, test_emb_ns + 100 * MS);
	assert_int_equal(test_emb_stat("shadow-wait", RESIL_STAT_REJ_LIMITED), 0);

	/* dry run off: the reservation, on the same state */
	assert_int_equal(
	    resil_define(test_emb_r, "shadow-wait", "limit.rate = 10/s; limit.wait = 1s"), 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	assert_int_equal(resil_permit_wait_ns(&pm), 100 * MS);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(test_emb_limit("shadow-wait").dry_run_rejects, 2);
}

/* The limiter admits by dry run, the bulkhead after it rejects: nothing to
 * give back to the limiter (its state stays as the rejection left it). */
static void test_later_component_rejects(void **state)
{
	resil_policy_t *p;
	resil_permit_t a, b;
	int64_t tat;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "shadow-mix",
				      "limit.rate = 1/h; limit.dry_run = yes; bulkhead.max = 1"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "shadow-mix", &p), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	tat = test_emb_limit("shadow-mix").word;
	assert_int_equal(resil_acquire(p, &b), RESIL_REJECT_FULL);
	assert_int_equal(test_emb_limit("shadow-mix").word, tat);
	assert_int_equal(test_emb_limit("shadow-mix").dry_run_rejects, 1);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &b), RESIL_ADMIT);
	resil_release(p, &b, RESIL_SUCCESS);
	assert_int_equal(test_emb_limit("shadow-mix").word, tat);
	assert_int_equal(test_emb_limit("shadow-mix").dry_run_rejects, 2);
	assert_int_equal(test_emb_stat("shadow-mix", RESIL_STAT_REJ_FULL), 1);
	assert_int_equal(test_emb_stat("shadow-mix", RESIL_STAT_REJ_LIMITED), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lean_unkeyed, test_emb_open, test_emb_close),
	    cmocka_unit_test_setup_teardown(test_lean_keyed, test_emb_open, test_emb_close),
	    cmocka_unit_test_setup_teardown(test_wait, test_emb_open, test_emb_close),
	    cmocka_unit_test_setup_teardown(test_later_component_rejects, test_emb_open,
					    test_emb_close),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

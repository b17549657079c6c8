/* SPDX-License-Identifier: MIT */
/*
 * unit_emptykey.c - limit.empty_key through the public API (embedded
 * mode, a manual clock): what a keyed limiter does with a key of length
 * 0 (an nginx variable without a value).
 *
 *   - admit (the default): every empty key is admitted, none takes a
 *     place in the table or a permit of the rate, each is counted
 *     (empty_keys); a real key is limited as before; a NULL key is
 *     -EINVAL (limit.default_key aside), not an empty key;
 *   - reject: RESIL_REJECT_LIMITED without a wait (no Retry-After: time
 *     gives an empty key nothing), counted as a limited rejection; a dry
 *     run admits it and counts it as a dry-run rejection;
 *   - the switch is live: the table keeps its keys;
 *   - the policy's other components still decide an admitted empty key
 *     (a bulkhead of 1 is full while one holds it);
 *   - the formatted configuration says reject (admit, the default, is
 *     not written).
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

#define S 1000000000LL

/* An empty key: a pointer to no bytes, as nginx hands an empty variable. */
static int empty(resil_policy_t *p, resil_permit_t *pm)
{
	return resil_acquire_key(p, "", 0, pm);
}

static void test_admit(void **state)
{
	resil_policy_t *p;
	resil_permit_t pm;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "ip", "limit.rate = 1/m; limit.keys = 8"), 0);
	assert_int_equal(resil_policy(test_emb_r, "ip", &p), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(empty(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(test_emb_limit("ip").empty_keys, 10);
	assert_int_equal(test_emb_limit("ip").size, 0); /* no place in the table */
	assert_int_equal(test_emb_stat("ip", RESIL_STAT_REJ_LIMITED), 0);
	/* a real key: one a minute */
	assert_int_equal(resil_acquire_key(p, "a", 1, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_acquire_key(p, "a", 1, &pm), RESIL_REJECT_LIMITED);
	assert_true(resil_permit_wait_ns(&pm) > 0);
	/* no key at all is not an empty key: a mistake without
	 * limit.default_key, and it counts as neither */
	assert_int_equal(resil_acquire(p, &pm), -EINVAL);
	assert_int_equal(test_emb_limit("ip").empty_keys, 10);
	assert_int_equal(test_emb_limit("ip").size, 1);

	/* reject, live: the table keeps "a" (still limited) */
	assert_int_equal(resil_define(test_emb_r, "ip",
				      "limit.rate = 1/m; limit.keys = 8; limit.empty_key = reject"),
			 0);
	assert_int_equal(empty(p, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&pm), 0);
	assert_int_equal(resil_acquire_key(p, "a", 1, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(test_emb_limit("ip").empty_keys, 11);
	assert_int_equal(test_emb_limit("ip").size, 1);
	assert_int_equal(test_emb_stat("ip", RESIL_STAT_REJ_LIMITED), 3);

	/* a minute later "a" has a permit again; the empty key still none */
	test_emb_ns += 60 * S;
	assert_int_equal(resil_acquire_key(p, "a", 1, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(empty(p, &pm), RESIL_REJECT_LIMITED);
}

static void test_dry_run(void **state)
{
	resil_policy_t *p;
	resil_permit_t pm;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "shadow",
				      "limit.rate = 1/m; limit.keys = 8; "
				      "limit.empty_key = reject; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "shadow", &p), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(empty(p, &pm), RESIL_ADMIT);
		assert_int_equal(resil_permit_wait_ns(&pm), 0);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(test_emb_limit("shadow").empty_keys, 3);
	assert_int_equal(test_emb_limit("shadow").dry_run_rejects, 3);
	assert_int_equal(test_emb_stat("shadow", RESIL_STAT_REJ_LIMITED), 0);
}

static void test_other_components(void **state)
{
	resil_policy_t *p;
	resil_permit_t a, b;

	(void)state;
	assert_int_equal(resil_define(test_emb_r, "stack",
				      "limit.rate = 1/m; limit.keys = 8; "
				      "bulkhead.max = 1"),
			 0);
	assert_int_equal(resil_policy(test_emb_r, "stack", &p), 0);
	assert_int_equal(empty(p, &a), RESIL_ADMIT);
	assert_int_equal(empty(p, &b), RESIL_REJECT_FULL);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(empty(p, &b), RESIL_ADMIT);
	resil_release(p, &b, RESIL_SUCCESS);
	assert_int_equal(test_emb_limit("stack").empty_keys, 3);
}

static void test_conf(void **state)
{
	struct resil_limit_conf c;
	char err[256], buf[512];

	(void)state;
	resil_limit_conf_defaults(&c);
	assert_int_equal(resil_limit_conf_set(&c, "limit.rate", "10/s", err, sizeof(err)), 0);
	assert_int_equal(resil_limit_conf_set(&c, "limit.keys", "4", err, sizeof(err)), 0);
	assert_int_equal(c.empty_key_reject, 0);
	resil_limit_conf_format(&c, buf, sizeof(buf));
	assert_null(strstr(buf, "empty_key"));
	assert_int_equal(resil_limit_conf_set(&c, "limit.empty_key", "reject", err, sizeof(err)),
			 0);
	assert_int_equal(c.empty_key_reject, 1);
	resil_limit_conf_format(&c, buf, sizeof(buf));
	assert_non_null(strstr(buf, "limit.empty_key = reject\n"));
	assert_int_equal(resil_limit_conf_set(&c, "limit.empty_key", "admit", err, sizeof(err)), 0);
	assert_int_equal(c.empty_key_reject, 0);
	assert_int_equal(resil_limit_conf_set(&c, "limit.empty_key", "skip", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "neither admit nor reject"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_admit, test_emb_open, test_emb_close),
	    cmocka_unit_test_setup_teardown(test_dry_run, test_emb_open, test_emb_close),
	    cmocka_unit_test_setup_teardown(test_other_components, test_emb_open, test_emb_close),
	    cmocka_unit_test(test_conf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

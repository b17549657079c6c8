/* SPDX-License-Identifier: MIT */
/*
 * counter_unit.c - adding a component takes its own files and one row of
 * the component table: the test-only counter component (shm/counter.c),
 * built into a copy of shm/ compiled with RESIL_TEST_COUNTER
 * (tests/CMakeLists.txt), on a real segment pair with a manual clock.
 * A policy defined with it lays out its state, decides, counts, formats
 * and parses back; a policy without it has no block for it; a bad value
 * is refused with a message.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "conf.h"
#include "counter.h"
#include "policy.h"
#include "resil.h"

static int64_t manual_ns = 1000000000;
static int64_t manual(void *ctx)
{
	return manual_ns;
}

static const struct resil_rec *define(struct resil_seg *s, const char *name, const char *text)
{
	struct resil_conf c;
	char err[256];
	uint64_t w;

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, text, 1, err, sizeof(err)), 0);
	assert_int_equal(resil_conf_check(&c, err, sizeof(err)), 0);
	assert_true(resil_seg_define(s, name, &c, 0, 0, manual_ns, err, sizeof(err)) >= 0);
	assert_int_equal(resil_seg_lookup(s, name, NULL, &w), 0);
	return resil_seg_rec_of(s, w);
}

static void test_row(void **state)
{
	bool found = false;

	for (const struct resil_comp_ops *const *op = resil_comps; *op; op++)
		found |= *op == &resil_counter_ops;
	assert_true(found);
}

static void test_decide_and_count(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = {.slots = 8, .clients = 8, .events = 64, .state_size = 8 << 20};
	struct resil_ctx x = {.seg = &s, .clock = {manual, NULL}, .client_id = 1};
	struct resil_permit_priv a, b, r;
	const struct resil_rec *rec, *plain;
	uint64_t acq, rel;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	rec = define(&s, "counted", "counter = on; bulkhead.max = 2");
	plain = define(&s, "plain", "bulkhead.max = 2");
	assert_true(resil_has(rec, RESIL_C_COUNTER));
	assert_true(resil_has(rec, RESIL_C_BULKHEAD));
	assert_false(resil_has(plain, RESIL_C_COUNTER));
	/* its block lies inside the policy's, after the fixed order's */
	assert_true(rec->comp_off[RESIL_C_COUNTER] > rec->comp_off[RESIL_C_STATS]);
	assert_true(rec->comp_off[RESIL_C_COUNTER] < rec->state_size);
	assert_true(resil_policy_layout_ok(rec));

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&r, 0, sizeof(r));
	assert_int_equal(resil_policy_acquire(&x, rec, &a, NULL, 0), 0);
	assert_int_equal(resil_policy_acquire(&x, rec, &b, NULL, 0), 0);
	/* the bulkhead is full: a rejection is not an acquire */
	assert_int_equal(resil_policy_acquire(&x, rec, &r, NULL, 0), RESIL_REJECT_FULL);
	resil_counter_read(resil_comp_state(&s, rec, RESIL_C_COUNTER), &acq, &rel);
	assert_int_equal(acq, 2);
	assert_int_equal(rel, 0);
	x.now = 0;
	resil_policy_release(&x, rec, &a, RESIL_SUCCESS);
	resil_policy_release(&x, rec, &b, RESIL_FAILURE);
	resil_counter_read(resil_comp_state(&s, rec, RESIL_C_COUNTER), &acq, &rel);
	assert_int_equal(acq, 2);
	assert_int_equal(rel, 2);

	/* the daemon's walkers reach it through the table: a tick and a
	 * reclaim leave its counts alone (it has nothing to do) */
	resil_policy_maintain(&x, rec);
	resil_counter_read(resil_comp_state(&s, rec, RESIL_C_COUNTER), &acq, &rel);
	assert_int_equal(acq, 2);
	assert_int_equal(rel, 2);
	resil_seg_unmap(&s);
}

static void test_format_parse(void **state)
{
	struct resil_conf c, d;
	char text[4096], err[256];

	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "counter = on; limit.rate = 5/s", 1, err, sizeof(err)), 0);
	resil_conf_format(&c, text, sizeof(text));
	assert_non_null(strstr(text, "counter = on\n"));
	resil_conf_init(&d);
	assert_int_equal(resil_conf_parse(&d, text, 1, err, sizeof(err)), 0);
	assert_memory_equal(&c, &d, sizeof(c));

	/* off: not formatted, no state */
	assert_int_equal(resil_conf_parse(&d, "counter = off", 1, err, sizeof(err)), 0);
	resil_conf_format(&d, text, sizeof(text));
	assert_null(strstr(text, "counter"));

	/* a bad value: refused, with what is wrong */
	resil_conf_init(&d);
	assert_int_equal(resil_conf_parse(&d, "counter = maybe", 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "counter: 'maybe' is not on or off"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_row),
	    cmocka_unit_test(test_decide_and_count),
	    cmocka_unit_test(test_format_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

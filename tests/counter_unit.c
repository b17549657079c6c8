/* SPDX-License-Identifier: MIT */
/*
 * counter_unit.c - adding a component takes its own files and one row of
 * the component table: the test-only counter component (shm/counter.c),
 * built into a copy of shm/ compiled with RESIL_TEST_COUNTER and
 * RESIL_COMP_HOOKS (tests/CMakeLists.txt), on a real segment pair with a
 * manual clock. A policy defined with it lays out its state, decides,
 * counts, formats and parses back; a policy without it has no block for
 * it; a bad value is refused with a message.
 *
 * What adding it touched: shm/counter.c and shm/counter.h (its row, its
 * key, its state, its hooks), its row in comp.c's resil_comps[] (the
 * declaration and the entry, under RESIL_TEST_COUNTER), the test build's
 * lines (SHM_TEST_SOURCES in CMakeLists.txt, the test target in
 * tests/CMakeLists.txt) and its layer in tests/sh_include_dag.sh.
 * Nothing else in shm/: its configuration word is its part of struct
 * resil_conf's extension area, declared by its row; its decision hooks
 * are called by policy.c through the table in any build that defines
 * RESIL_COMP_HOOKS; its id is a spare RESIL_C_*. tests/sh_comp_table.sh
 * checks that no other file of shm/ names it.
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
#include "seg_records.h"
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
	char err[256];

	for (const struct resil_comp_ops *const *op = resil_comps; *op; op++)
		found |= *op == &resil_counter_ops;
	assert_true(found);
	/* its part of the extension area fits and is its own */
	assert_int_equal(resil_comp_table_check(err, sizeof(err)), 0);
	assert_int_equal(resil_counter_ops.conf_ext_words, 1);
}

/* The configuration word is the row's part of the extension area, and
 * nothing else of struct resil_conf moves. */
static void test_conf_ext(void **state)
{
	struct resil_conf c, d;
	char err[256];

	resil_conf_init(&c);
	resil_conf_init(&d);
	assert_int_equal(resil_conf_parse(&c, "counter = on", 1, err, sizeof(err)), 0);
	assert_int_equal(*RESIL_COMP_CONF_EXT(&c, &resil_counter_ops), 1);
	*RESIL_COMP_CONF_EXT(&c, &resil_counter_ops) = 0;
	assert_memory_equal(&c, &d, sizeof(c));
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(d.reserved); i++)
		assert_int_equal(d.reserved[i], 0);
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
	    cmocka_unit_test(test_conf_ext),
	    cmocka_unit_test(test_decide_and_count),
	    cmocka_unit_test(test_format_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

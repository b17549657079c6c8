/* SPDX-License-Identifier: MIT */
/*
 * unit_policy.c - composition of components in one acquire/release, on a
 * real segment pair with a manual clock: nothing is spent when a later
 * component rejects, and policy.scope = process keeps one state per
 * process under one name.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "conf.h"
#include "resil.h"
#include "internal.h"
#include "budget.h"
#include "policy.h"
#include "seg_records.h"
#include "bulkhead.h"
#include "stats.h"

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
	assert_true(resil_seg_define(s, name, &c, 0, 0, manual_ns, err, sizeof(err)) >= 0);
	assert_int_equal(resil_seg_lookup(s, name, NULL, &w), 0);
	return resil_seg_rec_of(s, w);
}

static int call(struct resil_seg *s, const struct resil_rec *rec, uint32_t client, int outcome)
{
	struct resil_ctx x = {.seg = s, .clock = {manual, NULL}, .client_id = client};
	struct resil_permit_priv pm;
	int v;

	memset(&pm, 0, sizeof(pm));
	v = resil_policy_acquire(&x, rec, &pm, NULL, 0);
	if (v == 0) {
		x.now = 0;
		resil_policy_release(&x, rec, &pm, outcome);
	}
	return v;
}

/* A breaker that is OPEN rejects before the bulkhead spends a permit; a
 * full bulkhead gives back the rate-limit token it would have used. */
static void test_nothing_spent_on_reject(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = {.slots = 8, .clients = 8, .events = 64, .state_size = 8 << 20};
	struct resil_ctx x = {.seg = &s, .clock = {manual, NULL}, .client_id = 1};
	struct resil_permit_priv a, b;
	const struct resil_rec *rec;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	rec = define(&s, "dep",
		     "breaker.window = consecutive:1; breaker.wait = 1h; bulkhead.max = 1;"
		     "limit.rate = 2/h; limit.burst = 2");
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(resil_policy_acquire(&x, rec, &a, NULL, 0), 0);
	/* bulkhead full: the second caller is rejected FULL and its token
	 * comes back, so after the first release one more call fits */
	assert_int_equal(resil_policy_acquire(&x, rec, &b, NULL, 0), RESIL_REJECT_FULL);
	x.now = 0;
	resil_policy_release(&x, rec, &a, RESIL_SUCCESS);
	assert_int_equal(call(&s, rec, 1, RESIL_FAILURE), 0); /* second token: opens the breaker */
	assert_int_equal(call(&s, rec, 1, RESIL_SUCCESS), RESIL_REJECT_OPEN);
	assert_int_equal(
	    resil_bulkhead_held(&rec->conf.bulkhead, resil_comp_state(&s, rec, RESIL_C_BULKHEAD)),
	    0);
	uint64_t v[RESIL_STAT__MAX];
	resil_stats_read_all(resil_comp_state(&s, rec, RESIL_C_STATS), v);
	assert_int_equal(v[RESIL_STAT_REJ_FULL], 1);
	assert_int_equal(v[RESIL_STAT_REJ_OPEN], 1);
	assert_int_equal(v[RESIL_STAT_SUCCESS], 1);
	assert_int_equal(v[RESIL_STAT_FAILURE], 1);
	resil_seg_unmap(&s);
}

static void test_process_scope(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = {.slots = 8, .clients = 8, .events = 64, .state_size = 8 << 20};
	struct resil_ctx x = {.seg = &s, .clock = {manual, NULL}};
	struct resil_reclaim_counts counts = {0};
	const struct resil_rec *rec;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	rec = define(&s, "local",
		     "policy.scope = process; breaker.window = consecutive:2;"
		     "breaker.wait = 1h");
	assert_true(rec->proc_stride > 0);
	assert_int_equal(resil_seg_check(&s, NULL, 0), 0);
	/* client 1's failures open client 1's breaker only */
	assert_int_equal(call(&s, rec, 1, RESIL_FAILURE), 0);
	assert_int_equal(call(&s, rec, 1, RESIL_FAILURE), 0);
	assert_int_equal(call(&s, rec, 1, RESIL_SUCCESS), RESIL_REJECT_OPEN);
	assert_int_equal(call(&s, rec, 2, RESIL_SUCCESS), 0);
	assert_int_equal(call(&s, rec, 0, RESIL_SUCCESS), 0);
	assert_int_equal(resil_policy_breaker_state_of(&s, rec, 1), RESIL_STATE_OPEN);
	assert_int_equal(resil_policy_breaker_state_of(&s, rec, 2), RESIL_STATE_CLOSED);
	/* the counters stay fleet-wide */
	assert_int_equal(
	    resil_stats_read(resil_comp_state(&s, rec, RESIL_C_STATS), RESIL_STAT_FAILURE), 2);
	/* a dead process's copy starts fresh for the next one on its row */
	resil_policy_reclaim(&x, rec, 1, &counts);
	assert_int_equal(resil_policy_breaker_state_of(&s, rec, 1), RESIL_STATE_CLOSED);
	/* an operator's force reaches every copy */
	assert_int_equal(resil_policy_force(&x, rec, RESIL_STATE_FORCED_OPEN), 0);
	assert_int_equal(call(&s, rec, 2, RESIL_SUCCESS), RESIL_REJECT_OPEN);
	assert_int_equal(call(&s, rec, 5, RESIL_SUCCESS), RESIL_REJECT_OPEN);
	assert_int_equal(call(&s, rec, 0, RESIL_SUCCESS), RESIL_REJECT_OPEN);
	/* going back to fleet scope is a change of shape: one state again */
	rec = define(&s, "local", "breaker.window = consecutive:2; breaker.wait = 1h");
	assert_int_equal(rec->proc_stride, 0);
	assert_int_equal(resil_seg_check(&s, NULL, 0), 0);
	resil_seg_unmap(&s);
}

/* Each give-up is counted with its reason, whatever the policy has. */
static void test_giveups_by_reason(void **state)
{
	resil_t *r;
	resil_policy_t *p;
	resil_retry_t rt;
	const struct resil_rec *rec;
	uint64_t w;
	void *st;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	assert_int_equal(resil_define(r, "g", "retry.max_attempts = 2; retry.jitter = none"), 0);
	assert_int_equal(resil_policy(r, "g", &p), 0);
	/* attempts used up: one retry, then a stop */
	resil_retry_begin(p, &rt, 0);
	assert_true(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) >= 0);
	assert_true(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0);
	/* never retried */
	resil_retry_begin(p, &rt, 0);
	assert_true(resil_retry_next(&rt, RESIL_ERR_PERMANENT, 0) < 0);
	/* past the deadline */
	resil_retry_begin(p, &rt, manual_ns + 1000);
	assert_true(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0);
	assert_int_equal(resil_seg_lookup(&r->seg, "g", NULL, &w), 0);
	rec = resil_seg_rec_of(&r->seg, w);
	st = resil_comp_state(&r->seg, rec, RESIL_C_STATS);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_GIVEUPS), 3);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_RETRIES), 1);
	assert_int_equal(resil_stats_giveups_by(st, RESIL_RSTOP_ATTEMPTS), 1);
	assert_int_equal(resil_stats_giveups_by(st, RESIL_RSTOP_NOT_RETRIED), 1);
	assert_int_equal(resil_stats_giveups_by(st, RESIL_RSTOP_DEADLINE), 1);
	assert_int_equal(resil_stats_giveups_by(st, RESIL_RSTOP_BUDGET), 0);
	resil_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nothing_spent_on_reject),
	    cmocka_unit_test(test_process_scope),
	    cmocka_unit_test(test_giveups_by_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

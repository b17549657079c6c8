/* SPDX-License-Identifier: MIT */
/*
 * unit_maxima.c - every duration and count a client can define has a
 * stated maximum (conf_types.h), and the arithmetic on what a client can
 * reach saturates.
 *
 *   - each duration key: its maximum accepted, one nanosecond more and
 *     9223372036s (what overflowed before: bulkhead.wait, adaptive.window,
 *     adaptive.probe) refused with the key and the maximum in the message;
 *     the counts and multipliers the same way;
 *   - a retired record's grace period is taken saturating whatever its
 *     configuration holds;
 *   - a retry budget whose words hold the extremes (INT64_MIN, INT64_MAX,
 *     all ones in the ratio's windows) reads as a value of its range, and
 *     resild's cluster exchange (resild_cb_tick) adds and subtracts those
 *     readings and the answers' without overflow;
 *   - an adaptive limit on a clock at the ends of int64 schedules its
 *     probe saturating.
 * In the sanitizer build (-fno-sanitize-recover=undefined) any overflow
 * left is a crash of this test.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "adaptive.h"
#include "budget.h"
#include "cluster.h"
#include "cluster_budget.h"
#include "conf.h"
#include "policy.h"
#include "seg.h"
#include "seg_records.h"

static int parse(const char *text, char *err, size_t errlen)
{
	struct resil_conf c;
	int r;

	resil_conf_init(&c);
	err[0] = '\0';
	r = resil_conf_parse(&c, text, 1, err, errlen);
	if (r == 0)
		r = resil_conf_check(&c, err, errlen);
	return r;
}

static void accepted(const char *text)
{
	char err[512];

	if (parse(text, err, sizeof(err)) != 0)
		fail_msg("refused '%s': %s", text, err);
}

static void refused(const char *text, const char *key, const char *max)
{
	char err[512];

	if (parse(text, err, sizeof(err)) == 0)
		fail_msg("accepted '%s'", text);
	if (!strstr(err, key) || (max && !strstr(err, max)))
		fail_msg("'%s': the message '%s' names not %s and %s", text, err, key,
			 max ? max : "");
}

static void test_durations(void **unused)
{
	static const struct {
		const char *pre, *key, *max, *over;
	} d[] = {
	    {"", "breaker.slow_call", "168h", "168h1ns"},
	    {"", "breaker.wait", "168h", "168h1ns"},
	    {"", "breaker.wait_max", "168h", "168h1ns"},
	    {"", "breaker.half_open_max_wait", "168h", "168h1ns"},
	    {"limit.rate = 10/s; ", "limit.wait", "168h", "168h1ns"},
	    {"", "bulkhead.wait", "168h", "168h1ns"},
	    {"", "adaptive.window", "168h", "168h1ns"},
	    {"", "adaptive.probe", "168h", "168h1ns"},
	    {"", "shed.window", "168h", "168h1ns"},
	    {"", "retry.base", "168h", "168h1ns"},
	    {"", "retry.max_delay", "168h", "168h1ns"},
	    {"", "timeout", "168h", "168h1ns"},
	    {"idempotent = yes; ", "hedge.delay", "168h", "168h1ns"},
	};
	char text[256];

	(void)unused;
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
		snprintf(text, sizeof(text), "%s%s = 168h", d[i].pre, d[i].key);
		accepted(text);
		snprintf(text, sizeof(text), "%s%s = %s", d[i].pre, d[i].key, d[i].over);
		refused(text, d[i].key, d[i].max);
		snprintf(text, sizeof(text), "%s%s = 9223372036s", d[i].pre, d[i].key);
		refused(text, d[i].key, NULL);
	}
	accepted("limit.rate = 1000/8784h");
	refused("limit.rate = 1000/8785h", "limit.rate", "8784h");
	refused("retry.on.throttled = base:169h", "base", "168h");
	refused("retry.on.throttled = max_delay:169h", "max_delay", "168h");
}

static void test_counts(void **unused)
{
	(void)unused;
	accepted("breaker.window = consecutive:1000000");
	refused("breaker.window = consecutive:1000001", "breaker.window", "1000000");
	accepted("breaker.min_calls = 1000000");
	refused("breaker.min_calls = 1000001", "breaker.min_calls", "1000000");
	accepted("breaker.wait_multiplier = 100");
	refused("breaker.wait_multiplier = 101", "breaker.wait_multiplier", "100");
	refused("breaker.wait_multiplier = 4000000", "breaker.wait_multiplier", "100");
	refused("retry.on.throttled = multiplier:101", "multiplier", "100");
}

/* A budget's words at the extremes read as values of its range; the
 * cluster exchange over them does not overflow. */
static void test_budget_words(void **unused)
{
	struct resil_seg_params sp = {.slots = 8, .clients = 8, .state_size = 1 << 22};
	struct resil_seg s;
	struct resil_conf c;
	const struct resil_rec *rec;
	const struct resil_retry_conf *bc;
	struct resil_budget_state *b;
	char err[256] = "";
	uint64_t w;
	uint32_t slot;
	int64_t was, v;
	static const int64_t ext[] = {INT64_MIN, -1, 0, 1, INT64_MAX};

	(void)unused;
	assert_int_equal(resil_seg_create(&s, &sp), 0);
	for (int kind = 0; kind < 2; kind++) {
		const char *name = kind ? "ratio" : "grpc";

		resil_conf_init(&c);
		assert_int_equal(
		    resil_conf_parse(&c,
				     kind ? "policy.scope = global; retry.budget = ratio:10"
					  : "policy.scope = global; retry.budget = grpc:10:0.1",
				     1, err, sizeof(err)),
		    0);
		assert_true(resil_seg_define(&s, name, &c, 0, 0, 1, err, sizeof(err)) >= 0);
		assert_int_equal(resil_seg_lookup(&s, name, &slot, &w), 0);
		rec = resil_seg_rec_of(&s, w);
		b = resil_budget_state_for(&s, rec, &bc);
		assert_non_null(b);
		for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
			struct resild_cb_slot cs = {0};
			struct resild_cb_req q;
			struct resild_cb_ans a = {0};

			st_relaxed(&b->tokens_milli, ext[i]);
			for (size_t k = 0; k < sizeof(b->req) / sizeof(b->req[0]); k++) {
				st_relaxed(&b->req[k], UINT64_MAX);
				st_relaxed(&b->rty[k], (uint64_t)ext[i]);
			}
			st_relaxed(&b->g_req, UINT64_MAX);
			st_relaxed(&b->g_rty, UINT64_MAX);
			v = resil_budget_tokens_milli(b, bc, 1);
			if (!kind)
				assert_true(v >= 0 && v <= 10 * 1000);
			/* reports and answers at the extremes, then the words
			 * again at the other end */
			for (int round = 0; round < 4; round++) {
				memset(&q, 0, sizeof(q));
				a.fresh = round > 0;
				a.seq = cs.seq;
				a.seen_milli = round & 1 ? 0 : 10 * 1000;
				a.tokens_milli = ext[(i + round) % 5] < 0 ? 0 : 10 * 1000;
				struct resild_cb_env e = {.now = 1 + round,
							  .interval_ns = 100000000,
							  .lease_ns = 300000000,
							  .hold_ns = 300000000,
							  .fallback = RESILD_FALLBACK_SHARE,
							  .hosts = 3,
							  .post = true};

				resild_cb_tick(&s, rec, &cs, &a, &q, &e);
				st_relaxed(&b->tokens_milli, ext[(i + round + 1) % 5]);
			}
			if (!kind) {
				v = resil_budget_mirror_tokens(b, bc, 5000, ext[i] < 0 ? 0 : 10000,
							       &was);
				assert_true(v >= 0 && v <= 10 * 1000);
				assert_true(was >= 0 && was <= 10 * 1000);
			}
		}
	}
	resil_seg_unmap(&s);
}

/* An adaptive limit maintained on a clock at the ends of int64: the
 * probe's time is taken saturating. */
static void test_adaptive_clock(void **unused)
{
	struct resil_conf c;
	char err[256] = "";
	static unsigned char st[1 << 16] __attribute__((aligned(128)));
	static const int64_t now[] = {INT64_MAX - 1, INT64_MAX / 2, 1};

	(void)unused;
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(
		&c,
		"adaptive.algorithm = vegas; adaptive.max = 20; adaptive.probe = 168h; "
		"adaptive.window = 168h",
		1, err, sizeof(err)),
	    0);
	assert_true(resil_adaptive_state_size(&c.adaptive) <= sizeof(st));
	for (size_t i = 0; i < sizeof(now) / sizeof(now[0]); i++) {
		struct resil_ctx x = {0};

		resil_adaptive_state_init(st, &c.adaptive, now[i]);
		x.now = now[i];
		resil_adaptive_maintain(&x, &c.adaptive, st);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durations),
	    cmocka_unit_test(test_counts),
	    cmocka_unit_test(test_budget_words),
	    cmocka_unit_test(test_adaptive_clock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

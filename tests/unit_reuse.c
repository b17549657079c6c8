/* SPDX-License-Identifier: MIT */
/*
 * unit_reuse.c - the daemon's reuse of records and arena blocks (seg_reuse.c,
 * docs/internals/seg.md "Reuse") on a real segment pair:
 *   - a deleted policy's block waits out the grace period, then a policy
 *     of the same size gets the same offset; neighbouring holes merge and
 *     a hole at the end lowers the bump pointer back to 0;
 *   - records: the never used ones first, then the one retired longest
 *     ago once its grace period is over (its gen read 0 meanwhile); with
 *     every record waiting, a define says so (-EAGAIN naming the grace
 *     period, and resil_seg_next_free_ns when the first comes free);
 *   - each record and block has its own policy's grace period: a live
 *     policy with the longest bulkhead.wait allowed delays nobody else's
 *     reuse, and its own retired space waits that wait;
 *   - a restart (reuse_init on the same pair) rebuilds the lists from the
 *     slot words: what no live record names waits again;
 *   - policy.scope = process at the default --clients: one policy with a
 *     breaker and the histogram takes under 2 MiB of the arena (32.3 MiB
 *     when every process's copy held the whole block, histogram included);
 *     the copies hold the decision components only, so the histogram does
 *     not change their size.
 * The grace period runs on the real clock: reclaim is given a time past it.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "resil.h"
#include "breaker.h"
#include "conf.h"
#include "policy.h"
#include "seg.h"
#include "seg_records.h"
#include "stats.h"

static int64_t later(void)
{
	return resil_clock_monotonic(NULL) + 10 * RESIL_REUSE_GRACE_NS;
}

static void define(struct resil_seg *s, const char *name, const char *text)
{
	struct resil_conf c;
	char err[256] = "";
	int r;

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, text, 1, err, sizeof(err)), 0);
	r = resil_seg_define(s, name, &c, 0, 0, resil_clock_monotonic(NULL), err, sizeof(err));
	if (r < 0)
		fail_msg("define %s: %s", name, err);
}

static const struct resil_rec *rec_of(struct resil_seg *s, const char *name)
{
	uint64_t w;

	assert_int_equal(resil_seg_lookup(s, name, NULL, &w), 0);
	return resil_seg_rec_of(s, w);
}

static void setup(struct resil_seg *s, uint32_t slots)
{
	struct resil_seg_params p = {.slots = slots, .clients = 8, .state_size = 8u << 20};

	assert_int_equal(resil_seg_create(s, &p), 0);
	resil_seg_own_arena(s);
	assert_int_equal(resil_seg_reuse_init(s, resil_clock_monotonic(NULL)), 0);
}

static void test_blocks(void **state)
{
	struct resil_seg s;
	struct resil_seg_usage u;
	uint64_t off_b, size_b;

	(void)state;
	setup(&s, 16);
	define(&s, "a", "limit.rate = 10/s\nlimit.keys = 100");
	define(&s, "b", "limit.rate = 10/s\nlimit.keys = 100");
	define(&s, "c", "limit.rate = 10/s\nlimit.keys = 100");
	off_b = rec_of(&s, "b")->state_off;
	size_b = rec_of(&s, "b")->state_size;
	assert_int_equal(resil_seg_delete(&s, "b"), 0);
	resil_seg_usage(&s, &u);
	assert_true(u.arena_waiting >= size_b);
	/* within the grace period the block stays out of reach */
	resil_seg_reclaim(&s, resil_clock_monotonic(NULL));
	define(&s, "d", "limit.rate = 10/s\nlimit.keys = 100");
	assert_int_not_equal(rec_of(&s, "d")->state_off, off_b);
	/* after it: a hole; the next block of that size takes its place */
	resil_seg_reclaim(&s, later());
	resil_seg_usage(&s, &u);
	assert_int_equal(u.arena_waiting, 0);
	assert_int_equal(u.arena_holes, 1);
	define(&s, "e", "limit.rate = 10/s\nlimit.keys = 100");
	assert_int_equal(rec_of(&s, "e")->state_off, off_b);
	resil_seg_usage(&s, &u);
	assert_int_equal(u.arena_holes, 0);
	/* a reshape retires the old block too */
	define(&s, "e", "limit.rate = 10/s\nlimit.keys = 200");
	assert_int_not_equal(rec_of(&s, "e")->state_off, off_b);
	/* everything deleted: the holes merge and give the tail back */
	assert_int_equal(resil_seg_delete(&s, "a"), 0);
	assert_int_equal(resil_seg_delete(&s, "c"), 0);
	assert_int_equal(resil_seg_delete(&s, "d"), 0);
	assert_int_equal(resil_seg_delete(&s, "e"), 0);
	resil_seg_reclaim(&s, later());
	resil_seg_usage(&s, &u);
	assert_int_equal(u.arena_used, 0);
	assert_int_equal(u.arena_holes, 0);
	assert_int_equal(u.arena_largest_free, u.arena);
	assert_int_equal(u.records_used, 0);
	assert_int_equal(s.arena_used, 0);
	resil_seg_unmap(&s);
}

static void test_records(void **state)
{
	struct resil_seg s;
	struct resil_seg_usage u;
	struct resil_conf c;
	char err[256] = "";
	const struct resil_rec *first;
	uint32_t cap;

	(void)state;
	setup(&s, 2);
	cap = s.cfg->rec_cap;
	/* every change takes a never used record while there is one */
	define(&s, "x", "bulkhead.max = 1");
	first = rec_of(&s, "x");
	for (uint32_t i = 1; i < cap; i++) {
		char text[64];

		snprintf(text, sizeof(text), "bulkhead.max = %u", i + 1);
		define(&s, "x", text);
	}
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_used, cap);
	assert_int_equal(u.records_waiting, cap - 1);
	/* all waiting out their grace period: not now (-EAGAIN: a caller may
	 * wait for them), says why, and when the first comes free */
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "bulkhead.max = 99", 1, err, sizeof(err)), 0);
	assert_int_equal(resil_seg_define(&s, "x", &c, 0, 0, 0, err, sizeof(err)), -EAGAIN);
	assert_non_null(strstr(err, "grace period"));
	assert_true(resil_seg_next_free_ns(&s, true) <=
		    resil_clock_monotonic(NULL) + RESIL_REUSE_GRACE_NS);
	assert_true(resil_seg_next_free_ns(&s, true) >
		    resil_clock_monotonic(NULL) - RESIL_REUSE_GRACE_NS);
	/* past it: the record retired first is invalidated, then reused */
	resil_seg_reclaim(&s, later());
	assert_int_equal(first->gen, 0);
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_used, 1);
	assert_int_equal(u.records_waiting, 0);
	define(&s, "x", "bulkhead.max = 99");
	assert_ptr_equal(rec_of(&s, "x"), first);
	assert_int_not_equal(first->gen, 0);
	assert_int_equal(first->conf.bulkhead.max, 99);
	resil_seg_unmap(&s);
}

/* A member keeps a policy with the longest wait allowed live and another
 * churns: the churned records and blocks come free after the grace
 * period alone; the long-wait policy's own retired record and block wait
 * its wait (1 s + a week), and nobody else's. */
static void test_grace_own(void **state)
{
	struct resil_seg s;
	struct resil_seg_usage u;
	int64_t t0 = resil_clock_monotonic(NULL), week = RESIL_WAIT_MAX_NS;

	(void)state;
	setup(&s, 4);
	define(&s, "long", "bulkhead.max = 2; bulkhead.wait = 168h");
	for (int i = 0; i < 40; i++) {
		define(&s, "churn",
		       i & 1 ? "limit.rate = 10/s; limit.keys = 64"
			     : "limit.rate = 10/s; limit.keys = 32");
		assert_int_equal(resil_seg_delete(&s, "churn"), 0);
		resil_seg_reclaim(&s, later());
	}
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_waiting, 0);
	assert_int_equal(u.arena_waiting, 0);
	assert_int_equal(u.records_used, 1); /* "long" alone */
	/* the long-wait policy reshaped: its old record and block wait the week */
	define(&s, "long", "bulkhead.max = 3; bulkhead.wait = 168h");
	resil_seg_reclaim(&s, later());
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_waiting, 1);
	assert_true(u.arena_waiting > 0);
	assert_true(resil_seg_next_free_ns(&s, true) >= t0 + week);
	resil_seg_reclaim(&s, resil_clock_monotonic(NULL) + week + 2 * RESIL_REUSE_GRACE_NS);
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_waiting, 0);
	assert_int_equal(u.arena_waiting, 0);
	resil_seg_unmap(&s);
}

static void test_restart(void **state)
{
	struct resil_seg s;
	struct resil_seg_usage u;
	uint64_t used;

	(void)state;
	setup(&s, 16);
	define(&s, "a", "limit.rate = 10/s\nlimit.keys = 100");
	define(&s, "b", "limit.rate = 10/s\nlimit.keys = 100");
	define(&s, "a", "limit.rate = 20/s\nlimit.keys = 100"); /* same shape */
	define(&s, "c", "limit.rate = 10/s\nlimit.keys = 100");
	assert_int_equal(resil_seg_delete(&s, "b"), 0);
	used = s.arena_used;
	/* a new daemon adopting the pair: its lists are rebuilt from the
	 * slot words (the old ones died with the old daemon) */
	resil_seg_own_arena(&s);
	assert_int_equal(s.arena_used, used);
	assert_int_equal(resil_seg_reuse_init(&s, resil_clock_monotonic(NULL)), 0);
	resil_seg_usage(&s, &u);
	/* 4 handed out; a's first record and b's are named by no slot */
	assert_int_equal(u.records_used, 4);
	assert_int_equal(u.records_waiting, 2);
	assert_int_equal(u.arena_waiting, rec_of(&s, "a")->state_size);
	resil_seg_reclaim(&s, later());
	resil_seg_usage(&s, &u);
	assert_int_equal(u.records_used, 2);
	assert_int_equal(u.arena_holes, 1);
	resil_seg_unmap(&s);
}

/* One policy's arena bytes: the bump pointer's move on an empty arena. */
static uint64_t arena_of(struct resil_seg *s, const char *name, const char *text)
{
	struct resil_seg_usage before, after;

	resil_seg_usage(s, &before);
	define(s, name, text);
	resil_seg_usage(s, &after);
	return after.arena_used - before.arena_used;
}

#define PROC_BREAKER "policy.scope = process\nbreaker.window = count:100"

static void test_procscope_size(void **state)
{
	struct resil_seg_params p = {.slots = 16}; /* default --clients and --state-size */
	struct resil_seg s;
	const struct resil_rec *h, *n;
	uint64_t with_hist, without;

	(void)state;
	assert_int_equal(resil_seg_create(&s, &p), 0);
	resil_seg_own_arena(&s);
	assert_int_equal(resil_seg_reuse_init(&s, resil_clock_monotonic(NULL)), 0);
	assert_int_equal(s.geo.client_cap, RESIL_CLIENTS_DEFAULT);

	with_hist = arena_of(&s, "hist", PROC_BREAKER "\nhistogram = on");
	without = arena_of(&s, "plain", PROC_BREAKER);
	h = rec_of(&s, "hist");
	n = rec_of(&s, "plain");
	print_message("process scope, --clients %u: breaker count:100 %" PRIu64
		      " bytes (copy %" PRIu64 "), with the histogram %" PRIu64
		      " bytes (copy %" PRIu64 ")\n",
		      s.geo.client_cap, without, n->proc_stride, with_hist, h->proc_stride);
	assert_true(with_hist < (2u << 20));
	/* the histogram is in the main block only */
	assert_int_equal(h->proc_stride, n->proc_stride);
	assert_true(h->state_size > n->state_size);
	assert_int_equal(with_hist - without, h->state_size - n->state_size);
	/* a copy covers the breaker and stops before the counters */
	assert_true(h->comp_off[RESIL_C_BREAKER] < h->proc_stride);
	assert_true(h->comp_off[RESIL_C_STATS] >= h->proc_stride);
	assert_true(resil_policy_layout_ok(h));
	resil_seg_unmap(&s);
}

/* A record whose layout is not the one its configuration gives (counters
 * first, then the breaker, copies of the whole block), or that mixes two
 * (that block with the copy stride of this one), is refused by the check,
 * so adoption resets it rather than read it. */
static void test_layout_other(void **state)
{
	struct resil_seg s;
	struct resil_rec *rec, other;
	uint64_t stats, w;

	(void)state;
	setup(&s, 16);
	define(&s, "p", PROC_BREAKER "\nhistogram = on");
	assert_int_equal(resil_seg_lookup(&s, "p", NULL, &w), 0);
	rec = resil_seg_rec_of(&s, w);
	assert_true(resil_policy_layout_ok(rec));
	other = *rec;
	stats = resil_align_up(resil_stats_state_size(&rec->conf), RESIL_HOT_ALIGN);
	memset(other.comp_off, 0, sizeof(other.comp_off));
	other.comp_off[RESIL_C_BREAKER] = (uint32_t)stats;
	other.state_size =
	    stats + resil_align_up(resil_breaker_state_size(&rec->conf.breaker), RESIL_HOT_ALIGN);
	other.proc_stride = other.state_size;
	assert_false(resil_policy_layout_ok(&other));
	other.proc_stride = rec->proc_stride;
	assert_false(resil_policy_layout_ok(&other));
	resil_seg_unmap(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_blocks),	   cmocka_unit_test(test_records),
	    cmocka_unit_test(test_grace_own),	   cmocka_unit_test(test_restart),
	    cmocka_unit_test(test_procscope_size), cmocka_unit_test(test_layout_other),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

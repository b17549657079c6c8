/* SPDX-License-Identifier: MIT */
/*
 * unit_trust.c - hostile words in a policy's state block, on a real
 * segment pair (resil_seg_create) and a manual clock: a caller's acquire
 * and release and the daemon's maintain neither crash nor overflow
 * (UBSan in the sanitizer pass), and the maintain pass repairs and counts
 * what it acts on:
 *   - shed: width_ns = 0 (a divisor once: SIGFPE), epochs at 0, all ones
 *     and far ahead;
 *   - breaker: the layout offsets pointed outside the block, a state code
 *     outside the enum (rejected for ever before), base_ns at the ends of
 *     int64;
 *   - limit: a GCRA TAT near INT64_MAX, sliding-ring slots at the ends
 *     of int64;
 *   - bulkhead: counts and the repair's memory at the ends of int32.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf.h"
#include "breaker.h"
#include "bulkhead.h"
#include "limit.h"
#include "policy.h"
#include "resil.h"
#include "seg.h"
#include "shed.h"
#include "segfix.h"

/* Decide a few calls of each outcome, then one maintain pass: its repairs. */
static uint32_t exercise(struct resil_seg *s, const struct resil_rec *rec)
{
	struct resil_ctx x;

	for (int i = 0; i < 40; i++) {
		struct resil_permit_priv pm = {0};

		ctx_init(&x, s);
		if (resil_policy_acquire(&x, rec, &pm, NULL, 0) == 0) {
			ctx_init(&x, s);
			resil_policy_release(&x, rec, &pm, i % 3 ? RESIL_SUCCESS : RESIL_FAILURE);
		}
		now_ns += RESIL_NS_PER_S / 8;
	}
	ctx_init(&x, s);
	resil_policy_maintain(&x, rec);
	return x.repairs;
}

static void test_shed_width(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec;
	struct resil_shed_state *sh;
	const uint64_t epochs[] = {0, UINT64_MAX, UINT64_MAX / 2, (uint64_t)INT64_MAX};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec = define(&s, "shed", "shed.window = 2s");
	sh = resil_comp_state(&s, rec, RESIL_C_SHED);
	for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]); i++) {
		sh->width_ns = 0;
		st_relaxed(&sh->epoch, epochs[i]);
		st_relaxed(&sh->b[0].requests, INT64_MAX);
		st_relaxed(&sh->b[1].requests, INT64_MAX);
		assert_true(exercise(&s, rec) >= 1); /* the width, at least */
		assert_int_equal(sh->width_ns, 2 * RESIL_NS_PER_S / RESIL_SHED_BUCKETS);
	}
	resil_seg_unmap(&s);
}

static void test_breaker_words(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec[3];
	const int64_t bases[] = {INT64_MAX, INT64_MIN, 0};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec[0] = define(&s, "count", "breaker.window = count:10; breaker.wait = 1s");
	rec[1] = define(&s, "time", "breaker.window = time:10s");
	rec[2] = define(&s, "cons", "breaker.window = consecutive:3");
	for (int k = 0; k < 3; k++) {
		struct resil_breaker_state *b = resil_comp_state(&s, rec[k], RESIL_C_BREAKER);

		for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
			b->win_off = 0xfffffff0u;
			b->probe_off = 0x7fffffffu;
			b->size = 0;
			b->base_ns = bases[i];
			assert_true(exercise(&s, rec[k]) >= 1);
			assert_true(b->win_off < rec[k]->state_size);
		}
		/* a state code outside the enum: repaired to a fresh CLOSED */
		st_relaxed(&b->word, (ld_relaxed(&b->word) & ~7ULL) | 7);
		assert_true(exercise(&s, rec[k]) >= 1);
		assert_int_equal(resil_breaker_state(b), RESIL_STATE_CLOSED);
		/* a forced state stays what the operator chose */
		{
			struct resil_ctx x;

			ctx_init(&x, &s);
			assert_int_equal(resil_policy_force(&x, rec[k], RESIL_STATE_DISABLED), 0);
			assert_int_equal(exercise(&s, rec[k]), 0);
			assert_int_equal(resil_breaker_state(b), RESIL_STATE_DISABLED);
			assert_int_equal(resil_policy_force(&x, rec[k], RESIL_STATE_CLOSED), 0);
		}
	}
	resil_seg_unmap(&s);
}

static void test_limit_tat(void **state)
{
	struct resil_seg s;
	const struct resil_rec *g, *sl;
	struct resil_limit_state *ls;
	const int64_t tats[] = {INT64_MAX, INT64_MAX - 1, INT64_MIN, -1};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	g = define(&s, "gcra", "limit.rate = 10/s; limit.burst = 5");
	sl = define(&s, "slide", "limit.rate = 10/s; limit.algorithm = sliding");
	ls = resil_comp_state(&s, g, RESIL_C_LIMIT);
	for (size_t i = 0; i < sizeof(tats) / sizeof(tats[0]); i++) {
		st_relaxed(&ls->word, (uint64_t)tats[i]);
		exercise(&s, g);
		/* healed: admits again once the burst is back */
		now_ns += 20 * RESIL_NS_PER_S;
		{
			struct resil_ctx x;
			struct resil_permit_priv pm = {0};

			ctx_init(&x, &s);
			assert_int_equal(resil_policy_acquire(&x, g, &pm, NULL, 0), 0);
			resil_policy_release(&x, g, &pm, RESIL_SUCCESS);
		}
	}
	ls = resil_comp_state(&s, sl, RESIL_C_LIMIT);
	for (size_t i = 0; i < sizeof(tats) / sizeof(tats[0]); i++) {
		rai64 *ring = (rai64 *)(void *)ls->data;

		for (uint32_t k = 0; k < sl->conf.limit.count; k++)
			st_relaxed(&ring[k], tats[(i + k) % 4]);
		exercise(&s, sl);
	}
	resil_seg_unmap(&s);
}

static void test_bulkhead_counts(void **state)
{
	struct resil_seg s;
	const struct resil_rec *rec;
	struct resil_bulkhead_state *bh;
	const uint32_t counts[] = {0x80000000u, 0x7fffffffu, 0xffffffffu, 0};

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	rec = define(&s, "bulk", "bulkhead.max = 2000");
	bh = resil_comp_state(&s, rec, RESIL_C_BULKHEAD);
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		st_relaxed(&bh->full, counts[i]);
		st_relaxed(&bh->nwait, counts[i]);
		bh->prev_excess = i % 2 ? INT32_MAX : INT32_MIN;
		bh->prev_wexcess = i % 2 ? INT32_MAX : INT32_MIN;
		exercise(&s, rec);
		exercise(&s, rec);
	}
	resil_seg_unmap(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shed_width),
	    cmocka_unit_test(test_breaker_words),
	    cmocka_unit_test(test_limit_tat),
	    cmocka_unit_test(test_bulkhead_counts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

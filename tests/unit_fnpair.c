/* SPDX-License-Identifier: MIT */
/*
 * unit_fnpair.c - resil_set_clock and resil_set_random publish their
 * {fn, ctx} pair as one: while one thread switches between two pairs,
 * threads deciding (acquire, release, resil_now) never call one pair's fn
 * with the other pair's ctx. Each fn checks that it got its own ctx. The
 * switcher runs for a few seconds (RESIL_TEST_SCALE times), publishing
 * the same two pairs again and again (they are allocated once).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "resil.h"
#include "common.h"
#include "testutil.h"

#define DECIDERS 3

struct pair {
	int64_t base; /* the time this clock reads */
};

static struct pair pa = {1000 * RESIL_NS_PER_S}, pb = {2000 * RESIL_NS_PER_S};
static _Atomic long mismatches, calls;
static atomic_bool stop;

static int64_t clock_a(void *ctx)
{
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	if (ctx != &pa)
		atomic_fetch_add_explicit(&mismatches, 1, memory_order_relaxed);
	return pa.base;
}

static int64_t clock_b(void *ctx)
{
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	if (ctx != &pb)
		atomic_fetch_add_explicit(&mismatches, 1, memory_order_relaxed);
	return pb.base;
}

static uint64_t random_a(void *ctx)
{
	if (ctx != &pa)
		atomic_fetch_add_explicit(&mismatches, 1, memory_order_relaxed);
	return 0;
}

static uint64_t random_b(void *ctx)
{
	if (ctx != &pb)
		atomic_fetch_add_explicit(&mismatches, 1, memory_order_relaxed);
	return UINT64_MAX;
}

struct arg {
	resil_t *r;
	resil_policy_t *p[2];
};

static void *decider(void *v)
{
	struct arg *a = v;
	resil_permit_t pm;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (int i = 0; i < 2; i++) {
			/* failures keep the shedder's probability above 0, so
			 * its acquire draws from the random source */
			if (resil_acquire(a->p[i], &pm) == RESIL_ADMIT)
				resil_release(a->p[i], &pm, i ? RESIL_FAILURE : RESIL_SUCCESS);
		}
		(void)resil_now(a->r);
	}
	return NULL;
}

static void test_pairs_never_torn(void **unused)
{
	struct resil_embedded_opts o = {.slots = 16, .clients = 16, .state_size = 1 << 22};
	pthread_t th[DECIDERS];
	struct arg a;
	/* switching for a few seconds: a torn pair needs the switcher
	 * preempted between its two stores, a few times a second here */
	int64_t until = test_mono_ns() + 3LL * RESIL_NS_PER_S * resil_test_scale();
	long switches = 0;

	assert_int_equal(resil_open_embedded(&a.r, &o), 0);
	/* the clock on the hot path (the rate limiter reads it on every
	 * acquire) and the random source (the shedder, once failures count) */
	assert_int_equal(resil_define(a.r, "clocked", "limit.rate = 1000000000/s"), 0);
	assert_int_equal(resil_define(a.r, "shed", "shed.k = 1"), 0);
	assert_int_equal(resil_policy(a.r, "clocked", &a.p[0]), 0);
	assert_int_equal(resil_policy(a.r, "shed", &a.p[1]), 0);
	assert_int_equal(resil_set_clock(a.r, clock_a, &pa), 0);
	for (int i = 0; i < DECIDERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, decider, &a), 0);
	for (long i = 0; i < 100000 || test_mono_ns() < until; i++, switches++) {
		if (i & 1) {
			assert_int_equal(resil_set_clock(a.r, clock_a, &pa), 0);
			assert_int_equal(resil_set_random(a.r, random_a, &pa), 0);
		} else {
			assert_int_equal(resil_set_clock(a.r, clock_b, &pb), 0);
			assert_int_equal(resil_set_random(a.r, random_b, &pb), 0);
		}
	}
	atomic_store(&stop, true);
	for (int i = 0; i < DECIDERS; i++)
		pthread_join(th[i], NULL);
	print_message("%ld switches, %ld clock reads, %ld mismatched pairs\n", switches,
		      atomic_load(&calls), atomic_load(&mismatches));
	assert_true(atomic_load(&calls) > 0);
	assert_int_equal(atomic_load(&mismatches), 0);
	/* back to the default pairs: the real clock, the thread generator */
	assert_int_equal(resil_set_clock(a.r, NULL, NULL), 0);
	assert_int_equal(resil_set_random(a.r, NULL, NULL), 0);
	assert_true(resil_now(a.r) != pa.base && resil_now(a.r) != pb.base);
	resil_close(a.r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pairs_never_torn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

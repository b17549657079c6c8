/* SPDX-License-Identifier: MIT */
/*
 * unit_limit_global.c - the shm side of global keyed limiters on a plain
 * state block and a manual clock: the admissions counted per key and
 * collected once, the charges of other hosts' admissions (on a key held,
 * on a key never seen here, saturated), and the words a client could have
 * scribbled on cut to what a GCRA can admit.
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

#include "limit.h"
#include "limit_global.h"
#include "resil.h"

#define S RESIL_NS_PER_S

struct fx {
	struct resil_limit_conf c;
	struct resil_limit_state *st;
	struct resil_ctx x;
	int64_t now;
};

static int64_t clk_fn(void *ctx)
{
	return *(int64_t *)ctx;
}

/* 100 per 60 s, burst 100, 64 keys; global or not */
static void fx_init(struct fx *f, bool global, int64_t wait_ns)
{
	char err[256];
	uint64_t size;

	memset(f, 0, sizeof(*f));
	resil_limit_conf_defaults(&f->c);
	assert_int_equal(resil_limit_conf_set(&f->c, "limit.rate", "100/60s", err, sizeof(err)), 0);
	assert_int_equal(resil_limit_conf_set(&f->c, "limit.burst", "100", err, sizeof(err)), 0);
	assert_int_equal(resil_limit_conf_set(&f->c, "limit.keys", "64", err, sizeof(err)), 0);
	f->c.wait_ns = wait_ns;
	f->c.global = global;
	assert_int_equal(resil_limit_conf_check(&f->c, err, sizeof(err)), 0);
	size = resil_limit_state_size(&f->c);
	f->st = aligned_alloc(RESIL_HOT_ALIGN, resil_align_up(size, RESIL_HOT_ALIGN));
	assert_non_null(f->st);
	memset(f->st, 0xa5, size);
	resil_limit_state_init(f->st, &f->c, 0);
	f->now = 1000 * S;
	f->x.clock.fn = clk_fn;
	f->x.clock.ctx = &f->now;
}

static int acq_n(struct fx *f, const char *key, uint32_t n)
{
	struct resil_permit_priv pm = {0};

	pm.limit_permits = n;
	f->x.now = 0;
	f->x.key = key;
	f->x.key_len = strlen(key);
	return resil_limit_acquire(&f->x, &f->c, f->st, &pm);
}

/* The fingerprint limit.c gives key without a segment (its fixed key). */
static uint64_t fp_of(const char *key)
{
	uint64_t fp = resil_hash64(key, strlen(key), 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL) &
		      ~(1ULL << 63);

	return fp < 2 ? fp + 2 : fp;
}

struct got {
	int n;
	uint64_t fp[8];
	uint32_t cnt[8];
};

static void got_fn(void *arg, uint64_t fp, uint32_t n)
{
	struct got *g = arg;

	if (g->n < 8) {
		g->fp[g->n] = fp;
		g->cnt[g->n] = n;
	}
	g->n++;
}

static uint32_t count_of(const struct got *g, uint64_t fp)
{
	for (int i = 0; i < g->n && i < 8; i++)
		if (g->fp[i] == fp)
			return g->cnt[i];
	return 0;
}

static void test_collect(void **unused)
{
	struct fx f;
	struct got g = {0};
	uint32_t cap;

	(void)unused;
	fx_init(&f, true, 0);
	cap = resil_limit_global_cap(&f.c, 100 * RESIL_NS_PER_MS);
	assert_int_equal(cap, 101); /* burst + 1: 100 ms holds no permit of 600 ms */
	for (int i = 0; i < 3; i++)
		assert_int_equal(acq_n(&f, "192.0.2.1", 1), 0);
	assert_int_equal(acq_n(&f, "192.0.2.2", 2), 0);
	assert_int_equal(resil_limit_global_collect(&f.c, f.st, cap, got_fn, &g), 2);
	assert_int_equal(count_of(&g, fp_of("192.0.2.1")), 3);
	assert_int_equal(count_of(&g, fp_of("192.0.2.2")), 2);
	/* read once: nothing until the next admission */
	memset(&g, 0, sizeof(g));
	assert_int_equal(resil_limit_global_collect(&f.c, f.st, cap, got_fn, &g), 0);
	assert_int_equal(acq_n(&f, "192.0.2.2", 1), 0);
	assert_int_equal(resil_limit_global_collect(&f.c, f.st, cap, got_fn, &g), 1);
	assert_int_equal(g.cnt[0], 1);

	/* a counter a client scribbled on is cut to what a GCRA admits */
	for (uint64_t i = 0; i < 128; i++) /* 64 keys: 32 buckets of 4 entries */
		st_relaxed(&resil_limit_global_counts(&f.c, f.st)[i], 0);
	assert_int_equal(acq_n(&f, "192.0.2.1", 1), 0);
	for (uint64_t i = 0; i < 128; i++)
		if (ld_relaxed(&resil_limit_global_counts(&f.c, f.st)[i]))
			st_relaxed(&resil_limit_global_counts(&f.c, f.st)[i], UINT32_MAX);
	memset(&g, 0, sizeof(g));
	assert_int_equal(resil_limit_global_collect(&f.c, f.st, cap, got_fn, &g), 1);
	assert_int_equal(g.cnt[0], cap);
	free(f.st);
}

static void test_host_scope_counts_nothing(void **unused)
{
	struct fx f, g;
	struct got got = {0};

	(void)unused;
	fx_init(&f, false, 0);
	fx_init(&g, true, 0);
	/* no counters, no bytes for them */
	assert_true(resil_limit_state_size(&g.c) > resil_limit_state_size(&f.c));
	assert_false(resil_limit_same_shape(&f.c, &g.c));
	assert_int_equal(acq_n(&f, "192.0.2.1", 1), 0);
	assert_int_equal(resil_limit_global_collect(&f.c, f.st, 100, got_fn, &got), 0);
	free(f.st);
	free(g.st);
}

static void test_charge(void **unused)
{
	struct fx f;
	int64_t T;
	int n;

	(void)unused;
	fx_init(&f, true, 0);
	T = f.c.interval_ns;
	assert_int_equal(T, 600 * RESIL_NS_PER_MS);

	/* a key held here: 50 admitted locally, 30 elsewhere: 20 left */
	for (int i = 0; i < 50; i++)
		assert_int_equal(acq_n(&f, "192.0.2.1", 1), 0);
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, fp_of("192.0.2.1"), 30, f.now), 0);
	for (n = 0; n < 200 && acq_n(&f, "192.0.2.1", 1) == 0; n++)
		;
	assert_int_equal(n, 20);

	/* a key never seen here: inserted, charged, limited at once */
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, fp_of("198.51.100.7"), 100, f.now),
			 0);
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), RESIL_REJECT_LIMITED);
	f.now += T;
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), 0);
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), RESIL_REJECT_LIMITED);

	/* saturated: a huge count stops where a full bucket is, nothing
	 * for a client to heal, and the key frees one permit a T later */
	assert_int_equal(
	    resil_limit_global_charge(&f.c, f.st, fp_of("203.0.113.9"), UINT64_MAX, f.now), 0);
	assert_int_equal(acq_n(&f, "203.0.113.9", 1), RESIL_REJECT_LIMITED);
	assert_int_equal(ld_relaxed(&f.st->heals), 0);
	f.now += T;
	assert_int_equal(acq_n(&f, "203.0.113.9", 1), 0);
	assert_int_equal(acq_n(&f, "203.0.113.9", 1), RESIL_REJECT_LIMITED);

	/* no fingerprint, not a keyed table: refused */
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, 1, 1, f.now), -EINVAL);
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, 1ULL << 63 | 5, 1, f.now), -EINVAL);
	free(f.st);
}

static void test_charge_keeps_reservations(void **unused)
{
	struct fx f;
	int64_t T;

	(void)unused;
	fx_init(&f, true, 10 * S); /* limit.wait = 10 s */
	T = f.c.interval_ns;
	/* the cap is a full bucket plus limit.wait: a charge never cuts a
	 * TAT a reservation set, and never goes past it */
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, fp_of("k"), 1000, f.now), 0);
	/* full, plus 10 s of reservations: the next permit is 10 s + T away */
	{
		struct resil_permit_priv pm = {0};

		pm.limit_permits = 1;
		f.x.now = 0;
		f.x.key = "k";
		f.x.key_len = 1;
		assert_int_equal(resil_limit_acquire(&f.x, &f.c, f.st, &pm), RESIL_REJECT_LIMITED);
		assert_int_equal(pm.wait_ns, 10 * S + T);
	}
	free(f.st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_collect),
	    cmocka_unit_test(test_host_scope_counts_nothing),
	    cmocka_unit_test(test_charge),
	    cmocka_unit_test(test_charge_keeps_reservations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

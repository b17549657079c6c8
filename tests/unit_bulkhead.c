/* SPDX-License-Identifier: MIT */
/*
 * unit_bulkhead.c - the bulkhead on a plain aligned_alloc region, ctx with
 * no segment: limits, unregistered callers, priority partitions, reclaim
 * of a dead client's permits, the counted pool's (the adaptive limit's)
 * hint repair after each crash window, waits across threads (shared
 * futex), and a multi-thread invariant; both layouts (spread: the
 * defaults, with a partition or without; packed: a pool above 1024
 * permits whose extra slots a filler client holds: bh_packed), the full
 * hint, its race and a partition's two values, the shape (a fresh block
 * on a real segment when bulkhead.wait goes from 0 to 200ms, the same
 * block for a partition), and geometry words a client scribbled on.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "resil.h"
#include "bulkhead.h"
#include "policy.h"
#include "seg_records.h"
#include "testutil.h"

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

static int64_t manual_now = 1000 * RESIL_NS_PER_S;
static int64_t manual_clock(void *ctx)
{
	return *(int64_t *)ctx;
}

struct bh {
	struct resil_bulkhead_conf conf;
	struct resil_bulkhead_state *st;
	uint32_t fill; /* slots held by the filler (bh_packed) */
};

static void bh_new(struct bh *b, const char *max, const char *wait, const char *critical)
{
	char err[128];

	resil_bulkhead_conf_defaults(&b->conf);
	if (max)
		assert_int_equal(
		    resil_bulkhead_conf_set(&b->conf, "bulkhead.max", max, err, sizeof(err)), 0);
	if (wait)
		assert_int_equal(
		    resil_bulkhead_conf_set(&b->conf, "bulkhead.wait", wait, err, sizeof(err)), 0);
	if (critical)
		assert_int_equal(resil_bulkhead_conf_set(&b->conf, "bulkhead.critical", critical,
							 err, sizeof(err)),
				 0);
	b->st = aligned_alloc(RESIL_HOT_ALIGN,
			      resil_align_up(resil_bulkhead_state_size(&b->conf), RESIL_HOT_ALIGN));
	assert_non_null(b->st);
	memset(b->st, 0xa5, resil_bulkhead_state_size(&b->conf)); /* init must clear it */
	resil_bulkhead_state_init(b->st, &b->conf, manual_now);
	b->fill = 0;
}

/* Slots are packed above RESIL_POOL_SPREAD_MAX permits. A packed pool
 * that behaves as one of max permits (25 when NULL): max +
 * RESIL_POOL_SPREAD_MAX permits, the top ones held by the filler client
 * (test_bulkhead_fill). */
static void bh_packed(struct bh *b, const char *max, const char *wait, const char *critical)
{
	uint32_t m = max ? (uint32_t)atoi(max) : 25;
	char total[16];

	snprintf(total, sizeof(total), "%u", m + RESIL_POOL_SPREAD_MAX);
	bh_new(b, total, wait, critical);
	assert_false(resil_bulkhead_spread(&b->conf));
	assert_int_equal(resil_bulkhead_pool(b->st).shift, 0);
	b->fill = test_bulkhead_fill(b->st, m);
}

static void bh_free(struct bh *b)
{
	free(b->st);
}

static void ctx_init(struct resil_ctx *x, uint32_t client_id)
{
	memset(x, 0, sizeof(*x));
	x->clock.fn = manual_clock;
	x->clock.ctx = &manual_now;
	x->client_id = client_id;
}

static int take(struct bh *b, uint32_t client, int prio, struct resil_permit_priv *pm)
{
	struct resil_ctx x;

	ctx_init(&x, client);
	memset(pm, 0, sizeof(*pm));
	pm->priority = (uint32_t)prio;
	return resil_bulkhead_acquire(&x, &b->conf, b->st, pm);
}

static void give(struct bh *b, uint32_t client, struct resil_permit_priv *pm)
{
	struct resil_ctx x;

	ctx_init(&x, client);
	resil_bulkhead_release(&x, &b->conf, b->st, pm, RESIL_SUCCESS);
}

/* Permits held, the filler's left out. */
static uint32_t bh_held(struct bh *b)
{
	return resil_bulkhead_held(&b->conf, b->st) - b->fill;
}

static void maintain(struct bh *b)
{
	struct resil_ctx x;

	ctx_init(&x, 0);
	resil_bulkhead_maintain(&x, &b->conf, b->st);
}

/* A test run in one layout (packed: bh_packed), and with a partition
 * (bulkhead.critical) or without. */
struct regime {
	const char *critical;
	bool packed;
};
static struct regime scan_r = {NULL, false};
static struct regime packed_r = {NULL, true};
static struct regime partition_r = {"34", false};

static void bh_wait_r(struct bh *b, const char *max, const char *wait, void **state)
{
	const struct regime *r = *state;

	if (r->packed)
		bh_packed(b, max, wait, r->critical);
	else
		bh_new(b, max, wait, r->critical);
	assert_int_equal(resil_bulkhead_spread(&b->conf), !r->packed);
}

static void bh_new_r(struct bh *b, const char *max, void **state)
{
	bh_wait_r(b, max, NULL, state);
}

static bool packed(struct bh *b)
{
	return !resil_bulkhead_spread(&b->conf);
}

/* The slot words of a pool, to compare before and after. */
static void slot_words(struct bh *b, uint32_t *out)
{
	struct resil_pool p = resil_bulkhead_pool(b->st);

	for (uint32_t i = 0; i < p.n; i++)
		out[i] = atomic_load(&p.slots[(size_t)i << p.shift]);
}

/* parse(format(c)) gives c back, byte for byte (equal configurations
 * compare equal with memcmp) */
static void roundtrip_bulkhead(const struct resil_bulkhead_conf *c)
{
	struct resil_bulkhead_conf d;
	char buf[512], err[128], *line, *save = NULL;

	resil_bulkhead_conf_format(c, buf, sizeof(buf));
	resil_bulkhead_conf_defaults(&d);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " = ");

		assert_non_null(eq);
		*eq = '\0';
		assert_int_equal(resil_bulkhead_conf_set(&d, line, eq + 3, err, sizeof(err)), 0);
	}
	assert_memory_equal(c, &d, sizeof(d));
}

static void test_conf(void **state)
{
	struct resil_bulkhead_conf c;
	char err[128], buf[256];
	size_t n;

	resil_bulkhead_conf_defaults(&c);
	assert_int_equal(c.on, 0);
	assert_int_equal(c.max, 25);
	assert_int_equal(c.wait_ns, 0);
	assert_int_equal(c.critical_bp, 0);

	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.wait", "200ms", err, sizeof(err)),
			 0);
	assert_int_equal(c.on, 1);
	assert_int_equal(c.wait_ns, 200 * RESIL_NS_PER_MS);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.critical", "20", err, sizeof(err)),
			 0);
	assert_int_equal(c.critical_bp, 2000);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.max", "40", err, sizeof(err)), 0);
	assert_int_equal(c.max, 40);

	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.max", "0", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "bulkhead.max"));
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.max", "many", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.critical", "150", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.wait", "soon", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.nope", "1", err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(c.max, 40); /* a bad value changes nothing */

	n = resil_bulkhead_conf_format(&c, buf, sizeof(buf));
	assert_int_equal(n, strlen(buf));
	assert_non_null(strstr(buf, "bulkhead.max = 40\n"));
	assert_non_null(strstr(buf, "bulkhead.wait = 200ms\n"));
	assert_non_null(strstr(buf, "bulkhead.critical = 20%\n"));
	/* truncation reports the length it needed, like snprintf */
	assert_int_equal(resil_bulkhead_conf_format(&c, buf, 8), n);
	assert_int_equal(strlen(buf), 7);
	assert_int_equal(resil_bulkhead_conf_format(&c, NULL, 0), n);
}

static void test_shape(void **state)
{
	struct resil_bulkhead_conf a, b;

	resil_bulkhead_conf_defaults(&a);
	resil_bulkhead_conf_defaults(&b);
	assert_true(resil_bulkhead_spread(&a));
	assert_true(resil_bulkhead_same_shape(&a, &b));
	assert_true(resil_bulkhead_fail_fast(&a));
	/* a wait is scanned, but whether callers wait is part of the shape
	 * (a fail-fast release looks for no waiter) */
	b.wait_ns = 200 * RESIL_NS_PER_MS;
	assert_false(resil_bulkhead_fail_fast(&b));
	assert_false(resil_bulkhead_same_shape(&a, &b));
	assert_false(resil_bulkhead_same_shape(&b, &a));
	a.wait_ns = RESIL_NS_PER_S; /* a longer wait changes in place */
	assert_true(resil_bulkhead_same_shape(&a, &b));
	/* a partition is scanned: it changes in place, but it is not
	 * fail-fast (a caller's priority bounds its walk) */
	a.wait_ns = 0;
	b.wait_ns = 0;
	b.critical_bp = 1000;
	assert_false(resil_bulkhead_fail_fast(&b));
	assert_true(resil_bulkhead_same_shape(&a, &b));
	assert_int_equal(resil_bulkhead_shared(&b, 25), 23); /* 10% of 25: 2 */
	assert_int_equal(resil_bulkhead_shared(&a, 25), 25);
	/* shares change in place, and waits as long as callers wait on
	 * both sides */
	a.critical_bp = 500;
	assert_true(resil_bulkhead_same_shape(&a, &b));
	a.wait_ns = RESIL_NS_PER_S;
	assert_false(resil_bulkhead_same_shape(&a, &b));
	b.wait_ns = 200 * RESIL_NS_PER_MS;
	assert_true(resil_bulkhead_same_shape(&a, &b));
	b.max = 26;
	assert_false(resil_bulkhead_same_shape(&a, &b));
	/* the bound: spread up to RESIL_POOL_SPREAD_MAX, packed above (and
	 * then not fail-fast: the lean paths take spread pools only) */
	resil_bulkhead_conf_defaults(&a);
	resil_bulkhead_conf_defaults(&b);
	a.max = RESIL_POOL_SPREAD_MAX;
	b.max = RESIL_POOL_SPREAD_MAX + 1;
	assert_true(resil_bulkhead_spread(&a));
	assert_true(resil_bulkhead_fail_fast(&a));
	assert_false(resil_bulkhead_spread(&b));
	assert_false(resil_bulkhead_fail_fast(&b));
	/* one 128-byte line per permit up to RESIL_POOL_SPREAD_MAX, packed
	 * above */
	resil_bulkhead_conf_defaults(&a);
	assert_int_equal(resil_bulkhead_state_size(&a),
			 sizeof(struct resil_bulkhead_state) + resil_align_up(25 * 128, 128));
	a.critical_bp = 100;
	assert_int_equal(resil_bulkhead_state_size(&a),
			 sizeof(struct resil_bulkhead_state) + resil_align_up(25 * 128, 128));
	b.max = 5000;
	assert_int_equal(resil_bulkhead_state_size(&b),
			 sizeof(struct resil_bulkhead_state) + resil_align_up(5000 * 4, 128));
}

/* Through a real segment: a change of bulkhead.max, or from fail-fast to
 * waiting, publishes a fresh block; a change within them keeps the block;
 * a permit of the old block goes back to the old block, under the old
 * record's configuration. */
static int64_t seg_now = 1000 * RESIL_NS_PER_S;

static const struct resil_rec *seg_define(struct resil_seg *s, const char *text)
{
	struct resil_conf c;
	char err[256];
	uint64_t w;

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, text, 1, err, sizeof(err)), 0);
	assert_true(resil_seg_define(s, "dep", &c, 0, 0, seg_now, err, sizeof(err)) >= 0);
	assert_int_equal(resil_seg_lookup(s, "dep", NULL, &w), 0);
	return resil_seg_rec_of(s, w);
}

static void test_fresh_block_on_regime_change(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = {.slots = 8, .clients = 8, .events = 64, .state_size = 8 << 20};
	struct resil_ctx x = {.seg = &s, .clock = {manual_clock, &manual_now}, .client_id = 3};
	const struct resil_rec *r0, *r1, *r2;
	struct resil_bulkhead_state *b0, *b1;
	struct resil_permit_priv pm, pm1;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	r0 = seg_define(&s, "bulkhead.max = 2");
	b0 = resil_comp_state(&s, r0, RESIL_C_BULKHEAD);
	memset(&pm, 0, sizeof(pm));
	assert_int_equal(resil_policy_acquire(&x, r0, &pm, NULL, 0), 0);
	assert_int_equal(resil_bulkhead_held(&r0->conf.bulkhead, b0), 1);

	/* fail-fast to waiting: scanned both, but a fresh block */
	r1 = seg_define(&s, "bulkhead.max = 2; bulkhead.wait = 200ms");
	assert_true(r1 != r0);
	assert_true(r1->state_off != r0->state_off);
	b1 = resil_comp_state(&s, r1, RESIL_C_BULKHEAD);
	assert_int_equal(resil_bulkhead_held(&r1->conf.bulkhead, b1), 0);
	/* a longer wait keeps the block */
	r2 = seg_define(&s, "bulkhead.max = 2; bulkhead.wait = 300ms");
	assert_true(r2->state_off == r1->state_off);

	/* a partition is scanned: the same block */
	r1 = seg_define(&s, "bulkhead.max = 2; bulkhead.wait = 300ms; bulkhead.critical = 50%");
	assert_true(r1->state_off == r2->state_off);
	/* above the spread bound: a fresh block of packed slots, scanned
	 * (no count) */
	r1 = seg_define(&s, "bulkhead.max = 1100; bulkhead.wait = 300ms");
	assert_true(r1->state_off != r2->state_off);
	b1 = resil_comp_state(&s, r1, RESIL_C_BULKHEAD);
	assert_int_equal(b1->shift, 0);
	assert_int_equal(resil_bulkhead_held(&r1->conf.bulkhead, b1), 0);
	memset(&pm1, 0, sizeof(pm1));
	assert_int_equal(resil_policy_acquire(&x, r1, &pm1, NULL, 0), 0);
	assert_int_equal(resil_bulkhead_held(&r1->conf.bulkhead, b1), 1);
	x.now = 0;
	resil_policy_release(&x, r1, &pm1, RESIL_SUCCESS);
	assert_int_equal(resil_bulkhead_held(&r1->conf.bulkhead, b1), 0);

	/* the old permit goes back where it came from, by the old record */
	x.now = 0;
	resil_policy_release(&x, r0, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_bulkhead_held(&r0->conf.bulkhead, b0), 0);

	/* a longer wait and a partition keep the packed block */
	r2 = seg_define(&s, "bulkhead.max = 1100; bulkhead.wait = 400ms; bulkhead.critical = 1%");
	assert_true(r2->state_off == r1->state_off);
	/* and back to fail-fast: a fresh scan block again */
	r2 = seg_define(&s, "bulkhead.max = 2");
	assert_true(r2->state_off != r1->state_off);
	resil_seg_unmap(&s);
}

static void test_limit(void **state)
{
	struct resil_permit_priv pm[26];
	struct bh b;
	int i;

	bh_new_r(&b, NULL, state); /* max 25, fail fast */
	for (i = 0; i < 25; i++) {
		assert_int_equal(take(&b, 1 + i % 3, RESIL_PRIO_NORMAL, &pm[i]), 0);
		assert_true(pm[i].flags & RESIL_PERMIT_BULKHEAD);
		assert_in_range(pm[i].bulkhead_idx, 1, 25);
	}
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[25]), RESIL_REJECT_FULL);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &pm[25]), RESIL_REJECT_FULL);
	assert_int_equal(pm[25].bulkhead_idx, 0);
	assert_false(pm[25].flags & RESIL_PERMIT_BULKHEAD);
	assert_int_equal(bh_held(&b), 25);
	assert_int_equal(atomic_load(&b.st->full), 1); /* the walk said so */

	/* every slot is distinct */
	for (i = 0; i < 25; i++)
		for (int j = i + 1; j < 25; j++)
			assert_int_not_equal(pm[i].bulkhead_idx, pm[j].bulkhead_idx);

	give(&b, 1, &pm[7]);
	assert_int_equal(pm[7].bulkhead_idx, 0);
	give(&b, 1, &pm[7]); /* a second release of the same permit is a no-op */
	assert_int_equal(bh_held(&b), 24);
	assert_int_equal(atomic_load(&b.st->full), 0); /* the release cleared it */
	assert_int_equal(take(&b, 3, RESIL_PRIO_NORMAL, &pm[25]), 0);
	assert_int_equal(take(&b, 3, RESIL_PRIO_NORMAL, &pm[7]), RESIL_REJECT_FULL);

	for (i = 0; i < 26; i++)
		if (i != 7)
			give(&b, 1, &pm[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* Scan regime: a rejection claims nothing, ever, and walks read-only:
 * every slot word is the same after 100 rejections (walks included: the
 * hint sends one in RESIL_BULKHEAD_RECHECK there). */
static void test_scan_reject_never_claims(void **state)
{
	struct resil_permit_priv pm[25], r;
	uint32_t before[25], after[25];
	struct bh b;
	int i;

	bh_new(&b, NULL, NULL, NULL);
	for (i = 0; i < 25; i++)
		assert_int_equal(take(&b, 1 + (uint32_t)i, RESIL_PRIO_NORMAL, &pm[i]), 0);
	slot_words(&b, before);
	for (i = 0; i < 100; i++) {
		assert_int_equal(take(&b, 40 + (uint32_t)(i % 3),
				      i % 2 ? RESIL_PRIO_CRITICAL : RESIL_PRIO_NORMAL, &r),
				 RESIL_REJECT_FULL);
		assert_int_equal(r.bulkhead_idx, 0);
		assert_false(r.flags & RESIL_PERMIT_BULKHEAD);
	}
	slot_words(&b, after);
	assert_memory_equal(before, after, sizeof(before));
	assert_int_equal(bh_held(&b), 25);
	for (i = 0; i < 25; i++)
		give(&b, 1 + (uint32_t)i, &pm[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* The full hint's race: a release that misses the hint (its slot store,
 * then a load of the hint before the walk stored it) leaves the hint set
 * while a slot is free. Played here by freeing a slot with a bare store.
 * Repairs: a rejecting thread walks anyway within RESIL_BULKHEAD_RECHECK
 * rejections; the daemon's tick; any release; a reclaim. */
static void test_full_hint_race(void **state)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_permit_priv pm[4], r;
	struct resil_pool p;
	struct resil_ctx x;
	struct bh b;
	int i, tries;

	bh_new(&b, "4", NULL, NULL);
	p = resil_bulkhead_pool(b.st);
	for (i = 0; i < 4; i++)
		assert_int_equal(take(&b, 5, RESIL_PRIO_NORMAL, &pm[i]), 0);
	assert_int_equal(atomic_load(&b.st->full), 0); /* no walk has failed yet */
	assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), 1);

	/* 1. the rejecting threads repair it themselves */
	atomic_store(&p.slots[(size_t)(pm[2].bulkhead_idx - 1) << p.shift], 0);
	memset(&pm[2], 0, sizeof(pm[2]));
	for (tries = 1; tries <= (int)RESIL_BULKHEAD_RECHECK + 1; tries++)
		if (take(&b, 6, RESIL_PRIO_NORMAL, &pm[2]) == 0)
			break;
	/* a bounded number of spurious rejections, then found stale: cleared */
	assert_true(tries <= (int)RESIL_BULKHEAD_RECHECK);
	assert_int_equal(atomic_load(&b.st->full), 0);
	assert_int_equal(bh_held(&b), 4);

	/* 2. the daemon's tick: clears a stale hint, keeps a true one */
	assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), 1);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->full), 1); /* every slot is taken: true */
	atomic_store(&p.slots[(size_t)(pm[2].bulkhead_idx - 1) << p.shift], 0);
	memset(&pm[2], 0, sizeof(pm[2]));
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->full), 0);
	assert_int_equal(atomic_load(&b.st->repaired), 1);
	assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &pm[2]), 0);

	/* 3. any release clears it (here: a slot that was free already) */
	assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), 1);
	give(&b, 5, &pm[0]);
	assert_int_equal(atomic_load(&b.st->full), 0);
	assert_int_equal(take(&b, 7, RESIL_PRIO_NORMAL, &pm[0]), 0);

	/* 4. a reclaim frees slots, so it clears it too */
	assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), 1);
	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 7, &counts);
	assert_int_equal(counts.permits, 1);
	assert_int_equal(atomic_load(&b.st->full), 0);
	assert_int_equal(bh_held(&b), 3);
	for (i = 1; i < 4; i++)
		give(&b, 5, &pm[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* The recheck scales with the pool: a saturated pool of any size, spread
 * or packed, finds a stale hint out within resil_bulkhead_recheck(n)
 * rejections (16 per 128 slots, a power of two). */
static void test_full_hint_recheck_scales(void **state)
{
	static const uint32_t sizes[] = {1,    128,  129,  256,	 257,
					 1000, 1024, 1025, 5000, RESIL_POOL_MAX};
	static struct resil_permit_priv pm[RESIL_POOL_MAX];
	struct resil_permit_priv r;
	(void)state;

	assert_int_equal(resil_bulkhead_recheck(1), 16);
	assert_int_equal(resil_bulkhead_recheck(128), 16);
	assert_int_equal(resil_bulkhead_recheck(129), 32);
	assert_int_equal(resil_bulkhead_recheck(512), 64);
	assert_int_equal(resil_bulkhead_recheck(513), 128);
	assert_int_equal(resil_bulkhead_recheck(1024), 128);
	assert_int_equal(resil_bulkhead_recheck(1025), 256);
	assert_int_equal(resil_bulkhead_recheck(RESIL_POOL_MAX), 8192);
	for (size_t k = 0; k < RESIL_ARRAY_SIZE(sizes); k++) {
		uint32_t n = sizes[k], tries;
		struct resil_pool p;
		char max[16];
		struct bh b;

		snprintf(max, sizeof(max), "%u", n);
		bh_new(&b, max, NULL, NULL);
		p = resil_bulkhead_pool(b.st);
		assert_int_equal(p.shift, resil_pool_shift(n));
		for (uint32_t i = 0; i < n; i++)
			assert_int_equal(take(&b, 5, RESIL_PRIO_NORMAL, &pm[i]), 0);
		assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
		assert_int_equal(atomic_load(&b.st->full), 1);
		/* a release that missed the hint: the slot is free, the hint set */
		atomic_store(&p.slots[(size_t)(pm[n / 2].bulkhead_idx - 1) << p.shift], 0);
		for (tries = 1; tries <= 2 * resil_bulkhead_recheck(n); tries++) {
			if (take(&b, 6, RESIL_PRIO_NORMAL, &r) == 0)
				break;
		}
		assert_true(tries <= resil_bulkhead_recheck(n));
		assert_int_equal(bh_held(&b), n);
		/* full again, and the hint says so */
		assert_int_equal(take(&b, 6, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
		assert_int_equal(atomic_load(&b.st->full), 1);
		bh_free(&b);
	}
}

/* Geometry words are client-writable: whatever a client writes there, the
 * hot path, the release and the daemon's maintain/reclaim stay within the
 * pool (they take the geometry from the configuration: under ASan an
 * access out of the block is caught), an observer reads nothing it should
 * not, and the daemon's tick puts the words back. */
static void test_geometry_scribbled(void **state)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_permit_priv pm[3], r;
	struct resil_ctx x;
	struct bh b;
	int i;

	bh_new_r(&b, "3", state);
	for (i = 0; i < 2; i++)
		assert_int_equal(take(&b, 8, RESIL_PRIO_NORMAL, &pm[i]), 0);
	b.st->nslots = 60000;
	b.st->slots_off = 1u << 30;
	b.st->shift = 31;
	/* the geometry comes from the configuration: garbage is not walked */
	assert_int_equal(bh_held(&b), 2);
	assert_int_equal(take(&b, 9, RESIL_PRIO_NORMAL, &pm[2]), 0);
	assert_int_equal(take(&b, 9, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	give(&b, 9, &pm[2]);
	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 8, &counts);
	assert_int_equal(counts.permits, 2);
	/* a geometry init could have written, but not this block's */
	b.st->nslots = 50;
	b.st->shift = resil_pool_shift(50);
	b.st->slots_off = sizeof(struct resil_bulkhead_state);
	maintain(&b);
	assert_int_equal(b.st->nslots, resil_bulkhead_max_of(&b.conf));
	assert_int_equal(b.st->slots_off, sizeof(struct resil_bulkhead_state));
	assert_int_equal(b.st->shift, resil_pool_shift(resil_bulkhead_max_of(&b.conf)));
	assert_int_equal(bh_held(&b), 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(take(&b, 9, RESIL_PRIO_NORMAL, &pm[i]), 0);
	assert_int_equal(bh_held(&b), 3);
	for (i = 0; i < 3; i++)
		give(&b, 9, &pm[i]);
	maintain(&b);
	maintain(&b);
	bh_free(&b);
}

static void test_same_slot_again(void **state)
{
	struct resil_permit_priv pm;
	uint32_t first;
	struct bh b;
	int i;

	/* An uncontended caller reuses the slot it freed: one CAS per claim. */
	bh_new_r(&b, "100", state);
	assert_int_equal(take(&b, 42, RESIL_PRIO_NORMAL, &pm), 0);
	first = pm.bulkhead_idx;
	give(&b, 42, &pm);
	for (i = 0; i < 10; i++) {
		assert_int_equal(take(&b, 42, RESIL_PRIO_NORMAL, &pm), 0);
		assert_int_equal(pm.bulkhead_idx, first);
		give(&b, 42, &pm);
	}
	bh_free(&b);
}

static void test_unregistered(void **state)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_permit_priv pm[3];
	struct resil_ctx x;
	struct bh b;
	int i;

	bh_new_r(&b, "3", state);
	for (i = 0; i < 3; i++)
		assert_int_equal(take(&b, 0, RESIL_PRIO_NORMAL, &pm[i]), 0);
	assert_int_equal(bh_held(&b), 3);
	struct resil_pool p = resil_bulkhead_pool(b.st);
	for (i = 0; i < 3; i++)
		assert_int_equal(atomic_load(&p.slots[(pm[i].bulkhead_idx - 1) << p.shift]),
				 RESIL_CLIENT_UNREGISTERED);
	/* nobody can tell an unregistered holder died: never reclaimed */
	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 0, &counts);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, RESIL_CLIENT_UNREGISTERED, &counts);
	assert_int_equal(counts.permits, 0);
	assert_int_equal(bh_held(&b), 3);
	for (i = 0; i < 3; i++)
		give(&b, 0, &pm[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

static void test_priority(void **state)
{
	struct resil_permit_priv pm[26], scratch;
	struct bh b;
	int i, n = 0;

	bh_new(&b, "25", NULL, "20"); /* 5 reserved for critical callers */
	for (i = 0; i < 20; i++)
		assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[n++]), 0);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[n]), RESIL_REJECT_FULL);
	for (i = 0; i < 5; i++)
		assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &pm[n++]), 0);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &pm[n]), RESIL_REJECT_FULL);
	assert_int_equal(bh_held(&b), 25);

	/* normal callers hold the 20 slots below the reserve, critical ones
	 * the 5 above it */
	for (i = 0; i < 25; i++)
		assert_int_equal(pm[i].bulkhead_idx > 20, i >= 20);

	/* a critical permit's end frees a reserved slot: nothing for a
	 * normal caller */
	give(&b, 2, &pm[24]);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[24]), RESIL_REJECT_FULL);
	give(&b, 1, &pm[0]);
	give(&b, 1, &pm[1]); /* 17 normal, 4 critical */
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[0]), 0);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[1]), 0);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm[24]), RESIL_REJECT_FULL);
	/* a critical caller takes the last reserved slot, then none */
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &pm[24]), 0);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &scratch), RESIL_REJECT_FULL);
	assert_int_equal(bh_held(&b), 25);
	/* with a normal slot free, a critical caller may take it too */
	give(&b, 1, &pm[5]);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &pm[5]), 0);
	assert_in_range(pm[5].bulkhead_idx, 1, 20);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &scratch), RESIL_REJECT_FULL);
	for (i = 0; i < 25; i++)
		give(&b, i < 20 && i != 5 ? 1 : 2, &pm[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* A partition's claims and full hint: a critical caller takes a shared
 * slot while there is one, a reserved one after. The hint: SHARED when a
 * normal caller's walk found the
 * slots below the reserve taken, ALL when a critical caller's found every
 * slot taken; a normal caller rejects on either, a critical one on ALL
 * only; a release clears what it makes false (a reserved slot's: ALL to
 * SHARED); the tick clears a stale one. bulkhead.critical = 100%: nothing
 * for a normal caller, no division by a part of 0 slots. */
static void test_partition_hint(void **state)
{
	struct resil_permit_priv pm[10], crit[3], r;
	struct bh b;
	int i;

	bh_new(&b, "10", NULL, "20"); /* 8 shared, 2 reserved */
	/* a critical caller takes a shared slot while there is one */
	assert_int_equal(take(&b, 20, RESIL_PRIO_CRITICAL, &crit[0]), 0);
	assert_in_range(crit[0].bulkhead_idx, 1, 8);
	give(&b, 20, &crit[0]);
	for (i = 0; i < 8; i++) {
		assert_int_equal(take(&b, 1 + (uint32_t)i, RESIL_PRIO_NORMAL, &pm[i]), 0);
		assert_in_range(pm[i].bulkhead_idx, 1, 8);
	}
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_SHARED);
	/* a critical caller walks past SHARED, and leaves it set */
	assert_int_equal(take(&b, 20, RESIL_PRIO_CRITICAL, &crit[0]), 0);
	assert_in_range(crit[0].bulkhead_idx, 9, 10);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_SHARED);
	assert_int_equal(take(&b, 20, RESIL_PRIO_CRITICAL, &crit[1]), 0);
	assert_int_equal(take(&b, 20, RESIL_PRIO_CRITICAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_ALL);
	/* a normal caller's failed walk never lowers ALL to SHARED */
	for (i = 0; i < 40; i++)
		assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_ALL);
	/* a reserved slot's release: the shared part is as full as it was */
	give(&b, 20, &crit[1]);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_SHARED);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(take(&b, 20, RESIL_PRIO_CRITICAL, &crit[1]), 0);
	/* the tick leaves a true hint alone, clears a stale one */
	atomic_store(&b.st->full, RESIL_BULKHEAD_FULL_SHARED);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_SHARED);
	give(&b, 20, &crit[1]);
	atomic_store(&b.st->full, RESIL_BULKHEAD_FULL_SHARED);
	maintain(&b); /* only a reserved slot is free: still true */
	assert_int_equal(atomic_load(&b.st->full), RESIL_BULKHEAD_FULL_SHARED);
	atomic_store(&b.st->full, RESIL_BULKHEAD_FULL_ALL);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->full), 0);
	/* a shared slot's release clears it */
	atomic_store(&b.st->full, RESIL_BULKHEAD_FULL_SHARED);
	give(&b, 4, &pm[3]);
	assert_int_equal(atomic_load(&b.st->full), 0);
	atomic_store(&b.st->full, RESIL_BULKHEAD_FULL_SHARED);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->full), 0);
	assert_int_equal(take(&b, 4, RESIL_PRIO_NORMAL, &pm[3]), 0);
	for (i = 0; i < 8; i++)
		give(&b, 1 + (uint32_t)i, &pm[i]);
	give(&b, 20, &crit[0]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);

	bh_new(&b, "2", NULL, "100");
	assert_int_equal(resil_bulkhead_shared(&b.conf, 2), 0);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &crit[0]), 0);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &crit[1]), 0);
	assert_int_equal(take(&b, 2, RESIL_PRIO_CRITICAL, &crit[2]), RESIL_REJECT_FULL);
	give(&b, 2, &crit[0]);
	give(&b, 2, &crit[1]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
	bh_new(&b, "2", "1ms", "100"); /* a wait for nothing ends */
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &r), RESIL_REJECT_FULL);
	bh_free(&b);
}

static void test_reclaim(void **state)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_permit_priv pm[10];
	struct resil_ctx x;
	struct bh b;
	int i;

	bh_new_r(&b, "10", state);
	/* clients 7 (4 permits), 8 (3), 9 (3): a prefork parent and two children */
	for (i = 0; i < 10; i++)
		assert_int_equal(take(&b, i < 4 ? 7 : i < 7 ? 8 : 9, RESIL_PRIO_NORMAL, &pm[i]), 0);
	struct resil_permit_priv scratch;
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &scratch), RESIL_REJECT_FULL);

	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 8, &counts);
	assert_int_equal(counts.permits, 3);
	assert_int_equal(bh_held(&b), 7);
	assert_int_equal(atomic_load(&b.st->reclaimed), 3);
	/* exactly once */
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 8, &counts);
	assert_int_equal(counts.permits, 3);
	/* a client with nothing gets nothing back */
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 11, &counts);
	assert_int_equal(counts.permits, 3);
	/* the freed permits are usable */
	struct resil_permit_priv more[3];
	for (i = 0; i < 3; i++)
		assert_int_equal(take(&b, 12, RESIL_PRIO_NORMAL, &more[i]), 0);
	assert_int_equal(take(&b, 12, RESIL_PRIO_NORMAL, &scratch), RESIL_REJECT_FULL);
	/* and the survivors' permits are still theirs */
	for (i = 0; i < 4; i++)
		give(&b, 7, &pm[i]);
	for (i = 7; i < 10; i++)
		give(&b, 9, &pm[i]);
	for (i = 0; i < 3; i++)
		give(&b, 12, &more[i]);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* A counted pool (resil_pool_*: the adaptive limit's) of n slots, one per
 * line, over plain memory, and its repair as the daemon's tick runs it. */
struct cpool {
	struct resil_pool p;
	int32_t prev;
	alignas(RESIL_HOT_ALIGN) ra32 count;
	alignas(RESIL_HOT_ALIGN) ra32 slots[4 << RESIL_POOL_SPREAD_SHIFT];
};

static uint32_t cp_take(struct cpool *c, uint32_t id)
{
	uint32_t inflight;

	return resil_pool_claim(&c->p, c->p.n, id, &inflight);
}

static int32_t cp_hint(struct cpool *c)
{
	return (int32_t)atomic_load(&c->count);
}

static void cp_tick(struct cpool *c)
{
	resil_pool_repair(&c->p, &c->prev);
}

static void test_repair_windows(void **state)
{
	static struct cpool c;
	uint32_t idx[4], scratch;
	(void)state;

	c.p = (struct resil_pool){
	    .count = &c.count, .slots = c.slots, .n = 4, .shift = RESIL_POOL_SPREAD_SHIFT};
	for (int i = 0; i < 2; i++)
		assert_int_not_equal(idx[i] = cp_take(&c, 5), 0);

	/* window A: a process counted itself and died before its claim */
	atomic_fetch_add(&c.count, 1);
	/* window C: a process freed its slot and died before the fetch_sub */
	assert_int_not_equal(idx[2] = cp_take(&c, 6), 0);
	atomic_store(&c.slots[(idx[2] - 1) << c.p.shift], 0);
	assert_int_equal(resil_pool_claimed(&c.p), 2);
	assert_int_equal(cp_hint(&c), 4);

	/* until the daemon repairs, the leak costs capacity, never safety */
	assert_int_equal(cp_take(&c, 5), 0);
	cp_tick(&c); /* first sight: could be live acquirers in flight */
	assert_int_equal(cp_hint(&c), 4);
	cp_tick(&c); /* persisted: repaired */
	assert_int_equal(cp_hint(&c), 2);
	assert_int_not_equal(idx[2] = cp_take(&c, 5), 0);
	assert_int_not_equal(idx[3] = cp_take(&c, 5), 0);
	assert_int_equal(cp_hint(&c), 4);
	cp_tick(&c);
	cp_tick(&c);
	assert_int_equal(cp_hint(&c), 4); /* nothing to repair */

	/* a transient seen at one tick only is left alone */
	assert_true(resil_pool_free(&c.p, idx[3], 5));
	atomic_fetch_add(&c.count, 1);
	cp_tick(&c);
	atomic_fetch_sub(&c.count, 1);
	cp_tick(&c);
	assert_int_equal(cp_hint(&c), 3);

	/* a live process sitting in its window at both ticks gets corrected
	 * away; when it goes on, the deficit is corrected back */
	atomic_fetch_add(&c.count, 1);
	cp_tick(&c);
	cp_tick(&c);
	assert_int_equal(cp_hint(&c), 3);
	atomic_fetch_sub(&c.count, 1); /* its undo (window D) */
	assert_int_equal(cp_hint(&c), 2);
	/* the slots still bound the total while the hint is low */
	assert_int_not_equal(idx[3] = cp_take(&c, 5), 0);
	scratch = cp_take(&c, 5);
	assert_int_equal(scratch, 0);
	assert_int_equal(resil_pool_claimed(&c.p), 4);
	assert_int_equal(cp_hint(&c), 3);
	cp_tick(&c);
	cp_tick(&c);
	assert_int_equal(cp_hint(&c), 4);
	for (int i = 0; i < 4; i++)
		assert_true(resil_pool_free(&c.p, idx[i], 5));
	assert_int_equal(cp_hint(&c), 0);
	assert_int_equal(resil_pool_claimed(&c.p), 0);
}

/* ---- waits, across threads ---- */

struct waiter {
	struct bh *b;
	uint32_t client;
	int verdict;
	int64_t waited_ns;
	struct resil_permit_priv pm;
	pthread_t th;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	int64_t t0 = mono_ns();

	int v = take(w->b, w->client, RESIL_PRIO_NORMAL, &w->pm);

	w->waited_ns = mono_ns() - t0;
	__atomic_store_n(&w->verdict, v, __ATOMIC_RELEASE);
	return NULL;
}

/* n waiters, each counted and with its slot claimed: resil_pool_claim
 * counts first and claims the slot after, so a count alone can be seen
 * before the slot (under TSan's slowness, it was) */
static bool eventually_nwait(struct bh *b, uint32_t n)
{
	for (int i = 0; i < 2000; i++) {
		uint32_t claimed = 0;

		for (uint32_t k = 0; k < RESIL_BULKHEAD_WAITERS; k++)
			claimed += atomic_load(&b->st->wslots[k]) != 0;
		if (atomic_load(&b->st->nwait) == n && claimed == n)
			return true;
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return false;
}

static void test_wait_admitted(void **state)
{
	struct resil_permit_priv held;
	struct waiter w;
	struct bh b;

	bh_wait_r(&b, "1", "20s", state);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &held), 0);
	w = (struct waiter){.b = &b, .client = 2};
	assert_int_equal(pthread_create(&w.th, NULL, waiter_main, &w), 0);
	assert_true(eventually_nwait(&b, 1));
	assert_int_equal(b.st->wslots[0] + b.st->wslots[1] + b.st->wslots[2] != 0, 1);
	give(&b, 1, &held);
	pthread_join(w.th, NULL);
	assert_int_equal(w.verdict, 0);
	assert_true(w.pm.flags & RESIL_PERMIT_BULKHEAD);
	assert_true(w.waited_ns < 20 * RESIL_NS_PER_S); /* woken, not timed out */
	assert_int_equal(atomic_load(&b.st->nwait), 0);
	assert_int_equal(bh_held(&b), 1);
	give(&b, 2, &w.pm);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

static void test_wait_timeout(void **state)
{
	struct resil_permit_priv held, pm;
	int64_t t0, dt;
	struct bh b;

	bh_wait_r(&b, "1", "50ms", state);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &held), 0);
	t0 = mono_ns();
	assert_int_equal(take(&b, 2, RESIL_PRIO_NORMAL, &pm), RESIL_REJECT_FULL);
	dt = mono_ns() - t0;
	assert_true(dt >= 50 * RESIL_NS_PER_MS); /* it did wait the whole time */
	assert_int_equal(atomic_load(&b.st->nwait), 0);
	for (int i = 0; i < (int)RESIL_BULKHEAD_WAITERS; i++)
		assert_int_equal(atomic_load(&b.st->wslots[i]), 0);
	assert_int_equal(atomic_load(&b.st->waits), 1);
	give(&b, 1, &held);
	bh_free(&b);
}

static void test_wait_one_per_release(void **state)
{
	struct resil_permit_priv held[2];
	struct waiter w[4];
	struct bh b;
	int i, admitted;

	/* 4 waiters, 2 permits held; each release admits exactly one waiter */
	bh_wait_r(&b, "2", "30s", state);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &held[0]), 0);
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &held[1]), 0);
	for (i = 0; i < 4; i++) {
		w[i] = (struct waiter){.b = &b, .client = 10 + (uint32_t)i, .verdict = -1};
		assert_int_equal(pthread_create(&w[i].th, NULL, waiter_main, &w[i]), 0);
	}
	assert_true(eventually_nwait(&b, 4));
	give(&b, 1, &held[0]);
	assert_true(eventually_nwait(&b, 3));
	give(&b, 1, &held[1]);
	assert_true(eventually_nwait(&b, 2));
	assert_int_equal(bh_held(&b), 2);
	/* the two admitted ones leave (once they have returned), letting the
	 * last two in */
	for (int tries = 0; tries < 2000; tries++) {
		admitted = 0;
		for (i = 0; i < 4; i++)
			admitted += __atomic_load_n(&w[i].verdict, __ATOMIC_ACQUIRE) == 0;
		if (admitted >= 2)
			break;
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	assert_int_equal(admitted, 2);
	bool joined[4] = {false};
	for (i = 0; i < 4; i++) {
		if (__atomic_load_n(&w[i].verdict, __ATOMIC_ACQUIRE) == 0) {
			pthread_join(w[i].th, NULL);
			give(&b, w[i].client, &w[i].pm);
			joined[i] = true;
		}
	}
	assert_true(eventually_nwait(&b, 0));
	for (i = 0; i < 4; i++) {
		if (joined[i])
			continue;
		pthread_join(w[i].th, NULL);
		assert_int_equal(w[i].verdict, 0);
		give(&b, w[i].client, &w[i].pm);
	}
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

static void test_dead_waiter(void **state)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_ctx x;
	struct resil_pool wp;
	uint32_t got, idx;
	struct bh b;

	/* a waiter killed in its futex wait: its count comes back exactly */
	bh_wait_r(&b, "1", "1s", state);
	wp = (struct resil_pool){
	    .count = &b.st->nwait, .slots = b.st->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	idx = resil_pool_claim(&wp, RESIL_BULKHEAD_WAITERS, 33, &got);
	assert_int_not_equal(idx, 0);
	assert_int_equal(got, 1);
	assert_int_equal(atomic_load(&b.st->nwait), 1);
	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 33, &counts);
	assert_int_equal(counts.waiters, 1);
	assert_int_equal(counts.permits, 0);
	assert_int_equal(atomic_load(&b.st->nwait), 0);
	/* one killed between its count and its waiter slot (crash window A
	 * of the waiter pool): the tick takes the count back once it has
	 * persisted over two ticks, in either regime */
	atomic_fetch_add(&b.st->nwait, 1);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->nwait), 1);
	maintain(&b);
	assert_int_equal(atomic_load(&b.st->nwait), 0);
	bh_free(&b);
}

/* ---- many threads: never more than max held ---- */

/* One thread's rounds of take and give, counting itself in while it
 * holds. hold_yield (test_wait_threads): every call of normal priority,
 * the permit held over a yield; else every eighth call critical. */
struct hammer {
	struct bh *b;
	uint32_t client;
	bool hold_yield;
	_Atomic int *inside;
	_Atomic int *worst;
	long admitted;
	long rounds;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct resil_permit_priv pm;

	for (long i = 0; i < h->rounds; i++) {
		int prio = !h->hold_yield && (i & 7) == 0 ? RESIL_PRIO_CRITICAL : RESIL_PRIO_NORMAL;

		if (take(h->b, h->client, prio, &pm) != 0)
			continue;
		int in = atomic_fetch_add(h->inside, 1) + 1;
		int w = atomic_load(h->worst);

		while (in > w && !atomic_compare_exchange_weak(h->worst, &w, in))
			;
		h->admitted++;
		if (h->hold_yield)
			sched_yield();
		atomic_fetch_sub(h->inside, 1);
		give(h->b, h->client, &pm);
	}
	return NULL;
}

/* Packed slots: two forked children inherit their parent's last slot
 * (thread-local, copied by fork). One gets it; the other walks from its
 * own client id's line, not to the slot beside it (same line: the two
 * would bounce it at every decision, mp/bulkhead2000 read 20 M decisions/s
 * instead of 78). Each child claims twice: the second claim is on the
 * first's slot again. */
static void test_packed_fork_lines(void **state)
{
	struct resil_permit_priv pm;
	struct bh b;
	uint32_t *got, line[2], parent;
	size_t size;
	(void)state;

	resil_bulkhead_conf_defaults(&b.conf);
	b.conf.max = 2000;
	size = resil_bulkhead_state_size(&b.conf) + 64;
	b.st = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(b.st != MAP_FAILED);
	resil_bulkhead_state_init(b.st, &b.conf, manual_now);
	got = (uint32_t *)((char *)b.st + resil_bulkhead_state_size(&b.conf));
	b.fill = 0;
	/* the parent's last slot (wherever this thread's entry points: other
	 * pools of these tests share it), not on client 3's line */
	assert_int_equal(take(&b, 1, RESIL_PRIO_NORMAL, &pm), 0);
	parent = pm.bulkhead_idx;
	assert_int_not_equal((parent - 1) / 32, 3);
	give(&b, 1, &pm);
	for (int c = 0; c < 2; c++) {
		pid_t pid = fork();
		int st;

		assert_true(pid >= 0);
		if (pid == 0) {
			struct resil_permit_priv a, a2;
			uint32_t id = 2 + (uint32_t)c, first;

			/* the first child holds the parent's slot: the second finds
			 * it taken */
			if (take(&b, id, RESIL_PRIO_NORMAL, &a) != 0)
				_exit(1);
			first = a.bulkhead_idx;
			give(&b, id, &a);
			if (take(&b, id, RESIL_PRIO_NORMAL, &a2) != 0 || a2.bulkhead_idx != first)
				_exit(2);
			got[c] = a2.bulkhead_idx;
			_exit(0); /* and holds it */
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_int_equal(st, 0);
	}
	line[0] = (got[0] - 1) / 32;
	line[1] = (got[1] - 1) / 32;
	assert_int_equal(got[0], parent); /* the parent's slot, free */
	assert_int_equal(line[1], 3);	  /* its own line: client 3's */
	assert_int_not_equal(line[0], line[1]);
	munmap(b.st, size);
}

struct line_claim {
	struct bh *b;
	uint32_t idx;
	int v;
};

/* A new thread's claim, as client 1, kept when the thread ends. */
static void *line_claim_main(void *arg)
{
	struct line_claim *c = arg;
	struct resil_permit_priv pm;

	c->v = take(c->b, 1, RESIL_PRIO_NORMAL, &pm);
	c->idx = pm.bulkhead_idx;
	return NULL;
}

/* Packed slots: threads of one process claim on lines of their own, as
 * processes do. Three new threads of client 1, one after the other, each
 * keeping its permit: the second and third would otherwise start on the
 * first's line (client 1's) and claim beside it. */
static void test_packed_thread_lines(void **state)
{
	struct line_claim c[3];
	struct bh b;
	(void)state;

	bh_new(&b, "2000", NULL, NULL);
	assert_false(resil_bulkhead_spread(&b.conf));
	for (int i = 0; i < 3; i++) {
		pthread_t th;

		c[i] = (struct line_claim){.b = &b};
		assert_int_equal(pthread_create(&th, NULL, line_claim_main, &c[i]), 0);
		assert_int_equal(pthread_join(th, NULL), 0);
		assert_int_equal(c[i].v, 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal((c[i].idx - 1) / 32, (c[j].idx - 1) / 32);
	}
	assert_int_equal(resil_bulkhead_held(&b.conf, b.st), 3);
	bh_free(&b);
}

static void test_threads(void **state)
{
	_Atomic int inside = 0, worst = 0;
	struct hammer h[4];
	pthread_t th[4];
	struct bh b;
	long total = 0;
	int i;

	/* partition_r: a partition that matters (1 of 3 reserved) */
	bh_new_r(&b, "3", state);
	for (i = 0; i < 4; i++) {
		h[i] = (struct hammer){.b = &b,
				       .client = 1 + (uint32_t)i,
				       .inside = &inside,
				       .worst = &worst,
				       .rounds = 200000};
		assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		total += h[i].admitted;
	}
	assert_true(atomic_load(&worst) <= 3);
	assert_true(total > 0);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* Waiters across threads: 4 threads on 1 permit, each holding it over a
 * yield (so that the others wait, and sleep) and each call waiting up to
 * 10 s, far longer than any hold: every call is admitted. A lost wakeup
 * (a release that missed a waiter, a waiter asleep past a free slot)
 * leaves a waiter asleep to the end of its wait and shows as a
 * rejection. */
static void test_wait_threads(void **state)
{
	_Atomic int inside = 0, worst = 0;
	struct hammer h[4];
	pthread_t th[4];
	long rounds = 5000L * resil_test_scale(), total = 0;
	struct bh b;
	int i;

	bh_wait_r(&b, "1", "10s", state);
	for (i = 0; i < 4; i++) {
		h[i] = (struct hammer){.b = &b,
				       .client = 1 + (uint32_t)i,
				       .hold_yield = true,
				       .inside = &inside,
				       .worst = &worst,
				       .rounds = rounds};
		assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		total += h[i].admitted;
	}
	assert_true(atomic_load(&worst) <= 1);
	assert_int_equal(total, 4 * rounds);
	assert_true(atomic_load(&b.st->waits) > 0); /* they did wait */
	assert_int_equal(atomic_load(&b.st->nwait), 0);
	assert_int_equal(bh_held(&b), 0);
	bh_free(&b);
}

/* ---- the fail-fast path makes no syscall ---- */

/* Run fn in a child under SECCOMP_MODE_STRICT: any syscall but read,
 * write, exit and sigreturn kills it. Returns the waitpid status. */
static int run_strict(void (*fn)(struct bh *), struct bh *b)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0)
			syscall(SYS_exit, 77);
		fn(b);
		syscall(SYS_exit, 0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void strict_body(struct bh *b)
{
	struct resil_permit_priv pm[4];

	for (int r = 0; r < 1000; r++) {
		for (int i = 0; i < 3; i++)
			if (take(b, 5, i ? RESIL_PRIO_NORMAL : RESIL_PRIO_CRITICAL, &pm[i]) != 0)
				syscall(SYS_exit, 3);
		if (take(b, 5, RESIL_PRIO_NORMAL, &pm[3]) != RESIL_REJECT_FULL)
			syscall(SYS_exit, 4);
		for (int i = 0; i < 3; i++)
			give(b, 5, &pm[i]);
	}
}

/* A clock that counts its readings: the claims that must not read one. */
static int clock_reads;
static int64_t counting_clock(void *ctx)
{
	clock_reads++;
	return *(int64_t *)ctx;
}

static int take_global(struct bh *b, uint32_t client, struct resil_permit_priv *pm)
{
	struct resil_ctx x;

	ctx_init(&x, client);
	x.clock.fn = counting_clock;
	memset(pm, 0, sizeof(*pm));
	return resil_bulkhead_acquire_scan_global(&x, &b->conf, b->st, pm);
}

/* policy.scope = global: a live lease of 6 slots of 10 with a fallback of
 * 2. Below sure_slots (2) a thread's slot is claimed again without the
 * clock; under the lease 6 are admitted; past it 2, whatever slot the
 * thread held last; with a fallback of none, nothing, and the clock
 * decides every claim; a fallback with an end gives its slots until the
 * end, the after tier's past it, and sure_slots no more than those. In a
 * thread of its own: the thread's last slot (bulkhead.c, next_of) starts
 * at none. */
/* a failed check in the thread: its line, for the test's thread to report */
#define GCHECK(c)                                                                                  \
	do {                                                                                       \
		if (!(c))                                                                          \
			return (void *)(uintptr_t)__LINE__;                                        \
	} while (0)

static void *global_lease_body(void *arg)
{
	struct resil_permit_priv pm[12];
	struct bh *b = arg;
	struct resil_pool p = resil_bulkhead_pool(b->st);
	int n;

	resil_bulkhead_lease_set(b->st, manual_now + RESIL_NS_PER_S, 6, 2);
	GCHECK(atomic_load(&b->st->sure_slots) == 2);

	/* the first claim reads the clock and lands at 7 % 6 = slot 1 */
	clock_reads = 0;
	GCHECK(take_global(b, 7, &pm[0]) == 0);
	GCHECK(pm[0].bulkhead_idx == 2);
	GCHECK(clock_reads == 1);
	give(b, 7, &pm[0]);
	/* slot 1 is below sure_slots: claimed again without the clock */
	GCHECK(take_global(b, 7, &pm[0]) == 0);
	GCHECK(pm[0].bulkhead_idx == 2);
	GCHECK(clock_reads == 1);

	/* under the lease: 6, the share, and not one more */
	for (n = 1; n < 12 && take_global(b, 7, &pm[n]) == 0; n++)
		GCHECK((pm[n].bulkhead_idx) >= 1 && (pm[n].bulkhead_idx) <= 6);
	GCHECK(n == 6);
	for (int i = 0; i < n; i++)
		give(b, 7, &pm[i]);

	/* the thread's last slot above sure_slots: slot 5, the one left */
	for (uint32_t i = 0; i < 5; i++)
		atomic_store(&p.slots[(size_t)i << p.shift], 9);
	GCHECK(take_global(b, 7, &pm[0]) == 0);
	GCHECK(pm[0].bulkhead_idx == 6);
	for (uint32_t i = 0; i < 5; i++)
		atomic_store(&p.slots[(size_t)i << p.shift], 0);
	give(b, 7, &pm[0]);

	/* past the lease: the fallback's 2 slots, not the thread's slot 5 */
	manual_now += 2 * RESIL_NS_PER_S;
	for (n = 0; n < 12 && take_global(b, 7, &pm[n]) == 0; n++)
		GCHECK((pm[n].bulkhead_idx) >= 1 && (pm[n].bulkhead_idx) <= 2);
	GCHECK(n == 2);
	for (int i = 0; i < n; i++)
		give(b, 7, &pm[i]);

	/* a fallback of none: no slot is sure, the clock decides every
	 * claim, and past the lease it refuses */
	resil_bulkhead_lease_set(b->st, manual_now - 1, 6, 0);
	GCHECK(atomic_load(&b->st->sure_slots) == 0);
	clock_reads = 0;
	GCHECK(take_global(b, 7, &pm[0]) == RESIL_REJECT_FULL);
	GCHECK(clock_reads == 1);

	/* a fallback with an end: 4 slots until it, 1 past it; no claim
	 * without the clock beyond what the end allows (sure_slots 1) */
	resil_bulkhead_fallback_end_set(b->st, manual_now + RESIL_NS_PER_S, 1);
	resil_bulkhead_lease_set(b->st, manual_now - 1, 6, 4);
	GCHECK(atomic_load(&b->st->sure_slots) == 1);
	for (n = 0; n < 12 && take_global(b, 7, &pm[n]) == 0; n++)
		GCHECK((pm[n].bulkhead_idx) >= 1 && (pm[n].bulkhead_idx) <= 4);
	GCHECK(n == 4);
	for (int i = 0; i < n; i++)
		give(b, 7, &pm[i]);
	manual_now += 2 * RESIL_NS_PER_S;
	for (n = 0; n < 12 && take_global(b, 7, &pm[n]) == 0; n++)
		GCHECK(pm[n].bulkhead_idx == 1);
	GCHECK(n == 1);
	give(b, 7, &pm[0]);
	resil_bulkhead_fallback_end_set(b->st, 0, 0);

	/* a client's sure_slots past the configuration claims nothing more */
	resil_bulkhead_lease_set(b->st, manual_now + RESIL_NS_PER_S, 10, 10);
	atomic_store(&b->st->sure_slots, UINT32_MAX);
	for (n = 0; n < 12 && take_global(b, 7, &pm[n]) == 0; n++)
		GCHECK((pm[n].bulkhead_idx) >= 1 && (pm[n].bulkhead_idx) <= 10);
	GCHECK(n == 10);
	return (void *)0;
}

static void test_global_lease(void **state)
{
	struct bh b;
	pthread_t t;

	bh_new(&b, "10", NULL, NULL);
	void *line;

	assert_int_equal(pthread_create(&t, NULL, global_lease_body, &b), 0);
	assert_int_equal(pthread_join(t, &line), 0);
	if (line)
		fail_msg("check at unit_bulkhead.c:%u failed", (unsigned)(uintptr_t)line);
	bh_free(&b);
}

static void test_no_syscall(void **state)
{
	struct bh b;
	int status;

#ifdef __SANITIZE_THREAD__
	skip(); /* a strict-seccomp child of a TSan process never finishes dying */
#endif

	bh_new_r(&b, "3", state);
	status = run_strict(strict_body, &b);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		skip();
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	bh_free(&b);

	/* the harness does catch a syscall: a full bulkhead with a wait
	 * sleeps on the futex, and the child is killed for it */
	bh_new(&b, "3", "1ms", NULL);
	status = run_strict(strict_body, &b);
	assert_true(WIFSIGNALED(status)); /* SIGKILL (SIGSEGV under ASan) */
	bh_free(&b);
}

/* Cost of the fail-fast path, printed (benchmarks live in bench/; this is
 * a sanity figure, never asserted). */
static void test_cost(void **state)
{
	static _Alignas(128) _Atomic uint32_t word;
	struct resil_permit_priv pm, full[2];
	struct resil_ctx x;
	long n = 2000000, i;
	int64_t t0, t1, t2, t3;
	struct bh b;

	bh_new_r(&b, "2", state);
	ctx_init(&x, 9);
	t0 = mono_ns();
	for (i = 0; i < n; i++)
		atomic_fetch_add_explicit(&word, 1, memory_order_relaxed);
	t1 = mono_ns();
	for (i = 0; i < n; i++) {
		pm.flags = 0;
		pm.priority = 0;
		if (resil_bulkhead_acquire(&x, &b.conf, b.st, &pm) == 0)
			resil_bulkhead_release(&x, &b.conf, b.st, &pm, RESIL_SUCCESS);
	}
	t2 = mono_ns();
	assert_int_equal(take(&b, 9, RESIL_PRIO_NORMAL, &full[0]), 0);
	assert_int_equal(take(&b, 9, RESIL_PRIO_NORMAL, &full[1]), 0);
	for (i = 0; i < n; i++) {
		pm.flags = 0;
		pm.priority = 0;
		if (resil_bulkhead_acquire(&x, &b.conf, b.st, &pm) == 0)
			fail();
	}
	t3 = mono_ns();
	print_message("%s: fetch_add %.1f ns; bulkhead enter+exit %.1f ns (%.1fx), rejection "
		      "%.1f ns\n",
		      packed(&b) ? "packed" : "spread", (double)(t1 - t0) / n,
		      (double)(t2 - t1) / n, (double)(t2 - t1) / (double)(t1 - t0),
		      (double)(t3 - t2) / n);
	give(&b, 9, &full[0]);
	give(&b, 9, &full[1]);
	bh_free(&b);
}

static void test_roundtrip(void **state)
{
	struct resil_bulkhead_conf c;
	char err[128];

	resil_bulkhead_conf_defaults(&c);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.max", "40", err, sizeof(err)), 0);
	roundtrip_bulkhead(&c);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.wait", "200ms", err, sizeof(err)),
			 0);
	roundtrip_bulkhead(&c);
	assert_int_equal(resil_bulkhead_conf_set(&c, "bulkhead.critical", "12.5", err, sizeof(err)),
			 0);
	roundtrip_bulkhead(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf),
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_shape),
	    cmocka_unit_test(test_fresh_block_on_regime_change),
	    cmocka_unit_test_prestate(test_limit, &scan_r),
	    cmocka_unit_test_prestate(test_limit, &packed_r),
	    cmocka_unit_test(test_scan_reject_never_claims),
	    cmocka_unit_test(test_full_hint_race),
	    cmocka_unit_test(test_full_hint_recheck_scales),
	    cmocka_unit_test_prestate(test_geometry_scribbled, &scan_r),
	    cmocka_unit_test_prestate(test_geometry_scribbled, &packed_r),
	    cmocka_unit_test_prestate(test_same_slot_again, &scan_r),
	    cmocka_unit_test_prestate(test_same_slot_again, &packed_r),
	    cmocka_unit_test_prestate(test_unregistered, &scan_r),
	    cmocka_unit_test_prestate(test_unregistered, &packed_r),
	    cmocka_unit_test(test_priority),
	    cmocka_unit_test(test_partition_hint),
	    cmocka_unit_test_prestate(test_reclaim, &scan_r),
	    cmocka_unit_test_prestate(test_reclaim, &packed_r),
	    cmocka_unit_test(test_repair_windows),
	    cmocka_unit_test_prestate(test_wait_admitted, &scan_r),
	    cmocka_unit_test_prestate(test_wait_admitted, &packed_r),
	    cmocka_unit_test_prestate(test_wait_timeout, &scan_r),
	    cmocka_unit_test_prestate(test_wait_timeout, &packed_r),
	    cmocka_unit_test_prestate(test_wait_one_per_release, &scan_r),
	    cmocka_unit_test_prestate(test_wait_one_per_release, &packed_r),
	    cmocka_unit_test_prestate(test_dead_waiter, &scan_r),
	    cmocka_unit_test_prestate(test_dead_waiter, &packed_r),
	    cmocka_unit_test_prestate(test_wait_threads, &scan_r),
	    cmocka_unit_test_prestate(test_wait_threads, &packed_r),
	    cmocka_unit_test(test_packed_fork_lines),
	    cmocka_unit_test(test_packed_thread_lines),
	    cmocka_unit_test_prestate(test_threads, &scan_r),
	    cmocka_unit_test_prestate(test_threads, &packed_r),
	    cmocka_unit_test_prestate(test_threads, &partition_r),
	    cmocka_unit_test(test_global_lease),
	    cmocka_unit_test_prestate(test_no_syscall, &scan_r),
	    cmocka_unit_test_prestate(test_no_syscall, &packed_r),
	    cmocka_unit_test_prestate(test_cost, &scan_r),
	    cmocka_unit_test_prestate(test_cost, &packed_r),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

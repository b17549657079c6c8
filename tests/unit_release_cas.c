/* SPDX-License-Identifier: MIT */
/*
 * unit_release_cas.c - a permit is released by a CAS from its holder's
 * own id, so a wrong reclaim cannot spread: the daemon takes a live
 * client's permit back (it judged the process dead), a second client is
 * admitted into the freed slot, and then the first client releases. That
 * release must not free the second client's slot. Bulkhead (spread and
 * packed slots, one permit free) and the adaptive limit's counted pool
 * (limit 1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptive.h"
#include "bulkhead.h"
#include "policy.h"
#include "testutil.h"
#include "resil.h"

static int64_t now_ns = 1000 * RESIL_NS_PER_S;

static int64_t manual_clock(void *ctx)
{
	(void)ctx;
	return now_ns;
}

static void ctx_init(struct resil_ctx *x, uint32_t id)
{
	memset(x, 0, sizeof(*x));
	x->clock.fn = manual_clock;
	x->client_id = id;
}

struct bh {
	struct resil_bulkhead_conf conf;
	void *st;
	uint32_t fill; /* slots a filler client holds (packed slots) */
};

/* A bulkhead of 1 permit, its slot spread; or packed, as above
 * RESIL_POOL_SPREAD_MAX: 1 + RESIL_POOL_SPREAD_MAX permits, all but slot
 * 0 held by the filler client (test_bulkhead_fill). */
static void bh_new(struct bh *b, bool packed)
{
	uint32_t n = packed ? 1 + RESIL_POOL_SPREAD_MAX : 1;
	char err[128], max[16];

	resil_bulkhead_conf_defaults(&b->conf);
	snprintf(max, sizeof(max), "%u", n);
	assert_int_equal(resil_bulkhead_conf_set(&b->conf, "bulkhead.max", max, err, sizeof(err)),
			 0);
	assert_int_equal(resil_bulkhead_spread(&b->conf), !packed);
	b->st = aligned_alloc(RESIL_HOT_ALIGN,
			      resil_align_up(resil_bulkhead_state_size(&b->conf), RESIL_HOT_ALIGN));
	assert_non_null(b->st);
	resil_bulkhead_state_init(b->st, &b->conf, now_ns);
	b->fill = test_bulkhead_fill(b->st, 1);
}

static uint32_t bh_held(struct bh *b)
{
	return resil_bulkhead_held(&b->conf, b->st) - b->fill;
}

static int bh_take(struct bh *b, uint32_t id, struct resil_permit_priv *pm)
{
	struct resil_ctx x;

	ctx_init(&x, id);
	memset(pm, 0, sizeof(*pm));
	return resil_bulkhead_acquire(&x, &b->conf, b->st, pm);
}

static void bh_give(struct bh *b, uint32_t id, struct resil_permit_priv *pm)
{
	struct resil_ctx x;

	ctx_init(&x, id);
	resil_bulkhead_release(&x, &b->conf, b->st, pm, RESIL_SUCCESS);
}

static void wrong_reclaim_bulkhead(bool packed)
{
	struct resil_reclaim_counts counts = {0};
	struct resil_permit_priv victim, newcomer, third;
	struct resil_ctx x;
	struct bh b;

	bh_new(&b, packed);
	assert_int_equal(bh_take(&b, 5, &victim), 0);
	assert_int_equal(bh_take(&b, 6, &newcomer), RESIL_REJECT_FULL);
	/* the daemon wrongly judges client 5 dead */
	ctx_init(&x, 0);
	resil_bulkhead_reclaim(&x, &b.conf, b.st, 5, &counts);
	assert_int_equal(counts.permits, 1);
	assert_int_equal(bh_take(&b, 6, &newcomer), 0);
	/* the victim's late release gives back nothing it no longer holds */
	bh_give(&b, 5, &victim);
	assert_int_equal(bh_held(&b), 1);
	assert_int_equal(bh_take(&b, 7, &third), RESIL_REJECT_FULL);
	/* the newcomer's own release frees it */
	bh_give(&b, 6, &newcomer);
	assert_int_equal(bh_held(&b), 0);
	assert_int_equal(bh_take(&b, 7, &third), 0);
	bh_give(&b, 7, &third);
	assert_int_equal(bh_held(&b), 0);
	free(b.st);
}

static void test_bulkhead_scan(void **state)
{
	(void)state;
	wrong_reclaim_bulkhead(false);
}

static void test_bulkhead_packed(void **state)
{
	(void)state;
	wrong_reclaim_bulkhead(true);
}

static void test_adaptive(void **state)
{
	struct resil_adaptive_conf c;
	struct resil_permit_priv victim, newcomer, third;
	struct resil_reclaim_counts counts = {0};
	struct resil_ctx x;
	char err[128];
	void *st;

	(void)state;
	resil_adaptive_conf_defaults(&c);
	assert_int_equal(resil_adaptive_conf_set(&c, "adaptive.min", "1", err, sizeof(err)), 0);
	assert_int_equal(resil_adaptive_conf_set(&c, "adaptive.initial", "1", err, sizeof(err)), 0);
	assert_int_equal(resil_adaptive_conf_set(&c, "adaptive.max", "4", err, sizeof(err)), 0);
	st = aligned_alloc(RESIL_HOT_ALIGN,
			   resil_align_up(resil_adaptive_state_size(&c), RESIL_HOT_ALIGN));
	assert_non_null(st);
	resil_adaptive_state_init(st, &c, now_ns);

	ctx_init(&x, 5);
	memset(&victim, 0, sizeof(victim));
	assert_int_equal(resil_adaptive_acquire(&x, &c, st, &victim), 0);
	ctx_init(&x, 6);
	memset(&newcomer, 0, sizeof(newcomer));
	assert_int_equal(resil_adaptive_acquire(&x, &c, st, &newcomer), RESIL_REJECT_FULL);
	ctx_init(&x, 0);
	resil_adaptive_reclaim(&x, &c, st, 5, &counts);
	assert_int_equal(counts.permits, 1);
	ctx_init(&x, 6);
	memset(&newcomer, 0, sizeof(newcomer));
	assert_int_equal(resil_adaptive_acquire(&x, &c, st, &newcomer), 0);
	/* the victim's late release (an undo: no sample for the limit) */
	ctx_init(&x, 5);
	resil_adaptive_undo(&x, &c, st, &victim);
	assert_int_equal(resil_adaptive_held(&c, st), 1);
	ctx_init(&x, 7);
	memset(&third, 0, sizeof(third));
	assert_int_equal(resil_adaptive_acquire(&x, &c, st, &third), RESIL_REJECT_FULL);
	ctx_init(&x, 6);
	resil_adaptive_undo(&x, &c, st, &newcomer);
	assert_int_equal(resil_adaptive_held(&c, st), 0);
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bulkhead_scan),
	    cmocka_unit_test(test_bulkhead_packed),
	    cmocka_unit_test(test_adaptive),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

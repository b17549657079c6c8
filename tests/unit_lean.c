/* SPDX-License-Identifier: MIT */
/*
 * unit_lean.c - the branches of libresil's one decision path (client/
 * acquire.c, release.c; docs/internals/libresil.md, "The decision path"):
 * a policy that is only a bulkhead (fail-fast, waiting, with a critical
 * share, of packed slots or of global scope under every tier of resild's
 * lease words), a limiter (keyed or not), the counters, or a
 * breaker without a slow-call rate, or two or three of a breaker, an
 * unkeyed GCRA and a fail-fast bulkhead, is decided by the binding's
 * branches on the same words and with the same counts as the general
 * path (the twin tests: the same shape with a histogram, which makes it
 * general), and its permits are complete ones that the general path
 * releases after a re-bind.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "internal.h"
#include "breaker.h"
#include "bulkhead.h"
#include "limit.h"
#include "stats.h"
#include "testutil.h"

static resil_t *r;

static int open_emb(void **state)
{
	(void)state;
	return resil_open_embedded(&r, NULL);
}

static int close_emb(void **state)
{
	(void)state;
	resil_close(r);
	r = NULL;
	return 0;
}

static uint64_t count(const struct resil_rec *rec, enum resil_stat which)
{
	return resil_stats_read(resil_comp_state(&r->seg, rec, RESIL_C_STATS), which);
}

static uint32_t held(const struct resil_rec *rec)
{
	return resil_bulkhead_held(&rec->conf.bulkhead,
				   resil_comp_state(&r->seg, rec, RESIL_C_BULKHEAD));
}

/* A bulkhead policy defined by conf, its handle, record and state. */
static struct resil_bulkhead_state *bulkhead_policy(const char *name, const char *conf,
						    resil_policy_t **p,
						    const struct resil_rec **rec)
{
	assert_int_equal(resil_define(r, name, conf), 0);
	assert_int_equal(resil_policy(r, name, p), 0);
	*rec = test_rec_of(r, name);
	return resil_comp_state(&r->seg, *rec, RESIL_C_BULKHEAD);
}

static void test_lean_counts_as_general(void **state)
{
	resil_policy_t *p;
	resil_permit_t a, b, c;
	const struct resil_rec *rec;

	(void)state;
	assert_int_equal(resil_define(r, "pool", "bulkhead.max = 2"), 0);
	assert_int_equal(resil_policy(r, "pool", &p), 0);
	rec = test_rec_of(r, "pool");
	assert_int_equal(test_branch_of(p), 1); /* bound lean: the path under test */

	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_acquire(p, &b), RESIL_ADMIT);
	assert_int_equal(held(rec), 2);
	assert_int_equal(resil_acquire(p, &c), RESIL_REJECT_FULL);
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 1);
	assert_int_equal(held(rec), 2);

	resil_release(p, &a, RESIL_SUCCESS);
	resil_release(p, &b, RESIL_FAILURE);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 1);
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 1);
	/* a released permit is spent: a second release changes nothing */
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 1);

	/* through resil_acquire_ex too, whatever the request says */
	struct resil_req req = {.priority = RESIL_PRIO_CRITICAL, .permits = 3};

	assert_int_equal(resil_acquire_ex(p, &req, &a), RESIL_ADMIT);
	assert_int_equal(held(rec), 1);
	resil_release(p, &a, RESIL_IGNORED);
	assert_int_equal(count(rec, RESIL_STAT_IGNORED), 1);
	assert_int_equal(held(rec), 0);
}

/* Not lean: a component outside the stack, a histogram, a wait in a
 * stack, a critical share in a stack, a key or a sliding window in a
 * stack, global scope in a stack. */
static void test_lean_only_when_alone(void **state)
{
	static const char *const general[] = {
	    "bulkhead.max = 2; shed.k = 2",
	    "bulkhead.max = 2; breaker.window = count:10; histogram = on",
	    "bulkhead.max = 2; limit.rate = 10/s; limit.keys = 100; limit.default_key = any",
	    "bulkhead.max = 2; limit.rate = 10/s; limit.algorithm = sliding",
	    "breaker.window = count:10; limit.rate = 10/s; limit.wait = 1s",
	    "breaker.window = count:10; bulkhead.max = 2; bulkhead.wait = 10ms",
	    "breaker.window = time:10s; bulkhead.max = 2; policy.scope = global",
	    "breaker.window = count:10; breaker.slow_call = 1s; breaker.slow_call_rate = 50;"
	    " bulkhead.max = 2",
	    "bulkhead.max = 2; histogram = on",
	    "breaker.window = count:10; bulkhead.max = 2; bulkhead.critical = 50%",
	    "bulkhead.max = 2; policy.scope = process",
	};
	resil_policy_t *p;
	resil_permit_t a;

	(void)state;
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(general); i++) {
		assert_int_equal(resil_define(r, "mixed", general[i]), 0);
		assert_int_equal(resil_policy(r, "mixed", &p), 0);
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT); /* binds */
		resil_release(p, &a, RESIL_SUCCESS);
		assert_int_equal(test_branch_of(p), 0);
	}
}

/* A lean permit outlives a redefinition: the general path releases it into
 * the block it came from; and a general permit of the old shape is
 * released while the handle is bound lean. */
static void test_lean_permit_outlives_rebind(void **state)
{
	const struct resil_rec *lean_rec, *gen_rec;
	resil_policy_t *p;
	resil_permit_t a, g;

	(void)state;
	assert_int_equal(resil_define(r, "dep", "bulkhead.max = 2"), 0);
	assert_int_equal(resil_policy(r, "dep", &p), 0);
	lean_rec = test_rec_of(r, "dep");
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);

	/* a shedder joins: a new record, a new block, bound general */
	assert_int_equal(resil_define(r, "dep", "bulkhead.max = 2; shed.k = 2"), 0);
	gen_rec = test_rec_of(r, "dep");
	assert_ptr_not_equal(gen_rec, lean_rec);
	assert_int_equal(resil_acquire(p, &g), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 0);
	assert_int_equal(held(gen_rec), 1);

	resil_release(p, &a, RESIL_SUCCESS); /* the lean permit, by the general path */
	assert_int_equal(held(lean_rec), 0);
	assert_int_equal(count(lean_rec, RESIL_STAT_SUCCESS), 1);
	assert_int_equal(held(gen_rec), 1);

	/* back to the bulkhead alone: bound lean again, the general permit
	 * still goes back to its own block */
	assert_int_equal(resil_define(r, "dep", "bulkhead.max = 2"), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);
	resil_release(p, &g, RESIL_FAILURE);
	assert_int_equal(held(gen_rec), 0);
	assert_int_equal(count(gen_rec, RESIL_STAT_FAILURE), 1);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(held(test_rec_of(r, "dep")), 0);
}

/* The lean bulkhead's fast claim: the thread's last slot, the full hint
 * when it is taken, a walk every resil_bulkhead_recheck(n) rejections. A
 * slot freed behind the hint's back (the race of bulkhead.c's "Full
 * hint", played with a bare store) is found within that many rejections,
 * each counted once; permits of both paths release alike. */
static void test_lean_bulkhead_hint(void **state)
{
	const struct resil_rec *rec;
	resil_permit_t a[4], x;
	struct resil_bulkhead_state *st;
	struct resil_pool pool;
	resil_policy_t *p;
	int tries;

	(void)state;
	st = bulkhead_policy("hint", "bulkhead.max = 4", &p, &rec);
	pool = resil_bulkhead_pool(st);
	for (int i = 0; i < 4; i++)
		assert_int_equal(resil_acquire(p, &a[i]), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);
	assert_int_equal(atomic_load(&p->b)->bh_n, 4);
	assert_int_equal(resil_policy_may_wait(p), 0);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL); /* a walk: sets the hint */
	assert_int_equal(atomic_load(&st->full), 1);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL); /* the hint alone */
	assert_int_equal(resil_permit_wait_ns(&x), 0);
	resil_release(p, &x, RESIL_SUCCESS); /* a rejected permit: nothing */
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 2);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 0);

	/* a release that missed the hint */
	struct resil_permit_priv *pm = (struct resil_permit_priv *)&a[1];

	atomic_store(&pool.slots[(size_t)(pm->bulkhead_idx - 1) << pool.shift], 0);
	memset(&a[1], 0, sizeof(a[1]));
	for (tries = 1; tries <= 2 * (int)resil_bulkhead_recheck(4); tries++)
		if (resil_acquire(p, &a[1]) == RESIL_ADMIT)
			break;
	assert_true(tries <= (int)resil_bulkhead_recheck(4));
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 2 + (uint64_t)tries - 1);
	assert_int_equal(held(rec), 4);
	for (int i = 0; i < 4; i++)
		resil_release(p, &a[i], RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 4);
	/* free again: the fast claim, and its release */
	assert_int_equal(resil_acquire(p, &x), RESIL_ADMIT);
	assert_int_equal(held(rec), 1);
	resil_release(p, &x, RESIL_FAILURE);
	assert_int_equal(held(rec), 0);
}

/* A bulkhead whose callers wait is lean too, through its component's
 * acquire (the binding has no slot count: every acquire goes to
 * acquire_lean_bulkhead_wait) and a release that looks for waiters; the
 * bound handle says it may wait (resil_policy_may_wait). A lean
 * release wakes a lean waiter, well before its 30 s wait is over (without
 * the wake it would claim only when the wait ends), and a wait that ends
 * is a rejection, counted once. */
struct lean_waiter {
	resil_policy_t *p;
	resil_permit_t pm;
	int verdict;
	int64_t waited_ns;
};

static void *lean_waiter_main(void *arg)
{
	struct lean_waiter *w = arg;
	int64_t t0 = test_mono_ns();

	w->verdict = resil_acquire(w->p, &w->pm);
	w->waited_ns = test_mono_ns() - t0;
	return NULL;
}

static void test_lean_bulkhead_wait(void **state)
{
	const struct resil_rec *rec;
	struct resil_bulkhead_state *st;
	struct lean_waiter w = {0};
	resil_permit_t a, x;
	resil_policy_t *p;
	pthread_t th;

	(void)state;
	st = bulkhead_policy("wpool", "bulkhead.max = 1; bulkhead.wait = 30s", &p, &rec);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);
	assert_int_equal(atomic_load(&p->b)->bh_n, 0); /* no slot count */
	assert_int_equal(resil_policy_may_wait(p), 1); /* a binding's GIL goes */
	w.p = p;
	assert_int_equal(pthread_create(&th, NULL, lean_waiter_main, &w), 0);
	assert_true(TEST_EVENTUALLY(atomic_load(&st->nwait) == 1));
	resil_release(p, &a, RESIL_SUCCESS);
	pthread_join(th, NULL);
	assert_int_equal(w.verdict, RESIL_ADMIT);
	assert_true(w.waited_ns < 20 * 1000000000LL); /* woken, not timed out */
	assert_int_equal(atomic_load(&st->nwait), 0);
	assert_int_equal(atomic_load(&st->waits), 1);
	assert_int_equal(held(rec), 1);
	resil_release(p, &w.pm, RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 2);

	/* a wait that ends: one rejection */
	st = bulkhead_policy("wshort", "bulkhead.max = 1; bulkhead.wait = 20ms", &p, &rec);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL);
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 1);
	assert_int_equal(atomic_load(&st->nwait), 0);
	assert_int_equal(atomic_load(&st->waits), 1);
	resil_release(p, &x, RESIL_SUCCESS); /* a rejected permit: nothing */
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 1);
}

/* A bulkhead of packed slots (above 1024 permits) is lean too, through
 * its component's acquire and release (no slot count in the binding, as
 * a waiting one): every permit and no more, the hint's rejection counted,
 * the releases counted, each slot free again; and a lean permit outlives
 * a redefinition that makes the policy general. */
static void test_lean_bulkhead_packed(void **state)
{
	static resil_permit_t a[1100];
	const struct resil_rec *rec, *gen_rec;
	struct resil_bulkhead_state *st;
	resil_permit_t x;
	resil_policy_t *p;

	(void)state;
	st = bulkhead_policy("packed", "bulkhead.max = 1100", &p, &rec);
	for (int i = 0; i < 1100; i++)
		assert_int_equal(resil_acquire(p, &a[i]), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);
	assert_int_equal(atomic_load(&p->b)->bh_n, 0); /* no slot count */
	assert_int_equal(resil_policy_may_wait(p), 0);
	assert_int_equal(held(rec), 1100);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL); /* a walk: sets the hint */
	assert_int_equal(atomic_load(&st->full), 1);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL);
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 2);
	for (int i = 0; i < 1099; i++)
		resil_release(p, &a[i], i % 2 ? RESIL_SUCCESS : RESIL_FAILURE);
	assert_int_equal(held(rec), 1);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 549);
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 550);
	assert_int_equal(resil_acquire(p, &x), RESIL_ADMIT);
	resil_release(p, &x, RESIL_SUCCESS);

	/* a shedder joins: bound general; the lean permit still goes back */
	assert_int_equal(resil_define(r, "packed", "bulkhead.max = 1100; shed.k = 2"), 0);
	gen_rec = test_rec_of(r, "packed");
	assert_ptr_not_equal(gen_rec, rec);
	assert_int_equal(resil_acquire(p, &x), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 0);
	resil_release(p, &a[1099], RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	resil_release(p, &x, RESIL_SUCCESS);
}

/* A critical share, lean: the request's priority reaches the partition
 * (a normal caller gets the shared permit only, a critical one the
 * reserved one too), and the release frees either. */
static void test_lean_bulkhead_partition(void **state)
{
	struct resil_req crit = {.priority = RESIL_PRIO_CRITICAL};
	const struct resil_rec *rec;
	resil_permit_t a, b, x;
	resil_policy_t *p;

	(void)state;
	bulkhead_policy("part", "bulkhead.max = 2; bulkhead.critical = 50%", &p, &rec);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 1);
	assert_int_equal(atomic_load(&p->b)->bh_n, 0); /* no slot count */
	assert_int_equal(resil_policy_may_wait(p), 0);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL); /* the reserve */
	assert_int_equal(resil_acquire_ex(p, &crit, &b), RESIL_ADMIT);
	assert_int_equal(resil_acquire_ex(p, &crit, &x), RESIL_REJECT_FULL);
	assert_int_equal(held(rec), 2);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &b, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &x), RESIL_REJECT_FULL);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 3);
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 3);
}

static int64_t manual_ns = 1000 * 1000000000LL;

static int64_t manual(void *ctx)
{
	(void)ctx;
	return manual_ns;
}

/* The unkeyed limiter, lean: the same admissions, Retry-After and counts
 * as the limiter's own tests expect (rate 10/s, burst 2), on the manual
 * clock; several permits at once. */
static void test_lean_limit(void **state)
{
	const struct resil_rec *rec;
	resil_policy_t *p;
	resil_permit_t a;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	assert_int_equal(resil_define(r, "rate", "limit.rate = 10/s; limit.burst = 2"), 0);
	assert_int_equal(resil_policy(r, "rate", &p), 0);
	rec = test_rec_of(r, "rate");
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 2);
	assert_int_equal(atomic_load(&p->b)->lim_way, 1); /* GCRA: no context */
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT); /* the burst */
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&a), 100 * 1000000LL); /* Retry-After */
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 1);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 2);

	manual_ns += 200 * 1000000LL; /* two intervals: two permits again */
	struct resil_req req = {.permits = 2};

	assert_int_equal(resil_acquire_ex(p, &req, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_FAILURE);
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_LIMITED);
	req.permits = 3; /* more than the burst: never */
	assert_int_equal(resil_acquire_ex(p, &req, &a), -E2BIG);
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 1);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 2);
	/* a key is a mistake on an unkeyed limiter, here as on the general
	 * path: refused, nothing taken, nothing counted */
	manual_ns += 100 * 1000000LL;
	assert_int_equal(resil_acquire_key(p, "10.0.0.1", 8, &a), -EINVAL);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 2);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);

	/* reserving: the general path */
	assert_int_equal(resil_define(r, "rate", "limit.rate = 10/s; limit.wait = 1s"), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 0);
	resil_release(p, &a, RESIL_SUCCESS);
}

/* A lean stack, step by step: the bulkhead's rejection gives the
 * limiter's token back (the next admission takes it), the limiter's
 * rejection holds no slot, an OPEN breaker spends nothing, the probe after
 * its wait is the general path's, and each verdict is counted once. */
static void test_lean_stack(void **state)
{
	const struct resil_rec *rec;
	resil_policy_t *p;
	struct resil_limit_state *ls;
	resil_permit_t a, b, c;
	uint64_t tat;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	assert_int_equal(resil_define(r, "stk",
				      "breaker.window = count:10; breaker.min_calls = 4;"
				      " breaker.wait = 1s; breaker.half_open_calls = 1;"
				      " limit.rate = 10/s; limit.burst = 3; bulkhead.max = 2"),
			 0);
	assert_int_equal(resil_policy(r, "stk", &p), 0);
	rec = test_rec_of(r, "stk");
	ls = resil_comp_state(&r->seg, rec, RESIL_C_LIMIT);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT); /* token 1 */
	assert_int_equal(test_branch_of(p), 5);
	assert_int_equal(resil_acquire(p, &b), RESIL_ADMIT); /* token 2 */
	assert_int_equal(held(rec), 2);
	assert_int_equal(resil_acquire(p, &c), RESIL_REJECT_FULL); /* token 3, given back */
	assert_int_equal(resil_permit_wait_ns(&c), 0);
	assert_int_equal(held(rec), 2);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT); /* token 3 */
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(p, &c), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&c), 100 * 1000000LL);
	assert_int_equal(held(rec), 1);
	resil_release(p, &c, RESIL_SUCCESS); /* a rejection holds nothing */
	resil_release(p, &b, RESIL_SUCCESS);
	assert_int_equal(held(rec), 0);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 3);
	assert_int_equal(count(rec, RESIL_STAT_REJ_FULL), 1);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 1);

	/* failures (the general release) open it: 3 of 6 calls failed (50%) */
	for (int i = 0; i < 3; i++) {
		manual_ns += 200 * 1000000LL;
		assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		resil_release(p, &a, RESIL_FAILURE);
	}
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 3);
	/* OPEN: rejected before the limiter, whose word stays as it was */
	manual_ns += RESIL_NS_PER_S / 2;
	tat = ld_relaxed(&ls->word);
	for (int i = 0; i < 5; i++)
		assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
	assert_int_equal(ld_relaxed(&ls->word), tat);
	assert_int_equal(count(rec, RESIL_STAT_REJ_OPEN), 5);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 1);
	/* after the wait: the probe, then CLOSED and lean again */
	manual_ns += RESIL_NS_PER_S;
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_HALF_OPEN);
	assert_int_equal(held(rec), 1);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(held(rec), 0);
	for (int i = 0; i < 2; i++) { /* the burst's other two */
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		resil_release(p, &a, RESIL_SUCCESS);
	}
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_LIMITED);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 6);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 2);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

/* The twins of a walk: the lean policy ln and the general one gn, the
 * same configuration with a histogram (which changes no decision and
 * takes the policy off the lean paths). */
static void twin_define(const char *shape, const char *ln, const char *gn, resil_policy_t **l,
			resil_policy_t **g, const struct resil_rec **rl,
			const struct resil_rec **rg)
{
	char def[320];

	snprintf(def, sizeof(def), "%s; histogram = on", shape);
	assert_int_equal(resil_define(r, ln, shape), 0);
	assert_int_equal(resil_define(r, gn, def), 0);
	assert_int_equal(resil_policy(r, ln, l), 0);
	assert_int_equal(resil_policy(r, gn, g), 0);
	*rl = test_rec_of(r, ln);
	*rg = test_rec_of(r, gn);
}

/* A walk's release: the held pair at a random index (z), with a random
 * outcome, on both twins; the last pair takes its place. */
static void twin_release(resil_policy_t *l, resil_policy_t *g, resil_permit_t *pl,
			 resil_permit_t *pg, int *n, uint64_t z)
{
	static const int outcomes[] = {RESIL_SUCCESS, RESIL_FAILURE, RESIL_IGNORED};
	int outcome = outcomes[(z >> 8) % 3];
	uint32_t i = (uint32_t)((z >> 16) % (uint32_t)*n);

	resil_release(l, &pl[i], outcome);
	resil_release(g, &pg[i], outcome);
	(*n)--;
	pl[i] = pl[*n];
	pg[i] = pg[*n];
}

/* The end of a walk: every pair still held, released as a success. */
static void twin_release_all(resil_policy_t *l, resil_policy_t *g, resil_permit_t *pl,
			     resil_permit_t *pg, int n)
{
	while (n > 0) {
		n--;
		resil_release(l, &pl[n], RESIL_SUCCESS);
		resil_release(g, &pg[n], RESIL_SUCCESS);
	}
}

/* Every lean decision decides as the general path does: each shape run
 * twice on one manual clock, lean and general (the same configuration
 * with a histogram, which changes no decision), by one seeded random walk
 * of acquires, releases of each outcome and clock steps; every verdict,
 * Retry-After, state, the slots held and every count agree. */
static void test_lean_twin(void **state)
{
	/* every branch but the keyed limiter's (test_lean_keyed_twin): the
	 * branches the binding must hold (branch_of), the shape */
	static const struct {
		uint32_t lean;
		const char *shape;
	} twin[] = {
	    {5, "breaker.window = count:8; breaker.min_calls = 4; breaker.wait = 300ms;"
		" limit.rate = 20/s; limit.burst = 4; bulkhead.max = 3"},
	    {5, "breaker.window = consecutive:3; breaker.wait = 200ms; limit.rate = 50/s"},
	    {5, "breaker.window = count:6; breaker.min_calls = 3; breaker.wait = 150ms;"
		" breaker.half_open_calls = 2; bulkhead.max = 2"},
	    {5, "limit.rate = 30/s; limit.burst = 2; bulkhead.max = 2; limit.dry_run = on"},
	    /* one component each */
	    {1, "bulkhead.max = 3"},
	    {1, "bulkhead.max = 4; bulkhead.critical = 50"},
	    {2, "limit.rate = 20/s; limit.burst = 3"},
	    {2, "limit.algorithm = sliding; limit.rate = 25/s"},
	    {2, "limit.algorithm = sliding-approx; limit.rate = 25/s"},
	    {2, "limit.rate = 20/s; limit.burst = 2; limit.dry_run = on"},
	    {3, "policy.scope = fleet"},
	    {4, "breaker.window = count:8; breaker.min_calls = 4; breaker.wait = 300ms"},
	    {4, "breaker.window = consecutive:3; breaker.wait = 200ms"},
	    {4, "breaker.window = count:6; breaker.failure_rate = 30; breaker.min_calls = 3;"
		" breaker.wait = 150ms; breaker.half_open_calls = 2"},
	};
	static const enum resil_stat stats[] = {
	    RESIL_STAT_SUCCESS,	    RESIL_STAT_FAILURE,	    RESIL_STAT_IGNORED,
	    RESIL_STAT_REJ_OPEN,    RESIL_STAT_REJ_LIMITED, RESIL_STAT_REJ_FULL,
	    RESIL_STAT_TRANSITIONS,
	};
	enum { HOLD = 6 };

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	for (size_t k = 0; k < RESIL_ARRAY_SIZE(twin); k++) {
		resil_permit_t pl[HOLD], pg[HOLD];
		const struct resil_rec *rl, *rg;
		resil_policy_t *l, *g;
		uint64_t seed = 0x9e3779b97f4a7c15ULL * (k + 1);
		int n = 0;

		twin_define(twin[k].shape, "twl", "twg", &l, &g, &rl, &rg);
		for (int step = 0; step < 4000; step++) {
			uint64_t z = resil_splitmix64(&seed);
			uint32_t op = (uint32_t)(z % 8);

			if (op < 3 && n < HOLD) {
				int vl = resil_acquire(l, &pl[n]), vg = resil_acquire(g, &pg[n]);

				assert_int_equal(vl, vg);
				assert_int_equal(resil_permit_wait_ns(&pl[n]),
						 resil_permit_wait_ns(&pg[n]));
				if (step > 0)
					assert_int_equal(test_branch_of(l), twin[k].lean);
				n += vl == RESIL_ADMIT;
			} else if (op < 6 && n > 0) {
				twin_release(l, g, pl, pg, &n, z);
			} else {
				manual_ns += (int64_t)((z >> 20) % 120) * 1000000LL;
			}
			assert_int_equal(resil_policy_state(l), resil_policy_state(g));
			if (resil_has(rl, RESIL_C_BULKHEAD))
				assert_int_equal(held(rl), held(rg));
		}
		twin_release_all(l, g, pl, pg, n);
		for (size_t j = 0; j < RESIL_ARRAY_SIZE(stats); j++)
			assert_int_equal(count(rl, stats[j]), count(rg, stats[j]));
		/* the walk went through every verdict its shape can give */
		assert_true(count(rl, RESIL_STAT_SUCCESS) > 0);
		assert_true(count(rl, RESIL_STAT_FAILURE) > 0);
		if (resil_has(rl, RESIL_C_BREAKER))
			assert_true(count(rl, RESIL_STAT_REJ_OPEN) > 0);
		if (resil_has(rl, RESIL_C_BULKHEAD))
			assert_true(count(rl, RESIL_STAT_REJ_FULL) > 0);
		if (resil_has(rl, RESIL_C_LIMIT) && !rl->conf.limit.dry_run)
			assert_true(count(rl, RESIL_STAT_REJ_LIMITED) > 0);
	}
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

/* A global bulkhead's branch (acquire_bulkhead_own, the claimant's
 * global word) decides as the general path does, through every tier the
 * daemon's words give: no lease yet, a live lease of a share (the thread's
 * sure slot first), the fallback past it and its after tier past the
 * fallback's end. The twins get the same words at the same instants, as
 * resild's tick writes them (cluster_bulkhead.c: the fallback's end, the
 * parking, then the lease). */
static void test_lean_bulkhead_global_twin(void **state)
{
	enum { MAX = 6 };
	resil_permit_t pl[MAX], pg[MAX];
	const struct resil_rec *rl, *rg;
	void *st[2];
	resil_policy_t *l, *g;
	uint64_t seed = 0x5851f42d4c957f2dULL, leases = 0;
	int n = 0;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	twin_define("policy.scope = global; bulkhead.max = 6", "gtl", "gtg", &l, &g, &rl, &rg);
	st[0] = resil_comp_state(&r->seg, rl, RESIL_C_BULKHEAD);
	st[1] = resil_comp_state(&r->seg, rg, RESIL_C_BULKHEAD);
	for (int step = 0; step < 6000; step++) {
		uint64_t z = resil_splitmix64(&seed);
		uint32_t op = (uint32_t)(z % 10);

		if (op < 4 && n < MAX) {
			int vl = resil_acquire(l, &pl[n]), vg = resil_acquire(g, &pg[n]);

			assert_int_equal(vl, vg);
			assert_int_equal(test_branch_of(l), 1);
			assert_int_equal(test_branch_of(g), 0);
			n += vl == RESIL_ADMIT;
		} else if (op < 7 && n > 0) {
			twin_release(l, g, pl, pg, &n, z);
		} else if (op < 9) {
			manual_ns += (int64_t)((z >> 20) % 150) * 1000000LL;
		} else {
			uint32_t share = (uint32_t)((z >> 8) % (MAX + 1)),
				 fb = (uint32_t)((z >> 12) % (MAX + 1)),
				 after = (uint32_t)((z >> 16) % (fb + 1)), busy;
			int64_t life = (int64_t)((z >> 24) % 300) * 1000000LL,
				more = (int64_t)((z >> 36) % 300) * 1000000LL;

			for (int t = 0; t < 2; t++) {
				const struct resil_rec *rec = t ? rg : rl;

				resil_bulkhead_fallback_end_set(st[t], manual_ns + life + more,
								after);
				resil_bulkhead_park(&rec->conf.bulkhead, st[t], MAX - share, &busy);
				resil_bulkhead_lease_set(st[t], manual_ns + life, share, fb);
			}
			leases++;
		}
		/* the slots taken, parked ones included */
		assert_int_equal(held(rl), held(rg));
	}
	twin_release_all(l, g, pl, pg, n);
	for (int t = 0; t < 2; t++) {
		uint32_t busy;

		resil_bulkhead_park(&(t ? rg : rl)->conf.bulkhead, st[t], UINT32_MAX, &busy);
		assert_int_equal(busy, 0); /* a count only: every call's slot is free */
	}
	for (enum resil_stat j = RESIL_STAT_SUCCESS; j < RESIL_STAT__MAX; j++)
		assert_int_equal(count(rl, j), count(rg, j));
	assert_true(leases > 0);
	assert_true(count(rl, RESIL_STAT_SUCCESS) > 0);
	assert_true(count(rl, RESIL_STAT_REJ_FULL) > 0);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

/* A keyed limiter is lean too: keys apart, Retry-After per key, the
 * table's full answer and its eviction counted where the general path
 * counts them. */
static void test_lean_keyed(void **state)
{
	const struct resil_rec *rec;
	resil_policy_t *p;
	resil_permit_t a;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	assert_int_equal(resil_define(r, "ip", "limit.rate = 10/s; limit.keys = 1"), 0);
	assert_int_equal(resil_policy(r, "ip", &p), 0);
	rec = test_rec_of(r, "ip");
	assert_int_equal(resil_acquire_key(p, "10.0.0.1", 8, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 2);
	/* keyed: no context for a key found in its first two buckets */
	assert_int_equal(atomic_load(&p->b)->lim_way, 2);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire_key(p, "10.0.0.1", 8, &a), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_permit_wait_ns(&a), 100 * 1000000LL);
	/* one key of room, held by a key being limited: the default
	 * limit.when_full = reject */
	assert_int_equal(resil_acquire_key(p, "10.0.0.2", 8, &a), RESIL_REJECT_LIMITED);
	assert_int_equal(count(rec, RESIL_STAT_REJ_LIMITED), 2);
	assert_int_equal(count(rec, RESIL_STAT_EVICTIONS), 0);
	manual_ns += 100 * 1000000LL; /* 10.0.0.1 is idle again: evicted */
	assert_int_equal(resil_acquire_key(p, "10.0.0.2", 8, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(count(rec, RESIL_STAT_EVICTIONS), 1);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 2);
	/* no key (and no limit.default_key): a mistake, as on the general
	 * path */
	assert_int_equal(resil_acquire(p, &a), -EINVAL);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 2);
}

/* A keyed limiter decided lean (a key found in its first two buckets:
 * no context; any other key: the context's path) and the same limiter
 * decided on the general path (histogram = on), through one seeded walk
 * of keys on one manual clock: every verdict, Retry-After and count is
 * the same, and so is every word of the two tables, entry by entry (one
 * segment: the same seeds, so the same buckets). More keys than the
 * table holds, so the walk inserts, evicts, grows chains past b2 and
 * meets the full table; permits of 1 to 3, and a call without a key. */
static void test_lean_keyed_twin(void **state)
{
	static const char *const shape[] = {
	    "limit.rate = 40/s; limit.burst = 3; limit.keys = 48",
	    "limit.rate = 40/s; limit.burst = 2; limit.keys = 2; limit.when_full = admit",
	    "limit.algorithm = sliding-approx; limit.rate = 8/s; limit.keys = 40",
	    "limit.rate = 25/s; limit.burst = 2; limit.keys = 32; limit.dry_run = on",
	    "limit.rate = 30/s; limit.keys = 1",
	};
	static const enum resil_stat stats[] = {
	    RESIL_STAT_SUCCESS,	    RESIL_STAT_FAILURE,	  RESIL_STAT_IGNORED,
	    RESIL_STAT_REJ_LIMITED, RESIL_STAT_EVICTIONS,
	};
	enum { HOLD = 6, KEYS = 96 };
	uint64_t full_rejects = 0, full_admits = 0;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual, NULL), 0);
	for (size_t k = 0; k < RESIL_ARRAY_SIZE(shape); k++) {
		resil_permit_t pl[HOLD], pg[HOLD];
		const struct resil_rec *rl, *rg;
		struct resil_limit_state *sl, *sg;
		resil_policy_t *l, *g;
		uint64_t seed = 0x2545f4914f6cdd1dULL * (k + 1), admitted = 0;
		uint32_t entries;
		int n = 0;

		twin_define(shape[k], "kwl", "kwg", &l, &g, &rl, &rg);
		sl = resil_comp_state(&r->seg, rl, RESIL_C_LIMIT);
		sg = resil_comp_state(&r->seg, rg, RESIL_C_LIMIT);
		entries =
		    (rl->conf.limit.keys / 2 ? rl->conf.limit.keys / 2 : 1) * RESIL_LIMIT_BUCKET;
		for (int step = 0; step < 6000; step++) {
			uint64_t z = resil_splitmix64(&seed);
			uint32_t op = (uint32_t)(z % 8);

			if (op < 4 && n < HOLD) {
				/* half the calls on 4 hot keys: limited ones */
				uint32_t key = (uint32_t)((z >> 8) % ((z >> 50) % 2 ? KEYS : 4));
				struct resil_req req = {.key = &key,
							.key_len = sizeof(key),
							.permits = 1 + (int)((z >> 24) % 3)};
				const struct resil_req *rq = (z >> 40) % 16 ? &req : NULL;
				int vl = resil_acquire_ex(l, rq, &pl[n]);
				int vg = resil_acquire_ex(g, rq, &pg[n]);

				assert_int_equal(vl, vg);
				assert_int_equal(resil_permit_wait_ns(&pl[n]),
						 resil_permit_wait_ns(&pg[n]));
				assert_int_equal(atomic_load(&l->b)->lim_way, 2);
				admitted += vl == RESIL_ADMIT;
				n += vl == RESIL_ADMIT;
			} else if (op < 6 && n > 0) {
				twin_release(l, g, pl, pg, &n, z);
			} else {
				manual_ns += (int64_t)((z >> 20) % 40) * 1000000LL;
			}
			assert_int_equal(atomic_load(&sl->word), atomic_load(&sg->word));
			assert_int_equal(atomic_load(&sl->used), atomic_load(&sg->used));
			for (uint32_t i = 0; i < entries; i++) {
				const struct resil_limit_entry *el =
				    (const struct resil_limit_entry *)(const void *)sl->data + i;
				const struct resil_limit_entry *eg =
				    (const struct resil_limit_entry *)(const void *)sg->data + i;

				assert_int_equal(atomic_load(&el->fp), atomic_load(&eg->fp));
				assert_int_equal(atomic_load(&el->st), atomic_load(&eg->st));
			}
		}
		twin_release_all(l, g, pl, pg, n);
		for (size_t j = 0; j < RESIL_ARRAY_SIZE(stats); j++)
			assert_int_equal(count(rl, stats[j]), count(rg, stats[j]));
		assert_int_equal(atomic_load(&sl->full_rejects), atomic_load(&sg->full_rejects));
		assert_int_equal(atomic_load(&sl->full_admits), atomic_load(&sg->full_admits));
		assert_int_equal(atomic_load(&sl->dry_run_rejects),
				 atomic_load(&sg->dry_run_rejects));
		full_rejects += atomic_load(&sl->full_rejects);
		full_admits += atomic_load(&sl->full_admits);
		/* the walk admitted, limited and evicted */
		assert_true(admitted > 100);
		assert_true(count(rl, RESIL_STAT_EVICTIONS) > 0);
		if (!rl->conf.limit.dry_run)
			assert_true(count(rl, RESIL_STAT_REJ_LIMITED) > 0);
		assert_int_equal(resil_delete(r, "kwl"), 0);
		assert_int_equal(resil_delete(r, "kwg"), 0);
	}
	/* and met the full table both ways */
	assert_true(full_rejects > 0);
	assert_true(full_admits > 0);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

static int64_t now_ns = RESIL_NS_PER_S;

static int64_t manual_clock(void *ctx)
{
	(void)ctx;
	return now_ns;
}

/* The counters alone and a breaker without a slow-call rate are lean: a
 * CLOSED acquire, an OPEN or FORCED_OPEN rejection and a count window's
 * success need no context; failures, the end of the wait, HALF_OPEN and
 * its probes take the general path, from the same binding, and every
 * outcome and rejection is counted once. */
static void test_lean_breaker(void **state)
{
	static const char *const lean[] = {
	    "policy.scope = fleet",
	    "breaker.window = count:10; breaker.min_calls = 5; breaker.wait = 1s;"
	    " breaker.half_open_calls = 1",
	    "breaker.window = consecutive:5; breaker.wait = 1s",
	};
	resil_policy_t *p;
	resil_permit_t a;
	const struct resil_rec *rec;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual_clock, NULL), 0);
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(lean); i++) {
		assert_int_equal(resil_define(r, "lb", lean[i]), 0);
		assert_int_equal(resil_policy(r, "lb", &p), 0);
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT); /* binds */
		resil_release(p, &a, RESIL_SUCCESS);
		assert_int_equal(test_branch_of(p), i == 0 ? 3 : 4);
	}
	/* slow-call rates stamp a time: general */
	assert_int_equal(
	    resil_define(r, "slow", "breaker.slow_call = 1s; breaker.slow_call_rate = 50"), 0);
	assert_int_equal(resil_policy(r, "slow", &p), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(test_branch_of(p), 0);

	assert_int_equal(resil_define(r, "cb", lean[1]), 0);
	assert_int_equal(resil_policy(r, "cb", &p), 0);
	rec = test_rec_of(r, "cb");
	for (int i = 0; i < 7; i++) {
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		resil_release(p, &a, RESIL_SUCCESS);
	}
	assert_int_equal(test_branch_of(p), 4);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 7);
	/* 5 failures after 7 successes: 5 of the last 10 failed (50%) */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		resil_release(p, &a, RESIL_FAILURE);
	}
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 5);
	/* OPEN before its wait: lean rejections, each counted */
	for (int i = 0; i < 5; i++)
		assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
	assert_int_equal(count(rec, RESIL_STAT_REJ_OPEN), 5);
	/* after the wait: the general path makes the probe */
	now_ns += 2 * RESIL_NS_PER_S;
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_HALF_OPEN);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 8);
	/* a fresh window: successes again lean, counted */
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 9);
	/* FORCED_OPEN: rejected without a clock, counted */
	assert_int_equal(resil_force_state(r, "cb", RESIL_STATE_FORCED_OPEN), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
	assert_int_equal(count(rec, RESIL_STAT_REJ_OPEN), 6);
	assert_int_equal(resil_force_state(r, "cb", RESIL_STATE_CLOSED), 0);
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_IGNORED);
	assert_int_equal(count(rec, RESIL_STAT_IGNORED), 1);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

/* A lean OPEN rejection judges the wait of the breaker's streak, taken
 * from the binding (resil_breaker_lean_wait) and the word: a repeated open
 * waits longer (multiplier 2: 1 s, 2 s, 4 s, capped at 3 s), a wait under
 * 100 ms is the general path's, and each rejection is counted once. A
 * rejected permit says no wait and holds nothing, whatever the caller's
 * memory held before: its release counts nothing. */
static void test_lean_open_wait(void **state)
{
	static const int64_t waits_ms[] = {1000, 2000, 3000, 3000};
	const int64_t ms = RESIL_NS_PER_MS;
	resil_policy_t *p;
	resil_permit_t a;
	const struct resil_rec *rec;
	uint64_t rej = 0;

	(void)state;
	assert_int_equal(resil_set_clock(r, manual_clock, NULL), 0);
	assert_int_equal(resil_define(r, "ow",
				      "breaker.window = consecutive:1; breaker.wait = 1s;"
				      " breaker.wait_multiplier = 2; breaker.wait_max = 3s;"
				      " breaker.half_open_calls = 1"),
			 0);
	assert_int_equal(resil_policy(r, "ow", &p), 0);
	rec = test_rec_of(r, "ow");
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	assert_int_equal(test_branch_of(p), 4);
	resil_release(p, &a, RESIL_FAILURE);
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(waits_ms); i++) {
		int64_t opened = now_ns;

		assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
		memset(&a, 0xa5, sizeof(a));
		assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
		/* the Retry-After: the whole streak's wait, at its start */
		assert_int_equal(resil_permit_wait_ns(&a), waits_ms[i] * ms);
		resil_release(p, &a, RESIL_SUCCESS); /* holds nothing */
		assert_int_equal(count(rec, RESIL_STAT_SUCCESS), 0);
		/* the streak's wait less 1 ms: still OPEN (the previous
		 * streak's wait is over by then from the second open on) */
		now_ns = opened + (waits_ms[i] - 1) * ms;
		assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
		rej += 2;
		assert_int_equal(count(rec, RESIL_STAT_REJ_OPEN), rej);
		/* over (since is rounded up to the ms): the probe, which fails */
		now_ns = opened + (waits_ms[i] + 2) * ms;
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		assert_int_equal(resil_policy_state(p), RESIL_STATE_HALF_OPEN);
		resil_release(p, &a, RESIL_FAILURE);
	}
	assert_int_equal(count(rec, RESIL_STAT_FAILURE), 1 + RESIL_ARRAY_SIZE(waits_ms));

	/* a wait under 100 ms: the general path judges it, with the same
	 * verdicts and counts */
	assert_int_equal(resil_define(r, "short",
				      "breaker.window = consecutive:1; breaker.wait = 50ms;"
				      " breaker.half_open_calls = 1"),
			 0);
	assert_int_equal(resil_policy(r, "short", &p), 0);
	rec = test_rec_of(r, "short");
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_FAILURE);
	assert_int_equal(test_branch_of(p), 4);
	now_ns += 49 * ms;
	assert_int_equal(resil_acquire(p, &a), RESIL_REJECT_OPEN);
	assert_int_equal(count(rec, RESIL_STAT_REJ_OPEN), 1);
	now_ns += 2 * ms;
	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	resil_release(p, &a, RESIL_SUCCESS);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
}

/* The window's offset in the breaker's block is taken from the read-only
 * configuration once, when a handle binds (the lean word's high half),
 * and each re-bind takes it again: a policy redefined with more probe
 * slots (the window further into the block) and another window size gets
 * its records, lean successes and general failures alike, in the new
 * block's window, where every other reader (resil_breaker_win_off, the
 * daemon's checks) looks for them. Every kind of binding with a breaker:
 * a lean breaker, a lean stack (with a bulkhead) and a general one (with
 * a histogram too). */
static void test_rebind_window_offset(void **state)
{
	static const char *const extra[] = {"", "; bulkhead.max = 4",
					    "; bulkhead.max = 4; histogram = on"};
	static const uint32_t kind[] = {4, 5, 0};
	resil_policy_t *p;
	resil_permit_t a;

	(void)state;
	for (size_t k = 0; k < RESIL_ARRAY_SIZE(extra); k++) {
		char name[16], def[256];
		const struct resil_rec *rec;
		uint32_t off_before = 0;

		snprintf(name, sizeof(name), "wo%zu", k);
		for (int round = 0; round < 2; round++) {
			uint32_t n = round ? 50 : 100, off, fail = 0, ok = 0;
			const ra32 *slots;
			void *st;

			snprintf(
			    def, sizeof(def),
			    "breaker.window = count:%u; breaker.min_calls = %u;"
			    " breaker.half_open_calls = %u; breaker.half_open_concurrent = %u%s",
			    n, n, round ? 20 : 1, round ? 20 : 1, extra[k]);
			assert_int_equal(resil_define(r, name, def), 0);
			if (round == 0)
				assert_int_equal(resil_policy(r, name, &p), 0);
			/* 3 failures (general path) and 7 successes (lean, or
			 * through the context), fewer than min_calls: CLOSED */
			for (int i = 0; i < 10; i++) {
				assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
				resil_release(p, &a, i < 3 ? RESIL_FAILURE : RESIL_SUCCESS);
			}
			rec = test_rec_of(r, name);
			assert_non_null(rec);
			off = resil_breaker_win_off(&rec->conf.breaker);
			/* the handle re-bound to the new record, its offset with it */
			assert_int_equal(atomic_load(&p->b)->bk_off, off);
			assert_int_equal(test_branch_of(p), kind[k]);
			if (round)
				assert_true((off & ~1u) > (off_before & ~1u));
			off_before = off;
			st = resil_comp_state(&r->seg, rec, RESIL_C_BREAKER);
			slots = (const ra32 *)((const char *)st + (off & ~1u));
			for (uint32_t i = 0; i < n; i++) {
				uint32_t v = ld_relaxed((ra32 *)&slots[i]);

				fail += v == RESIL_BK_FAIL;
				ok += v == RESIL_BK_OK;
				/* one thread, a fresh block: record numbers 0..9 in
				 * order, so the first ten slots in order */
				if (i < 10)
					assert_int_equal(v, i < 3 ? RESIL_BK_FAIL : RESIL_BK_OK);
			}
			/* a fresh window each round (another size: not carried) */
			assert_int_equal(fail, 3);
			assert_int_equal(ok, 7);
			assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lean_counts_as_general, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_only_when_alone, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_bulkhead_hint, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_bulkhead_wait, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_bulkhead_partition, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_bulkhead_packed, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_permit_outlives_rebind, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_limit, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_stack, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_twin, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_bulkhead_global_twin, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_keyed, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_keyed_twin, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_breaker, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_lean_open_wait, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_rebind_window_offset, open_emb, close_emb),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

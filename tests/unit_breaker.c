/* SPDX-License-Identifier: MIT */
/*
 * unit_breaker.c - the circuit breaker on a plain aligned_alloc region and
 * a manual clock: every transition and key, generations, forced states,
 * wait growth, the min_calls rule, half-open concurrency and totals,
 * half_open_max_wait, outcome mapping with overrides, carry over, reclaim
 * of probes, counter repair, and the count window's counters against its
 * slots under threads. Transitions are read back from a real event ring.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "resil.h"
#include "breaker.h"
#include "conf.h"
#include "seg.h"

#define S RESIL_NS_PER_S

static int64_t clock_reads;
static int64_t manual_clock(void *ctx)
{
	clock_reads++;
	return *(int64_t *)ctx;
}

static int64_t thread_clock(void *ctx)
{
	return *(int64_t *)ctx;
}

struct t {
	struct resil_breaker_conf conf;
	struct resil_breaker_state *st;
	struct resil_seg seg;
	struct resil_ctx x;
	int64_t now;
	uint64_t ev_next;
};

static struct t *t_new(const char *cfg)
{
	struct t *t = calloc(1, sizeof(*t));
	struct resil_seg_params sp = {
	    .slots = 16, .clients = 16, .events = 1024, .state_size = 1 << 20};
	struct resil_conf c;
	char err[256] = "";
	size_t sz;

	assert_non_null(t);
	resil_conf_init(&c);
	if (cfg) {
		int r = resil_conf_parse(&c, cfg, 1, err, sizeof(err));

		if (r)
			fprintf(stderr, "parse '%s': %s\n", cfg, err);
		assert_int_equal(r, 0);
	}
	c.breaker.on = 1;
	t->conf = c.breaker;
	sz = resil_breaker_state_size(&t->conf);
	t->st = aligned_alloc(RESIL_HOT_ALIGN, resil_align_up(sz, RESIL_HOT_ALIGN));
	assert_non_null(t->st);
	memset(t->st, 0xa5, sz); /* init must clear it */
	t->now = 1000 * S;
	resil_breaker_state_init(t->st, &t->conf, t->now);
	assert_int_equal(resil_seg_create(&t->seg, &sp), 0);
	t->x.seg = &t->seg;
	t->x.rec = NULL;
	t->x.clock.fn = manual_clock;
	t->x.clock.ctx = &t->now;
	t->x.client_id = 1;
	return t;
}

static void t_free(struct t *t)
{
	resil_seg_unmap(&t->seg);
	free(t->st);
	free(t);
}

static void t_advance(struct t *t, int64_t ns)
{
	t->now += ns;
}

static int t_acq(struct t *t, struct resil_permit_priv *pm)
{
	int r;

	memset(pm, 0, sizeof(*pm));
	t->x.now = 0;
	r = resil_breaker_check(&t->x, &t->conf, t->st, pm);
	if (r)
		return r;
	r = resil_breaker_acquire(&t->x, &t->conf, t->st, pm);
	if (r == 0)
		pm->flags |= RESIL_PERMIT_HELD;
	return r;
}

static void t_rel(struct t *t, struct resil_permit_priv *pm, int outcome)
{
	t->x.now = 0;
	resil_breaker_release(&t->x, &t->conf, t->st, pm, outcome);
	pm->flags = 0;
}

/* One whole call: acquire, take dur_ns, release. The verdict. */
static int t_call(struct t *t, int outcome, int64_t dur_ns)
{
	struct resil_permit_priv pm;
	int r = t_acq(t, &pm);

	if (r)
		return r;
	t_advance(t, dur_ns);
	t_rel(t, &pm, outcome);
	return 0;
}

static int t_state(struct t *t)
{
	return resil_breaker_state(t->st);
}

/* The next transition event; false when none. */
static bool t_ev(struct t *t, uint32_t *from, uint32_t *to, uint32_t *why, uint64_t *value)
{
	struct resil_event e;

	if (resil_event_read(&t->seg, t->ev_next, &e) < 0)
		return false;
	t->ev_next++;
	assert_int_equal(e.type, RESIL_EV_TRANSITION);
	*from = e.a;
	*to = e.b;
	*why = e.reason;
	if (value)
		*value = e.value;
	return true;
}

static void expect_ev(struct t *t, int from, int to, uint32_t why)
{
	uint32_t f, o, w;

	assert_true(t_ev(t, &f, &o, &w, NULL));
	assert_int_equal(f, from);
	assert_int_equal(o, to);
	assert_int_equal(w, why);
}

static void expect_no_ev(struct t *t)
{
	uint32_t f, o, w;

	assert_false(t_ev(t, &f, &o, &w, NULL));
}

static void counts(struct t *t, struct resil_breaker_counts *k)
{
	resil_breaker_unpack(atomic_load(&t->st->counters), k);
}

/* The histogram of the count window's slots. */
static void histogram(struct t *t, struct resil_breaker_counts *k)
{
	ra32 *slots = (ra32 *)((char *)t->st + t->st->win_off);

	memset(k, 0, sizeof(*k));
	for (uint32_t i = 0; i < t->st->size; i++) {
		uint32_t v = atomic_load(&slots[i]);

		k->calls += v & 1;
		k->failures += (v >> 1) & 1;
		k->slow += (v >> 2) & 1;
	}
}

/* ---- configuration ---- */

static void test_defaults(void **unused)
{
	struct resil_breaker_conf c;

	resil_breaker_conf_defaults(&c);
	assert_int_equal(c.on, 0);
	assert_int_equal(c.window_kind, RESIL_WINDOW_COUNT);
	assert_int_equal(c.window_size, 100);
	assert_int_equal(c.buckets, 10);
	assert_int_equal(c.failure_rate_bp, 5000);
	assert_int_equal(c.slow_rate_bp, 10000);
	assert_int_equal(c.slow_call_ns, 60 * S);
	assert_int_equal(c.min_calls, 100);
	assert_int_equal(c.wait_ns, 60 * S);
	assert_int_equal(c.wait_multiplier_milli, 1000);
	assert_int_equal(c.wait_max_ns, 0); /* follows wait */
	assert_int_equal(c.half_open_calls, 10);
	assert_int_equal(c.half_open_concurrent, 0); /* follows half_open_calls */
	assert_int_equal(c.half_open_max_wait_ns, 60 * S);
	assert_int_equal(c.nrecord, 0);
}

static void test_keys(void **unused)
{
	static const struct {
		const char *key, *value;
	} ok[] = {
	    {"breaker.window", "count:50"},
	    {"breaker.window", "time:30s"},
	    {"breaker.window", "consecutive:5"},
	    {"breaker.buckets", "20"},
	    {"breaker.failure_rate", "25"},
	    {"breaker.slow_call_rate", "12.5"},
	    {"breaker.slow_call", "250ms"},
	    {"breaker.min_calls", "7"},
	    {"breaker.wait", "5s"},
	    {"breaker.wait_multiplier", "1.5"},
	    {"breaker.wait_max", "2m"},
	    {"breaker.half_open_calls", "3"},
	    {"breaker.half_open_concurrent", "2"},
	    {"breaker.half_open_max_wait", "10s"},
	    {"breaker.record", "http:404=failure"},
	};
	static const struct {
		const char *key, *value;
	} bad[] = {
	    {"breaker.window", "count:0"},
	    {"breaker.window", "count:2000000"},
	    {"breaker.window", "time:0"},
	    {"breaker.window", "sliding:5"},
	    {"breaker.window", "consecutive:x"},
	    {"breaker.buckets", "0"},
	    {"breaker.failure_rate", "101"},
	    {"breaker.failure_rate", "0"},
	    {"breaker.slow_call", "fast"},
	    {"breaker.min_calls", "0"},
	    {"breaker.wait", "-1s"},
	    {"breaker.wait_multiplier", "0.5"},
	    {"breaker.half_open_calls", "0"},
	    {"breaker.half_open_calls", "10001"},
	    {"breaker.half_open_concurrent", "2000"},
	    {"breaker.record", "http:404"},
	    {"breaker.record", "ftp:404=failure"},
	    {"breaker.record", "http:40x=failure"},
	    {"breaker.record", "http:404=maybe"},
	    {"breaker.record", "errno:EWHAT=failure"},
	};
	struct resil_breaker_conf c;
	char err[256];

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(ok); i++) {
		resil_breaker_conf_defaults(&c);
		err[0] = '\0';
		assert_int_equal(
		    resil_breaker_conf_set(&c, ok[i].key, ok[i].value, err, sizeof(err)), 0);
		assert_int_equal(c.on, 1);
	}
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(bad); i++) {
		resil_breaker_conf_defaults(&c);
		err[0] = '\0';
		assert_int_equal(
		    resil_breaker_conf_set(&c, bad[i].key, bad[i].value, err, sizeof(err)),
		    -EINVAL);
		assert_non_null(strstr(err, bad[i].key));
		assert_int_equal(c.on, 0);
	}
	resil_breaker_conf_defaults(&c);
	assert_int_equal(resil_breaker_conf_set(&c, "breaker.nope", "1", err, sizeof(err)),
			 -ENOENT);

	resil_breaker_conf_defaults(&c);
	assert_int_equal(resil_breaker_conf_set(&c, "breaker.window", "time:30s", err, sizeof(err)),
			 0);
	assert_int_equal(c.window_kind, RESIL_WINDOW_TIME);
	assert_int_equal(c.window_ns, 30 * S);
	assert_int_equal(
	    resil_breaker_conf_set(&c, "breaker.slow_call_rate", "12.5", err, sizeof(err)), 0);
	assert_int_equal(c.slow_rate_bp, 1250);
	assert_int_equal(
	    resil_breaker_conf_set(&c, "breaker.wait_multiplier", "1.5", err, sizeof(err)), 0);
	assert_int_equal(c.wait_multiplier_milli, 1500);
}

/* format then parse gives the same configuration, byte for byte */
static void test_format_round_trip(void **unused)
{
	static const char *cfgs[] = {
	    "breaker.window = count:50",
	    "breaker.window = time:30s; breaker.buckets = 15; breaker.failure_rate = 12.5;"
	    "breaker.slow_call_rate = 80; breaker.slow_call = 250ms; breaker.min_calls = 7;"
	    "breaker.wait = 5s; breaker.wait_multiplier = 1.5; breaker.wait_max = 2m;"
	    "breaker.half_open_calls = 3; breaker.half_open_concurrent = 2;"
	    "breaker.half_open_max_wait = 0",
	    "breaker.window = consecutive:4;"
	    "breaker.record = http:503=ignored http:5xx,408,429=failure errno:ECONNRESET=ignored",
	};
	char buf[2048], err[256];

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(cfgs); i++) {
		struct resil_conf a, b;
		size_t n;

		resil_conf_init(&a);
		assert_int_equal(resil_conf_parse(&a, cfgs[i], 1, err, sizeof(err)), 0);
		n = resil_breaker_conf_format(&a.breaker, buf, sizeof(buf));
		assert_true(n > 0 && n < sizeof(buf));
		assert_int_equal(strlen(buf), n);
		/* a short buffer still reports the whole length */
		assert_int_equal(resil_breaker_conf_format(&a.breaker, NULL, 0), n);
		resil_conf_init(&b);
		if (resil_conf_parse(&b, buf, 1, err, sizeof(err)))
			fprintf(stderr, "%s\n%s\n", buf, err);
		assert_int_equal(resil_conf_parse(&b, buf, 1, err, sizeof(err)), 0);
		assert_memory_equal(&a.breaker, &b.breaker, sizeof(a.breaker));
	}
}

static void test_names(void **unused)
{
	assert_string_equal(resil_breaker_state_name(RESIL_STATE_HALF_OPEN), "half-open");
	assert_string_equal(resil_breaker_state_name(RESIL_STATE_METRICS_ONLY), "metrics-only");
	assert_string_equal(resil_breaker_state_name(99), "unknown");
	assert_string_equal(resil_breaker_why(RESIL_WHY_PROBE_TIMEOUT), "probe timed out");
	assert_string_equal(resil_breaker_why(RESIL_WHY_CONSECUTIVE), "consecutive failures");
	assert_string_equal(resil_breaker_why(1000), "unknown");
}

/* ---- consecutive window and the state machine ---- */

static void test_consecutive(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:3; breaker.wait = 10s;"
			    "breaker.half_open_calls = 2");
	struct resil_permit_priv p1, p2, p3;
	uint32_t f, o, w;
	uint64_t v;

	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0); /* resets */
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_IGNORED, 0), 0); /* counts nothing */
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	expect_no_ev(t);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	assert_true(t_ev(t, &f, &o, &w, &v));
	assert_int_equal(f, RESIL_STATE_CLOSED);
	assert_int_equal(o, RESIL_STATE_OPEN);
	assert_int_equal(w, RESIL_WHY_CONSECUTIVE);
	assert_int_equal(v, 3);

	/* OPEN rejects until opened + wait, to the nanosecond */
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), RESIL_REJECT_OPEN);
	t_advance(t, 10 * S - 1);
	assert_int_equal(t_acq(t, &p1), RESIL_REJECT_OPEN);
	t_advance(t, 1);
	/* the first acquire at opened + wait is a probe */
	assert_int_equal(t_acq(t, &p1), 0);
	assert_true(p1.probe_idx != 0);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	expect_ev(t, RESIL_STATE_OPEN, RESIL_STATE_HALF_OPEN, RESIL_WHY_WAIT_OVER);
	assert_int_equal(t_acq(t, &p2), 0);
	assert_int_equal(t_acq(t, &p3), RESIL_REJECT_OPEN); /* 2 probes in total */
	/* one failed probe re-opens at once */
	t_rel(t, &p1, RESIL_FAILURE);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_ev(t, RESIL_STATE_HALF_OPEN, RESIL_STATE_OPEN, RESIL_WHY_PROBE_FAILED);
	/* the other probe's answer is of an older gen: decides nothing */
	t_rel(t, &p2, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_no_ev(t);

	/* N successful probes close, with a fresh window */
	t_advance(t, 10 * S);
	assert_int_equal(t_acq(t, &p1), 0);
	assert_int_equal(t_acq(t, &p2), 0);
	expect_ev(t, RESIL_STATE_OPEN, RESIL_STATE_HALF_OPEN, RESIL_WHY_WAIT_OVER);
	t_rel(t, &p1, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_rel(t, &p2, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	expect_ev(t, RESIL_STATE_HALF_OPEN, RESIL_STATE_CLOSED, RESIL_WHY_PROBES_PASSED);
	/* the failures before do not count: it takes 3 new ones */
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_CONSECUTIVE);
	expect_no_ev(t);
	t_free(t);
}

/* The wait grows by the multiplier on repeated opens, up to wait_max, and
 * starts over after a close. */
static void test_wait_growth(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.wait_multiplier = 2; breaker.wait_max = 5s;"
			    "breaker.half_open_calls = 1");
	static const int64_t waits[] = {1, 2, 4, 5, 5};

	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(waits); i++) {
		assert_int_equal(t_state(t), RESIL_STATE_OPEN);
		t_advance(t, waits[i] * S - 1);
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), RESIL_REJECT_OPEN);
		t_advance(t, 1);
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* the probe fails */
	}
	t_advance(t, 5 * S);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	t_advance(t, 1 * S);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0); /* back to the first wait */
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_free(t);
}

/* wait_max left alone follows wait: no growth */
static void test_wait_max_follows_wait(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 3s;"
			    "breaker.wait_multiplier = 2; breaker.half_open_calls = 1");

	for (int i = 0; i < 3; i++) {
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
		assert_int_equal(t_state(t), RESIL_STATE_OPEN);
		t_advance(t, 3 * S);
	}
	t_free(t);
}

/* ---- count window ---- */

/* The call that completes the minimum opens at once, even a success. */
static void test_min_calls(void **unused)
{
	struct t *t = t_new("breaker.window = count:10; breaker.min_calls = 5;"
			    "breaker.failure_rate = 50");

	/* 2 failures in 5 calls: 40% */
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_CLOSED);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_CLOSED, RESIL_WHY_RESET);

	/* 3 failures in 4 calls: 75% but under the minimum */
	for (int i = 0; i < 3; i++)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	expect_no_ev(t);
	/* the 5th call, a success, completes the minimum at 60% */
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	{
		uint32_t f, o, w;
		uint64_t v;

		assert_true(t_ev(t, &f, &o, &w, &v));
		assert_int_equal(w, RESIL_WHY_FAILURE_RATE);
		assert_int_equal(v, 6000);
	}
	t_free(t);
}

/* The window slides: only the last N calls count; counters = slots. */
static void test_count_slides(void **unused)
{
	struct t *t = t_new("breaker.window = count:4; breaker.min_calls = 4;"
			    "breaker.failure_rate = 50");
	struct resil_breaker_counts k, h;

	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0); /* 25% */
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);	  /* F slides out */
	counts(t, &k);
	assert_int_equal(k.calls, 4);
	assert_int_equal(k.failures, 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* 25% */
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	counts(t, &k);
	histogram(t, &h);
	assert_memory_equal(&k, &h, sizeof(k));
	assert_int_equal(k.failures, 1);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* 50% */
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_FAILURE_RATE);
	/* a count window's minimum is at most its size */
	t_free(t);
	t = t_new("breaker.window = count:4; breaker.failure_rate = 50"); /* min_calls 100 */
	for (int i = 0; i < 2; i++)
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_free(t);
}

static void test_slow_rate(void **unused)
{
	struct t *t = t_new("breaker.window = count:10; breaker.min_calls = 4;"
			    "breaker.slow_call = 1s; breaker.slow_call_rate = 50");

	assert_int_equal(t_call(t, RESIL_SUCCESS, 10 * RESIL_NS_PER_MS), 0);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 1 * S), 0); /* slow: at the threshold */
	assert_int_equal(t_call(t, RESIL_SUCCESS, 999 * RESIL_NS_PER_MS), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	assert_int_equal(t_call(t, RESIL_FAILURE, 2 * S), 0); /* slow failure: 2/4 slow */
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	{
		uint32_t f, o, w;
		uint64_t v;

		assert_true(t_ev(t, &f, &o, &w, &v));
		assert_int_equal(w, RESIL_WHY_SLOW_RATE);
		assert_int_equal(v, 5000);
	}
	t_free(t);
}

/* A fast success in CLOSED with no slow-call threshold reads no clock;
 * with one, the permit is stamped and the clock read. */
static void test_no_clock_fast_path(void **unused)
{
	struct t *t = t_new("breaker.window = count:100; breaker.min_calls = 10");
	struct resil_permit_priv pm;

	for (int i = 0; i < 200; i++)
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	clock_reads = 0;
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(t_acq(t, &pm), 0);
		assert_false(pm.flags & RESIL_PERMIT_TIMED);
		t_rel(t, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(clock_reads, 0);
	t_free(t);

	t = t_new("breaker.window = count:100; breaker.slow_call_rate = 90");
	clock_reads = 0;
	assert_int_equal(t_acq(t, &pm), 0);
	assert_true(pm.flags & RESIL_PERMIT_TIMED);
	assert_int_equal(pm.start_ns, t->now);
	t_rel(t, &pm, RESIL_SUCCESS);
	assert_int_equal(clock_reads, 2);
	t_free(t);
}

/* ---- time window ---- */

static void test_time_window(void **unused)
{
	struct t *t = t_new("breaker.window = time:10s; breaker.buckets = 10;"
			    "breaker.min_calls = 4; breaker.failure_rate = 50");

	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	t_advance(t, 11 * S); /* both failures age out */
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED); /* 4 calls at 50% had they stayed */
	t_advance(t, 3 * S);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* 1/3 */
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* 2/4 */
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_FAILURE_RATE);
	t_free(t);

	/* the window keeps the last T: calls 9 s ago still count */
	t = t_new("breaker.window = time:10s; breaker.min_calls = 2; breaker.failure_rate = 100");
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	t_advance(t, 8 * S);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_free(t);
}

/* A busy time window: millions of calls in one span, counts exact */
static void test_time_window_busy(void **unused)
{
	struct t *t = t_new("breaker.window = time:10s; breaker.min_calls = 1;"
			    "breaker.failure_rate = 40");
	struct resil_breaker_bucket *bk;
	int64_t calls = 0, bad = 0;

	for (int i = 0; i < 3000000; i++)
		assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	for (int i = 0; i < 1500000; i++) /* 33%: under 40% */
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	bk = (struct resil_breaker_bucket *)((char *)t->st + t->st->win_off);
	for (uint32_t i = 0; i < t->st->size; i++) {
		calls += (int64_t)atomic_load(&bk[i].calls);
		bad += (int64_t)(atomic_load(&bk[i].bad) >> 32);
	}
	assert_int_equal(calls, 4500000);
	assert_int_equal(bad, 1500000);
	for (int i = 0; i < 1000000 && t_state(t) == RESIL_STATE_CLOSED; i++)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN); /* 40% reached */
	t_free(t);
}

/* A time window whose buckets a client set to counts near INT64_MAX:
 * the sums and the rate's products stay exact (128 bits, clamped), the
 * breaker sees a failure rate near 0 and stays CLOSED (with 64-bit
 * products, 5000 x INT64_MAX wrapped to -5000 and opened it; UBSan
 * stops there). */
static void test_time_window_huge_counts(void **unused)
{
	struct t *t = t_new("breaker.window = time:10s; breaker.min_calls = 1;"
			    "breaker.failure_rate = 50");
	struct resil_breaker_bucket *bk;

	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	bk = (struct resil_breaker_bucket *)((char *)t->st + t->st->win_off);
	/* the bucket of the span now: the one the success counted in */
	for (uint32_t i = 0; i < t->st->size; i++)
		if (atomic_load(&bk[i].epoch) != 0)
			atomic_store(&bk[i].calls, (uint64_t)INT64_MAX - 7);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	/* all ones: past INT64_MAX as a signed word */
	for (uint32_t i = 0; i < t->st->size; i++)
		atomic_store(&bk[i].calls, UINT64_MAX);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_free(t);
}

/* ---- half-open ---- */

static void open_it(struct t *t)
{
	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_CLOSED), 0);
	while (t_state(t) == RESIL_STATE_CLOSED)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_advance(t, t->conf.wait_ns);
}

static void test_half_open_limits(void **unused)
{
	struct t *t = t_new("breaker.window = count:4; breaker.min_calls = 1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 4; breaker.half_open_concurrent = 2");
	struct resil_permit_priv p[6];

	open_it(t);
	assert_int_equal(t_acq(t, &p[0]), 0);
	assert_int_equal(t_acq(t, &p[1]), 0);
	assert_int_equal(t_acq(t, &p[2]), RESIL_REJECT_OPEN); /* 2 at once */
	/* rejected by the read-only check already: nothing else gets spent */
	memset(&p[2], 0, sizeof(p[2]));
	assert_int_equal(resil_breaker_check(&t->x, &t->conf, t->st, &p[2]), RESIL_REJECT_OPEN);
	t_rel(t, &p[0], RESIL_SUCCESS);
	assert_int_equal(t_acq(t, &p[2]), 0);
	/* undo (a later component rejected) gives the probe back */
	resil_breaker_undo(&t->x, &t->conf, t->st, &p[2]);
	assert_int_equal(t_acq(t, &p[2]), 0);
	/* so does an ignored outcome */
	t_rel(t, &p[2], RESIL_IGNORED);
	assert_int_equal(t_acq(t, &p[2]), 0);
	t_rel(t, &p[1], RESIL_SUCCESS);
	assert_int_equal(t_acq(t, &p[3]), 0);
	/* 4 in total: answered 2 + held 2 */
	t_rel(t, &p[2], RESIL_SUCCESS);
	assert_int_equal(t_acq(t, &p[4]), RESIL_REJECT_OPEN);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_rel(t, &p[3], RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_free(t);
}

/* After all probes: OPEN at or over the failure rate, else CLOSED */
static void test_half_open_rates(void **unused)
{
	struct t *t = t_new("breaker.window = count:4; breaker.min_calls = 1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 4; breaker.failure_rate = 50");
	struct resil_permit_priv p[4];

	open_it(t);
	for (int i = 0; i < 4; i++)
		assert_int_equal(t_acq(t, &p[i]), 0);
	t_rel(t, &p[0], RESIL_FAILURE);
	t_rel(t, &p[1], RESIL_SUCCESS);
	t_rel(t, &p[2], RESIL_FAILURE);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN); /* waits for all */
	t_rel(t, &p[3], RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t->ev_next = atomic_load(&t->seg.st->event_head) - 1;
	expect_ev(t, RESIL_STATE_HALF_OPEN, RESIL_STATE_OPEN, RESIL_WHY_FAILURE_RATE);

	t_advance(t, 1 * S);
	for (int i = 0; i < 4; i++)
		assert_int_equal(t_acq(t, &p[i]), 0);
	t_rel(t, &p[0], RESIL_FAILURE);
	for (int i = 1; i < 4; i++)
		t_rel(t, &p[i], RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	{
		struct resil_breaker_counts k;

		counts(t, &k); /* fresh window */
		assert_int_equal(k.calls, 0);
	}
	t_free(t);
}

/* A probe whose answer never comes does not hold HALF_OPEN: after
 * half_open_max_wait the breaker goes back to OPEN. */
static void test_half_open_max_wait(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 2s;"
			    "breaker.half_open_calls = 1; breaker.half_open_max_wait = 5s");
	struct resil_permit_priv hung, p;

	open_it(t);
	assert_int_equal(t_acq(t, &hung), 0);
	t_advance(t, 5 * S - 1);
	assert_int_equal(t_acq(t, &p), RESIL_REJECT_OPEN);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_advance(t, 1);
	assert_int_equal(t_acq(t, &p), RESIL_REJECT_OPEN);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t->ev_next = atomic_load(&t->seg.st->event_head) - 1;
	expect_ev(t, RESIL_STATE_HALF_OPEN, RESIL_STATE_OPEN, RESIL_WHY_PROBE_TIMEOUT);
	/* its late answer is of an older gen */
	t_rel(t, &hung, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_no_ev(t);

	/* the same from the daemon's tick, with no acquire at all */
	t_advance(t, 2 * S);
	assert_int_equal(t_acq(t, &hung), 0);
	expect_ev(t, RESIL_STATE_OPEN, RESIL_STATE_HALF_OPEN, RESIL_WHY_WAIT_OVER);
	t_advance(t, 4 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_advance(t, 1 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	expect_ev(t, RESIL_STATE_HALF_OPEN, RESIL_STATE_OPEN, RESIL_WHY_PROBE_TIMEOUT);
	t_free(t);
}

/* A result from an older generation decides no probe and enters no window */
static void test_generations(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 1");
	struct resil_permit_priv old, probe;

	assert_int_equal(t_acq(t, &old), 0); /* granted in CLOSED */
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_advance(t, 1 * S);
	assert_int_equal(t_acq(t, &probe), 0);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	assert_int_not_equal(old.breaker_gen, probe.breaker_gen);
	t_rel(t, &old, RESIL_FAILURE); /* would re-open if it counted */
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_rel(t, &probe, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	/* and not in the fresh window either */
	assert_int_equal(t_acq(t, &old), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* re-opens: new gen */
	t_advance(t, 1 * S);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0); /* closes again */
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_rel(t, &old, RESIL_FAILURE);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED); /* consecutive:1 would open */
	t_free(t);

	/* consecutive:2: a stale failure plus a fresh one must not open */
	t = t_new("breaker.window = consecutive:2; breaker.wait = 1s; breaker.half_open_calls = 1");
	assert_int_equal(t_acq(t, &old), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	t_advance(t, 1 * S);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_rel(t, &old, RESIL_FAILURE);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_free(t);
}

/* ---- forced states ---- */

static void test_forced(void **unused)
{
	struct t *t = t_new("breaker.window = count:10; breaker.min_calls = 1");
	struct resil_breaker_counts k;

	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_DISABLED), 0);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_DISABLED, RESIL_WHY_FORCED);
	for (int i = 0; i < 5; i++)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* always permits */
	assert_int_equal(t_state(t), RESIL_STATE_DISABLED);
	counts(t, &k);
	assert_int_equal(k.failures, 5); /* still counts */

	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_METRICS_ONLY), 0);
	expect_ev(t, RESIL_STATE_DISABLED, RESIL_STATE_METRICS_ONLY, RESIL_WHY_FORCED);
	for (int i = 0; i < 5; i++)
		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	counts(t, &k);
	assert_int_equal(k.failures, 10);
	assert_int_equal(t_state(t), RESIL_STATE_METRICS_ONLY);

	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_FORCED_OPEN), 0);
	t_advance(t, 3600 * S);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), RESIL_REJECT_OPEN);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_FORCED_OPEN);
	expect_ev(t, RESIL_STATE_METRICS_ONLY, RESIL_STATE_FORCED_OPEN, RESIL_WHY_FORCED);

	/* back to normal: a fresh closed breaker */
	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_CLOSED), 0);
	expect_ev(t, RESIL_STATE_FORCED_OPEN, RESIL_STATE_CLOSED, RESIL_WHY_RESET);
	counts(t, &k);
	assert_int_equal(k.calls, 0);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_OPEN), -EINVAL);
	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, 42), -EINVAL);
	expect_no_ev(t);
	t_free(t);
}

static void test_maintain_idle(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 30s");

	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	expect_ev(t, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_CONSECUTIVE);
	t_advance(t, 29 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_advance(t, 1 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	expect_ev(t, RESIL_STATE_OPEN, RESIL_STATE_HALF_OPEN, RESIL_WHY_WAIT_OVER);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st); /* nothing more to do */
	expect_no_ev(t);
	t_free(t);
}

/* ---- outcomes ---- */

static void test_outcomes(void **unused)
{
	struct resil_breaker_conf c;
	char err[256];

	resil_breaker_conf_defaults(&c);
	assert_int_equal(resil_breaker_outcome_http(&c, 200), RESIL_SUCCESS);
	assert_int_equal(resil_breaker_outcome_http(&c, 304), RESIL_SUCCESS);
	assert_int_equal(resil_breaker_outcome_http(&c, 404), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_http(&c, 400), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_http(&c, 408), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 429), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 500), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 503), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, 0), RESIL_SUCCESS);
	assert_int_equal(resil_breaker_outcome_errno(&c, -ECONNREFUSED), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, ECONNRESET), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -ETIMEDOUT), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -EHOSTUNREACH), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -ENETUNREACH), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -EPIPE), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -EINVAL), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_errno(&c, -ECANCELED), RESIL_IGNORED);

	/* first match wins: 503 ignored before 5xx failure; 404 a failure */
	assert_int_equal(resil_breaker_conf_set(&c, "breaker.record",
						"http:503=ignored http:5xx,408=failure;"
						"http:404,410-412=failure http:429=success "
						"errno:ECONNRESET,110=ignored errno:EINVAL=failure",
						err, sizeof(err)),
			 0);
	assert_int_equal(c.nrecord, 9);
	assert_int_equal(resil_breaker_outcome_http(&c, 503), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_http(&c, 502), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 404), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 411), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_http(&c, 413), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_http(&c, 429), RESIL_SUCCESS);
	assert_int_equal(resil_breaker_outcome_http(&c, 200), RESIL_SUCCESS);
	assert_int_equal(resil_breaker_outcome_errno(&c, -ECONNRESET), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_errno(&c, -110), RESIL_IGNORED);
	assert_int_equal(resil_breaker_outcome_errno(&c, -EINVAL), RESIL_FAILURE);
	assert_int_equal(resil_breaker_outcome_errno(&c, -EPIPE), RESIL_FAILURE);
	/* an HTTP rule does not match an errno of the same number */
	assert_int_equal(resil_breaker_outcome_errno(&c, 503), RESIL_FAILURE);
	/* a new value replaces the rules; "none" clears them */
	assert_int_equal(
	    resil_breaker_conf_set(&c, "breaker.record", "http:404=failure", err, sizeof(err)), 0);
	assert_int_equal(c.nrecord, 1);
	assert_int_equal(resil_breaker_outcome_http(&c, 503), RESIL_FAILURE);
	assert_int_equal(resil_breaker_conf_set(&c, "breaker.record", "none", err, sizeof(err)), 0);
	assert_int_equal(c.nrecord, 0);
	assert_int_equal(resil_breaker_outcome_http(&c, 404), RESIL_IGNORED);
	/* a failed parse leaves the rules as they were */
	assert_int_equal(
	    resil_breaker_conf_set(&c, "breaker.record", "http:404=failure", err, sizeof(err)), 0);
	assert_int_equal(resil_breaker_conf_set(&c, "breaker.record", "http:500=failure http:x=ok",
						err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(c.nrecord, 1);
}

/* ---- shape changes ---- */

static void test_same_shape_and_carry(void **unused)
{
	struct t *t = t_new("breaker.window = count:10; breaker.min_calls = 1; breaker.wait = 10s;"
			    "breaker.wait_multiplier = 2; breaker.wait_max = 1m;"
			    "breaker.half_open_calls = 1");
	struct resil_breaker_conf c2 = t->conf;
	struct resil_breaker_state *nst;
	char err[128];

	/* thresholds and waits keep the state */
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.failure_rate", "20", err, sizeof(err)), 0);
	assert_int_equal(resil_breaker_conf_set(&c2, "breaker.wait", "1s", err, sizeof(err)), 0);
	assert_true(resil_breaker_same_shape(&t->conf, &c2));
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.window", "count:20", err, sizeof(err)), 0);
	assert_false(resil_breaker_same_shape(&t->conf, &c2));
	c2 = t->conf;
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.window", "time:10s", err, sizeof(err)), 0);
	assert_false(resil_breaker_same_shape(&t->conf, &c2));
	c2 = t->conf;
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.half_open_calls", "3", err, sizeof(err)), 0);
	assert_false(resil_breaker_same_shape(&t->conf, &c2));
	{
		struct resil_breaker_conf k3, k4;

		resil_breaker_conf_defaults(&k3);
		assert_int_equal(resil_breaker_conf_set(&k3, "breaker.window", "consecutive:3", err,
							sizeof(err)),
				 0);
		k4 = k3;
		assert_int_equal(
		    resil_breaker_conf_set(&k4, "breaker.wait", "1s", err, sizeof(err)), 0);
		assert_true(resil_breaker_same_shape(&k3, &k4));
		assert_int_equal(resil_breaker_conf_set(&k4, "breaker.window", "consecutive:4", err,
							sizeof(err)),
				 0);
		assert_false(resil_breaker_same_shape(&k3, &k4));
	}

	/* OPEN twice (streak 1: wait 20 s), then a new shape 5 s later */
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
	t_advance(t, 10 * S);
	assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0); /* probe fails */
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_advance(t, 5 * S);
	c2 = t->conf;
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.window", "count:20", err, sizeof(err)), 0);
	nst = aligned_alloc(RESIL_HOT_ALIGN,
			    resil_align_up(resil_breaker_state_size(&c2), RESIL_HOT_ALIGN));
	resil_breaker_state_init(nst, &c2, t->now);
	resil_breaker_carry(nst, &c2, t->st, &t->conf, t->now);
	assert_int_equal(resil_breaker_state(nst), RESIL_STATE_OPEN);
	free(t->st);
	t->st = nst;
	t->conf = c2;
	/* opened 5 s ago with a 20 s wait: 15 s to go */
	t_advance(t, 15 * S - 1);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), RESIL_REJECT_OPEN);
	t_advance(t, 1);
	assert_int_equal(t_call(t, RESIL_SUCCESS, 0), 0);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);

	/* HALF_OPEN starts its probes over in the new block; the old
	 * block's probe answers into nothing */
	{
		struct resil_permit_priv pr, q;

		assert_int_equal(t_call(t, RESIL_FAILURE, 0), 0);
		t_advance(t, 10 * S);
		assert_int_equal(t_acq(t, &pr), 0);
		assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
		c2 = t->conf;
		assert_int_equal(
		    resil_breaker_conf_set(&c2, "breaker.window", "count:30", err, sizeof(err)), 0);
		nst = aligned_alloc(RESIL_HOT_ALIGN,
				    resil_align_up(resil_breaker_state_size(&c2), RESIL_HOT_ALIGN));
		resil_breaker_state_init(nst, &c2, t->now);
		resil_breaker_carry(nst, &c2, t->st, &t->conf, t->now);
		free(t->st);
		t->st = nst;
		t->conf = c2;
		assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
		t_rel(t, &pr, RESIL_SUCCESS); /* a probe of the old block */
		assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
		assert_int_equal(t_acq(t, &q), 0);
		t_rel(t, &q, RESIL_SUCCESS);
		assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	}

	/* forced states carry over too; CLOSED comes fresh */
	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_METRICS_ONLY), 0);
	c2 = t->conf;
	assert_int_equal(
	    resil_breaker_conf_set(&c2, "breaker.window", "consecutive:3", err, sizeof(err)), 0);
	nst = aligned_alloc(RESIL_HOT_ALIGN,
			    resil_align_up(resil_breaker_state_size(&c2), RESIL_HOT_ALIGN));
	resil_breaker_state_init(nst, &c2, t->now);
	resil_breaker_carry(nst, &c2, t->st, &t->conf, t->now);
	assert_int_equal(resil_breaker_state(nst), RESIL_STATE_METRICS_ONLY);
	free(nst);
	t_free(t);
}

/* ---- crash repair ---- */

static void test_reclaim_probe(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 1");
	struct resil_permit_priv dead, p;
	struct resil_reclaim_counts rc = {0};

	open_it(t);
	t->x.client_id = 7;
	assert_int_equal(t_acq(t, &dead), 0); /* client 7 holds the one probe, then dies */
	t->x.client_id = 2;
	assert_int_equal(t_acq(t, &p), RESIL_REJECT_OPEN);
	resil_breaker_reclaim(&t->x, &t->conf, t->st, 3, &rc); /* somebody else */
	assert_int_equal(rc.probes, 0);
	assert_int_equal(t_acq(t, &p), RESIL_REJECT_OPEN);
	resil_breaker_reclaim(&t->x, &t->conf, t->st, 7, &rc);
	assert_int_equal(rc.probes, 1);
	assert_int_equal(rc.repaired, 0);
	assert_int_equal(t_acq(t, &p), 0);
	t_rel(t, &p, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_free(t);
}

/* A probe released by another identity (a forked child releasing its
 * parent's permit) still frees the slot it claimed. */
static void test_probe_released_elsewhere(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 2; breaker.half_open_concurrent = 1");
	struct resil_permit_priv p, q;

	open_it(t);
	t->x.client_id = 5;
	assert_int_equal(t_acq(t, &p), 0);
	assert_int_equal(RESIL_BK_PROBE_CLIENT(p.probe_idx), 5);
	t->x.client_id = 6;
	assert_int_equal(t_acq(t, &q), RESIL_REJECT_OPEN); /* 1 at once */
	t_rel(t, &p, RESIL_SUCCESS);
	assert_int_equal(t_acq(t, &q), 0);
	t_rel(t, &q, RESIL_SUCCESS);
	assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	t_free(t);
}

/* A probe claimed but never stamped (killed between the claim and the
 * stamp): maintain stamps it, so half_open_max_wait still applies. */
static void test_unstamped_probe(void **unused)
{
	struct t *t = t_new("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 1; breaker.half_open_max_wait = 5s");
	struct resil_permit_priv p;
	struct resil_breaker_probe *pr;

	open_it(t);
	t->x.client_id = 0; /* unregistered: never reclaimed */
	assert_int_equal(t_acq(t, &p), 0);
	pr = (struct resil_breaker_probe *)((char *)t->st + t->st->probe_off);
	atomic_store(&pr[RESIL_BK_PROBE_SLOT(p.probe_idx)].claimed_at,
		     INT64_MAX); /* the crash window */
	t_advance(t, 60 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st); /* stamps */
	assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
	t_advance(t, 5 * S);
	t->x.now = 0;
	resil_breaker_maintain(&t->x, &t->conf, t->st);
	assert_int_equal(t_state(t), RESIL_STATE_OPEN);
	t_free(t);
}

/* The decider killed between the last answer and its CAS: every probe
 * answered, none held, still HALF_OPEN. The daemon's tick decides at
 * once; a client's check only once HALF_OPEN is older than max_wait. */
static void test_dead_decider(void **unused)
{
	struct t *t = t_new("breaker.window = count:10; breaker.min_calls = 1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 1; breaker.half_open_max_wait = 10s");
	struct resil_permit_priv p, q;
	struct resil_breaker_probe *pr;
	uint64_t w;
	uint32_t gen;

	for (int round = 0; round < 2; round++) {
		open_it(t);
		assert_int_equal(t_acq(t, &p), 0);
		assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
		/* its answer went in, then it died: ho says 1 of 1, slot freed */
		w = atomic_load(&t->st->word);
		gen = (uint32_t)(w >> 8) & 0xfffff;
		atomic_store(&t->st->ho, (uint64_t)gen << 44 | 1ULL << 28);
		pr = (struct resil_breaker_probe *)((char *)t->st + t->st->probe_off);
		atomic_store(&pr[RESIL_BK_PROBE_SLOT(p.probe_idx)].owner, 0);
		t_advance(t, 1 * S);
		assert_int_equal(t_acq(t, &q), RESIL_REJECT_OPEN);
		assert_int_equal(t_state(t), RESIL_STATE_HALF_OPEN);
		if (round == 0) {
			t->x.now = 0;
			resil_breaker_maintain(&t->x, &t->conf, t->st);
		} else {
			t_advance(t, 9 * S);
			assert_int_equal(t_acq(t, &q), RESIL_REJECT_OPEN);
		}
		assert_int_equal(t_state(t), RESIL_STATE_CLOSED);
	}
	t_free(t);
}

/* A writer killed between the slot exchange and the counters: reclaim
 * recomputes the counters from the slots. */
static void test_counter_repair(void **unused)
{
	struct t *t = t_new("breaker.window = count:8; breaker.min_calls = 100");
	struct resil_breaker_counts k, h;
	struct resil_reclaim_counts rc = {0};
	ra32 *slots = (ra32 *)((char *)t->st + t->st->win_off);

	for (int i = 0; i < 5; i++)
		assert_int_equal(t_call(t, i & 1 ? RESIL_FAILURE : RESIL_SUCCESS, 0), 0);
	/* half a record: seq and slot, no counters */
	uint64_t s = atomic_fetch_add(&t->st->seq, 1);
	atomic_exchange(&slots[s % 8], RESIL_BK_FAIL);
	/* and one overwriting a success with a failure */
	atomic_exchange(&slots[0], RESIL_BK_FAIL);
	counts(t, &k);
	histogram(t, &h);
	assert_int_equal(k.calls, 5);
	assert_int_equal(h.calls, 6);
	assert_int_equal(h.failures, 4);
	resil_breaker_reclaim(&t->x, &t->conf, t->st, 9, &rc);
	assert_int_equal(rc.repaired, 1);
	counts(t, &k);
	assert_memory_equal(&k, &h, sizeof(k));
	resil_breaker_reclaim(&t->x, &t->conf, t->st, 9, &rc);
	assert_int_equal(rc.repaired, 1); /* nothing more to repair */
	t_free(t);
}

/* Packed counters: transiently negative fields decode balanced. */
static void test_unpack(void **unused)
{
	struct resil_breaker_counts k;
	uint64_t v = 0;

	/* -1 calls, +2 failures, +3 slow */
	v += (uint64_t)-1;
	v += 2ULL << 21;
	v += 3ULL << 42;
	resil_breaker_unpack(v, &k);
	assert_int_equal(k.calls, 0); /* clamped */
	assert_int_equal(k.failures, 2);
	assert_int_equal(k.slow, 3);
	v = 1000000 + (999999ULL << 21) + (5ULL << 42);
	resil_breaker_unpack(v, &k);
	assert_int_equal(k.calls, 1000000);
	assert_int_equal(k.failures, 999999);
	assert_int_equal(k.slow, 5);
}

/* ---- threads: counters equal the slots at quiescence ---- */

struct hammer {
	struct t *t;
	uint64_t seed;
	int n;
};

static void *hammer_fn(void *arg)
{
	struct hammer *h = arg;
	struct resil_ctx x = h->t->x;
	int64_t now = h->t->now;

	x.seg = NULL;
	x.clock.fn = thread_clock;
	x.clock.ctx = &now;
	for (int i = 0; i < h->n; i++) {
		struct resil_permit_priv pm;
		uint64_t r = resil_splitmix64(&h->seed);

		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		if (resil_breaker_check(&x, &h->t->conf, h->t->st, &pm) ||
		    resil_breaker_acquire(&x, &h->t->conf, h->t->st, &pm))
			continue;
		now += (int64_t)(r >> 60) * RESIL_NS_PER_MS;
		x.now = 0;
		resil_breaker_release(&x, &h->t->conf, h->t->st, &pm,
				      (r & 3) == 0 ? RESIL_FAILURE : RESIL_SUCCESS);
	}
	return NULL;
}

static void test_threads_counters(void **unused)
{
	struct t *t = t_new("breaker.window = count:100; breaker.slow_call = 8ms;"
			    "breaker.slow_call_rate = 50");
	pthread_t th[4];
	struct hammer h[4];
	struct resil_breaker_counts k, hi;

	assert_int_equal(resil_breaker_force(&t->x, &t->conf, t->st, RESIL_STATE_METRICS_ONLY), 0);
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){t, (uint64_t)i * 77 + 1, 100000};
		assert_int_equal(pthread_create(&th[i], NULL, hammer_fn, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	counts(t, &k);
	histogram(t, &hi);
	assert_memory_equal(&k, &hi, sizeof(k));
	assert_int_equal(k.calls, 100);
	assert_true(k.failures > 5 && k.failures < 50);
	assert_true(k.slow > 5 && k.slow < 95);
	/* every record took one number; each thread's last batch of
	 * N / 32 = 3 (seq_take) may have up to 2 left unused */
	assert_true(atomic_load(&t->st->seq) >= 400000);
	assert_true(atomic_load(&t->st->seq) <= 400000 + 4 * 2);
	t_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_format_round_trip),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_consecutive),
	    cmocka_unit_test(test_wait_growth),
	    cmocka_unit_test(test_wait_max_follows_wait),
	    cmocka_unit_test(test_min_calls),
	    cmocka_unit_test(test_count_slides),
	    cmocka_unit_test(test_slow_rate),
	    cmocka_unit_test(test_no_clock_fast_path),
	    cmocka_unit_test(test_time_window),
	    cmocka_unit_test(test_time_window_busy),
	    cmocka_unit_test(test_time_window_huge_counts),
	    cmocka_unit_test(test_half_open_limits),
	    cmocka_unit_test(test_half_open_rates),
	    cmocka_unit_test(test_half_open_max_wait),
	    cmocka_unit_test(test_generations),
	    cmocka_unit_test(test_forced),
	    cmocka_unit_test(test_maintain_idle),
	    cmocka_unit_test(test_outcomes),
	    cmocka_unit_test(test_same_shape_and_carry),
	    cmocka_unit_test(test_reclaim_probe),
	    cmocka_unit_test(test_probe_released_elsewhere),
	    cmocka_unit_test(test_unstamped_probe),
	    cmocka_unit_test(test_dead_decider),
	    cmocka_unit_test(test_counter_repair),
	    cmocka_unit_test(test_unpack),
	    cmocka_unit_test(test_threads_counters),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

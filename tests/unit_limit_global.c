/* SPDX-License-Identifier: MIT */
/*
 * unit_limit_global.c - global keyed limiters on plain state blocks and a
 * manual clock: the admissions counted per key and collected once, the
 * charges of other hosts' admissions (on a key held, on a key never seen
 * here, past a full bucket as a debt, saturated), the words a client
 * could have scribbled on cut to what a GCRA can admit; and a fleet of
 * three hosts exchanging their counts with a delay (the daemon's own
 * charge and debt code, daemon/cluster_keyed.c), one key driven from
 * every host at 2x, 1x and 0.5x its rate, at 10/s and 100/s: every count
 * within the bound cluster_keyed.c derives, and a fleet that drops the
 * debts (charges cut at a full bucket) over it.
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

#include "cluster_keyed.h"
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

/* Charge n admissions of another host to key at f's now; the debt left. */
static int64_t charge(struct fx *f, const char *key, uint64_t n)
{
	int64_t left = -1;

	assert_int_equal(resil_limit_global_charge(&f->c, f->st, fp_of(key),
						   resil_limit_global_debt(&f->c, n), f->now,
						   &left),
			 0);
	return left;
}

static void test_charge(void **unused)
{
	struct fx f;
	int64_t T, left;
	int n;

	(void)unused;
	fx_init(&f, true, 0);
	T = f.c.interval_ns;
	assert_int_equal(T, 600 * RESIL_NS_PER_MS);

	/* a key held here: 50 admitted locally, 30 elsewhere: 20 left */
	for (int i = 0; i < 50; i++)
		assert_int_equal(acq_n(&f, "192.0.2.1", 1), 0);
	assert_int_equal(charge(&f, "192.0.2.1", 30), 0);
	for (n = 0; n < 200 && acq_n(&f, "192.0.2.1", 1) == 0; n++)
		;
	assert_int_equal(n, 20);

	/* a key never seen here: inserted, charged, limited at once */
	assert_int_equal(charge(&f, "198.51.100.7", 100), 0);
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), RESIL_REJECT_LIMITED);
	f.now += T;
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), 0);
	assert_int_equal(acq_n(&f, "198.51.100.7", 1), RESIL_REJECT_LIMITED);

	/* past a full bucket: the TAT moves up to 5 s further (below any
	 * client's heal), the rest is the debt the daemon keeps */
	left = charge(&f, "203.0.113.9", 200);
	assert_int_equal(left, 200 * T - (60 * S + RESIL_LIMIT_GLOBAL_AHEAD_NS));
	assert_int_equal(acq_n(&f, "203.0.113.9", 1), RESIL_REJECT_LIMITED);
	assert_int_equal(ld_relaxed(&f.st->heals), 0);
	/* 5 s later it is still owed: no permit until the debt is paid */
	f.now += RESIL_LIMIT_GLOBAL_AHEAD_NS;
	assert_int_equal(acq_n(&f, "203.0.113.9", 1), RESIL_REJECT_LIMITED);
	assert_int_equal(
	    resil_limit_global_charge(&f.c, f.st, fp_of("203.0.113.9"), left, f.now, &left), 0);
	assert_int_equal(left, 200 * T - 60 * S - 2 * RESIL_LIMIT_GLOBAL_AHEAD_NS);

	/* saturated: a count no fleet can make is cut to 256 full buckets */
	left = charge(&f, "203.0.113.10", UINT64_MAX);
	assert_int_equal(left,
			 resil_limit_global_debt_max(&f.c) - 60 * S - RESIL_LIMIT_GLOBAL_AHEAD_NS);
	assert_int_equal(ld_relaxed(&f.st->heals), 0);

	/* no fingerprint, not a keyed table: refused */
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, 1, T, f.now, &left), -EINVAL);
	assert_int_equal(resil_limit_global_charge(&f.c, f.st, 1ULL << 63 | 5, T, f.now, &left),
			 -EINVAL);
	free(f.st);
}

static void test_charge_keeps_reservations(void **unused)
{
	struct fx f;
	int64_t T;

	(void)unused;
	fx_init(&f, true, 10 * S); /* limit.wait = 10 s */
	T = f.c.interval_ns;
	/* a full bucket plus limit.wait plus 5 s: a charge never cuts a TAT
	 * a reservation set */
	assert_true(charge(&f, "k", 1000) > 0);
	/* the wait a rejection gives counts the charged TAT: the next permit
	 * is the reservations, the 5 s and one T away */
	{
		struct resil_permit_priv pm = {0};

		pm.limit_permits = 1;
		f.x.now = 0;
		f.x.key = "k";
		f.x.key_len = 1;
		assert_int_equal(resil_limit_acquire(&f.x, &f.c, f.st, &pm), RESIL_REJECT_LIMITED);
		assert_int_equal(pm.wait_ns, 10 * S + RESIL_LIMIT_GLOBAL_AHEAD_NS + T);
	}
	free(f.st);
}

/*
 * An unkeyed global limiter's lease words: limit.burst is the fleet's
 * (a share of a tenth of the rate bursts a tenth of it), and the
 * fallback's end (past it, the after tier: another interval, or none).
 */
static void test_lease_burst_and_fallback_end(void **unused)
{
	struct resil_limit_conf c;
	struct resil_limit_state *st;
	struct resil_rec rec;
	struct resil_ctx x = {0};
	int64_t now = 1000 * S;
	char err[256];
	int n;

	(void)unused;
	resil_limit_conf_defaults(&c);
	assert_int_equal(resil_limit_conf_set(&c, "limit.rate", "1000/s", err, sizeof(err)), 0);
	assert_int_equal(resil_limit_conf_set(&c, "limit.burst", "100", err, sizeof(err)), 0);
	assert_int_equal(resil_limit_conf_check(&c, err, sizeof(err)), 0);
	st = aligned_alloc(RESIL_HOT_ALIGN,
			   resil_align_up(resil_limit_state_size(&c), RESIL_HOT_ALIGN));
	assert_non_null(st);
	resil_limit_state_init(st, &c, 0);
	memset(&rec, 0, sizeof(rec));
	rec.conf.scope = RESIL_SCOPE_GLOBAL;
	x.rec = &rec;
	x.clock.fn = clk_fn;
	x.clock.ctx = &now;

#define ACQ()                                                                                      \
	({                                                                                         \
		struct resil_permit_priv pm_ = {0};                                                \
		pm_.limit_permits = 1;                                                             \
		x.now = 0;                                                                         \
		resil_limit_acquire(&x, &c, st, &pm_);                                             \
	})
	/* a share of 100/s of the fleet's 1000/s: 10 of the burst of 100 */
	resil_limit_lease_set(st, 10 * RESIL_NS_PER_MS, now + 10 * S, RESIL_LIMIT_FALLBACK_REJECT);
	for (n = 0; n < 200 && ACQ() == 0; n++)
		;
	assert_int_equal(n, 10);
	/* a share of 1/s: one permit at once (never none) */
	now += 10 * S;
	resil_limit_lease_set(st, 1 * S, now + 10 * S, RESIL_LIMIT_FALLBACK_REJECT);
	for (n = 0; n < 200 && ACQ() == 0; n++)
		;
	assert_int_equal(n, 1);

	/* past the lease: the fallback (100/s) until its end, then the after
	 * tier: 10/s, or nothing */
	now += 20 * S;
	resil_limit_lease_set(st, 10 * RESIL_NS_PER_MS, now - 1, 10 * RESIL_NS_PER_MS);
	resil_limit_fallback_end_set(st, now + 5 * S, 100 * RESIL_NS_PER_MS);
	for (n = 0; n < 200 && ACQ() == 0; n++)
		;
	assert_int_equal(n, 10);
	now += 10 * S;
	for (n = 0; n < 200 && ACQ() == 0; n++)
		;
	assert_int_equal(n, 1); /* tau 100 ms at 100 ms apart: one */
	resil_limit_fallback_end_set(st, now - 1, 0);
	now += 10 * S;
	assert_int_equal(ACQ(), RESIL_REJECT_LIMITED);
	resil_limit_fallback_end_set(st, now - 1, RESIL_LIMIT_FALLBACK_REJECT);
	assert_int_equal(ACQ(), RESIL_REJECT_LIMITED);
	/* no end: the fallback for good */
	resil_limit_fallback_end_set(st, 0, 0);
	assert_int_equal(ACQ(), 0);
#undef ACQ
	free(st);
}

/* ---------------------------------------------------------- a fleet */

#define HOSTS	3
#define REPORTS 4096
#define ADMITS	8192
#define MS	RESIL_NS_PER_MS
#define SIM_KEY "203.0.113.50"

struct sim_host {
	struct fx f;
	struct resild_ck_slot ck;
	int64_t step;		      /* between two of its requests */
	int64_t next;		      /* its next request */
	int64_t post;		      /* its daemon's next post */
	uint32_t read;		      /* reports of the stream read */
	int64_t due[REPORTS / HOSTS]; /* charges read, applied at the answer */
	uint32_t due_n[REPORTS / HOSTS];
	uint32_t ndue;
	long admitted;
};

struct report {
	int64_t t; /* in the stream (Redis' time) */
	int host;
	uint32_t n;
};

struct sim {
	struct sim_host h[HOSTS];
	struct report rep[REPORTS];
	uint32_t nrep;
	int64_t adm[ADMITS]; /* every admission's time, in order */
	long nadm;
};

static void got_one(void *arg, uint64_t fp, uint32_t n)
{
	uint32_t *sum = arg;

	(void)fp;
	*sum += n;
}

/* A charge that stops where a full bucket is. */
static void charge_cut(struct fx *f, const char *key, uint32_t n)
{
	int64_t idx = resil_limit_key_entry(&f->c, f->st, fp_of(key), f->now, true), left;
	struct resil_limit_entry *t = (struct resil_limit_entry *)(void *)f->st->data;
	int64_t tat, full, d;

	assert_true(idx >= 0);
	tat = (int64_t)ld_relaxed(&t[idx].st);
	full = f->now + f->c.interval_ns * (int64_t)f->c.burst;
	d = resil_limit_global_debt(&f->c, n);
	if (d > full - (tat > f->now ? tat : f->now))
		d = full - (tat > f->now ? tat : f->now);
	if (d > 0)
		assert_int_equal(
		    resil_limit_global_charge(&f->c, f->st, fp_of(key), d, f->now, &left), 0);
}

/*
 * HOSTS hosts, one key offered `per_host` times its rate r on each, for
 * run_ns. Each daemon posts every interval (phases a third apart): it
 * collects its host's counts into a report that reaches the stream half
 * a round trip later, reads the reports the others put there before, and
 * charges them when its answer is back, a round trip after its post. So
 * an admission is charged on every other host within D = 2 intervals +
 * one round trip. drop: charges cut where a full bucket is (a limiter
 * that forgets what the others admitted once its own clients fill it).
 */
static void sim_run(struct sim *m, const char *rate, const char *burst, double per_host,
		    int64_t interval, int64_t rtt, int64_t run_ns, bool drop)
{
	char err[256];
	int64_t t;

	memset(m, 0, sizeof(*m));
	for (int h = 0; h < HOSTS; h++) {
		struct sim_host *x = &m->h[h];

		fx_init(&x->f, true, 0);
		resil_limit_conf_defaults(&x->f.c);
		assert_int_equal(
		    resil_limit_conf_set(&x->f.c, "limit.rate", rate, err, sizeof(err)), 0);
		assert_int_equal(
		    resil_limit_conf_set(&x->f.c, "limit.burst", burst, err, sizeof(err)), 0);
		assert_int_equal(
		    resil_limit_conf_set(&x->f.c, "limit.keys", "64", err, sizeof(err)), 0);
		x->f.c.global = true;
		assert_int_equal(resil_limit_conf_check(&x->f.c, err, sizeof(err)), 0);
		free(x->f.st);
		x->f.st =
		    aligned_alloc(RESIL_HOT_ALIGN,
				  resil_align_up(resil_limit_state_size(&x->f.c), RESIL_HOT_ALIGN));
		assert_non_null(x->f.st);
		resil_limit_state_init(x->f.st, &x->f.c, 0);
		x->step = (int64_t)((double)x->f.c.interval_ns / per_host);
		x->next = x->step * h / HOSTS;
		x->post = interval * (h + 1) / HOSTS;
	}
	/* every host's clock is t (1000 s in: no TAT starts negative) */
	for (t = 0; t < run_ns; t += 100 * 1000) {
		for (int h = 0; h < HOSTS; h++) {
			struct sim_host *x = &m->h[h];

			x->f.now = 1000 * S + t;
			/* an answer back: its charges, in the order read */
			for (uint32_t i = 0; i < x->ndue;) {
				if (x->due[i] > t) {
					i++;
					continue;
				}
				if (drop)
					charge_cut(&x->f, SIM_KEY, x->due_n[i]);
				else
					resild_ck_charge(&x->ck, &x->f.c, x->f.st, fp_of(SIM_KEY),
							 x->due_n[i], x->f.now);
				x->due[i] = x->due[x->ndue - 1];
				x->due_n[i] = x->due_n[--x->ndue];
			}
			while (x->next <= t) {
				x->next += x->step;
				if (acq_n(&x->f, SIM_KEY, 1) == 0) {
					x->admitted++;
					assert_true(m->nadm < ADMITS);
					m->adm[m->nadm++] = t;
				}
			}
			if (x->post > t)
				continue;
			/* the daemon's post: debts again, the report out, the
			 * others' reports read (charged at the answer) */
			x->post += interval;
			resild_ck_recharge(&x->ck, &x->f.c, x->f.st, x->f.now);
			{
				uint32_t n = 0;

				resil_limit_global_collect(
				    &x->f.c, x->f.st, resil_limit_global_cap(&x->f.c, interval),
				    got_one, &n);
				for (uint32_t i = x->read; i < m->nrep; i++) {
					if (m->rep[i].t > t + rtt / 2 || m->rep[i].host == h)
						continue;
					assert_true(x->ndue < REPORTS / HOSTS);
					x->due[x->ndue] = t + rtt;
					x->due_n[x->ndue++] = m->rep[i].n;
				}
				x->read = m->nrep;
				if (n) {
					assert_true(m->nrep < REPORTS);
					m->rep[m->nrep++] = (struct report){t + rtt / 2, h, n};
				}
			}
		}
		/* reports are read in the stream's order: keep it sorted by
		 * time (a later post can land first by less than rtt / 2: not
		 * here, every post's report lands rtt / 2 after it) */
	}
	for (int h = 0; h < HOSTS; h++) {
		resild_ck_slot_fini(&m->h[h].ck);
		free(m->h[h].f.st);
	}
}

/* The most admissions of the fleet in any span of span_ns. */
static long sim_most(const struct sim *m, int64_t span_ns)
{
	long most = 0;

	for (long i = 0, j = 0; i < m->nadm; i++) {
		while (m->adm[i] - m->adm[j] > span_ns)
			j++;
		if (i - j + 1 > most)
			most = i - j + 1;
	}
	return most;
}

/*
 * cluster_keyed.c's bound for a span S: r x S + b + what the other hosts
 * admit within D, each at most min(its demand x D, r x D + b) (+1: a
 * span's ends both count).
 */
static long sim_bound(double r, long b, double per_host, double D, double span_s)
{
	double other = per_host * r * D + 1, gcra = r * D + b;

	return (long)(r * span_s + b + (HOSTS - 1) * (other < gcra ? other : gcra));
}

static void fleet_case(double r, const char *rate, long b, const char *burst, double per_host,
		       int64_t rtt)
{
	static struct sim m;
	const int64_t interval = 100 * MS, run = 10 * S;
	double D = (double)(2 * interval + rtt) / 1e9;
	long whole = sim_bound(r, b, per_host, D, 10.0), one = sim_bound(r, b, per_host, D, 1.0);

	sim_run(&m, rate, burst, per_host, interval, rtt, run, false);
	print_message("keyed %s, burst %ld, %.1fx its rate on each of %d hosts, round trip %lld "
		      "ms: %ld admitted in 10 s (bound %ld), at most %ld in 1 s (bound %ld)\n",
		      rate, b, per_host, HOSTS, (long long)(rtt / MS), m.nadm, whole,
		      sim_most(&m, S), one);
	assert_true(m.nadm <= whole);
	assert_true(sim_most(&m, S) <= one);
	/* and the fleet is not starved: at least the rate over the run */
	assert_true(m.nadm >= (long)(r * 10.0));

	/* charges cut at a full bucket: every host at or over the rate
	 * keeps its own bucket full, and the fleet goes past the bound */
	if (per_host >= 1.0) {
		sim_run(&m, rate, burst, per_host, interval, rtt, run, true);
		print_message("  charges cut at a full bucket: %ld admitted\n", m.nadm);
		assert_true(m.nadm > whole);
	}
}

/*
 * Three hosts' buckets of one fresh key, each spent whole at once (a burst
 * on every host before any exchange: the bound's (H - 1) x b), then each
 * charged the other two's: a bucket that owes two more buckets. Its TAT
 * moves 5 s past a full bucket, the daemon keeps the rest and charges it
 * again every tick; no host admits the key until the fleet's one bucket
 * would, 2 x tau + T later (within a tick).
 */
static void test_debt_paid(void **unused)
{
	struct sim_host x[HOSTS];
	int64_t t0, T, tau, first[HOSTS] = {0};

	(void)unused;
	memset(x, 0, sizeof(x));
	for (int h = 0; h < HOSTS; h++)
		fx_init(&x[h].f, true, 0);
	T = x[0].f.c.interval_ns;
	tau = 100 * T;
	t0 = x[0].f.now;
	for (int h = 0; h < HOSTS; h++) {
		for (int i = 0; i < 100; i++)
			assert_int_equal(acq_n(&x[h].f, SIM_KEY, 1), 0);
		assert_int_equal(acq_n(&x[h].f, SIM_KEY, 1), RESIL_REJECT_LIMITED);
	}
	for (int h = 0; h < HOSTS; h++) {
		resild_ck_charge(&x[h].ck, &x[h].f.c, x[h].f.st, fp_of(SIM_KEY), 100, t0);
		resild_ck_charge(&x[h].ck, &x[h].f.c, x[h].f.st, fp_of(SIM_KEY), 100, t0);
		assert_int_equal(x[h].ck.debt_n, 1);
		assert_int_equal(x[h].ck.charged, 200);
	}
	for (int64_t t = t0; t < t0 + 3 * tau; t += 100 * MS) {
		for (int h = 0; h < HOSTS; h++) {
			x[h].f.now = t;
			resild_ck_recharge(&x[h].ck, &x[h].f.c, x[h].f.st, t);
			if (!first[h] && acq_n(&x[h].f, SIM_KEY, 1) == 0)
				first[h] = t;
		}
	}
	for (int h = 0; h < HOSTS; h++) {
		assert_true(first[h] >= t0 + 2 * tau + T);
		assert_true(first[h] <= t0 + 2 * tau + T + 100 * MS);
		assert_int_equal(x[h].ck.debt_n, 0);
		assert_int_equal(ld_relaxed(&x[h].f.st->heals), 0);
		resild_ck_slot_fini(&x[h].ck);
		free(x[h].f.st);
	}
}

static void test_fleet_100(void **unused)
{
	(void)unused;
	fleet_case(100, "100/s", 10, "10", 2.0, 5 * MS);
	fleet_case(100, "100/s", 10, "10", 1.0, 5 * MS);
	fleet_case(100, "100/s", 10, "10", 0.5, 5 * MS);
	fleet_case(100, "100/s", 10, "10", 2.0, 200 * MS);
}

static void test_fleet_10(void **unused)
{
	(void)unused;
	fleet_case(10, "10/s", 5, "5", 2.0, 5 * MS);
	fleet_case(10, "10/s", 5, "5", 1.0, 5 * MS);
	fleet_case(10, "10/s", 5, "5", 0.5, 5 * MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_collect),
	    cmocka_unit_test(test_host_scope_counts_nothing),
	    cmocka_unit_test(test_charge),
	    cmocka_unit_test(test_charge_keeps_reservations),
	    cmocka_unit_test(test_lease_burst_and_fallback_end),
	    cmocka_unit_test(test_debt_paid),
	    cmocka_unit_test(test_fleet_100),
	    cmocka_unit_test(test_fleet_10),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * unit_limit.c - the rate limiter on a plain state block and a manual clock.
 *
 * Every figure is exact: the clock only moves when the test moves it, and
 * random arrival sequences come from a seeded splitmix64. The block is
 * aligned_alloc'ed, the ctx has no segment (fixed SipHash key).
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "limit.h"
#include "limit_priv.h"
#include "resil.h"

#define MS RESIL_NS_PER_MS
#define S  RESIL_NS_PER_S

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

static int conf_text(struct resil_limit_conf *c, const char *text)
{
	char buf[512], err[256], *save = NULL, *pair;
	int r;

	resil_limit_conf_defaults(c);
	snprintf(buf, sizeof(buf), "%s", text);
	for (pair = strtok_r(buf, ";", &save); pair; pair = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(pair, '='), *k = pair, *v, *e;

		if (!eq)
			return -EINVAL;
		*eq = '\0';
		v = eq + 1;
		while (*k == ' ')
			k++;
		for (e = eq - 1; e >= k && *e == ' '; e--)
			*e = '\0';
		while (*v == ' ')
			v++;
		r = resil_limit_conf_set(c, k, v, err, sizeof(err));
		if (r < 0)
			return r;
	}
	return resil_limit_conf_check(c, err, sizeof(err));
}

static void fx_init(struct fx *f, const char *text, int64_t start)
{
	uint64_t size;

	memset(f, 0, sizeof(*f));
	assert_int_equal(conf_text(&f->c, text), 0);
	size = resil_limit_state_size(&f->c);
	f->st = aligned_alloc(RESIL_HOT_ALIGN, resil_align_up(size, RESIL_HOT_ALIGN));
	assert_non_null(f->st);
	memset(f->st, 0xa5, size); /* init must not rely on zeroed memory */
	resil_limit_state_init(f->st, &f->c, start);
	f->now = start;
	f->x.clock.fn = clk_fn;
	f->x.clock.ctx = &f->now;
}

static void fx_fini(struct fx *f)
{
	free(f->st);
}

/* One acquire as the library makes it: a fresh ctx reading, a fresh permit. */
static int acq_n(struct fx *f, const char *key, uint32_t n, struct resil_permit_priv *pm)
{
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = n;
	f->x.now = 0;
	f->x.key = key;
	f->x.key_len = key ? strlen(key) : 0;
	return resil_limit_acquire(&f->x, &f->c, f->st, pm);
}

static int acq(struct fx *f, const char *key, int64_t *wait)
{
	struct resil_permit_priv pm;
	int v = acq_n(f, key, 1, &pm);

	if (wait)
		*wait = pm.wait_ns;
	return v;
}

static void undo(struct fx *f, const char *key, struct resil_permit_priv *pm)
{
	f->x.now = 0;
	f->x.key = key;
	f->x.key_len = key ? strlen(key) : 0;
	resil_limit_undo(&f->x, &f->c, f->st, pm);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
	return resil_splitmix64(&rng_state);
}

/* ------------------------------------------------------------ config */

static void test_conf(void **unused)
{
	struct resil_limit_conf c, d;
	char err[256], buf[512], *line, *save = NULL;

	(void)unused;
	resil_limit_conf_defaults(&c);
	assert_int_equal(c.on, 0);
	assert_int_equal(c.burst, 1);
	assert_int_equal(c.algorithm, RESIL_LIMIT_GCRA);

	assert_int_equal(conf_text(&c, "limit.rate = 100/s"), 0);
	assert_int_equal(c.on, 1);
	assert_int_equal(c.count, 100);
	assert_int_equal(c.period_ns, S);
	assert_int_equal(c.interval_ns, 10 * MS);

	assert_int_equal(conf_text(&c, "limit.rate = 5/2m; limit.burst = 5; limit.wait = 250ms"),
			 0);
	assert_int_equal(c.interval_ns, 24 * S);
	assert_int_equal(c.burst, 5);
	assert_int_equal(c.wait_ns, 250 * MS);

	assert_int_equal(conf_text(&c, "limit.rate = 10/s; limit.algorithm = sliding-approx; "
				       "limit.keys = 1000; limit.when_full = admit"),
			 0);
	assert_int_equal(c.algorithm, RESIL_LIMIT_SLIDING_APPROX);
	assert_int_equal(c.keys, 1000);
	assert_int_equal(c.when_full_admit, 1);
	assert_int_equal(c.dry_run, 0); /* the default */

	/* limit.dry_run: a boolean, formatted only when yes */
	assert_int_equal(conf_text(&c, "limit.rate = 5/s; limit.dry_run = yes"), 0);
	assert_int_equal(c.dry_run, 1);
	assert_true(resil_limit_conf_format(&c, buf, sizeof(buf)) < sizeof(buf));
	assert_non_null(strstr(buf, "limit.dry_run = yes\n"));
	assert_int_equal(conf_text(&c, "limit.rate = 5/s; limit.dry_run = yes; limit.dry_run = no"),
			 0);
	assert_int_equal(c.dry_run, 0);
	assert_true(resil_limit_conf_format(&c, buf, sizeof(buf)) < sizeof(buf));
	assert_null(strstr(buf, "dry_run"));
	assert_int_equal(conf_text(&c, "limit.dry_run = yes"), -EINVAL); /* no rate */
	resil_limit_conf_defaults(&c);
	assert_int_equal(resil_limit_conf_set(&c, "limit.dry_run", "x", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "limit.dry_run: 'x' is not yes or no");
	assert_int_equal(c.on, 0);
	/* a live change: the state stays */
	assert_int_equal(conf_text(&c, "limit.rate = 5/s; limit.keys = 8"), 0);
	d = c;
	d.dry_run = 1;
	assert_true(resil_limit_same_shape(&c, &d));

	/* errors name the key; a failed key leaves the configuration as it was */
	resil_limit_conf_defaults(&c);
	assert_int_equal(resil_limit_conf_set(&c, "limit.rate", "fast", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "limit.rate"));
	assert_int_equal(c.on, 0);
	assert_int_equal(resil_limit_conf_set(&c, "limit.burst", "0", err, sizeof(err)), -EINVAL);
	assert_int_equal(resil_limit_conf_set(&c, "limit.algorithm", "leaky", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_limit_conf_set(&c, "limit.when_full", "maybe", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(resil_limit_conf_set(&c, "limit.nope", "1", err, sizeof(err)), -ENOENT);
	assert_int_equal(resil_limit_conf_set(&c, "limit.rate", "2000000000/s", err, sizeof(err)),
			 -EINVAL); /* faster than one per ns */
	assert_int_equal(conf_text(&c, "limit.rate = 2000000/s; limit.algorithm = sliding"),
			 -EINVAL);
	assert_int_equal(conf_text(&c, "limit.algorithm = sliding; limit.rate = 2000000/s"),
			 -EINVAL);
	assert_int_equal(conf_text(&c, "limit.burst = 3"), -EINVAL); /* no rate */

	/* format writes what parses back to the same configuration */
	assert_int_equal(conf_text(&c, "limit.rate = 5/2m; limit.burst = 7; limit.algorithm = "
				       "sliding; limit.keys = 64; limit.when_full = admit; "
				       "limit.wait = 1500ms; limit.dry_run = on"),
			 0);
	assert_true(resil_limit_conf_format(&c, buf, sizeof(buf)) < sizeof(buf));
	assert_non_null(strstr(buf, "limit.rate = 5/2m\n"));
	assert_non_null(strstr(buf, "limit.wait = 1500ms\n"));
	assert_non_null(strstr(buf, "limit.dry_run = yes\n"));
	resil_limit_conf_defaults(&d);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " = ");

		assert_non_null(eq);
		*eq = '\0';
		assert_int_equal(resil_limit_conf_set(&d, line, eq + 3, err, sizeof(err)), 0);
	}
	assert_memory_equal(&c, &d, sizeof(c));
	/* snprintf semantics when the buffer is short */
	assert_true(resil_limit_conf_format(&c, buf, 8) > 8);
	assert_int_equal(strlen(buf), 7);
}

/* ------------------------------------------------------------- GCRA */

static void test_gcra_rate_burst(void **unused)
{
	struct fx f;
	int64_t w;
	uint64_t before;
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.burst = 3", 1000 * S);
	for (i = 0; i < 3; i++)
		assert_int_equal(acq(&f, NULL, &w), 0);
	before = atomic_load(&f.st->word);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 100 * MS);			    /* exact Retry-After */
	assert_int_equal(atomic_load(&f.st->word), before); /* a rejection writes nothing */
	f.now += 100 * MS - 1;
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 1);
	f.now += 1;
	assert_int_equal(acq(&f, NULL, &w), 0);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 100 * MS);

	/* a steady caller gets exactly rate x elapsed (+ burst) */
	{
		int admitted = 0;
		int64_t t0 = f.now;

		for (i = 0; i < 10000; i++) {
			f.now = t0 + (int64_t)i * MS;
			admitted += acq(&f, NULL, NULL) == 0;
		}
		/* 10 s at 10/s: one every 100 ms from t0 + 100 ms, the last at t0 + 9.9 s */
		assert_int_equal(admitted, 99);
	}
	/* idle refills the burst, no more */
	f.now += 10 * S;
	for (i = 0; i < 3; i++)
		assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	fx_fini(&f);
}

static void test_gcra_translations(void **unused)
{
	struct fx f;
	int64_t w, t0;
	int i, n;

	(void)unused;
	/* limit per period: 5 per 2 minutes -> rate 5/2m, burst 5 */
	fx_init(&f, "limit.rate = 5/2m; limit.burst = 5", 0);
	for (i = 0; i < 5; i++)
		assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 24 * S);
	/* ... and, docs/configuration.md's warning, up to 2 x 5 in the first period */
	for (n = 5, t0 = 0; t0 < 2 * 60 * S; t0 += S) {
		f.now = t0;
		n += acq(&f, NULL, NULL) == 0;
	}
	assert_int_equal(n, 9); /* 5 at once, then at 24, 48, 72, 96 s: < 2 x 5 */
	f.now = 2 * 60 * S;
	assert_int_equal(acq(&f, NULL, NULL), 0); /* the 10th at exactly 120 s */
	fx_fini(&f);

	/* token bucket: capacity 4, refill 2/s -> rate 2/s, burst 4 */
	fx_init(&f, "limit.rate = 2/s; limit.burst = 4", 50 * S);
	for (i = 0; i < 4; i++)
		assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 500 * MS);
	f.now += S; /* two tokens refilled */
	assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	fx_fini(&f);
}

static void test_gcra_reservation(void **unused)
{
	struct resil_permit_priv pm;
	struct fx f;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.wait = 250ms", 7 * S);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_int_equal(resil_limit_reserved_wait(&pm), 0);
	assert_false(pm.flags & RESIL_PERMIT_LIMIT_WAIT);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_true(pm.flags & RESIL_PERMIT_LIMIT_WAIT);
	assert_int_equal(resil_limit_reserved_wait(&pm), 100 * MS);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_int_equal(resil_limit_reserved_wait(&pm), 200 * MS);
	/* 300 ms > limit.wait: rejected, nothing reserved, exact Retry-After */
	assert_int_equal(acq_n(&f, NULL, 1, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(pm.wait_ns, 300 * MS);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(pm.wait_ns, 300 * MS);
	/* a reserved permit given back frees its turn */
	f.now += 50 * MS;
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_int_equal(resil_limit_reserved_wait(&pm), 250 * MS);
	undo(&f, NULL, &pm);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_int_equal(resil_limit_reserved_wait(&pm), 250 * MS);
	fx_fini(&f);
}

static void test_gcra_permits_undo(void **unused)
{
	struct resil_permit_priv a, b, pm;
	struct fx f;
	int64_t tat;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.burst = 5", 3 * S);
	assert_int_equal(acq_n(&f, NULL, 3, &pm), 0);
	assert_int_equal(acq_n(&f, NULL, 3, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(pm.wait_ns, 100 * MS);
	assert_int_equal(acq_n(&f, NULL, 2, &pm), 0);
	assert_int_equal(acq_n(&f, NULL, 6, &pm), -E2BIG); /* never possible */
	fx_fini(&f);

	/* undo gives back exactly what was taken, also with admissions between */
	fx_init(&f, "limit.rate = 10/s; limit.burst = 2", 3 * S);
	assert_int_equal(acq_n(&f, NULL, 1, &a), 0);
	assert_int_equal(acq_n(&f, NULL, 1, &b), 0);
	tat = (int64_t)atomic_load(&f.st->word);
	assert_int_equal(tat, 3 * S + 200 * MS);
	undo(&f, NULL, &a);
	assert_int_equal((int64_t)atomic_load(&f.st->word), 3 * S + 100 * MS);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0); /* a's permit is free again */
	assert_int_equal(acq_n(&f, NULL, 1, &pm), RESIL_REJECT_LIMITED);
	undo(&f, NULL, &b);
	undo(&f, NULL, &b); /* twice is harmless: the flag is cleared */
	assert_int_equal((int64_t)atomic_load(&f.st->word), 3 * S + 100 * MS);
	/* an undo never takes the TAT below now (no credit for the past) */
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_int_equal((int64_t)atomic_load(&f.st->word), 3 * S + 200 * MS);
	f.now += 150 * MS;
	undo(&f, NULL, &pm);
	assert_int_equal((int64_t)atomic_load(&f.st->word), 3 * S + 150 * MS);
	fx_fini(&f);
}

static void test_gcra_clock_backwards(void **unused)
{
	struct fx f;
	int64_t w, tat;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.burst = 2", 10 * S);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	tat = (int64_t)atomic_load(&f.st->word);
	/* a reading 5 s stale: rejected, a sane wait, nothing written */
	f.now = 5 * S;
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_true(w > 0 && w <= 300 * MS);
	assert_int_equal((int64_t)atomic_load(&f.st->word), tat);
	/* a TAT 9 s ahead is left alone (a reading may be that stale) ... */
	f.now = 20 * S;
	atomic_store(&f.st->word, (uint64_t)(29 * S));
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(atomic_load(&f.st->word), 29 * S);
	assert_int_equal(atomic_load(&f.st->heals), 0);
	/* ... a corrupt one far ahead: a bounded wait, and the caller heals it
	 * to "full at now"; the daemon never touches it (manual clocks) */
	atomic_store(&f.st->word, (uint64_t)(1000000 * S));
	f.x.now = 0;
	resil_limit_maintain(&f.x, &f.c, f.st);
	assert_int_equal(atomic_load(&f.st->word), 1000000 * S);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_true(w <= 300 * MS);
	assert_int_equal(atomic_load(&f.st->heals), 1);
	assert_int_equal(atomic_load(&f.st->word), 20 * S + 200 * MS);
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);

	/* the same for a sliding ring */
	fx_fini(&f);
	fx_init(&f, "limit.rate = 2/s; limit.algorithm = sliding", 10 * S);
	atomic_store(&((rai64 *)(void *)f.st->data)[0], 1000000 * S + (1LL << 62));
	/* healed to "an admission now", and the next slot admits */
	assert_int_equal(acq(&f, NULL, &w), 0);
	assert_int_equal(atomic_load(&f.st->heals), 1);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, S);
	f.now += S;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	fx_fini(&f);
}

/* ---------------------------------------------------------- sliding */

/* every half-open span [t_i, t_i + P) of sorted times holds at most lim */
static int max_in_span(const int64_t *t, int n, int64_t P)
{
	int i, j = 0, best = 0;

	for (i = 0; i < n; i++) {
		while (t[j] <= t[i] - P)
			j++;
		if (i - j + 1 > best)
			best = i - j + 1;
	}
	return best;
}

static void test_sliding_exact(void **unused)
{
	enum { NARR = 20000 };
	static int64_t adm[NARR];
	struct fx f, g;
	int i, n = 0, ng = 0, checked = 0;
	int64_t w;

	(void)unused;
	rng_state = 42;
	fx_init(&f, "limit.rate = 5/s; limit.algorithm = sliding", 0);
	fx_init(&g, "limit.rate = 5/s; limit.burst = 5", 0); /* gcra, same numbers */
	for (i = 0; i < NARR; i++) {
		/* bursts and gaps: 0..400 ms, often 0 */
		uint64_t r = rnd();

		f.now += (r & 3) ? (int64_t)(r >> 40) % (40 * MS) : (int64_t)(r >> 40) % (400 * MS);
		g.now = f.now;
		if (acq(&f, NULL, &w) == 0) {
			adm[n++] = f.now;
		} else if (checked < 200 && (rnd() & 7) == 0) {
			/* the Retry-After is exact: 1 ns earlier still rejected, then admitted */
			int64_t save = f.now;

			assert_true(w > 0 && w <= S);
			f.now = save + w - 1;
			if (w > 1)
				assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
			f.now = save + w;
			assert_int_equal(acq(&f, NULL, NULL), 0);
			adm[n++] = f.now;
			checked++;
		}
		ng += acq(&g, NULL, NULL) == 0;
	}
	assert_true(checked > 50);
	assert_true(n > 1000);
	assert_int_equal(max_in_span(adm, n, S), 5);
	(void)ng;
	fx_fini(&f);
	fx_fini(&g);

	/* GCRA with burst = limit admits 2 x limit in the first period; sliding never */
	fx_init(&g, "limit.rate = 5/s; limit.burst = 5", 0);
	fx_init(&f, "limit.rate = 5/s; limit.algorithm = sliding", 0);
	for (ng = n = 0, i = 0; i < 1000; i++) {
		g.now = f.now = (int64_t)i * MS;
		ng += acq(&g, NULL, NULL) == 0;
		n += acq(&f, NULL, NULL) == 0;
	}
	assert_int_equal(ng, 9);
	assert_int_equal(n, 5);
	fx_fini(&f);
	fx_fini(&g);
}

static void test_sliding_permits_undo_repair(void **unused)
{
	struct resil_permit_priv pm, a;
	struct fx f;
	rai64 *ring;
	int64_t w;
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 4/s; limit.algorithm = sliding; limit.wait = 300ms", 10 * S);
	ring = (rai64 *)(void *)f.st->data;
	assert_int_equal(acq_n(&f, NULL, 3, &a), 0);
	assert_int_equal(resil_limit_reserved_wait(&a), 0);
	f.now += 100 * MS;
	assert_int_equal(acq_n(&f, NULL, 2, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(pm.wait_ns, 900 * MS); /* the 2nd oldest frees at 11 s */
	assert_int_equal(acq_n(&f, NULL, 5, &pm), -E2BIG);
	/* undo frees the three slots */
	undo(&f, NULL, &a);
	assert_int_equal(acq_n(&f, NULL, 4, &pm), 0);
	/* reservation: the oldest frees at 11.1 s, 250 ms <= 300 ms */
	f.now = 10 * S + 850 * MS;
	for (i = 0; i < 4; i++) {
		assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
		assert_int_equal(resil_limit_reserved_wait(&pm), 250 * MS);
	}
	/* the ring now holds 4 x 11.1 s: the next slot frees at 12.1 s */
	assert_int_equal(acq_n(&f, NULL, 1, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(pm.wait_ns, 12 * S + 100 * MS - f.now);

	/* a writer killed between its slot CAS and the advance of S: the next
	 * caller sees S one behind and repairs it */
	fx_fini(&f);
	fx_init(&f, "limit.rate = 3/s; limit.algorithm = sliding", 10 * S);
	ring = (rai64 *)(void *)f.st->data;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 10 * MS;
	atomic_store(&ring[1], f.now + (1LL << 62)); /* claimed, S not advanced */
	assert_int_equal(atomic_load(&f.st->word), 1);
	f.now += 10 * MS;
	assert_int_equal(acq(&f, NULL, &w), 0); /* slot 2 */
	assert_int_equal(atomic_load(&f.st->word), 3);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, S - 20 * MS); /* the oldest (10 s) frees at 11 s */
	fx_fini(&f);
}

/* ------------------------------------------------------------ keyed */

static void test_keyed_independent(void **unused)
{
	struct fx f;
	int64_t w, tat;
	char k[32];
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 1/s; limit.burst = 2; limit.keys = 16", 100 * S);
	assert_int_equal(acq(&f, "10.0.0.1", NULL), 0);
	assert_int_equal(acq(&f, "10.0.0.1", NULL), 0);
	assert_int_equal(acq(&f, "10.0.0.1", &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, S);
	assert_int_equal(acq(&f, "10.0.0.2", NULL), 0); /* another key: its own burst */
	assert_int_equal(acq(&f, "10.0.0.2", NULL), 0);
	assert_int_equal(acq(&f, "10.0.0.2", NULL), RESIL_REJECT_LIMITED);
	/* keys are byte strings: embedded NULs, binary */
	for (i = 0; i < 4; i++) {
		struct resil_permit_priv pm;
		char bin[4] = {0, (char)i, 0, 0};

		memset(&pm, 0, sizeof(pm));
		f.x.now = 0;
		f.x.key = bin;
		f.x.key_len = sizeof(bin);
		assert_int_equal(resil_limit_acquire(&f.x, &f.c, f.st, &pm), 0);
	}
	f.x.now = 0;
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "10.0.0.1", 8, &tat, &w), 0);
	assert_int_equal(tat, 102 * S);
	assert_int_equal(w, S);
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "10.0.0.9", 8, &tat, &w), -ENOENT);
	snprintf(k, sizeof(k), "10.0.0.1");
	f.now += S;
	assert_int_equal(acq(&f, k, NULL), 0);
	fx_fini(&f);
}

static void test_keyed_fill_evict(void **unused)
{
	struct resil_limit_info info;
	struct fx f;
	char k[32];
	int64_t w;
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 1/s; limit.keys = 1000", 100 * S);
	/* at most 32 bytes of table per key of capacity */
	assert_true(resil_limit_state_size(&f.c) - sizeof(struct resil_limit_state) <= 32 * 1000);
	/* up to capacity: no key lost, no eviction, each keeps its state */
	for (i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "user-%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	for (i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "user-%d", i);
		assert_int_equal(acq(&f, k, &w), RESIL_REJECT_LIMITED);
		assert_int_equal(w, S);
	}
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 1000);
	assert_int_equal(info.capacity, 1000);
	assert_int_equal(info.evictions, 0);
	assert_int_equal(atomic_load(&f.st->used), 1000);
	/* full, every key being limited: when_full = reject decides, counted */
	assert_int_equal(acq(&f, "newcomer", &w), RESIL_REJECT_LIMITED);
	assert_true(w > 0 && w <= S);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.full_rejects, 1);
	assert_int_equal(info.size, 1000);
	/* half a second later the keys are still limited (1/s, burst 1) */
	f.now += S / 2;
	assert_int_equal(acq(&f, "newcomer", NULL), RESIL_REJECT_LIMITED);
	/* a second later they are idle: a new key evicts one (nothing lost) */
	f.now += S;
	assert_int_equal(acq(&f, "newcomer", NULL), 0);
	assert_int_equal(acq(&f, "newcomer", NULL), RESIL_REJECT_LIMITED); /* state kept */
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.evictions, 1);
	assert_int_equal(info.size, 1000);
	fx_fini(&f);

	/* when_full = admit */
	fx_init(&f, "limit.rate = 1/m; limit.keys = 8; limit.when_full = admit", 100 * S);
	for (i = 0; i < 8; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	for (i = 8; i < 20; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	resil_limit_info(&f.c, f.st, &info);
	assert_true(info.size <= 8);
	assert_int_equal(info.full_admits + info.size, 20);
	fx_fini(&f);

	/* LRU among keys not being limited: the one closest to fresh goes */
	fx_init(&f, "limit.rate = 1/s; limit.burst = 10; limit.keys = 2", 100 * S);
	for (i = 0; i < 3; i++)
		assert_int_equal(acq(&f, "heavy", NULL), 0);
	assert_int_equal(acq(&f, "light", NULL), 0);
	assert_int_equal(acq(&f, "third", NULL), 0); /* evicts light, keeps heavy */
	f.x.now = 0;
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "heavy", 5, &w, &w), 0);
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "light", 5, &w, &w), -ENOENT);
	fx_fini(&f);
}

/* Threads stand in for processes: same atomics, same protocol. */
struct race {
	struct fx *f;
	pthread_barrier_t *bar;
	int id;
	int admitted;
};

static void *race_main(void *arg)
{
	struct race *r = arg;
	struct resil_ctx x = r->f->x;
	struct resil_permit_priv pm;
	char k[32];
	int i;

	pthread_barrier_wait(r->bar);
	for (i = 0; i < 2000; i++) {
		if (r->f->c.keys < 2000)
			snprintf(k, sizeof(k), "t%d-key-%d", r->id, i); /* distinct keys */
		else
			snprintf(k, sizeof(k), "key-%d", i); /* the same keys */
		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		x.key = k;
		x.key_len = strlen(k);
		r->admitted += resil_limit_acquire(&x, &r->f->c, r->f->st, &pm) == 0;
	}
	return NULL;
}

/* Two threads run race_main on f at once (a barrier lines them up). */
static void race_run(struct fx *f, struct race r[2])
{
	pthread_barrier_t bar;
	pthread_t th[2];
	int i;

	pthread_barrier_init(&bar, NULL, 2);
	for (i = 0; i < 2; i++) {
		r[i] = (struct race){.f = f, .bar = &bar, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, race_main, &r[i]), 0);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
}

/* A key's first bucket: bits 31..62 of its fingerprint, scaled, reach
 * every bucket; its second is another bucket. */
static void test_key_buckets(void **unused)
{
	struct resil_limit_conf c;
	static bool hit[500];
	uint32_t nb, reached = 0;
	struct chain ch;

	(void)unused;
	assert_int_equal(conf_text(&c, "limit.rate = 10/s; limit.keys = 1000"), 0);
	nb = nbuckets(&c);
	rng_state = 7;
	for (int i = 0; i < 20000; i++) {
		uint64_t fp = (rnd() >> 1) | 2;

		chain_init(&ch, fp, &c);
		assert_int_equal(ch.b1, (uint32_t)(((fp >> 31) * nb) >> 32));
		assert_true(ch.b2 < nb && ch.b2 != ch.b1);
		reached += !hit[ch.b1];
		hit[ch.b1] = true;
	}
	assert_int_equal(reached, nb);
}

/* A table filled to its capacity with keys nobody is limited on: the keys
 * go to their own two buckets, next to no key is evicted to make room
 * (an idle key is the victim of choice when both buckets are full), and
 * every key is found again without one. */
static void test_keyed_fill_spread(void **unused)
{
	struct fx f;
	char key[16];

	(void)unused;
	fx_init(&f, "limit.rate = 1000000000/s; limit.burst = 1000000; limit.keys = 1000", 100 * S);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 1000; i++) {
			snprintf(key, sizeof(key), "10.0.%d.%d", i / 256, i % 256);
			assert_int_equal(acq(&f, key, NULL), RESIL_ADMIT);
			f.now += 50;
		}
		if (round == 0)
			assert_true(ld_relaxed(&f.st->evictions) <= 10);
		else
			print_message("keys 1000 of 1000: %" PRIu64 " evictions, %" PRIu64
				      " in use\n",
				      (uint64_t)ld_relaxed(&f.st->evictions),
				      (uint64_t)ld_relaxed(&f.st->used));
	}
	assert_true(ld_relaxed(&f.st->evictions) <= 10);
	fx_fini(&f);
}

/* Where a bucket of the chain of fp lies: its index among the first n,
 * or -1. */
static int on_chain(const struct resil_limit_conf *c, uint64_t fp, uint32_t bucket, uint32_t n)
{
	struct chain ch;

	chain_init(&ch, fp, c);
	for (uint32_t k = 0; k < n && k <= ch.nb; k++)
		if (chain_bucket(&ch, k) == bucket)
			return (int)k;
	return -1;
}

/* A copy of a key in neither of its two buckets (no bucket is marked
 * FP_OVF: no chain goes further) is what no lookup reaches: the daemon's
 * tick folds it away and keeps the entry lookups find. */
static void test_keyed_stray_folded(void **unused)
{
	struct resil_limit_entry *t;
	struct chain ch;
	struct fx f;
	const char *key = "198.51.100.7";
	uint64_t fp;
	uint32_t b1, stray, nb;

	(void)unused;
	fx_init(&f, "limit.rate = 1/s; limit.keys = 64", 100 * S);
	t = (struct resil_limit_entry *)(void *)f.st->data;
	nb = nbuckets(&f.c);
	fp = resil_limit_priv_key_fp(NULL, key, strlen(key));
	chain_init(&ch, fp, &f.c);
	b1 = ch.b1;
	assert_int_equal(acq(&f, key, NULL), RESIL_ADMIT);
	assert_int_equal(atomic_load(&t[b1 * RESIL_LIMIT_BUCKET].fp), fp);
	for (stray = 0; stray < nb; stray++)
		if (on_chain(&f.c, fp, stray, 2) < 0)
			break;
	assert_true(stray < nb);
	atomic_store(&t[stray * RESIL_LIMIT_BUCKET + 3].fp, fp);
	atomic_store(&t[stray * RESIL_LIMIT_BUCKET + 3].st, (uint64_t)f.now);
	atomic_fetch_add(&f.st->used, 1);
	f.x.now = 0;
	resil_limit_maintain(&f.x, &f.c, f.st);
	assert_int_not_equal(atomic_load(&t[stray * RESIL_LIMIT_BUCKET + 3].fp), fp);
	assert_int_equal(atomic_load(&f.st->merges), 1);
	assert_int_equal(atomic_load(&t[b1 * RESIL_LIMIT_BUCKET].fp), fp);
	/* the key still limits: its entry kept the admission */
	assert_int_equal(acq(&f, key, NULL), RESIL_REJECT_LIMITED);
	fx_fini(&f);
}

static void test_keyed_same_key_race(void **unused)
{
	struct resil_limit_info info;
	struct race r[2];
	struct fx f;
	int round;

	(void)unused;
	for (round = 0; round < 5; round++) {
		fx_init(&f, "limit.rate = 1/h; limit.keys = 4096", 100 * S);
		race_run(&f, r);
		resil_limit_info(&f.c, f.st, &info);
		assert_int_equal(info.size, 2000); /* one entry per key */
		assert_int_equal(atomic_load(&f.st->used), 2000);
		/* burst 1: each key admitted once, whoever came first (a merge may
		 * forget at most the admission made through the losing entry) */
		assert_true(r[0].admitted + r[1].admitted >= 2000);
		assert_true(r[0].admitted + r[1].admitted <= 2000 + (int)info.merges);
		fx_fini(&f);

		/* concurrent inserters of different keys never exceed capacity */
		fx_init(&f, "limit.rate = 1/h; limit.keys = 64", 100 * S);
		race_run(&f, r);
		resil_limit_info(&f.c, f.st, &info);
		assert_int_equal(info.size, 64);
		assert_int_equal(atomic_load(&f.st->used), 64);
		assert_int_equal(r[0].admitted + r[1].admitted, 64);
		assert_int_equal(info.full_rejects, 4000 - 64);
		fx_fini(&f);
	}
}

/* ---------------------------------------------------- sliding-approx */

static void test_approx_bound(void **unused)
{
	enum { NARR = 40000, L = 10 };
	static int64_t adm[NARR];
	struct fx f;
	int i, n = 0, worst;
	int64_t w, t;

	(void)unused;
	/* random arrivals: never more than 2L - 1 in any span of a period */
	rng_state = 7;
	fx_init(&f, "limit.rate = 10/s; limit.algorithm = sliding-approx", 0);
	for (i = 0; i < NARR; i++) {
		uint64_t r = rnd();

		f.now += (r & 1) ? (int64_t)(r >> 40) % (30 * MS) : (int64_t)(r >> 40) % (300 * MS);
		if (acq(&f, NULL, &w) == 0)
			adm[n++] = f.now;
	}
	assert_true(n > 1000);
	worst = max_in_span(adm, n, S);
	assert_true(worst <= 2 * L - 1);
	fx_fini(&f);

	/* the adversary: L admissions at the very end of a window, then at
	 * each instant e of the next window as many as the estimate allows.
	 * Every count obeys count <= L + floor(prev * e / P) <= 2L - 1. */
	fx_init(&f, "limit.rate = 10/s; limit.algorithm = sliding-approx; limit.keys = 4", 0);
	f.now = 10 * S - 1;
	for (i = 0; i < L; i++)
		assert_int_equal(acq(&f, "adv", NULL), 0);
	assert_int_equal(acq(&f, "adv", &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 1 + S / 10); /* next window, once the weight fell to 9/10 */
	n = L;
	for (t = 10 * S; t < 11 * S - 1; t += MS) {
		f.now = t;
		while (acq(&f, "adv", NULL) == 0)
			n++;
		/* the span (t - P, t] holds all L of the previous window */
		assert_true(n <= L + (L * (t - 10 * S)) / S);
	}
	assert_int_equal(n, 2 * L - 1); /* the bound is reached */
	fx_fini(&f);

	/* undo within the window and after it turned */
	fx_init(&f, "limit.rate = 2/s; limit.algorithm = sliding-approx", 0);
	{
		struct resil_permit_priv a, b;

		assert_int_equal(acq_n(&f, NULL, 1, &a), 0);
		assert_int_equal(acq_n(&f, NULL, 1, &b), 0);
		assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
		undo(&f, NULL, &a);
		assert_int_equal(acq(&f, NULL, NULL), 0);
		f.now = S; /* next window: the previous one weighs fully */
		assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
		undo(&f, NULL, &b); /* counted in the previous window now */
		assert_int_equal(acq(&f, NULL, NULL), 0);
	}
	fx_fini(&f);
}

/* ------------------------------------------------------------ dry run */

/* The decision state: line 0 (the word) and the ring or table; line 1
 * holds the counters, which a rejection may move. */
struct snap {
	uint64_t word;
	uint8_t *data;
	size_t len;
};

static void snap_take(struct fx *f, struct snap *sn)
{
	sn->word = atomic_load(&f->st->word);
	sn->len = resil_limit_state_size(&f->c) - sizeof(struct resil_limit_state);
	sn->data = malloc(sn->len + 1);
	assert_non_null(sn->data);
	memcpy(sn->data, f->st->data, sn->len);
}

/* The state is what sn holds; frees sn. */
static void snap_same(struct fx *f, struct snap *sn)
{
	assert_int_equal(atomic_load(&f->st->word), sn->word);
	assert_memory_equal(f->st->data, sn->data, sn->len);
	free(sn->data);
}

static uint64_t dry_count(struct fx *f)
{
	struct resil_limit_info info;

	resil_limit_info(&f->c, f->st, &info);
	assert_int_equal(info.dry_run_rejects, resil_limit_dry_run_rejects(f->st));
	return info.dry_run_rejects;
}

/* A would-be rejection admitted by dry run: a permit with nothing of the
 * limiter in it. */
static void dry_admitted(struct fx *f, const char *key, uint32_t n)
{
	struct resil_permit_priv pm;
	struct snap sn;
	uint64_t before = dry_count(f);

	snap_take(f, &sn);
	assert_int_equal(acq_n(f, key, n, &pm), 0);
	assert_false(pm.flags & (RESIL_PERMIT_LIMIT | RESIL_PERMIT_LIMIT_WAIT));
	assert_int_equal(pm.key_idx, 0);
	assert_int_equal(pm.wait_ns, 0);
	assert_int_equal(resil_limit_reserved_wait(&pm), 0);
	/* undo (a later component rejected) gives nothing back */
	undo(f, key, &pm);
	snap_same(f, &sn);
	assert_int_equal(dry_count(f), before + 1);
}

static void test_dry_run_gcra(void **unused)
{
	struct resil_permit_priv pm;
	struct fx f, g;
	int64_t w;
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.burst = 2; limit.dry_run = yes", 1000 * S);
	fx_init(&g, "limit.rate = 10/s; limit.burst = 2", 1000 * S); /* the same, enforcing */
	assert_int_equal(dry_count(&f), 0);
	/* five at one instant: the burst passes as usual, the rest as dry run */
	for (i = 0; i < 5; i++) {
		if (i < 2) {
			assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
			assert_true(pm.flags & RESIL_PERMIT_LIMIT);
			assert_int_equal(acq(&g, NULL, NULL), 0);
		} else {
			dry_admitted(&f, NULL, 1);
			assert_int_equal(acq(&g, NULL, &w), RESIL_REJECT_LIMITED);
			assert_int_equal(w, 100 * MS);
		}
	}
	assert_int_equal(dry_count(&f), 3);
	/* the TAT two admissions give, as without dry run */
	assert_int_equal(atomic_load(&f.st->word), 1000 * S + 200 * MS);
	assert_int_equal(atomic_load(&f.st->word), atomic_load(&g.st->word));

	/* dry run off, live (the same state): the next call at the same
	 * instant is rejected with the ordinary Retry-After */
	assert_int_equal(conf_text(&f.c, "limit.rate = 10/s; limit.burst = 2"), 0);
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 100 * MS);
	assert_int_equal(dry_count(&f), 3);
	/* and on again: an admission is an ordinary one */
	f.c.dry_run = 1;
	f.now += 100 * MS;
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_true(pm.flags & RESIL_PERMIT_LIMIT);
	assert_int_equal(atomic_load(&f.st->word), 1000 * S + 300 * MS);
	dry_admitted(&f, NULL, 1);
	/* several permits that do not fit now: dry run; more than the
	 * configuration can ever give: still an error */
	dry_admitted(&f, NULL, 2);
	assert_int_equal(acq_n(&f, NULL, 3, &pm), -E2BIG);
	assert_int_equal(dry_count(&f), 5);
	fx_fini(&f);
	fx_fini(&g);
}

/* The lean acquire (resil_limit_acquire_gcra) decides as the general one:
 * twin states under random permits, times (forward, backward, same
 * instant), undo, dry run, reservations and a scribbled TAT give the same
 * result, permit fields, word and counts at every step. */
static void test_lean_gcra_twin(void **unused)
{
	static const char *const confs[] = {
	    "limit.rate = 10/s; limit.burst = 3",
	    "limit.rate = 1000000/s; limit.burst = 5",
	    "limit.rate = 7/s; limit.burst = 2; limit.dry_run = yes",
	    "limit.rate = 5/s; limit.burst = 1; limit.wait = 300ms",
	    "limit.rate = 100/1500ms",
	};

	uint64_t heals = 0;

	(void)unused;
	rng_state = 17;
	for (size_t k = 0; k < sizeof(confs) / sizeof(confs[0]); k++) {
		int admitted = 0, rejected = 0;
		struct fx f, g;

		fx_init(&f, confs[k], 1000 * S);
		fx_init(&g, confs[k], 1000 * S);
		assert_true(resil_limit_lean_gcra(&f.c, RESIL_SCOPE_FLEET));
		assert_false(resil_limit_lean_gcra(&f.c, RESIL_SCOPE_GLOBAL));
		for (int i = 0; i < 20000; i++) {
			struct resil_permit_priv a, b;
			uint32_t n = rnd() % 8 ? 1 : 1 + (uint32_t)(rnd() % 4);
			int64_t now = -1;
			int va, vb;

			switch (rnd() % 8) {
			case 0:
				break; /* the same instant */
			case 1:
				f.now -= (int64_t)(rnd() % (50 * MS)); /* backwards */
				break;
			default:
				f.now += (int64_t)(rnd() % (200 * MS));
			}
			if (rnd() % 4096 == 0) /* a client's scribble: healed alike */
				atomic_store(&f.st->word, INT64_MAX);
			g.now = f.now;
			atomic_store(&g.st->word, atomic_load(&f.st->word));
			va = acq_n(&f, NULL, n, &a);
			memset(&b, 0, sizeof(b));
			b.limit_permits = n;
			vb = resil_limit_acquire_gcra(&g.x.clock, &g.c, g.st, &b, &now);
			assert_int_equal(va, vb);
			assert_memory_equal(&a, &b, sizeof(a));
			assert_int_equal(atomic_load(&f.st->word), atomic_load(&g.st->word));
			assert_int_equal(atomic_load(&f.st->heals), atomic_load(&g.st->heals));
			assert_int_equal(atomic_load(&f.st->dry_run_rejects),
					 atomic_load(&g.st->dry_run_rejects));
			/* the precise reading comes back, a coarse one does not */
			assert_true(now == 0 || now == f.now);
			admitted += va == 0;
			rejected += va == RESIL_REJECT_LIMITED;
			if (va == 0 && rnd() % 4 == 0)
				undo(&f, NULL, &a);
		}
		/* both outcomes were compared (dry run: its admissions instead) */
		assert_true(admitted > 100);
		assert_true(rejected > 100 || f.c.dry_run);
		heals += atomic_load(&f.st->heals);
		fx_fini(&f);
		fx_fini(&g);
	}
	assert_true(heals > 0);
}

static void test_dry_run_keyed(void **unused)
{
	struct resil_limit_info info;
	struct resil_permit_priv pm;
	struct fx f;
	int64_t w, tat;

	(void)unused;
	/* per key: each key's burst passes, the rest is counted */
	fx_init(&f, "limit.rate = 1/s; limit.burst = 2; limit.keys = 16; limit.dry_run = yes",
		100 * S);
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "10.0.0.2" : "10.0.0.1";

		for (int i = 0; i < 2; i++) {
			assert_int_equal(acq_n(&f, key, 1, &pm), 0);
			assert_true(pm.flags & RESIL_PERMIT_LIMIT);
			assert_true(pm.key_idx > 0);
		}
		dry_admitted(&f, key, 1);
		dry_admitted(&f, key, 1);
		f.x.now = 0;
		assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, key, 8, &tat, &w), 0);
		assert_int_equal(tat, 102 * S); /* two admissions' worth */
		assert_int_equal(w, S);
	}
	assert_int_equal(dry_count(&f), 4);
	fx_fini(&f);

	/* a full table (one key, limited) refuses a new key: admitted, counted;
	 * the table says what the limiter decided */
	fx_init(&f, "limit.rate = 1/h; limit.keys = 1; limit.dry_run = yes", 100 * S);
	assert_int_equal(acq(&f, "holder", NULL), 0);
	dry_admitted(&f, "holder", 1);
	dry_admitted(&f, "newcomer", 1);
	dry_admitted(&f, "newcomer", 1);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.dry_run_rejects, 3);
	assert_int_equal(info.full_rejects, 2);
	assert_int_equal(info.full_admits, 0);
	assert_int_equal(info.size, 1);
	f.x.now = 0;
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "newcomer", 8, &tat, &w), -ENOENT);
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "holder", 6, &tat, &w), 0);
	/* a keyed limiter's call without a key is a mistake, not a dry run's
	 * admission (limit.default_key names a key for such calls) */
	assert_int_equal(acq(&f, NULL, NULL), -EINVAL);
	assert_int_equal(dry_count(&f), 3);
	fx_fini(&f);

	/* sliding-approx keys: the count stays at what was admitted */
	fx_init(&f,
		"limit.rate = 2/s; limit.algorithm = sliding-approx; limit.keys = 4; "
		"limit.dry_run = yes",
		10 * S);
	assert_int_equal(acq(&f, "k", NULL), 0);
	assert_int_equal(acq(&f, "k", NULL), 0);
	dry_admitted(&f, "k", 1);
	f.x.now = 0;
	assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "k", 1, &tat, &w), 0);
	assert_int_equal(tat, 2);
	assert_int_equal(dry_count(&f), 1);
	fx_fini(&f);
}

static void test_dry_run_sliding(void **unused)
{
	struct resil_permit_priv pm;
	struct fx f;
	int64_t w;

	(void)unused;
	/* a full period admits and counts; the ring keeps only real admissions */
	fx_init(&f, "limit.rate = 3/s; limit.algorithm = sliding; limit.dry_run = yes", 5 * S);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
		assert_true(pm.flags & RESIL_PERMIT_LIMIT);
		f.now += 100 * MS;
	}
	dry_admitted(&f, NULL, 1);
	dry_admitted(&f, NULL, 2);
	assert_int_equal(dry_count(&f), 2);
	/* enforcing again: the oldest admission frees its slot at 6 s */
	f.c.dry_run = 0;
	assert_int_equal(acq(&f, NULL, &w), RESIL_REJECT_LIMITED);
	assert_int_equal(w, 6 * S - f.now);
	f.now = 6 * S;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	fx_fini(&f);

	/* unkeyed sliding-approx */
	fx_init(&f, "limit.rate = 2/s; limit.algorithm = sliding-approx; limit.dry_run = yes", 0);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	dry_admitted(&f, NULL, 1);
	assert_int_equal(dry_count(&f), 1);
	fx_fini(&f);
}

/* limit.wait under dry run: no reservation, nobody waits; counted */
static void test_dry_run_wait(void **unused)
{
	struct resil_permit_priv pm;
	struct fx f;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.wait = 1s; limit.dry_run = yes", 7 * S);
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_true(pm.flags & RESIL_PERMIT_LIMIT);
	assert_int_equal(resil_limit_reserved_wait(&pm), 0);
	/* would have waited 100 ms, 200 ms: goes at once, nothing reserved */
	dry_admitted(&f, NULL, 1);
	dry_admitted(&f, NULL, 1);
	/* several permits within what limit.wait could give: the same; more
	 * than tau + wait can ever give: -E2BIG */
	dry_admitted(&f, NULL, 5);
	assert_int_equal(acq_n(&f, NULL, 12, &pm), -E2BIG);
	assert_int_equal(dry_count(&f), 3);
	assert_int_equal(atomic_load(&f.st->word), 7 * S + 100 * MS);
	/* dry run off: the reservation comes back, on the same state */
	f.c.dry_run = 0;
	assert_int_equal(acq_n(&f, NULL, 1, &pm), 0);
	assert_true(pm.flags & RESIL_PERMIT_LIMIT_WAIT);
	assert_int_equal(resil_limit_reserved_wait(&pm), 100 * MS);
	fx_fini(&f);

	/* sliding with a wait: the same */
	fx_init(&f,
		"limit.rate = 1/s; limit.algorithm = sliding; limit.wait = 2s; "
		"limit.dry_run = yes",
		0);
	assert_int_equal(acq(&f, NULL, NULL), 0);
	dry_admitted(&f, NULL, 1);
	assert_int_equal(dry_count(&f), 1);
	fx_fini(&f);
}

/* -------------------------------------------- shape, carry, maintain */

static void test_shape_carry(void **unused)
{
	struct resil_limit_conf a, b;
	struct fx f, g;
	char k[32];
	int i;

	(void)unused;
	assert_int_equal(conf_text(&a, "limit.rate = 10/s; limit.keys = 100"), 0);
	assert_int_equal(conf_text(&b, "limit.rate = 50/m; limit.burst = 9; limit.wait = 1s; "
				       "limit.when_full = admit; limit.keys = 100"),
			 0);
	assert_true(resil_limit_same_shape(&a, &b));
	assert_int_equal(conf_text(&b, "limit.rate = 10/s; limit.keys = 200"), 0);
	assert_false(resil_limit_same_shape(&a, &b));
	assert_int_equal(conf_text(&b, "limit.rate = 10/s; limit.keys = 100; limit.algorithm = "
				       "sliding-approx"),
			 0);
	assert_false(resil_limit_same_shape(&a, &b));
	assert_int_equal(conf_text(&a, "limit.rate = 10/s; limit.algorithm = sliding"), 0);
	assert_int_equal(conf_text(&b, "limit.rate = 10/m; limit.algorithm = sliding"), 0);
	assert_true(resil_limit_same_shape(&a, &b));
	assert_int_equal(conf_text(&b, "limit.rate = 20/s; limit.algorithm = sliding"), 0);
	assert_false(resil_limit_same_shape(&a, &b));

	/* a new capacity carries the keys that hold information */
	fx_init(&f, "limit.rate = 1/s; limit.keys = 64", 100 * S);
	for (i = 0; i < 40; i++) {
		snprintf(k, sizeof(k), "c%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	fx_init(&g, "limit.rate = 1/s; limit.keys = 128", 100 * S);
	resil_limit_carry(g.st, &g.c, f.st, &f.c, 100 * S);
	for (i = 0; i < 40; i++) {
		snprintf(k, sizeof(k), "c%d", i);
		assert_int_equal(acq(&g, k, NULL), RESIL_REJECT_LIMITED);
	}
	assert_int_equal(atomic_load(&g.st->used), 40);
	fx_fini(&f);
	fx_fini(&g);

	/* the sliding ring keeps the newest times across a change of count */
	fx_init(&f, "limit.rate = 5/s; limit.algorithm = sliding", 10 * S);
	for (i = 0; i < 5; i++) {
		f.now = 10 * S + i * 100 * MS;
		assert_int_equal(acq(&f, NULL, NULL), 0);
	}
	fx_init(&g, "limit.rate = 3/s; limit.algorithm = sliding", 10 * S);
	resil_limit_carry(g.st, &g.c, f.st, &f.c, f.now);
	g.now = f.now;
	assert_int_equal(acq(&g, NULL, NULL), RESIL_REJECT_LIMITED);
	g.now = 11 * S + 200 * MS; /* the oldest carried (10.2 s) is a period old */
	assert_int_equal(acq(&g, NULL, NULL), 0);
	assert_int_equal(acq(&g, NULL, NULL), RESIL_REJECT_LIMITED);
	fx_fini(&f);
	fx_fini(&g);
}

/* An entry claimed by an inserter that has not taken its first permit yet
 * (state 0 under a key) is no victim for another inserter: evicting it
 * would make the first inserter's take land on the other key's state (a
 * race once seen with two threads on a full table). The sweep frees such
 * an entry only when a later tick still finds it untouched (its inserter
 * died), and a take in between starts fresh from the sweep's mark. */
static void test_inflight_insert_not_evicted(void **unused)
{
	struct resil_limit_info info;
	struct resil_limit_entry *t;
	struct fx f;
	int64_t n, e = -1;
	char k[16];

	(void)unused;
	fx_init(&f, "limit.rate = 1/h; limit.keys = 4", 100 * S);
	t = (struct resil_limit_entry *)(void *)f.st->data;
	n = 2 * 4; /* 4 keys: 2 buckets' worth of entries and more */
	for (int i = 0; i < 4; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	/* make one key look just claimed: fingerprint set, no permit taken */
	for (int64_t i = 0; i < n && e < 0; i++)
		if (atomic_load(&t[i].fp) > RESIL_LIMIT_FP_TOMB)
			e = i;
	assert_true(e >= 0);
	atomic_store(&t[e].st, 0);
	/* full, every other key limited: a new key is refused, not placed
	 * over the in-flight one */
	assert_int_equal(acq(&f, "new", NULL), RESIL_REJECT_LIMITED);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.evictions, 0);
	assert_int_equal(info.full_rejects, 1);
	/* the sweep marks it first, frees it on a later tick */
	f.now += 2 * S;
	resil_limit_maintain(&f.x, &f.c, f.st);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 4);
	f.now += 2 * S;
	resil_limit_maintain(&f.x, &f.c, f.st);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 3);
	/* and a take on a marked entry starts fresh: mark, then take */
	assert_int_equal(acq(&f, "new", NULL), 0);
	fx_fini(&f);
}

static void test_maintain_sweep(void **unused)
{
	struct resil_limit_info info;
	struct fx f;
	char k[32];
	int i;

	(void)unused;
	fx_init(&f, "limit.rate = 10/s; limit.keys = 32", 100 * S);
	for (i = 0; i < 20; i++) {
		snprintf(k, sizeof(k), "s%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	/* a writer killed mid-insert left `used` off by one */
	atomic_fetch_add(&f.st->used, 1);
	f.now += 500 * MS; /* idle, but not for SWEEP_SLACK yet */
	resil_limit_maintain(&f.x, &f.c, f.st);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 20);
	assert_int_equal(atomic_load(&f.st->used), 20);
	assert_int_equal(atomic_load(&f.st->repairs), 1);
	f.now += 2 * S;
	resil_limit_maintain(&f.x, &f.c, f.st);
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 0);
	assert_int_equal(atomic_load(&f.st->used), 0);
	assert_int_equal(atomic_load(&f.st->swept), 20);
	/* freed entries are reused */
	for (i = 0; i < 32; i++) {
		snprintf(k, sizeof(k), "t%d", i);
		assert_int_equal(acq(&f, k, NULL), 0);
	}
	resil_limit_info(&f.c, f.st, &info);
	assert_int_equal(info.size, 32);
	assert_int_equal(info.evictions, 0);
	fx_fini(&f);

	/* an inserter killed between its claim and its re-read left a twin:
	 * the tick folds it, whichever entry it sits in */
	for (i = 0; i < 8; i++) {
		struct resil_limit_entry *t;
		int64_t o = -1, k2, n = 64, tat, w; /* 32 keys: 64 entries */

		fx_init(&f, "limit.rate = 10/s; limit.burst = 3; limit.keys = 32", 100 * S);
		t = (struct resil_limit_entry *)(void *)f.st->data;
		assert_int_equal(acq(&f, "twin", NULL), 0);
		for (k2 = 0; k2 < n; k2++)
			if (atomic_load(&t[k2].fp) > RESIL_LIMIT_FP_TOMB)
				o = k2;
		assert_true(o >= 0);
		k2 = (o + 1 + i * 3) % n;
		atomic_store(&t[k2].fp, atomic_load(&t[o].fp));
		atomic_store(&t[k2].st, 100 * S + 300 * MS); /* 3 admissions there */
		atomic_store(&f.st->used, 2);
		f.x.now = 0;
		resil_limit_maintain(&f.x, &f.c, f.st);
		resil_limit_info(&f.c, f.st, &info);
		assert_int_equal(info.size, 1);
		assert_int_equal(info.merges, 1);
		assert_int_equal(atomic_load(&f.st->used), 1);
		/* folded by max: the key holds the larger state */
		f.x.now = 0;
		assert_int_equal(resil_limit_key_info(&f.x, &f.c, f.st, "twin", 4, &tat, &w), 0);
		assert_int_equal(tat, 100 * S + 300 * MS);
		fx_fini(&f);
	}
}

static void test_coarse_choice(void **unused)
{
	struct resil_permit_priv pm;
	struct resil_limit_conf c;
	struct resil_ctx x;
	uint64_t st[48] __attribute__((aligned(128)));
	int64_t res = resil_clock_coarse_resolution_ns();

	(void)unused;
	assert_true(res > 0);
	/* real clocks: slow rate (coarse) and fast rate (precise) both decide,
	 * and a fast limiter's second call within one coarse tick is rejected */
	assert_int_equal(conf_text(&c, "limit.rate = 1/s"), 0);
	assert_true(c.interval_ns >= RESIL_LIMIT_COARSE_FACTOR * res);
	memset(&x, 0, sizeof(x));
	resil_limit_state_init(st, &c, 0);
	memset(&pm, 0, sizeof(pm));
	assert_int_equal(resil_limit_acquire(&x, &c, st, &pm), 0);
	assert_int_equal(x.now, 0); /* the precise clock was not read */
	memset(&pm, 0, sizeof(pm));
	assert_int_equal(resil_limit_acquire(&x, &c, st, &pm), RESIL_REJECT_LIMITED);
	assert_true(pm.wait_ns > S - 2 * res && pm.wait_ns <= S);

	assert_int_equal(conf_text(&c, "limit.rate = 1000/s"), 0);
	resil_limit_state_init(st, &c, 0);
	memset(&pm, 0, sizeof(pm));
	assert_int_equal(resil_limit_acquire(&x, &c, st, &pm), 0);
	assert_true(x.now > 0); /* precise, cached in the ctx */
}

/* Keys are hashed with SipHash-1-3: the reference vectors (key 00..0f,
 * message 00..len-1), every tail length. */
static void test_siphash_vectors(void **state)
{
	static const uint64_t want[16] = {
	    0xabac0158050fc4dcULL, 0xc9f49bf37d57ca93ULL, 0x82cb9b024dc7d44dULL,
	    0x8bf80ab8e7ddf7fbULL, 0xcf75576088d38328ULL, 0xdef9d52f49533b67ULL,
	    0xc50d2b50c59f22a7ULL, 0xd3927d989bb11140ULL, 0x369095118d299a8eULL,
	    0x25a48eb36c063de4ULL, 0x79de85ee92ff097fULL, 0x70c118c1f94dc352ULL,
	    0x78a384b157b4d9a2ULL, 0x306f760c1229ffa7ULL, 0x605aa111c0f95d34ULL,
	    0xd320d86d2a519956ULL};
	uint64_t k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;
	uint8_t m[16];

	(void)state;
	for (int i = 0; i < 16; i++)
		m[i] = (uint8_t)i;
	for (size_t len = 0; len < 16; len++)
		assert_true(resil_hash64(m, len, k0, k1) == want[len]);
}

/*
 * policy.scope = global: the GCRA runs at the leased share until the
 * lease's expiry, then on the fallback the daemon wrote (the configured
 * rate, a rejection, or another interval), decided by the client alone.
 */
static void test_global_lease(void **state)
{
	struct resil_rec rec;
	struct fx f;
	int64_t wait;
	int n;

	(void)state;
	fx_init(&f, "limit.rate = 1000/s; limit.burst = 1", 1000 * S);
	memset(&rec, 0, sizeof(rec));
	rec.conf.scope = RESIL_SCOPE_GLOBAL;
	f.x.rec = &rec;

	/* no lease yet, fallback 0: the configured rate (1 ms apart) */
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);

	/* a lease of 100/s (10 ms) until now + 50 ms: 1 ms is too soon */
	resil_limit_lease_set(f.st, 10 * MS, f.now + 50 * MS, RESIL_LIMIT_FALLBACK_REJECT);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, &wait), RESIL_REJECT_LIMITED);
	assert_true(wait > 1 * MS);
	/* over 40 ms of the lease: about 4 admissions, never the 40 of the rate */
	n = 0;
	for (int i = 0; i < 40; i++) {
		f.now += 1 * MS;
		n += acq(&f, NULL, NULL) == 0;
	}
	assert_in_range(n, 3, 5);

	/* past the expiry, fallback reject: nothing, whatever the TAT */
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);

	/* a zero share under a live lease: nothing either */
	resil_limit_lease_set(f.st, 0, f.now + 50 * MS, 0);
	f.now += 10 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);

	/* expired with fallback 0: back to the configured rate */
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);

	/* a share above the configured rate (a client's write) is clamped
	 * to the configured interval; garbage reads as no share */
	resil_limit_lease_set(f.st, 1, f.now + 50 * MS, 0);
	f.now += 100 * 1000; /* 0.1 ms */
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	resil_limit_lease_set(f.st, -5, f.now + 50 * MS, 0);
	f.now += 10 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);

	/* a share that grows after a burst at a tiny one: the TAT's debt in
	 * the old T (seconds) does not hold the host back */
	f.now += 100 * MS;
	resil_limit_lease_set(f.st, 1 * S, f.now + 10 * S, 0);	/* 1/s */
	assert_int_equal(acq(&f, NULL, NULL), 0);		/* TAT 1 s ahead */
	resil_limit_lease_set(f.st, 1 * MS, f.now + 10 * S, 0); /* 1000/s */
	f.now += 2 * MS;
	n = 0;
	for (int i = 0; i < 10; i++) {
		f.now += 1 * MS;
		n += acq(&f, NULL, NULL) == 0;
	}
	assert_in_range(n, 8, 10);

	/* the same words on a fleet policy change nothing */
	rec.conf.scope = RESIL_SCOPE_FLEET;
	resil_limit_lease_set(f.st, 0, f.now + 10 * S, 0); /* no share */
	f.now += 10 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	fx_fini(&f);
}

/*
 * Past the lease's expiry the fallback decides: 0 the configured rate, a
 * share's interval (fallback share), reject; a fallback word no daemon
 * writes (negative, zero-share, above a day) rejects, and a share faster
 * than the configuration is held to the configured interval.
 */
static void test_global_fallback(void **state)
{
	struct resil_rec rec;
	struct fx f;
	int n;

	(void)state;
	fx_init(&f, "limit.rate = 1000/s; limit.burst = 1", 1000 * S);
	memset(&rec, 0, sizeof(rec));
	rec.conf.scope = RESIL_SCOPE_GLOBAL;
	f.x.rec = &rec;

	/* an expired lease, fallback share of 100/s: 10 ms apart */
	resil_limit_lease_set(f.st, 1 * MS, f.now - 1, 10 * MS);
	n = 0;
	for (int i = 0; i < 50; i++) {
		f.now += 1 * MS;
		n += acq(&f, NULL, NULL) == 0;
	}
	assert_in_range(n, 4, 6);

	/* fallback faster than the configuration: the configured 1 ms */
	resil_limit_lease_set(f.st, 1 * MS, f.now - 1, 1000);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 100 * 1000; /* 0.1 ms */
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);

	/* words no daemon writes, past the expiry: no share */
	resil_limit_lease_set(f.st, 1 * MS, f.now - 1, RESIL_LIMIT_FALLBACK_REJECT);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	resil_limit_lease_set(f.st, 1 * MS, f.now - 1, INT64_MIN);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	resil_limit_lease_set(f.st, 1 * MS, f.now - 1, 86401 * S);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);
	/* a live lease above a day: the same */
	resil_limit_lease_set(f.st, INT64_MAX, f.now + 10 * S, 0);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), RESIL_REJECT_LIMITED);

	/* and back to fallback 0: the configured rate */
	resil_limit_lease_set(f.st, 0, f.now - 1, 0);
	f.now += 100 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	f.now += 1 * MS;
	assert_int_equal(acq(&f, NULL, NULL), 0);
	fx_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf),
	    cmocka_unit_test(test_siphash_vectors),
	    cmocka_unit_test(test_gcra_rate_burst),
	    cmocka_unit_test(test_gcra_translations),
	    cmocka_unit_test(test_gcra_reservation),
	    cmocka_unit_test(test_gcra_permits_undo),
	    cmocka_unit_test(test_gcra_clock_backwards),
	    cmocka_unit_test(test_sliding_exact),
	    cmocka_unit_test(test_sliding_permits_undo_repair),
	    cmocka_unit_test(test_keyed_independent),
	    cmocka_unit_test(test_keyed_fill_evict),
	    cmocka_unit_test(test_keyed_same_key_race),
	    cmocka_unit_test(test_key_buckets),
	    cmocka_unit_test(test_keyed_fill_spread),
	    cmocka_unit_test(test_keyed_stray_folded),
	    cmocka_unit_test(test_approx_bound),
	    cmocka_unit_test(test_dry_run_gcra),
	    cmocka_unit_test(test_lean_gcra_twin),
	    cmocka_unit_test(test_dry_run_keyed),
	    cmocka_unit_test(test_dry_run_sliding),
	    cmocka_unit_test(test_dry_run_wait),
	    cmocka_unit_test(test_shape_carry),
	    cmocka_unit_test(test_maintain_sweep),
	    cmocka_unit_test(test_inflight_insert_not_evicted),
	    cmocka_unit_test(test_coarse_choice),
	    cmocka_unit_test(test_global_lease),
	    cmocka_unit_test(test_global_fallback),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

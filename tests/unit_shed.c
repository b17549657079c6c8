/* SPDX-License-Identifier: MIT */
/*
 * unit_shed.c - the load shedder on a manual clock with a seeded
 * generator, against simulated dependencies:
 *   - a dependency that accepts at most 400 of the 1000 requests/s offered
 *     (60% rejected when nobody throttles): the published probability and
 *     the measured local rejection settle at the formula's value
 *     (R - K*A) / (R + 1) = 0.2;
 *   - one that refuses 30% of what it gets: K * accepts stays above
 *     requests, nothing is shed;
 *   - one that refuses 60% of what it gets: the shedder ends up rejecting
 *     nearly everything (requests > K * accepts whatever it sends);
 *   - counting rules (undo, IGNORED, FAILURE), idle windows, maintenance.
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
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "resil.h"
#include "shed.h"

static int64_t now_ns;
static uint64_t seed;

static int64_t manual_clock(void *ctx)
{
	return now_ns;
}

static uint64_t seeded(void *ctx)
{
	return resil_splitmix64(&seed);
}

static void ctx_init(struct resil_ctx *x)
{
	memset(x, 0, sizeof(*x));
	x->clock.fn = manual_clock;
	x->random.fn = seeded;
	x->client_id = 1;
}

struct shed {
	struct resil_shed_conf conf;
	struct resil_shed_state *st;
};

static void shed_new(struct shed *s, const char *k, const char *window)
{
	char err[128];

	resil_shed_conf_defaults(&s->conf);
	if (k)
		assert_int_equal(resil_shed_conf_set(&s->conf, "shed.k", k, err, sizeof(err)), 0);
	if (window)
		assert_int_equal(
		    resil_shed_conf_set(&s->conf, "shed.window", window, err, sizeof(err)), 0);
	s->st = aligned_alloc(RESIL_HOT_ALIGN, resil_shed_state_size(&s->conf));
	assert_non_null(s->st);
	memset(s->st, 0x5a, resil_shed_state_size(&s->conf));
	resil_shed_state_init(s->st, &s->conf, now_ns);
}

static int call(struct shed *s, int outcome)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	int v;

	ctx_init(&x);
	memset(&pm, 0, sizeof(pm));
	v = resil_shed_acquire(&x, &s->conf, s->st, &pm);
	if (v)
		return v;
	assert_true(pm.flags & RESIL_PERMIT_SHED);
	ctx_init(&x);
	resil_shed_release(&x, &s->conf, s->st, &pm, outcome);
	assert_false(pm.flags & RESIL_PERMIT_SHED);
	return 0;
}

static int64_t sum_requests(struct shed *s)
{
	int64_t r = 0;

	for (int i = 0; i < RESIL_SHED_SLOTS; i++)
		r += atomic_load(&s->st->b[i].requests);
	return r;
}

static int64_t sum_accepts(struct shed *s)
{
	int64_t r = 0;

	for (int i = 0; i < RESIL_SHED_SLOTS; i++)
		r += atomic_load(&s->st->b[i].accepts);
	return r;
}

/* parse(format(c)) gives c back, byte for byte (equal configurations
 * compare equal with memcmp) */
static void roundtrip_shed(const struct resil_shed_conf *c)
{
	struct resil_shed_conf d;
	char buf[512], err[128], *line, *save = NULL;

	resil_shed_conf_format(c, buf, sizeof(buf));
	resil_shed_conf_defaults(&d);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " = ");

		assert_non_null(eq);
		*eq = '\0';
		assert_int_equal(resil_shed_conf_set(&d, line, eq + 3, err, sizeof(err)), 0);
	}
	assert_memory_equal(c, &d, sizeof(d));
}

static void test_conf(void **state)
{
	struct resil_shed_conf c;
	char err[128], buf[128];

	resil_shed_conf_defaults(&c);
	assert_int_equal(c.on, 0);
	assert_int_equal(c.k_milli, 2000);
	assert_int_equal(c.window_ns, 120 * RESIL_NS_PER_S);
	assert_int_equal(resil_shed_conf_set(&c, "shed.k", "1.5", err, sizeof(err)), 0);
	assert_int_equal(c.on, 1);
	assert_int_equal(c.k_milli, 1500);
	assert_int_equal(resil_shed_conf_set(&c, "shed.window", "30s", err, sizeof(err)), 0);
	assert_int_equal(c.window_ns, 30 * RESIL_NS_PER_S);
	assert_int_equal(resil_shed_conf_set(&c, "shed.k", "0.5", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "shed.k"));
	assert_int_equal(resil_shed_conf_set(&c, "shed.k", "lots", err, sizeof(err)), -EINVAL);
	assert_int_equal(resil_shed_conf_set(&c, "shed.window", "1ms", err, sizeof(err)), -EINVAL);
	assert_int_equal(resil_shed_conf_set(&c, "shed.nope", "1", err, sizeof(err)), -ENOENT);
	assert_int_equal(c.k_milli, 1500);
	resil_shed_conf_format(&c, buf, sizeof(buf));
	assert_string_equal(buf, "shed.k = 1.500\nshed.window = 30s\n");
	c.k_milli = 2000;
	c.window_ns = 120 * RESIL_NS_PER_S;
	assert_int_equal(resil_shed_conf_format(&c, NULL, 0),
			 strlen("shed.k = 2\nshed.window = 2m\n"));
	resil_shed_conf_format(&c, buf, sizeof(buf));
	assert_string_equal(buf, "shed.k = 2\nshed.window = 2m\n");

	struct resil_shed_conf d = c;
	d.k_milli = 3000;
	assert_true(resil_shed_same_shape(&c, &d));
	d.window_ns = 60 * RESIL_NS_PER_S;
	assert_false(resil_shed_same_shape(&c, &d));
}

static void test_healthy(void **state)
{
	struct shed s;

	now_ns = 1000 * RESIL_NS_PER_S;
	seed = 1;
	shed_new(&s, NULL, NULL);
	for (int i = 0; i < 300000; i++) {
		assert_int_equal(call(&s, RESIL_SUCCESS), 0);
		now_ns += RESIL_NS_PER_MS;
	}
	assert_int_equal(atomic_load(&s.st->p32), 0);
	assert_int_equal(atomic_load(&s.st->shed), 0);
	assert_true(atomic_load(&s.st->rotations) >= 30);
	free(s.st);
}

/* 1 request per ms offered; the dependency accepts what a token bucket of
 * `rate` per ms allows (capacity), or a `ratio` of what it receives. */
struct sim {
	double rate;  /* > 0: capacity mode */
	double ratio; /* accepted share in ratio mode */
	double tokens;
	long offered, shed, sent, accepted;
};

static void sim_run(struct shed *s, struct sim *m, long ms)
{
	for (long i = 0; i < ms; i++) {
		struct resil_permit_priv pm;
		struct resil_ctx x;
		int outcome;

		now_ns += RESIL_NS_PER_MS;
		m->offered++;
		if (m->rate > 0) /* capacity accrues whether anybody calls or not */
			m->tokens = m->tokens + m->rate > 50.0 ? 50.0 : m->tokens + m->rate;
		ctx_init(&x);
		memset(&pm, 0, sizeof(pm));
		if (resil_shed_acquire(&x, &s->conf, s->st, &pm) == RESIL_REJECT_SHED) {
			m->shed++;
			continue;
		}
		m->sent++;
		if (m->rate > 0) {
			outcome = m->tokens >= 1.0 ? RESIL_SUCCESS : RESIL_FAILURE;
			if (outcome == RESIL_SUCCESS)
				m->tokens -= 1.0;
		} else {
			outcome =
			    (double)(resil_splitmix64(&seed) >> 11) / 9007199254740992.0 < m->ratio
				? RESIL_SUCCESS
				: RESIL_FAILURE;
		}
		if (outcome == RESIL_SUCCESS)
			m->accepted++;
		ctx_init(&x);
		resil_shed_release(&x, &s->conf, s->st, &pm, outcome);
	}
}

static void test_capacity_60pct_rejected(void **state)
{
	struct sim warm = {.rate = 0.4}, m;
	double p, expect, local;
	struct shed s;
	int64_t r, a;

	now_ns = 5000 * RESIL_NS_PER_S;
	seed = 42;
	shed_new(&s, NULL, NULL); /* K = 2, window 2m */

	/* unthrottled (the first bucket, before any p is published), the
	 * dependency rejects 60% */
	sim_run(&s, &warm, 7 * 1000);
	assert_int_equal(warm.shed, 0);
	assert_true(warm.accepted <= warm.sent * 41 / 100);

	sim_run(&s, &warm, 10 * 60 * 1000); /* settle */
	m = (struct sim){.rate = 0.4, .tokens = warm.tokens};
	sim_run(&s, &m, 5 * 60 * 1000);

	/* the formula on the window the shedder last published from */
	r = (int64_t)atomic_load(&s.st->window_requests);
	a = (int64_t)atomic_load(&s.st->window_accepts);
	expect = ((double)r - 2.0 * (double)a) / ((double)r + 1.0);
	p = resil_shed_probability(s.st);
	local = (double)m.shed / (double)m.offered;
	print_message("capacity 400/s of 1000/s: p %.4f (formula on its window %.4f, steady "
		      "state 0.2), shed %.4f, sent %ld accepted %ld\n",
		      p, expect, local, m.sent, m.accepted);
	assert_true(p > expect - 0.0001 && p < expect + 0.0001); /* published exactly */
	assert_true(p > 0.19 && p < 0.21);			 /* where the formula settles */
	assert_true(local > 0.19 && local < 0.21);		 /* and what callers see */
	/* the fleet sends about K times what the dependency accepts */
	assert_true(m.sent > 19 * m.accepted / 10 && m.sent < 21 * m.accepted / 10);
	free(s.st);
}

static void test_ratio(void **state)
{
	struct sim m = {.ratio = 0.7};
	struct shed s;

	now_ns = 9000 * RESIL_NS_PER_S;
	seed = 7;
	shed_new(&s, NULL, "1m");
	/* 30% refused: K * accepts = 1.4 * requests, nothing to shed */
	sim_run(&s, &m, 5 * 60 * 1000);
	assert_int_equal(m.shed, 0);
	assert_int_equal(atomic_load(&s.st->p32), 0);

	/* 60% refused whatever is sent: requests - K * accepts stays positive
	 * whatever p is, so p climbs to nearly 1 (1 - p shrinks by K * 0.4
	 * per window, averaged over the window) */
	m = (struct sim){.ratio = 0.4};
	sim_run(&s, &m, 10 * 60 * 1000);
	print_message("60%% refused: p %.4f\n", resil_shed_probability(s.st));
	assert_true(resil_shed_probability(s.st) > 0.95);

	/* the dependency recovers: the few calls that still go through are
	 * accepted and p comes down again within a few windows */
	m = (struct sim){.ratio = 1.0};
	sim_run(&s, &m, 5 * 60 * 1000);
	assert_int_equal(atomic_load(&s.st->p32), 0);
	free(s.st);
}

static void test_counting(void **state)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	struct shed s;

	now_ns = 100 * RESIL_NS_PER_S;
	seed = 3;
	shed_new(&s, NULL, "15s"); /* 1 s buckets */
	assert_int_equal(call(&s, RESIL_SUCCESS), 0);
	assert_int_equal(call(&s, RESIL_FAILURE), 0);
	assert_int_equal(call(&s, RESIL_IGNORED), 0); /* counts nothing */
	assert_int_equal(sum_requests(&s), 2);
	assert_int_equal(sum_accepts(&s), 1);

	/* a later component rejected: undo takes the request back */
	ctx_init(&x);
	memset(&pm, 0, sizeof(pm));
	assert_int_equal(resil_shed_acquire(&x, &s.conf, s.st, &pm), 0);
	assert_int_equal(sum_requests(&s), 3);
	resil_shed_undo(&x, &s.conf, s.st, &pm);
	assert_int_equal(sum_requests(&s), 2);
	resil_shed_undo(&x, &s.conf, s.st, &pm); /* once only */
	assert_int_equal(sum_requests(&s), 2);
	/* a release without the flag (acquire never counted it) does nothing */
	resil_shed_release(&x, &s.conf, s.st, &pm, RESIL_SUCCESS);
	assert_int_equal(sum_accepts(&s), 1);

	/* 20 failures: p rises at the next bucket boundary, not before */
	for (int i = 0; i < 20; i++)
		assert_int_equal(call(&s, RESIL_FAILURE), 0);
	assert_int_equal(atomic_load(&s.st->p32), 0);
	now_ns += RESIL_NS_PER_S;
	ctx_init(&x);
	resil_shed_maintain(&x, &s.conf, s.st);
	/* requests 22, accepts 1: (22 - 2) / 23 */
	assert_true(resil_shed_probability(s.st) > 20.0 / 23 - 1e-6 &&
		    resil_shed_probability(s.st) < 20.0 / 23 + 1e-6);

	/* buckets leave the window: 15 s later everything is forgotten */
	now_ns += 15 * RESIL_NS_PER_S;
	ctx_init(&x);
	resil_shed_maintain(&x, &s.conf, s.st);
	assert_int_equal(atomic_load(&s.st->p32), 0);
	assert_int_equal(sum_requests(&s), 0);

	/* a long idle gap, then traffic: one rotation zeroes every slot */
	for (int i = 0; i < 5; i++)
		assert_int_equal(call(&s, RESIL_FAILURE), 0);
	now_ns += 3600 * RESIL_NS_PER_S;
	assert_int_equal(call(&s, RESIL_SUCCESS), 0);
	assert_int_equal(sum_requests(&s), 1);
	assert_int_equal(atomic_load(&s.st->p32), 0);

	/* time going backwards is clamped: counted in the current bucket */
	now_ns -= 10 * RESIL_NS_PER_S;
	assert_int_equal(call(&s, RESIL_SUCCESS), 0);
	assert_int_equal(sum_requests(&s), 2);
	free(s.st);
}

static void test_probability_exact(void **state)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	struct shed s;
	long rejected = 0, n = 200000;

	/* with p published, the share rejected is p (seeded, so exact here) */
	now_ns = 100 * RESIL_NS_PER_S;
	seed = 11;
	shed_new(&s, NULL, NULL);
	atomic_store(&s.st->p32, (uint32_t)(0.3 * 4294967296.0));
	for (long i = 0; i < n; i++) {
		ctx_init(&x);
		memset(&pm, 0, sizeof(pm));
		if (resil_shed_acquire(&x, &s.conf, s.st, &pm) == RESIL_REJECT_SHED)
			rejected++;
		else
			resil_shed_undo(&x, &s.conf, s.st, &pm);
	}
	assert_true(rejected > n * 0.295 && rejected < n * 0.305);
	assert_int_equal(atomic_load(&s.st->shed), rejected);
	/* rejected calls still count as requests (SRE), the undone do not */
	assert_int_equal(sum_requests(&s), rejected);
	free(s.st);
}

static void test_no_syscall(void **state)
{
	struct shed s;
	int status;
	pid_t pid;

#ifdef __SANITIZE_THREAD__
	skip(); /* a strict-seccomp child of a TSan process never finishes dying */
#endif

	/* acquire, reject, release, rotate: no syscall (SECCOMP_MODE_STRICT
	 * kills the child for any) */
	now_ns = 100 * RESIL_NS_PER_S;
	seed = 13;
	shed_new(&s, NULL, "15s");
	pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0)
			syscall(SYS_exit, 77);
		long shed = 0;
		for (int i = 0; i < 100000; i++) {
			struct resil_permit_priv pm;
			struct resil_ctx x;

			now_ns += RESIL_NS_PER_MS;
			ctx_init(&x);
			memset(&pm, 0, sizeof(pm));
			if (resil_shed_acquire(&x, &s.conf, s.st, &pm) == RESIL_REJECT_SHED) {
				shed++;
				continue;
			}
			resil_shed_release(&x, &s.conf, s.st, &pm,
					   i % 4 ? RESIL_FAILURE : RESIL_SUCCESS);
		}
		syscall(SYS_exit, shed > 0 ? 0 : 3);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		skip();
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	free(s.st);
}

static void test_roundtrip(void **state)
{
	struct resil_shed_conf c;
	char err[128];

	resil_shed_conf_defaults(&c);
	assert_int_equal(resil_shed_conf_set(&c, "shed.k", "1.25", err, sizeof(err)), 0);
	roundtrip_shed(&c);
	assert_int_equal(resil_shed_conf_set(&c, "shed.window", "90s", err, sizeof(err)), 0);
	roundtrip_shed(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf),
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_healthy),
	    cmocka_unit_test(test_capacity_60pct_rejected),
	    cmocka_unit_test(test_ratio),
	    cmocka_unit_test(test_counting),
	    cmocka_unit_test(test_probability_exact),
	    cmocka_unit_test(test_no_syscall),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * int_pending.c - a worker that starts while resild is away: pending
 * handles (resil_open_ex with RESIL_OPEN_PENDING).
 *
 *   (a) fallbacks: with no daemon, resil_open fails (-ENOENT) and the
 *       pending open succeeds; three policies of limit.rate = 1/h,
 *       limit.burst = 5 decide 10 calls each by their policy.fallback:
 *       local 5 admitted and 5 limited (the process's own copy), admit
 *       10, reject 10 rejected (RESIL_REJECT_OPEN); the pending counters
 *       say exactly that; an empty configuration is -EINVAL; a name
 *       nobody declared admits. resild started: the worker attaches
 *       within 10 s of deciding (on a policy whose decisions read no
 *       clock, in fewer than 256 of them), its declarations are there, every policy
 *       now decides in the shared limiter (exactly 5 of 10 again, fresh,
 *       and another process gets none of them), the undeclared name is
 *       -ENOENT, and resild shows the pending decisions it was told
 *       (and that the worker's declaration holds each policy);
 *   (b) a permit taken pending (bulkhead.max = 2, both held) and released
 *       after the attach goes back to the process's own pair: the
 *       daemon's bulkhead is untouched by it (2 admitted, a third full,
 *       before and after those releases);
 *   (c) fork: the child of a pending process decides on a pair of its
 *       own (its parent holds the only permit of a bulkhead.max = 1; the
 *       child is admitted) and attaches by itself once resild runs;
 *   (d) SIGKILL inside the attach window (after resild gave the segments
 *       and bound a row, before the handles moved: the library stops
 *       itself there under RESIL_TEST_STOP_IN_ATTACH): resild reclaims
 *       the row (the clients gauge comes back down), keeps serving, and
 *       the next worker attaches with every permit free;
 *   (e) resild comes back later: an attached worker whose daemon stopped
 *       declares a new policy (decided on its own, 0 returned); a fresh
 *       resild gets it when the worker re-attaches; and with the fd store
 *       (the same segments come back) the definition is sent too;
 *   (f) socket activation: a worker pending before anything listens
 *       attaches to a resild that systemd-socket-activate starts on its
 *       connection (skipped without systemd-socket-activate).
 * Every wait is "eventually, within 10 s"; counts are exact. Skips (77)
 * when not root.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "fdstore_util.h"
#include "testutil.h"

static struct test_daemon dmn;
static bool dmn_inited;
static pid_t kid;

static void dmn_init(void)
{
	assert_int_equal(test_daemon_init(&dmn), 0);
	dmn_inited = true;
}

static int teardown(void **state)
{
	(void)state;
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
		kid = 0;
	}
	if (dmn_inited)
		test_daemon_fini(&dmn);
	dmn_inited = false;
	return 0;
}

static resil_t *open_pending(const char *sock)
{
	struct resil_open_opts o = {
	    .size = sizeof(o), .socket_path = sock, .flags = RESIL_OPEN_PENDING};
	resil_t *r = NULL;

	assert_int_equal(resil_open_ex(&r, &o), 0);
	return r;
}

static resil_policy_t *pol(resil_t *r, const char *name)
{
	resil_policy_t *p = NULL;

	assert_int_equal(resil_policy(r, name, &p), 0);
	return p;
}

/* n calls, each released at once: how many were admitted; *last: the
 * last verdict */
static int decide(resil_policy_t *p, int n, int *last)
{
	int admitted = 0, v = 0;

	for (int i = 0; i < n; i++) {
		resil_permit_t pm;

		v = resil_acquire(p, &pm);
		assert_true(v >= 0);
		if (v == RESIL_ADMIT) {
			admitted++;
			resil_release(p, &pm, RESIL_SUCCESS);
		}
	}
	if (last)
		*last = v;
	return admitted;
}

/* Decide on p (one call every ms milliseconds) until r is attached: the
 * calls it took (at least 1), 0 when not within 10 s. */
static int attach_every(resil_t *r, resil_policy_t *p, int ms)
{
	for (int i = 0; i < TEST_EVENTUALLY_MS / ms; i++) {
		resil_permit_t pm;

		if (resil_acquire(p, &pm) == RESIL_ADMIT)
			resil_release(p, &pm, RESIL_SUCCESS);
		if (resil_attached(r) == 1)
			return i + 1;
		test_sleep_ms(ms);
	}
	return 0;
}

static int attach_by_deciding(resil_t *r, resil_policy_t *p)
{
	return attach_every(r, p, 5);
}

static void pending_counts(resil_policy_t *p, uint64_t adm, uint64_t rej)
{
	struct resil_pending_stats st;

	assert_int_equal(resil_policy_pending_stats(p, &st), 0);
	assert_int_equal(st.admitted, adm);
	assert_int_equal(st.rejected, rej);
}

static void test_fallbacks(void **state)
{
	resil_t *r, *plain = NULL, *other;
	resil_policy_t *pl, *pa, *pr, *pu, *p;
	int v;

	(void)state;
	dmn_init();
	assert_int_equal(resil_open(&plain, dmn.sock), -ENOENT);
	r = open_pending(dmn.sock);
	assert_int_equal(resil_attached(r), 0);
	assert_int_equal(resil_define(r, "pl", "limit.rate = 1/h; limit.burst = 5"), 0);
	assert_int_equal(
	    resil_define(r, "pa", "limit.rate = 1/h; limit.burst = 5; policy.fallback = admit"), 0);
	assert_int_equal(
	    resil_define(r, "pr", "limit.rate = 1/h; limit.burst = 5; policy.fallback = reject"),
	    0);
	assert_int_equal(resil_define(r, "pe", ""), -EINVAL);
	assert_non_null(strstr(resil_last_error(), "empty configuration"));
	assert_int_equal(resil_define(r, "pe", " ; # nothing\n"), -EINVAL);
	assert_int_equal(resil_define(r, "bad", "limit.rate = 5"), -EINVAL);
	pl = pol(r, "pl");
	pa = pol(r, "pa");
	pr = pol(r, "pr");
	pu = pol(r, "undeclared");
	assert_int_equal(decide(pl, 10, &v), 5);
	assert_int_equal(v, RESIL_REJECT_LIMITED);
	assert_int_equal(decide(pa, 10, NULL), 10);
	assert_int_equal(decide(pr, 10, &v), 0);
	assert_int_equal(v, RESIL_REJECT_OPEN);
	assert_int_equal(decide(pu, 3, NULL), 3);
	pending_counts(pl, 5, 5);
	pending_counts(pa, 10, 0);
	pending_counts(pr, 0, 10);
	assert_int_equal(resil_attached(r), 0);

	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	/* pr decides without a clock (a forced breaker): pending, every such
	 * decision still looks whether a look for resild is due (attached,
	 * only every 256th of a thread does), so the attach comes within a
	 * second's worth of calls (50 at 20 ms), well before 256 */
	v = attach_every(r, pr, 20);
	assert_true(v > 0);
	assert_true(v < 128);
	/* pr decided pending until the attach: the loop's calls are its */
	{
		struct resil_pending_stats st;

		assert_int_equal(resil_policy_pending_stats(pr, &st), 0);
		assert_true(st.rejected >= 10);
		assert_int_equal(st.admitted, 0);
	}
	/* the shared limiters, fresh: 5 of 10 each, whatever the fallback */
	assert_int_equal(decide(pl, 10, &v), 5);
	assert_int_equal(v, RESIL_REJECT_LIMITED);
	assert_int_equal(decide(pa, 10, NULL), 5);
	assert_int_equal(decide(pr, 10, NULL), 5);
	{
		resil_permit_t pm;

		assert_int_equal(resil_acquire(pu, &pm), -ENOENT);
	}
	/* the pending counters stay what they were */
	pending_counts(pl, 5, 5);
	pending_counts(pa, 10, 0);
	/* fleet-wide: another process gets none of pl's burst */
	assert_int_equal(resil_open(&other, dmn.sock), 0);
	p = pol(other, "pl");
	assert_int_equal(decide(p, 3, NULL), 0);
	/* resild was told what the worker decided while pending */
	{
		Resil__Response *resp = NULL;
		Resil__PolicyInfo *pi = test_policy_info(other, "pl", &resp);

		assert_non_null(pi);
		assert_non_null(pi->origin);
		assert_int_equal(pi->origin->kind, RESIL__ORIGIN_KIND__ORIGIN_DECLARED);
		assert_int_equal(pi->origin->pid, (uint32_t)getpid());
		assert_int_equal(pi->origin->pending_admitted, 5);
		assert_int_equal(pi->origin->pending_rejected, 5);
		assert_int_equal(pi->origin->pending_processes, 1);
		resil__response__free_unpacked(resp, NULL);
	}
	/* a name nobody knows says so */
	assert_int_equal(resil_policy(other, "nope", &p), -ENOENT);
	assert_non_null(strstr(resil_last_error(), "no policy named nope"));
	resil_close(other);
	resil_close(r);
}

static void test_permit_across_attach(void **state)
{
	resil_t *r;
	resil_policy_t *bh, *lim;
	resil_permit_t held[2], pm, dm[2];

	(void)state;
	dmn_init();
	r = open_pending(dmn.sock);
	assert_int_equal(resil_define(r, "bh", "bulkhead.max = 2"), 0);
	assert_int_equal(resil_define(r, "lim", "limit.rate = 1000/s"), 0);
	bh = pol(r, "bh");
	lim = pol(r, "lim");
	assert_int_equal(resil_acquire(bh, &held[0]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bh, &held[1]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bh, &pm), RESIL_REJECT_FULL);
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	assert_true(attach_by_deciding(r, lim));
	/* resild's bulkhead: its own two permits */
	assert_int_equal(resil_acquire(bh, &dm[0]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bh, &dm[1]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bh, &pm), RESIL_REJECT_FULL);
	/* the pending permits go back where they came from */
	resil_release(bh, &held[0], RESIL_SUCCESS);
	resil_release(bh, &held[1], RESIL_FAILURE);
	pending_counts(bh, 2, 1);
	assert_int_equal(resil_acquire(bh, &pm), RESIL_REJECT_FULL);
	resil_release(bh, &dm[0], RESIL_SUCCESS);
	assert_int_equal(resil_acquire(bh, &pm), RESIL_ADMIT);
	resil_release(bh, &pm, RESIL_SUCCESS);
	resil_release(bh, &dm[1], RESIL_SUCCESS);
	resil_close(r);
}

static void test_fork(void **state)
{
	resil_t *r;
	resil_policy_t *fk, *lim;
	resil_permit_t held, pm;
	int st;

	(void)state;
	dmn_init();
	r = open_pending(dmn.sock);
	assert_int_equal(resil_define(r, "fk", "bulkhead.max = 1"), 0);
	assert_int_equal(resil_define(r, "lim", "limit.rate = 1000/s"), 0);
	fk = pol(r, "fk");
	lim = pol(r, "lim");
	assert_int_equal(resil_acquire(fk, &held), RESIL_ADMIT);
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		struct resil_pending_stats ps;
		int code = 0;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* its own pair: the parent's permit is not in it */
		if (resil_acquire(fk, &pm) != RESIL_ADMIT)
			_exit(10);
		if (resil_acquire(fk, &held) != RESIL_REJECT_FULL)
			_exit(11);
		resil_release(fk, &pm, RESIL_SUCCESS);
		if (resil_policy_pending_stats(fk, &ps) != 0 || ps.admitted != 1 ||
		    ps.rejected != 1)
			_exit(12);
		/* the parent starts resild once this child says it is ready
		 * (it stops itself) */
		raise(SIGSTOP);
		if (!attach_by_deciding(r, lim))
			_exit(13);
		if (resil_acquire(fk, &pm) != RESIL_ADMIT)
			code = 14;
		else
			resil_release(fk, &pm, RESIL_SUCCESS);
		resil_close(r);
		_exit(code);
	}
	assert_int_equal(waitpid(kid, &st, WUNTRACED), kid);
	assert_true(WIFSTOPPED(st));
	/* the parent's pair still has its one permit taken */
	assert_int_equal(resil_acquire(fk, &pm), RESIL_REJECT_FULL);
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	kill(kid, SIGCONT);
	st = test_wait_pid(kid, TEST_EVENTUALLY_MS + 5000);
	kid = 0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(attach_by_deciding(r, lim));
	resil_release(fk, &held, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(fk, &pm), RESIL_ADMIT);
	resil_release(fk, &pm, RESIL_SUCCESS);
	resil_close(r);
}

static void test_kill_in_attach(void **state)
{
	resil_t *r, *w;
	resil_policy_t *kb, *lim;
	resil_permit_t pm[3];
	int st;

	(void)state;
	dmn_init();
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		resil_permit_t held;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setenv("RESIL_TEST_STOP_IN_ATTACH", "1", 1);
		w = open_pending(dmn.sock);
		if (resil_define(w, "kb", "bulkhead.max = 2") ||
		    resil_define(w, "lim", "limit.rate = 1000/s"))
			_exit(10);
		if (resil_acquire(pol(w, "kb"), &held) != RESIL_ADMIT)
			_exit(11);
		raise(SIGSTOP); /* ready: the parent starts resild */
		lim = pol(w, "lim");
		for (;;) {
			resil_permit_t x;

			if (resil_acquire(lim, &x) == RESIL_ADMIT)
				resil_release(lim, &x, RESIL_SUCCESS);
			test_sleep_ms(5);
		}
	}
	assert_int_equal(waitpid(kid, &st, WUNTRACED), kid);
	assert_true(WIFSTOPPED(st));
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	kill(kid, SIGCONT);
	/* it stops again inside the attach window */
	assert_int_equal(waitpid(kid, &st, WUNTRACED), kid);
	assert_true(WIFSTOPPED(st));
	assert_int_equal(WSTOPSIG(st), SIGSTOP);
	assert_int_equal(resil_open(&r, dmn.sock), 0);
	/* resild bound a row to it: two clients */
	assert_int_equal(test_metric(r, "resil_clients"), 2);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	kid = 0;
	assert_true(TEST_EVENTUALLY(test_metric(r, "resil_clients") == 1));
	/* resild keeps serving; its declarations arrived before the kill */
	kb = pol(r, "kb");
	assert_int_equal(resil_acquire(kb, &pm[0]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(kb, &pm[1]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(kb, &pm[2]), RESIL_REJECT_FULL);
	resil_release(kb, &pm[0], RESIL_SUCCESS);
	resil_release(kb, &pm[1], RESIL_SUCCESS);
	/* the next worker attaches at once */
	w = open_pending(dmn.sock);
	assert_int_equal(resil_attached(w), 1);
	assert_int_equal(resil_define(w, "kb", "bulkhead.max = 2"), 0);
	kb = pol(w, "kb");
	assert_int_equal(resil_acquire(kb, &pm[0]), RESIL_ADMIT);
	assert_int_equal(resil_acquire(kb, &pm[1]), RESIL_ADMIT);
	resil_release(kb, &pm[0], RESIL_SUCCESS);
	resil_release(kb, &pm[1], RESIL_SUCCESS);
	resil_close(w);
	resil_close(r);
}

static bool has_policy(const char *sock, const char *name)
{
	resil_t *o;
	resil_policy_t *p;
	bool yes;

	if (resil_open(&o, sock) != 0)
		return false;
	yes = resil_policy(o, name, &p) == 0;
	resil_close(o);
	return yes;
}

static void test_comes_back(void **state)
{
	struct test_unit u;
	resil_t *r;
	resil_policy_t *p1, *p2, *p3;
	resil_permit_t pm;
	uint32_t before;

	(void)state;
	dmn_init();
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	r = open_pending(dmn.sock);
	assert_int_equal(resil_attached(r), 1);
	assert_int_equal(resil_define(r, "cb1", "limit.rate = 1000/s"), 0);
	p1 = pol(r, "cb1");
	assert_int_equal(test_daemon_stop(&dmn), 0);
	/* resild away: a new declaration decides here, and is kept */
	assert_int_equal(resil_define(r, "cb2", "bulkhead.max = 1"), 0);
	p2 = pol(r, "cb2");
	assert_int_equal(resil_acquire(p2, &pm), RESIL_ADMIT);
	resil_release(p2, &pm, RESIL_SUCCESS);
	pending_counts(p2, 1, 0);
	/* a fresh resild: the worker re-attaches and defines both */
	before = ld_relaxed(&r->reattaches);
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	assert_true(TEST_EVENTUALLY(decide(p1, 1, NULL) >= 0 &&
				    ld_relaxed(&r->reattaches) > before));
	assert_true(has_policy(dmn.sock, "cb1"));
	assert_true(has_policy(dmn.sock, "cb2"));
	test_daemon_fini(&dmn);
	dmn_inited = false;
	resil_close(r);

	/* the same segments back (the fd store): what was declared while
	 * it was away is sent when the worker finds it */
	assert_int_equal(test_unit_init(&u), 0);
	assert_int_equal(test_unit_start(&u, false), 0);
	r = open_pending(u.d.sock);
	assert_int_equal(resil_attached(r), 1);
	assert_int_equal(resil_define(r, "cb1", "limit.rate = 1000/s"), 0);
	p1 = pol(r, "cb1");
	test_unit_poll(&u);
	assert_true(test_unit_stored(&u, 2));
	test_unit_crash(&u);
	assert_int_equal(resil_define(r, "cb3", "bulkhead.max = 1"), 0);
	p3 = pol(r, "cb3");
	assert_int_equal(resil_acquire(p3, &pm), RESIL_ADMIT);
	resil_release(p3, &pm, RESIL_SUCCESS);
	before = ld_relaxed(&r->reattaches);
	assert_int_equal(test_unit_start(&u, true), 0);
	assert_true(TEST_EVENTUALLY(decide(p1, 1, NULL) >= 0 && has_policy(u.d.sock, "cb3")));
	assert_int_equal(ld_relaxed(&r->reattaches), before);
	resil_close(r);
	test_unit_fini(&u);
}

static void test_socket_activation(void **state)
{
	char act[PATH_MAX] = "";
	resil_t *r;
	resil_policy_t *lim;
	const char *path = getenv("PATH");

	(void)state;
	/* systemd-socket-activate, where the distribution puts it */
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		snprintf(act, sizeof(act), "%.*s/systemd-socket-activate", (int)n, p);
		if (access(act, X_OK) == 0)
			break;
		act[0] = 0;
		p += n + (e ? 1 : 0);
	}
	if (!act[0]) {
		fprintf(stderr, "no systemd-socket-activate: (f) skipped\n");
		skip();
	}
	dmn_init();
	r = open_pending(dmn.sock);
	assert_int_equal(resil_define(r, "sa", "limit.rate = 1000/s"), 0);
	lim = pol(r, "sa");
	assert_int_equal(decide(lim, 1, NULL), 1);
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(act, act, "-l", dmn.sock, "--seqpacket", RESILD_PATH, "--foreground",
		      "--socket", dmn.sock, "--config", dmn.confdir, "--state-size", "16M",
		      (char *)NULL);
		_exit(127);
	}
	assert_true(TEST_EVENTUALLY(access(dmn.sock, F_OK) == 0));
	assert_true(attach_by_deciding(r, lim));
	assert_true(has_policy(dmn.sock, "sa"));
	resil_close(r);
	kill(kid, SIGTERM);
	assert_true(test_wait_pid(kid, TEST_EVENTUALLY_MS) >= 0);
	kid = 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_fallbacks, teardown),
	    cmocka_unit_test_teardown(test_permit_across_attach, teardown),
	    cmocka_unit_test_teardown(test_fork, teardown),
	    cmocka_unit_test_teardown(test_kill_in_attach, teardown),
	    cmocka_unit_test_teardown(test_comes_back, teardown),
	    cmocka_unit_test_teardown(test_socket_activation, teardown),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "int_pending: needs root, as the other integration tests\n");
		return TEST_SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

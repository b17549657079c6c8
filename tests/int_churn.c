/* SPDX-License-Identifier: MIT */
/*
 * int_churn.c - records and state space come back: churn never exhausts
 * them, and every reload applies.
 *
 * 1. As a member of the socket group without admin rights (a forked child
 *    dropped to a numeric uid and the socket's group): 10,000 cycles of
 *    create, reshape (a keyed limiter's key count changes: a new state
 *    block) and delete over 8 names, each call answered 0. Every 100
 *    cycles a permit is taken before the reshape and released after the
 *    delete (its record may be reused by then: the release must drop, not
 *    write into another policy's block). Afterwards, within 10 s (the
 *    grace period), resil_records_used and resil_arena_used_bytes are back
 *    at their values before the churn, and nothing waits.
 *    Without reuse the records run out after 4 x --policies changes
 *    ("configuration records exhausted").
 * 2. 1,000 reloads (SIGHUP) toggling breaker.failure_rate in 100 policies
 *    of a file: every one is counted ok (none failed) and all 100 policies
 *    run the new value after each.
 * Counts x RESIL_TEST_SCALE. Skips (77) when not root.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define G_SOCK 4230
#define U_A    4231
#define NAMES  8
#define NPOL   100

static struct test_daemon d;

static void guard_fire(int sig)
{
	(void)sig;
	kill(d.pid, SIGKILL);
	_exit(0);
}

/* A process that kills the daemon if this test dies on a failed check
 * (test_fail exits at once): the daemon never outlives the test. */
static pid_t guard_start(void)
{
	pid_t parent = getpid(), pid = fork();

	if (pid != 0)
		return pid;
	signal(SIGUSR1, guard_fire);
	if (prctl(PR_SET_PDEATHSIG, SIGUSR1) < 0 || getppid() != parent)
		guard_fire(0);
	for (;;)
		pause();
}

static long long metric(resil_t *r, const char *name)
{
	return test_metric(r, name);
}

/* The child: cycles of create, reshape, delete. 0 when every call
 * answered as it should. */
static int churn(int cycles)
{
	gid_t g = G_SOCK;
	resil_t *r = NULL;
	int bad = 0;

	if (setgroups(1, &g) < 0 || setresgid(G_SOCK, G_SOCK, G_SOCK) < 0 ||
	    setresuid(U_A, U_A, U_A) < 0) {
		perror("dropping to the socket group");
		return 1;
	}
	if (resil_open(&r, d.sock) < 0) {
		fprintf(stderr, "resil_open: %s\n", resil_last_error());
		return 1;
	}
	for (int i = 0; i < cycles && bad < 5; i++) {
		char name[32];
		resil_policy_t *p = NULL;
		resil_permit_t pm;
		bool held = false;
		int e;

		snprintf(name, sizeof(name), "churn.%d", i % NAMES);
		e = resil_define(r, name, "limit.rate = 1000/s; limit.keys = 50");
		if (e == 0 && i % 100 == 0 && resil_policy(r, name, &p) == 0)
			held = resil_acquire_key(p, "k", 1, &pm) == 0;
		if (e == 0)
			e = resil_define(r, name, "limit.rate = 1000/s; limit.keys = 100");
		if (e == 0)
			e = resil_delete(r, name);
		if (held)
			resil_release(p, &pm, RESIL_SUCCESS);
		if (e < 0) {
			fprintf(stderr, "cycle %d (%s): %s: %s\n", i, name, strerror(-e),
				resil_last_error());
			bad++;
		}
	}
	resil_close(r);
	return bad ? 1 : 0;
}

static void write_conf(int rate)
{
	char path[PATH_MAX + 32], to[PATH_MAX + 32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/toggle.conf.tmp", d.confdir);
	snprintf(to, sizeof(to), "%s/toggle.conf", d.confdir);
	f = fopen(path, "w");
	TEST_CHECK(f != NULL);
	for (int i = 0; i < NPOL; i++)
		fprintf(f, "[policy t%03d]\nbreaker.failure_rate = %d\n\n", i, rate);
	TEST_CHECK(fclose(f) == 0);
	TEST_CHECK(rename(path, to) == 0);
}

/* How many of the policies run breaker.failure_rate = rate. */
static int running(resil_t *r, int rate)
{
	int n = 0;

	for (int i = 0; i < NPOL; i++) {
		char name[16];

		snprintf(name, sizeof(name), "t%03d", i);
		n += test_rec_of(r, name)->conf.breaker.failure_rate_bp == (uint32_t)rate * 100;
	}
	return n;
}

int main(void)
{
	const char *extra[] = {"--socket-group", "4230", NULL};
	int cycles = 10000 * resil_test_scale(), reloads = 1000 * resil_test_scale();
	long long rec0, arena0, ok = 0, failed = 0;
	int rate = 40, st;
	resil_t *r = NULL;
	pid_t pid, guard;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_churn: needs root to change uid: skipped\n");
		return TEST_SKIP;
	}
	if (test_daemon_init(&d) < 0)
		return 1;
	write_conf(rate);
	if (test_daemon_start(&d, extra) < 0)
		return 1;
	guard = guard_start();
	TEST_CHECK(guard > 0);
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(running(r, rate) == NPOL);
	rec0 = metric(r, "resil_records_used ");
	arena0 = metric(r, "resil_arena_used_bytes ");
	printf("before: %lld of %lld records, %lld of %lld arena bytes used\n", rec0,
	       metric(r, "resil_records "), arena0, metric(r, "resil_arena_bytes "));
	TEST_CHECK(rec0 >= NPOL && arena0 > 0);

	/* 1: churn by a member of the group */
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0)
		_exit(churn(cycles));
	st = test_wait_pid(pid, 240000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("after %d cycles: %lld records used (%lld waiting), %lld arena bytes used "
	       "(%lld waiting, %lld in %lld holes)\n",
	       cycles, metric(r, "resil_records_used "), metric(r, "resil_records_waiting "),
	       metric(r, "resil_arena_used_bytes "), metric(r, "resil_arena_waiting_bytes "),
	       metric(r, "resil_arena_free_bytes "), metric(r, "resil_arena_holes "));
	TEST_CHECK(TEST_EVENTUALLY(metric(r, "resil_records_used ") == rec0));
	TEST_CHECK(TEST_EVENTUALLY(metric(r, "resil_arena_used_bytes ") == arena0));
	TEST_CHECK(metric(r, "resil_records_waiting ") == 0);
	TEST_CHECK(metric(r, "resil_arena_waiting_bytes ") == 0);

	/* 2: reloads toggling 100 policies, every one applied */
	for (int i = 1; i <= reloads; i++) {
		int next = rate == 40 ? 60 : 40;
		long long o = 0, f = 0;

		write_conf(next);
		TEST_CHECK(kill(d.pid, SIGHUP) == 0);
		TEST_CHECK(TEST_EVENTUALLY(
		    (o = metric(r, "resil_reloads_total{result=\"ok\"} ")) +
			(f = metric(r, "resil_reloads_total{result=\"failed\"} ")) ==
		    i));
		ok = o;
		failed = f;
		if (failed) {
			printf("reload %d counted failed\n", i);
			break;
		}
		TEST_CHECK(running(r, next) == NPOL);
		rate = next;
	}
	printf("%d reloads toggling %d policies: %lld applied, %lld counted failed\n", reloads,
	       NPOL, ok, failed);
	TEST_CHECK(ok == reloads && failed == 0);
	resil_close(r);
	kill(guard, SIGKILL);
	waitpid(guard, NULL, 0);
	test_daemon_fini(&d);
	printf("int_churn: ok\n");
	return 0;
}

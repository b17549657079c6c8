/* SPDX-License-Identifier: MIT */
/*
 * int_hostile_beat.c - a member that rewrites the daemon's heartbeat in
 * the state segment cannot keep well-behaved workers on a dead daemon.
 *
 * The heartbeat (st->daemon_beat_ns) tells each worker whether to look at
 * the socket; any client can write it. As a member of the socket group
 * without admin rights (accounts made for the test: group rt-beat, users
 * rt-beat-a and rt-beat-w), uid A stores INT64_MAX there (a beat from the
 * future, and the value whose difference with the clock overflowed)
 * every few milliseconds. resild is SIGKILLed and a new one starts on the
 * same socket with fresh segments. Asserted: the worker of uid W, deciding
 * all along, re-attaches to the new resild (it judges a beat from the
 * future stale) within 10 s. Skips (77) when not root.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

int main(void)
{
	struct test_daemon d;
	char gs[16];
	const char *extra[] = {"--socket-group", gs, NULL};
	int go[2], ready[2], stop[2], st;
	gid_t g;
	uid_t ua, uw;
	pid_t a, w;
	char ch;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0) {
		fprintf(stderr, "int_hostile_beat: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-beat", &g) == 0);
	TEST_CHECK(test_user_make("rt-beat-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-beat-w", g, &uw) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(pipe(go) == 0 && pipe(ready) == 0 && pipe(stop) == 0);

	w = fork();
	TEST_CHECK(w >= 0);
	if (w == 0) {
		resil_t *r = NULL;
		resil_policy_t *p;
		resil_permit_t pm;
		struct pollfd pf = {.fd = go[0], .events = POLLIN};
		int64_t end = 0;

		test_become(uw, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		TEST_CHECK(resil_define(r, "beat", "breaker.window = count:10") == 0);
		TEST_CHECK(resil_policy(r, "beat", &p) == 0);
		TEST_CHECK(write(ready[1], "w", 1) == 1);
		/* decide all along; once told the new resild is up, it must be
		 * found within 10 s */
		while (ld_relaxed(&r->reattaches) == 0) {
			if (resil_acquire(p, &pm) == RESIL_ADMIT)
				resil_release(p, &pm, RESIL_SUCCESS);
			if (!end && poll(&pf, 1, 0) == 1)
				end = test_mono_ns() + 10LL * 1000000000;
			TEST_CHECK(!end || test_mono_ns() < end);
			test_sleep_ms(5);
		}
		printf("worker: re-attached to the new resild\n");
		resil_close(r);
		_exit(0);
	}
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		resil_t *r = NULL;
		struct pollfd pf = {.fd = stop[0], .events = POLLIN};

		test_become(ua, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		TEST_CHECK(write(ready[1], "a", 1) == 1);
		while (poll(&pf, 1, 2) == 0)
			st_relaxed(&r->seg.st->daemon_beat_ns, (uint64_t)INT64_MAX);
		_exit(0);
	}
	TEST_CHECK(read(ready[0], &ch, 1) == 1 && read(ready[0], &ch, 1) == 1);
	test_sleep_ms(50); /* a few of A's writes in (the test does not depend on it) */
	test_daemon_kill(&d);
	TEST_CHECK(test_daemon_start(&d, extra) == 0);
	TEST_CHECK(write(go[1], "g", 1) == 1);
	st = test_wait_pid(w, 30000);
	TEST_CHECK(write(stop[1], "s", 1) == 1);
	TEST_CHECK(test_wait_pid(a, 10000) == 0);
	printf("worker status %#x\n", st);
	TEST_CHECK(st == 0);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_hostile_beat: ok\n");
	return 0;
}

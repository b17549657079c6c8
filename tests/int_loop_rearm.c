/* SPDX-License-Identifier: MIT */
/*
 * int_loop_rearm.c - resild's loop goes on when queueing its tick or its
 * signal read fails (a full submission ring), injected with
 * RESILD_TEST_ARM_FAIL (daemon/loop.c, "Re-arming").
 *
 *   - the tick: its 3rd to 22nd arms fail. The heartbeat resild stores at
 *     each tick (st->daemon_beat_ns) keeps moving through and past them
 *     (the loop ticks from its own bounded wait meanwhile), and a worker
 *     killed holding a permit has it back (the tick's scan reclaims);
 *   - the signal read: its 2nd to 4th arms fail (the re-arms after the
 *     first SIGHUP and at the next ticks). A second SIGHUP still reloads,
 *     and SIGTERM still stops resild, with status 0.
 * Asserted through the heartbeat, resil_reloads_total and the exit status.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static uint64_t beat(resil_t *r)
{
	return ld_relaxed(&r->seg.st->daemon_beat_ns);
}

static void tick_fails(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	uint64_t last = 0;
	int seen = 0, pfd[2];
	char ch;
	pid_t w;

	setenv("RESILD_TEST_ARM_FAIL", "tick:3:20", 1);
	TEST_CHECK(test_daemon_open(&d, &r) == 0);
	unsetenv("RESILD_TEST_ARM_FAIL");
	/* 40 distinct heartbeats: through the 20 ticks whose arm failed and on */
	for (int64_t end = test_mono_ns() + 20LL * 1000000000; seen < 40 && test_mono_ns() < end;
	     test_sleep_ms(20)) {
		uint64_t b = beat(r);

		if (b != last) {
			last = b;
			seen++;
		}
	}
	printf("tick: %d heartbeats seen\n", seen);
	TEST_CHECK(seen >= 40);
	TEST_CHECK(test_log_count(&d, "cannot queue the tick") >= 1);
	/* the tick still reclaims a dead worker's permit */
	TEST_CHECK(resil_define(r, "one", "bulkhead.max = 1") == 0);
	TEST_CHECK(resil_policy(r, "one", &p) == 0);
	TEST_CHECK(pipe(pfd) == 0);
	w = fork();
	TEST_CHECK(w >= 0);
	if (w == 0) {
		resil_t *c = NULL;
		resil_policy_t *q;
		resil_permit_t k;

		TEST_CHECK(resil_open(&c, d.sock) == 0);
		TEST_CHECK(resil_policy(c, "one", &q) == 0);
		TEST_CHECK(resil_acquire(q, &k) == RESIL_ADMIT);
		TEST_CHECK(write(pfd[1], "x", 1) == 1);
		pause();
		_exit(0);
	}
	TEST_CHECK(read(pfd[0], &ch, 1) == 1);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_FULL);
	kill(w, SIGKILL);
	waitpid(w, NULL, 0);
	TEST_CHECK(TEST_EVENTUALLY(resil_acquire(p, &pm) == RESIL_ADMIT));
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_close(r);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
}

static void signal_fails(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	int st;

	setenv("RESILD_TEST_ARM_FAIL", "signal:2:3", 1);
	TEST_CHECK(test_daemon_open(&d, &r) == 0);
	unsetenv("RESILD_TEST_ARM_FAIL");
	kill(d.pid, SIGHUP);
	TEST_CHECK(TEST_EVENTUALLY(test_metric(r, "resil_reloads_total{result=\"ok\"}") >= 1));
	/* the re-arm after that one failed, and at the next two ticks */
	TEST_CHECK(TEST_EVENTUALLY(test_log_count(&d, "cannot queue the signal read") >= 3));
	kill(d.pid, SIGHUP);
	TEST_CHECK(TEST_EVENTUALLY(test_metric(r, "resil_reloads_total{result=\"ok\"}") >= 2));
	resil_close(r);
	st = test_daemon_stop(&d);
	printf("signal: 2 reloads, stopped with status %#x\n", st);
	TEST_CHECK(st == 0);
	test_daemon_fini(&d);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	tick_fails();
	signal_fails();
	printf("int_loop_rearm: ok\n");
	return 0;
}

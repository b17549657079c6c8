/* SPDX-License-Identifier: MIT */
/*
 * int_event_holes.c - holes in the event ring are skipped as a group.
 *
 * A client advances event_head by 20 without writing an entry (what 20
 * writers killed between their fetch_add and their publication leave,
 * or a hostile client), then pushes an event (a client's report: resild's
 * own events do not pass through the ring). It reaches a subscriber
 * (`resilctl watch --json`) within 10 s, and the 20 holes are counted as
 * dropped: exactly 20, skipped together after one grace, not one grace (a
 * second) per hole. The daemon also stays correct when a client moves
 * event_head back behind its position (here below 0: a head a ring ahead
 * of unwritten entries) while a client keeps pushing: its events arrive
 * within a few ticks, not once the pushes stop.
 * Every wait is "eventually, within 10 s".
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

#define HOLES 20

static char out_path[4200];

static bool watcher_ready(void *ctx)
{
	char buf[4096];
	resil_t *r = ctx;

	resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 7, 0);
	return test_read_file(out_path, buf, sizeof(buf)) > 0;
}

static const char *want;
static bool saw(void *ctx)
{
	static char buf[1 << 20];

	test_read_file(out_path, buf, sizeof(buf));
	return strstr(buf, want) != NULL;
}

int main(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	pid_t watcher;
	uint64_t dropped0;

	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_open(&d, &r) < 0)
		return 1;
	TEST_CHECK(resil_define(r, "holes", "breaker.window = count:10") == 0);
	watcher = test_watch_start(&d, out_path, sizeof(out_path));
	TEST_CHECK(test_wait_until(watcher_ready, r, 10000));
	/* every event so far drained */
	TEST_CHECK(TEST_EVENTUALLY(ld_relaxed(&r->seg.st->events_read) ==
				   ld_relaxed(&r->seg.st->event_head)));

	/* 1. twenty holes, then a force-open */
	dropped0 = ld_relaxed(&r->seg.st->events_dropped);
	for (int i = 0; i < HOLES; i++) {
		uint64_t idx = faa_relaxed(&r->seg.st->event_head, 1);

		st_relaxed(&resil_seg_event(&r->seg, idx)->seq, 0);
	}
	resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 424242, 0);
	want = "\"value\":424242";
	if (!test_wait_until(saw, NULL, 10000)) {
		static char buf[1 << 20];

		test_read_file(out_path, buf, sizeof(buf));
		fprintf(stderr, "no event after the holes within 10 s; watch printed:\n%s\n", buf);
		kill(watcher, SIGKILL);
		TEST_CHECK(!"the event after the holes reached the subscriber");
	}
	if (ld_relaxed(&r->seg.st->events_dropped) != dropped0 + HOLES)
		kill(watcher, SIGKILL);
	TEST_CHECK(ld_relaxed(&r->seg.st->events_dropped) == dropped0 + HOLES);

	/* 2. the head moved back behind the daemon's position: later events
	 * still arrive */
	st_relaxed(&r->seg.st->event_head, ld_relaxed(&r->seg.st->event_head) - 1000);
	TEST_CHECK(resil_force_state(r, "holes", RESIL_STATE_DISABLED) == 0);
	want = "\"to\":\"disabled\"";
	TEST_CHECK(test_wait_until(saw, NULL, 10000));
	/* and the ring's too, once the daemon went on from the head */
	want = "\"value\":434343";
	TEST_CHECK(TEST_EVENTUALLY(
	    (resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 434343, 0), saw(NULL))));
	TEST_CHECK(test_daemon_answers(&d));

	kill(watcher, SIGTERM);
	test_wait_pid(watcher, 10000);
	resil_close(r);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_event_holes: ok (%d holes skipped together, the event after them delivered)\n",
	       HOLES);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_events.c - the event ring end to end, through a real resild and a
 * real `resilctl watch --json`:
 *   - events arrive in order and none is lost below the ring's capacity;
 *   - a writer killed between claiming an entry and publishing it (played
 *     here by claiming an index and never publishing) does not stall the
 *     reader: later events still arrive and the skipped one is counted;
 *   - more events than the ring holds between two drains: the lost ones
 *     are counted in the header (events_dropped), the reader carries on.
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

#define POLICY "ev"
#define MARKS  200 /* below the ring's capacity */

static char out_path[4200];
static pid_t watcher;

/* Count JSON lines of our synthetic events (type config, value = mark). */
static int marks_seen(int *last_in_order)
{
	static char buf[1 << 20];
	int n = 0, expect = 1;
	const char *p = buf;

	test_read_file(out_path, buf, sizeof(buf));
	*last_in_order = 1;
	while ((p = strstr(p, "\"value\":")) != NULL) {
		long v = strtol(p + 8, NULL, 10);

		p += 8;
		if (v >= 1000000 && v < 1000000 + MARKS) {
			if (v - 1000000 != expect - 1)
				*last_in_order = 0;
			expect++;
			n++;
		}
	}
	return n;
}

struct want {
	int n;
};
static bool enough_marks(void *ctx)
{
	int in_order;

	return marks_seen(&in_order) >= ((struct want *)ctx)->n;
}

static bool watcher_ready(void *ctx)
{
	char buf[4096];
	resil_t *r = ctx;

	/* push a harmless event until the watcher shows one */
	resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 7, 0);
	return test_read_file(out_path, buf, sizeof(buf)) > 0;
}

static bool saw_open(void *ctx)
{
	static char buf[1 << 20];

	test_read_file(out_path, buf, sizeof(buf));
	return strstr(buf, "\"to\":\"open\"") != NULL &&
	       strstr(buf, "\"policy\":\"" POLICY "\"") != NULL;
}

static uint64_t dropped_before;
static bool drops_counted(void *ctx)
{
	resil_t *r = ctx;

	return ld_relaxed(&r->seg.st->events_dropped) > dropped_before;
}

int main(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	struct want w;
	int in_order;
	uint64_t dropped0, idx;

	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_open(&d, &r) < 0)
		return 1;
	TEST_CHECK(resil_define(r, POLICY, "breaker.window = consecutive:1; breaker.wait = 1h") ==
		   0);

	watcher = test_watch_start(&d, out_path, sizeof(out_path));
	TEST_CHECK(test_wait_until(watcher_ready, r, 10000));

	/* 1. in order, none lost: MARKS events pushed as fast as we can */
	for (int i = 0; i < MARKS; i++)
		resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 1000000 + (uint64_t)i, 0);
	w.n = MARKS;
	TEST_CHECK(test_wait_until(enough_marks, &w, 10000));
	TEST_CHECK(marks_seen(&in_order) == MARKS);
	TEST_CHECK(in_order);

	/* a real transition is in the stream too, with its words */
	{
		resil_policy_t *p;
		resil_permit_t pm;

		TEST_CHECK(resil_policy(r, POLICY, &p) == 0);
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
		resil_release(p, &pm, RESIL_FAILURE);
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_OPEN);
		TEST_CHECK(test_wait_until(saw_open, NULL, 10000));
	}

	/* 2. a writer that claimed an entry and died: the reader skips it */
	dropped0 = ld_relaxed(&r->seg.st->events_dropped);
	idx = faa_relaxed(&r->seg.st->event_head, 1);
	st_relaxed(&resil_seg_event(&r->seg, idx)->seq, 0);
	resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 1000000 + MARKS - 1, 0);
	w.n = MARKS + 1;
	TEST_CHECK(test_wait_until(enough_marks, &w, 10000));
	TEST_CHECK(ld_relaxed(&r->seg.st->events_dropped) == dropped0 + 1);

	/* 3. more than the ring holds between two drains: counted, not stuck */
	dropped_before = ld_relaxed(&r->seg.st->events_dropped);
	for (uint32_t i = 0; i < 4 * r->seg.st->event_cap; i++)
		resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 5, 0);
	TEST_CHECK(test_wait_until(drops_counted, r, 10000));
	resil_event_push(&r->seg, RESIL_EV_CONFIG, 0, 0, 9, 0, 0, 1000000 + MARKS - 2, 0);
	w.n = MARKS + 2;
	TEST_CHECK(test_wait_until(enough_marks, &w, 10000));
	TEST_CHECK(test_daemon_answers(&d));

	kill(watcher, SIGTERM);
	test_wait_pid(watcher, 10000);
	resil_close(r);
	test_daemon_fini(&d);
	printf("int_events: ok (%d marks in order, dead writer skipped, lapped ring counted)\n",
	       MARKS);
	return 0;
}

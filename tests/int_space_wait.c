/* SPDX-License-Identifier: MIT */
/*
 * int_space_wait.c - a create that needs state space still in its grace
 * period waits for it, and keeps no one else waiting. On a resild with
 * --state-size 16M:
 *   1. 60 create/delete cycles of a 10,000-key limiter back to back, every
 *      call answered 0: the space of a deleted one comes free a grace
 *      period later (1 s), and a create that needs it waits for it (as a
 *      reload does) instead of failing with "state segment full";
 *   2. a policy taking more than half the arena is created and deleted,
 *      then created again on connection X: that create waits for the
 *      space the first one left. While X has no answer yet, a list on
 *      connection Y is answered (the loop serves everyone else: only X's
 *      own answer waits); then X's create is answered 0. Tried up to 10
 *      times: X's wait is bounded (about a second), so on a machine slow
 *      enough Y's answer may come after X's, which shows nothing either
 *      way; a loop held by X's wait would never answer Y first.
 * Every wait is "eventually, within 10 s".
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define BIG "limit.rate = 100/s; limit.keys = 300000"

static struct test_daemon d;

static void send_req(int fd, Resil__Request *req, uint64_t id)
{
	static uint8_t buf[4096];
	size_t n;

	req->id = id;
	n = resil__request__pack(req, buf);
	TEST_CHECK(send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n);
}

/* The reply to request id on fd (events skipped), within 10 s; its errno
 * (0: none). */
static int reply(int fd, uint64_t id)
{
	static uint8_t buf[70000];

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		Resil__Response *resp;
		ssize_t r;
		int e;

		TEST_CHECK(poll(&p, 1, TEST_EVENTUALLY_MS) == 1);
		r = recv(fd, buf, sizeof(buf), 0);
		TEST_CHECK(r > 0);
		resp = resil__response__unpack(NULL, (size_t)r, buf);
		TEST_CHECK(resp != NULL);
		if (resp->id != id) {
			resil__response__free_unpacked(resp, NULL);
			continue;
		}
		e = resp->error ? resp->error->errno_value : 0;
		if (e)
			printf("request %llu: %s\n", (unsigned long long)id, resp->error->message);
		resil__response__free_unpacked(resp, NULL);
		return e;
	}
}

/* Nothing to read on fd yet? */
static bool unanswered(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 0;
}

int main(void)
{
	const char *extra[] = {"--state-size", "16M", NULL};
	Resil__Request dreq = RESIL__REQUEST__INIT, lreq = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;
	Resil__List ls = RESIL__LIST__INIT;
	long long arena, used0, big;
	resil_t *r = NULL;
	bool shown = false;
	int x, y;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	arena = test_metric(r, "resil_arena_bytes ");

	/* 1: cycles back to back */
	for (int i = 0; i < 60; i++) {
		int e = resil_define(r, "cycle", "limit.rate = 100/s; limit.keys = 10000");

		if (e == 0)
			e = resil_delete(r, "cycle");
		if (e < 0)
			printf("cycle %d: %s\n", i, resil_last_error());
		TEST_CHECK(e == 0);
	}
	printf("60 create/delete cycles of a 10,000-key limiter in %lld arena bytes: all "
	       "answered 0\n",
	       arena);
	TEST_CHECK(TEST_EVENTUALLY(test_metric(r, "resil_arena_waiting_bytes ") == 0));

	/* 2: a create waiting for space holds nobody else */
	used0 = test_metric(r, "resil_arena_used_bytes ");
	TEST_CHECK(resil_define(r, "big", BIG) == 0);
	big = test_metric(r, "resil_arena_used_bytes ") - used0;
	printf("policy big takes %lld of %lld arena bytes\n", big, arena);
	TEST_CHECK(2 * big > arena && big < arena);
	TEST_CHECK(resil_delete(r, "big") == 0);
	df.name = "big";
	df.config = BIG;
	dreq.body_case = RESIL__REQUEST__BODY_DEFINE;
	dreq.define = &df;
	lreq.body_case = RESIL__REQUEST__BODY_LIST;
	lreq.list = &ls;
	x = test_connect_raw(d.sock);
	y = test_connect_raw(d.sock);
	TEST_CHECK(x >= 0 && y >= 0);
	for (int t = 1; t <= 10 && !shown; t++) {
		if (t > 1) {
			TEST_CHECK(resil_delete(r, "big") == 0);
			/* its space waits out its grace: the next create needs it */
		}
		send_req(x, &dreq, 2 * (uint64_t)t);
		send_req(y, &lreq, 2 * (uint64_t)t + 1);
		TEST_CHECK(reply(y, 2 * (uint64_t)t + 1) == 0);
		shown = unanswered(x);
		TEST_CHECK(reply(x, 2 * (uint64_t)t) == 0);
		printf("try %d: list on another connection answered %s the waiting create\n", t,
		       shown ? "before" : "after");
	}
	TEST_CHECK(shown);
	close(x);
	close(y);

	resil_close(r);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_space_wait: ok\n");
	return 0;
}

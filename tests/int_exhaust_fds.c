/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_fds.c - no member of the socket group can fill resild's
 * descriptor table.
 *
 * resild starts with RLIMIT_NOFILE 64 (soft and hard: `ulimit -n 64`).
 * As a member of the socket group without admin rights (accounts made
 * for the test: group rt-fds, users rt-fds-a and rt-fds-b), uid A opens
 * 60 connections, under its per-uid limit, holds them idle and opens a
 * new one each time one is closed, for the whole test. Then uid B:
 *   - connects and has a List answered within 1 s, five times;
 *   - opens the library (eventually: hello, the segments: two descriptors and a
 *     pidfd in resild), and a worker of B killed holding the one permit
 *     of a bulkhead has it back (reclaim keeps working).
 * Asserted: those bounds and outcomes, resild alive, and that resild
 * raised nothing above the hard limit (soft = hard = 64 here). Skips
 * (77) when not root.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define HOG 60

/* A new connection, a List on it, its answer within ms: true if answered. */
static bool list_within(const char *sock, int ms)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;
	uint8_t buf[65536];
	size_t len;
	bool ok = false;
	int fd = test_connect_raw(sock);
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (fd < 0)
		return false;
	req.id = 7;
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	len = resil__request__pack(&req, buf);
	if (send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len && poll(&p, 1, ms) == 1) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		Resil__Response *resp =
		    n > 0 ? resil__response__unpack(NULL, (size_t)n, buf) : NULL;

		ok = resp && resp->id == 7 && resp->body_case == RESIL__RESPONSE__BODY_LIST;
		if (resp)
			resil__response__free_unpacked(resp, NULL);
	}
	close(fd);
	return ok;
}

/* uid A: 60 connections held idle, each closed one opened again. */
static void hog(const char *sock, int report, int stop)
{
	int fds[HOG], made = 0;
	struct pollfd p = {.fd = stop, .events = POLLIN};

	for (int i = 0; i < HOG; i++) {
		fds[i] = test_connect_raw(sock);
		made += fds[i] >= 0;
	}
	TEST_CHECK(write(report, &made, sizeof(made)) == sizeof(made));
	while (poll(&p, 1, 10) == 0)
		for (int i = 0; i < HOG; i++)
			if (fds[i] < 0 || test_hung_up(fds[i])) {
				if (fds[i] >= 0)
					close(fds[i]);
				fds[i] = test_connect_raw(sock);
			}
	_exit(0);
}

int main(void)
{
	struct test_daemon d;
	char gs[16];
	const char *extra[] = {"--socket-group", gs, NULL};
	gid_t g;
	uid_t ua, ub;
	int rep[2], stop[2], made = 0, st;
	pid_t a, b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_exhaust_fds: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-fds", &g) == 0);
	TEST_CHECK(test_user_make("rt-fds-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-fds-b", g, &ub) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0)
		return 1;
	d.nofile = 64;
	if (test_daemon_start(&d, extra) < 0)
		return 1;

	TEST_CHECK(pipe(rep) == 0 && pipe(stop) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		test_become(ua, g);
		hog(d.sock, rep[1], stop[0]);
	}
	TEST_CHECK(read(rep[0], &made, sizeof(made)) == sizeof(made));
	printf("uid %u holds %d connections (resild's RLIMIT_NOFILE: 64)\n", (unsigned)ua, made);
	TEST_CHECK(made == HOG);

	b = fork();
	TEST_CHECK(b >= 0);
	if (b == 0) {
		resil_t *r = NULL;
		resil_policy_t *p;
		resil_permit_t pm;
		int pfd[2];
		char ch;
		pid_t w;

		test_become(ub, g);
		for (int i = 0; i < 5; i++)
			TEST_CHECK(list_within(d.sock, 1000));
		/* eventually, within 10 s: the hog takes back every descriptor
		 * resild frees, so an open may meet a full table once */
		for (int i = 0; i < 100 && resil_open(&r, d.sock) != 0; i++)
			test_sleep_ms(100);
		TEST_CHECK(r != NULL);
		TEST_CHECK(resil_define(r, "fds_one", "bulkhead.max = 1") == 0);
		TEST_CHECK(resil_policy(r, "fds_one", &p) == 0);
		TEST_CHECK(pipe(pfd) == 0);
		w = fork();
		TEST_CHECK(w >= 0);
		if (w == 0) {
			resil_t *c = NULL;
			resil_policy_t *q;

			for (int i = 0; i < 100 && resil_open(&c, d.sock) != 0; i++)
				test_sleep_ms(100);
			TEST_CHECK(c != NULL);
			TEST_CHECK(resil_policy(c, "fds_one", &q) == 0);
			TEST_CHECK(resil_acquire(q, &pm) == RESIL_ADMIT);
			TEST_CHECK(write(pfd[1], "x", 1) == 1);
			pause();
			_exit(0);
		}
		close(pfd[1]); /* a worker that failed ends the read */
		TEST_CHECK(read(pfd[0], &ch, 1) == 1);
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_FULL);
		kill(w, SIGKILL);
		waitpid(w, NULL, 0);
		TEST_CHECK(TEST_EVENTUALLY(resil_acquire(p, &pm) == RESIL_ADMIT));
		resil_release(p, &pm, RESIL_SUCCESS);
		resil_close(r);
		_exit(0);
	}
	st = test_wait_pid(b, 60000);
	TEST_CHECK(write(stop[1], "x", 1) == 1);
	TEST_CHECK(test_wait_pid(a, 10000) == 0);
	printf("uid %u: lists answered within 1 s, a dead worker's permit back: status %#x\n",
	       (unsigned)ub, st);
	TEST_CHECK(st == 0);
	TEST_CHECK(test_daemon_answers(&d));
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_exhaust_fds: ok\n");
	return 0;
}

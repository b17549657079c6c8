/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_conns.c - no member of the socket group can take the
 * control socket away from the others.
 *
 * Every peer here is a member of the socket group without admin rights:
 * forked children that drop to numeric uids and a group of their own (no
 * account is created, so nothing is left behind; the daemon gets the
 * group with --socket-group). Three cases:
 *   1. per-uid limit: uid A opens as many connections as the daemon has
 *      slots and holds them idle. A's next resil_open is refused with the
 *      limit named; uid B still opens, defines and lists.
 *   2. idle timeout: A's silent connections are closed by the daemon
 *      (each sees the hang-up); B's resil_t, silent as long, still defines
 *      afterwards (the library reconnects without the caller noticing).
 *   3. unread replies with descriptors: a resild running as a non-root uid
 *      (the kernel caps descriptors in flight per uid by RLIMIT_NOFILE for
 *      non-root senders), A floods GetSegments on 30 connections and never
 *      reads; B's resil_open keeps succeeding and A's connections are told
 *      why they are cut off.
 * Skips (77) when not root: changing uid needs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
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

#define G_SOCK 4200 /* the socket group */
#define U_A    4201 /* a member that takes what it can */
#define U_B    4202 /* a member that minds its own business */
#define U_D    4203 /* resild itself, in case 3 */

#define SLOTS	    48
#define PER_UID	    8
#define FLOOD_CONNS 30

static void become(uid_t uid)
{
	gid_t g = G_SOCK;

	TEST_CHECK(setgroups(1, &g) == 0);
	TEST_CHECK(setresgid(G_SOCK, G_SOCK, G_SOCK) == 0);
	TEST_CHECK(setresuid(uid, uid, uid) == 0);
	TEST_CHECK(geteuid() == uid);
}

/* A hello and its answer on a raw connection: true when answered. */
static bool ping(int fd)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello h = RESIL__HELLO__INIT;
	uint8_t buf[512];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	size_t len;

	h.min_version = h.max_version = 1;
	req.id = 1;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &h;
	len = resil__request__pack(&req, buf);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return false;
	return poll(&p, 1, 10000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0;
}

/* One List round trip on r's control connection: 0 or -errno. */
static int list_once(resil_t *r)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;
	Resil__Response *resp = NULL;
	int e;

	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	pthread_mutex_lock(&r->lock);
	e = resil_priv_request(r, &req, &resp, NULL, NULL);
	pthread_mutex_unlock(&r->lock);
	if (e == 0)
		resil__response__free_unpacked(resp, NULL);
	return e;
}

static int wait_ok(pid_t pid, const char *what)
{
	int st = test_wait_pid(pid, 60000);

	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	fprintf(stderr, "%s failed (status %d)\n", what, st);
	return 1;
}

/* Case 1 and 2, uid A's side: hold every connection it can get, report
 * how many on the pipe, check its own refusal, then wait until the
 * daemon closes them all (idle timeout). */
static void hog(const char *sock, int report, int go)
{
	int fds[SLOTS], n = 0, held = 0;
	resil_t *r = NULL;
	int e;

	become(U_A);
	for (int i = 0; i < SLOTS; i++) {
		fds[i] = test_connect_raw(sock);
		if (fds[i] >= 0)
			n++;
	}
	TEST_CHECK(n > 0);
	/* the connections past the limit were answered and closed */
	TEST_CHECK(TEST_EVENTUALLY(({
		held = 0;
		for (int i = 0; i < SLOTS; i++)
			held += fds[i] >= 0 && !test_hung_up(fds[i]);
		held <= PER_UID;
	})));
	printf("uid %d holds %d connections of %d\n", U_A, held, SLOTS);
	e = resil_open(&r, sock);
	printf("uid %d resil_open past its limit: %s (%s)\n", U_A, strerror(-e),
	       resil_last_error());
	TEST_CHECK(e == -EUSERS);
	TEST_CHECK(strstr(resil_last_error(), "per uid") != NULL);
	TEST_CHECK(strstr(resil_last_error(), "--max-connections-per-uid") != NULL);
	TEST_CHECK(write(report, &held, sizeof(held)) == sizeof(held));
	/* busy (never idle) until uid B has opened and listed beside us */
	for (;;) {
		struct pollfd p = {.fd = go, .events = POLLIN};

		if (poll(&p, 1, 300) == 1)
			break;
		for (int i = 0; i < SLOTS; i++)
			if (fds[i] >= 0 && !test_hung_up(fds[i]))
				TEST_CHECK(ping(fds[i]));
	}
	/* case 2: silent, every one is closed by the daemon */
	TEST_CHECK(TEST_EVENTUALLY(({
		bool all = true;
		for (int i = 0; i < SLOTS; i++)
			all = all && (fds[i] < 0 || test_hung_up(fds[i]));
		all;
	})));
	for (int i = 0; i < SLOTS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	_exit(0);
}

static int case_limit_and_idle(void)
{
	const char *extra[] = {"--socket-group",
			       "4200",
			       "--max-connections",
			       "48",
			       "--max-connections-per-uid",
			       "8",
			       "--idle-timeout",
			       "3s",
			       NULL};
	struct test_daemon d;
	int pfd[2], go[2], held = -1, fails = 0;
	pid_t a, b;

	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(pipe2(pfd, O_CLOEXEC) == 0);
	TEST_CHECK(pipe2(go, O_CLOEXEC) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		close(pfd[0]);
		hog(d.sock, pfd[1], go[0]);
	}
	close(pfd[1]);
	TEST_CHECK(read(pfd[0], &held, sizeof(held)) == sizeof(held));
	close(pfd[0]);
	TEST_CHECK(held >= 1 && held <= PER_UID);

	/* uid B while A holds all it may: opens, defines, lists; then,
	 * silent past the idle timeout, defines again on a new connection */
	b = fork();
	TEST_CHECK(b >= 0);
	if (b == 0) {
		resil_t *r = NULL;
		int64_t t0;
		int e;

		become(U_B);
		t0 = test_mono_ns();
		e = resil_open(&r, d.sock);
		if (e < 0)
			fprintf(stderr, "uid B resil_open: %s (%s)\n", strerror(-e),
				resil_last_error());
		TEST_CHECK(e == 0);
		TEST_CHECK(list_once(r) == 0);
		printf("uid %d: open and list in %lld ms while uid %d holds its limit\n", U_B,
		       (long long)((test_mono_ns() - t0) / 1000000), U_A);
		TEST_CHECK(resil_define(r, "b.svc", "bulkhead.max = 3") == 0);
		TEST_CHECK(write(go[1], "", 1) == 1);
		/* the daemon closes B's silent connection too */
		TEST_CHECK(TEST_EVENTUALLY(r->ctl_fd >= 0 && test_hung_up(r->ctl_fd)));
		TEST_CHECK(resil_define(r, "b.svc2", "bulkhead.max = 4") == 0);
		TEST_CHECK(list_once(r) == 0);
		resil_close(r);
		_exit(0);
	}
	close(go[0]);
	close(go[1]);
	fails += wait_ok(b, "uid B beside uid A's connections");
	fails += wait_ok(a, "uid A's connections");
	test_daemon_fini(&d);
	return fails;
}

/* resild as uid U_D with at most 256 descriptors (so the kernel's cap on
 * descriptors in flight is 256 too). */
static int start_unprivileged(struct test_daemon *d)
{
	const char *argv[] = {RESILD_PATH,
			      "--foreground",
			      "--socket",
			      d->sock,
			      "--config-dir",
			      d->confdir,
			      "--max-connections",
			      "128",
			      "--max-connections-per-uid",
			      "64",
			      NULL};
	pid_t pid;

	if (test_daemon_init(d) < 0)
		return -1;
	TEST_CHECK(chown(d->dir, U_D, G_SOCK) == 0);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {256, 256};
		int logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		TEST_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
		become(U_D);
		unsetenv("NOTIFY_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	d->pid = pid;
	if (!TEST_EVENTUALLY(test_daemon_answers(d))) {
		test_daemon_fini(d);
		return -1;
	}
	return 0;
}

/* uid A: FLOOD_CONNS connections, each sending GetSegments until the
 * socket is full, never reading; then the daemon's words on one. */
static void flood(const char *sock, int report, int go)
{
	uint8_t buf[64];
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__GetSegments gs = RESIL__GET_SEGMENTS__INIT;
	int fds[FLOOD_CONNS], sent = 0, cut = 0;
	size_t len;

	become(U_A);
	req.body_case = RESIL__REQUEST__BODY_GET_SEGMENTS;
	req.get_segments = &gs;
	for (int i = 0; i < FLOOD_CONNS; i++) {
		fds[i] = test_connect_raw(sock);
		TEST_CHECK(fds[i] >= 0);
		for (int k = 0; k < 300; k++) {
			req.id = (uint64_t)k + 1;
			len = resil__request__pack(&req, buf);
			if (send(fds[i], buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
				break;
			sent++;
		}
	}
	printf("uid %d sent %d GetSegments on %d connections, reading nothing\n", U_A, sent,
	       FLOOD_CONNS);
	TEST_CHECK(write(report, &sent, sizeof(sent)) == sizeof(sent));
	/* wait until uid B is done beside us */
	TEST_CHECK(read(go, &cut, 1) == 1);
	cut = 0;
	/* now read one connection: somewhere in it, the daemon says why */
	for (;;) {
		uint8_t rb[70000];
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int) * 8)];
		} cb;
		struct iovec iov = {rb, sizeof(rb)};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cb.b,
				    .msg_controllen = sizeof(cb.b)};
		Resil__Response *m;
		ssize_t n = recvmsg(fds[0], &mh, MSG_CMSG_CLOEXEC);

		if (n <= 0)
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
				close(((int *)CMSG_DATA(c))[i]);
		m = resil__response__unpack(NULL, (size_t)n, rb);
		if (m && m->id == 0 && m->error) {
			printf("uid %d told: %s\n", U_A, m->error->message);
			cut = strstr(m->error->message, "unread") != NULL;
		}
		if (m)
			resil__response__free_unpacked(m, NULL);
		if (cut)
			break;
	}
	TEST_CHECK(cut);
	for (int i = 0; i < FLOOD_CONNS; i++)
		close(fds[i]);
	_exit(0);
}

static int case_unread(void)
{
	struct test_daemon d;
	int pfd[2], go[2], sent = 0, fails = 0;
	pid_t a, b;

	if (start_unprivileged(&d) < 0)
		return 1;
	TEST_CHECK(pipe2(pfd, O_CLOEXEC) == 0);
	TEST_CHECK(pipe2(go, O_CLOEXEC) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		close(pfd[0]);
		flood(d.sock, pfd[1], go[0]);
	}
	close(pfd[1]);
	TEST_CHECK(read(pfd[0], &sent, sizeof(sent)) == sizeof(sent));
	close(pfd[0]);
	TEST_CHECK(sent > 2 * FLOOD_CONNS);

	b = fork();
	TEST_CHECK(b >= 0);
	if (b == 0) {
		become(U_B);
		for (int i = 0; i < 20; i++) {
			resil_t *r = NULL;
			int e = resil_open(&r, d.sock);

			if (e < 0)
				fprintf(stderr, "uid B resil_open %d beside the flood: %s (%s)\n",
					i, strerror(-e), resil_last_error());
			TEST_CHECK(e == 0);
			TEST_CHECK(list_once(r) == 0);
			resil_close(r);
		}
		_exit(0);
	}
	fails += wait_ok(b, "uid B's opens beside the flood");
	TEST_CHECK(write(go[1], "", 1) == 1);
	close(go[0]);
	close(go[1]);
	fails += wait_ok(a, "uid A's flood");
	test_daemon_fini(&d);
	return fails;
}

int main(void)
{
	int fails = 0;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IONBF, 0);
	if (geteuid() != 0) {
		fprintf(stderr, "int_exhaust_conns: needs root to change uid: skipped\n");
		return TEST_SKIP;
	}
	fails += case_limit_and_idle();
	fails += case_unread();
	if (!fails)
		printf("int_exhaust_conns: ok\n");
	return fails ? 1 : 0;
}

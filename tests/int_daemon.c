/* SPDX-License-Identifier: MIT */
/*
 * int_daemon.c - resild as a process: the control protocol over its
 * socket, configuration files, reloads, permissions.
 *
 *   - a malformed request (random bytes) and an oversized one (over
 *     64 KiB) each get an error Response and their connection is closed,
 *     while another connection keeps being served (hello, list);
 *   - a configuration file with an error: resild exits with status 78
 *     (EX_CONFIG) and stderr names FILE:LINE;
 *   - SIGHUP with a broken file keeps the old configuration running;
 *   - a reload applies only the differences: an unchanged policy keeps its
 *     live state (a forced breaker stays forced, same generation), a
 *     changed one changes, a new one appears, one removed from the files
 *     goes, and one created through the API stays;
 *   - permissions: as uid nobody (a forked child), creating a new policy
 *     and re-defining an existing one identically work, changing or
 *     deleting root's policy gives EPERM naming who may, changing its own
 *     works; root may change anything; so may a member of the admin group
 *     (a supplementary group, seen through SO_PEERGROUPS), and only one;
 *   - get_segments passes a read-only config fd and a read-write state fd
 *     (both read-only for an observer);
 *   - events reach subscribers (filtered by policy name) and the log, and
 *     a client SIGKILLed while holding a bulkhead permit is reclaimed;
 *   - bounds (connections, subscribers, policies, list pages): the
 *     newcomer past one gets a clear error, nobody else is affected;
 *   - systemd: READY=1, STATUS, WATCHDOG=1 and both memfds in the fd store
 *     (received on a notify socket of the test's own), and a daemon
 *     started after a SIGKILL with those fds (LISTEN_FDNAMES=config:state)
 *     adopts them: policies and live state continue, and the stale socket
 *     file the killed daemon left is replaced; a supervisor that stops
 *     reading its notify socket (queue full) while resild's status
 *     changes: every request answered, the newest status sent once the
 *     queue has room.
 * Every wait is "eventually, within 10 s". Skips (77) when not root.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "resil.h"
#include "resil.pb-c.h"
#include "testutil.h"

/* ---- a minimal control client ---- */

/* One datagram, with fds; waits up to 10 s. Returns its length, 0 on EOF,
 * -ETIMEDOUT, or -errno. */
static ssize_t recv_msg(int fd, uint8_t *buf, size_t len, int *fds, int *nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {buf, len};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (nfds)
		*nfds = 0;
	if (poll(&p, 1, TEST_EVENTUALLY_MS) != 1)
		return -ETIMEDOUT;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < k; i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (fds && nfds && *nfds < 4)
					fds[(*nfds)++] = f;
				else
					close(f);
			}
		}
	return n;
}

static uint64_t next_id = 1;

/* Send req, receive its Response (NULL on any failure). */
/*
 * One request, its reply. A subscriber's connection carries events (id 0)
 * between replies, whenever a tick drains the ring: they are not the
 * reply, so they are skipped. Reading them as replies made every later
 * request of the connection read the answer of an earlier one, which only
 * showed when a tick fell inside a run of requests (a loaded machine).
 */
static Resil__Response *call(int fd, Resil__Request *req, int *fds, int *nfds)
{
	static uint8_t buf[70000];
	Resil__Response *resp;
	size_t n;
	ssize_t r;

	req->id = next_id++;
	n = resil__request__pack(req, buf);
	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		return NULL;
	for (;;) {
		r = recv_msg(fd, buf, sizeof(buf), fds, nfds);
		if (r <= 0)
			return NULL;
		resp = resil__response__unpack(NULL, (size_t)r, buf);
		if (!resp || resp->id == req->id ||
		    !(resp->id == 0 && resp->body_case == RESIL__RESPONSE__BODY_EVENT))
			return resp;
		resil__response__free_unpacked(resp, NULL);
	}
}

#define CREATE RESIL__REQUEST__BODY_DEFINE
#define UPDATE (-1) /* a Define with merge */
#define DELETE RESIL__REQUEST__BODY_DELETE
#define FORCE  RESIL__REQUEST__BODY_FORCE

static void resp_free(Resil__Response *r)
{
	if (r)
		resil__response__free_unpacked(r, NULL);
}

/* errno of a Response (0: success), -1 when there was none. */
static int resp_err(const Resil__Response *r)
{
	if (!r)
		return -1;
	return r->error ? r->error->errno_value : 0;
}

static int do_hello(int fd)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello h = RESIL__HELLO__INIT;
	Resil__Response *r;
	int e;

	h.min_version = 1;
	h.max_version = 1;
	h.client = "int_daemon";
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &h;
	r = call(fd, &req, NULL, NULL);
	e = resp_err(r);
	if (e == 0 && (r->body_case != RESIL__RESPONSE__BODY_HELLO || r->hello->version != 1 ||
		       r->id != req.id))
		e = -2;
	resp_free(r);
	return e;
}

/* Policies listed (first page), or -1. names gets them space-separated. */
static int do_list(int fd, char *names, size_t len)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;
	Resil__Response *r;
	int n;

	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	r = call(fd, &req, NULL, NULL);
	if (resp_err(r) != 0 || r->body_case != RESIL__RESPONSE__BODY_LIST) {
		resp_free(r);
		return -1;
	}
	if (names) {
		names[0] = '\0';
		for (size_t i = 0; i < r->list->n_policies; i++) {
			strncat(names, " ", len - strlen(names) - 1);
			strncat(names, r->list->policies[i]->name, len - strlen(names) - 1);
		}
		strncat(names, " ", len - strlen(names) - 1);
	}
	n = (int)r->list->n_policies;
	resp_free(r);
	return n;
}

/* A PolicyInfo's breaker state in words. */
static const char *state_word(Resil__BreakerState s)
{
	static const char *const words[] = {"none",	"closed",      "open",	      "half-open",
					    "disabled", "forced-open", "metrics-only"};

	return (unsigned)s < 7 ? words[s] : "?";
}

/* Get: errno (0 ok); state, config and generation when asked. */
static int do_get(int fd, const char *name, char *state, char *config, size_t clen, uint32_t *gen)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Get g = RESIL__GET__INIT;
	Resil__Response *r;
	int e;

	g.name = (char *)name;
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &g;
	r = call(fd, &req, NULL, NULL);
	e = resp_err(r);
	if (e == 0 && r->body_case == RESIL__RESPONSE__BODY_POLICY) {
		if (state)
			snprintf(state, 32, "%s", state_word(r->policy->breaker));
		if (config)
			snprintf(config, clen, "%s", r->policy->config);
		if (gen)
			*gen = r->policy->generation;
	}
	resp_free(r);
	return e;
}

/* create (or re-define) / update / delete / force (the target in words):
 * errno (0 ok); msg gets the error text. */
static int do_req(int fd, int kind, const char *name, const char *arg, char *msg, size_t mlen)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;
	Resil__Delete dl = RESIL__DELETE__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;
	Resil__Response *r;
	int e;

	req.body_case = kind == UPDATE ? CREATE : kind;
	switch (kind) {
	case CREATE:
	case UPDATE:
		df.name = (char *)name;
		df.config = (char *)arg;
		df.merge = kind == UPDATE;
		req.define = &df;
		break;
	case RESIL__REQUEST__BODY_DELETE:
		dl.name = (char *)name;
		req.delete_ = &dl;
		break;
	case FORCE:
		f.name = (char *)name;
		f.target = !strcmp(arg, "closed")     ? RESIL__BREAKER_STATE__BREAKER_CLOSED
			   : !strcmp(arg, "open")     ? RESIL__BREAKER_STATE__BREAKER_FORCED_OPEN
			   : !strcmp(arg, "disabled") ? RESIL__BREAKER_STATE__BREAKER_DISABLED
			   : !strcmp(arg, "metrics-only")
			       ? RESIL__BREAKER_STATE__BREAKER_METRICS_ONLY
			       : RESIL__BREAKER_STATE__BREAKER_NONE;
		req.force = &f;
		break;
	}
	r = call(fd, &req, NULL, NULL);
	e = resp_err(r);
	if (msg && mlen)
		snprintf(msg, mlen, "%s", r && r->error ? r->error->message : "");
	resp_free(r);
	return e;
}

static void write_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
}

/* The daemon of the running test: a failed assertion leaves the test
 * function at once, and the teardown stops it and removes its directory. */
static struct test_daemon *current;

static int teardown(void **state)
{
	if (current) {
		test_daemon_fini(current);
		current = NULL;
	}
	return 0;
}

static int start(struct test_daemon *d, const char *conf, const char *const *extra)
{
	char path[PATH_MAX + 16];

	current = d;
	if (test_daemon_init(d) < 0)
		return -1;
	if (conf) {
		mkdir(d->confdir, 0755);
		snprintf(path, sizeof(path), "%s/10-test.conf", d->confdir);
		write_file(path, conf);
	}
	return test_daemon_start(d, extra);
}

/* ---- tests ---- */

static void test_malformed(void **state)
{
	static struct test_daemon d;
	uint8_t junk[512], *big, buf[4096];
	int a, b, c, sz = 1 << 20;
	Resil__Response *r;
	ssize_t n;
	char names[256];

	assert_int_equal(start(&d, "[policy one]\nbreaker.failure_rate = 50\n", NULL), 0);
	b = test_connect_raw(d.sock);
	assert_true(b >= 0);
	assert_int_equal(do_hello(b), 0);

	/* random bytes: an error reply, then the connection is closed */
	a = test_connect_raw(d.sock);
	assert_true(a >= 0);
	srand(42);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rand();
	junk[0] = 0xff; /* never a valid field key */
	assert_int_equal(send(a, junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
	n = recv_msg(a, buf, sizeof(buf), NULL, NULL);
	assert_true(n > 0);
	r = resil__response__unpack(NULL, (size_t)n, buf);
	assert_non_null(r);
	assert_non_null(r->error);
	assert_int_equal(r->error->errno_value, EBADMSG);
	resp_free(r);
	assert_int_equal(recv_msg(a, buf, sizeof(buf), NULL, NULL), 0); /* closed */
	close(a);

	/* oversized: over 64 KiB */
	c = test_connect_raw(d.sock);
	assert_true(c >= 0);
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	big = calloc(1, 100 * 1024);
	assert_non_null(big);
	assert_int_equal(send(c, big, 100 * 1024, MSG_NOSIGNAL), 100 * 1024);
	free(big);
	n = recv_msg(c, buf, sizeof(buf), NULL, NULL);
	assert_true(n > 0);
	r = resil__response__unpack(NULL, (size_t)n, buf);
	assert_non_null(r);
	assert_non_null(r->error);
	assert_int_equal(r->error->errno_value, EMSGSIZE);
	resp_free(r);
	assert_int_equal(recv_msg(c, buf, sizeof(buf), NULL, NULL), 0);
	close(c);

	/* the first connection is served as before, and so is a new one */
	assert_int_equal(do_hello(b), 0);
	assert_int_equal(do_list(b, names, sizeof(names)), 1);
	assert_non_null(strstr(names, " one "));
	close(b);
	b = test_connect_raw(d.sock);
	assert_true(b >= 0);
	assert_int_equal(do_list(b, NULL, 0), 1);
	close(b);

	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

static void test_bad_config_exits(void **state)
{
	static struct test_daemon d;
	char path[PATH_MAX + 16], out[4096], want[PATH_MAX + 32];
	const char *argv[] = {RESILD_PATH, "--foreground", "--socket", d.sock,
			      "--config",  d.confdir,	   NULL};

	current = &d;
	assert_int_equal(test_daemon_init(&d), 0);
	argv[3] = d.sock;
	argv[5] = d.confdir;
	mkdir(d.confdir, 0755);
	snprintf(path, sizeof(path), "%s/20-bad.conf", d.confdir);
	write_file(path, "# a comment\n[policy ok]\nbreaker.failure_rate = 50\n"
			 "breaker.failure_rate = 250\n");
	assert_int_equal(test_run(argv, NULL, out, sizeof(out)), 78); /* EX_CONFIG */
	snprintf(want, sizeof(want), "%s:4: ", path);
	if (!strstr(out, want))
		fprintf(stderr, "resild said: %s\n", out);
	assert_non_null(strstr(out, want));
	/* nothing left behind: the socket was never created */
	assert_int_equal(access(d.sock, F_OK), -1);

	write_file(path, "[policy ok]\nno equals sign here\n");
	assert_int_equal(test_run(argv, NULL, out, sizeof(out)), 78); /* EX_CONFIG */
	snprintf(want, sizeof(want), "%s:2: ", path);
	assert_non_null(strstr(out, want));
	test_daemon_fini(&d);
}

static void test_reload(void **state)
{
	static struct test_daemon d;
	char path[PATH_MAX + 16], names[512], st[32], conf[4096], msg[256];
	uint32_t gen_a, gen_a2, gen_b, gen_b2;
	int fd;

	assert_int_equal(start(&d,
			       "[policy a]\nbreaker.failure_rate = 50\n\n"
			       "[policy b]\nbreaker.failure_rate = 40\n\n"
			       "[policy gone]\nbulkhead.max = 5\n",
			       NULL),
			 0);
	snprintf(path, sizeof(path), "%s/10-test.conf", d.confdir);
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(do_list(fd, names, sizeof(names)), 3);

	/* live state in a: forced open; an API policy */
	assert_int_equal(do_req(fd, FORCE, "a", "open", msg, sizeof(msg)), 0);
	assert_int_equal(do_get(fd, "a", st, NULL, 0, &gen_a), 0);
	assert_string_equal(st, "forced-open");
	assert_int_equal(do_get(fd, "b", NULL, NULL, 0, &gen_b), 0);
	assert_int_equal(do_req(fd, CREATE, "api", "bulkhead.max = 3", msg, sizeof(msg)), 0);

	/* a broken file: the old configuration keeps running */
	write_file(path, "[policy a]\nbreaker.failure_rate = 50\n[policy new]\n"
			 "breaker.wait = forever\n");
	kill(d.pid, SIGHUP);
	assert_true(TEST_EVENTUALLY(test_log_count(&d, "configuration not reloaded") >= 1));
	assert_int_equal(do_list(fd, names, sizeof(names)), 4);
	assert_null(strstr(names, " new "));
	assert_non_null(strstr(names, " gone "));
	assert_int_equal(do_get(fd, "a", st, NULL, 0, NULL), 0);
	assert_string_equal(st, "forced-open");

	/* a good file: a unchanged, b changed, gone removed, new added */
	write_file(path, "[policy a]\nbreaker.failure_rate = 50\n\n"
			 "[policy b]\nbreaker.failure_rate = 30\n\n"
			 "[policy new]\nbreaker.wait = 5s\n");
	kill(d.pid, SIGHUP);
	assert_true(TEST_EVENTUALLY(do_get(fd, "new", NULL, NULL, 0, NULL) == 0));
	assert_int_equal(do_get(fd, "gone", NULL, NULL, 0, NULL), ENOENT);
	assert_int_equal(do_get(fd, "api", NULL, NULL, 0, NULL), 0);
	assert_int_equal(do_get(fd, "a", st, NULL, 0, &gen_a2), 0);
	assert_string_equal(st, "forced-open"); /* live state kept */
	assert_int_equal(gen_a2, gen_a);	/* untouched */
	assert_int_equal(do_get(fd, "b", NULL, conf, sizeof(conf), &gen_b2), 0);
	assert_true(gen_b2 != gen_b);
	assert_non_null(strstr(conf, "30"));
	assert_int_equal(do_list(fd, names, sizeof(names)), 4);
	close(fd);

	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

/* As nobody: what the permission rules allow. Exits 0 when all held. */
static void nobody_child(const char *sock)
{
	char msg[512];
	int fd;

	TEST_CHECK(test_drop_to_nobody() == 0);
	fd = test_connect_raw(sock);
	TEST_CHECK(fd >= 0);
	TEST_CHECK(do_hello(fd) == 0);
	TEST_CHECK(do_list(fd, NULL, 0) >= 1);
	/* identical re-definition of root's policy: allowed */
	TEST_CHECK(do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 50", msg, sizeof(msg)) ==
		   0);
	/* a change: refused, and the message says who may */
	TEST_CHECK(do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 20", msg, sizeof(msg)) ==
		   EPERM);
	TEST_CHECK(strstr(msg, "rootpol") && strstr(msg, "needs root") && strstr(msg, "uid 0"));
	TEST_CHECK(do_req(fd, UPDATE, "rootpol", "breaker.wait = 1s", msg, sizeof(msg)) == EPERM);
	TEST_CHECK(do_req(fd, DELETE, "rootpol", NULL, msg, sizeof(msg)) == EPERM);
	TEST_CHECK(do_req(fd, FORCE, "rootpol", "open", msg, sizeof(msg)) == EPERM);
	/* its own: create, change, delete */
	TEST_CHECK(do_req(fd, CREATE, "mine", "bulkhead.max = 2", msg, sizeof(msg)) == 0);
	TEST_CHECK(do_req(fd, CREATE, "mine", "bulkhead.max = 3", msg, sizeof(msg)) == 0);
	TEST_CHECK(do_req(fd, CREATE, "mine2", "bulkhead.max = 2", msg, sizeof(msg)) == 0);
	TEST_CHECK(do_req(fd, DELETE, "mine2", NULL, msg, sizeof(msg)) == 0);
	/* update of something that does not exist */
	TEST_CHECK(do_req(fd, UPDATE, "nothing", "bulkhead.max = 2", msg, sizeof(msg)) == ENOENT);
	close(fd);
	exit(0);
}

#define ADMIN_GID 4242 /* the admin group: a supplementary group of the child */

/* As nobody, first without then with the admin group as a supplementary
 * group (SO_PEERGROUPS): refused, then root's policy may be changed. */
static void admin_child(const char *sock)
{
	char msg[512];
	int fd;

	TEST_CHECK(test_drop_to_nobody() == 0);
	fd = test_connect_raw(sock);
	TEST_CHECK(fd >= 0);
	TEST_CHECK(do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 20", msg, sizeof(msg)) ==
		   EPERM);
	TEST_CHECK(strstr(msg, "group 4242") != NULL);
	close(fd);
	exit(0);
}

static void admin_member_child(const char *sock)
{
	gid_t g = ADMIN_GID, nob = test_nobody_gid();
	uid_t nobu = test_nobody_uid();
	char msg[512];
	int fd;

	TEST_CHECK(setgroups(1, &g) == 0);
	TEST_CHECK(setresgid(nob, nob, nob) == 0);
	TEST_CHECK(setresuid(nobu, nobu, nobu) == 0);
	fd = test_connect_raw(sock);
	TEST_CHECK(fd >= 0);
	TEST_CHECK(do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 20", msg, sizeof(msg)) ==
		   0);
	TEST_CHECK(do_req(fd, DELETE, "rootpol", NULL, msg, sizeof(msg)) == 0);
	close(fd);
	exit(0);
}

static int run_child(void (*fn)(const char *), const char *sock)
{
	pid_t pid = fork();
	int st;

	if (pid == 0)
		fn(sock);
	st = test_wait_pid(pid, 30000);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_permissions(void **state)
{
	static struct test_daemon d;
	char gid[32], msg[512], conf[4096];
	const char *extra[] = {"--socket-group", gid, NULL, NULL, NULL};
	int fd;

	snprintf(gid, sizeof(gid), "%u", (unsigned)test_nobody_gid());
	assert_int_equal(start(&d, NULL, extra), 0);
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(
	    do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 50", msg, sizeof(msg)), 0);
	assert_int_equal(run_child(nobody_child, d.sock), 0);
	/* root changes what nobody created */
	assert_int_equal(do_req(fd, UPDATE, "mine", "bulkhead.max = 7", msg, sizeof(msg)), 0);
	assert_int_equal(do_get(fd, "mine", NULL, conf, sizeof(conf), NULL), 0);
	assert_non_null(strstr(conf, "bulkhead.max = 7"));
	assert_int_equal(do_get(fd, "mine2", NULL, NULL, 0, NULL), ENOENT);
	/* rootpol unchanged by nobody's attempts */
	assert_int_equal(do_get(fd, "rootpol", NULL, conf, sizeof(conf), NULL), 0);
	assert_non_null(strstr(conf, "50"));
	close(fd);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);

	/* the admin group may change root's policy */
	extra[2] = "--admin-group";
	extra[3] = "4242";
	assert_int_equal(start(&d, NULL, extra), 0);
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(
	    do_req(fd, CREATE, "rootpol", "breaker.failure_rate = 50", msg, sizeof(msg)), 0);
	assert_int_equal(run_child(admin_child, d.sock), 0);
	assert_int_equal(do_get(fd, "rootpol", NULL, NULL, 0, NULL), 0);
	assert_int_equal(run_child(admin_member_child, d.sock), 0);
	assert_int_equal(do_get(fd, "rootpol", NULL, NULL, 0, NULL), ENOENT);
	close(fd);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

static void test_segments(void **state)
{
	static struct test_daemon d;
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__GetSegments g = RESIL__GET_SEGMENTS__INIT;
	Resil__Response *r;
	int fd, fds[4], nfds;

	assert_int_equal(start(&d, NULL, NULL), 0);
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	for (int observer = 0; observer <= 1; observer++) {
		g.observer = observer;
		req.body_case = RESIL__REQUEST__BODY_GET_SEGMENTS;
		req.get_segments = &g;
		r = call(fd, &req, fds, &nfds);
		assert_int_equal(resp_err(r), 0);
		assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_SEGMENTS);
		assert_int_equal(nfds, 2);
		assert_true(r->segments->config_size > 0 && r->segments->state_size > 0);
		assert_int_equal(fcntl(fds[0], F_GETFL) & O_ACCMODE, O_RDONLY);
		assert_int_equal(fcntl(fds[1], F_GETFL) & O_ACCMODE, observer ? O_RDONLY : O_RDWR);
		assert_int_equal(lseek(fds[1], 0, SEEK_END), (off_t)r->segments->state_size);
		close(fds[0]);
		close(fds[1]);
		resp_free(r);
	}
	close(fd);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

/* Next event on a subscribed connection (id 0), NULL after 10 s. */
static Resil__Response *next_event(int fd)
{
	static uint8_t buf[70000];
	ssize_t n = recv_msg(fd, buf, sizeof(buf), NULL, NULL);
	Resil__Response *r;

	if (n <= 0)
		return NULL;
	r = resil__response__unpack(NULL, (size_t)n, buf);
	if (r && (r->id != 0 || r->body_case != RESIL__RESPONSE__BODY_EVENT)) {
		resp_free(r);
		return NULL;
	}
	return r;
}

static int subscribe(int fd, const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Subscribe sub = RESIL__SUBSCRIBE__INIT;
	char *names[1] = {(char *)name};
	Resil__Response *r;
	int e;

	sub.n_names = name ? 1 : 0;
	sub.names = names;
	req.body_case = RESIL__REQUEST__BODY_SUBSCRIBE;
	req.subscribe = &sub;
	r = call(fd, &req, NULL, NULL);
	e = resp_err(r);
	resp_free(r);
	return e;
}

/*
 * Events reach subscribers (filtered by name) and the log; a client
 * killed while it holds a bulkhead permit is reclaimed: the permit comes
 * back (a new acquire is admitted) and a "reclaimed" event is streamed.
 */
static void test_events_reclaim(void **state)
{
	static struct test_daemon d;
	Resil__Response *ev;
	resil_t *r;
	resil_policy_t *p;
	resil_permit_t pm;
	int all, one, pipefd[2];
	char c;
	pid_t child;

	assert_int_equal(start(&d, NULL, NULL), 0);
	all = test_connect_raw(d.sock);
	one = test_connect_raw(d.sock);
	assert_true(all >= 0 && one >= 0);
	assert_int_equal(subscribe(all, NULL), 0);
	assert_int_equal(subscribe(one, "other"), 0);

	assert_int_equal(resil_open(&r, d.sock), 0);
	assert_int_equal(resil_define(r, "ev", "breaker.window = consecutive:2\nbulkhead.max = 1"),
			 0);
	assert_int_equal(resil_define(r, "other", "breaker.failure_rate = 50"), 0);
	assert_int_equal(resil_policy(r, "ev", &p), 0);

	/* two failures open the breaker: closed -> open, for "all" only */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_FAILURE);
	}
	for (;;) {
		ev = next_event(all);
		assert_non_null(ev);
		if (ev->event->kind == RESIL__EVENT_KIND__EVENT_TRANSITION)
			break;
		resp_free(ev);
	}
	assert_string_equal(ev->event->policy, "ev");
	assert_int_equal(ev->event->from_state, RESIL__BREAKER_STATE__BREAKER_CLOSED);
	assert_int_equal(ev->event->to_state, RESIL__BREAKER_STATE__BREAKER_OPEN);
	resp_free(ev);
	assert_true(
	    TEST_EVENTUALLY(test_log_count(&d, "policy ev: closed -> open (2 consecutive") >= 1));
	/* the filtered subscriber sees "other" first, nothing of "ev" */
	assert_int_equal(do_req(all, FORCE, "other", "open", NULL, 0), 0);
	ev = next_event(one);
	assert_non_null(ev);
	assert_string_equal(ev->event->policy, "other");
	resp_free(ev);

	/* a client killed holding the only permit of ev */
	assert_int_equal(do_req(all, FORCE, "ev", "disabled", NULL, 0), 0);
	assert_int_equal(pipe(pipefd), 0);
	child = fork();
	if (child == 0) {
		resil_permit_t q;

		close(pipefd[0]);
		TEST_CHECK(resil_acquire(p, &q) == RESIL_ADMIT);
		TEST_CHECK(write(pipefd[1], "x", 1) == 1);
		pause();
		exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	close(pipefd[0]);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_FULL);
	kill(child, SIGKILL);
	assert_true(test_wait_pid(child, 10000) >= 0);
	assert_true(TEST_EVENTUALLY(test_log_count(&d, "reclaimed 1 permits") >= 1));
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	for (;;) {
		ev = next_event(all);
		assert_non_null(ev);
		if (ev->event->kind == RESIL__EVENT_KIND__EVENT_RECLAIMED)
			break;
		resp_free(ev);
	}
	assert_string_equal(ev->event->policy, "ev");
	resp_free(ev);

	resil_close(r);
	close(all);
	close(one);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

/* A connection that got one Response and was then closed: its errno. */
static int refused_errno(int fd)
{
	uint8_t buf[4096];
	ssize_t n = recv_msg(fd, buf, sizeof(buf), NULL, NULL);
	Resil__Response *r;
	int e;

	if (n <= 0)
		return -1;
	r = resil__response__unpack(NULL, (size_t)n, buf);
	e = r && r->error ? r->error->errno_value : 0;
	resp_free(r);
	if (recv_msg(fd, buf, sizeof(buf), NULL, NULL) != 0)
		return -2; /* not closed */
	return e;
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

static bool subscribe_ok(int fd)
{
	return subscribe(fd, NULL) == 0;
}

/*
 * Bounds: past each one the newcomer gets a clear error and nobody else is
 * affected: connections (--max-connections), subscribers (64), policies
 * (--policies); and a list is paginated (at most 256 per page).
 */
static void test_bounds(void **state)
{
	static struct test_daemon d;
	const char *extra[] = {"--max-connections", "70", "--policies", "300", NULL};
	int fds[80], extra_fd, n = 0, got;
	char name[64], msg[512], names[64];
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;
	Resil__Response *r;

	assert_int_equal(start(&d, NULL, extra), 0);
	/* 64 subscribers, the 65th refused; one leaves, another may come */
	for (n = 0; n < 65; n++) {
		fds[n] = test_connect_raw(d.sock);
		assert_true(fds[n] >= 0);
	}
	for (int i = 0; i < 64; i++)
		assert_int_equal(subscribe(fds[i], NULL), 0);
	assert_int_equal(subscribe(fds[64], NULL), EUSERS);
	assert_int_equal(do_hello(fds[64]), 0); /* still served otherwise */
	close(fds[0]);
	fds[0] = -1;
	assert_true(TEST_EVENTUALLY(subscribe_ok(fds[64])));

	/* connections: 70 at most, the next gets EUSERS and is closed */
	while (n < 70) {
		fds[n] = test_connect_raw(d.sock);
		assert_true(fds[n] >= 0);
		assert_int_equal(do_hello(fds[n]), 0);
		n++;
	}
	fds[0] = test_connect_raw(d.sock); /* replaces the one closed above: 70 */
	assert_true(fds[0] >= 0);
	assert_int_equal(do_hello(fds[0]), 0);
	extra_fd = test_connect_raw(d.sock);
	assert_true(extra_fd >= 0);
	assert_int_equal(refused_errno(extra_fd), EUSERS);
	close(extra_fd);
	assert_int_equal(do_hello(fds[1]), 0);

	/* policies: 300 slots; then ENOSPC naming the limit. The creates go
	 * on a connection that is not a subscriber, the next request on one
	 * that is, once their events are waiting on it: call() must find its
	 * reply among them */
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "p%03d", i);
		got = do_req(fds[n - 1], CREATE, name, "bulkhead.max = 2", msg, sizeof(msg));
		if (got)
			fprintf(stderr, "create %s: %d %s\n", name, got, msg);
		assert_int_equal(got, 0);
	}
	assert_true(TEST_EVENTUALLY(readable(fds[1])));
	assert_int_equal(do_req(fds[1], CREATE, "onemore", "bulkhead.max = 2", msg, sizeof(msg)),
			 ENOSPC);
	assert_non_null(strstr(msg, "onemore"));
	assert_int_equal(do_req(fds[n - 1], CREATE, "p000", "bulkhead.max = 2", msg, sizeof(msg)),
			 0);

	/* a list page holds at most 256, sorted; the next page follows */
	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	l.limit = 1000;
	r = call(fds[n - 1], &req, NULL, NULL);
	assert_int_equal(resp_err(r), 0);
	assert_int_equal(r->list->n_policies, 256);
	assert_true(r->list->more);
	assert_string_equal(r->list->policies[0]->name, "p000");
	assert_string_equal(r->list->policies[255]->name, "p255");
	snprintf(names, sizeof(names), "%s", r->list->policies[255]->name);
	resp_free(r);
	l.after = names;
	r = call(fds[n - 1], &req, NULL, NULL);
	assert_int_equal(resp_err(r), 0);
	assert_int_equal(r->list->n_policies, 44);
	assert_false(r->list->more);
	assert_string_equal(r->list->policies[0]->name, "p256");
	resp_free(r);

	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

/* ---- systemd: notify, watchdog, the fd store and adoption ---- */

struct notify_rx {
	int fd;
	int cfg_fd, st_fd;
	bool ready, watchdog;
	char status[256];
};

/* Read what has arrived on the notify socket. */
static void notify_poll(struct notify_rx *n)
{
	for (;;) {
		char buf[4096];
		union {
			char b[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
			struct cmsghdr align;
		} cm;
		struct iovec iov = {buf, sizeof(buf) - 1};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.b,
				    .msg_controllen = sizeof(cm.b)};
		ssize_t len = recvmsg(n->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		int got = -1;

		if (len < 0)
			return;
		buf[len] = '\0';
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				memcpy(&got, CMSG_DATA(c), sizeof(int));
		if (strstr(buf, "READY=1"))
			n->ready = true;
		if (strstr(buf, "WATCHDOG=1"))
			n->watchdog = true;
		if (strstr(buf, "STATUS="))
			snprintf(n->status, sizeof(n->status), "%s", strstr(buf, "STATUS=") + 7);
		if (got >= 0 && strstr(buf, "FDNAME=config") && n->cfg_fd < 0)
			n->cfg_fd = got;
		else if (got >= 0 && strstr(buf, "FDNAME=state") && n->st_fd < 0)
			n->st_fd = got;
		else if (got >= 0)
			close(got);
	}
}

static bool notify_has(struct notify_rx *n, int what)
{
	notify_poll(n);
	switch (what) {
	case 0:
		return n->ready && n->status[0];
	case 1:
		return n->watchdog;
	default:
		return n->cfg_fd >= 0 && n->st_fd >= 0;
	}
}

/* resild with NOTIFY_SOCKET (and a watchdog), or with stored fds passed
 * as systemd passes them (fds 3 and 4, LISTEN_FDNAMES=config:state). */
static int spawn(struct test_daemon *d, const char *notify, int cfg_fd, int st_fd)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		char pidbuf[32];

		dup2(logfd, 1);
		dup2(logfd, 2);
		unsetenv("NOTIFY_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		if (notify) {
			setenv("NOTIFY_SOCKET", notify, 1);
			setenv("WATCHDOG_USEC", "200000", 1);
		}
		if (cfg_fd >= 0) {
			TEST_CHECK(dup2(cfg_fd, 10) == 10 && dup2(st_fd, 11) == 11);
			TEST_CHECK(dup2(10, 3) == 3 && dup2(11, 4) == 4);
			close(10);
			close(11);
			snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
			setenv("LISTEN_PID", pidbuf, 1);
			setenv("LISTEN_FDS", "2", 1);
			setenv("LISTEN_FDNAMES", "config:state", 1);
		}
		execl(RESILD_PATH, RESILD_PATH, "--foreground", "--socket", d->sock, "--config",
		      d->confdir, (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
	return TEST_EVENTUALLY(test_daemon_answers(d)) ? 0 : -ETIMEDOUT;
}

static void test_fdstore_adopt(void **state)
{
	static struct test_daemon d;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct notify_rx n = {.cfg_fd = -1, .st_fd = -1};
	char st[32], msg[256], names[256];
	int fd, one = 1;

	current = &d;
	assert_int_equal(test_daemon_init(&d), 0);
	assert_true(strlen(d.dir) + 8 < sizeof(sa.sun_path));
	memcpy(sa.sun_path, d.dir, strlen(d.dir));
	strcat(sa.sun_path, "/notify");
	n.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(n.fd >= 0);
	assert_int_equal(bind(n.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(n.fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	assert_int_equal(spawn(&d, sa.sun_path, -1, -1), 0);
	assert_true(TEST_EVENTUALLY(notify_has(&n, 0)));
	assert_non_null(strstr(n.status, "policies"));
	assert_non_null(strstr(n.status, "clients"));
	assert_true(TEST_EVENTUALLY(notify_has(&n, 1)));
	assert_true(TEST_EVENTUALLY(notify_has(&n, 2)));

	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(do_req(fd, CREATE, "kept", "breaker.failure_rate = 50", msg, sizeof(msg)),
			 0);
	assert_int_equal(do_req(fd, FORCE, "kept", "open", msg, sizeof(msg)), 0);
	close(fd);

	/* a crash: the fd store keeps the memfds, a new daemon adopts them */
	test_daemon_kill(&d);
	assert_int_equal(access(d.sock, F_OK), 0); /* stale: the new daemon replaces it */
	assert_int_equal(spawn(&d, NULL, n.cfg_fd, n.st_fd), 0);
	assert_true(TEST_EVENTUALLY(test_daemon_answers(&d)));
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(do_list(fd, names, sizeof(names)), 1);
	assert_int_equal(do_get(fd, "kept", st, NULL, 0, NULL), 0);
	assert_string_equal(st, "forced-open");
	close(fd);
	assert_true(test_log_count(&d, "adopted the segments") >= 1);

	close(n.cfg_fd);
	close(n.st_fd);
	close(n.fd);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

struct beat {
	const struct resil_state_hdr *st;
	int64_t after;
};

/* A tick of resild started after b->after (its heartbeat, written first
 * in the tick, before the status is sent). */
static bool ticked_after(void *ctx)
{
	const struct beat *b = ctx;

	return (int64_t)ld_relaxed(&b->st->daemon_beat_ns) > b->after;
}

/* Its newest status, kept while the notify socket's queue was full:
 * "3 policies". */
static bool notify_caught_up(void *ctx)
{
	struct notify_rx *n = ctx;

	notify_poll(n);
	return strstr(n->status, "3 policies") != NULL;
}

/*
 * A supervisor that stops reading its notify socket (its queue full):
 * resild's status changes (3 policies defined) never block it, every
 * request is answered, and the newest status arrives once the queue has
 * room again.
 */
static void test_notify_unread(void **state)
{
	static struct test_daemon d;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct notify_rx n = {.cfg_fd = -1, .st_fd = -1};
	struct beat b = {0};
	char msg[256], names[256];
	int fd, tx, one = 1, queued = 0;
	resil_t *r = NULL;

	current = &d;
	assert_int_equal(test_daemon_init(&d), 0);
	assert_true(strlen(d.dir) + 8 < sizeof(sa.sun_path));
	memcpy(sa.sun_path, d.dir, strlen(d.dir));
	strcat(sa.sun_path, "/notify");
	n.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(n.fd >= 0);
	assert_int_equal(bind(n.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(n.fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	assert_int_equal(spawn(&d, sa.sun_path, -1, -1), 0);
	assert_int_equal(resil_open(&r, d.sock), 0);
	b.st = r->seg.st;
	assert_true(TEST_EVENTUALLY(notify_has(&n, 0)));
	assert_true(TEST_EVENTUALLY(notify_has(&n, 2)));
	assert_null(strstr(n.status, "3 policies"));

	/* the supervisor stops reading: its queue fills up (a blocking
	 * sender now waits for the reader) */
	tx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(tx >= 0);
	while (queued < 100000 &&
	       sendto(tx, "X-FILLER=1", 10, 0, (struct sockaddr *)&sa, sizeof(sa)) == 10)
		queued++;
	assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
	assert_true(queued > 0);
	close(tx);

	/* each define changes the status at the next tick: every request
	 * is still answered (within 10 s each, do_req) */
	fd = test_connect_raw(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(do_req(fd, CREATE, "n1", "breaker.failure_rate = 50", msg, sizeof(msg)),
			 0);
	assert_int_equal(do_req(fd, CREATE, "n2", "bulkhead.max = 2", msg, sizeof(msg)), 0);
	assert_int_equal(do_req(fd, CREATE, "n3", "limit.rate = 10/s", msg, sizeof(msg)), 0);
	b.after = test_mono_ns();
	assert_true(test_wait_until(ticked_after, &b, TEST_EVENTUALLY_MS));
	/* that tick's new status could not be sent: still answered */
	assert_int_equal(do_list(fd, names, sizeof(names)), 3);
	close(fd);
	assert_true(test_wait_until(notify_caught_up, &n, TEST_EVENTUALLY_MS));
	resil_close(r);
	close(n.cfg_fd);
	close(n.st_fd);
	close(n.fd);
	assert_int_equal(test_daemon_stop(&d), 0);
	test_daemon_fini(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_malformed, teardown),
	    cmocka_unit_test_teardown(test_bad_config_exits, teardown),
	    cmocka_unit_test_teardown(test_reload, teardown),
	    cmocka_unit_test_teardown(test_segments, teardown),
	    cmocka_unit_test_teardown(test_permissions, teardown),
	    cmocka_unit_test_teardown(test_events_reclaim, teardown),
	    cmocka_unit_test_teardown(test_bounds, teardown),
	    cmocka_unit_test_teardown(test_fdstore_adopt, teardown),
	    cmocka_unit_test_teardown(test_notify_unread, teardown),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "int_daemon: needs root (drops to nobody for permissions)\n");
		return TEST_SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_breaker.c - a global time-window breaker over three hosts
 * (three resild instances, one real redis-server on a private unix
 * socket).
 *
 * A dependency down for every host: each host sees 15 failures, fewer
 * than breaker.min_calls = 30, so no host's breaker opens on its own
 * evidence; the fleet's window holds 45 and crosses the threshold, and
 * every host's breaker opens, once (one generation in Redis). A host that
 * alone sees 30 failures still opens at once, with no Redis round trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "testutil.h"

#define HOSTS 3
#define CONF                                                                                       \
	"policy.scope = global; breaker.window = time:20s; breaker.min_calls = 30; "               \
	"breaker.failure_rate = 50; breaker.wait = 30s; breaker.half_open_calls = 3"

static char dir[PATH_MAX], rsock[PATH_MAX + 16], rurl[PATH_MAX + 32], cname[64];
static pid_t redis_pid;
static struct test_daemon hd[HOSTS + 1];
static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static bool redis_up(void)
{
	redisContext *c = redisConnectUnix(rsock);
	bool ok = false;

	if (c && !c->err) {
		redisReply *r = redisCommand(c, "PING");

		ok = r && r->type != REDIS_REPLY_ERROR;
		if (r)
			freeReplyObject(r);
	}
	if (c)
		redisFree(c);
	return ok;
}

static long long redis_int(const char *cmd, const char *key, const char *field)
{
	redisContext *c = redisConnectUnix(rsock);
	long long v = -1;

	if (c && !c->err) {
		redisReply *r = redisCommand(c, "%s %s %s", cmd, key, field);

		if (r && r->type == REDIS_REPLY_STRING)
			v = atoll(r->str);
		if (r)
			freeReplyObject(r);
	}
	if (c)
		redisFree(c);
	return v;
}

static int host_start(int h)
{
	char host[16];
	const char *extra[] = {"--state-size",
			       "16M",
			       "--cluster-redis",
			       rurl,
			       "--cluster-host",
			       host,
			       "--cluster-name",
			       cname,
			       NULL};
	resil_t *r;
	int v;

	snprintf(host, sizeof(host), "host%c", 'A' + h);
	if (test_daemon_init(&hd[h]) < 0 || test_daemon_start(&hd[h], extra) < 0)
		return -1;
	v = resil_open(&r, hd[h].sock);
	if (v < 0)
		return v;
	v = resil_define(r, "b", CONF);
	resil_close(r);
	return v;
}

/* n failed calls through host h's breaker; the verdict of one more acquire
 * (0: admitted, given back as ignored) */
static int fail_calls(int h, int n)
{
	resil_policy_t *p;
	resil_permit_t pm;
	resil_t *r;
	int v;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "b", &p) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		v = resil_acquire(p, &pm);
		if (v == 0)
			resil_release(p, &pm, RESIL_FAILURE);
	}
	v = resil_acquire(p, &pm);
	if (v == 0)
		resil_release(p, &pm, RESIL_IGNORED);
	resil_close(r);
	return v;
}

static bool all_open(void)
{
	for (int h = 0; h < HOSTS; h++)
		if (fail_calls(h, 0) != RESIL_REJECT_OPEN)
			return false;
	return true;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	char key[128];
	int64_t t0;

	if (system("command -v redis-server >/dev/null 2>&1") != 0) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	snprintf(dir, sizeof(dir), "%s/resil-clbk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	snprintf(rsock, sizeof(rsock), "%s/redis.sock", dir);
	snprintf(rurl, sizeof(rurl), "unix:%s", rsock);
	snprintf(cname, sizeof(cname), "bk%d", (int)getpid());
	redis_pid = fork();
	if (redis_pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", rsock,
		       "--save", "", "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	if (!TEST_EVENTUALLY(redis_up())) {
		fprintf(stderr, "redis-server did not start\n");
		kill(redis_pid, SIGKILL);
		return 1;
	}
	for (int h = 0; h < HOSTS; h++)
		CHECK(host_start(h) == 0, "host %d starts", h);

	/* the dependency fails for everyone, below each host's min_calls */
	for (int h = 0; h < HOSTS; h++)
		CHECK(fail_calls(h, 15) == 0, "host %d: 15 failures do not open it alone", h);
	t0 = test_mono_ns();
	CHECK(TEST_EVENTUALLY(all_open()), "every host's breaker opens on the fleet's evidence");
	printf("fleet open mirrored on every host %.1f intervals after the last failure\n",
	       (double)(test_mono_ns() - t0) / 1e8);
	snprintf(key, sizeof(key), "%s:{b}:breaker", cname);
	CHECK(redis_int("HGET", key, "gen") == 1, "one open for the outage (gen %lld)",
	      redis_int("HGET", key, "gen"));
	/* more failures during the open: still one open */
	test_sleep_ms(500);
	CHECK(redis_int("HGET", key, "gen") == 1, "still one open");

	/* a host's own evidence opens it at once, whatever the fleet */
	{
		char host[16] = "hostD";
		char name[64];
		const char *extra[] = {"--state-size",
				       "16M",
				       "--cluster-redis",
				       rurl,
				       "--cluster-host",
				       host,
				       "--cluster-name",
				       name,
				       NULL};
		resil_t *r;

		snprintf(name, sizeof(name), "bk%d-other", (int)getpid());
		CHECK(test_daemon_init(&hd[HOSTS]) == 0 &&
			  test_daemon_start(&hd[HOSTS], extra) == 0,
		      "host D starts");
		CHECK(resil_open(&r, hd[HOSTS].sock) == 0 && resil_define(r, "b", CONF) == 0,
		      "define on D");
		resil_close(r);
		resil_policy_t *p;
		resil_permit_t pm;
		int v = -1;

		CHECK(resil_open(&r, hd[HOSTS].sock) == 0 && resil_policy(r, "b", &p) == 0, "open");
		for (int i = 0; i < 30; i++)
			if (resil_acquire(p, &pm) == 0)
				resil_release(p, &pm, RESIL_FAILURE);
		v = resil_acquire(p, &pm);
		CHECK(v == RESIL_REJECT_OPEN, "30 failures on one host open it at once (%d)", v);
		resil_close(r);
	}

	for (int h = 0; h <= HOSTS; h++)
		test_daemon_fini(&hd[h]);
	kill(redis_pid, SIGKILL);
	waitpid(redis_pid, NULL, 0);
	if (!failures) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		(void)system(cmd);
	}
	printf("%s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}

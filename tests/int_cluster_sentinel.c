/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_sentinel.c - global policies through Redis Sentinel: a
 * primary, its replica and a sentinel (redis-server --sentinel, quorum 1,
 * down-after 1 s), all on 127.0.0.1 at ports derived from the pid, and
 * two resild hosts given only the sentinels (sentinel://.../MASTER: one
 * that is not listening, then the real one).
 *
 * A global gRPC budget: failures on host A reach host B through the
 * primary the sentinel names. The primary is killed once its replica
 * holds the bucket; the sentinel promotes the replica; the daemons find
 * it through the sentinel and keep syncing: failures on B after the
 * failover reach A, and the bucket on the new primary is exactly what
 * both hosts spent.
 *
 * Then a failover back, by hand (SENTINEL FAILOVER, with the old primary
 * restarted as a replica): the daemons' connections to the demoted node
 * get -READONLY (or are closed), and they ask the sentinel again.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "budget.h"
#include "internal.h"
#include "cluster_util.h"

#define HOSTS 2
#define GCONF "policy.scope = global; retry.budget = grpc:100:1; retry.max_attempts = 5"

enum { PRIMARY, REPLICA, SENTINEL, NPROC };

static char dir[PATH_MAX], url[128], cname[64], master[64];
static int port[NPROC];
static pid_t pid[NPROC];
static struct test_daemon hd[HOSTS];
static resil_t *cl[HOSTS];

static bool up(int n)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "PING");
	bool ok = r && r->type != REDIS_REPLY_ERROR;

	if (r)
		freeReplyObject(r);
	return ok;
}

/* A redis-server on port[n]: a primary, a replica of port[of], or the
 * sentinel (its configuration file written here) */
static int start(int n, int of)
{
	char p[16], ps[16], conf[PATH_MAX + 32], log[PATH_MAX + 32];

	snprintf(p, sizeof(p), "%d", port[n]);
	snprintf(ps, sizeof(ps), "%d", of >= 0 ? port[of] : 0);
	snprintf(log, sizeof(log), "%s/redis-%d.log", dir, port[n]);
	if (n == SENTINEL) {
		FILE *f;

		snprintf(conf, sizeof(conf), "%s/sentinel.conf", dir);
		f = fopen(conf, "w");
		if (!f)
			return -1;
		fprintf(f,
			"port %d\nbind 127.0.0.1\ndir %s\n"
			"sentinel monitor %s 127.0.0.1 %d 1\n"
			"sentinel down-after-milliseconds %s 1000\n"
			"sentinel failover-timeout %s 4000\n"
			"sentinel parallel-syncs %s 1\n",
			port[n], dir, master, port[PRIMARY], master, master, master);
		fclose(f);
	}
	pid[n] = fork();
	if (pid[n] == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		dup2(fd, 1);
		dup2(fd, 2);
		if (n == SENTINEL)
			execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
		else if (of >= 0)
			execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1",
			       "--save", "", "--appendonly", "no", "--dir", dir, "--replicaof",
			       "127.0.0.1", ps, (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1",
			       "--save", "", "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	return pid[n] > 0 ? 0 : -1;
}

static void stop(int n)
{
	if (pid[n] > 0) {
		kill(pid[n], SIGKILL);
		waitpid(pid[n], NULL, 0);
	}
	pid[n] = 0;
}

/* the port the sentinel names for the master (-1: none) */
static int named(void)
{
	redisReply *r =
	    test_redis_tcp_cmd(port[SENTINEL], "SENTINEL get-master-addr-by-name %s", master);
	int p = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
		p = atoi(r->element[1]->str);
	if (r)
		freeReplyObject(r);
	return p;
}

/* the fleet's tokens in node n's copy of the bucket (-1: none) */
static long long fleet(int n)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "HGET %s:{g}:budget t", cname);
	long long v = -1;

	if (r && r->type == REDIS_REPLY_STRING)
		v = atoll(r->str);
	if (r)
		freeReplyObject(r);
	return v;
}

static bool role_is(int n, const char *role)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "ROLE");
	bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements &&
		  strcmp(r->element[0]->str, role) == 0;

	if (r)
		freeReplyObject(r);
	return ok;
}

static bool replica_synced(int n)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "INFO replication");
	bool ok =
	    r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up") != NULL;

	if (r)
		freeReplyObject(r);
	return ok;
}

static long long tokens(int h)
{
	const struct resil_rec *rec = test_rec_of(cl[h], "g");
	const struct resil_retry_conf *bc;
	void *st = resil_budget_state_for(&cl[h]->seg, rec, &bc);

	return st ? resil_budget_tokens_milli(st, bc, 0) : -1;
}

static void fail_on(int h, int n)
{
	resil_policy_t *p;
	resil_retry_t rt;

	TEST_CHECK(resil_policy(cl[h], "g", &p) == 0);
	for (int i = 0; i < n; i++) {
		resil_retry_begin(p, &rt, 0);
		resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0);
	}
}

static long long want;
static int want_node;
static bool synced(void)
{
	/* each host spends its slice of the fleet's bucket */
	for (int h = 0; h < HOSTS; h++)
		if (tokens(h) != test_budget_slice(true, 100000, want, HOSTS))
			return false;
	return want_node < 0 || fleet(want_node) == want;
}

static void cleanup(void)
{
	test_cluster_hosts_stop(hd, cl, HOSTS);
	for (int n = 0; n < NPROC; n++)
		stop(n);
	if (test_failures) {
		fprintf(stderr, "--- redis logs in %s\n", dir);
	} else {
		char c[PATH_MAX + 16];

		snprintf(c, sizeof(c), "rm -rf '%s'", dir);
		(void)!system(c);
	}
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	snprintf(dir, sizeof(dir), "%s/resil-clse-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	/* ports in 10000..18999: below the Redis Cluster tests' */
	for (int n = 0; n < NPROC; n++)
		port[n] = 10000 + (int)(getpid() % 3000) * 3 + n;
	snprintf(cname, sizeof(cname), "se%d", (int)getpid());
	snprintf(master, sizeof(master), "m%d", (int)getpid());
	/* a sentinel that is not there first: the next one answers */
	snprintf(url, sizeof(url), "sentinel://127.0.0.1:1,127.0.0.1:%d/%s", port[SENTINEL],
		 master);

	CHECK(start(PRIMARY, -1) == 0 && TEST_EVENTUALLY(up(PRIMARY)), "the primary starts");
	CHECK(start(REPLICA, PRIMARY) == 0 && TEST_EVENTUALLY(up(REPLICA)), "the replica starts");
	CHECK(start(SENTINEL, -1) == 0 && TEST_EVENTUALLY(up(SENTINEL)), "the sentinel starts");
	CHECK(TEST_EVENTUALLY(replica_synced(REPLICA)), "the replica follows the primary");
	CHECK(named() == port[PRIMARY], "the sentinel names the primary (%d)", named());
	if (test_failures) {
		cleanup();
		return 1;
	}
	for (int h = 0; h < HOSTS; h++) {
		CHECK(test_cluster_host(&hd[h], url, cname, h, NULL) == 0 &&
			  resil_open(&cl[h], hd[h].sock) == 0 &&
			  resil_define(cl[h], "g", GCONF) == 0,
		      "host %c starts", 'A' + h);
	}
	if (test_failures) {
		cleanup();
		return 1;
	}
	want = 100000;
	want_node = PRIMARY;
	CHECK(TEST_EVENTUALLY(synced()),
	      "the budget is full everywhere, its bucket on the primary");
	fail_on(0, 10);
	want = 90000;
	CHECK(TEST_EVENTUALLY(synced()), "10 failures on A seen by B, the bucket at 90 (%lld)",
	      fleet(PRIMARY));
	CHECK(TEST_EVENTUALLY(fleet(REPLICA) == 90000), "the replica holds the bucket (%lld)",
	      fleet(REPLICA));

	/* the primary dies; the sentinel promotes the replica */
	stop(PRIMARY);
	CHECK(TEST_EVENTUALLY(named() == port[REPLICA]), "the sentinel names the replica (%d)",
	      named());
	CHECK(TEST_EVENTUALLY(role_is(REPLICA, "master")), "the replica is a primary now");
	fail_on(1, 5);
	want = 85000;
	want_node = REPLICA;
	CHECK(TEST_EVENTUALLY(synced()),
	      "after the failover: 5 failures on B seen by A, the bucket on the new primary at 85 "
	      "(%lld; A %lld, B %lld)",
	      fleet(REPLICA), tokens(0), tokens(1));
	CHECK(test_log_count(&hd[0], "cluster: connected to Redis at 127.0.0.1:") >= 1,
	      "host A logged its connection to the new primary");

	/* the old primary back as a replica, then a failover by hand */
	CHECK(start(PRIMARY, REPLICA) == 0 && TEST_EVENTUALLY(up(PRIMARY)),
	      "the old primary restarts as a replica");
	CHECK(TEST_EVENTUALLY(replica_synced(PRIMARY) && fleet(PRIMARY) == 85000),
	      "it holds the bucket (%lld)", fleet(PRIMARY));
	{
		redisReply *r = NULL;
		bool ok = false;

		/* the sentinel refuses while it has not yet seen the replica */
		for (int i = 0; i < 100 && !ok; i++) {
			r = test_redis_tcp_cmd(port[SENTINEL], "SENTINEL FAILOVER %s", master);
			ok = r && r->type != REDIS_REPLY_ERROR;
			if (r)
				freeReplyObject(r);
			if (!ok)
				test_sleep_ms(100);
		}
		CHECK(ok, "SENTINEL FAILOVER");
	}
	CHECK(TEST_EVENTUALLY(named() == port[PRIMARY] && role_is(PRIMARY, "master")),
	      "the first node is the primary again (%d)", named());
	fail_on(0, 5);
	want = 80000;
	want_node = PRIMARY;
	CHECK(TEST_EVENTUALLY(synced()),
	      "after the failover back: 5 failures on A seen by B, the bucket at 80 (%lld; A "
	      "%lld, B %lld)",
	      fleet(PRIMARY), tokens(0), tokens(1));

	cleanup();
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

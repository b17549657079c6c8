/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_rcluster.c - global policies on a real Redis Cluster of
 * three primaries (redis-server --cluster-enabled yes, put together by
 * redis-cli --cluster create), three resild instances as hosts, each
 * given only the first node's address.
 *
 * Six global gRPC budgets whose hash tags spread over the three nodes:
 * failures on host A reach hosts B and C for every one of them (the
 * daemons follow MOVED to the node of each policy's slot), and all keys of
 * a policy live on one node. Then one policy's slot is migrated to
 * another node by hand (IMPORTING, MIGRATING, MIGRATE of its keys: the
 * daemons get ASK meanwhile; SETSLOT NODE: then MOVED), and the budget
 * keeps working through it, its bucket unchanged by the move.
 *
 * Each primary has a replica (--cluster-replicas 1). Last, a primary
 * (not the seed) whose slots hold policies is killed once its replica
 * holds their buckets; the cluster promotes the replica (node timeout
 * 2 s), and the daemons, whose connection to the dead node fails, learn
 * the map again (MOVED to the promoted replica) and keep syncing: the
 * bucket on the new primary lands exactly. Then the seed node itself is
 * killed: each daemon connects through a node it learned, and its log
 * and `resilctl status` name that node.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "budget.h"
#include "internal.h"
#include "cluster_util.h"

#define HOSTS 3
#define PRIMS 3 /* nodes 0..2: primaries, 3..5 their replicas */
#define NODES 6
#define NPOL  6
#define GCONF "policy.scope = global; retry.budget = grpc:100:1; retry.max_attempts = 5"

static char dir[PATH_MAX], rurl[64], cname[64];
static int port[NODES];
static pid_t redis_pid[NODES];
static char node_id[NODES][64];
static struct test_daemon hd[HOSTS];
static resil_t *cl[HOSTS];
static const char *const pol[NPOL] = {"p0", "p1", "p2", "p3", "p4", "p5"};

/* One command on node n; the reply (NULL: no answer). */

static bool node_up(int n)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "PING");
	bool ok = r && r->type != REDIS_REPLY_ERROR;

	if (r)
		freeReplyObject(r);
	return ok;
}

static bool cluster_ok(void)
{
	for (int n = 0; n < NODES; n++) {
		if (redis_pid[n] <= 0)
			continue;
		redisReply *r = test_redis_tcp_cmd(port[n], "CLUSTER INFO");
		bool ok = r && r->type == REDIS_REPLY_STRING &&
			  strstr(r->str, "cluster_state:ok") != NULL;

		if (r)
			freeReplyObject(r);
		if (!ok)
			return false;
	}
	return true;
}

static int slot_of(const char *name)
{
	char key[128];
	redisReply *r;
	int s = -1;

	snprintf(key, sizeof(key), "%s:{%s}:budget", cname, name);
	r = test_redis_tcp_cmd(port[0], "CLUSTER KEYSLOT %s", key);
	if (r && r->type == REDIS_REPLY_INTEGER)
		s = (int)r->integer;
	if (r)
		freeReplyObject(r);
	return s;
}

/* The node serving slot s, as node n sees it (-1: none) */
static int owner(int n, int s)
{
	redisReply *r = test_redis_tcp_cmd(port[n], "CLUSTER SLOTS");
	int o = -1;

	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		redisReply *e = r->element[i];

		if (e->elements >= 3 && s >= e->element[0]->integer && s <= e->element[1]->integer)
			for (int k = 0; k < NODES; k++)
				if (e->element[2]->element[1]->integer == port[k])
					o = k;
	}
	if (r)
		freeReplyObject(r);
	return o;
}

/* The fleet's tokens of a policy in the node n (-1: no key there; ASKING
 * first, so that an importing node answers for its keys) */
static long long fleet(int n, const char *name)
{
	redisContext *c = n >= 0 ? redisConnect("127.0.0.1", port[n]) : NULL;
	redisReply *r = NULL;
	long long v = -1;

	/* READONLY: a replica answers for its copy */
	if (c && !c->err) {
		redisAppendCommand(c, "READONLY");
		redisAppendCommand(c, "ASKING");
		redisAppendCommand(c, "HGET %s:{%s}:budget t", cname, name);
		for (int k = 0; k < 3; k++) {
			if (r)
				freeReplyObject(r);
			r = NULL;
			if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
				break;
		}
		if (r && r->type == REDIS_REPLY_STRING)
			v = atoll(r->str);
	}
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return v;
}

static long long tokens(int h, const char *name)
{
	const struct resil_rec *rec = test_rec_of(cl[h], name);
	const struct resil_retry_conf *bc;
	void *st = resil_budget_state_for(&cl[h]->seg, rec, &bc);

	return st ? resil_budget_tokens_milli(st, bc, 0) : -1;
}

static void fail_on(int h, const char *name, int n)
{
	resil_policy_t *p;
	resil_retry_t rt;

	TEST_CHECK(resil_policy(cl[h], name, &p) == 0);
	for (int i = 0; i < n; i++) {
		resil_retry_begin(p, &rt, 0);
		resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0);
	}
}

static long long want;
static const char *want_pol;
static bool hosts_at(void)
{
	/* each host spends its slice of the fleet's bucket */
	for (int h = 0; h < HOSTS; h++)
		if (tokens(h, want_pol) != test_budget_slice(true, 100000, want, HOSTS))
			return false;
	return true;
}

static bool everywhere(long long v)
{
	for (int i = 0; i < NPOL; i++) {
		want = v;
		want_pol = pol[i];
		if (!hosts_at())
			return false;
	}
	return true;
}

static bool in_redis(long long v)
{
	for (int i = 0; i < NPOL; i++)
		if (fleet(owner(0, slot_of(pol[i])), pol[i]) != v)
			return false;
	return true;
}

/* the replica of primary p (-1: none) */
static int replica_of(int p)
{
	for (int n = 0; n < NODES; n++) {
		redisReply *r = test_redis_tcp_cmd(port[n], "ROLE");
		bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
			  strcmp(r->element[0]->str, "slave") == 0 &&
			  r->element[2]->type == REDIS_REPLY_INTEGER &&
			  r->element[2]->integer == port[p];

		if (r)
			freeReplyObject(r);
		if (ok)
			return n;
	}
	return -1;
}

static int start_node(int n)
{
	char p[16], conf[PATH_MAX + 32];

	snprintf(p, sizeof(p), "%d", port[n]);
	snprintf(conf, sizeof(conf), "%s/nodes-%d.conf", dir, port[n]);
	redis_pid[n] = fork();
	if (redis_pid[n] == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1",
		       "--cluster-enabled", "yes", "--cluster-config-file", conf,
		       "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no",
		       "--dir", dir, (char *)NULL);
		_exit(127);
	}
	return redis_pid[n] > 0 ? 0 : -1;
}

static int host_start(int h)
{
	if (test_cluster_host(&hd[h], rurl, cname, h, NULL) < 0)
		return -1;
	if (resil_open(&cl[h], hd[h].sock) < 0)
		return -1;
	for (int i = 0; i < NPOL; i++)
		if (resil_define(cl[h], pol[i], GCONF) < 0)
			return -1;
	return 0;
}

/* resilctl status (--json when json) on host h has want */
static bool status_has(int h, bool json, const char *want_text)
{
	const char *argv[] = {RESILCTL_PATH,	      "--socket", hd[h].sock, "status",
			      json ? "--json" : NULL, NULL};
	static char out[65536];

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return false;
	return strstr(out, want_text) != NULL;
}

/* host h connected through a node it learned, and says which */
static bool reached_past_seed(int h)
{
	return test_log_count(&hd[h], "connected to Redis Cluster node 127.0.0.1:") > 0 &&
	       status_has(h, false, "connected through node 127.0.0.1:") &&
	       status_has(h, true, "\"reached\":\"127.0.0.1:");
}

static void cleanup(void)
{
	test_cluster_hosts_stop(hd, cl, HOSTS);
	for (int n = 0; n < NODES; n++)
		if (redis_pid[n] > 0) {
			kill(redis_pid[n], SIGKILL);
			waitpid(redis_pid[n], NULL, 0);
		}
	if (!test_failures) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		(void)system(cmd);
	}
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	char cmd[PATH_MAX + 256];
	int moved = -1, from, to, s, off_seed = 0;
	long long before;

	if (system("command -v redis-server >/dev/null 2>&1 && "
		   "command -v redis-cli >/dev/null 2>&1") != 0) {
		fprintf(stderr, "redis-server or redis-cli not installed: skipped\n");
		return TEST_SKIP;
	}
	snprintf(dir, sizeof(dir), "%s/resil-clrc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	/* ports in 21000..22739 and their cluster bus (+10000) in
	 * 31000..32739: below Linux's ephemeral range (32768..60999), where
	 * a connection's own port or a TIME-WAIT socket could hold one (the
	 * sentinel test takes 10000..19002, the TLS one 19000..20999) */
	for (int n = 0; n < NODES; n++)
		port[n] = 21000 + (int)(getpid() % 290) * NODES + n;
	snprintf(rurl, sizeof(rurl), "redis://127.0.0.1:%d", port[0]);
	snprintf(cname, sizeof(cname), "rc%d", (int)getpid());
	for (int n = 0; n < NODES; n++)
		CHECK(start_node(n) == 0 && TEST_EVENTUALLY(node_up(n)), "node %d starts", n);
	if (test_failures) {
		cleanup();
		return 1;
	}
	snprintf(cmd, sizeof(cmd),
		 "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d "
		 "127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d --cluster-replicas 1 "
		 "--cluster-yes >%s/create.log 2>&1",
		 port[0], port[1], port[2], port[3], port[4], port[5], dir);
	CHECK(system(cmd) == 0, "redis-cli --cluster create (%s/create.log)", dir);
	CHECK(TEST_EVENTUALLY(cluster_ok()), "the cluster is up");
	for (int n = 0; n < PRIMS; n++)
		CHECK(TEST_EVENTUALLY(replica_of(n) >= PRIMS), "node %d has a replica", n);
	for (int n = 0; n < NODES; n++) {
		redisReply *r = test_redis_tcp_cmd(port[n], "CLUSTER MYID");

		TEST_CHECK(r && r->type == REDIS_REPLY_STRING);
		snprintf(node_id[n], sizeof(node_id[n]), "%s", r->str);
		freeReplyObject(r);
	}
	for (int i = 0; i < NPOL; i++)
		off_seed += owner(0, slot_of(pol[i])) != 0;
	CHECK(off_seed > 0, "some policies live off the seed node (%d of %d)", off_seed, NPOL);

	for (int h = 0; h < HOSTS; h++)
		CHECK(host_start(h) == 0, "host %c starts", 'A' + h);
	CHECK(TEST_EVENTUALLY(everywhere(100000) && in_redis(100000)),
	      "every budget synced and full, its bucket on its slot's node");

	/* failures on A reach B and C for every policy, wherever its node */
	for (int i = 0; i < NPOL; i++)
		fail_on(0, pol[i], 10);
	CHECK(TEST_EVENTUALLY(everywhere(90000)), "10 failures on A seen by every host");
	for (int i = 0; i < NPOL; i++) {
		int o = owner(0, slot_of(pol[i]));

		CHECK(fleet(o, pol[i]) == 90000, "policy %s: its bucket on node %d is 90 (%lld)",
		      pol[i], o, fleet(o, pol[i]));
		for (int n = 0; n < PRIMS; n++)
			if (n != o)
				CHECK(fleet(n, pol[i]) == -1, "policy %s: no key on node %d",
				      pol[i], n);
	}

	/* migrate p0's slot to another node, by hand */
	s = slot_of(pol[0]);
	from = owner(0, s);
	to = (from + 1) % PRIMS;
	before = fleet(from, pol[0]);
	{
		redisReply *r;

		r = test_redis_tcp_cmd(port[to], "CLUSTER SETSLOT %d IMPORTING %s", s,
				       node_id[from]);
		CHECK(r && r->type != REDIS_REPLY_ERROR, "IMPORTING");
		if (r)
			freeReplyObject(r);
		r = test_redis_tcp_cmd(port[from], "CLUSTER SETSLOT %d MIGRATING %s", s,
				       node_id[to]);
		CHECK(r && r->type != REDIS_REPLY_ERROR, "MIGRATING");
		if (r)
			freeReplyObject(r);
		r = test_redis_tcp_cmd(port[from], "CLUSTER GETKEYSINSLOT %d 100", s);
		CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2,
		      "the policy's keys in its slot");
		for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
			redisReply *m =
			    test_redis_tcp_cmd(port[from], "MIGRATE 127.0.0.1 %d %s 0 5000",
					       port[to], r->element[i]->str);

			CHECK(m && m->type != REDIS_REPLY_ERROR, "MIGRATE %s: %s",
			      r->element[i]->str, m && m->str ? m->str : "?");
			if (m)
				freeReplyObject(m);
		}
		if (r)
			freeReplyObject(r);
		CHECK(fleet(to, pol[0]) == before, "the bucket moved whole");

		/* mid-migration: the source answers ASK for the moved keys */
		fail_on(1, pol[0], 5);
		want = before - 5000;
		want_pol = pol[0];
		CHECK(TEST_EVENTUALLY(hosts_at()),
		      "mid-migration (ASK): B's failures reach A and C");
		CHECK(fleet(to, pol[0]) == want, "the bucket on the importing node (%lld)",
		      fleet(to, pol[0]));

		for (int n = 0; n < PRIMS; n++) {
			r = test_redis_tcp_cmd(port[n], "CLUSTER SETSLOT %d NODE %s", s,
					       node_id[to]);
			CHECK(r && r->type != REDIS_REPLY_ERROR, "SETSLOT NODE on %d", n);
			if (r)
				freeReplyObject(r);
		}
		moved = owner(0, s);
		CHECK(moved == to, "the slot is on node %d now (%d)", to, moved);
	}
	/* after it (MOVED): C's failures reach everyone */
	fail_on(2, pol[0], 5);
	want = before - 10000;
	CHECK(TEST_EVENTUALLY(hosts_at()),
	      "after the migration (MOVED): C's failures reach A and B");
	CHECK(fleet(to, pol[0]) == want, "the bucket on the new node (%lld)", fleet(to, pol[0]));
	CHECK(fleet(from, pol[0]) == -1, "nothing left on the old node");
	/* the others untouched */
	for (int i = 1; i < NPOL; i++) {
		want = 90000;
		want_pol = pol[i];
		CHECK(hosts_at(), "policy %s still at 90", pol[i]);
	}

	/* a primary (not the seed) holding policies dies; its replica takes over */
	{
		int victim = -1, rep, vp = -1, next;

		for (int i = 1; i < NPOL && victim < 0; i++)
			if (owner(0, slot_of(pol[i])) > 0) {
				victim = owner(0, slot_of(pol[i]));
				vp = i;
			}
		CHECK(victim > 0, "a policy lives off the seed node");
		rep = victim > 0 ? replica_of(victim) : -1;
		CHECK(rep >= 0, "the victim %d has a replica", victim);
		CHECK(TEST_EVENTUALLY(fleet(rep, pol[vp]) == 90000),
		      "the replica holds %s's bucket (%lld)", pol[vp], fleet(rep, pol[vp]));
		if (victim > 0 && rep >= 0) {
			bool ok = false;

			kill(redis_pid[victim], SIGKILL);
			waitpid(redis_pid[victim], NULL, 0);
			redis_pid[victim] = 0;
			/* failure detection (2 s node timeout) and the election:
			 * a few seconds, more on a loaded machine */
			for (int k = 0; k < 4 && !ok; k++)
				ok = TEST_EVENTUALLY(owner(0, slot_of(pol[vp])) == rep &&
						     cluster_ok());
			CHECK(ok, "the replica %d is promoted (owner %d)", rep,
			      owner(0, slot_of(pol[vp])));
			fail_on(0, pol[vp], 5);
			want = 85000;
			want_pol = pol[vp];
			ok = false;
			for (int k = 0; k < 2 && !ok; k++)
				ok = TEST_EVENTUALLY(hosts_at() && fleet(rep, pol[vp]) == 85000);
			CHECK(ok,
			      "after the failover: A's failures on %s reach B and C, the bucket "
			      "on the promoted replica at 85 (%lld)",
			      pol[vp], fleet(rep, pol[vp]));
			next = (vp + 1) % NPOL;
			fail_on(2, pol[next], 1);
			want = next == 0 ? before - 11000 : 89000;
			want_pol = pol[next];
			CHECK(TEST_EVENTUALLY(hosts_at()), "and the others keep syncing (%s)",
			      pol[next]);
		}
	}

	/* the seed itself dies: each daemon reaches the cluster through a
	 * node it learned, and its log and status name that node, never the
	 * dead seed as "connected again" */
	{
		char seed_again[64];
		int again[HOSTS];

		snprintf(seed_again, sizeof(seed_again), "Redis at 127.0.0.1:%d again", port[0]);
		for (int h = 0; h < HOSTS; h++)
			again[h] = test_log_count(&hd[h], seed_again);
		kill(redis_pid[0], SIGKILL);
		waitpid(redis_pid[0], NULL, 0);
		redis_pid[0] = 0;
		for (int h = 0; h < HOSTS; h++) {
			CHECK(TEST_EVENTUALLY(reached_past_seed(h)),
			      "host %c: the seed %d is dead, the node reached is named in its log "
			      "and resilctl status",
			      'A' + h, port[0]);
			CHECK(test_log_count(&hd[h], seed_again) == again[h],
			      "host %c never calls the dead seed connected again", 'A' + h);
		}
	}

	cleanup();
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

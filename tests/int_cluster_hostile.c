/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_hostile.c - what one host's clients, or another client of
 * Redis, write cannot break the fleet's coordination: a real redis-server
 * and resild hosts A and B, a global time-window breaker with a limiter
 * ("hb") and a plain global limiter ("lim").
 *
 * 1. A client on host A writes 2^63 into every counted bucket of hb's
 *    time window. A reports what its window can hold (32 bits a bucket),
 *    the fleet's sums stay integers: no script error, no reconnection on
 *    either host, B's leases renew and the fleet's window B mirrors is
 *    the clamped one.
 * 2. Another client of Redis writes a window of 10^30 calls into the
 *    breaker's hash: the script clamps it where it enters.
 * 3. lim's lease hash is made a string (WRONGTYPE for its script): lim
 *    alone has an error, in the log, `resilctl status` and
 *    resil_cluster_script_errors_total; hb on the same hosts renews on,
 *    nobody disconnects; the key back, lim answers again.
 */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "internal.h"
#include "cluster_util.h"
#include "policy.h"

#define HOSTS 2
#define BCONF                                                                                      \
	"policy.scope = global; breaker.window = time:10s; breaker.buckets = 10; "                 \
	"breaker.min_calls = 1000; limit.rate = 1000/s; limit.burst = 100"
#define LCONF "policy.scope = global; limit.rate = 1000/s; limit.burst = 100"

static char cname[64];
static struct test_redis rd;
static struct test_daemon hd[HOSTS];
static resil_t *cl[HOSTS];

static int host_start(int h)
{
	int v;

	if (test_cluster_host(&hd[h], rd.url, cname, h, NULL) < 0)
		return -1;
	v = resil_open(&cl[h], hd[h].sock);
	if (v == 0)
		v = resil_define(cl[h], "hb", BCONF);
	if (v == 0)
		v = resil_define(cl[h], "lim", LCONF);
	return v;
}

static double metric(int h, const char *name, const char *label)
{
	return test_cluster_metric(&hd[h], name, label);
}

/* Every exchange counter of both hosts has moved by n since then[]. */
static bool exchanged(const double then[HOSTS], int n)
{
	for (int h = 0; h < HOSTS; h++)
		if (metric(h, "resil_cluster_exchanges_total", NULL) < then[h] + n)
			return false;
	return true;
}

static void exchanges_now(double out[HOSTS])
{
	for (int h = 0; h < HOSTS; h++)
		out[h] = metric(h, "resil_cluster_exchanges_total", NULL);
}

/* Both hosts connected once, no error of a connection, leases live. */
static void check_intact(const char *what)
{
	for (int h = 0; h < HOSTS; h++) {
		CHECK(test_log_count(&hd[h], "connected to Redis at") == 1,
		      "%s: host %c never reconnected", what, 'A' + h);
		CHECK(metric(h, "resil_cluster_errors_total", NULL) == 0,
		      "%s: host %c counts no failed exchange (%.0f)", what, 'A' + h,
		      metric(h, "resil_cluster_errors_total", NULL));
		CHECK(metric(h, "resil_cluster_lease_seconds", "hb") > 0,
		      "%s: host %c's hb lease is live", what, 'A' + h);
	}
}

/* Does `resilctl status` on host h print want? */
static bool status_says(int h, const char *want)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[h].sock, "status", NULL};
	static char out[1 << 16];

	return test_run(argv, NULL, out, sizeof(out)) == 0 && strstr(out, want);
}

int main(void)
{
	char key[256];
	double x0[HOSTS];

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clho") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "ho%d", (int)getpid());
	for (int h = 0; h < HOSTS; h++)
		CHECK(host_start(h) == 0, "host %c starts", 'A' + h);
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(metric(h, "resil_cluster_lease_seconds", "hb") > 0 &&
				      metric(h, "resil_cluster_lease_seconds", "lim") > 0),
		      "host %c holds its leases", 'A' + h);
	if (test_failures)
		goto out;

	/* 1. 2^63 in every counted bucket of A's window */
	{
		const struct resil_rec *rec = test_rec_of(cl[0], "hb");
		const struct resil_breaker_conf *bc = &rec->conf.breaker;
		char *st = resil_comp_state(&cl[0]->seg, rec, RESIL_C_BREAKER);
		uint64_t n = bc->buckets, size = resil_breaker_state_size(bc);
		struct resil_breaker_bucket *bk =
		    (void *)(st + size - resil_align_up(n * sizeof(*bk), RESIL_HOT_ALIGN));
		resil_policy_t *p;
		resil_permit_t pm;
		int hit = 0;

		CHECK(resil_policy(cl[0], "hb", &p) == 0, "hb on A");
		for (int i = 0; i < 5; i++)
			if (resil_acquire(p, &pm) == 0)
				resil_release(p, &pm, RESIL_SUCCESS);
		for (uint64_t i = 0; i < n; i++)
			if (ld_relaxed(&bk[i].epoch) && ld_relaxed(&bk[i].calls) == 5) {
				st_relaxed(&bk[i].calls, 1ULL << 63);
				hit++;
			}
		CHECK(hit == 1, "the bucket of A's five calls found (%d)", hit);
	}
	exchanges_now(x0);
	CHECK(TEST_EVENTUALLY(exchanged(x0, 10)), "ten more exchanges on both hosts");
	check_intact("2^63 calls in a bucket of A");
	for (int h = 0; h < HOSTS; h++) {
		double fleet = metric(h, "resil_cluster_breaker_fleet_calls", "hb");

		printf("2^63 calls in a bucket of A: host %c mirrors %.0f calls in the fleet's "
		       "window (at most 10 x (2^32 - 1))\n",
		       'A' + h, fleet);
		CHECK(fleet >= 4294967295.0 && fleet <= 10 * 4294967295.0 + 100,
		      "host %c: the fleet's window holds A's clamped count (%.0f)", 'A' + h, fleet);
		CHECK(metric(h, "resil_cluster_script_errors_total", "hb") == 0,
		      "host %c: no script error for hb", 'A' + h);
	}

	/* 2. another client of Redis: a window of 10^30 calls */
	{
		redisContext *rc = test_redis_conn(&rd);
		redisReply *r;

		snprintf(key, sizeof(key), "%s:{hb}:breaker", cname);
		r = rc ? redisCommand(rc, "HSET %s h:mallory [1e30,1e30,1e30,%lld,0]", key,
				      (long long)time(NULL) * 1000)
		       : NULL;
		CHECK(r && r->type == REDIS_REPLY_INTEGER, "a window of 10^30 calls written");
		if (r)
			freeReplyObject(r);
		if (rc)
			redisFree(rc);
	}
	exchanges_now(x0);
	CHECK(TEST_EVENTUALLY(exchanged(x0, 10)), "ten more exchanges on both hosts");
	check_intact("10^30 calls in Redis");
	for (int h = 0; h < HOSTS; h++)
		CHECK(metric(h, "resil_cluster_script_errors_total", "hb") == 0,
		      "host %c: no script error for hb", 'A' + h);

	/* 3. lim's lease hash turned into a string: its script fails, lim
	 * alone */
	snprintf(key, sizeof(key), "%s:{lim}:lease", cname);
	{
		redisContext *rc = test_redis_conn(&rd);
		redisReply *r = rc ? redisCommand(rc, "SET %s not-a-hash", key) : NULL;

		CHECK(r && r->type == REDIS_REPLY_STATUS, "lim's lease hash made a string");
		if (r)
			freeReplyObject(r);
		if (rc)
			redisFree(rc);
	}
	for (int h = 0; h < HOSTS; h++) {
		CHECK(TEST_EVENTUALLY(metric(h, "resil_cluster_script_errors_total", "lim") > 0),
		      "host %c: lim's script errors counted", 'A' + h);
		CHECK(test_log_count(&hd[h], "policy lim: the lease script failed") == 1,
		      "host %c: logged once", 'A' + h);
		CHECK(status_says(h, "ERROR: the lease script failed"), "host %c: status says so",
		      'A' + h);
	}
	exchanges_now(x0);
	CHECK(TEST_EVENTUALLY(exchanged(x0, 10)), "ten more exchanges on both hosts");
	check_intact("lim's script failing");
	for (int h = 0; h < HOSTS; h++)
		CHECK(metric(h, "resil_cluster_script_errors_total", "hb") == 0,
		      "host %c: hb untouched", 'A' + h);
	{
		redisContext *rc = test_redis_conn(&rd);
		redisReply *r = rc ? redisCommand(rc, "DEL %s", key) : NULL;

		if (r)
			freeReplyObject(r);
		if (rc)
			redisFree(rc);
	}
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(
			  test_log_count(&hd[h], "policy lim: its scripts answer again") == 1),
		      "host %c: lim answers again", 'A' + h);

out:
	test_cluster_hosts_stop(hd, cl, HOSTS);
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

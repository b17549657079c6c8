/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_budget.c - global retry budgets over three hosts (three
 * resild instances, one real redis-server on a private unix socket), and
 * a fourth host under the same cluster name with another configuration.
 *
 * gRPC (grpc:10:1: retries while tokens > 5): six failures on host A
 * drain the fleet's bucket to 4, and hosts B and C, which saw none, stop
 * retrying (a real retry loop on B is refused: retry budget exhausted);
 * six successes on host C refill it for every host. The fleet's bucket
 * in Redis ends at exactly 10 - 6 - 1 (B's refused loop failed once) + 6
 * = 9, and every host's mirror with it: nothing counted twice or lost.
 *
 * Ratio (ratio:10%): 100 requests begun on host A let host B, which began
 * none, make 10 retries and refuse the 11th.
 *
 * A budget worth 5 retries fleet-wide (aws:70, 14 a retry after a
 * transient error), every host retrying failed calls at once for two
 * seconds: each host spends only its slice of the fleet's tokens between
 * two reports, so the fleet makes at least 5 retries and at most 5 + 3
 * (one each past the fleet's tokens: a slice is never thinner than one
 * retry).
 *
 * Host D runs policy "g" with another budget under the same cluster
 * name: D and the others report the conflict (log, event text, a line
 * per conflicting policy in `resilctl status` and its --json).
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
#define GCONF "policy.scope = global; retry.budget = grpc:10:1; retry.max_attempts = 5"
#define RCONF "policy.scope = global; retry.budget = ratio:10%; retry.max_attempts = 50"
#define DCONF "policy.scope = global; retry.budget = grpc:20:1; retry.max_attempts = 5"
/* 5 retries fleet-wide: a retry after a transient error costs 14 */
#define ACONF "policy.scope = global; retry.budget = aws:70; retry.max_attempts = 255"

static char cname[64];
static struct test_redis rd;
static struct test_daemon hd[HOSTS + 1];
static resil_t *cl[HOSTS + 1];

static int host_start(int h, const char *policy, const char *conf)
{
	int v;

	if (test_cluster_host(&hd[h], rd.url, cname, h, NULL) < 0)
		return -1;
	v = resil_open(&cl[h], hd[h].sock);
	if (v < 0)
		return v;
	return resil_define(cl[h], policy, conf);
}

/* host h's local budget for policy name: tokens (milli) or, ratio,
 * retries allowed now */
static long long tokens(int h, const char *name)
{
	const struct resil_rec *rec = test_rec_of(cl[h], name);
	const struct resil_retry_conf *bc;
	void *st = resil_budget_state_for(&cl[h]->seg, rec, &bc);

	return st ? resil_budget_tokens_milli(st, bc, resil_clock_monotonic(NULL)) : -1;
}

/* One request on host h whose first attempt ends with cls; with a
 * failure, the budget's answer to a retry (1: allowed, 0: refused). */
static int request(int h, const char *name, int cls)
{
	resil_policy_t *p;
	resil_retry_t rt;
	int64_t d;

	if (resil_policy(cl[h], name, &p) < 0)
		return -1;
	resil_retry_begin(p, &rt, 0);
	d = resil_retry_next(&rt, cls, 0);
	if (cls == RESIL_ERR_NONE)
		return d < 0 && strstr(resil_retry_reason(&rt), "succeeded") ? 1 : -1;
	if (d >= 0)
		return 1;
	return strstr(resil_retry_reason(&rt), "budget") ? 0 : -1;
}

/* What a host of three may spend of the fleet's grpc:10 bucket at fleet
 * (milli): the half no retry passes below, plus a third of the rest, at
 * least a token (cluster_budget.c, slice_of). */
static long long slice3(long long fleet)
{
	long long part = (fleet - 5000) / HOSTS;

	if (fleet <= 5000)
		return fleet;
	return 5000 + (part < 1000 ? 1000 : part) < fleet ? 5000 + (part < 1000 ? 1000 : part)
							  : fleet;
}

static bool all_at(const char *key, long long fleet)
{
	if (test_redis_num(&rd, "HGET", key, "t") != fleet)
		return false;
	for (int h = 0; h < HOSTS; h++)
		if (tokens(h, "g") != slice3(fleet))
			return false;
	return true;
}

static bool others_below_half(void)
{
	return tokens(1, "g") <= 5000 && tokens(2, "g") <= 5000;
}

static bool others_above_half(void)
{
	return tokens(0, "g") > 5000 && tokens(1, "g") > 5000;
}

static bool ratio_seen(void)
{
	return tokens(1, "q") >= 10;
}

/* resilctl status (--json when json) on host h has want */
static bool status_has(int h, bool json, const char *want)
{
	const char *argv[] = {RESILCTL_PATH,	      "--socket", hd[h].sock, "status",
			      json ? "--json" : NULL, NULL};
	static char out[65536];

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return false;
	return strstr(out, want) != NULL;
}

static bool status_conflict(void)
{
	/* D sees A, B and C; each of them sees D */
	return status_has(HOSTS, false, "CONFLICT: host host") &&
	       status_has(HOSTS, false, "(and more) runs it with another configuration") &&
	       status_has(HOSTS, true, "\"conflicts\":3,\"conflict_host\":\"host") &&
	       status_has(0, false, "CONFLICT: host hostD runs it with another configuration") &&
	       status_has(0, true, "\"name\":\"g\",\"conflicts\":1,\"conflict_host\":\"hostD\"");
}

static bool conflict_seen(void)
{
	return test_log_count(&hd[HOSTS], "runs another configuration") > 0 &&
	       test_log_count(&hd[0], "runs another configuration") > 0;
}

int main(void)
{
	char key[128];
	int64_t t0;
	int v;

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clbu") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "bu%d", (int)getpid());
	for (int h = 0; h < HOSTS; h++) {
		CHECK(host_start(h, "g", GCONF) == 0, "host %d starts", h);
		CHECK(resil_define(cl[h], "q", RCONF) == 0, "host %d defines q", h);
	}
	snprintf(key, sizeof(key), "%s:{g}:budget", cname);
	CHECK(TEST_EVENTUALLY(all_at(key, 10000)),
	      "the fleet's bucket starts full, each host spends a third of its upper half");

	/* gRPC: failures on A drain it for B and C */
	for (int i = 0; i < 6; i++)
		CHECK(request(0, "g", RESIL_ERR_TRANSIENT) >= 0, "a failure on A");
	t0 = test_mono_ns();
	CHECK(TEST_EVENTUALLY(others_below_half()),
	      "B and C see the fleet's bucket at half or below (B %lld, C %lld)", tokens(1, "g"),
	      tokens(2, "g"));
	printf("failures on A mirrored on B and C %.1f intervals later\n",
	       (double)(test_mono_ns() - t0) / 1e8);
	v = request(1, "g", RESIL_ERR_TRANSIENT);
	CHECK(v == 0, "a retry on B, which saw no failure, is refused by the budget (%d)", v);
	v = request(2, "g", RESIL_ERR_NONE);
	CHECK(TEST_EVENTUALLY(test_redis_num(&rd, "HGET", key, "t") == 4000),
	      "the fleet's bucket: 10 - 6 - 1 + 1 = 4 (%lld)",
	      test_redis_num(&rd, "HGET", key, "t"));

	/* successes on C refill it everywhere */
	for (int i = 0; i < 5; i++)
		CHECK(request(2, "g", RESIL_ERR_NONE) == 1, "a success on C");
	t0 = test_mono_ns();
	CHECK(TEST_EVENTUALLY(others_above_half()), "A and B see the refill (A %lld, B %lld)",
	      tokens(0, "g"), tokens(1, "g"));
	printf("successes on C mirrored on A and B %.1f intervals later\n",
	       (double)(test_mono_ns() - t0) / 1e8);
	v = request(0, "g", RESIL_ERR_TRANSIENT);
	CHECK(v == 1, "a retry on A is allowed again (%d)", v);
	CHECK(TEST_EVENTUALLY(all_at(key, 8000)),
	      "fleet 4 + 5 - 1 = 8, each host its slice (Redis %lld; A %lld B %lld C %lld)",
	      test_redis_num(&rd, "HGET", key, "t"), tokens(0, "g"), tokens(1, "g"),
	      tokens(2, "g"));

	/* ratio: A's requests pay for B's retries */
	{
		resil_policy_t *p;
		resil_retry_t rt;
		int allowed = 0;

		CHECK(resil_policy(cl[0], "q", &p) == 0, "q on A");
		for (int i = 0; i < 100; i++)
			resil_retry_begin(p, &rt, 0);
		CHECK(TEST_EVENTUALLY(ratio_seen()), "B sees A's requests (%lld retries allowed)",
		      tokens(1, "q"));
		CHECK(resil_policy(cl[1], "q", &p) == 0, "q on B");
		resil_retry_begin(p, &rt, 0);
		for (int i = 0; i < 20; i++) {
			if (resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0)
				break;
			allowed++;
		}
		/* 101 requests in the fleet: 10 retries */
		CHECK(allowed == 10, "B made %d retries on the fleet's 101 requests (10 expected)",
		      allowed);
		CHECK(strstr(resil_retry_reason(&rt), "budget") != NULL,
		      "B stopped on the budget: %s", resil_retry_reason(&rt));
	}

	/* a budget worth 5 retries fleet-wide, a storm on every host */
	{
		char akey[128];
		resil_policy_t *p[HOSTS];
		int allowed[HOSTS] = {0}, total = 0;
		int64_t end;

		snprintf(akey, sizeof(akey), "%s:{a}:budget", cname);
		for (int h = 0; h < HOSTS; h++)
			CHECK(resil_define(cl[h], "a", ACONF) == 0 &&
				  resil_policy(cl[h], "a", &p[h]) == 0,
			      "host %d defines a", h);
		/* every host has its slice: a third of the fleet's 70 */
		CHECK(TEST_EVENTUALLY(tokens(0, "a") == 70000 / HOSTS &&
				      tokens(1, "a") == 70000 / HOSTS &&
				      tokens(2, "a") == 70000 / HOSTS),
		      "each host spends a third of the fleet's 70 (%lld %lld %lld)", tokens(0, "a"),
		      tokens(1, "a"), tokens(2, "a"));
		end = test_mono_ns() + 2 * RESIL_NS_PER_S;
		total = test_cluster_retry_until(p, HOSTS, end, allowed);
		printf("aws:70 (5 retries fleet-wide), every host retrying for 2 s: %d retries "
		       "(A %d, B %d, C %d; bound 5 + %d), %lld tokens left in the fleet\n",
		       total, allowed[0], allowed[1], allowed[2], HOSTS,
		       test_redis_num(&rd, "HGET", akey, "t"));
		CHECK(total >= 5 && total <= 5 + HOSTS,
		      "a budget of 5 retries: %d retries fleet-wide (5 to %d)", total, 5 + HOSTS);
		CHECK(test_redis_num(&rd, "HGET", akey, "t") < 14000,
		      "the fleet has not a retry's worth left");
	}

	/* another configuration under the same cluster name */
	CHECK(host_start(HOSTS, "g", DCONF) == 0, "host D starts");
	CHECK(TEST_EVENTUALLY(conflict_seen()), "host D and host A report the conflict");
	CHECK(TEST_EVENTUALLY(status_conflict()),
	      "resilctl status on D and A: a conflict line for g, and its fields in --json");
	{
		const char *argv[] = {RESILCTL_PATH, "--socket", hd[0].sock, "show", "g", NULL};
		static char out[65536];

		CHECK(test_run(argv, NULL, out, sizeof(out)) == 0 &&
			  strstr(out, "cluster     CONFLICT: another configuration") &&
			  !strstr(out, "in sync"),
		      "resilctl show g on A: the conflict, not in sync:\n%s", out);
	}
	CHECK(status_has(1, true, "{\"name\":\"q\",\"conflicts\":0,"),
	      "no conflict for q: every host runs the same ratio budget");

	for (int h = 0; h <= HOSTS; h++) {
		int st;

		if (cl[h])
			resil_close(cl[h]);
		cl[h] = NULL;
		st = test_daemon_stop(&hd[h]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "host %c exits cleanly (status %#x)",
		      'A' + h, st);
	}
	for (int h = 0; h <= HOSTS; h++) {
		if (test_failures)
			fprintf(stderr, "--- host %c log: %s\n", 'A' + h, hd[h].log);
		else
			test_daemon_fini(&hd[h]);
	}
	for (int h = 0; test_failures && h <= HOSTS; h++)
		test_daemon_stop(&hd[h]);
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

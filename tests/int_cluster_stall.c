/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_stall.c - what an operator reads when Redis stalls (one
 * resild host, one real redis-server on a private unix socket, SIGSTOPped
 * and SIGCONTed by the test).
 *
 * Two global policies, each a limiter and a bulkhead (two leases from one
 * exchange). Redis stops answering: each policy's leases run out and the
 * log says so in one line per policy (not one per lease, nor one per
 * tick), still once each by the time the socket's timeout has passed (a
 * lease lasts 3 intervals, the timeout 2 s: some twenty ticks later);
 * then the exchange's error names the stall, in the log and in
 * `resilctl status`; the lease's running out is not logged again as an
 * event line. Redis resumes: the host is connected and on a lease
 * again, and a second stall is one more line per policy.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster_util.h"

#define CONF  "policy.scope = global; limit.rate = 100/s; bulkhead.max = 10"
#define STALL "no answer within the timeout (Redis stalled or too slow)"

static struct test_redis rd;
static struct test_daemon hd[1];
static resil_t *cl[1];

static bool status_has(const char *want)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[0].sock, "status", NULL};
	static char out[65536];

	return test_run(argv, NULL, out, sizeof(out)) == 0 && strstr(out, want) != NULL;
}

static bool leased(void)
{
	return test_cluster_metric(&hd[0], "resil_cluster_lease_seconds", "\"p1\"") > 0 &&
	       test_cluster_metric(&hd[0], "resil_cluster_lease_seconds", "\"p2\"") > 0 &&
	       status_has("           connected");
}

static bool stalled(int round)
{
	/* the exchange's own read timing out names it (not the socket's path) */
	return test_log_count(&hd[0], "redis.sock: " STALL) >= round &&
	       status_has("NOT CONNECTED: ") && status_has(STALL);
}

int main(void)
{
	char cname[64];

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clst") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "st%d", (int)getpid());
	CHECK(test_cluster_host(&hd[0], rd.url, cname, 0, NULL) == 0, "host A starts");
	CHECK(resil_open(&cl[0], hd[0].sock) == 0 && resil_define(cl[0], "p1", CONF) == 0 &&
		  resil_define(cl[0], "p2", CONF) == 0,
	      "A defines p1 and p2");
	if (test_failures)
		goto out;
	CHECK(TEST_EVENTUALLY(leased()), "A is connected and both policies are on a lease");

	for (int round = 1; round <= 2; round++) {
		kill(rd.pid, SIGSTOP);
		CHECK(TEST_EVENTUALLY(stalled(round)),
		      "stall %d: the error names the stall, in the log and in resilctl status",
		      round);
		CHECK(test_log_count(&hd[0], "policy p1: lease ran out") == round &&
			  test_log_count(&hd[0], "policy p2: lease ran out") == round,
		      "stall %d: one line per policy whose leases ran out (p1 %d, p2 %d)", round,
		      test_log_count(&hd[0], "policy p1: lease ran out"),
		      test_log_count(&hd[0], "policy p2: lease ran out"));
		CHECK(test_log_count(&hd[0], "lease expired unrenewed") == 0,
		      "stall %d: no second line for it from the event", round);
		kill(rd.pid, SIGCONT);
		CHECK(TEST_EVENTUALLY(leased()), "stall %d over: A is connected and on a lease",
		      round);
	}

out:
	if (rd.pid)
		kill(rd.pid, SIGCONT);
	test_cluster_hosts_stop(hd, cl, 1);
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_keyed.c - a global per-IP limit (100 per 60 s, burst 100)
 * over three hosts: three resild instances, one real redis-server on a
 * private unix socket, one worker process per host.
 *
 * Three IPs, their requests paced at RATE per second each, fleet-wide,
 * for RUN_S seconds: IP 1 round-robin over the hosts, IP 2 skewed
 * 50/30/20, IP 3 skewed 20/20/60. Each worker sends its host's share at
 * the scheduled times and counts what its host admits. docs/global.md's
 * bound for one key over a span S (rate r, burst b, exchange delay D):
 *     r x S + b + the admissions the other hosts make within D
 * and the others' admissions within D are at most RATE x D here (every
 * host's demand for the IP together). D = 2 intervals + DELAY_SLACK (the
 * round trip and the wake, generous on a loaded machine).
 *
 * The same load then runs on a keyed limiter of host scope (no charging
 * between hosts): each host admits about b + r x S of its share, ~3 x 100
 * per IP, well over the bound; the test checks that too, so the bound it
 * asserts is one a limiter without the exchange fails.
 *
 * Then one key (an API key) of a limit of 100/s, burst 10, offered
 * 200/s on each host (3 x 2x its rate: every host's own clients keep its
 * bucket full) for HOT_S seconds: the fleet's count stays within
 *     r x S + b + (H - 1) x (r x D + b)
 * where a limiter that cut the other hosts' charges at a full bucket
 * admits about 3 x r x S.
 *
 * Redis keeps the reports bounded: the stream holds at most the reports
 * of its keep window (ten intervals, a second) per host. Reports written
 * into the stream by another client of Redis (a length that is no record,
 * records of no key) are skipped without breaking the exchange.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "cluster_util.h"

#define HOSTS	    3
#define IPS	    3
#define RATE	    120.0 /* requests per second per IP, fleet-wide */
#define RUN_S	    4.0
#define LIMIT	    100
#define PERIOD_S    60.0
#define INTERVAL_S  0.1 /* the daemons' default --cluster-interval */
#define DELAY_SLACK 0.25
#define GCONF	    "policy.scope = global; limit.rate = 100/60s; limit.burst = 100; limit.keys = 1024"
#define LCONF	    "limit.rate = 100/60s; limit.burst = 100; limit.keys = 1024"
#define HOT_RATE    100.0 /* the hot key's limit per second */
#define HOT_BURST   10
#define HOT_OFFER   200.0 /* offered per second on each host */
#define HOT_S	    3.0
#define HCONF	    "policy.scope = global; limit.rate = 100/s; limit.burst = 10; limit.keys = 1024"

static const char *const ip[IPS] = {"192.0.2.1", "192.0.2.2", "198.51.100.7"};

static char cname[64];
static struct test_redis rd;
static struct test_daemon hd[HOSTS];

/* The host of IP i's j-th request. */
static int host_of(int i, long j)
{
	int m = (int)(j % 10);

	switch (i) {
	case 0:
		return (int)(j % HOSTS);
	case 1:
		return m < 5 ? 0 : m < 8 ? 1 : 2;
	default:
		return m < 2 ? 0 : m < 4 ? 1 : 2;
	}
}

struct result {
	long admitted[IPS];
	long sent[IPS];
	int64_t end_ns;
	int err;
};

/* A worker for host h: its share of the schedule, from t0. */
static void worker(int h, const char *policy, int64_t t0, int fd)
{
	struct result res = {0};
	long steps = (long)(RUN_S * RATE) * IPS;
	int64_t step = (int64_t)(1e9 / (RATE * IPS));
	resil_policy_t *p;
	resil_t *r;
	int v;

	v = resil_open(&r, hd[h].sock);
	if (v == 0)
		v = resil_policy(r, policy, &p);
	if (v < 0) {
		res.err = v;
		goto out;
	}
	for (long k = 0; k < steps; k++) {
		int i = (int)(k % IPS);
		long j = k / IPS;
		int64_t at = t0 + k * step;
		struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
		resil_permit_t pm;

		if (host_of(i, j) != h)
			continue;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		res.sent[i]++;
		v = resil_acquire_key(p, ip[i], strlen(ip[i]), &pm);
		if (v == 0) {
			res.admitted[i]++;
			resil_release(p, &pm, RESIL_ERR_NONE);
		} else if (v != RESIL_REJECT_LIMITED) {
			res.err = v;
			break;
		}
	}
	res.end_ns = test_mono_ns();
	resil_close(r);
out:
	if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		_exit(2);
	_exit(0);
}

/* A worker for host h: one key at HOT_OFFER per second, from t0. */
static void hot_worker(int h, int64_t t0, int fd)
{
	struct result res = {0};
	long steps = (long)(HOT_S * HOT_OFFER);
	int64_t step = (int64_t)(1e9 / HOT_OFFER);
	static const char key[] = "api-key-7f3a";
	resil_policy_t *p;
	resil_t *r;
	int v;

	v = resil_open(&r, hd[h].sock);
	if (v == 0)
		v = resil_policy(r, "api", &p);
	if (v < 0) {
		res.err = v;
		goto out;
	}
	/* the hosts' requests interleave: a third of a step apart */
	t0 += step * h / HOSTS;
	for (long k = 0; k < steps; k++) {
		int64_t at = t0 + k * step;
		struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
		resil_permit_t pm;

		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		res.sent[0]++;
		v = resil_acquire_key(p, key, sizeof(key) - 1, &pm);
		if (v == 0) {
			res.admitted[0]++;
			resil_release(p, &pm, RESIL_ERR_NONE);
		} else if (v != RESIL_REJECT_LIMITED) {
			res.err = v;
			break;
		}
	}
	res.end_ns = test_mono_ns();
	resil_close(r);
out:
	if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		_exit(2);
	_exit(0);
}

/* The load on policy over the three hosts: admitted per IP, the span. */
static int run(const char *policy, long admitted[IPS], long sent[IPS], double *span_s)
{
	int64_t t0 = test_mono_ns() + 300 * RESIL_NS_PER_MS, end = t0;
	pid_t pid[HOSTS];
	int fds[HOSTS][2];
	int bad = 0;

	memset(admitted, 0, IPS * sizeof(long));
	memset(sent, 0, IPS * sizeof(long));
	for (int h = 0; h < HOSTS; h++) {
		if (pipe(fds[h]) < 0)
			return -1;
		pid[h] = fork();
		if (pid[h] < 0)
			return -1;
		if (pid[h] == 0) {
			close(fds[h][0]);
			if (!strcmp(policy, "api"))
				hot_worker(h, t0, fds[h][1]);
			worker(h, policy, t0, fds[h][1]);
		}
		close(fds[h][1]);
	}
	for (int h = 0; h < HOSTS; h++) {
		struct result res;
		ssize_t n = read(fds[h][0], &res, sizeof(res));
		int st;

		close(fds[h][0]);
		if (test_wait_pid(pid[h], 60000) < 0) {
			kill(pid[h], SIGKILL);
			waitpid(pid[h], &st, 0);
		}
		CHECK(n == (ssize_t)sizeof(res) && res.err == 0, "worker %d reports (err %d)", h,
		      n == (ssize_t)sizeof(res) ? res.err : -1);
		if (n != (ssize_t)sizeof(res) || res.err) {
			bad++;
			continue;
		}
		for (int i = 0; i < IPS; i++) {
			admitted[i] += res.admitted[i];
			sent[i] += res.sent[i];
		}
		if (res.end_ns > end)
			end = res.end_ns;
	}
	*span_s = (double)(end - t0) / 1e9;
	return bad ? -1 : 0;
}

static bool all_connected(void)
{
	for (int h = 0; h < HOSTS; h++)
		if (test_log_count(&hd[h], "connected to Redis") < 1)
			return false;
	return true;
}

int main(void)
{
	const double r = LIMIT / PERIOD_S, D = 2 * INTERVAL_S + DELAY_SLACK;
	long adm[IPS], sent[IPS], ladm[IPS], lsent[IPS];
	resil_t *cl[HOSTS] = {0};
	double span, lspan, bound[IPS], lbound;
	char key[128];
	long long xlen;

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clke") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "ke%d", (int)getpid());
	for (int h = 0; h < HOSTS; h++) {
		CHECK(test_cluster_host(&hd[h], rd.url, cname, h, NULL) == 0, "host %c starts",
		      'A' + h);
		CHECK(resil_open(&cl[h], hd[h].sock) == 0, "host %c opens", 'A' + h);
		CHECK(cl[h] && resil_define(cl[h], "ip", GCONF) == 0, "host %c defines ip",
		      'A' + h);
		CHECK(cl[h] && resil_define(cl[h], "iplocal", LCONF) == 0,
		      "host %c defines iplocal", 'A' + h);
		CHECK(cl[h] && resil_define(cl[h], "api", HCONF) == 0, "host %c defines api",
		      'A' + h);
	}
	CHECK(TEST_EVENTUALLY(all_connected()), "every host reaches Redis");
	if (test_failures)
		goto out;

	/* another client of Redis writes reports no daemon wrote: a length
	 * that is no record, a record of no key, a count of 0. Skipped; the
	 * daemons keep exchanging (the runs below depend on it). */
	snprintf(key, sizeof(key), "%s:{ip}:keyed", cname);
	{
		redisContext *rc = test_redis_conn(&rd);
		static const char junk[3][24] = {"abcdefghijklm", {0}, {9, 9, 9, 9, 9, 9, 9, 9}};
		static const size_t jlen[3] = {13, 12, 12};

		CHECK(rc != NULL, "a connection to Redis");
		for (int i = 0; rc && i < 3; i++) {
			const char *argv[] = {"XADD", key, "*", "h", "mallory", "d", junk[i]};
			size_t argvlen[] = {4, strlen(key), 1, 1, 7, 1, jlen[i]};
			redisReply *x = redisCommandArgv(rc, 7, argv, argvlen);

			CHECK(x && x->type == REDIS_REPLY_STRING, "junk report %d added", i);
			if (x)
				freeReplyObject(x);
		}
		if (rc)
			redisFree(rc);
	}

	/* global: charged across hosts */
	CHECK(run("ip", adm, sent, &span) == 0, "the global run");
	printf("global per-IP limit %d per %.0f s, burst %d, %d hosts, %.0f requests/s per IP "
	       "over %.2f s (D = %.2f s):\n",
	       LIMIT, PERIOD_S, LIMIT, HOSTS, RATE, span, D);
	printf("  %-14s %-9s %6s %8s %6s %9s\n", "ip", "spread", "sent", "admitted", "bound",
	       "overshoot");
	for (int i = 0; i < IPS; i++) {
		/* r x S + b + what the others admit within D (+1: a permit
		 * due at the span's very end) */
		bound[i] = r * span + LIMIT + RATE * D + 1;
		printf("  %-14s %-9s %6ld %8ld %6.0f %9.0f\n", ip[i],
		       i == 0	? "rr"
		       : i == 1 ? "50/30/20"
				: "20/20/60",
		       sent[i], adm[i], bound[i], (double)adm[i] - (r * span + LIMIT));
		CHECK(adm[i] <= bound[i], "IP %s: %ld admitted fleet-wide, over the bound %.0f",
		      ip[i], adm[i], bound[i]);
		CHECK(adm[i] >= LIMIT, "IP %s: %ld admitted, below the burst %d", ip[i], adm[i],
		      LIMIT);
	}
	CHECK(test_redis_num(&rd, "PTTL", key, NULL) > 0, "the stream expires");
	for (int h = 0; h < HOSTS; h++)
		CHECK(test_log_count(&hd[h], "garbage") == 0 &&
			  test_log_count(&hd[h], "the keyed script failed") == 0,
		      "host %c took the junk reports for errors", 'A' + h);

	/* one hot key, every host at twice its rate */
	CHECK(run("api", adm, sent, &span) == 0, "the hot key's run");
	{
		double b = HOT_RATE * span + HOT_BURST + (HOSTS - 1) * (HOT_RATE * D + HOT_BURST);

		printf("one key, limit %.0f/s, burst %d, offered %.0f/s on each of %d hosts for "
		       "%.2f s: %ld sent, %ld admitted (bound %.0f, r x S + b = %.0f)\n",
		       HOT_RATE, HOT_BURST, HOT_OFFER, HOSTS, span, sent[0], adm[0], b,
		       HOT_RATE * span + HOT_BURST);
		CHECK(adm[0] <= b, "the hot key: %ld admitted fleet-wide, over the bound %.0f",
		      adm[0], b);
		CHECK(adm[0] >= (long)(HOT_RATE * HOT_S * 0.9),
		      "the hot key: %ld admitted, the fleet starved below 90%% of the rate",
		      adm[0]);
	}
	/* admitted to the end: the last second's reports are in the stream */
	snprintf(key, sizeof(key), "%s:{api}:keyed", cname);
	xlen = test_redis_num(&rd, "XLEN", key, NULL);
	printf("  Redis stream %s: %lld reports kept\n", key, xlen);
	CHECK(xlen >= 1 && xlen <= HOSTS * 15, "the stream keeps a second of reports (%lld)", xlen);
	/* resilctl status lists the keyed global policies, with what was
	 * charged across hosts */
	{
		const char *argv[] = {RESILCTL_PATH, "--socket", hd[0].sock, "status", NULL};
		static char out[65536];

		CHECK(
		    test_run(argv, NULL, out, sizeof(out)) == 0 &&
			strstr(out, "api              keyed: each host the whole per-key limit") &&
			strstr(out, "ip               keyed: ") &&
			!strstr(out, " 0 admissions of other"),
		    "status lists the keyed global policies with their charges:\n%s", out);
	}

	/* the same load on host-scope keyed limiters: the bound's teeth */
	CHECK(run("iplocal", ladm, lsent, &lspan) == 0, "the host-scope run");
	printf("host scope (no exchange), same load over %.2f s:\n", lspan);
	for (int i = 0; i < IPS; i++) {
		lbound = r * lspan + LIMIT + RATE * D + 1;
		printf("  %-14s %6ld sent %8ld admitted (bound %.0f)\n", ip[i], lsent[i], ladm[i],
		       lbound);
		CHECK(ladm[i] > lbound,
		      "IP %s: host scope admits %ld, within the bound %.0f: "
		      "the load does not tell charging from none",
		      ip[i], ladm[i], lbound);
	}

out:
	for (int h = 0; h < HOSTS; h++) {
		int st;

		if (cl[h])
			resil_close(cl[h]);
		st = test_daemon_stop(&hd[h]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "host %c exits cleanly (status %#x)",
		      'A' + h, st);
	}
	for (int h = 0; h < HOSTS; h++) {
		if (test_failures)
			fprintf(stderr, "--- host %c log: %s\n", 'A' + h, hd[h].log);
		else
			test_daemon_fini(&hd[h]);
	}
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

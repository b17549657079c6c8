/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_budget_kill.c - a global retry budget keeps the fleet's
 * bound while one host's daemon is dead (three resild hosts, one real
 * redis-server on a private unix socket, --cluster-fallback-for 3s).
 *
 * aws:700 is 50 retries fleet-wide (14 tokens a retry after a transient
 * error); each host holds a third of it, 16 retries. C's daemon is
 * SIGKILLed; this process, C's client, goes on as its orphaned workers.
 * Then every host retries failed calls for as long as C's slice lasts
 * and two seconds past its end: A and B are sliced what the fleet does
 * not keep for C, C spends its slice alone, and when its end has passed
 * Redis counts it spent. The fleet's retries stay within 50 + 3 (one
 * each past the fleet's tokens: a slice is never thinner than one retry
 * while the fleet has tokens to spare), and at least 50 - 1 (one slice
 * may end with less than a retry in it). Past the end, C's workers
 * refuse a retry even with a retry's worth of tokens refunded into their
 * bucket by successes: the slice's end is checked on each decision.
 *
 * Then host D, through a relay, is cut off from Redis while its daemon
 * lives: past its slice's end its clients go on with what is left of the
 * slice (the daemon moves the end ahead), never a fresh one, and the
 * fleet counts the slice spent.
 */
#include <errno.h>
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
#define ACONF "policy.scope = global; retry.budget = aws:700; retry.max_attempts = 255"
#define FLEET 50 /* retries' worth */

static char cname[64];
static struct test_redis rd;
static struct test_daemon hd[HOSTS + 1];
static resil_t *cl[HOSTS + 1];

static void *budget_in(int h, const char *name, const struct resil_retry_conf **bc)
{
	return resil_budget_state_for(&cl[h]->seg, test_rec_of(cl[h], name), bc);
}

static void *budget_of(int h, const struct resil_retry_conf **bc)
{
	return budget_in(h, "k", bc);
}

static long long tokens_in(int h, const char *name)
{
	const struct resil_retry_conf *bc;
	void *st = budget_in(h, name, &bc);

	return st ? resil_budget_tokens_milli(st, bc, resil_clock_monotonic(NULL)) : -1;
}

static long long tokens(int h)
{
	return tokens_in(h, "k");
}

/* D's slice of d mirrored, its end the hold ahead of a report */
static bool d_sliced(void)
{
	const struct resil_retry_conf *bc;
	void *st = budget_in(HOSTS, "d", &bc);

	return st && tokens_in(HOSTS, "d") > 0 &&
	       resil_budget_lease_until(st) > test_mono_ns() + 2 * RESIL_NS_PER_S;
}

/* one failed call on host h of policy name and its retry: 1 allowed */
static int retry_on(int h, const char *name)
{
	resil_policy_t *p;
	resil_retry_t rt;

	if (resil_policy(cl[h], name, &p) < 0)
		return -1;
	resil_retry_begin(p, &rt, 0);
	return resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) >= 0;
}

static bool each_a_third(void)
{
	for (int h = 0; h < HOSTS; h++)
		if (tokens(h) != 700000 / HOSTS)
			return false;
	return true;
}

int main(void)
{
	const char *const more[] = {"--cluster-fallback-for", "3s", NULL};
	const struct resil_retry_conf *bc;
	resil_policy_t *p[HOSTS];
	resil_retry_t rt[HOSTS];
	int allowed[HOSTS] = {0}, total = 0;
	char key[128];
	int64_t end, until;

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clbk") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "bk%d", (int)getpid());
	snprintf(key, sizeof(key), "%s:{k}:budget", cname);
	for (int h = 0; h < HOSTS; h++) {
		CHECK(test_cluster_host(&hd[h], rd.url, cname, h, more) == 0, "host %d starts", h);
		CHECK(resil_open(&cl[h], hd[h].sock) == 0 && resil_define(cl[h], "k", ACONF) == 0 &&
			  resil_policy(cl[h], "k", &p[h]) == 0,
		      "host %d defines k", h);
	}
	if (test_failures)
		goto out;
	CHECK(TEST_EVENTUALLY(each_a_third()), "each host holds a third of 700 (%lld %lld %lld)",
	      tokens(0), tokens(1), tokens(2));

	/* C's daemon dies; its clients (this process) go on */
	until = resil_budget_lease_until(budget_of(2, &bc));
	test_daemon_kill(&hd[2]);
	CHECK(until > test_mono_ns(), "C's slice has an end ahead (%lld ns)",
	      (long long)(until - test_mono_ns()));

	end = until + 2 * RESIL_NS_PER_S;
	total = test_cluster_retry_until(p, HOSTS, end, allowed);
	printf("aws:700 (%d retries fleet-wide), C's daemon killed, every host retrying until 2 s "
	       "past C's slice: %d retries (A %d, B %d, C %d; bound %d + %d), %lld tokens left "
	       "in the fleet\n",
	       FLEET, total, allowed[0], allowed[1], allowed[2], FLEET, HOSTS,
	       test_redis_num(&rd, "HGET", key, "t"));
	CHECK(total >= FLEET - 1 && total <= FLEET + HOSTS,
	      "a budget of %d retries with a host's daemon dead: %d retries fleet-wide (%d to %d)",
	      FLEET, total, FLEET - 1, FLEET + HOSTS);
	CHECK(allowed[2] <= 700 / HOSTS / 14, "C spent at most its slice: %d retries (%d)",
	      allowed[2], 700 / HOSTS / 14);

	/* past the end, a retry's worth refunded into C's bucket: refused */
	for (int i = 0; i < 14; i++) {
		resil_retry_begin(p[2], &rt[2], 0);
		CHECK(resil_retry_next(&rt[2], RESIL_ERR_NONE, 0) < 0, "a success on C");
	}
	CHECK(tokens(2) >= 14000, "C's bucket holds a retry's worth again (%lld)", tokens(2));
	resil_retry_begin(p[2], &rt[2], 0);
	CHECK(resil_retry_next(&rt[2], RESIL_ERR_TRANSIENT, 0) < 0 &&
		  strstr(resil_retry_reason(&rt[2]), "budget"),
	      "past its slice's end C's retry is refused by the budget: %s",
	      resil_retry_reason(&rt[2]));

	/* D reaches Redis through a relay, and is cut off from it (the relay
	 * killed) while its daemon lives: past its slice's end its clients
	 * go on with what is left of the slice, never a fresh one, and the
	 * fleet counts the slice spent */
	{
		const struct resil_retry_conf *dbc;
		char sock[PATH_MAX + 32], u[PATH_MAX + 64], dkey[128];
		long long s0, r0;
		int64_t dend;
		pid_t relay;
		int n = 0;

		snprintf(sock, sizeof(sock), "%s/cut.sock", rd.dir);
		snprintf(u, sizeof(u), "unix:%s", sock);
		snprintf(dkey, sizeof(dkey), "%s:{d}:budget", cname);
		relay = test_delay_proxy_start(sock, rd.sock, 0);
		CHECK(relay > 0, "the relay starts");
		CHECK(relay > 0 && test_cluster_host(&hd[HOSTS], u, cname, HOSTS, more) == 0 &&
			  resil_open(&cl[HOSTS], hd[HOSTS].sock) == 0,
		      "host D starts through the relay");
		for (int h = 0; h <= HOSTS; h++)
			if (h != 2)
				CHECK(cl[h] && resil_define(cl[h], "d", ACONF) == 0,
				      "host %c defines d", 'A' + h);
		if (test_failures)
			goto out;
		CHECK(TEST_EVENTUALLY(d_sliced()), "D holds a slice of d");
		s0 = tokens_in(HOSTS, "d");
		kill(relay, SIGKILL);
		waitpid(relay, NULL, 0);
		dend = resil_budget_lease_until(budget_in(HOSTS, "d", &dbc));
		CHECK(retry_on(HOSTS, "d") == 1, "a retry on D, cut off, within its slice");
		r0 = tokens_in(HOSTS, "d");
		while (test_mono_ns() < dend + RESIL_NS_PER_S)
			test_sleep_ms(50);
		CHECK(tokens_in(HOSTS, "d") == r0,
		      "past its slice's end D's clients keep what is left of it (%lld), no fresh "
		      "slice (%lld)",
		      r0, tokens_in(HOSTS, "d"));
		CHECK(resil_budget_lease_until(budget_in(HOSTS, "d", &dbc)) > test_mono_ns(),
		      "D's daemon, alive, moves the end ahead");
		CHECK(TEST_EVENTUALLY(test_redis_num(&rd, "HGET", dkey, "t") == 700000 - s0),
		      "the fleet counts D's slice spent (%lld of 700000, D's slice %lld)",
		      test_redis_num(&rd, "HGET", dkey, "t"), s0);
		while (n < 100 && retry_on(HOSTS, "d") == 1)
			n++;
		CHECK(1 + n == s0 / 14000,
		      "D made %d retries in all past the cut, what its slice held (%lld)", 1 + n,
		      s0 / 14000);
	}

out:
	test_cluster_hosts_stop(hd, cl, HOSTS + 1);
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

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
 *
 * The fleet's half-open: a worker process per host calls the dependency
 * all along, first while it is still down, then once it is back. Each
 * worker records every call that reached the dependency while its host's
 * breaker was half-open (a probe), with the time. Half-opens are a wait
 * apart, so probes closer than half a wait belong to one: each holds at
 * most breaker.half_open_calls across the three hosts (each host probing
 * on its own would send 3 x 3), there are at least two (one failed, one
 * passed), and the one that closes the fleet is one host's: the two
 * others close without a probe of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"

#define HOSTS 3
#define CONF                                                                                       \
	"policy.scope = global; breaker.window = time:20s; breaker.min_calls = 30; "               \
	"breaker.failure_rate = 50; breaker.wait = 1500ms; breaker.half_open_calls = 3"
#define WAIT_MS	   1500
#define PROBES	   3
#define PROBES_MAX 4096

struct probe {
	int64_t ns;
	int host;
};

/* Between the test and its workers (MAP_SHARED). */
struct shared {
	atomic_int up;	 /* the dependency answers */
	atomic_int stop; /* workers exit */
	atomic_uint n;	 /* probes recorded */
	struct probe probe[PROBES_MAX];
	atomic_ullong calls[HOSTS]; /* calls that reached it, probes included */
};
static struct shared *sh;
static pid_t workers[HOSTS];

static char cname[64];
static struct test_redis rd;
static struct test_daemon hd[HOSTS + 1];

static int host_start(int h)
{
	resil_t *r;
	int v;

	if (test_cluster_host(&hd[h], rd.url, cname, h, NULL) < 0)
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

/* A worker of host h: calls the dependency at a steady pace until told
 * to stop; a call admitted while the host's breaker is half-open is a
 * probe. */
static void worker(int h)
{
	resil_policy_t *p;
	resil_permit_t pm;
	resil_t *r;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "b", &p) < 0)
		_exit(2);
	while (!atomic_load(&sh->stop)) {
		if (resil_acquire(p, &pm) == 0) {
			if (resil_policy_state(p) == RESIL_STATE_HALF_OPEN) {
				unsigned i = atomic_fetch_add(&sh->n, 1);

				if (i < PROBES_MAX) {
					sh->probe[i].ns = test_mono_ns();
					sh->probe[i].host = h;
				}
			}
			atomic_fetch_add(&sh->calls[h], 1);
			resil_release(p, &pm, atomic_load(&sh->up) ? RESIL_SUCCESS : RESIL_FAILURE);
		}
		test_sleep_ms(2); /* a pace, not a wait for anything */
	}
	resil_close(r);
	_exit(0);
}

/* `resilctl show [--json] b` on host h has `want` */
static bool show_says(int h, bool json, const char *want)
{
	const char *argv[] = {RESILCTL_PATH,	     "--socket",	hd[h].sock, "show",
			      json ? "--json" : "b", json ? "b" : NULL, NULL};
	static char out[65536];

	if (test_run(argv, NULL, out, sizeof(out)) != 0 || !strstr(out, want)) {
		fprintf(stderr, "resilctl show%s b: no \"%s\" in:\n%s\n", json ? " --json" : "",
			want, out);
		return false;
	}
	return true;
}

static int state_of(int h)
{
	resil_policy_t *p;
	resil_t *r;
	int v;

	if (resil_open(&r, hd[h].sock) < 0)
		return -1;
	v = resil_policy(r, "b", &p);
	if (v == 0)
		v = resil_policy_state(p);
	resil_close(r);
	return v;
}

static bool all_closed(void)
{
	for (int h = 0; h < HOSTS; h++)
		if (state_of(h) != RESIL_STATE_CLOSED)
			return false;
	return true;
}

static bool rounds_at_least(const char *key, long long n)
{
	return test_redis_num(&rd, "HGET", key, "rounds") >= n;
}

static int by_time(const void *a, const void *b)
{
	int64_t x = ((const struct probe *)a)->ns, y = ((const struct probe *)b)->ns;

	return x < y ? -1 : x > y;
}

/* Probes grouped into half-opens (gaps of half a wait); the checks. */
static void check_probes(void)
{
	unsigned n = atomic_load(&sh->n);
	struct probe *pr = sh->probe;
	int groups = 0, in = 0, hosts_last = 0, last_mask = 0, mask = 0;

	CHECK(n <= PROBES_MAX, "probe log overflow (%u)", n);
	if (n > PROBES_MAX)
		n = PROBES_MAX;
	qsort(pr, n, sizeof(*pr), by_time);
	for (unsigned i = 0; i <= n; i++) {
		if (i == n || (i > 0 && pr[i].ns - pr[i - 1].ns > WAIT_MS / 2 * 1000000LL)) {
			if (in) {
				groups++;
				printf("half-open %d: %d probes fleet-wide (hosts mask %d)\n",
				       groups, in, mask);
				CHECK(in <= PROBES,
				      "half-open %d: %d probes reached the dependency "
				      "fleet-wide, over breaker.half_open_calls = %d",
				      groups, in, PROBES);
				last_mask = mask;
			}
			in = 0;
			mask = 0;
			if (i == n)
				break;
		}
		in++;
		mask |= 1 << pr[i].host;
	}
	CHECK(groups >= 2, "at least a failed and a passed half-open (%d)", groups);
	for (int h = 0; h < HOSTS; h++)
		hosts_last += (last_mask >> h) & 1;
	CHECK(hosts_last == 1, "the half-open that closed the fleet was one host's (%d)",
	      hosts_last);
}

int main(void)
{
	char key[128];
	int64_t t0;

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "clbk") < 0 || test_redis_start(&rd, NULL) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "bk%d", (int)getpid());
	for (int h = 0; h < HOSTS; h++)
		CHECK(host_start(h) == 0, "host %d starts", h);

	/* the dependency fails for everyone, below each host's min_calls */
	for (int h = 0; h < HOSTS; h++)
		CHECK(fail_calls(h, 15) == 0, "host %d: 15 failures do not open it alone", h);
	t0 = test_mono_ns();
	CHECK(TEST_EVENTUALLY(all_open()), "every host's breaker opens on the fleet's evidence");
	/* each host logs the rate that opened the fleet, not the window's now */
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(test_log_count(&hd[h], "the fleet's breaker opened") == 1) &&
			  test_log_count(&hd[h], "100.0% bad") == 1,
		      "host %d logs the fleet's open with the rate that opened it", h);
	printf("fleet open mirrored on every host %.1f intervals after the last failure\n",
	       (double)(test_mono_ns() - t0) / 1e8);
	snprintf(key, sizeof(key), "%s:{b}:breaker", cname);
	CHECK(test_redis_num(&rd, "HGET", key, "gen") == 1, "one open for the outage (gen %lld)",
	      test_redis_num(&rd, "HGET", key, "gen"));
	CHECK(show_says(1, false, "fleet     breaker open (opens 1)"), "show: the fleet's open");
	CHECK(show_says(1, true, "\"fleet\":\"open\",\"fleet_open\":1"),
	      "show --json: the fleet's open");
	/* more failures during the open: still one open */
	test_sleep_ms(500);
	CHECK(test_redis_num(&rd, "HGET", key, "gen") == 1, "still one open");

	/* the fleet's half-open: workers on every host, the dependency down */
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(sh != MAP_FAILED, "mmap");
	if (sh != MAP_FAILED) {
		long long r0 = test_redis_num(&rd, "HGET", key, "rounds");
		int64_t t1, t2;

		for (int h = 0; h < HOSTS; h++) {
			workers[h] = fork();
			if (workers[h] == 0)
				worker(h);
		}
		CHECK(TEST_EVENTUALLY(rounds_at_least(key, (r0 < 0 ? 0 : r0) + 2)),
		      "two rounds of probes while the dependency is down (%lld)",
		      test_redis_num(&rd, "HGET", key, "rounds"));
		CHECK(!all_closed(), "still open while it is down");
		atomic_store(&sh->up, 1);
		CHECK(TEST_EVENTUALLY(state_of(0) == RESIL_STATE_CLOSED ||
				      state_of(1) == RESIL_STATE_CLOSED ||
				      state_of(2) == RESIL_STATE_CLOSED),
		      "a host's probes pass once the dependency is back");
		t1 = test_mono_ns();
		CHECK(TEST_EVENTUALLY(all_closed()), "the fleet closes on every host");
		t2 = test_mono_ns();
		printf("every host closed %.1f intervals after the first\n",
		       (double)(t2 - t1) / 1e8);
		atomic_store(&sh->stop, 1);
		for (int h = 0; h < HOSTS; h++) {
			int st = -1;

			if (workers[h] > 0)
				waitpid(workers[h], &st, 0);
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d exits (%d)", h, st);
		}
		CHECK(test_redis_num(&rd, "HGET", key, "gen") == 1,
		      "the close ends the one open (gen %lld)",
		      test_redis_num(&rd, "HGET", key, "gen"));
		check_probes();
		for (int h = 0; h < HOSTS; h++)
			CHECK(show_says(h, false, "fleet     breaker closed (opens 1)"),
			      "show on host %d: the fleet closed", h);
	}

	/* a host's own evidence opens it at once, whatever the fleet */
	{
		char name[64];
		resil_t *r;

		snprintf(name, sizeof(name), "bk%d-other", (int)getpid());
		CHECK(test_cluster_host(&hd[HOSTS], rd.url, name, HOSTS, NULL) == 0,
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
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

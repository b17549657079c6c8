/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_bounds.c - the fleet's bounds hold when a host fails, never
 * connects or shares its name: a real redis-server with a password,
 * resild hosts A, B, C, a limiter of 300/s (burst 10, the fleet's) and a
 * bulkhead of 9,
 * both global, workers on every host that want more than the fleet allows
 * (150/s each; 4 workers holding a permit 5 ms each).
 *
 * 1. C's daemon SIGKILLed while its workers go on (--cluster-fallback
 *    share, the default): they fall back on C's last share, which Redis
 *    holds for C for --cluster-fallback-for (3 s here), then they reject;
 *    A and B get no more than two thirds meanwhile and after: the fleet
 *    keeps for C the rate / 3 its daemon would fall back on if alive. The fleet's
 *    admissions in every 1 s span stay within rate + the hosts' bursts,
 *    its calls in flight within 9, all along.
 * 2. A host that never completes an exchange (a wrong password) and knows
 *    no fleet size: it rejects (limit and bulkhead), says so in its log
 *    and its metrics.
 * 3. A fleet started with --cluster-hosts 3, C again with a wrong
 *    password: A and B lease only their two thirds, C runs on rate / 3
 *    and 9 / 3 slots; the fleet stays within the same bounds.
 * 4. Two daemons under one host id (B twice, as a cloned image with one
 *    /etc/machine-id would run): both log it, their metrics and `resilctl
 *    status` say so, the fleet counts three hosts and stays within the
 *    same bounds.
 * 5. C cut off from Redis (its relay killed; no --cluster-hosts) past
 *    --cluster-fallback-for, its daemon alive: C runs on rate / 3, the
 *    fleet's size it learned, and the fleet keeps that for it (A and B
 *    lease only two thirds); the same bounds.
 * 6. C cut off right after its first answer, before any answered report
 *    carried the rate / 3 it would fall back on: the fleet keeps nothing
 *    for C, so past --cluster-fallback-for C falls back on nothing (its
 *    log and metrics say so); the same bounds.
 * 7. Redis 200 ms away (a relay that delays every byte 100 ms each way):
 *    the leases grow to cover the round trip, none runs out while the
 *    hosts are connected (resil_cluster_lease_expiries_connected_total),
 *    the fleet gets its rate, within the same bounds.
 *
 * Every worker counts its admissions per 100 ms bucket in shared memory,
 * and its calls in flight between its admission and its release (so the
 * counts never exceed the permits held).
 */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster_util.h"

#define HOSTS	  4 /* A, B, C; D: the host that never connects */
#define RATE	  300
#define BURST	  10
#define MAX	  9
#define PER_S	  150.0
#define BWORKERS  4
#define HOLD_MS	  5
#define HOLD_S	  3 /* --cluster-fallback-for */
#define BUCKET_NS (100 * 1000 * 1000LL)
#define NBUCKETS  1200
#define LCONF	  "policy.scope = global; limit.rate = 300/s; limit.burst = 10"
#define BCONF	  "policy.scope = global; bulkhead.max = 9"

struct shared {
	int64_t t0;
	_Atomic int stop;
	_Atomic int fleet; /* calls in flight, all hosts */
	_Atomic int fleet_peak;
	_Atomic int cur[HOSTS];
	_Atomic uint32_t adm[HOSTS][NBUCKETS];
	_Atomic int peak[HOSTS][NBUCKETS]; /* the host's calls in flight, per bucket */
};

static struct shared *sh;
static struct test_redis rd;
static struct test_daemon hd[HOSTS];
static pid_t wk[HOSTS][1 + BWORKERS];
static char cname[64], pw_ok[PATH_MAX + 16], pw_bad[PATH_MAX + 16];

static int bucket_now(void)
{
	int64_t b = (test_mono_ns() - sh->t0) / BUCKET_NS;

	return b < 0 ? 0 : b >= NBUCKETS ? NBUCKETS - 1 : (int)b;
}

static void raise_to(_Atomic int *peak, int v)
{
	int p = atomic_load(peak);

	while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
		;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};

	nanosleep(&ts, NULL);
}

/* The limiter's worker of host h: PER_S attempts a second. */
static void lim_worker(int h)
{
	int64_t step = (int64_t)(1e9 / PER_S), next = test_mono_ns();
	resil_policy_t *p;
	resil_t *r;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "lim", &p) < 0)
		_exit(2);
	while (!atomic_load(&sh->stop)) {
		resil_permit_t pm;
		int64_t now = test_mono_ns();

		if (now < next) {
			sleep_ns(next - now);
			continue;
		}
		next += step;
		if (resil_acquire(p, &pm) == 0) {
			atomic_fetch_add(&sh->adm[h][bucket_now()], 1);
			resil_release(p, &pm, RESIL_SUCCESS);
		}
	}
	resil_close(r);
	_exit(0);
}

/* A bulkhead worker of host h: calls of HOLD_MS, back to back. */
static void bh_worker(int h)
{
	resil_policy_t *p;
	resil_t *r;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "bh", &p) < 0)
		_exit(2);
	while (!atomic_load(&sh->stop)) {
		resil_permit_t pm;
		int v = resil_acquire(p, &pm);

		if (v == RESIL_REJECT_FULL) {
			sleep_ns(1000 * 1000);
			continue;
		}
		if (v != 0)
			_exit(3);
		/* counted from the admission to just before the release */
		raise_to(&sh->fleet_peak, atomic_fetch_add(&sh->fleet, 1) + 1);
		raise_to(&sh->peak[h][bucket_now()], atomic_fetch_add(&sh->cur[h], 1) + 1);
		sleep_ns(HOLD_MS * 1000 * 1000LL);
		atomic_fetch_sub(&sh->cur[h], 1);
		atomic_fetch_sub(&sh->fleet, 1);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	resil_close(r);
	_exit(0);
}

static void workers_start(int h)
{
	for (int w = 0; w < 1 + BWORKERS; w++) {
		wk[h][w] = fork();
		if (wk[h][w] == 0) {
			if (w == 0)
				lim_worker(h);
			bh_worker(h);
		}
	}
}

static void workers_stop(void)
{
	atomic_store(&sh->stop, 1);
	for (int h = 0; h < HOSTS; h++)
		for (int w = 0; w < 1 + BWORKERS; w++) {
			if (wk[h][w] <= 0)
				continue;
			if (test_wait_pid(wk[h][w], 10000) < 0) {
				kill(wk[h][w], SIGKILL);
				waitpid(wk[h][w], NULL, 0);
			}
			wk[h][w] = 0;
		}
	atomic_store(&sh->stop, 0);
}

/* Host h of cluster cname with the password file pw, --cluster-hosts
 * hosts and the host id id (NULL: none, host<A + h>). */
static const char *url;		/* Redis through the delay relay (NULL: straight) */
static const char *hold = "3s"; /* --cluster-fallback-for */

static int host_start(int h, const char *pw, const char *hosts, const char *id)
{
	const char *more[10] = {"--cluster-fallback-for", hold, "--cluster-password-file", pw};
	int n = 4, v;
	resil_t *r;

	if (hosts) {
		more[n++] = "--cluster-hosts";
		more[n++] = hosts;
	}
	if (id) {
		more[n++] = "--cluster-host";
		more[n++] = id;
	}
	if (test_cluster_host(&hd[h], url ? url : rd.url, cname, h, more) < 0)
		return -1;
	v = resil_open(&r, hd[h].sock);
	if (v < 0)
		return v;
	if (v == 0)
		v = resil_define(r, "lim", LCONF);
	if (v == 0)
		v = resil_define(r, "bh", BCONF);
	resil_close(r);
	return v;
}

static bool leased(int h)
{
	return test_cluster_metric(&hd[h], "resil_cluster_lease_seconds", "lim") > 0 &&
	       test_cluster_metric(&hd[h], "resil_cluster_bulkhead_lease_seconds", "bh") > 0;
}

static uint32_t adm_span(int h, int from, int to)
{
	uint32_t n = 0;

	for (int b = from < 0 ? 0 : from; b < to && b < NBUCKETS; b++)
		n += atomic_load(&sh->adm[h][b]);
	return n;
}

static int peak_span(int h, int from, int to)
{
	int n = 0;

	for (int b = from < 0 ? 0 : from; b < to && b < NBUCKETS; b++)
		if (atomic_load(&sh->peak[h][b]) > n)
			n = atomic_load(&sh->peak[h][b]);
	return n;
}

/* The fleet's worst 1 s span (10 buckets) from bucket `from` to `to`,
 * against rate + the fleet's burst + a permit per host (each host's part
 * of the burst is at least one), and a permit per host for the bucket
 * taken after the decision (an admission decided at a span's start can
 * be counted in it and the span before). */
static void check_spans(const char *what, int from, int to, int hosts)
{
	uint32_t worst = 0, bound = RATE + BURST + 2 * hosts;
	int wb = from;

	for (int b = from; b + 10 <= to; b++) {
		uint32_t n = 0;

		for (int h = 0; h < HOSTS; h++)
			n += adm_span(h, b, b + 10);
		if (n > worst) {
			worst = n;
			wb = b;
		}
	}
	if (worst > bound)
		for (int b = wb; b < wb + 10; b++)
			fprintf(stderr, "  bucket %d: A %u B %u C %u\n", b - from,
				adm_span(0, b, b + 1), adm_span(1, b, b + 1),
				adm_span(2, b, b + 1));
	printf("%s: worst 1 s span %u admitted (bound %u), at most %d calls in flight "
	       "(bound %d)\n",
	       what, worst, bound, atomic_load(&sh->fleet_peak), MAX);
	CHECK(worst <= bound, "%s: %u admitted in a 1 s span, over the bound %u", what, worst,
	      bound);
	CHECK(atomic_load(&sh->fleet_peak) <= MAX, "%s: %d calls in flight, over %d", what,
	      atomic_load(&sh->fleet_peak), MAX);
}

static void phase_kill(void)
{
	int b0, bk, bend;

	for (int h = 0; h < 3; h++) {
		CHECK(host_start(h, pw_ok, NULL, NULL) == 0, "host %c starts", 'A' + h);
		workers_start(h);
	}
	for (int h = 0; h < 3; h++)
		CHECK(TEST_EVENTUALLY(leased(h)), "host %c holds both leases", 'A' + h);
	b0 = bucket_now();
	sleep_ns(1500 * 1000 * 1000LL);
	bk = bucket_now();
	printf("before: A %u B %u C %u admitted in the last second, C at most %d in flight\n",
	       adm_span(0, bk - 10, bk), adm_span(1, bk - 10, bk), adm_span(2, bk - 10, bk),
	       peak_span(2, bk - 10, bk));

	/* C's daemon killed: its workers go on, on their own */
	test_daemon_kill(&hd[2]);
	sleep_ns((HOLD_S + 2) * 1000 * 1000 * 1000LL);
	bend = bucket_now();
	printf("C killed at bucket %d: C %u admitted in the first second after, %u in the "
	       "last; A + B %u in the last\n",
	       bk, adm_span(2, bk + 2, bk + 12), adm_span(2, bend - 10, bend),
	       adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend));
	/* C's workers keep C's last share while the fleet holds it */
	CHECK(adm_span(2, bk + 2, bk + 12) > 0, "C's workers fall back on its last share");
	/* past --cluster-fallback-for (+ 1 s: a tick, an exchange): C's
	 * fallback has ended; the fleet keeps the rate / 3 C's daemon
	 * reported (what a C cut off but alive would run on) for five holds
	 * after its last report, so A and B share two thirds meanwhile */
	CHECK(adm_span(2, bend - 10, bend) == 0,
	      "C's workers admit nothing once its fallback has ended");
	CHECK(peak_span(2, bend - 10, bend) == 0,
	      "C's workers hold no slot once its fallback has ended (%d)",
	      peak_span(2, bend - 10, bend));
	CHECK(adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend) >=
		      2 * RATE / 3 * 85 / 100 &&
		  adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend) <=
		      2 * RATE / 3 + 2 * BURST,
	      "A and B share the two thirds the fleet does not keep for C (%u)",
	      adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend));
	check_spans("a host killed", b0, bend, 3);
}

static void phase_never(void)
{
	struct test_daemon *d = &hd[3];
	resil_policy_t *pl, *pb;
	resil_permit_t pm;
	resil_t *r;

	CHECK(host_start(3, pw_bad, NULL, NULL) == 0, "host D (a wrong password) starts");
	CHECK(TEST_EVENTUALLY(test_log_count(d, "refused AUTH") > 0), "D: refused AUTH, logged");
	CHECK(TEST_EVENTUALLY(test_log_count(d, "no fleet size known") >= 2),
	      "D: no fleet size known, logged for both policies");
	CHECK(resil_open(&r, d->sock) == 0 && resil_policy(r, "lim", &pl) == 0 &&
		  resil_policy(r, "bh", &pb) == 0,
	      "D: open");
	CHECK(resil_acquire(pl, &pm) == RESIL_REJECT_LIMITED, "D: the limiter rejects");
	CHECK(resil_acquire(pb, &pm) == RESIL_REJECT_FULL, "D: the bulkhead rejects");
	CHECK(test_cluster_metric(d, "resil_cluster_fallback_rejecting", "lim") == 1,
	      "D: resil_cluster_fallback_rejecting says so");
	resil_close(r);
}

/* A new fleet under a new cluster name, the counts from zero. */
static void fleet_new(const char *tag)
{
	snprintf(cname, sizeof(cname), "%s%d", tag, (int)getpid());
	memset(sh->adm, 0, sizeof(sh->adm));
	memset(sh->peak, 0, sizeof(sh->peak));
	atomic_store(&sh->fleet_peak, 0);
	sh->t0 = test_mono_ns();
}

/* Does `resilctl status` on host h print every one of the NULL-ended
 * strings? */
/* host h's admissions in the last whole second of buckets */
static uint32_t last_second(int h)
{
	int b = bucket_now();

	return adm_span(h, b - 11, b - 1);
}

static bool status_says(int h, ...)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[h].sock, "status", NULL};
	static char out[1 << 16];
	const char *want;
	bool ok = true;
	va_list ap;

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return false;
	va_start(ap, h);
	while ((want = va_arg(ap, const char *)))
		if (!strstr(out, want)) {
			fprintf(stderr, "status of host %c lacks \"%s\":\n%s", 'A' + h, want, out);
			ok = false;
		}
	va_end(ap);
	return ok;
}

static void phase_samehost(void)
{
	int b0, bend;

	fleet_new("sh");
	CHECK(host_start(0, pw_ok, NULL, NULL) == 0, "A starts");
	CHECK(host_start(1, pw_ok, NULL, NULL) == 0, "B starts");
	CHECK(host_start(2, pw_ok, NULL, "hostB") == 0, "another B starts");
	for (int h = 0; h < 3; h++)
		workers_start(h);
	for (int h = 0; h < 3; h++)
		CHECK(TEST_EVENTUALLY(leased(h)), "host %d holds both leases", h);
	for (int h = 1; h < 3; h++) {
		CHECK(TEST_EVENTUALLY(test_log_count(&hd[h], "two daemons under one host id") > 0),
		      "daemon %d of host B logs the other", h);
		CHECK(test_cluster_metric(&hd[h], "resil_cluster_duplicate_runs", NULL) == 1,
		      "daemon %d of host B: resil_cluster_duplicate_runs 1", h);
		CHECK(status_says(h, "DUPLICATE HOST ID: 1 other daemon runs as host hostB",
				  "3 hosts seen", NULL),
		      "daemon %d of host B: status says so", h);
	}
	CHECK(test_cluster_metric(&hd[0], "resil_cluster_duplicate_runs", NULL) == 0,
	      "A: no duplicate");
	CHECK(TEST_EVENTUALLY(test_cluster_metric(&hd[0], "resil_cluster_hosts", "lim") == 3),
	      "A's lease counts three hosts");
	b0 = bucket_now();
	sleep_ns(3000 * 1000 * 1000LL);
	bend = bucket_now();
	printf("two daemons as host B: A %u B %u B' %u in the last second\n",
	       adm_span(0, bend - 10, bend), adm_span(1, bend - 10, bend),
	       adm_span(2, bend - 10, bend));
	for (int h = 0; h < 3; h++)
		CHECK(adm_span(h, bend - 10, bend) >= RATE / 3 * 80 / 100,
		      "daemon %d gets its third", h);
	check_spans("two daemons under one host id", b0, bend, 3);
}

/* A relay to Redis that holds every byte delay_ms each way, listening at
 * <name>.sock in Redis' directory; its URL into u. */
static pid_t relay_start(const char *name, int delay_ms, char *u, size_t ulen)
{
	char sock[PATH_MAX + 32];
	pid_t pid;

	snprintf(sock, sizeof(sock), "%s/%s.sock", rd.dir, name);
	snprintf(u, ulen, "unix:%s", sock);
	pid = test_delay_proxy_start(sock, rd.sock, delay_ms);
	CHECK(pid > 0, "the %s relay starts", name);
	return pid;
}

static void phase_far(void)
{
	char u[PATH_MAX + 64];
	double exp0[3], exp1[3];
	pid_t proxy = relay_start("far", 100, u, sizeof(u));
	int b0, bend;

	if (proxy <= 0)
		return;
	url = u;
	fleet_new("far");
	/* leases stop at half of --cluster-fallback-for: 10 s leaves room
	 * for the round trip a loaded machine stretches past the relay's
	 * 200 ms (measured up to 310 ms), which is what "fits" must mean */
	hold = "10s";
	for (int h = 0; h < 3; h++) {
		CHECK(host_start(h, pw_ok, NULL, NULL) == 0, "host %c starts, 200 ms from Redis",
		      'A' + h);
		workers_start(h);
	}
	hold = "3s";
	for (int h = 0; h < 3; h++)
		CHECK(TEST_EVENTUALLY(leased(h)), "host %c holds both leases", 'A' + h);
	/* the leases have grown to the round trip once a round measured it */
	for (int h = 0; h < 3; h++)
		CHECK(
		    TEST_EVENTUALLY(test_cluster_metric(&hd[h], "resil_cluster_round_trip_seconds",
							NULL) >= 0.19),
		    "host %c measures the round trip", 'A' + h);
	sleep_ns(500 * 1000 * 1000LL);
	for (int h = 0; h < 3; h++)
		exp0[h] = test_cluster_metric(&hd[h],
					      "resil_cluster_lease_expiries_connected_total", NULL);
	b0 = bucket_now();
	sleep_ns(3000 * 1000 * 1000LL);
	bend = bucket_now();
	for (int h = 0; h < 3; h++) {
		double rtt = test_cluster_metric(&hd[h], "resil_cluster_round_trip_seconds", NULL),
		       len =
			   test_cluster_metric(&hd[h], "resil_cluster_lease_length_seconds", NULL);

		exp1[h] = test_cluster_metric(&hd[h],
					      "resil_cluster_lease_expiries_connected_total", NULL);
		printf("200 ms from Redis, host %c: round trip %.0f ms, leases of %.0f ms, %u "
		       "admitted in the last second, %.0f leases ran out while connected\n",
		       'A' + h, rtt * 1000, len * 1000, adm_span(h, bend - 10, bend),
		       exp1[h] - exp0[h]);
		CHECK(len >= 2 * rtt + 0.1, "host %c: leases cover the round trip twice", 'A' + h);
		CHECK(exp1[h] == exp0[h], "host %c: %.0f leases ran out while connected", 'A' + h,
		      exp1[h] - exp0[h]);
		CHECK(test_cluster_metric(&hd[h], "resil_cluster_round_trip_too_long", NULL) == 0,
		      "host %c: the round trip fits", 'A' + h);
	}
	/* each host admits its third over a whole second (eventually: a
	 * loaded machine starves the workers, not the leases) */
	for (int h = 0; h < 3; h++)
		CHECK(TEST_EVENTUALLY(last_second(h) >= RATE / 3 * 80 / 100),
		      "host %c: its third of the rate, on its lease", 'A' + h);
	CHECK(status_says(0, "round trip ", "leases of ", "0 ran out while connected", NULL),
	      "status gives the round trip and the leases");
	check_spans("200 ms from Redis", b0, bend, 3);
	workers_stop();

	/* a host whose fallback is held 1 s: half of it cannot cover a lease
	 * that fits 200 ms: an error, said once, in status and a metric */
	hold = "1s";
	CHECK(host_start(3, pw_ok, NULL, "hostD") == 0, "D starts, --cluster-fallback-for 1s");
	hold = "3s";
	CHECK(TEST_EVENTUALLY(test_log_count(&hd[3], "the round trip to Redis takes") == 1),
	      "D: the round trip too long for its leases, logged once");
	CHECK(test_cluster_metric(&hd[3], "resil_cluster_round_trip_too_long", NULL) == 1,
	      "D: resil_cluster_round_trip_too_long 1");
	CHECK(status_says(3, "ROUND TRIP TOO LONG", NULL), "D: status says so");
	{
		int st = test_daemon_stop(&hd[3]);

		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "D exits cleanly");
		if (!test_failures)
			test_daemon_fini(&hd[3]);
	}
	{
		resil_t *cl[HOSTS] = {0};

		test_cluster_hosts_stop(hd, cl, 3);
	}
	kill(proxy, SIGKILL);
	waitpid(proxy, NULL, 0);
	url = NULL;
}

/* C reaches Redis through a relay, A and B straight, no --cluster-hosts;
 * the relay killed: C's daemon lives on, cut off. */
static void phase_cutoff(void)
{
	char u[PATH_MAX + 64];
	pid_t relay = relay_start("cut", 0, u, sizeof(u));
	int b0, bc, bend;

	if (relay <= 0)
		return;
	fleet_new("fc");
	for (int h = 0; h < 3; h++) {
		url = h == 2 ? u : NULL;
		CHECK(host_start(h, pw_ok, NULL, NULL) == 0, "host %c starts", 'A' + h);
		workers_start(h);
	}
	url = NULL;
	/* C cut once it holds its third and the fleet keeps a third for it
	 * (an answered report carried the rate / 3 and the 9 / 3 slots it
	 * would fall back on: before that, C falls back on nothing) */
	for (int h = 0; h < 3; h++)
		CHECK(TEST_EVENTUALLY(leased(h) &&
				      test_cluster_metric(&hd[h], "resil_cluster_share", "lim") >=
					  RATE / 3 * 0.9 &&
				      test_cluster_metric(&hd[h], "resil_cluster_hosts", "lim") ==
					  3 &&
				      test_cluster_metric(&hd[h], "resil_cluster_fallback_kept",
							  "policy=\"lim\"") >= RATE / 3 - 0.5 &&
				      test_cluster_metric(&hd[h], "resil_cluster_fallback_kept",
							  "policy=\"bh\"") == MAX / 3),
		      "host %c holds its third of the rate, three hosts seen, the fleet keeps "
		      "its third",
		      'A' + h);
	b0 = bucket_now();
	kill(relay, SIGKILL);
	waitpid(relay, NULL, 0);
	bc = bucket_now();
	/* past --cluster-fallback-for, and a second more for the tiers to
	 * have moved: C on rate / 3, which the fleet still keeps for it */
	sleep_ns((HOLD_S + 3) * 1000 * 1000 * 1000LL);
	bend = bucket_now();
	printf("C cut off from Redis at bucket %d (no --cluster-hosts): C %u, A + B %u in the "
	       "last second\n",
	       bc, adm_span(2, bend - 10, bend),
	       adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend));
	CHECK(TEST_EVENTUALLY(test_log_count(&hd[2], "no longer holds this host's share") > 0),
	      "C says it fell back on the fleet's / 3");
	CHECK(adm_span(2, bend - 10, bend) > 0 && adm_span(2, bend - 10, bend) <= RATE / 3 + BURST,
	      "C, cut off, runs on rate / 3 (%u)", adm_span(2, bend - 10, bend));
	CHECK(adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend) <=
		  2 * RATE / 3 + 2 * BURST,
	      "A and B lease only their two thirds while the fleet keeps C's (%u)",
	      adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend));
	check_spans("a host cut off past --cluster-fallback-for, no --cluster-hosts", b0, bend, 3);
}

/* C's relay cut right after C's first answer: the request that carried
 * the rate / 3 and 9 / 3 slots C would fall back on is still on its way
 * (the relay holds every byte 300 ms each way), so the fleet keeps
 * nothing for C. Past --cluster-fallback-for, C falls back on nothing:
 * A and B take the whole rate and the whole bulkhead. */
static void phase_cutoff_early(void)
{
	char u[PATH_MAX + 64];
	pid_t relay = relay_start("early", 300, u, sizeof(u));
	double kept_lim, kept_bh;
	int b0, b1, bend;

	if (relay <= 0)
		return;
	fleet_new("fe");
	for (int h = 0; h < 2; h++) {
		CHECK(host_start(h, pw_ok, NULL, NULL) == 0, "host %c starts", 'A' + h);
		workers_start(h);
	}
	for (int h = 0; h < 2; h++)
		CHECK(TEST_EVENTUALLY(leased(h)), "host %c holds both leases", 'A' + h);
	url = u;
	CHECK(host_start(2, pw_ok, NULL, NULL) == 0, "host C starts, 600 ms from Redis");
	url = NULL;
	workers_start(2);
	CHECK(TEST_EVENTUALLY(test_cluster_metric(&hd[2], "resil_cluster_hosts", "lim") == 3),
	      "C's first answer counts three hosts");
	b0 = bucket_now();
	kill(relay, SIGKILL);
	waitpid(relay, NULL, 0);
	kept_lim = test_cluster_metric(&hd[2], "resil_cluster_fallback_kept", "policy=\"lim\"");
	kept_bh = test_cluster_metric(&hd[2], "resil_cluster_fallback_kept", "policy=\"bh\"");
	printf("C cut off after its first answer: the fleet keeps %.1f/s and %.0f slots for it\n",
	       kept_lim, kept_bh);
	if (kept_lim == 0 && kept_bh == 0) {
		CHECK(
		    TEST_EVENTUALLY(test_cluster_metric(&hd[2], "resil_cluster_fallback_rejecting",
							"policy=\"lim\"") == 1 &&
				    test_cluster_metric(&hd[2], "resil_cluster_fallback_rejecting",
							"policy=\"bh\"") == 1),
		    "C, cut off before the fleet kept anything for it, falls back on nothing");
		CHECK(TEST_EVENTUALLY(test_log_count(&hd[2], "the fleet keeps nothing for this "
							     "host") >= 2),
		      "C says so for both policies");
		b1 = bucket_now();
		sleep_ns(1000 * 1000 * 1000LL);
		bend = bucket_now();
		printf("then C %u, A + B %u in a second\n", adm_span(2, b1 + 1, bend),
		       adm_span(0, b1 + 1, bend) + adm_span(1, b1 + 1, bend));
		CHECK(adm_span(2, b1 + 1, bend) == 0, "C admits nothing (%u)",
		      adm_span(2, b1 + 1, bend));
	} else {
		/* the answer outran the cut: C on what the fleet keeps */
		sleep_ns((HOLD_S + 2) * 1000 * 1000 * 1000LL);
		bend = bucket_now();
	}
	check_spans("a host cut off before the fleet kept its third", b0, bend, 3);
}

static void phase_strict(void)
{
	int b0, bend;

	fleet_new("fs");
	CHECK(host_start(0, pw_ok, "3", NULL) == 0, "A --cluster-hosts 3 starts");
	CHECK(host_start(1, pw_ok, "3", NULL) == 0, "B --cluster-hosts 3 starts");
	CHECK(host_start(2, pw_bad, "3", NULL) == 0,
	      "C --cluster-hosts 3, a wrong password, starts");
	for (int h = 0; h < 3; h++)
		workers_start(h);
	CHECK(TEST_EVENTUALLY(leased(0) && leased(1)), "A and B hold their leases");
	b0 = bucket_now();
	sleep_ns(3000 * 1000 * 1000LL);
	bend = bucket_now();
	printf("--cluster-hosts 3, C never connected: A %u B %u C %u in the last second, "
	       "C at most %d in flight\n",
	       adm_span(0, bend - 10, bend), adm_span(1, bend - 10, bend),
	       adm_span(2, bend - 10, bend), peak_span(2, b0, bend));
	CHECK(adm_span(2, bend - 10, bend) > 0 && adm_span(2, bend - 10, bend) <= RATE / 3 + BURST,
	      "C runs on rate / 3");
	CHECK(peak_span(2, b0, bend) <= MAX / 3, "C holds at most 9 / 3 slots");
	CHECK(adm_span(0, bend - 10, bend) + adm_span(1, bend - 10, bend) <=
		  2 * RATE / 3 + 2 * BURST,
	      "A and B lease only their two thirds");
	check_spans("--cluster-hosts 3, a host never connected", b0, bend, 3);
}

int main(void)
{
	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	if (test_redis_init(&rd, "clbo") < 0 || test_redis_start(&rd, "fleet-password") < 0 ||
	    test_cluster_pwfile(&rd, "pw", "fleet-password", pw_ok, sizeof(pw_ok)) < 0 ||
	    test_cluster_pwfile(&rd, "bad", "not-the-password", pw_bad, sizeof(pw_bad)) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "fb%d", (int)getpid());
	sh->t0 = test_mono_ns();

	phase_kill();
	phase_never();
	workers_stop();
	for (int h = 0; h < HOSTS; h++) {
		if (h != 2 && hd[h].pid) {
			int st = test_daemon_stop(&hd[h]);

			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "host %c exits cleanly",
			      'A' + h);
		}
		if (test_failures)
			fprintf(stderr, "--- host %c log: %s\n", 'A' + h, hd[h].log);
		else
			test_daemon_fini(&hd[h]);
	}
	if (!test_failures) {
		resil_t *cl[HOSTS] = {0};

		phase_strict();
		workers_stop();
		test_cluster_hosts_stop(hd, cl, 3);
	}
	if (!test_failures) {
		resil_t *cl[HOSTS] = {0};

		phase_samehost();
		workers_stop();
		test_cluster_hosts_stop(hd, cl, 3);
	}
	if (!test_failures) {
		resil_t *cl[HOSTS] = {0};

		phase_cutoff();
		workers_stop();
		test_cluster_hosts_stop(hd, cl, 3);
	}
	if (!test_failures) {
		resil_t *cl[HOSTS] = {0};

		phase_cutoff_early();
		workers_stop();
		test_cluster_hosts_stop(hd, cl, 3);
	}
	if (!test_failures)
		phase_far();
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

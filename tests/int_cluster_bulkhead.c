/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_bulkhead.c - policy.scope = global for a bulkhead: at most
 * bulkhead.max calls in flight across hosts, through a real redis-server
 * and three resild instances as hosts, each with its own worker
 * processes.
 *
 * A bulkhead of 10 over hosts A, B, C, each with 8 workers that hold a
 * permit 5 ms per call. Every worker counts its calls in flight in shared
 * memory, between its admission and its release (so the counts never
 * exceed the permits held), and keeps the fleet's and its host's peaks.
 * Demand shifts: all hosts at once, then each host alone (its demand is
 * served: 8 in flight while the others are idle), then A's daemon
 * SIGSTOPped past its lease while B wants everything: A's workers fall
 * back on their own (--cluster-fallback reject: nothing admitted) and B
 * gets A's slots once Redis has forgotten A's lease. Never more than 10 in
 * flight fleet-wide, all along. `resilctl status` and `show` give the
 * bulkhead's lease.
 */
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

#define HOSTS	3
#define WORKERS 8
#define MAX	10
#define HOLD_MS 5
#define CONF	"policy.scope = global; bulkhead.max = 10"

struct shared {
	_Atomic int stop;
	_Atomic int want[HOSTS]; /* workers of the host that call */
	_Atomic int fleet;	 /* calls in flight, all hosts */
	_Atomic int fleet_peak;
	_Atomic int cur[HOSTS];
	_Atomic int peak[HOSTS];
	_Atomic uint64_t adm[HOSTS];
	_Atomic uint64_t rej[HOSTS];
};

static struct shared *sh;
static struct test_redis rd;
static struct test_daemon hd[HOSTS];
static pid_t workers[HOSTS][WORKERS];

static void raise_to(_Atomic int *peak, int v)
{
	int p = atomic_load(peak);

	while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
		;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static void worker(int h, int w)
{
	resil_policy_t *p;
	resil_t *r;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "b", &p) < 0)
		_exit(2);
	while (!atomic_load(&sh->stop)) {
		resil_permit_t pm;
		int v;

		if (w >= atomic_load(&sh->want[h])) {
			sleep_ms(2);
			continue;
		}
		v = resil_acquire(p, &pm);
		if (v == RESIL_REJECT_FULL) {
			atomic_fetch_add(&sh->rej[h], 1);
			sleep_ms(1);
			continue;
		}
		if (v != 0)
			_exit(3);
		/* counted from the admission to just before the release */
		raise_to(&sh->fleet_peak, atomic_fetch_add(&sh->fleet, 1) + 1);
		raise_to(&sh->peak[h], atomic_fetch_add(&sh->cur[h], 1) + 1);
		atomic_fetch_add(&sh->adm[h], 1);
		sleep_ms(HOLD_MS);
		atomic_fetch_sub(&sh->cur[h], 1);
		atomic_fetch_sub(&sh->fleet, 1);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	resil_close(r);
	_exit(0);
}

static void workers_stop(void)
{
	atomic_store(&sh->stop, 1);
	for (int h = 0; h < HOSTS; h++)
		for (int w = 0; w < WORKERS; w++) {
			if (workers[h][w] <= 0)
				continue;
			if (test_wait_pid(workers[h][w], 10000) < 0) {
				kill(workers[h][w], SIGKILL);
				waitpid(workers[h][w], NULL, 0);
			}
			workers[h][w] = 0;
		}
}

static void cleanup(void)
{
	workers_stop();
	for (int h = 0; h < HOSTS; h++) {
		if (hd[h].pid)
			kill(hd[h].pid, SIGCONT);
		test_daemon_fini(&hd[h]);
	}
	test_redis_kill(&rd);
}

static int host_start(int h)
{
	char name[64];
	const char *more[] = {"--cluster-fallback", "reject", NULL};
	resil_t *r;
	int v;

	snprintf(name, sizeof(name), "b%d", (int)getpid());
	if (test_cluster_host(&hd[h], rd.url, name, h, more) < 0)
		return -1;
	v = resil_open(&r, hd[h].sock);
	if (v < 0)
		return v;
	v = resil_define(r, "b", CONF);
	resil_close(r);
	return v;
}

/* A metric of resilctl metrics on host h (-1e9 if absent). */
static double metric(int h, const char *name)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[h].sock, "metrics", NULL};
	static char out[65536];
	char *at;

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return -1e9;
	for (at = out; (at = strstr(at, name)); at++)
		if ((at == out || at[-1] == '\n') &&
		    (at[strlen(name)] == ' ' || at[strlen(name)] == '{'))
			return strtod(strchr(at, ' ') + 1, NULL);
	return -1e9;
}

/* resilctl ARGS on host h says every one of the NULL-ended strings */
static bool ctl_says(int h, const char *const *args, ...)
{
	const char *argv[8] = {RESILCTL_PATH, "--socket", hd[h].sock};
	static char out[65536];
	const char *want;
	bool ok = true;
	va_list ap;
	int n = 3;

	for (int i = 0; args[i] && n < 7; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (test_run(argv, NULL, out, sizeof(out)) != 0) {
		fprintf(stderr, "resilctl %s failed:\n%s\n", args[0], out);
		return false;
	}
	va_start(ap, args);
	while ((want = va_arg(ap, const char *)))
		if (!strstr(out, want)) {
			fprintf(stderr, "resilctl %s: no \"%s\" in:\n%s\n", args[0], want, out);
			ok = false;
		}
	va_end(ap);
	return ok;
}

static void want(int a, int b, int c)
{
	atomic_store(&sh->want[0], a);
	atomic_store(&sh->want[1], b);
	atomic_store(&sh->want[2], c);
}

/* Host h alone has demand: eventually all its 8 workers in flight. */
static void alone(int h)
{
	want(h == 0 ? WORKERS : 0, h == 1 ? WORKERS : 0, h == 2 ? WORKERS : 0);
	atomic_store(&sh->peak[h], 0);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->peak[h]) >= WORKERS),
	      "host %d alone: its %d workers in flight at once (peak %d)", h, WORKERS,
	      atomic_load(&sh->peak[h]));
	printf("host %c alone: peak %d in flight (share %.0f)\n", 'A' + h,
	       atomic_load(&sh->peak[h]), metric(h, "resil_cluster_bulkhead_share"));
}

int main(void)
{
	uint64_t a0, b0;

	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	if (test_redis_init(&rd, "cbulk") < 0)
		return 1;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || test_redis_start(&rd, NULL) < 0)
		return 1;
	for (int h = 0; h < HOSTS; h++)
		if (host_start(h) < 0) {
			fprintf(stderr, "host %d did not start\n", h);
			cleanup();
			return 1;
		}
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(metric(h, "resil_cluster_bulkhead_lease_seconds") > 0),
		      "host %d holds a bulkhead lease", h);
	for (int h = 0; h < HOSTS; h++)
		for (int w = 0; w < WORKERS; w++)
			if ((workers[h][w] = fork()) == 0)
				worker(h, w);

	/* 1: every host wants 8: 24 callers for 10 slots */
	want(WORKERS, WORKERS, WORKERS);
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(atomic_load(&sh->adm[h]) > 100),
		      "host %d admits calls while all want", h);
	sleep_ms(2000);
	printf("all: admitted A %llu B %llu C %llu, rejected %llu %llu %llu, fleet peak %d\n",
	       (unsigned long long)sh->adm[0], (unsigned long long)sh->adm[1],
	       (unsigned long long)sh->adm[2], (unsigned long long)sh->rej[0],
	       (unsigned long long)sh->rej[1], (unsigned long long)sh->rej[2],
	       atomic_load(&sh->fleet_peak));
	{
		const char *st[] = {"status", NULL}, *shw[] = {"show", "b", NULL};

		CHECK(ctl_says(0, st, "bulkhead ", " slots of 10, lease for ", NULL),
		      "status: the bulkhead's lease");
		CHECK(ctl_says(1, shw, "bulkhead  ", " of the fleet's 10 slots, ", "parked", NULL),
		      "show: the bulkhead's lease");
	}

	/* 2: each host alone is served */
	for (int h = 0; h < HOSTS; h++)
		alone(h);

	/* 3: A alone, then A's daemon stopped past its lease while B wants
	 * everything: A's workers fall back (reject), B gets A's slots */
	alone(0);
	kill(hd[0].pid, SIGSTOP);
	want(WORKERS, WORKERS, 0);
	atomic_store(&sh->peak[1], 0);
	sleep_ms(1000); /* the lease (200 ms here, 300 in Redis) is long gone */
	a0 = atomic_load(&sh->adm[0]);
	b0 = atomic_load(&sh->adm[1]);
	sleep_ms(1000);
	CHECK(atomic_load(&sh->adm[0]) == a0,
	      "A's workers fall back while A's daemon is stopped (%llu admitted in 1 s)",
	      (unsigned long long)(atomic_load(&sh->adm[0]) - a0));
	CHECK(atomic_load(&sh->adm[1]) > b0, "B admits while A's daemon is stopped");
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->peak[1]) >= WORKERS),
	      "B gets A's slots once A's lease is gone (peak %d)", atomic_load(&sh->peak[1]));
	printf("A stopped: A admitted %llu in 1 s, B peak %d\n",
	       (unsigned long long)(atomic_load(&sh->adm[0]) - a0), atomic_load(&sh->peak[1]));
	kill(hd[0].pid, SIGCONT);
	a0 = atomic_load(&sh->adm[0]);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->adm[0]) > a0 + 50), "A admits again after SIGCONT");

	workers_stop();
	printf("fleet: at most %d calls in flight at once (bulkhead.max %d)\n",
	       atomic_load(&sh->fleet_peak), MAX);
	CHECK(atomic_load(&sh->fleet_peak) <= MAX, "never more than %d in flight fleet-wide: %d",
	      MAX, atomic_load(&sh->fleet_peak));
	cleanup();
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

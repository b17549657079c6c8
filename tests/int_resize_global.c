/* SPDX-License-Identifier: MIT */
/*
 * int_resize_global.c - a restart with new sizes keeps a policy.scope =
 * global bulkhead within the fleet's bound while calls still hold permits
 * in the old segments.
 *
 * A real redis-server and two hosts of a bulkhead.max = 10 fleet
 * (--cluster-fallback share, the default): A, run as a systemd unit with
 * its fd store (fdstore_util.c, its cluster settings in resild.conf), B a
 * plain resild. A's holders (3 processes)
 * take 2 permits each and keep them; A's 8 workers and B's 8 decide all
 * along, holding each permit 5 ms. Every process counts its calls in
 * flight in shared memory from its admission to just before its release
 * (the holders' 6 permits included), and the fleet's peak is kept.
 *
 *   1. A restarts (Restart=always after a crash) with a larger
 *      state_size: the policy moves into new segments while the holders'
 *      6 permits stay in the old ones. A keeps its run in the fleet (one
 *      field of A in Redis, not the old run's share held beside the new
 *      one's for --cluster-fallback-for). B's workers wait meanwhile,
 *      then both hosts want every slot: never more than 10 in flight;
 *   2. at quiescence, the slots the two hosts admit, kept, plus the 6
 *      held are at most 10;
 *   3. a holder killed holds nothing (A alone gets 10 - 4 for its
 *      workers), and once the others release theirs the old segments
 *      hold no permit (the log says so) and A alone gets 8 in flight.
 * Never more than 10 in flight fleet-wide, and A's workers see no error.
 * Every wait is "eventually, within 10 s".
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "fdstore_util.h"

#define HOSTS	2
#define WORKERS 8
#define HOLDERS 3
#define EACH	2 /* permits a holder keeps */
#define HELD	(HOLDERS * EACH)
#define MAX	10
#define HOLD_MS 5

struct shared {
	_Atomic int stop;
	_Atomic int want[HOSTS]; /* workers of the host that call */
	_Atomic int fleet;	 /* calls in flight, all hosts, holders included */
	_Atomic int fleet_peak;
	_Atomic int cur[HOSTS]; /* the workers' calls in flight */
	_Atomic int peak[HOSTS];
	_Atomic uint64_t adm[HOSTS];
	_Atomic uint64_t errors[HOSTS];
	_Atomic int holding[HOLDERS]; /* permits each holder has */
	_Atomic int release[HOLDERS]; /* the test asks it to release */
};

static struct shared *sh;
static struct test_redis rd;
static struct test_unit unit; /* host A */
static struct test_daemon hb; /* host B */
static pid_t workers[HOSTS][WORKERS], holders[HOLDERS];

static const char *sock_of(int h)
{
	return h == 0 ? unit.d.sock : hb.sock;
}

static void raise_to(_Atomic int *peak, int v)
{
	int p = atomic_load(peak);

	while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
		;
}

static void in_flight(int h)
{
	raise_to(&sh->fleet_peak, atomic_fetch_add(&sh->fleet, 1) + 1);
	if (h >= 0)
		raise_to(&sh->peak[h], atomic_fetch_add(&sh->cur[h], 1) + 1);
}

static int open_b(int h, resil_t **r, resil_policy_t **p)
{
	/* a first connection closed unanswered by a daemon that stops
	 * happens: opened again, within 10 s */
	for (int i = 0; resil_open(r, sock_of(h)) != 0; i++) {
		if (i == 100)
			return -1;
		test_sleep_ms(100);
	}
	return resil_policy(*r, "b", p);
}

static void worker(int h, int w)
{
	resil_policy_t *p;
	resil_t *r;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (open_b(h, &r, &p) < 0)
		_exit(2);
	while (!atomic_load(&sh->stop)) {
		resil_permit_t pm;
		int v;

		if (w >= atomic_load(&sh->want[h])) {
			test_sleep_ms(2);
			continue;
		}
		v = resil_acquire(p, &pm);
		if (v < 0)
			atomic_fetch_add(&sh->errors[h], 1);
		if (v != RESIL_ADMIT) {
			test_sleep_ms(1);
			continue;
		}
		in_flight(h);
		atomic_fetch_add(&sh->adm[h], 1);
		test_sleep_ms(HOLD_MS);
		atomic_fetch_sub(&sh->cur[h], 1);
		atomic_fetch_sub(&sh->fleet, 1);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	resil_close(r);
	_exit(0);
}

/* Takes EACH permits on A and keeps them until asked (across A's
 * restart: they are released into the old segments). */
static void holder(int i)
{
	resil_permit_t pm[EACH];
	resil_policy_t *p;
	resil_t *r;
	int n = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (open_b(0, &r, &p) < 0)
		_exit(2);
	for (int tries = 0; n < EACH; tries++) {
		int v = resil_acquire(p, &pm[n]);

		if (v == RESIL_ADMIT) {
			in_flight(-1);
			atomic_store(&sh->holding[i], ++n);
		} else if (v < 0 || tries == 10000) {
			_exit(3);
		} else {
			test_sleep_ms(1);
		}
	}
	while (!atomic_load(&sh->release[i]))
		test_sleep_ms(2);
	for (int k = 0; k < EACH; k++) {
		atomic_fetch_sub(&sh->fleet, 1);
		resil_release(p, &pm[k], RESIL_SUCCESS);
	}
	atomic_store(&sh->holding[i], 0);
	while (!atomic_load(&sh->stop))
		test_sleep_ms(2);
	resil_close(r);
	_exit(0);
}

static void reap(pid_t *pid)
{
	if (*pid <= 0)
		return;
	if (test_wait_pid(*pid, 10000) < 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
	}
	*pid = 0;
}

static void children_stop(void)
{
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < HOLDERS; i++)
		atomic_store(&sh->release[i], 1);
	for (int h = 0; h < HOSTS; h++)
		for (int w = 0; w < WORKERS; w++)
			reap(&workers[h][w]);
	for (int i = 0; i < HOLDERS; i++)
		reap(&holders[i]);
}

/* dir/name, written or the test fails */
#define write_file(...) CHECK(test_write_file(__VA_ARGS__) == 0, "a configuration file written")

/* A's settings: its cluster, and the state segment's size */
static void a_settings(const char *cname, const char *state_size)
{
	write_file(unit.d.confdir, "resild.conf",
		   "[daemon]\nstate_size = %s\n"
		   "[cluster]\nredis = %s\nhost = hostA\nname = %s\n",
		   state_size, rd.url, cname);
}

/* A's fields in the bulkhead's hash (one per run); *fb: the largest
 * fallback they report (0: none) */
static int a_runs(const char *cname, long *fb)
{
	redisContext *c = test_redis_conn(&rd);
	redisReply *r = c ? redisCommand(c, "HGETALL %s:{b}:bulkhead", cname) : NULL;
	int n = 0;

	*fb = 0;
	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		const char *f;

		if (strncmp(r->element[i]->str, "hostA#", 6) != 0)
			continue;
		n++;
		f = strstr(r->element[i + 1]->str, "\"f\":");
		if (f && atol(f + 4) > *fb)
			*fb = atol(f + 4);
	}
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return n;
}

static double metric(int h, const char *name)
{
	double v = test_cluster_metric(h == 0 ? &unit.d : &hb, name, NULL);

	return isnan(v) ? -1e9 : v;
}

static void want(int a, int b)
{
	atomic_store(&sh->want[0], a);
	atomic_store(&sh->want[1], b);
}

/* the workers' calls have all ended: only the holders' are in flight */
static bool quiet(int held)
{
	return atomic_load(&sh->cur[0]) == 0 && atomic_load(&sh->cur[1]) == 0 &&
	       atomic_load(&sh->fleet) == held;
}

/* permits admitted on host h now, kept in pm[] */
static int admit_all(resil_policy_t *p, resil_permit_t *pm, int max)
{
	int n = 0;

	while (n < max && resil_acquire(p, &pm[n]) == RESIL_ADMIT)
		n++;
	return n;
}

static void release_all(resil_policy_t *p, resil_permit_t *pm, int n)
{
	for (int i = 0; i < n; i++)
		resil_release(p, &pm[i], RESIL_SUCCESS);
}

static int held_now(void)
{
	int n = 0;

	for (int i = 0; i < HOLDERS; i++)
		n += atomic_load(&sh->holding[i]);
	return n;
}

int main(void)
{
	char cname[64];
	resil_permit_t pa[MAX + 1], pb[MAX + 1];
	resil_policy_t *qa, *qb;
	resil_t *ra, *rb;
	uint64_t b0;
	long fb;
	int na, nb, st;

	if (geteuid() != 0) {
		printf("not root: skipped\n");
		return TEST_SKIP;
	}
	if (!test_redis_installed()) {
		fprintf(stderr, "redis-server not installed: skipped\n");
		return TEST_SKIP;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || test_redis_init(&rd, "rsglob") < 0 ||
	    test_redis_start(&rd, NULL) < 0 || test_unit_init(&unit) < 0)
		return 1;
	snprintf(cname, sizeof(cname), "rg%d", (int)getpid());
	a_settings(cname, "8M");
	write_file(unit.d.confdir, "p.conf",
		   "[policy b]\npolicy.scope = global\nbulkhead.max = %d\n", MAX);
	if (test_unit_start(&unit, false) < 0 ||
	    test_cluster_host(&hb, rd.url, cname, 1, NULL) < 0 || resil_open(&rb, hb.sock) < 0 ||
	    resil_define(rb, "b", "policy.scope = global; bulkhead.max = 10") < 0) {
		fprintf(stderr, "the hosts did not start\n");
		test_unit_fini(&unit);
		test_daemon_fini(&hb);
		test_redis_fini(&rd, true);
		return 1;
	}
	for (int h = 0; h < HOSTS; h++)
		CHECK(TEST_EVENTUALLY(metric(h, "resil_cluster_bulkhead_lease_seconds") > 0),
		      "host %c holds a bulkhead lease", 'A' + h);
	for (int h = 0; h < HOSTS; h++)
		for (int w = 0; w < WORKERS; w++)
			if ((workers[h][w] = fork()) == 0)
				worker(h, w);
	for (int i = 0; i < HOLDERS; i++)
		if ((holders[i] = fork()) == 0)
			holder(i);
	CHECK(TEST_EVENTUALLY(held_now() == HELD), "A's holders hold %d permits (%d)", HELD,
	      held_now());
	want(WORKERS, 0);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->adm[0]) > 50), "A's workers decide beside them");

	/* the fleet holds A's share for it when it goes silent */
	CHECK(TEST_EVENTUALLY(a_runs(cname, &fb) == 1 && fb >= HELD),
	      "Redis holds a fallback of %d slots or more for A (%ld)", HELD, fb);

	/* 1: the restart with new sizes, the 6 permits held across it */
	a_settings(cname, "16M");
	test_unit_crash(&unit);
	CHECK(test_unit_start(&unit, true) == 0, "A restarts");
	CHECK(test_log_count(&unit.d, "moved 1 policies and their state") == 1,
	      "A moved the policy into segments of the new size");
	CHECK(TEST_EVENTUALLY(metric(0, "resil_cluster_bulkhead_lease_seconds") > 0),
	      "A holds a lease again");
	CHECK(a_runs(cname, &fb) == 1, "A keeps its run in the fleet (%d runs of A)",
	      a_runs(cname, &fb));
	CHECK(TEST_EVENTUALLY(metric(1, "resil_cluster_bulkhead_share") <= MAX - HELD),
	      "B's share leaves A's %d held permits (%.0f)", HELD,
	      metric(1, "resil_cluster_bulkhead_share"));
	want(WORKERS, WORKERS);
	b0 = atomic_load(&sh->adm[1]);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->adm[1]) > b0 + 300),
	      "B's workers decide while A's permits are held in the old segments");
	printf("both want all, %d held in the old segments: fleet peak %d (A's workers %d, B's "
	       "%d), shares A %.0f B %.0f\n",
	       HELD, atomic_load(&sh->fleet_peak), atomic_load(&sh->peak[0]),
	       atomic_load(&sh->peak[1]), metric(0, "resil_cluster_bulkhead_share"),
	       metric(1, "resil_cluster_bulkhead_share"));

	/* 2: at quiescence, what both hosts admit beside the held permits */
	want(0, 0);
	CHECK(TEST_EVENTUALLY(quiet(HELD)), "only the held permits in flight (%d)",
	      atomic_load(&sh->fleet));
	CHECK(open_b(0, &ra, &qa) == 0 && resil_policy(rb, "b", &qb) == 0, "probes open");
	na = admit_all(qa, pa, MAX + 1);
	nb = admit_all(qb, pb, MAX + 1);
	printf("quiescent: A admits %d, B admits %d, %d held in the old segments\n", na, nb, HELD);
	CHECK(na + nb + HELD <= MAX, "at most %d: A admits %d and B %d beside %d held", MAX, na, nb,
	      HELD);
	release_all(qa, pa, na);
	release_all(qb, pb, nb);
	resil_close(ra);

	/* 3: a holder killed holds nothing; the others release */
	kill(holders[0], SIGKILL);
	waitpid(holders[0], &st, 0);
	holders[0] = 0;
	atomic_fetch_sub(&sh->fleet, atomic_load(&sh->holding[0]));
	atomic_store(&sh->holding[0], 0);
	want(WORKERS, 0);
	atomic_store(&sh->peak[0], 0);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->peak[0]) >= MAX - HELD + EACH),
	      "a killed holder's permits count no more: A's workers get %d (peak %d)",
	      MAX - HELD + EACH, atomic_load(&sh->peak[0]));
	want(0, 0);
	CHECK(TEST_EVENTUALLY(quiet(HELD - EACH)), "quiet again");
	for (int i = 1; i < HOLDERS; i++)
		atomic_store(&sh->release[i], 1);
	CHECK(TEST_EVENTUALLY(held_now() == 0), "the holders released");
	CHECK(TEST_EVENTUALLY(
		  test_log_count(&unit.d,
				 "policy b: no permit held in the old segments any more") == 1),
	      "the old segments hold no permit any more");
	want(WORKERS, 0);
	atomic_store(&sh->peak[0], 0);
	CHECK(TEST_EVENTUALLY(atomic_load(&sh->peak[0]) >= WORKERS),
	      "A alone: its %d workers in flight at once (peak %d)", WORKERS,
	      atomic_load(&sh->peak[0]));

	children_stop();
	printf("fleet: at most %d calls in flight at once (bulkhead.max %d); A's workers admitted "
	       "%llu with %llu errors\n",
	       atomic_load(&sh->fleet_peak), MAX, (unsigned long long)atomic_load(&sh->adm[0]),
	       (unsigned long long)atomic_load(&sh->errors[0]));
	CHECK(atomic_load(&sh->fleet_peak) <= MAX, "never more than %d in flight fleet-wide: %d",
	      MAX, atomic_load(&sh->fleet_peak));
	CHECK(atomic_load(&sh->errors[0]) == 0 && atomic_load(&sh->errors[1]) == 0,
	      "no worker error (A %llu, B %llu)", (unsigned long long)atomic_load(&sh->errors[0]),
	      (unsigned long long)atomic_load(&sh->errors[1]));
	resil_close(rb);
	if (test_failures) {
		char cmd[2 * PATH_MAX + 64];

		snprintf(cmd, sizeof(cmd), "tail -n 40 %s %s >&2", unit.d.log, hb.log);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log)\n");
	}
	test_unit_fini(&unit);
	test_daemon_fini(&hb);
	test_redis_fini(&rd, test_failures > 0);
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

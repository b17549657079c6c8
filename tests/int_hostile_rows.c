/* SPDX-License-Identifier: MIT */
/*
 * int_hostile_rows.c - the client table cannot be kept full, and a worker
 * keeps its row while it lives. As members of the socket group without
 * admin rights (accounts made for the test: group rt-rows, users
 * rt-rows-a, the attacker, and rt-rows-v, the others), on a resild with
 * --clients 32 and --max-clients-per-uid 4:
 *   planted   uid A plants every free row (pid 1 with its start time, and
 *             pids that do not exist) every few milliseconds, for the
 *             whole case; then, five times, a newcomer of uid V opens the
 *             library and has a row at once; a worker of V takes the 8
 *             permits of a bulkhead.max = 8 and is SIGKILLed: another
 *             newcomer is admitted again within 10 s (its row was reclaimed).
 *   pidns     the same from inside an unprivileged user and pid namespace
 *             (unshare(CLONE_NEWUSER | CLONE_NEWPID), as
 *             `unshare --user --map-root-user --pid`): the planted rows
 *             name that namespace's pids. resild finds each named process
 *             in that namespace (or none): newcomers get rows, a killed
 *             worker's permits come back, no row is kept unidentified, and
 *             uid A never holds more than its 4 rows.
 *   orphan    a worker of V opens, takes the 8 permits from a forked child
 *             and exits at once (a daemonizing worker): the child, re-
 *             parented before resild judged its row, keeps its row and its
 *             permits over many ticks (nobody else is admitted), until it
 *             releases them.
 *   wiped     uid A zeroes the owner word of every row but its own: a
 *             worker of V claims a row again at its library's periodic
 *             check (within 10 s), and resild keeps it.
 * Skips (77) when not root; the pidns case only when this kernel refuses
 * unprivileged user namespaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

#define CLIENTS 32
#define PER_UID 4

static struct test_daemon d;
static gid_t g;
static uid_t ua, uv;
static resil_t *root;

/* Plant every free row of r's table until stop is readable. pid1_st: pid
 * 1's start time as the planter sees it (0: plant only dead pids). */
static void plant(resil_t *r, int stop, uint64_t pid1_st)
{
	struct resil_seg *s = r->seg.cfg ? &r->seg : NULL;
	char ch;
	uint32_t dead = 3999000;

	TEST_CHECK(s != NULL);
	fcntl(stop, F_SETFL, O_NONBLOCK);
	while (read(stop, &ch, 1) < 0) {
		for (uint32_t i = 0; i < s->geo.client_cap; i++) {
			ra64 *o = &resil_seg_client(s, i)->owner;
			uint64_t exp = 0, v = i & 1 && pid1_st
						  ? 1ULL << 32 | (pid1_st & 0xffffffffULL)
						  : (uint64_t)(dead + i) << 32 | 7;

			(void)atomic_compare_exchange_strong(o, &exp, v);
		}
		test_sleep_ms(2);
	}
}

/* proc: "1", or "self" (inside a pid namespace: the planter itself,
 * whose pid there is 1, read through our /proc) */
static uint64_t start_time_of(const char *proc)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/stat", proc);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		for (int field = 3; p && field <= 22; field++) {
			p = strchr(p + 1, ' ');
			if (field == 22 && p)
				v = strtoull(p + 1, NULL, 10);
		}
	fclose(f);
	return v;
}

/* Newcomers of uid V have rows; a worker killed holding the 8 permits of
 * "rows8" has them back. */
static void newcomers(void)
{
	for (int k = 0; k < 5; k++) {
		pid_t pid = fork();

		TEST_CHECK(pid >= 0);
		if (pid == 0) {
			resil_t *r = NULL;

			test_become(uv, g);
			TEST_CHECK(resil_open(&r, d.sock) == 0);
			TEST_CHECK(atomic_load(&r->cur->row) >= 0);
			resil_close(r);
			_exit(0);
		}
		TEST_CHECK(test_wait_pid(pid, 30000) == 0);
	}
	printf("  5 newcomers of uid %u had rows\n", (unsigned)uv);
	{
		int pfd[2];
		char ch;
		pid_t w;
		resil_policy_t *p;

		TEST_CHECK(pipe(pfd) == 0);
		w = fork();
		TEST_CHECK(w >= 0);
		if (w == 0) {
			resil_t *r = NULL;
			resil_policy_t *q;
			resil_permit_t pm[8];

			test_become(uv, g);
			TEST_CHECK(resil_open(&r, d.sock) == 0);
			TEST_CHECK(atomic_load(&r->cur->row) >= 0);
			TEST_CHECK(resil_policy(r, "rows8", &q) == 0);
			for (int i = 0; i < 8; i++)
				TEST_CHECK(resil_acquire(q, &pm[i]) == RESIL_ADMIT);
			TEST_CHECK(write(pfd[1], "x", 1) == 1);
			pause();
			_exit(0);
		}
		TEST_CHECK(read(pfd[0], &ch, 1) == 1);
		TEST_CHECK(resil_policy(root, "rows8", &p) == 0);
		TEST_CHECK(test_try_acquire(p) == RESIL_REJECT_FULL);
		kill(w, SIGKILL);
		waitpid(w, NULL, 0);
		TEST_CHECK(TEST_EVENTUALLY(test_try_acquire(p) == RESIL_ADMIT));
		close(pfd[0]);
		close(pfd[1]);
		printf("  a worker of uid %u killed holding 8 of 8 permits: back\n", (unsigned)uv);
	}
}

static void case_planted(void)
{
	int stop[2];
	pid_t a;

	printf("planted:\n");
	TEST_CHECK(pipe(stop) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		resil_t *r = NULL;

		test_become(ua, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		plant(r, stop[0], start_time_of("1"));
		_exit(0);
	}
	test_ticks(root, 3);
	newcomers();
	TEST_CHECK(write(stop[1], "s", 1) == 1);
	TEST_CHECK(test_wait_pid(a, 10000) == 0);
	close(stop[0]);
	close(stop[1]);
	printf("  resil_client_rows_evicted_total %lld\n",
	       test_metric(root, "resil_client_rows_evicted_total"));
}

static int case_pidns(void)
{
	int stop[2], st, go[2];
	pid_t a;
	char ch;

	printf("pidns:\n");
	TEST_CHECK(pipe(stop) == 0 && pipe(go) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		pid_t in;

		test_become(ua, g);
		if (unshare(CLONE_NEWUSER | CLONE_NEWPID) < 0)
			_exit(77);
		in = fork(); /* pid 1 of the new namespace */
		if (in == 0) {
			resil_t *r = NULL;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			TEST_CHECK(getpid() == 1);
			TEST_CHECK(resil_open(&r, d.sock) == 0);
			TEST_CHECK(write(go[1], "g", 1) == 1);
			plant(r, stop[0], start_time_of("self"));
			_exit(0);
		}
		_exit(test_wait_pid(in, 120000) == 0 ? 0 : 1);
	}
	close(go[1]);
	if (read(go[0], &ch, 1) != 1) {
		st = test_wait_pid(a, 10000);
		TEST_CHECK(st >= 0 && WIFEXITED(st));
		if (WEXITSTATUS(st) == 77) {
			printf("  unprivileged user namespaces refused here: case skipped\n");
			return 77;
		}
		TEST_CHECK(!"the planter in its namespace started");
	}
	test_ticks(root, 3);
	newcomers();
	/* every planted row was found in the planter's namespace or in none:
	 * none kept unidentified; those naming the planter itself (its pid 1
	 * there, which maps the segments) counted against uid A's quota */
	TEST_CHECK(test_metric(root, "resil_client_rows_unidentified") == 0);
	TEST_CHECK(TEST_EVENTUALLY(test_metric(root, "resil_client_rows_over_quota_total") > 0));
	printf("  none unidentified; %lld refused over uid %u's quota of %d\n",
	       test_metric(root, "resil_client_rows_over_quota_total"), (unsigned)ua, PER_UID);
	TEST_CHECK(write(stop[1], "s", 1) == 1);
	TEST_CHECK(test_wait_pid(a, 10000) == 0);
	close(stop[0]);
	close(stop[1]);
	close(go[0]);
	return 0;
}

static void case_orphan(void)
{
	resil_policy_t *p;
	int pfd[2], done[2];
	char ch;
	pid_t w;

	printf("orphan:\n");
	TEST_CHECK(pipe(pfd) == 0 && pipe(done) == 0);
	w = fork();
	TEST_CHECK(w >= 0);
	if (w == 0) {
		resil_t *r = NULL;
		resil_policy_t *q;
		pid_t c;

		test_become(uv, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		TEST_CHECK(resil_policy(r, "rows8", &q) == 0);
		pid_t parent = getpid();

		c = fork();
		TEST_CHECK(c >= 0);
		if (c == 0) {
			resil_permit_t pm[8];

			/* the daemonized child: its parent is gone before it
			 * decides, so resild first sees its row re-parented */
			while (getppid() == parent)
				test_sleep_ms(1);
			for (int i = 0; i < 8; i++)
				TEST_CHECK(resil_acquire(q, &pm[i]) == RESIL_ADMIT);
			TEST_CHECK(write(pfd[1], "x", 1) == 1);
			TEST_CHECK(read(done[0], &ch, 1) == 1);
			for (int i = 0; i < 8; i++)
				resil_release(q, &pm[i], RESIL_SUCCESS);
			TEST_CHECK(write(pfd[1], "y", 1) == 1);
			_exit(0);
		}
		_exit(0); /* the parent leaves at once */
	}
	TEST_CHECK(test_wait_pid(w, 10000) == 0);
	TEST_CHECK(read(pfd[0], &ch, 1) == 1);
	TEST_CHECK(resil_policy(root, "rows8", &p) == 0);
	test_ticks(root, 10);
	TEST_CHECK(test_try_acquire(p) == RESIL_REJECT_FULL);
	printf("  the orphan holds its 8 permits over 10 ticks\n");
	TEST_CHECK(write(done[1], "d", 1) == 1);
	TEST_CHECK(read(pfd[0], &ch, 1) == 1 && ch == 'y');
	TEST_CHECK(test_try_acquire(p) == RESIL_ADMIT);
	printf("  and gives them back itself\n");
}

/* uid A zeroes the owner word of every row but its own: a worker of V
 * notices at its library's periodic check and claims a row again, and
 * resild keeps it (it maps the segments) */
static void case_wiped(void)
{
	int pfd[2], done[2];
	char ch;
	pid_t w, a;

	printf("wiped:\n");
	TEST_CHECK(pipe(pfd) == 0 && pipe(done) == 0);
	w = fork();
	TEST_CHECK(w >= 0);
	if (w == 0) {
		resil_t *r = NULL;
		resil_policy_t *q;
		int row;

		test_become(uv, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		TEST_CHECK(resil_policy(r, "rows8", &q) == 0);
		TEST_CHECK(atomic_load(&r->cur->row) >= 0);
		TEST_CHECK(write(pfd[1], "x", 1) == 1);
		TEST_CHECK(read(done[0], &ch, 1) == 1);
		/* decisions: the periodic check runs from them */
		TEST_CHECK(
		    TEST_EVENTUALLY(test_try_acquire(q) >= 0 && ld_relaxed(&r->row_claims) > 0));
		row = atomic_load(&r->cur->row);
		TEST_CHECK(row >= 0);
		TEST_CHECK(ld_relaxed(&resil_seg_client(&r->seg, (uint32_t)row)->owner) >> 32 ==
			   (uint64_t)getpid());
		/* kept by resild over a few ticks: still ours */
		for (int i = 0; i < 3; i++) {
			uint64_t b = ld_relaxed(&r->seg.st->daemon_beat_ns);

			TEST_CHECK(TEST_EVENTUALLY(ld_relaxed(&r->seg.st->daemon_beat_ns) != b));
		}
		TEST_CHECK(ld_relaxed(&resil_seg_client(&r->seg, (uint32_t)row)->owner) >> 32 ==
			   (uint64_t)getpid());
		TEST_CHECK(test_try_acquire(q) == RESIL_ADMIT);
		resil_close(r);
		_exit(0);
	}
	TEST_CHECK(read(pfd[0], &ch, 1) == 1);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		resil_t *r = NULL;
		int mine;

		test_become(ua, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		mine = atomic_load(&r->cur->row);
		for (uint32_t i = 0; i < r->seg.geo.client_cap; i++)
			if ((int)i != mine)
				atomic_store(&resil_seg_client(&r->seg, i)->owner, 0);
		resil_close(r);
		_exit(0);
	}
	TEST_CHECK(test_wait_pid(a, 30000) == 0);
	TEST_CHECK(write(done[1], "d", 1) == 1);
	TEST_CHECK(test_wait_pid(w, 30000) == 0);
	printf("  a worker of uid %u whose row was wiped claimed one again, and kept it\n",
	       (unsigned)uv);
	close(pfd[0]);
	close(pfd[1]);
	close(done[0]);
	close(done[1]);
}

int main(void)
{
	char gs[16], cl[16], pu[16];
	const char *extra[] = {"--socket-group",	gs, "--clients", cl,
			       "--max-clients-per-uid", pu, NULL};
	int skipped;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_hostile_rows: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-rows", &g) == 0);
	TEST_CHECK(test_user_make("rt-rows-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-rows-v", g, &uv) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	snprintf(cl, sizeof(cl), "%d", CLIENTS);
	snprintf(pu, sizeof(pu), "%d", PER_UID);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	TEST_CHECK(resil_define(root, "rows8", "bulkhead.max = 8") == 0);

	case_planted();
	skipped = case_pidns();
	case_orphan();
	case_wiped();

	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_hostile_rows: ok%s\n", skipped ? " (pidns skipped)" : "");
	return 0;
}

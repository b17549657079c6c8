/* SPDX-License-Identifier: MIT */
/*
 * int_pcpu_mixed.c - per-CPU counters stay exact in a fleet that mixes
 * processes with and without rseq (pcpu.h: the mode is the host's).
 *
 * Workers are this binary exec'd again (a glibc tunable only applies at
 * exec), connected to a real resild, some with GLIBC_TUNABLES=
 * glibc.pthread.rseq=0 and some without; each counts N successes.
 *   - alone: a worker without rseq on an owned host (at most 15 CPUs)
 *     counts into the spare stripe only, never into a CPU's own stripe,
 *     where rseq processes add without a lock.
 *   - mixed: two of each at once, more workers than CPUs so they are
 *     preempted and migrated mid-add: at quiescence the policy counted
 *     exactly 4 N successes.
 * Skipped (77) where glibc has no rseq to turn off.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "pcpu.h"
#include "stats.h"
#include "testutil.h"

static struct test_daemon daemon_;
static bool daemon_up;
static char self[4096];

/* The worker: argv = self, "worker", socket, policy, n, want_rseq. Exit 0
 * when it counted, 3 when its rseq state is not the one asked for (the
 * tunable unsupported: the parent skips). */
static int worker(char **argv)
{
	resil_t *r;
	resil_policy_t *p;
	resil_permit_t pm;
	long n = atol(argv[4]);
	int want_rseq = atoi(argv[5]);

#ifdef RESIL_PCPU_RSEQ
	if ((__rseq_size != 0) != (want_rseq != 0))
		return 3;
#else
	return 3;
#endif
	if (resil_open(&r, argv[2]) < 0 || resil_policy(r, argv[3], &p) < 0)
		return 1;
	for (long i = 0; i < n; i++) {
		if (resil_acquire(p, &pm) != RESIL_ADMIT)
			return 1;
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	resil_close(r);
	return 0;
}

static pid_t spawn(const char *policy, long n, bool rseq)
{
	char ns[32], rs[4];
	char *argv[] = {self, "worker", daemon_.sock, (char *)policy, ns, rs, NULL};
	pid_t pid;

	snprintf(ns, sizeof(ns), "%ld", n);
	snprintf(rs, sizeof(rs), "%d", rseq ? 1 : 0);
	pid = fork();
	if (pid == 0) {
		if (rseq)
			unsetenv("GLIBC_TUNABLES");
		else
			setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);
		execv(self, argv);
		_exit(127);
	}
	return pid;
}

/* Wait for the workers: 0 when all counted, TEST_SKIP when one could not
 * have the rseq state asked for. */
static int reap(const pid_t *pids, int n)
{
	int rc = 0;

	for (int i = 0; i < n; i++) {
		int st = test_wait_pid(pids[i], 120000);

		assert_true(st >= 0);
		assert_true(WIFEXITED(st));
		if (WEXITSTATUS(st) == 3)
			rc = TEST_SKIP;
		else
			assert_int_equal(WEXITSTATUS(st), 0);
	}
	return rc;
}

static const void *stats_of(resil_t *r, const char *name)
{
	return resil_comp_state(&r->seg, test_rec_of(r, name), RESIL_C_STATS);
}

static uint64_t stripe_word(const void *st, unsigned stripe, enum resil_stat w)
{
	const ra64 *p = (const ra64 *)((const char *)st + stripe * RESIL_HOT_ALIGN);

	return ld_relaxed(&p[w]);
}

static int setup(void **state)
{
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);

	(void)state;
	if (sl <= 0)
		return -1;
	self[sl] = '\0';
	if (test_daemon_init(&daemon_) < 0)
		return -1;
	if (test_daemon_start(&daemon_, NULL) < 0) {
		test_daemon_fini(&daemon_);
		return -1;
	}
	daemon_up = true;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (daemon_up)
		test_daemon_fini(&daemon_);
	return 0;
}

static void test_alone_counts_in_spare(void **unused)
{
	long n = 100000L * resil_test_scale(), cpus = sysconf(_SC_NPROCESSORS_CONF);
	resil_t *r;
	const void *st;
	pid_t pid;

	if (cpus > RESIL_PCPU_SPARE) {
		print_message("%ld CPUs: not an owned host, every add is locked\n", cpus);
		skip();
	}
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(resil_define(r, "alone", "bulkhead.max = 64"), 0);
	pid = spawn("alone", n, false);
	if (reap(&pid, 1) == TEST_SKIP) {
		resil_close(r);
		skip();
	}
	st = stats_of(r, "alone");
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), n);
	/* every add in the spare: a CPU's own stripe takes plain adds */
	assert_int_equal(stripe_word(st, RESIL_PCPU_SPARE, RESIL_STAT_SUCCESS), n);
	resil_close(r);
}

static void test_mixed_fleet_exact(void **unused)
{
	long n = 2000000L * resil_test_scale();
	pid_t pids[4];
	resil_t *r;
	uint64_t got;

	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(resil_define(r, "mixed", "bulkhead.max = 64"), 0);
	for (int i = 0; i < 4; i++)
		pids[i] = spawn("mixed", n, i % 2 == 0);
	if (reap(pids, 4) == TEST_SKIP) {
		resil_close(r);
		skip();
	}
	got = resil_stats_read(stats_of(r, "mixed"), RESIL_STAT_SUCCESS);
	print_message("counted %llu of %llu\n", (unsigned long long)got,
		      (unsigned long long)(4 * n));
	assert_int_equal(got, 4 * n);
	resil_close(r);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alone_counts_in_spare),
	    cmocka_unit_test(test_mixed_fleet_exact),
	};

	if (argc == 6 && strcmp(argv[1], "worker") == 0)
		return worker(argv);
	return cmocka_run_group_tests(tests, setup, teardown);
}

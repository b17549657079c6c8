/* SPDX-License-Identifier: MIT */
/*
 * unit_clock.c - the decision clock (shm/clock.c) against CLOCK_MONOTONIC.
 *
 *   - the TSC is in use exactly when the host is eligible (x86_64, the
 *     kernel's clocksource is tsc, constant_tsc and nonstop_tsc, no
 *     RESIL_CLOCK=monotonic), once calibrated;
 *   - bracketing: m1 = clock_gettime, f = resil_clock_fast(), m2 =
 *     clock_gettime gives m1 - TOL <= f <= m2 + TOL (TOL = 1 ms, the bound
 *     clock.c states; an upper bound, never a duration), 1e6 times, across
 *     150 ms pauses (every pause outlives the extrapolation span, so each
 *     reading after one re-anchors), during 120 ms of continuous reading
 *     (the span runs out under the reader), from 4 threads at once, and in
 *     a forked child; the worst deviation seen is printed;
 *   - consecutive readings of one thread never go back more than TOL;
 *   - RESIL_CLOCK=monotonic (the test binary re-executed with it): the TSC
 *     is not used and every reading is bracketed exactly (TOL 0);
 *   - no syscall, also on the cold path: 250 ms of readings (two re-anchors
 *     at least) in a child under a seccomp filter that kills it for any
 *     syscall but write and exit;
 *   - a release whose reading is behind the acquire's (the step back the
 *     fast clock may take) records a duration of 0, not "not timed".
 * The pauses let time pass; nothing is awaited. Calibration is awaited by
 * polling (10 s at most).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "internal.h"
#include "stats.h"
#include "testutil.h"

#define MS  RESIL_NS_PER_MS
#define TOL (1 * MS)

extern char **environ;

/* How far outside [m1, m2] readings fell, and how far from the middle. */
struct dev {
	int64_t below; /* max(m1 - f), 0 if never below */
	int64_t above; /* max(f - m2) */
	int64_t off;   /* max |f - (m1 + m2) / 2| over tight brackets */
	int64_t n, tight;
};

/* A bracket this narrow was not interrupted: |f - middle| is the error
 * to within TIGHT_NS / 2. */
#define TIGHT_NS 200

static void dev_merge(struct dev *d, const struct dev *o)
{
	d->below = resil_max64(d->below, o->below);
	d->above = resil_max64(d->above, o->above);
	d->off = resil_max64(d->off, o->off);
	d->n += o->n;
	d->tight += o->tight;
}

static void dev_print(const char *what, const struct dev *d)
{
	print_message("  %-22s %8" PRId64 " readings: worst %" PRId64 " ns below m1, %" PRId64
		      " ns above m2; %" PRId64 " ns off the middle of %" PRId64
		      " brackets < %d ns\n",
		      what, d->n, d->below, d->above, d->off, d->tight, TIGHT_NS);
}

/* One bracketed reading; false when f is outside [m1 - tol, m2 + tol]. */
static bool bracket(struct dev *d, int64_t tol)
{
	int64_t m1 = resil_clock_monotonic(NULL);
	int64_t f = resil_clock_fast();
	int64_t m2 = resil_clock_monotonic(NULL);
	int64_t mid = m1 + (m2 - m1) / 2;

	d->below = resil_max64(d->below, m1 - f);
	d->above = resil_max64(d->above, f - m2);
	if (m2 - m1 < TIGHT_NS) {
		d->off = resil_max64(d->off, f > mid ? f - mid : mid - f);
		d->tight++;
	}
	d->n++;
	return f >= m1 - tol && f <= m2 + tol;
}

/* n bracketed readings, or (n = 0) as many as fit in span_ns. Returns the
 * count outside the tolerance. */
static int64_t bracket_loop(struct dev *d, int64_t n, int64_t span_ns, int64_t tol)
{
	int64_t bad = 0, end = resil_clock_monotonic(NULL) + span_ns;

	if (n) {
		for (int64_t i = 0; i < n; i++)
			bad += !bracket(d, tol);
		return bad;
	}
	do {
		for (int i = 0; i < 1000; i++)
			bad += !bracket(d, tol);
	} while (resil_clock_monotonic(NULL) < end);
	return bad;
}

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * MS};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- is the host eligible? (independent of clock.c's reading) ---- */

static bool first_line_is(const char *path, const char *want)
{
	char buf[64] = "";
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(buf, sizeof(buf), f) && strncmp(buf, want, strlen(want)) == 0 &&
	     (buf[strlen(want)] == '\n' || buf[strlen(want)] == 0);
	fclose(f);
	return ok;
}

static bool cpuinfo_has(const char *a, const char *b)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[8192];
	bool ok = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		char pa[64], pb[64];

		if (strncmp(line, "flags", 5) != 0)
			continue;
		snprintf(pa, sizeof(pa), " %s ", a);
		snprintf(pb, sizeof(pb), " %s ", b);
		line[strcspn(line, "\n")] = ' ';
		ok = strstr(line, pa) && strstr(line, pb);
		break;
	}
	fclose(f);
	return ok;
}

static bool host_eligible(void)
{
	const char *e = getenv("RESIL_CLOCK");

#if !defined(__x86_64__)
	return false;
#endif
	if (e && strcmp(e, "monotonic") == 0)
		return false;
	if (e && strcmp(e, "tsc") == 0)
		return cpuinfo_has("constant_tsc", "nonstop_tsc");
	return first_line_is("/sys/devices/system/clocksource/clocksource0/current_clocksource",
			     "tsc") &&
	       cpuinfo_has("constant_tsc", "nonstop_tsc");
}

/* Read until the TSC is in use, for up to 10 s. */
static bool wait_calibrated(void)
{
	int64_t end = resil_clock_monotonic(NULL) + TEST_EVENTUALLY_MS * MS;

	do {
		resil_clock_fast();
		if (resil_clock_fast_tsc())
			return true;
	} while (resil_clock_monotonic(NULL) < end);
	return false;
}

/* ---- tests ---- */

static void test_eligibility(void **state)
{
	bool want = host_eligible();

	print_message("  host %s eligible: %s\n", want ? "is" : "is not",
		      want ? "TSC extrapolation" : "clock_gettime");
	if (want) {
		assert_true(wait_calibrated());
	} else {
		for (int i = 0; i < 100000; i++)
			resil_clock_fast();
		assert_false(resil_clock_fast_tsc());
	}
}

static void test_bracket(void **state)
{
	struct dev d = {0};
	int64_t n = 1000000LL * resil_test_scale();

	wait_calibrated();
	assert_int_equal(bracket_loop(&d, n, 0, TOL), 0);
	dev_print("back to back", &d);
	assert_true(d.n == n);
}

static void test_bracket_across_anchors(void **state)
{
	struct dev all = {0};

	wait_calibrated();
	for (int round = 0; round < 4; round++) {
		struct dev d = {0};

		pause_ms(150);
		/* the first reading after the pause re-anchors */
		assert_true(bracket(&d, TOL));
		/* then 120 ms of readings: at least one span runs out */
		assert_int_equal(bracket_loop(&d, 0, 120 * MS, TOL), 0);
		dev_merge(&all, &d);
	}
	dev_print("after 150 ms pauses", &all);
	if (host_eligible())
		assert_true(resil_clock_fast_tsc());
}

struct thr {
	pthread_t t;
	struct dev d;
	int64_t bad;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	for (int round = 0; round < 2; round++) {
		t->bad += bracket_loop(&t->d, 0, 130 * MS, TOL);
		pause_ms(150);
		t->bad += !bracket(&t->d, TOL);
	}
	return NULL;
}

static void test_bracket_threads(void **state)
{
	struct thr t[4];
	struct dev all = {0};

	memset(t, 0, sizeof(t));
	wait_calibrated();
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i].t, NULL, thr_main, &t[i]), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i].t, NULL), 0);
		assert_int_equal(t[i].bad, 0);
		assert_true(t[i].d.n > 0);
		dev_merge(&all, &t[i].d);
	}
	dev_print("4 threads", &all);
}

/* A forked child inherits the calibration and keeps a correct clock. */
static void test_bracket_forked(void **state)
{
	int status;
	pid_t pid;

	wait_calibrated();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct dev d = {0};
		int64_t bad = bracket_loop(&d, 0, 120 * MS, TOL);

		if (host_eligible() && !resil_clock_fast_tsc())
			_exit(2);
		_exit(bad ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_monotone(void **state)
{
	int64_t prev, worst = 0, end, steps = 0;

	wait_calibrated();
	prev = resil_clock_fast();
	for (int round = 0; round < 3; round++) {
		end = resil_clock_monotonic(NULL) + 120 * MS;
		do {
			for (int i = 0; i < 1000; i++) {
				int64_t f = resil_clock_fast();

				if (f < prev) {
					worst = resil_max64(worst, prev - f);
					steps++;
				}
				assert_true(prev - f <= TOL);
				prev = f;
			}
		} while (resil_clock_monotonic(NULL) < end);
		pause_ms(150); /* the next reading re-anchors */
	}
	print_message("  steps back: %" PRId64 ", the largest %" PRId64 " ns\n", steps, worst);
}

/* RESIL_CLOCK=monotonic: the binary again, with the variable set. */
static int monotonic_child(void)
{
	struct dev d = {0};
	int64_t bad;

	/* long enough that the TSC would have been calibrated (1 ms) */
	bracket_loop(&d, 0, 5 * MS, 0);
	if (resil_clock_fast_tsc()) {
		fprintf(stderr, "RESIL_CLOCK=monotonic: the TSC is in use\n");
		return 1;
	}
	d = (struct dev){0};
	bad = bracket_loop(&d, 200000, 0, 0);
	if (bad) {
		fprintf(stderr, "RESIL_CLOCK=monotonic: %" PRId64 " readings outside [m1, m2]\n",
			bad);
		return 1;
	}
	return 0;
}

/* RESIL_CLOCK=tsc: the TSC wherever the CPU says it is invariant, the
 * kernel's clocksource whatever it is; never where the CPU does not. */
static int tsc_child(void)
{
	bool cpu = cpuinfo_has("constant_tsc", "nonstop_tsc");

#if !defined(__x86_64__)
	cpu = false;
#endif
	if (cpu ? !wait_calibrated() : resil_clock_fast_tsc()) {
		fprintf(stderr, "RESIL_CLOCK=tsc: TSC %s in use, the CPU flags say %s\n",
			resil_clock_fast_tsc() ? "is" : "is not",
			cpu ? "invariant" : "not invariant");
		return 1;
	}
	return 0;
}

static void test_forced_tsc(void **state)
{
	char *argv[] = {"unit_clock", "--tsc-child", NULL};
	int status;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("RESIL_CLOCK", "tsc", 1);
		execve("/proc/self/exe", argv, environ);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_escape_hatch(void **state)
{
	char *argv[] = {"unit_clock", "--monotonic-child", NULL};
	int status;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("RESIL_CLOCK", "monotonic", 1);
		execve("/proc/self/exe", argv, environ);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* The time is measured with the clock under test (no syscall): 250 ms of
 * it outlive two extrapolation spans, so tsc_anchor runs at least twice. */
static void test_no_syscall(void **state)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	skip(); /* the sanitizers' runtimes make syscalls of their own */
#endif
	int status;
	pid_t pid;

	wait_calibrated();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int64_t start, now, prev;

		if (test_deny_syscalls() != 0)
			_exit(3);
		start = prev = resil_clock_fast();
		do {
			now = resil_clock_fast();
			if (prev - now > TOL)
				_exit(1);
			prev = now;
		} while (now - start < 250 * MS);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("the child died of signal %d (SIGSYS: a syscall)", WTERMSIG(status));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* The clock steps back between acquire and release: the duration is 0. */
static void test_duration_clamped(void **state)
{
	struct test_clock *clk = test_clock_new(1000 * RESIL_NS_PER_S);
	const struct resil_rec *rec;
	resil_policy_t *p;
	resil_permit_t pm;
	uint64_t word, count, sum;
	uint32_t slot;
	resil_t *r;
	void *st;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, test_clock_fn, clk), 0);
	assert_int_equal(resil_define(r, "db", "histogram = on"), 0);
	assert_int_equal(resil_policy(r, "db", &p), 0);
	assert_int_equal(resil_acquire(p, &pm), 0);
	test_clock_advance(clk, -5000);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_seg_lookup(&r->seg, "db", &slot, &word), 0);
	rec = resil_seg_rec_of(&r->seg, word);
	assert_non_null(rec);
	st = resil_stats_state_of(&r->seg, rec);
	assert_non_null(st);
	assert_int_equal(resil_stats_read(st, RESIL_STAT_SUCCESS), 1);
	assert_int_equal(resil_stats_hist_read(st, &rec->conf, NULL, &count, &sum), 0);
	assert_int_equal(count, 1);
	assert_int_equal(sum, 0);
	resil_close(r);
	test_clock_free(clk);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_eligibility),
	    cmocka_unit_test(test_bracket),
	    cmocka_unit_test(test_bracket_across_anchors),
	    cmocka_unit_test(test_bracket_threads),
	    cmocka_unit_test(test_bracket_forked),
	    cmocka_unit_test(test_monotone),
	    cmocka_unit_test(test_escape_hatch),
	    cmocka_unit_test(test_forced_tsc),
	    cmocka_unit_test(test_no_syscall),
	    cmocka_unit_test(test_duration_clamped),
	};

	if (argc == 2 && strcmp(argv[1], "--monotonic-child") == 0)
		return monotonic_child();
	if (argc == 2 && strcmp(argv[1], "--tsc-child") == 0)
		return tsc_child();
	return cmocka_run_group_tests(tests, NULL, NULL);
}

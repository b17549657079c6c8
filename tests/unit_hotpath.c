/* SPDX-License-Identifier: MIT */
/*
 * unit_hotpath.c - "zero allocations and zero syscalls on the hot path",
 * asserted for every policy kind through the public API, on the admitting
 * and on the rejecting path:
 *   - allocations: malloc/calloc/realloc are interposed and counted
 *     between two points (not under ASan/TSan, which interpose them);
 *   - syscalls: the loop runs in a forked child under a seccomp filter
 *     that lets only write, exit and exit_group through and kills the
 *     process (SIGSYS) for anything else. The child reports with write()
 *     and leaves with exit. (SECCOMP_MODE_STRICT cannot serve: on these
 *     kvm-clock guests it kills a vDSO clock read that makes no syscall.)
 * Each kind runs on the real clock (vDSO reads, rseq CPU numbers) and on an
 * application clock stepping 100 us per read, where the verdict the loop
 * ends on is exact (the shedder, for one, needs time to pass).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "resil.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NO_MALLOC_COUNT 1
#endif
static _Atomic long allocs;
static _Atomic int counting;
#ifndef NO_MALLOC_COUNT
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&allocs, 1);
	return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&allocs, 1);
	return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&allocs, 1);
	return __libc_realloc(p, n);
}
#endif

struct kind {
	const char *name;
	const char *config;
	int outcome;	 /* what each call reports */
	int expect_last; /* the verdict the loop ends on */
	bool keyed;
};

static const struct kind kinds[] = {
    {"breaker-count", "breaker.window = count:100", RESIL_SUCCESS, RESIL_ADMIT},
    {"breaker-time",
     "breaker.window = time:10s; breaker.slow_call = 1s; breaker.slow_call_rate = 50",
     RESIL_SUCCESS, RESIL_ADMIT},
    {"breaker-open", "breaker.window = consecutive:3; breaker.wait = 1h", RESIL_FAILURE,
     RESIL_REJECT_OPEN},
    {"gcra", "limit.rate = 1000000000/s; limit.burst = 1000000", RESIL_SUCCESS, RESIL_ADMIT},
    {"gcra-reject", "limit.rate = 1/h", RESIL_SUCCESS, RESIL_REJECT_LIMITED},
    {"sliding", "limit.rate = 100/h; limit.algorithm = sliding", RESIL_SUCCESS,
     RESIL_REJECT_LIMITED},
    {"keyed", "limit.rate = 1000/s; limit.burst = 100000; limit.keys = 1024", RESIL_SUCCESS,
     RESIL_ADMIT, true},
    {"bulkhead", "bulkhead.max = 4", RESIL_SUCCESS, RESIL_ADMIT},
    {"adaptive", "adaptive.algorithm = aimd; adaptive.window = 10ms", RESIL_SUCCESS, RESIL_ADMIT},
    {"shed", "shed.k = 2; shed.window = 10s", RESIL_FAILURE, RESIL_REJECT_SHED},
    {"histogram", "breaker.window = count:100; histogram = on", RESIL_SUCCESS, RESIL_ADMIT},
    {"everything",
     "breaker.window = count:100; limit.rate = 1000000000/s; limit.burst = 1000000;"
     "bulkhead.max = 8; shed.k = 2; histogram = on",
     RESIL_SUCCESS, RESIL_ADMIT},
};

#define CALLS 20000

static _Atomic int64_t step_ns = 1000000000;
static int64_t stepping(void *ctx)
{
	return atomic_fetch_add_explicit(&step_ns, 100000, memory_order_relaxed);
}

/* The loop under test: returns the last verdict, or -1 on an error. */
static int loop(resil_policy_t *p, const struct kind *k)
{
	int v = -1;

	for (int i = 0; i < CALLS; i++) {
		resil_permit_t permit;
		char key[16];

		if (k->keyed) {
			int n = snprintf(key, sizeof(key), "10.0.%d.%d", (i >> 8) & 3, i & 255);
			v = resil_acquire_key(p, key, (size_t)n, &permit);
		} else {
			v = resil_acquire(p, &permit);
		}
		if (v < 0)
			return -1;
		if (v == RESIL_ADMIT)
			resil_release(p, &permit, k->outcome);
	}
	return v;
}

static void test_no_allocation(void **state)
{
#ifdef NO_MALLOC_COUNT
	skip();
#else
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		resil_t *r;
		resil_policy_t *p;
		int v;

		assert_int_equal(resil_open_embedded(&r, NULL), 0);
		assert_int_equal(resil_set_clock(r, stepping, NULL), 0);
		assert_int_equal(resil_define(r, kinds[i].name, kinds[i].config), 0);
		assert_int_equal(resil_policy(r, kinds[i].name, &p), 0);
		loop(p, &kinds[i]); /* warm: first-touch work happens once */
		atomic_store(&allocs, 0);
		atomic_store(&counting, 1);
		v = loop(p, &kinds[i]);
		atomic_store(&counting, 0);
		if (atomic_load(&allocs) != 0)
			fail_msg("%s: %ld allocations in %d calls", kinds[i].name,
				 atomic_load(&allocs), CALLS);
		if (v != kinds[i].expect_last)
			fail_msg("%s: last verdict %d, expected %d", kinds[i].name, v,
				 kinds[i].expect_last);
		resil_close(r);
	}
#endif
}

static void test_no_syscall(void **state)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	skip(); /* the sanitizers' runtimes make syscalls of their own */
#endif
	for (size_t j = 0; j < 2 * sizeof(kinds) / sizeof(kinds[0]); j++) {
		size_t i = j / 2;
		bool manual = j & 1;
		resil_t *r;
		resil_policy_t *p;
		int pipefd[2], status;
		pid_t pid;
		char buf[8] = {0};

		assert_int_equal(resil_open_embedded(&r, NULL), 0);
		if (manual)
			assert_int_equal(resil_set_clock(r, stepping, NULL), 0);
		assert_int_equal(resil_define(r, kinds[i].name, kinds[i].config), 0);
		assert_int_equal(resil_policy(r, kinds[i].name, &p), 0);
		assert_int_equal(pipe(pipefd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			int v;

			loop(p, &kinds[i]); /* the child's first calls claim its row */
			if (test_deny_syscalls() != 0)
				syscall(SYS_exit, 3);
			v = loop(p, &kinds[i]);
			buf[0] = (char)('0' + (v < 0 ? 9 : v));
			if (write(pipefd[1], buf, 1) != 1)
				syscall(SYS_exit, 4);
			syscall(SYS_exit, 0);
		}
		close(pipefd[1]);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (WIFSIGNALED(status))
			fail_msg("%s (%s clock): the hot loop made a syscall (killed by signal %d)",
				 kinds[i].name, manual ? "stepping" : "real", WTERMSIG(status));
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		assert_int_equal(read(pipefd[0], buf, 1), 1);
		if (manual && buf[0] - '0' != kinds[i].expect_last)
			fail_msg("%s: last verdict %d, expected %d", kinds[i].name, buf[0] - '0',
				 kinds[i].expect_last);
		close(pipefd[0]);
		resil_close(r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_no_allocation),
	    cmocka_unit_test(test_no_syscall),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

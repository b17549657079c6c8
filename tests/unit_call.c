/* SPDX-License-Identifier: MIT */
/*
 * unit_call.c - resil_call and resil_retry_* in embedded mode: retries on
 * a manual clock (sleeps advance the clock), outcomes, budgets shared by
 * name, nested deadlines, no allocation on the success path, the
 * interrupting watchdog with real threads, and hedging on a simulated
 * long-tailed latency.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "resil.h"
#include "budget.h"
#include "stats.h"
#include "internal.h"

#define MS RESIL_NS_PER_MS
#define US RESIL_NS_PER_US
#define S  RESIL_NS_PER_S

extern void (*resil_priv_call_sleep)(void *clock_ctx, int64_t ns);
extern ra64 resil_priv_wd_fired;
extern const int resil_priv_hedge_threads;

/* ---- an allocation counter: active between two points of a test ----
 * (not under ASan or TSan, which interpose malloc themselves) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NO_MALLOC_COUNT 1
#endif
#ifndef NO_MALLOC_COUNT
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static _Atomic long allocs;
static _Atomic int counting;

void *malloc(size_t n)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&allocs, 1);
	return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&allocs, 1);
	return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&allocs, 1);
	return __libc_realloc(p, n);
}
#else
static _Atomic long allocs;
static _Atomic int counting;
#endif

static int scale(void)
{
	const char *s = getenv("RESIL_TEST_SCALE");
	int v = s ? atoi(s) : 1;

	return v > 0 ? v : 1;
}

/* ---- manual clock; sleeping advances it ---- */
static _Atomic int64_t mclock = 1000 * S;
static int64_t slept[16];
static int nslept;

static int64_t clock_fn(void *ctx)
{
	(void)ctx;
	return atomic_load(&mclock);
}
static void sleep_fn(void *ctx, int64_t ns)
{
	(void)ctx;
	if (nslept < 16)
		slept[nslept++] = ns;
	atomic_fetch_add(&mclock, ns);
}
static uint64_t rnd_fn(void *ctx)
{
	return resil_splitmix64((uint64_t *)ctx);
}

static resil_t *open_manual(void)
{
	static uint64_t seed = 7;
	resil_t *r = NULL;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, clock_fn, NULL), 0);
	assert_int_equal(resil_set_random(r, rnd_fn, &seed), 0);
	resil_priv_call_sleep = sleep_fn;
	nslept = 0;
	return r;
}

static resil_policy_t *define(resil_t *r, const char *name, const char *conf)
{
	resil_policy_t *p = NULL;
	int e = resil_define(r, name, conf);

	if (e != 0)
		fail_msg("define %s: %d %s", name, e, resil_last_error());
	assert_int_equal(resil_policy(r, name, &p), 0);
	return p;
}

/* fn: returns script[i] for the i-th attempt; records what it saw */
struct script {
	const int *cls;
	int n, calls;
	int64_t deadline[8];
	int number[8];
	int64_t retry_after;
};
static int scripted(void *arg, resil_attempt_t *a)
{
	struct script *s = arg;
	int i = s->calls++;

	if (i < 8) {
		s->deadline[i] = resil_attempt_deadline(a);
		s->number[i] = resil_attempt_number(a);
	}
	if (s->retry_after)
		resil_attempt_retry_after(a, s->retry_after);
	return i < s->n ? s->cls[i] : 0;
}

static void test_call_retries(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *p = define(r, "dep",
				   "retry.jitter = none; timeout = 2s; "
				   "breaker.window = count:10");
	const int fails[] = {RESIL_ERR_TRANSIENT, RESIL_ERR_TIMEOUT};
	struct script s = {fails, 2, 0};
	int64_t t0 = atomic_load(&mclock);

	(void)state;
	assert_int_equal(resil_call(p, scripted, &s), 0);
	assert_int_equal(s.calls, 3);
	assert_int_equal(nslept, 2);
	assert_int_equal(slept[0], 50 * MS);
	assert_int_equal(slept[1], 100 * MS);
	/* each attempt's deadline: its start + timeout */
	assert_int_equal(s.deadline[0], t0 + 2 * S);
	assert_int_equal(s.deadline[1], t0 + 50 * MS + 2 * S);
	assert_int_equal(s.deadline[2], t0 + 150 * MS + 2 * S);
	assert_int_equal(s.number[2], 3);

	/* three failures: the retries end, the class is returned */
	{
		const int f3[] = {1, 1, 1, 1};
		struct script s3 = {f3, 4, 0};

		assert_int_equal(resil_call(p, scripted, &s3),
				 RESIL_CALL_ERR + RESIL_ERR_TRANSIENT);
		assert_int_equal(s3.calls, 3);
	}
	/* permanent: one attempt */
	{
		const int fp[] = {RESIL_ERR_PERMANENT};
		struct script sp = {fp, 1, 0};

		assert_int_equal(resil_call(p, scripted, &sp),
				 RESIL_CALL_ERR + RESIL_ERR_PERMANENT);
		assert_int_equal(sp.calls, 1);
	}
	/* Retry-After replaces the backoff */
	{
		const int ft[] = {RESIL_ERR_THROTTLED};
		struct script st = {ft, 1, 0};

		st.retry_after = 3 * S;
		nslept = 0;
		assert_int_equal(resil_call(p, scripted, &st), 0);
		assert_int_equal(nslept, 1);
		assert_int_equal(slept[0], 3 * S);
	}
	assert_int_equal(resil_call(NULL, scripted, &s), -EINVAL);
	resil_close(r);
}

static void test_call_breaker_rejects(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *p = define(r, "brk",
				   "breaker.window = consecutive:2; breaker.wait = 60s; "
				   "retry.max_attempts = 1");
	const int f[] = {1};
	struct script s = {f, 1, 0};
	const int fp[] = {RESIL_ERR_PERMANENT};

	(void)state;
	/* permanent errors are ignored by the breaker */
	for (int i = 0; i < 5; i++) {
		struct script sp = {fp, 1, 0};

		assert_int_equal(resil_call(p, scripted, &sp),
				 RESIL_CALL_ERR + RESIL_ERR_PERMANENT);
	}
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(resil_call(p, scripted, &s), RESIL_CALL_ERR + RESIL_ERR_TRANSIENT);
	s.calls = 0;
	assert_int_equal(resil_call(p, scripted, &s), RESIL_CALL_ERR + RESIL_ERR_TRANSIENT);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	s.calls = 0;
	assert_int_equal(resil_call(p, scripted, &s), RESIL_REJECT_OPEN);
	assert_int_equal(s.calls, 0);
	resil_close(r);
}

static void test_shared_budget(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *a, *b;
	const int f[] = {1, 1, 1, 1};
	int refused_b = 0;

	(void)state;
	define(r, "@shared", "retry.budget = aws:30");
	a = define(r, "a", "retry.budget = @shared; retry.jitter = none");
	b = define(r, "b", "retry.budget = @shared; retry.jitter = none");
	/* a's failures drain the bucket: 30 -> 16 -> 2 */
	{
		struct script s = {f, 4, 0};

		assert_int_equal(resil_call(a, scripted, &s), RESIL_CALL_ERR + RESIL_ERR_TRANSIENT);
		assert_int_equal(s.calls, 3);
	}
	/* b cannot retry any more */
	{
		struct script s = {f, 4, 0};

		refused_b = resil_call(b, scripted, &s);
		assert_int_equal(refused_b, RESIL_REJECT_BUDGET);
		assert_int_equal(s.calls, 1);
	}
	/* the public loop says why */
	{
		resil_retry_t rt;

		resil_retry_begin(a, &rt, 0);
		assert_true(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0);
		assert_string_equal(resil_retry_reason(&rt), "retry budget exhausted");
	}
	/* two refusals, one episode: one event */
	{
		const struct resil_seg *seg = &r->seg;
		uint64_t head = ld_acquire(&seg->st->event_head);
		int n = 0;

		for (uint64_t i = 0; i < head; i++) {
			struct resil_event *e = resil_seg_event(seg, i);

			if (ld_acquire(&e->seq) == i + 1 && e->type == RESIL_EV_BUDGET_EXHAUSTED)
				n++;
		}
		assert_int_equal(n, 1);
	}
	resil_close(r);
}

/* ---- a budget shared by 4 forked processes on the embedded segment ---- */

struct flaky {
	uint64_t seed;
	uint32_t fail_pm;
	int cls;
};
static int flaky_fn(void *arg, resil_attempt_t *a)
{
	struct flaky *f = arg;

	(void)a;
	return resil_splitmix64(&f->seed) % 1000 < f->fail_pm ? f->cls : 0;
}

struct fleet_result {
	long calls, refused, failed;
};

/* 4 children call p n times each; returns the sums. */
static void fleet_run(resil_policy_t *p, int n, uint32_t fail_pm, struct fleet_result *sum)
{
	struct fleet_result *res =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid[4];

	assert_true(res != MAP_FAILED);
	for (int k = 0; k < 4; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] == 0) {
			struct flaky f = {1000003u * (uint64_t)(k + 1), fail_pm,
					  RESIL_ERR_TRANSIENT};

			for (int i = 0; i < n; i++) {
				int rc = resil_call(p, flaky_fn, &f);

				res[k].calls++;
				if (rc == RESIL_REJECT_BUDGET)
					res[k].refused++;
				else if (rc != 0)
					res[k].failed++;
			}
			_exit(0);
		}
	}
	memset(sum, 0, sizeof(*sum));
	for (int k = 0; k < 4; k++) {
		int st;

		assert_int_equal(waitpid(pid[k], &st, 0), pid[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		sum->calls += res[k].calls;
		sum->refused += res[k].refused;
		sum->failed += res[k].failed;
	}
	munmap(res, 4096);
}

static int64_t budget_tokens(resil_policy_t *p)
{
	const struct resil_retry_conf *bc;
	struct resil_ctx x;
	int err;
	const struct resil_rec *rec = resil_priv_ctx(p, &x, &err);
	void *b;

	assert_non_null(rec);
	b = resil_budget_state_for(x.seg, rec, &bc);
	assert_non_null(b);
	return resil_budget_tokens_milli(b, bc, 0);
}

static void test_fleet_budgets_embedded(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *hi = define(r, "aws30", "retry.budget = aws:500; retry.jitter = none");
	resil_policy_t *lo = define(r, "aws15", "retry.budget = aws:500; retry.jitter = none");
	resil_policy_t *g = define(r, "grpc60", "retry.budget = grpc:100:0.1; retry.jitter = none");
	struct fleet_result s;
	int n = 2000 * scale();

	(void)state;
	fleet_run(hi, n, 300, &s);
	assert_int_equal(s.calls, 4L * n);
	assert_true(s.refused > 0);
	/* drained: it hovers near empty (successes refill it by 1, the next
	 * retry takes 14), far below the 500 it started with */
	assert_true(budget_tokens(hi) < 100 * 1000);

	fleet_run(lo, n, 150, &s);
	assert_int_equal(s.refused, 0);
	assert_true(budget_tokens(lo) > 300 * 1000);

	/* gRPC at 60% failures: the tokens end at or below half, where no
	 * process retries any more */
	fleet_run(g, n, 600, &s);
	assert_true(s.refused > 0);
	assert_true(budget_tokens(g) <= 50 * 1000);
	resil_close(r);
}

static int nested_inner(void *arg, resil_attempt_t *a)
{
	int64_t *seen = arg;

	*seen = resil_attempt_deadline(a);
	return 0;
}
struct nest {
	resil_policy_t *inner;
	int64_t seen, outer_deadline;
	int rc;
};
static int nested_outer(void *arg, resil_attempt_t *a)
{
	struct nest *n = arg;

	n->outer_deadline = resil_attempt_deadline(a);
	n->rc = resil_call(n->inner, nested_inner, &n->seen);
	return 0;
}

static void test_nested_deadline(void **state)
{
	resil_t *r = open_manual();
	struct nest n = {0};
	resil_policy_t *outer = define(r, "outer", "timeout = 1s");
	int64_t t0 = atomic_load(&mclock);

	(void)state;
	n.inner = define(r, "inner", "timeout = 5s");
	assert_int_equal(resil_call(outer, nested_outer, &n), 0);
	assert_int_equal(n.rc, 0);
	assert_int_equal(n.outer_deadline, t0 + 1 * S);
	/* min(own 5 s, caller's remaining 1 s) */
	assert_int_equal(n.seen, t0 + 1 * S);

	/* a retry loop begun inside an attempt stops at its deadline */
	{
		resil_retry_t rt;
		char buf[128];

		resil_policy_t *lp = define(r, "loop", "retry.jitter = none; retry.base = 100ms");

		t0 = atomic_load(&mclock);
		resil_retry_begin(lp, &rt, t0 + 300 * MS);
		atomic_fetch_add(&mclock, 260 * MS);
		assert_true(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0);
		snprintf(buf, sizeof(buf), "%s", resil_retry_reason(&rt));
		assert_string_equal(buf,
				    "attempt 2 would start at 360 ms, after the 300 ms deadline");
	}
	resil_close(r);
}

static int ok_fn(void *arg, resil_attempt_t *a)
{
	(void)a;
	(*(long *)arg)++;
	return 0;
}

static void test_no_alloc_success_path(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *p = define(r, "hot",
				   "breaker.window = count:100; retry.budget = aws:500; "
				   "timeout = 1s");
	long n = 0;

	(void)state;
#ifdef NO_MALLOC_COUNT
	skip();
#endif
	/* warm: first calls may set up per-thread state */
	for (int i = 0; i < 10; i++)
		assert_int_equal(resil_call(p, ok_fn, &n), 0);
	atomic_store(&allocs, 0);
	atomic_store(&counting, 1);
	for (int i = 0; i < 10000; i++)
		resil_call(p, ok_fn, &n);
	atomic_store(&counting, 0);
	assert_int_equal(n, 10010);
	assert_int_equal(atomic_load(&allocs), 0);
	resil_close(r);
}

/* ---- the watchdog, real clock ---- */

static int blocked_read(void *arg, resil_attempt_t *a)
{
	int *fds = arg;
	char c;
	ssize_t n = read(fds[0], &c, 1);

	(void)a;
	if (n < 0 && errno == EINTR)
		return RESIL_ERR_TIMEOUT;
	return n == 1 ? 0 : RESIL_ERR_TRANSIENT;
}

static int64_t mono(void);

static resil_t *open_real(void)
{
	resil_t *r = NULL;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	resil_priv_call_sleep = NULL;
	return r;
}

static void test_watchdog_interrupts_read(void **state)
{
	resil_t *r = open_real();
	resil_policy_t *p = define(r, "slow",
				   "timeout = 50ms; timeout.interrupt = SIGUSR2; "
				   "retry.max_attempts = 1");
	int fds[2];

	(void)state;
	assert_int_equal(pipe(fds), 0);
	alarm(20); /* a hang fails the test instead of the suite */
	{
		int64_t t = mono();

		assert_int_equal(resil_call(p, blocked_read, fds),
				 RESIL_CALL_ERR + RESIL_ERR_TIMEOUT);
		/* never before the deadline (after it: whenever the machine lets) */
		assert_true(mono() - t >= 50 * MS);
	}
	/* nothing pending afterwards: a blocking call is not disturbed */
	{
		struct pollfd pf = {fds[0], POLLIN, 0};

		assert_int_equal(write(fds[1], "x", 1), 1);
		assert_int_equal(poll(&pf, 1, 1000), 1);
		assert_int_equal(resil_call(p, blocked_read, fds), 0);
	}
	/* a forked child has no watchdog thread: it starts its own (TSan
	 * cannot start threads after a multi-threaded fork) */
#ifndef __SANITIZE_THREAD__
	{
		pid_t pid = fork();
		int st;

		assert_true(pid >= 0);
		if (pid == 0) {
			alarm(20);
			_exit(resil_call(p, blocked_read, fds) == RESIL_CALL_ERR + RESIL_ERR_TIMEOUT
				  ? 0
				  : 1);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
#endif
	alarm(0);
	close(fds[0]);
	close(fds[1]);
	resil_close(r);
}

static int64_t mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * S + ts.tv_nsec;
}

/* spins until the deadline plus an offset in [-250 us, +250 us) */
static int spin_around(void *arg, resil_attempt_t *a)
{
	uint64_t *seed = arg;
	int64_t off = (int64_t)(resil_splitmix64(seed) % (500 * US)) - 250 * US;
	int64_t until = resil_attempt_deadline(a) + off;

	while (mono() < until)
		;
	return 0;
}

static void test_watchdog_no_stray_signal(void **state)
{
	resil_t *r = open_real();
	resil_policy_t *p = define(r, "edge",
				   "timeout = 250us; timeout.interrupt = SIGUSR2; "
				   "retry.max_attempts = 1");
	sigset_t set, pend, old;
	uint64_t seed = 99;
	int n = 10000 * scale(), stray = 0;

	uint64_t fired0 = ld_relaxed(&resil_priv_wd_fired);

	(void)state;
	/* blocked in this thread: a signal that was sent stays pending where
	 * sigpending sees it, instead of landing somewhere unseen */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	for (int i = 0; i < n; i++) {
		resil_call(p, spin_around, &seed);
		sigpending(&pend);
		if (sigismember(&pend, SIGUSR2)) {
			stray++;
			sigwaitinfo(&set, NULL);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	assert_int_equal(stray, 0);
	/* the race was run: some calls were still running when the
	 * watchdog fired, some had ended */
	assert_true(ld_relaxed(&resil_priv_wd_fired) - fired0 > 0);
	assert_true(ld_relaxed(&resil_priv_wd_fired) - fired0 < (uint64_t)n);
	resil_close(r);
}

/* ---- hedging ---- */

static _Atomic uint64_t invocations;

/*
 * The tail, exactly, on the manual clock (the hedge's delay is measured on
 * the policy's clock): a seeded 1 call in 20 is slow, 150 ms of the
 * manual clock, the others 2 ms. Without hedging the slow ones end 150 ms
 * later, one invocation each. With hedge.delay = 20ms, a fast primary ends
 * before the clock reaches its delay (no hedge, ever); a slow one moves
 * the clock past it and then waits for its hedge (attempt 2), which
 * answers at once: the primary sees itself cancelled, and the call
 * succeeds. So exactly one extra invocation per slow call, none for the
 * others, and every call succeeds.
 */
static _Atomic int tail_hedges, tail_cancelled;

static bool tail_slow(uint64_t call)
{
	uint64_t s = call * 7919 + 13;

	return resil_splitmix64(&s) % 20 == 0;
}

struct tail_call {
	uint64_t call;
	bool hedged; /* the policy hedges: a slow primary waits for its hedge */
};

static int manual_tail(void *arg, resil_attempt_t *a)
{
	const struct tail_call *t = arg;

	atomic_fetch_add(&invocations, 1);
	if (resil_attempt_number(a) > 1) {
		atomic_fetch_add(&tail_hedges, 1);
		return 0;
	}
	if (!tail_slow(t->call)) {
		atomic_fetch_add(&mclock, 2 * MS);
		return 0;
	}
	atomic_fetch_add(&mclock, 150 * MS);
	/* the hedged policy's primary: until its hedge won (10 s at most) */
	for (int i = 0; i < 10000 && t->hedged; i++) {
		struct timespec ts = {0, 1 * MS};

		if (resil_attempt_cancelled(a)) {
			atomic_fetch_add(&tail_cancelled, 1);
			return RESIL_ERR_TRANSIENT;
		}
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* n calls; how many took 100 ms or more of the manual clock */
static int manual_run(resil_policy_t *p, int n, bool hedged)
{
	int over = 0;

	for (uint64_t call = 0; call < (uint64_t)n; call++) {
		struct tail_call tc = {call, hedged};
		int64_t t = atomic_load(&mclock);

		assert_int_equal(resil_call(p, manual_tail, &tc), 0);
		if (atomic_load(&mclock) - t >= 100 * MS)
			over++;
	}
	return over;
}

static void test_hedging_tail(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *plain = define(r, "plain", "retry.max_attempts = 1");
	resil_policy_t *hedged = define(r, "hedged",
					"retry.max_attempts = 1; hedge.delay = 20ms; "
					"hedge.max = 1; idempotent = yes");
	int n = 200, slow = 0;

	(void)state;
	for (uint64_t call = 0; call < (uint64_t)n; call++)
		slow += tail_slow(call);
	assert_true(slow >= 3); /* the seed gives a tail */
	atomic_store(&invocations, 0);
	atomic_store(&tail_hedges, 0);
	atomic_store(&tail_cancelled, 0);
	assert_int_equal(manual_run(plain, n, false), slow);
	assert_int_equal(atomic_load(&invocations), (uint64_t)n);
	assert_int_equal(atomic_load(&tail_hedges), 0);

	atomic_store(&invocations, 0);
	manual_run(hedged, n, true);
	assert_int_equal(atomic_load(&tail_hedges), slow);
	assert_int_equal(atomic_load(&tail_cancelled), slow);
	assert_int_equal(atomic_load(&invocations), (uint64_t)(n + slow));
	resil_close(r);
}

/*
 * unit_call --hot-loop N [interrupt]: N successful resil_calls between two
 * getppid() markers, for tests/sh_retry_syscalls.sh to count the
 * syscalls in between with strace (none expected).
 */
static int hot_loop(int n, bool interrupt)
{
	resil_t *r = NULL;
	resil_policy_t *p = NULL;
	long cnt = 0;

	if (resil_open_embedded(&r, NULL) != 0)
		return 1;
	if (resil_define(r, "hot",
			 interrupt ? "breaker.window = count:100; retry.budget = aws:500; "
				     "timeout = 10s; timeout.interrupt = SIGUSR2"
				   : "breaker.window = count:100; retry.budget = aws:500; "
				     "timeout = 10s") != 0 ||
	    resil_policy(r, "hot", &p) != 0)
		return 1;
	for (int i = 0; i < 100; i++) /* warm: lazy per-thread and per-process set-up */
		resil_call(p, ok_fn, &cnt);
	syscall(SYS_getppid);
	for (int i = 0; i < n; i++)
		resil_call(p, ok_fn, &cnt);
	syscall(SYS_getppid);
	resil_close(r);
	return cnt == n + 100 ? 0 : 1;
}

/*
 * hedge.delay = p95, exactly, on the manual clock. A seeded latency per
 * call: 2..6 ms (85 in 100), 20..40 ms (12 in 100) or 150 ms (3 in 100).
 * 600 decisions of the policy (acquire, the clock moved by the latency,
 * release) fill its histogram; the test keeps the same histogram (the
 * same buckets, stats.h) and reads its p95 the way the policy defines it:
 * the middle of the bucket holding the ceil(0.95 n)-th smallest duration.
 * Then 200 calls: a primary whose latency is below the p95 moves the
 * clock by it and ends before its hedge may start (no hedge); one whose
 * latency is the p95 or more moves the clock to start + p95, the instant
 * its hedge may start, and waits for it; the hedge answers at once (a
 * duration of 0), the primary sees itself cancelled and records no
 * duration (an ignored outcome). The test's histogram follows those
 * outcomes and shows the p95 never moves during the calls, so whatever
 * the policy's cache of it does, the hedged calls are exactly those at or
 * past it, each costs one extra invocation, and each call takes
 * min(latency, p95) of the clock.
 */
#define P95_WARM  600
#define P95_CALLS 200

static int64_t p95_latency(uint64_t i)
{
	uint64_t s = i * 104729 + 7, r = resil_splitmix64(&s), u = r >> 32;

	if (r % 100 < 3)
		return 150 * MS;
	if (r % 100 < 15)
		return 20 * MS + (int64_t)(u % (20 * MS));
	return 2 * MS + (int64_t)(u % (4 * MS));
}

/* The test's copy of the policy's histogram, and its p95 */
static uint64_t p95_counts[RESIL_HIST_BUCKETS], p95_n;

static void p95_record(int64_t ns)
{
	p95_counts[resil_hist_index(ns)]++;
	p95_n++;
}

static int64_t p95_of_counts(void)
{
	double r = 0.95 * (double)p95_n;
	uint64_t rank = (uint64_t)r, cum = 0;

	if ((double)rank < r)
		rank++;
	for (unsigned b = 0; b < RESIL_HIST_BUCKETS; b++) {
		cum += p95_counts[b];
		if (cum >= rank)
			return resil_hist_lower_ns(b) +
			       (resil_hist_upper_ns(b) - resil_hist_lower_ns(b)) / 2;
	}
	fail_msg("rank %" PRIu64 " beyond %" PRIu64 " samples", rank, p95_n);
	return -1;
}

struct p95_call {
	uint64_t i;  /* index into p95_latency */
	int64_t p95; /* the test's */
};
static bool p95_hedged[P95_CALLS]; /* calls whose hedge ran */
static _Atomic int p95_cancelled;

static int p95_tail(void *arg, resil_attempt_t *a)
{
	const struct p95_call *c = arg;
	int64_t lat = p95_latency(c->i);

	atomic_fetch_add(&invocations, 1);
	if (resil_attempt_number(a) > 1) {
		p95_hedged[c->i - P95_WARM] = true;
		return 0;
	}
	if (lat < c->p95) {
		atomic_fetch_add(&mclock, lat);
		return 0;
	}
	atomic_fetch_add(&mclock, c->p95);
	for (int k = 0; k < 10000; k++) { /* until its hedge won (10 s at most) */
		struct timespec ts = {0, 1 * MS};

		if (resil_attempt_cancelled(a)) {
			atomic_fetch_add(&p95_cancelled, 1);
			return RESIL_ERR_TRANSIENT;
		}
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_hedging_p95(void **state)
{
	resil_t *r = open_manual();
	resil_policy_t *p = define(r, "p95",
				   "histogram = on; retry.max_attempts = 1; "
				   "hedge.delay = p95; idempotent = yes");
	const struct resil_rec *rec;
	struct resil_ctx x;
	int64_t p95;
	int err, hedged = 0, medium = 0, slow = 0;

	(void)state;
	memset(p95_counts, 0, sizeof(p95_counts));
	p95_n = 0;
	memset(p95_hedged, 0, sizeof(p95_hedged));
	atomic_store(&p95_cancelled, 0);
	rec = resil_priv_ctx(p, &x, &err);
	assert_non_null(rec);
	assert_int_equal(resil_stats_p95_ns(x.seg, rec), -1); /* no sample, no p95 */
	for (uint64_t i = 0; i < P95_WARM; i++) {
		resil_permit_t pm;

		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		atomic_fetch_add(&mclock, p95_latency(i));
		resil_release(p, &pm, RESIL_SUCCESS);
		p95_record(p95_latency(i));
	}
	p95 = p95_of_counts();
	/* the policy's reading is the test's: the p95 every hedge waits for */
	assert_int_equal(resil_stats_p95_ns(x.seg, rec), p95);
	assert_true(p95 > 20 * MS && p95 < 40 * MS); /* the seed puts it among the 20..40 ms */

	atomic_store(&invocations, 0);
	for (uint64_t i = P95_WARM; i < P95_WARM + P95_CALLS; i++) {
		struct p95_call c = {i, p95};
		int64_t lat = p95_latency(i), t = atomic_load(&mclock);
		bool past = lat >= p95;

		assert_int_equal(resil_call(p, p95_tail, &c), 0);
		assert_int_equal(p95_hedged[i - P95_WARM], past);
		assert_int_equal(atomic_load(&mclock) - t, past ? p95 : lat);
		/* what the policy recorded: the hedge's 0, else the primary's latency */
		p95_record(past ? 0 : lat);
		assert_int_equal(p95_of_counts(), p95);
		hedged += past;
		medium += past && lat < 100 * MS;
		slow += past && lat >= 100 * MS;
	}
	assert_true(medium >= 3 && slow >= 3); /* the seed hedges both kinds */
	assert_int_equal(atomic_load(&p95_cancelled), hedged);
	assert_int_equal(atomic_load(&invocations), (uint64_t)(P95_CALLS + hedged));
	assert_int_equal(resil_stats_p95_ns(x.seg, rec), p95);
	resil_close(r);
}

/*
 * Finished rounds leave the hedge pool's queue at once, even while no
 * worker is free to come by. 24 calls from threads of their own make
 * every worker busy: each call's hedge starts once the manual clock has
 * moved 20 ms and then blocks until a gate opens (the hedges no worker
 * took stay queued). This thread then makes 100 calls
 * that end before their delay (each posts a hedge and takes it back),
 * more than the queue holds, and one whose primary moves the clock past
 * its delay and opens the gate: its hedge is queued, runs once a worker
 * is free, and wins. None of the 100 is hedged.
 */
#define BUSY_CALLS 24

static _Atomic int busy_primaries, busy_hedges, busy_gate, busy_mine;

struct busy_call {
	int kind; /* 0: a call that holds a worker, 1: a fast one, 2: the slow one */
};

static int busy_fn(void *arg, resil_attempt_t *a)
{
	const struct busy_call *c = arg;

	if (resil_attempt_number(a) > 1) {
		if (c->kind) {
			atomic_fetch_add(&busy_mine, 1);
			return 0;
		}
		atomic_fetch_add(&busy_hedges, 1);
		for (int k = 0; k < 10000 && !atomic_load(&busy_gate); k++)
			nanosleep(&(struct timespec){0, 1 * MS}, NULL);
		return RESIL_ERR_TRANSIENT;
	}
	if (c->kind == 1) {
		atomic_fetch_add(&mclock, 2 * MS);
		return 0;
	}
	if (c->kind == 2) {
		atomic_fetch_add(&mclock, 20 * MS);
		atomic_store(&busy_gate, 1);
		for (int k = 0; k < 10000 && !resil_attempt_cancelled(a); k++)
			nanosleep(&(struct timespec){0, 1 * MS}, NULL);
		return resil_attempt_cancelled(a) ? RESIL_ERR_TRANSIENT : 0;
	}
	atomic_fetch_add(&busy_primaries, 1);
	for (int k = 0; k < 10000 && !atomic_load(&busy_gate); k++)
		nanosleep(&(struct timespec){0, 1 * MS}, NULL);
	return 0;
}

static resil_policy_t *busy_policy;

static void *busy_thread(void *arg)
{
	static const struct busy_call hold = {0};

	*(int *)arg = resil_call(busy_policy, busy_fn, (void *)&hold);
	return NULL;
}

static bool eventually_at_least(_Atomic int *v, int n)
{
	for (int k = 0; k < 10000; k++) {
		if (atomic_load(v) >= n)
			return true;
		nanosleep(&(struct timespec){0, 1 * MS}, NULL);
	}
	return false;
}

static void test_hedging_busy_pool(void **state)
{
	resil_t *r = open_manual();
	pthread_t th[BUSY_CALLS];
	int rc[BUSY_CALLS];
	struct busy_call fast = {1}, slow = {2};

	(void)state;
	assert_true(BUSY_CALLS > resil_priv_hedge_threads);
	busy_policy = define(r, "busy",
			     "retry.max_attempts = 1; hedge.delay = 20ms; hedge.max = 1; "
			     "idempotent = yes");
	atomic_store(&busy_primaries, 0);
	atomic_store(&busy_hedges, 0);
	atomic_store(&busy_gate, 0);
	atomic_store(&busy_mine, 0);
	for (int i = 0; i < BUSY_CALLS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, busy_thread, &rc[i]), 0);
	/* every hedge posted, then due: every worker runs one, blocked */
	assert_true(eventually_at_least(&busy_primaries, BUSY_CALLS));
	atomic_fetch_add(&mclock, 20 * MS);
	assert_true(eventually_at_least(&busy_hedges, resil_priv_hedge_threads));
	for (int i = 0; i < 100; i++)
		assert_int_equal(resil_call(busy_policy, busy_fn, &fast), 0);
	assert_int_equal(atomic_load(&busy_mine), 0);
	assert_int_equal(atomic_load(&busy_hedges), resil_priv_hedge_threads);
	/* its hedge was queued behind the busy ones: it runs, and wins */
	assert_int_equal(resil_call(busy_policy, busy_fn, &slow), 0);
	assert_int_equal(atomic_load(&busy_mine), 1);
	for (int i = 0; i < BUSY_CALLS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(rc[i], 0);
	}
	resil_close(r);
}

/* hedges pay the retry budget: aws:14 pays for exactly one */
static _Atomic int hedge_ran;
static resil_policy_t *hb_policy;

static struct resil_budget_state *budget_of(resil_policy_t *p)
{
	const struct resil_retry_conf *bc;
	struct resil_ctx x;
	int err;
	const struct resil_rec *rec = resil_priv_ctx(p, &x, &err);

	assert_non_null(rec);
	return resil_budget_state_for(x.seg, rec, &bc);
}

static int hedge_or_wait(void *arg, resil_attempt_t *a)
{
	struct resil_budget_state *b = arg;

	if (resil_attempt_number(a) > 1) {
		atomic_fetch_add(&hedge_ran, 1);
		return RESIL_ERR_TRANSIENT; /* the hedge fails: its 14 stay spent */
	}
	/* the primary: until its hedge ran or was refused (10 s at most) */
	for (int i = 0; i < 2000; i++) {
		struct timespec ts = {0, 5 * MS};

		if (atomic_load(&hedge_ran) ||
		    ld_relaxed(&b->counters[RESIL_BUDGET_CNT_REFUSED]) > 0)
			break;
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_hedging_budget(void **state)
{
	resil_t *r = open_real();
	struct resil_budget_state *b;

	(void)state;
	hb_policy = define(r, "hb", "retry.budget = aws:14; hedge.delay = 1ms; idempotent = yes");
	b = budget_of(hb_policy);
	atomic_store(&hedge_ran, 0);
	assert_int_equal(resil_call(hb_policy, hedge_or_wait, b), 0);
	assert_int_equal(atomic_load(&hedge_ran), 1);
	assert_int_equal(ld_relaxed(&b->counters[RESIL_BUDGET_CNT_HEDGES]), 1);
	/* a first attempt that succeeds refunds 1: 14 - 14 + 1 */
	assert_int_equal(ld_relaxed(&b->tokens_milli), 1000);
	atomic_store(&hedge_ran, 0);
	assert_int_equal(resil_call(hb_policy, hedge_or_wait, b), 0);
	assert_int_equal(atomic_load(&hedge_ran), 0);
	assert_int_equal(ld_relaxed(&b->counters[RESIL_BUDGET_CNT_REFUSED]), 1);
	resil_close(r);
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--hot-loop") == 0)
		return hot_loop(atoi(argv[2]), argc > 3 && strcmp(argv[3], "interrupt") == 0);

	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_call_retries),
	    cmocka_unit_test(test_call_breaker_rejects),
	    cmocka_unit_test(test_shared_budget),
	    cmocka_unit_test(test_fleet_budgets_embedded),
	    cmocka_unit_test(test_nested_deadline),
	    cmocka_unit_test(test_no_alloc_success_path),
	    cmocka_unit_test(test_watchdog_interrupts_read),
	    cmocka_unit_test(test_watchdog_no_stray_signal),
	    cmocka_unit_test(test_hedging_tail),
	    cmocka_unit_test(test_hedging_p95),
	    cmocka_unit_test(test_hedging_busy_pool),
	    cmocka_unit_test(test_hedging_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

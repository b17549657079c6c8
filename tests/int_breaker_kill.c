/* SPDX-License-Identifier: MIT */
/*
 * int_breaker_kill.c - processes SIGKILLed inside the breaker's crash
 * windows, and what reclaim gives back.
 *
 *   1. a prober killed while it holds the only half-open probe: nobody
 *      else gets one until resil_breaker_reclaim returns it (counted),
 *      then a probe goes and the breaker closes;
 *   2. a writer dead between its slot exchange and its counter update
 *      (half the record steps, then _exit): counters skewed, reclaim
 *      repairs them from the slots (counted);
 *   3. writers killed at arbitrary points of a busy count window and of
 *      a cycling consecutive breaker: after each reclaim the counters
 *      equal the slots and the dead process owns no probe slot.
 *
 * The breaker state and the manual clock live in MAP_SHARED pages. Every
 * wait for a child is "eventually, within 10 s".
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "resil.h"
#include "breaker.h"
#include "conf.h"
#include "testutil.h"

#define S RESIL_NS_PER_S

struct shared {
	alignas(RESIL_HOT_ALIGN) _Atomic int64_t now;
	_Atomic long calls;  /* a child's progress */
	_Atomic int holding; /* the child holds a probe */
	alignas(RESIL_HOT_ALIGN) char st[];
};

static struct shared *sh;
static struct resil_breaker_conf conf;
static size_t sh_size;

static int64_t shared_clock(void *ctx)
{
	return atomic_load((_Atomic int64_t *)ctx);
}

static struct resil_breaker_state *bst(void)
{
	return (struct resil_breaker_state *)sh->st;
}

static void ctx(struct resil_ctx *x, uint32_t id)
{
	memset(x, 0, sizeof(*x));
	x->clock.fn = shared_clock;
	x->clock.ctx = &sh->now;
	x->client_id = id;
}

static void setup(const char *cfg)
{
	struct resil_conf c;
	char err[256];

	if (sh)
		munmap(sh, sh_size);
	resil_conf_init(&c);
	if (resil_conf_parse(&c, cfg, 1, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", cfg, err);
		exit(1);
	}
	conf = c.breaker;
	sh_size = sizeof(*sh) + resil_breaker_state_size(&conf);
	sh = mmap(NULL, sh_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(sh != MAP_FAILED);
	atomic_store(&sh->now, 1000 * S);
	resil_breaker_state_init(sh->st, &conf, atomic_load(&sh->now));
}

static int call(uint32_t id, int outcome, struct resil_permit_priv *keep)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	int r;

	ctx(&x, id);
	memset(&pm, 0, sizeof(pm));
	r = resil_breaker_check(&x, &conf, bst(), &pm);
	if (!r)
		r = resil_breaker_acquire(&x, &conf, bst(), &pm);
	if (r)
		return r;
	if (keep) {
		*keep = pm;
		return 0;
	}
	x.now = 0;
	resil_breaker_release(&x, &conf, bst(), &pm, outcome);
	return 0;
}

static void histogram(struct resil_breaker_counts *h)
{
	ra32 *slots = (ra32 *)((char *)bst() + bst()->win_off);

	memset(h, 0, sizeof(*h));
	for (uint32_t i = 0; i < bst()->size; i++) {
		uint32_t v = atomic_load(&slots[i]);

		h->calls += v & 1;
		h->failures += (v >> 1) & 1;
		h->slow += (v >> 2) & 1;
	}
}

static bool counters_match(void)
{
	struct resil_breaker_counts k, h;

	resil_breaker_unpack(atomic_load(&bst()->counters), &k);
	histogram(&h);
	return k.calls == h.calls && k.failures == h.failures && k.slow == h.slow;
}

static bool owns_probe(uint32_t id)
{
	struct resil_breaker_probe *p =
	    (struct resil_breaker_probe *)((char *)bst() + bst()->probe_off);

	for (uint32_t i = 0; i < bst()->nprobe; i++) {
		uint64_t v = atomic_load(&p[i].owner);

		if (v && (uint32_t)v == id)
			return true;
	}
	return false;
}

static void kill_and_reap(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	status = test_wait_pid(pid, TEST_EVENTUALLY_MS);
	TEST_CHECK(status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* 1. the prober dies holding the only probe */
static void dead_prober(void)
{
	struct resil_reclaim_counts rc = {0};
	struct resil_ctx x;
	pid_t pid;

	setup("breaker.window = consecutive:1; breaker.wait = 1s; breaker.half_open_calls = 1;"
	      "breaker.half_open_max_wait = 1h");
	TEST_CHECK(call(1, RESIL_FAILURE, NULL) == 0);
	TEST_CHECK(resil_breaker_state(bst()) == RESIL_STATE_OPEN);
	atomic_fetch_add(&sh->now, 1 * S);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		struct resil_permit_priv pm;

		if (call(7, 0, &pm) != 0)
			_exit(2);
		atomic_store(&sh->holding, 1);
		for (;;)
			pause();
	}
	TEST_CHECK(TEST_EVENTUALLY(atomic_load(&sh->holding) == 1));
	kill_and_reap(pid);
	TEST_CHECK(resil_breaker_state(bst()) == RESIL_STATE_HALF_OPEN);
	TEST_CHECK(owns_probe(7));
	/* held by a dead process: nobody else gets a probe, even much later */
	atomic_fetch_add(&sh->now, 60 * S);
	TEST_CHECK(call(2, RESIL_SUCCESS, NULL) == RESIL_REJECT_OPEN);
	ctx(&x, 0);
	resil_breaker_reclaim(&x, &conf, bst(), 7, &rc);
	TEST_CHECK(rc.probes == 1);
	TEST_CHECK(!owns_probe(7));
	TEST_CHECK(call(2, RESIL_SUCCESS, NULL) == 0);
	TEST_CHECK(resil_breaker_state(bst()) == RESIL_STATE_CLOSED);
	printf("ok 1 - a dead prober's probe is reclaimed\n");
}

/* 2. a writer dies between the slot exchange and the counters */
static void dead_writer(void)
{
	struct resil_reclaim_counts rc = {0};
	struct resil_ctx x;
	pid_t pid;
	int status;

	setup("breaker.window = count:16; breaker.min_calls = 100");
	for (int i = 0; i < 20; i++)
		TEST_CHECK(call(1, i % 3 ? RESIL_SUCCESS : RESIL_FAILURE, NULL) == 0);
	TEST_CHECK(counters_match());
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		/* the record's first two steps, then death */
		ra32 *slots = (ra32 *)((char *)bst() + bst()->win_off);
		uint64_t s = atomic_fetch_add(&bst()->seq, 1);

		atomic_exchange(&slots[(uint32_t)s % 16], RESIL_BK_FAIL | RESIL_BK_SLOW);
		_exit(0);
	}
	status = test_wait_pid(pid, TEST_EVENTUALLY_MS);
	TEST_CHECK(status >= 0 && WIFEXITED(status));
	TEST_CHECK(!counters_match());
	ctx(&x, 0);
	resil_breaker_reclaim(&x, &conf, bst(), 9, &rc);
	TEST_CHECK(rc.repaired == 1);
	TEST_CHECK(counters_match());
	printf("ok 2 - a writer's half record is repaired\n");
}

/* 3. kills at arbitrary points */
static void hammer(uint32_t id, uint64_t seed)
{
	for (;;) {
		uint64_t r = resil_splitmix64(&seed);

		atomic_fetch_add(&sh->now, (int64_t)(r & 1023) * RESIL_NS_PER_US);
		call(id, (r >> 20) % 3 == 0 ? RESIL_FAILURE : RESIL_SUCCESS, NULL);
		atomic_fetch_add(&sh->calls, 1);
	}
}

static void random_kills(const char *cfg, int rounds, bool counts)
{
	long repaired = 0, probes = 0;

	setup(cfg);
	for (int round = 0; round < rounds; round++) {
		struct resil_reclaim_counts rc = {0};
		struct resil_ctx x;
		uint32_t id = 10 + (uint32_t)round;
		long before = atomic_load(&sh->calls);
		long want =
		    before + 1000 + (long)(resil_splitmix64(&(uint64_t){(uint64_t)round}) % 20000);
		pid_t pid = fork();

		TEST_CHECK(pid >= 0);
		if (pid == 0)
			hammer(id, (uint64_t)round * 31 + 7);
		int64_t t0 = test_mono_ns();

		/* the parent works on the same breaker meanwhile, until the
		 * child has made some progress (eventually, within 10 s) */
		while (atomic_load(&sh->calls) < want &&
		       test_mono_ns() - t0 < TEST_EVENTUALLY_MS * RESIL_NS_PER_MS) {
			ctx(&x, 1);
			call(1, RESIL_SUCCESS, NULL);
			resil_breaker_maintain(&x, &conf, bst());
			sched_yield();
		}
		TEST_CHECK(atomic_load(&sh->calls) >= want);
		kill_and_reap(pid);
		ctx(&x, 0);
		resil_breaker_reclaim(&x, &conf, bst(), id, &rc);
		repaired += rc.repaired;
		probes += rc.probes;
		TEST_CHECK(!owns_probe(id));
		if (counts)
			TEST_CHECK(counters_match());
	}
	printf("  %d kills: %ld counter repairs, %ld probes reclaimed\n", rounds, repaired, probes);
}

int main(void)
{
	int rounds = 20 * resil_test_scale();

	dead_prober();
	dead_writer();
	random_kills("breaker.window = count:64; breaker.min_calls = 1000", rounds, true);
	printf("ok 3 - kills in a busy count window: counters equal the slots\n");
	random_kills("breaker.window = consecutive:2; breaker.wait = 1ms;"
		     "breaker.half_open_calls = 3; breaker.half_open_max_wait = 1h",
		     rounds, false);
	/* with every dead prober reclaimed the breaker still gets its probes */
	{
		struct resil_ctx x;

		ctx(&x, 1);
		for (int i = 0; i < 100 && resil_breaker_state(bst()) != RESIL_STATE_CLOSED; i++) {
			atomic_fetch_add(&sh->now, 10 * RESIL_NS_PER_MS);
			x.now = 0;
			resil_breaker_maintain(&x, &conf, bst());
			call(1, RESIL_SUCCESS, NULL);
		}
		TEST_CHECK(resil_breaker_state(bst()) == RESIL_STATE_CLOSED);
	}
	printf("ok 4 - kills of probers in a cycling breaker: no probe lost\n");
	return 0;
}

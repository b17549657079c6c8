/* SPDX-License-Identifier: MIT */
/*
 * int_bulkhead_kill.c - workers SIGKILLed at random moments while they
 * take and give back bulkhead permits get exactly their permits back.
 *
 * Each round forks 4 workers, each with its own client id (a prefork
 * child holds permits under its own row), on one bulkhead and one
 * adaptive limit (the same permit pool, a limit of 3 under the bulkhead's
 * 4, so the adaptive step rejects and the bulkhead permit is undone, and
 * windows of 1 ms, so kills land inside a window decision too) in a
 * MAP_SHARED region, taken in the order of a policy's acquire. Two of
 * them spin acquire/release as fast as they can (so a kill lands inside a
 * claim or a release: the crash windows of bulkhead.c), one takes permits
 * and sits on them, and the fourth, with bulkhead.wait, waits on the
 * shared futex for a permit, without it spins too. After a random delay the test SIGKILLs them
 * all and plays the daemon's part: resil_bulkhead_reclaim for each dead
 * id.
 *
 * Three bulkheads, one after the other, each on a fresh block: fail-fast
 * (bulkhead.max = 4, the defaults otherwise: a permit is one CAS, a
 * release one CAS, a full hint), with waiters (bulkhead.wait = 20ms for
 * every worker, as for every record of such a block: a kill lands in a
 * waiter's claim too) and packed slots, as in pools above 1024 permits
 * (bulkhead.max = 4 + 1024, the top 1024 slots claimed by a filler
 * client that never dies, bulkhead.wait = 20ms). The adaptive limit's
 * pool is counted: its windows (between count and claim) are killed in.
 *
 * Asserted after every round (the filler's slots aside):
 *   - exactly 0 claimed slots (bulkhead and adaptive) and 0 claimed waiter
 *     slots (none lost, none reclaimed twice: a second reclaim returns
 *     nothing);
 *   - after two maintenance ticks, the adaptive pool's in-flight hint
 *     and the waiter count are exactly 0 again (the windows between
 *     counter and claim), the bulkhead's count word was never written,
 *     and the full hint is clear (a kill between a walk and the hint, or
 *     between a release and clearing it);
 *   - the bulkhead still admits max callers.
 * >= 200 rounds per bulkhead (x RESIL_TEST_SCALE).
 *
 * Then the same through the whole stack: a resild of the test's own, a
 * policy "bulkhead.max = 4; bulkhead.wait = 20ms" (waiting), one with
 * "bulkhead.critical = 20%" too (a partition that reserves nothing of 4:
 * the partition's walk), one "bulkhead.max = 4" (fail-fast) and one
 * "bulkhead.max = 1028; bulkhead.wait = 20ms" (packed slots; the
 * test's own process takes 1024 permits first and holds them to the
 * end), forked children of a connected process (each
 * claims its own client row) taking permits with resil_acquire and
 * SIGKILLed at random moments; the daemon notices the deaths and
 * reclaims: eventually (10 s) all 4 permits can be taken again and a
 * fifth is refused. 20 rounds per policy (x RESIL_TEST_SCALE).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resil.h"
#include "bulkhead.h"
#include "adaptive.h"
#include "testutil.h"

#define WORKERS 4
#define MAX	4
#define FILL	RESIL_POOL_SPREAD_MAX /* the packed blocks' filler slots */

struct shared {
	_Atomic long ops[WORKERS]; /* progress, so the test knows they run */
	struct resil_adaptive_conf aconf;
	struct resil_adaptive_state *ad; /* after the bulkhead state */
	alignas(RESIL_HOT_ALIGN) char st[];
};

/* A policy's acquire order: bulkhead, then adaptive; undo on rejection. */
static int take(struct shared *sh, const struct resil_bulkhead_conf *conf, struct resil_ctx *x,
		struct resil_permit_priv *pm)
{
	struct resil_bulkhead_state *st = (struct resil_bulkhead_state *)sh->st;

	memset(pm, 0, sizeof(*pm));
	x->now = 0;
	if (resil_bulkhead_acquire(x, conf, st, pm) != 0)
		return -1;
	if (resil_adaptive_acquire(x, &sh->aconf, sh->ad, pm) != 0) {
		resil_bulkhead_undo(x, conf, st, pm);
		return -1;
	}
	return 0;
}

static void give(struct shared *sh, const struct resil_bulkhead_conf *conf, struct resil_ctx *x,
		 struct resil_permit_priv *pm)
{
	x->now = 0;
	resil_adaptive_release(x, &sh->aconf, sh->ad, pm, RESIL_SUCCESS);
	resil_bulkhead_release(x, conf, (struct resil_bulkhead_state *)sh->st, pm, RESIL_SUCCESS);
}

static void spin_worker(struct shared *sh, const struct resil_bulkhead_conf *conf, uint32_t id,
			int w)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	x.client_id = id;
	for (;;) {
		if (take(sh, conf, &x, &pm) == 0)
			give(sh, conf, &x, &pm);
		atomic_fetch_add_explicit(&sh->ops[w], 1, memory_order_relaxed);
	}
}

static void hold_worker(struct shared *sh, const struct resil_bulkhead_conf *conf, uint32_t id,
			int w)
{
	struct resil_permit_priv pm[2];
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	x.client_id = id;
	for (;;) {
		int got = 0;

		for (int i = 0; i < 2; i++)
			if (take(sh, conf, &x, &pm[got]) == 0)
				got++;
		atomic_fetch_add_explicit(&sh->ops[w], 1, memory_order_relaxed);
		test_sleep_ms(1); /* sits on them */
		while (got)
			give(sh, conf, &x, &pm[--got]);
	}
}

/* ---- through the daemon ---- */

static _Atomic long *dops; /* children's progress, MAP_SHARED */

static void daemon_worker(resil_policy_t *p, int w, uint64_t seed)
{
	resil_permit_t pm[2];

	for (;;) {
		int got = 0, want = 1 + (int)(resil_splitmix64(&seed) % 2);

		for (int i = 0; i < want; i++)
			if (resil_acquire(p, &pm[got]) == RESIL_ADMIT)
				got++;
		atomic_fetch_add(&dops[w], 1);
		if (resil_splitmix64(&seed) % 4 == 0)
			test_sleep_ms(1); /* sometimes sits on them */
		while (got)
			resil_release(p, &pm[--got], RESIL_SUCCESS);
	}
}

/* All max permits can be taken and one more cannot. */
static bool whole(resil_policy_t *p)
{
	resil_permit_t pm[5];
	int got = 0;
	bool ok;

	for (int i = 0; i < 4; i++)
		if (resil_acquire(p, &pm[got]) == RESIL_ADMIT)
			got++;
	ok = got == 4;
	if (ok) {
		resil_permit_t extra;

		ok = resil_acquire(p, &extra) == RESIL_REJECT_FULL;
	}
	while (got)
		resil_release(p, &pm[--got], RESIL_IGNORED);
	return ok;
}

/* fill: permits this process takes first and holds to the end (a live
 * client: never reclaimed), so that a packed pool of 4 + fill permits
 * has 4 for the rounds. */
static void daemon_rounds(resil_t *r, const char *name, const char *config, int fill)
{
	int rounds = 20 * resil_test_scale(), slowest_ms = 0;
	resil_permit_t *held = fill ? calloc((size_t)fill, sizeof(*held)) : NULL;
	uint64_t seed = 0xfeedu;
	resil_policy_t *p;

	TEST_CHECK(resil_define(r, name, config) == 0);
	TEST_CHECK(resil_policy(r, name, &p) == 0);
	TEST_CHECK(!fill || held);
	for (int i = 0; i < fill; i++)
		TEST_CHECK(resil_acquire(p, &held[i]) == RESIL_ADMIT);
	TEST_CHECK(whole(p));

	for (int round = 0; round < rounds; round++) {
		pid_t pids[3];
		long start[3];
		int64_t t0;

		for (int w = 0; w < 3; w++) {
			start[w] = atomic_load(&dops[w]);
			pids[w] = fork();
			TEST_CHECK(pids[w] >= 0);
			if (pids[w] == 0)
				daemon_worker(p, w, resil_splitmix64(&seed) + (uint64_t)w);
		}
		for (int w = 0; w < 3; w++)
			TEST_CHECK(TEST_EVENTUALLY(atomic_load(&dops[w]) != start[w]));
		{
			struct timespec ts = {0, (long)(resil_splitmix64(&seed) % 3000) * 1000};

			nanosleep(&ts, NULL);
		}
		for (int w = 0; w < 3; w++)
			kill(pids[w], SIGKILL);
		for (int w = 0; w < 3; w++)
			TEST_CHECK(waitpid(pids[w], NULL, 0) == pids[w]);
		/* the daemon's pidfds see the deaths; reclaim and repair follow */
		t0 = test_mono_ns();
		TEST_CHECK(TEST_EVENTUALLY(whole(p)));
		if ((test_mono_ns() - t0) / RESIL_NS_PER_MS > slowest_ms)
			slowest_ms = (int)((test_mono_ns() - t0) / RESIL_NS_PER_MS);
	}
	for (int i = 0; i < fill; i++)
		resil_release(p, &held[i], RESIL_IGNORED);
	free(held);
	printf("through resild, '%s': %d rounds, every permit back each time (slowest %d ms)\n",
	       config, rounds, slowest_ms);
}

static int through_daemon(void)
{
	struct test_daemon d;
	resil_t *r = NULL;

	dops = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(dops != MAP_FAILED);
	if (test_daemon_open(&d, &r) < 0)
		return 1;
	daemon_rounds(r, "bulkhead-kill", "bulkhead.max = 4; bulkhead.wait = 20ms", 0);
	daemon_rounds(r, "bulkhead-kill-partition",
		      "bulkhead.max = 4; bulkhead.wait = 20ms; bulkhead.critical = 20%", 0);
	daemon_rounds(r, "bulkhead-kill-scan", "bulkhead.max = 4", 0);
	daemon_rounds(r, "bulkhead-kill-packed", "bulkhead.max = 1028; bulkhead.wait = 20ms", FILL);
	resil_close(r);
	test_daemon_fini(&d);
	munmap(dops, 4096);
	return 0;
}

/* Rounds of kills on one bulkhead block of conf (and of wconf, the
 * waiter's: the same block). */
static int kill_rounds(const struct resil_bulkhead_conf *cf, const struct resil_bulkhead_conf *wcf)
{
	const struct resil_bulkhead_conf conf = *cf, wconf = *wcf;
	struct shared *sh;
	int rounds = 200 * resil_test_scale();
	int excess_rounds = 0, reclaimed_rounds = 0, waiter_rounds = 0, odd_epochs = 0;
	int aexcess_rounds = 0;
	bool packed = !resil_bulkhead_spread(&conf);
	uint32_t fill = packed ? FILL : 0;
	uint64_t seed = 0x1234567u;
	char err[128];
	size_t size;

	TEST_CHECK(resil_bulkhead_same_shape(&conf, &wconf));
	struct resil_adaptive_conf aconf;
	resil_adaptive_conf_defaults(&aconf);
	if (resil_adaptive_conf_set(&aconf, "adaptive.max", "8", err, sizeof(err)) < 0 ||
	    resil_adaptive_conf_set(&aconf, "adaptive.initial", "3", err, sizeof(err)) < 0 ||
	    resil_adaptive_conf_set(&aconf, "adaptive.min", "3", err, sizeof(err)) < 0 ||
	    resil_adaptive_conf_set(&aconf, "adaptive.window", "1ms", err, sizeof(err)) < 0)
		return 1;
	uint64_t boff =
	    resil_align_up(sizeof(*sh) + resil_bulkhead_state_size(&conf), RESIL_HOT_ALIGN);
	size = boff + resil_adaptive_state_size(&aconf);
	sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	resil_bulkhead_state_init(sh->st, &conf, 0);
	if (fill)
		TEST_CHECK(test_bulkhead_fill(sh->st, MAX) == fill);
	sh->aconf = aconf;
	sh->ad = (struct resil_adaptive_state *)((char *)sh + boff);
	resil_adaptive_state_init(sh->ad, &aconf, test_mono_ns());
	struct resil_bulkhead_state *st = (struct resil_bulkhead_state *)sh->st;

	for (int r = 0; r < rounds; r++) {
		struct resil_reclaim_counts counts = {0}, again = {0};
		pid_t pids[WORKERS];
		uint32_t ids[WORKERS];
		struct resil_ctx x;
		long start[WORKERS];

		for (int w = 0; w < WORKERS; w++) {
			ids[w] = (uint32_t)(r * WORKERS + w + 1);
			start[w] = atomic_load(&sh->ops[w]);
			pids[w] = fork();
			if (pids[w] < 0) {
				perror("fork");
				return 1;
			}
			if (pids[w] == 0) {
				if (w < 2)
					spin_worker(sh, &conf, ids[w], w);
				else if (w == 2)
					hold_worker(sh, &conf, ids[w], w);
				else /* with bulkhead.wait: waits on the futex */
					spin_worker(sh, &wconf, ids[w], w);
				_exit(0);
			}
		}
		/* let them all get going, then kill at a random moment */
		for (int w = 0; w < WORKERS; w++)
			TEST_CHECK(TEST_EVENTUALLY(atomic_load(&sh->ops[w]) != start[w] ||
						   (w == 3 && atomic_load(&st->nwait) != 0)));
		{
			uint64_t us = resil_splitmix64(&seed) % 3000;
			struct timespec ts = {0, (long)us * 1000};

			nanosleep(&ts, NULL);
		}
		if (atomic_load(&st->nwait) != 0)
			waiter_rounds++;
		for (int w = 0; w < WORKERS; w++)
			kill(pids[w], SIGKILL);
		for (int w = 0; w < WORKERS; w++)
			TEST_CHECK(waitpid(pids[w], NULL, 0) == pids[w]);

		/* the daemon's part */
		memset(&x, 0, sizeof(x));
		for (int w = 0; w < WORKERS; w++) {
			resil_bulkhead_reclaim(&x, &conf, st, ids[w], &counts);
			resil_adaptive_reclaim(&x, &aconf, sh->ad, ids[w], &counts);
		}
		if (counts.permits)
			reclaimed_rounds++;
		TEST_CHECK(resil_bulkhead_held(&conf, st) == fill);
		TEST_CHECK(resil_adaptive_held(&aconf, sh->ad) == 0);
		for (unsigned i = 0; i < RESIL_BULKHEAD_WAITERS; i++)
			TEST_CHECK(atomic_load(&st->wslots[i]) == 0);
		for (int w = 0; w < WORKERS; w++) {
			resil_bulkhead_reclaim(&x, &conf, st, ids[w], &again);
			resil_adaptive_reclaim(&x, &aconf, sh->ad, ids[w], &again);
		}
		TEST_CHECK(again.permits == 0 && again.waiters == 0);
		TEST_CHECK(counts.permits <= 2 * MAX); /* adaptive permits ride on bulkhead ones */

		if (atomic_load(&st->nwait) != 0 || atomic_load(&st->full) != 0)
			excess_rounds++;
		if (atomic_load(&sh->ad->inflight) != 0)
			aexcess_rounds++;
		resil_bulkhead_maintain(&x, &conf, st);
		resil_bulkhead_maintain(&x, &conf, st);
		TEST_CHECK(atomic_load(&st->nwait) == 0);
		TEST_CHECK(atomic_load(&st->full) == 0);
		resil_adaptive_maintain(&x, &aconf, sh->ad);
		x.now = 0;
		resil_adaptive_maintain(&x, &aconf, sh->ad);
		TEST_CHECK(atomic_load(&sh->ad->inflight) == 0);
		/* a window decision cut short is taken over (8 windows later) */
		if (atomic_load(&sh->ad->epoch) & 1) {
			odd_epochs++;
			TEST_CHECK(
			    TEST_EVENTUALLY((x.now = 0, resil_adaptive_maintain(&x, &aconf, sh->ad),
					     (atomic_load(&sh->ad->epoch) & 1) == 0)));
		}

		/* and they are whole: max callers get in, one more does not */
		struct resil_permit_priv pm[16]; /* max + 1 of either */
		x.client_id = 999999;
		for (int i = 0; i < MAX; i++) {
			memset(&pm[i], 0, sizeof(pm[i]));
			TEST_CHECK(resil_bulkhead_acquire(&x, &conf, st, &pm[i]) == 0);
		}
		memset(&pm[MAX], 0, sizeof(pm[MAX]));
		TEST_CHECK(resil_bulkhead_acquire(&x, &conf, st, &pm[MAX]) == RESIL_REJECT_FULL);
		for (int i = 0; i < MAX; i++)
			resil_bulkhead_release(&x, &conf, st, &pm[i], RESIL_SUCCESS);
		TEST_CHECK(resil_bulkhead_held(&conf, st) == fill);
		uint32_t lim = resil_adaptive_limit(sh->ad);
		for (uint32_t i = 0; i < lim; i++) {
			memset(&pm[i], 0, sizeof(pm[i]));
			TEST_CHECK(resil_adaptive_acquire(&x, &aconf, sh->ad, &pm[i]) == 0);
		}
		memset(&pm[lim], 0, sizeof(pm[lim]));
		TEST_CHECK(resil_adaptive_acquire(&x, &aconf, sh->ad, &pm[lim]) ==
			   RESIL_REJECT_FULL);
		for (uint32_t i = 0; i < lim; i++)
			resil_adaptive_release(&x, &aconf, sh->ad, &pm[i], RESIL_IGNORED);
		TEST_CHECK(resil_adaptive_held(&aconf, sh->ad) == 0);
	}
	printf("%s%s, %d rounds: permits reclaimed in %d, a waiter killed in %d, a "
	       "bulkhead hint repaired after %d and the adaptive hint after %d (kills inside a "
	       "crash window), a window decision taken over in %d\n",
	       packed ? "packed" : "spread", conf.wait_ns ? " (waiting)" : "", rounds,
	       reclaimed_rounds, waiter_rounds, excess_rounds, aexcess_rounds, odd_epochs);
	munmap(sh, size);
	return 0;
}

int main(void)
{
	struct resil_bulkhead_conf conf, wconf;
	char err[128];

	/* the defaults; nobody waits */
	resil_bulkhead_conf_defaults(&conf);
	if (resil_bulkhead_conf_set(&conf, "bulkhead.max", "4", err, sizeof(err)) < 0)
		return 1;
	TEST_CHECK(resil_bulkhead_spread(&conf));
	if (kill_rounds(&conf, &conf))
		return 1;
	/* with waiters: every worker may wait */
	wconf = conf;
	wconf.wait_ns = 20 * RESIL_NS_PER_MS;
	if (kill_rounds(&wconf, &wconf))
		return 1;
	/* packed: 4 + FILL slots, FILL of them the filler's; every worker
	 * may wait */
	if (resil_bulkhead_conf_set(&wconf, "bulkhead.max", "1028", err, sizeof(err)) < 0)
		return 1;
	TEST_CHECK(!resil_bulkhead_spread(&wconf));
	if (kill_rounds(&wconf, &wconf))
		return 1;
	if (through_daemon())
		return 1;
	printf("ok\n");
	return 0;
}

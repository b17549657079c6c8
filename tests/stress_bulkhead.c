/* SPDX-License-Identifier: MIT */
/*
 * stress_bulkhead.c - 8 forked processes on one bulkhead in a MAP_SHARED
 * region, each taking up to 3 permits at once (normal and critical
 * priority) and holding them for random times; one run after the other,
 * each on a fresh block:
 *   - the defaults (every process fails fast; a permit is one CAS, a
 *     release one CAS, a saturated pool rejects on the full hint);
 *   - with waiters: bulkhead.wait = 1ms for every process (whether
 *     callers wait is part of a block's shape);
 *   - with a partition: bulkhead.critical = 20% (1 of 5 reserved) on
 *     top, every process waiting;
 *   - packed slots, as in pools above 1024 permits: 5 + 1024 permits,
 *     slots 4 to 1027 claimed by a filler client that never lets go,
 *     bulkhead.critical = 0.1% (the top slot of the 1029 reserved: normal
 *     callers have slots 0 to 3, as with the partition above),
 *     bulkhead.wait = 1ms.
 *
 * Invariants (validate part):
 *   - the number of claimed slots is never above bulkhead.max (5, the
 *     filler's aside): each holder counts itself in right after its claim
 *     and out right before its release (a count of claims, not the racy
 *     hint); with a partition, normal callers' never above 4;
 *   - at the end: 0 claimed slots, the count word untouched, no waiter
 *     counted (the filler's aside); after one daemon tick, no full hint
 *     (the race a release can lose against a walk is repaired there at
 *     the latest).
 * Then (bench part) the throughput of admissions is printed.
 *
 * Runs in a few seconds; RESIL_TEST_SCALE multiplies the rounds.
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
#include "bulkhead.h"
#include "testutil.h"

#define PROCS 8
#define MAX   5
#define FILL  RESIL_POOL_SPREAD_MAX /* the packed run's filler slots */

struct shared {
	_Atomic int inside; /* holders that counted themselves in */
	_Atomic int worst;  /* most at once, as holders saw it */
	_Atomic int inside_normal; /* the same for normal callers alone */
	_Atomic int worst_normal;
	int shared_max; /* permits normal callers may hold (of MAX) */
	_Atomic long admitted;
	_Atomic long rejected;
	_Atomic int ready;		    /* workers that are forked and about to start */
	alignas(RESIL_HOT_ALIGN) char st[]; /* the bulkhead state */
};

static void worker(struct shared *sh, const struct resil_bulkhead_conf *conf, uint32_t id,
		   long rounds)
{
	struct resil_bulkhead_state *st = (struct resil_bulkhead_state *)sh->st;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * id;
	long admitted = 0, rejected = 0;
	struct resil_permit_priv pm[3];
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	x.client_id = id;
	/* start together, so the processes overlap (a fail-fast round is
	 * short: a late fork would find the others done) */
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->ready) < PROCS)
		sched_yield();
	for (long r = 0; r < rounds; r++) {
		uint64_t rnd = resil_splitmix64(&seed);
		int want = 1 + (int)(rnd % 3), got = 0, i;

		for (i = 0; i < want; i++) {
			memset(&pm[got], 0, sizeof(pm[got]));
			pm[got].priority =
			    (rnd >> 8) % 4 == 0 ? RESIL_PRIO_CRITICAL : RESIL_PRIO_NORMAL;
			if (resil_bulkhead_acquire(&x, conf, st, &pm[got]) == 0) {
				int in = atomic_fetch_add(&sh->inside, 1) + 1;
				int w = atomic_load(&sh->worst);

				TEST_CHECK(in <= MAX);
				while (in > w && !atomic_compare_exchange_weak(&sh->worst, &w, in))
					;
				if (pm[got].priority == RESIL_PRIO_NORMAL) {
					in = atomic_fetch_add(&sh->inside_normal, 1) + 1;
					w = atomic_load(&sh->worst_normal);
					TEST_CHECK(in <= sh->shared_max);
					while (in > w && !atomic_compare_exchange_weak(
							     &sh->worst_normal, &w, in))
						;
				}
				got++;
				admitted++;
			} else {
				rejected++;
			}
		}
		/* hold: a random spin, sometimes a yield */
		for (volatile uint64_t s = 0; s < ((rnd >> 16) & 1023); s++)
			;
		if (((rnd >> 32) & 15) == 0)
			sched_yield();
		while (got > 0) {
			got--;
			atomic_fetch_sub(&sh->inside, 1);
			if (pm[got].priority == RESIL_PRIO_NORMAL)
				atomic_fetch_sub(&sh->inside_normal, 1);
			resil_bulkhead_release(&x, conf, st, &pm[got], RESIL_SUCCESS);
		}
	}
	atomic_fetch_add(&sh->admitted, admitted);
	atomic_fetch_add(&sh->rejected, rejected);
}

static int run(const struct resil_bulkhead_conf *cf)
{
	const struct resil_bulkhead_conf conf = *cf;
	bool packed = !resil_bulkhead_spread(&conf);
	uint32_t fill = packed ? FILL : 0;
	struct shared *sh;
	pid_t pids[PROCS];
	/* a fail-fast round never sleeps: more of them for as long a run;
	 * fewer where every process waits */
	long rounds = (conf.wait_ns ? 5000L : 150000L) * resil_test_scale();
	size_t size;
	int64_t t0, t1;
	int i, status, failed = 0;

	size = sizeof(*sh) + resil_bulkhead_state_size(&conf);
	sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	resil_bulkhead_state_init(sh->st, &conf, 0);
	if (fill) {
		/* slots 4..1028 held, then the reserved top slot given back */
		struct resil_pool p = resil_bulkhead_pool((struct resil_bulkhead_state *)sh->st);

		TEST_CHECK(test_bulkhead_fill(sh->st, MAX - 1) == fill + 1);
		atomic_store(&p.slots[(size_t)(p.n - 1) << p.shift], 0);
	}
	sh->shared_max = (int)(resil_bulkhead_shared(&conf, resil_bulkhead_max_of(&conf)) - fill);

	t0 = test_mono_ns();
	for (i = 0; i < PROCS; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			worker(sh, &conf, 1 + (uint32_t)i, rounds);
			_exit(0);
		}
	}
	for (i = 0; i < PROCS; i++) {
		if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "worker %d failed (status %#x)\n", i, status);
			failed = 1;
		}
	}
	t1 = test_mono_ns();

	struct resil_bulkhead_state *st = (struct resil_bulkhead_state *)sh->st;
	uint32_t full_at_end = atomic_load(&st->full);
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	resil_bulkhead_maintain(&x, &conf, st); /* the daemon's tick */
	printf("%s%s, max %d, %d for normal callers: most in flight %d (normal %d); held at "
	       "end %u, waiters %u, full hint %u (%u after a tick)\n",
	       packed ? "packed" : "spread", conf.wait_ns ? " (waiting)" : "", MAX, sh->shared_max,
	       atomic_load(&sh->worst), atomic_load(&sh->worst_normal),
	       resil_bulkhead_held(&conf, st) - fill, atomic_load(&st->nwait), full_at_end,
	       atomic_load(&st->full));
	printf("%d processes: %ld admitted, %ld rejected in %.2f s (%.0f admissions/s)\n", PROCS,
	       atomic_load(&sh->admitted), atomic_load(&sh->rejected), (t1 - t0) / 1e9,
	       atomic_load(&sh->admitted) / ((t1 - t0) / 1e9));
	if (atomic_load(&sh->worst) > MAX || atomic_load(&sh->worst_normal) > sh->shared_max)
		failed = 1;
	if (resil_bulkhead_held(&conf, st) != fill || atomic_load(&st->nwait) != 0 ||
	    atomic_load(&st->full) != 0)
		failed = 1;
	if (atomic_load(&sh->admitted) == 0 || atomic_load(&sh->worst) < MAX)
		failed = 1; /* the test must actually have filled the bulkhead */
	munmap(sh, size);
	printf("%s\n", failed ? "FAIL" : "ok");
	return failed;
}

/* conf with key = value added, whose slots must be spread or not as
 * wanted, then a run; 1 when the setting is refused, the layout is
 * another, or the run failed. */
static int run_with(struct resil_bulkhead_conf *conf, const char *key, const char *value,
		    bool spread)
{
	char err[128];

	if (resil_bulkhead_conf_set(conf, key, value, err, sizeof(err))) {
		fprintf(stderr, "conf: %s\n", err);
		return 1;
	}
	if (resil_bulkhead_spread(conf) != spread)
		return 1;
	return run(conf);
}

int main(void)
{
	struct resil_bulkhead_conf conf;
	char err[128];
	int failed;

	resil_bulkhead_conf_defaults(&conf);
	/* fail-fast, then every caller waiting, then a partition for
	 * critical callers, each on top of the last; then packed slots */
	failed = run_with(&conf, "bulkhead.max", "5", true);
	failed |= run_with(&conf, "bulkhead.wait", "1ms", true);
	failed |= run_with(&conf, "bulkhead.critical", "20", true);
	resil_bulkhead_conf_defaults(&conf);
	conf.wait_ns = RESIL_NS_PER_MS;
	if (resil_bulkhead_conf_set(&conf, "bulkhead.critical", "0.1", err, sizeof(err)))
		return 1;
	failed |= run_with(&conf, "bulkhead.max", "1029", false);
	return failed;
}

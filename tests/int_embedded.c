/* SPDX-License-Identifier: MIT */
/*
 * int_embedded.c - embedded mode decides exactly like daemon mode.
 *
 * One seeded, deterministic workload runs three times on a manual clock in
 * a MAP_SHARED page: in embedded mode (no daemon), in daemon mode, and in
 * daemon mode with the daemon SIGKILLed once the policy is defined. Four
 * forked workers take strict turns (step s belongs to worker s % 4); at
 * each step the worker gives back the permit it kept from its previous
 * turn, moves the shared clock by a seeded amount, acquires, records the
 * verdict, and either releases at once or keeps the permit until its next
 * turn, with seeded outcomes (failure-heavy in two stretches, so the
 * breaker opens, probes and closes again; kept permits fill the bulkhead).
 * The three verdict sequences (and the breaker state after every step)
 * must be identical, and the workload must
 * have exercised admissions, breaker rejections and full-bulkhead
 * rejections.
 *
 * The manual clock starts far ahead of CLOCK_MONOTONIC, so a daemon's
 * maintenance tick (on the real clock) sees every time in the breaker's
 * state as in its future and leaves it alone: comparisons clamp. A rate
 * limiter is left out on purpose: the daemon heals a TAT that lies more
 * than a second beyond its own clock (limit.c, resil_limit_maintain), so a
 * manual clock that runs ahead of the real one is, to the daemon, a
 * corrupt TAT; the daemon would need the test's clock to compare limiters.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

#define WORKERS 4
#define STEPS	600
#define POLICY	"same-decisions"
#define CONFIG                                                                                     \
	"breaker.window = consecutive:3; breaker.wait = 2s; breaker.half_open_calls = 2;"          \
	" breaker.half_open_max_wait = 1h; bulkhead.max = 2"

enum { MODE_EMBEDDED, MODE_DAEMON, MODE_DAEMON_KILLED, MODES };
static const char *const mode_name[MODES] = {"embedded", "daemon", "daemon killed"};

struct shared {
	struct test_clock clock; /* first: test_clock_fn reads it */
	_Atomic int turn;
	_Atomic int ready;
	int verdict[STEPS];
	int state[STEPS]; /* breaker state after the step */
};

static struct shared *sh;

static uint64_t mix(uint64_t seed, uint64_t s)
{
	uint64_t x = seed ^ (s * 0x9e3779b97f4a7c15ULL);

	return resil_splitmix64(&x);
}

static int outcome_of(int s, uint64_t rnd)
{
	int fail_pct = (s >= 150 && s < 300) || (s >= 420 && s < 470) ? 80 : 10;

	return (int)((rnd >> 20) % 100) < fail_pct ? RESIL_FAILURE : RESIL_SUCCESS;
}

/* One step: give back the permit held since this worker's previous turn
 * (if any), move the clock, acquire, and keep the new permit until the
 * next turn half of the time, so the bulkhead fills. */
static void one_step(resil_policy_t *p, int s, resil_permit_t *held, int *held_step)
{
	uint64_t rnd = mix(0x5eed, (uint64_t)s);
	int64_t dt;
	resil_permit_t pm;
	int v;

	if (*held_step >= 0) {
		resil_release(p, held, outcome_of(*held_step, mix(0x5eed, (uint64_t)*held_step)));
		*held_step = -1;
	}
	/* most steps 1..10 ms apart, every 40th step 2.5 s later: the
	 * breaker's wait ends and probes go out */
	dt = (s % 40 == 0) ? 2500 * RESIL_NS_PER_MS : (int64_t)(1 + rnd % 10) * RESIL_NS_PER_MS;
	test_clock_advance(&sh->clock, dt);
	v = resil_acquire(p, &pm);
	sh->verdict[s] = v;
	if (v == RESIL_ADMIT) {
		if ((rnd >> 40) & 1) {
			*held = pm;
			*held_step = s;
		} else {
			resil_release(p, &pm, outcome_of(s, rnd));
		}
	}
	sh->state[s] = resil_policy_state(p);
}

static void worker(resil_t *r, int id)
{
	resil_policy_t *p;
	resil_permit_t held;
	int held_step = -1;

	TEST_CHECK(resil_policy(r, POLICY, &p) == 0);
	atomic_fetch_add(&sh->ready, 1);
	for (int s = id; s < STEPS; s += WORKERS) {
		/* strict turns: the order of steps is the same in every run */
		TEST_CHECK(
		    TEST_EVENTUALLY(atomic_load_explicit(&sh->turn, memory_order_acquire) == s));
		one_step(p, s, &held, &held_step);
		atomic_store_explicit(&sh->turn, s + 1, memory_order_release);
	}
	if (held_step >= 0)
		resil_release(p, &held, RESIL_SUCCESS);
	resil_close(r);
	_exit(0);
}

static int run(int mode, int *out, int *states)
{
	struct test_daemon d = {0};
	resil_t *r = NULL;
	pid_t pids[WORKERS];
	int err, fails = 0;

	memset(sh, 0, sizeof(*sh));
	/* far ahead of the real clock (see the top comment) */
	test_clock_set(&sh->clock, test_mono_ns() + 1000000LL * RESIL_NS_PER_S);
	atomic_store(&sh->turn, -1);

	if (mode == MODE_EMBEDDED) {
		err = resil_open_embedded(&r, NULL);
	} else {
		TEST_CHECK(test_daemon_init(&d) == 0);
		err = test_daemon_start(&d, NULL);
		if (err < 0) {
			test_daemon_fini(&d);
			return err;
		}
		err = resil_open(&r, d.sock);
	}
	if (err < 0) {
		fprintf(stderr, "%s: open: %s: %s\n", mode_name[mode], strerror(-err),
			resil_last_error());
		test_daemon_fini(&d);
		return err;
	}
	TEST_CHECK(resil_set_clock(r, test_clock_fn, &sh->clock) == 0);
	err = resil_define(r, POLICY, CONFIG);
	if (err < 0) {
		fprintf(stderr, "%s: define: %s: %s\n", mode_name[mode], strerror(-err),
			resil_last_error());
		resil_close(r);
		test_daemon_fini(&d);
		return err;
	}
	if (mode == MODE_DAEMON_KILLED)
		test_daemon_kill(&d); /* decisions go on without it */

	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		TEST_CHECK(pids[i] >= 0);
		if (pids[i] == 0)
			worker(r, i);
	}
	TEST_CHECK(TEST_EVENTUALLY(atomic_load(&sh->ready) == WORKERS));
	atomic_store_explicit(&sh->turn, 0, memory_order_release);
	for (int i = 0; i < WORKERS; i++) {
		int st = test_wait_pid(pids[i], 60000);

		if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
			fprintf(stderr, "%s: worker %d failed (status %d)\n", mode_name[mode], i,
				st);
			if (st < 0)
				kill(pids[i], SIGKILL);
			fails++;
		}
	}
	memcpy(out, sh->verdict, sizeof(sh->verdict));
	memcpy(states, sh->state, sizeof(sh->state));
	resil_close(r);
	test_daemon_fini(&d);
	return fails ? -EIO : 0;
}

int main(void)
{
	static int v[MODES][STEPS], stv[MODES][STEPS];
	int count[6] = {0}, half_open = 0;
	int err, diff = 0;

	signal(SIGPIPE, SIG_IGN);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(sh != MAP_FAILED);
	for (int m = 0; m < MODES; m++) {
		err = run(m, v[m], stv[m]);
		if (err < 0) {
			fprintf(stderr, "mode %s failed: %s\n", mode_name[m], strerror(-err));
			return 1;
		}
	}
	for (int s = 0; s < STEPS; s++) {
		int x = v[MODE_EMBEDDED][s];

		if (x >= 0 && x < 6)
			count[x]++;
		else
			diff++;
		half_open += stv[MODE_EMBEDDED][s] == RESIL_STATE_HALF_OPEN;
		for (int m = 1; m < MODES; m++) {
			if (stv[m][s] != stv[MODE_EMBEDDED][s]) {
				if (diff < 10)
					fprintf(stderr, "step %d: %s state %s, %s %s\n", s,
						mode_name[MODE_EMBEDDED],
						resil_strstate(stv[MODE_EMBEDDED][s]), mode_name[m],
						resil_strstate(stv[m][s]));
				diff++;
			}
			if (v[m][s] != x) {
				if (diff < 10)
					fprintf(stderr, "step %d: %s %s, %s %s\n", s,
						mode_name[MODE_EMBEDDED], resil_strverdict(x),
						mode_name[m], resil_strverdict(v[m][s]));
				diff++;
			}
		}
	}
	printf("int_embedded: %d steps: %d admitted, %d open, %d full; %d differences\n", STEPS,
	       count[RESIL_ADMIT], count[RESIL_REJECT_OPEN], count[RESIL_REJECT_FULL], diff);
	TEST_CHECK(diff == 0);
	/* the workload exercised what it claims to compare */
	TEST_CHECK(count[RESIL_ADMIT] > 0);
	TEST_CHECK(count[RESIL_REJECT_OPEN] > 0);
	TEST_CHECK(count[RESIL_REJECT_FULL] > 0);
	TEST_CHECK(half_open > 0); /* probes went out */
	return 0;
}

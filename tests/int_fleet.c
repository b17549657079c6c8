/* SPDX-License-Identifier: MIT */
/*
 * int_fleet.c - one breaker for a fleet of processes, through resild.
 *
 * The test starts its own resild. A master opens the library, defines a
 * breaker (consecutive:5, wait 1h, 2 half-open calls) and forks 4 workers
 * that share it. Phase 1: the workers, in turn, each make one call that
 * fails; four failures from four processes leave it CLOSED (everyone sees
 * that); the master's failure is the fifth and opens it for everyone.
 * Phase 2: every worker and the master try many more calls: all are
 * rejected with RESIL_REJECT_OPEN and the dependency is never called again
 * (a counter in shared memory stays at 5).
 * Phase 3 (concurrent): after a reset, the workers fail as fast as they can
 * at once; the breaker opens and the calls that reached the dependency
 * stay within threshold + workers in flight.
 *
 * Phase 4: the daemon is killed; the master still decides from its
 * mapping, a control request fails while nothing listens, and succeeds
 * again (on a new connection) once a daemon is back on the socket.
 *
 * Coordination is through a MAP_SHARED page with "eventually within 10 s"
 * waits; no step sleeps for a fixed time.
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
#define POLICY	"fleet-db"
#define CONFIG	"breaker.window = consecutive:5; breaker.wait = 1h; breaker.half_open_calls = 2"

struct shared {
	_Atomic int turn;     /* phase 1: whose call it is */
	_Atomic int phase;    /* what the workers do now */
	_Atomic int calls;    /* calls that reached the dependency */
	_Atomic int rejected; /* rejections seen by workers */
	_Atomic int done[WORKERS + 1];
	_Atomic int ready;
	_Atomic int go3;
	_Atomic int rows[WORKERS];
};

static struct shared *sh;

static bool wait_for(_Atomic int *w, int v)
{
	return TEST_EVENTUALLY(atomic_load(w) >= v);
}

static void dependency_fails(void)
{
	atomic_fetch_add(&sh->calls, 1);
}

static void worker(resil_t *r, int id)
{
	resil_policy_t *p;
	resil_permit_t pm;
	int v;

	/* the handle was made by the master before fork: still valid here */
	TEST_CHECK(resil_policy(r, POLICY, &p) == 0);
	atomic_fetch_add(&sh->ready, 1);

	/* phase 1: one failing call each, in turn */
	TEST_CHECK(wait_for(&sh->turn, id));
	TEST_CHECK(atomic_load(&sh->turn) == id);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED);
	v = resil_acquire(p, &pm);
	TEST_CHECK(v == RESIL_ADMIT);
	dependency_fails();
	resil_release(p, &pm, RESIL_FAILURE);
	/* this process has its own row, not the master's */
	atomic_store(&sh->rows[id], atomic_load(&r->row));
	atomic_fetch_add(&sh->turn, 1);

	/* phase 2: once open, nothing reaches the dependency */
	TEST_CHECK(wait_for(&sh->phase, 2));
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_OPEN);
	for (int i = 0; i < 200 * resil_test_scale(); i++) {
		v = resil_acquire(p, &pm);
		TEST_CHECK(v == RESIL_REJECT_OPEN);
		if (v == RESIL_ADMIT) {
			dependency_fails();
			resil_release(p, &pm, RESIL_FAILURE);
		} else {
			atomic_fetch_add(&sh->rejected, 1);
		}
	}
	atomic_fetch_add(&sh->done[id], 1);

	/* phase 3: all at once after a reset */
	TEST_CHECK(wait_for(&sh->go3, 1));
	for (int i = 0; i < 1000 * resil_test_scale(); i++) {
		v = resil_acquire(p, &pm);
		TEST_CHECK(v == RESIL_ADMIT || v == RESIL_REJECT_OPEN);
		if (v == RESIL_ADMIT) {
			dependency_fails();
			resil_release(p, &pm, RESIL_FAILURE);
		}
	}
	atomic_fetch_add(&sh->done[id], 1);
	resil_close(r);
	_exit(0);
}

#ifdef RESILCTL_PATH
/* What resilctl says of the open breaker, through the same daemon. */
static void check_resilctl(const struct test_daemon *d)
{
	const char *show[] = {RESILCTL_PATH, "show", POLICY, "--socket", d->sock, "--json", NULL};
	const char *list[] = {RESILCTL_PATH, "--json", "list", "--socket", d->sock, NULL};
	const char *none[] = {RESILCTL_PATH, "--socket", d->sock, "show", "no-such-policy", NULL};
	const char *usage[] = {RESILCTL_PATH, "--socket", d->sock, "frobnicate", NULL};
	static char out[65536];

	TEST_CHECK(test_run(show, NULL, out, sizeof(out)) == 0);
	TEST_CHECK(strstr(out, "\"state\":\"open\"") != NULL);
	TEST_CHECK(test_run(list, NULL, out, sizeof(out)) == 0);
	TEST_CHECK(out[0] == '[' && strstr(out, "\"name\":\"" POLICY "\"") != NULL);
	TEST_CHECK(test_run(none, NULL, out, sizeof(out)) == 1);
	TEST_CHECK(strstr(out, "unknown policy no-such-policy") != NULL);
	TEST_CHECK(test_run(usage, NULL, out, sizeof(out)) == 2);
}
#else
static void check_resilctl(const struct test_daemon *d)
{
	(void)d;
}
#endif

int main(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	pid_t pids[WORKERS];
	int err, fails = 0;

	signal(SIGPIPE, SIG_IGN);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	atomic_store(&sh->turn, -1);

	if (test_daemon_open(&d, &r) < 0)
		return 1;
	TEST_CHECK(resil_define(r, POLICY, CONFIG) == 0);
	TEST_CHECK(resil_policy(r, POLICY, &p) == 0);

	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		TEST_CHECK(pids[i] >= 0);
		if (pids[i] == 0)
			worker(r, i);
	}
	TEST_CHECK(wait_for(&sh->ready, WORKERS));

	/* phase 1 */
	atomic_store(&sh->turn, 0);
	TEST_CHECK(wait_for(&sh->turn, WORKERS));
	TEST_CHECK(atomic_load(&sh->calls) == WORKERS);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED); /* 4 < 5 */
	for (int i = 0; i < WORKERS; i++) {
		TEST_CHECK(atomic_load(&sh->rows[i]) >= 0);
		TEST_CHECK(atomic_load(&sh->rows[i]) != atomic_load(&r->row));
		for (int j = 0; j < i; j++)
			TEST_CHECK(atomic_load(&sh->rows[i]) != atomic_load(&sh->rows[j]));
	}
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	dependency_fails();
	resil_release(p, &pm, RESIL_FAILURE);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_OPEN);

	/* phase 2 */
	atomic_store(&sh->phase, 2);
	for (int i = 0; i < 200; i++)
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_OPEN);
	for (int i = 0; i < WORKERS; i++)
		TEST_CHECK(wait_for(&sh->done[i], 1));
	TEST_CHECK(atomic_load(&sh->calls) == WORKERS + 1);
	TEST_CHECK(atomic_load(&sh->rejected) == WORKERS * 200 * resil_test_scale());
	check_resilctl(&d);

	/* phase 3: back to normal through the daemon, then everyone at once */
	TEST_CHECK(resil_force_state(r, POLICY, RESIL_STATE_CLOSED) == 0);
	TEST_CHECK(TEST_EVENTUALLY(resil_policy_state(p) == RESIL_STATE_CLOSED));
	atomic_store(&sh->calls, 0);
	atomic_store(&sh->go3, 1);
	for (int i = 0; i < WORKERS; i++)
		TEST_CHECK(wait_for(&sh->done[i], 2));
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_OPEN);
	/* consecutive:5 opens on the fifth failure; at most the other workers'
	 * calls already admitted can land after it */
	TEST_CHECK(atomic_load(&sh->calls) >= 5);
	TEST_CHECK(atomic_load(&sh->calls) <= 5 + WORKERS - 1);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_OPEN);

	for (int i = 0; i < WORKERS; i++) {
		int st = test_wait_pid(pids[i], 10000);

		if (!(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
			fprintf(stderr, "worker %d failed (status %d)\n", i, st);
			fails++;
		}
	}
	/* the daemon dies: decisions go on from the mapping; a later control
	 * request reconnects to the daemon that replaced it */
	test_daemon_kill(&d);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_OPEN);
	TEST_CHECK(resil_define(r, "after-restart", CONFIG) < 0);
	TEST_CHECK(test_daemon_start(&d, NULL) == 0);
	err = resil_define(r, "after-restart", CONFIG);
	if (err < 0)
		fprintf(stderr, "define after restart: %s: %s\n", strerror(-err),
			resil_last_error());
	TEST_CHECK(err == 0);
	/* that daemon started fresh (no fd store): the client followed it to
	 * its segments and defined its policies there again, fresh */
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED);

	resil_close(r);
	test_daemon_fini(&d);
	if (fails)
		return 1;
	printf("int_fleet: ok (phase 3: %d calls reached the dependency)\n",
	       atomic_load(&sh->calls));
	return 0;
}

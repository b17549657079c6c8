/* SPDX-License-Identifier: MIT */
/*
 * int_resize.c - a restart keeps the live state whatever the files say.
 *
 * A harness plays systemd 252 for one unit (fdstore_util.c: the fd store
 * handed back at each restart, as after a crash or `systemctl restart`):
 *
 *   (a) new sizes: the settings file asks for more policies and a larger
 *       state segment and resild restarts. The new daemon moves every
 *       policy into segments of those sizes (the metrics say so) and their
 *       state with them: a forced-open breaker stays forced open, a keyed
 *       limiter's spent key stays spent. A client holding 2 permits of a
 *       bulkhead.max = 3 across the restart re-attaches at its next
 *       decision; while it holds them the new pool admits 1 (never 3 + 2
 *       in flight), and once it releases them (into the old memory) the
 *       new pool admits 3 again; the same for a policy.scope = global
 *       one on a host without a cluster, and for a pool of more than
 *       1024 permits, whose slots are packed. A worker process decides
 *       all along with no error;
 *   (b) sizes too small for the live policies: nothing moves, the adopted
 *       segments keep running, and the log says what fits;
 *   (c) a broken policy file at a restart: the adopted policies keep
 *       running (the breaker stays forced open), the error is FILE:LINE
 *       in the log and a failed reload in the metrics; so does a bad
 *       settings file, which is left out (the segments keep their sizes);
 *       the broken files on a fresh start (an empty store) exit 78;
 *   (d) a client that connects while the daemon stops (the daemon
 *       accepted and went away unanswered; the socket is systemd's)
 *       connects again and is served by the next daemon.
 * Every wait is "eventually, within 10 s". Skips (77) when not root, as
 * int_restart.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "internal.h"
#include "resil.h"
#include "fdstore_util.h"
#include "testutil.h"

static struct test_unit unit;
static pid_t worker;

static int teardown(void **state)
{
	(void)state;
	if (worker > 0) {
		kill(worker, SIGKILL);
		waitpid(worker, NULL, 0);
		worker = 0;
	}
	test_unit_fini(&unit);
	return 0;
}

/* dir/name, written or the test fails */
#define write_file(...) assert_int_equal(test_write_file(__VA_ARGS__), 0)

static bool log_has(const char *what)
{
	return test_log_count(&unit.d, what) > 0;
}

static bool log_has_ctx(void *what)
{
	return log_has(what);
}

/* the daemon answers on the socket again after a restart */
static bool answers(void *ctx)
{
	(void)ctx;
	return test_daemon_answers(&unit.d);
}

static void restart(void)
{
	test_unit_crash(&unit);
	assert_int_equal(test_unit_start(&unit, true), 0);
	assert_true(test_wait_until(answers, NULL, TEST_EVENTUALLY_MS));
}

/* A process deciding on "work" until killed; its errors in *errors. */
static pid_t start_worker(_Atomic long *calls, _Atomic long *errors)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		resil_policy_t *p;
		resil_permit_t pm;
		resil_t *r;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* a first connection closed by the daemon unanswered happens
		 * (rarely, two processes connecting at once): not what this
		 * test is about, so the worker opens again, within 10 s */
		for (int i = 0; resil_open(&r, unit.d.sock) != 0; i++) {
			if (i == 100)
				_exit(1);
			usleep(100000);
		}
		if (resil_policy(r, "work", &p) != 0)
			_exit(1);
		for (;;) {
			int v = resil_acquire(p, &pm);

			atomic_fetch_add(calls, 1);
			if (v < 0)
				atomic_fetch_add(errors, 1);
			else if (v == RESIL_ADMIT)
				resil_release(p, &pm, RESIL_SUCCESS);
			usleep(200);
		}
	}
	return pid;
}

struct wait_calls {
	_Atomic long *calls;
	long past;
};

static bool calls_past(void *ctx)
{
	struct wait_calls *w = ctx;

	return atomic_load(w->calls) > w->past;
}

/* the worker decides on (100 more decisions within 10 s), without error */
static void worker_decides(_Atomic long *calls, _Atomic long *errors)
{
	struct wait_calls wc = {.calls = calls, .past = atomic_load(calls) + 100};
	int st = 0;

	if (!test_wait_until(calls_past, &wc, TEST_EVENTUALLY_MS)) {
		char cmd[PATH_MAX + 16];
		pid_t w = waitpid(worker, &st, WNOHANG);

		fprintf(stderr, "worker: %ld decisions, %ld errors, %s %d; the daemon's log:\n",
			atomic_load(calls), atomic_load(errors), w == worker ? "exited" : "running",
			w == worker ? st : 0);
		snprintf(cmd, sizeof(cmd), "cat %s >&2", unit.d.log);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log)\n");
		fail_msg("the worker stopped deciding");
	}
	assert_int_equal(atomic_load(errors), 0);
}

/* decisions on bh admitted now (each permit kept in pm[] until put back) */
static int admit_all(resil_policy_t *bh, resil_permit_t *pm, int max)
{
	int n = 0;

	while (n < max && resil_acquire(bh, &pm[n]) == RESIL_ADMIT)
		n++;
	return n;
}

/* bulkhead.max of the packed pool (above 1024 permits its slots are
 * packed, not one per line: bulkhead.h) */
#define BIG 1100
static resil_permit_t big_held[BIG], big_pm[BIG + 1]; /* admits() asks for one more */

struct refill {
	resil_policy_t *bh;
	int want;
};

static bool admits(void *ctx)
{
	struct refill *f = ctx;
	resil_permit_t *pm = big_pm;
	int n = admit_all(f->bh, pm, f->want + 1);

	for (int i = 0; i < n; i++)
		resil_release(f->bh, &pm[i], RESIL_SUCCESS);
	return n == f->want;
}

static void test_new_sizes(void **state)
{
	_Atomic long *shm =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	_Atomic long *calls = &shm[0], *errors = &shm[1];
	resil_permit_t held[2], gheld[2], pm[8];
	resil_policy_t *brk, *keys, *bh, *gbh, *big;
	struct refill f;
	resil_t *r;
	long long arena0, recs0;

	(void)state;
	assert_true(shm != MAP_FAILED);
	assert_int_equal(test_unit_init(&unit), 0);
	write_file(unit.d.confdir, "resild.conf", "[daemon]\nstate_size = 8M\npolicies = 64\n");
	write_file(unit.d.confdir, "p.conf",
		   "[policy brk]\nbreaker.window = count:10\n"
		   "[policy keys]\nlimit.rate = 1/m\nlimit.burst = 1\nlimit.keys = 64\n"
		   "[policy bh]\nbulkhead.max = 3\n"
		   "[policy gbh]\npolicy.scope = global\nbulkhead.max = 3\n"
		   "[policy big]\nbulkhead.max = 1100\n"
		   "[policy work]\nlimit.rate = 1000000/s\nbulkhead.max = 8\n");
	assert_int_equal(test_unit_start(&unit, false), 0);
	worker = start_worker(calls, errors);
	assert_int_equal(resil_open(&r, unit.d.sock), 0);
	assert_int_equal(resil_policy(r, "brk", &brk), 0);
	assert_int_equal(resil_policy(r, "keys", &keys), 0);
	assert_int_equal(resil_policy(r, "bh", &bh), 0);
	assert_int_equal(resil_policy(r, "gbh", &gbh), 0);
	assert_int_equal(resil_policy(r, "big", &big), 0);
	assert_int_equal(resil_force_state(r, "brk", RESIL_STATE_FORCED_OPEN), 0);
	for (int i = 0; i < 10 && resil_acquire_key(keys, "k1", 2, &pm[0]) == RESIL_ADMIT; i++)
		resil_release(keys, &pm[0], RESIL_SUCCESS); /* spend k1's burst */
	assert_int_equal(resil_acquire_key(keys, "k1", 2, &pm[0]), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_acquire_key(keys, "k2", 2, &pm[0]), RESIL_ADMIT);
	resil_release(keys, &pm[0], RESIL_SUCCESS);
	assert_int_equal(admit_all(bh, held, 2), 2);
	assert_int_equal(admit_all(gbh, gheld, 2), 2);
	assert_int_equal(admit_all(big, big_held, BIG - 1), BIG - 1);
	arena0 = test_metric(r, "resil_arena_bytes");
	recs0 = test_metric(r, "resil_records");
	assert_true(arena0 > 0 && recs0 == 64 * 4);

	/* (a) larger: everything moves, state and all */
	write_file(unit.d.confdir, "resild.conf", "[daemon]\nstate_size = 32M\npolicies = 256\n");
	restart();
	assert_true(test_log_count(&unit.d, "moved 6 policies and their state") == 1);
	assert_int_equal(resil_policy_state(brk), RESIL_STATE_FORCED_OPEN);
	assert_int_equal(resil_acquire(brk, &pm[0]), RESIL_REJECT_OPEN);
	assert_int_equal(resil_acquire_key(keys, "k1", 2, &pm[0]), RESIL_REJECT_LIMITED);
	assert_true(test_metric(r, "resil_arena_bytes") > arena0);
	assert_int_equal(test_metric(r, "resil_records"), 256 * 4);
	/* 2 permits still held in the old memory: 1 more, never 3 more */
	assert_int_equal(admit_all(bh, pm, 8), 1);
	resil_release(bh, &pm[0], RESIL_SUCCESS);
	resil_release(bh, &held[0], RESIL_SUCCESS);
	resil_release(bh, &held[1], RESIL_SUCCESS);
	f.bh = bh;
	f.want = 3;
	assert_true(test_wait_until(admits, &f, TEST_EVENTUALLY_MS));
	assert_true(test_wait_until(
	    log_has_ctx, (void *)"policy bh: no permit held in the old segments any more",
	    TEST_EVENTUALLY_MS));
	/* the same for a policy.scope = global one on a host without a
	 * cluster (a host bulkhead there) */
	assert_int_equal(admit_all(gbh, pm, 8), 1);
	resil_release(gbh, &pm[0], RESIL_SUCCESS);
	resil_release(gbh, &gheld[0], RESIL_SUCCESS);
	resil_release(gbh, &gheld[1], RESIL_SUCCESS);
	f.bh = gbh;
	f.want = 3;
	assert_true(test_wait_until(admits, &f, TEST_EVENTUALLY_MS));
	/* the same for a packed pool: BIG - 1 held in the old memory */
	assert_int_equal(admit_all(big, big_pm, BIG), 1);
	resil_release(big, &big_pm[0], RESIL_SUCCESS);
	for (int i = 0; i < BIG - 1; i++)
		resil_release(big, &big_held[i], RESIL_SUCCESS);
	f.bh = big;
	f.want = BIG;
	assert_true(test_wait_until(admits, &f, TEST_EVENTUALLY_MS));
	assert_true(test_wait_until(
	    log_has_ctx, (void *)"policy big: no permit held in the old segments any more",
	    TEST_EVENTUALLY_MS));
	worker_decides(calls, errors);
	/* the move defined them in the new segments: no client reported it */
	assert_int_equal(test_log_count(&unit.d, ": policy brk: created"), 0);

	/* (b) too small for what lives: nothing moves, the log says what fits */
	write_file(unit.d.confdir, "resild.conf", "[daemon]\nstate_size = 8M\npolicies = 2\n");
	restart();
	assert_true(log_has("the 6 live policies do not fit --policies 2"));
	assert_true(log_has("they need --policies 6 or more"));
	assert_int_equal(test_metric(r, "resil_records"), 256 * 4);
	assert_int_equal(resil_acquire(brk, &pm[0]), RESIL_REJECT_OPEN);
	worker_decides(calls, errors);
	resil_close(r);
	munmap(shm, 4096);
}

static void test_broken_files(void **state)
{
	char path[PATH_MAX + 16];
	long long recs;
	resil_permit_t pm;
	resil_policy_t *brk;
	resil_t *r;

	(void)state;
	assert_int_equal(test_unit_init(&unit), 0);
	write_file(unit.d.confdir, "p.conf", "[policy brk]\nbreaker.window = count:10\n");
	assert_int_equal(test_unit_start(&unit, false), 0);
	assert_int_equal(resil_open(&r, unit.d.sock), 0);
	assert_int_equal(resil_policy(r, "brk", &brk), 0);
	assert_int_equal(resil_force_state(r, "brk", RESIL_STATE_FORCED_OPEN), 0);

	/* (c) a restart on a broken file keeps the adopted policies */
	write_file(unit.d.confdir, "p.conf",
		   "[policy brk]\nbreaker.window = count:10\nbogus = 1\n");
	restart();
	snprintf(path, sizeof(path), "%s/p.conf:3", unit.d.confdir);
	assert_true(log_has(path));
	assert_true(log_has("the adopted policies keep running"));
	assert_int_equal(resil_acquire(brk, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_policy_state(brk), RESIL_STATE_FORCED_OPEN);
	assert_int_equal(test_metric(r, "resil_reloads_total{result=\"failed\"}"), 1);

	/* a bad settings file too: left out, the adopted segments keep their
	 * sizes (not the defaults a start without the file would take) */
	recs = test_metric(r, "resil_records");
	write_file(unit.d.confdir, "resild.conf", "[daemon]\nstate_size = 16M\npolicies = 0\n");
	restart();
	snprintf(path, sizeof(path), "%s/resild.conf:3", unit.d.confdir);
	assert_true(log_has(path));
	assert_int_equal(resil_acquire(brk, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(test_metric(r, "resil_records"), recs);
	assert_int_equal(test_metric(r, "resil_reloads_total{result=\"failed\"}"), 1);
	snprintf(path, sizeof(path), "%s/resild.conf", unit.d.confdir);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/p.conf:3", unit.d.confdir);
	resil_close(r);

	/* the same files, fresh: exit 78 */
	assert_true(WIFEXITED(test_unit_stop(&unit)));
	{
		const char *argv[] = {RESILD_PATH, "--foreground", "--socket", unit.d.sock,
				      "--config",  unit.d.confdir, NULL};
		char out[4096] = "";

		assert_int_equal(test_run(argv, NULL, out, sizeof(out)), 78);
		assert_non_null(strstr(out, path));
	}
}

/* (d) A client connecting while the daemon stops: the listening socket
 * is systemd's (socket activation), the old daemon accepted the
 * connection and stopped without answering it. resil_open connects once
 * more and the next daemon, started on the same socket, answers. */
static void test_accepted_then_stopped(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd, cfd, st;
	pid_t client, daemon;

	(void)state;
	assert_int_equal(test_unit_init(&unit), 0);
	assert_true(strlen(unit.d.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, unit.d.sock, strlen(unit.d.sock) + 1);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 16), 0);
	client = fork();
	assert_true(client >= 0);
	if (client == 0) {
		resil_t *r;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(resil_open(&r, unit.d.sock) == 0 ? 0 : 1);
	}
	/* the stopping daemon: accepts, then goes away unanswered */
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(cfd >= 0);
	close(cfd);
	/* the next daemon, handed the socket as systemd would */
	daemon = fork();
	assert_true(daemon >= 0);
	if (daemon == 0) {
		char pid[32];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(lfd, 3) != 3)
			_exit(126);
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("LISTEN_PID", pid, 1);
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_FDNAMES", "control", 1);
		execl(RESILD_PATH, RESILD_PATH, "--foreground", "--config", unit.d.confdir,
		      (char *)NULL);
		_exit(127);
	}
	close(lfd);
	st = test_wait_pid(client, TEST_EVENTUALLY_MS);
	kill(daemon, SIGTERM);
	test_wait_pid(daemon, TEST_EVENTUALLY_MS);
	assert_true(st >= 0 && WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_new_sizes, teardown),
	    cmocka_unit_test_teardown(test_broken_files, teardown),
	    cmocka_unit_test_teardown(test_accepted_then_stopped, teardown),
	};

	if (geteuid() != 0) {
		printf("not root: skipped\n");
		return TEST_SKIP;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

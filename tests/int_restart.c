/* SPDX-License-Identifier: MIT */
/*
 * int_restart.c - resild restarts, resild down, and clients that follow.
 *
 * A harness plays systemd 252 for one unit: a notify socket that keeps the
 * descriptors a daemon sends with FDSTORE=1 under their FDNAME= (at most
 * FileDescriptorStoreMax of them, a descriptor of a file already stored is
 * dropped as a duplicate, FDSTOREREMOVE=1 closes every one of that name),
 * and a (re)start that passes the store as fds 3.. with LISTEN_FDS,
 * LISTEN_FDNAMES and LISTEN_PID. "systemctl stop" empties the store (252
 * has no FileDescriptorStorePreserve=).
 *
 *   (a) a crash and a restart with the store: the new daemon adopts the
 *       segments. A breaker opened by failures stays OPEN, a spent retry
 *       budget stays spent, a keyed limiter keeps its keys; clients that
 *       decide all along (two worker processes) see no error and never
 *       re-attach (same mapping, same row);
 *   (b) a restart without the store: the new daemon starts fresh; the
 *       client notices by itself (heartbeat, then a hello with another
 *       epoch), maps the new segments, defines its policies there again
 *       and keeps its handles: the same pointers decide in the new
 *       segments. A second thread of the client decides all along, on
 *       the old mapping and then the new one, without an error. Another
 *       process that only looked the policy up and decides through
 *       resil_call only follows too. A permit
 *       granted before the re-attach and released after goes back to the
 *       old segments, not to the new ones;
 *   (c) the daemon SIGKILLed while 4 client processes decide on every
 *       kind of policy (breaker, limit, bulkhead, adaptive, shed, retry
 *       budget) and a worker forks a child once it is gone: no call
 *       errs, the child claims a row of its own, an OPEN breaker still
 *       reaches HALF_OPEN, a process that never mapped gets ECONNREFUSED
 *       within the bound, and every decision is in the counters (the
 *       calls each process counted add up to the policies' stats). The
 *       daemon comes back with the store: the rows are still valid;
 *   (d) a stored segment pair of another ABI major (abi_major patched in
 *       the stored memfd) handed to a new daemon is marked retired; the
 *       clients mapping it see RESIL_SEG_RETIRED and re-attach.
 * Every wait is "eventually, within 10 s". Skips (77) when not root (the
 * daemons and the test share one uid either way; root keeps the rules of
 * the other integration tests).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "resil.h"
#include "seg.h"
#include "stats.h"
#include "fdstore_util.h"
#include "testutil.h"

#define WORKERS_MAX 16

static struct test_unit *current;

static void unit_init(struct test_unit *u)
{
	assert_int_equal(test_unit_init(u), 0);
	current = u;
}

static void unit_fini(struct test_unit *u)
{
	test_unit_fini(u);
	current = NULL;
}

/* systemctl stop on systemd 252: the daemon stops, the store is emptied. */
static void unit_stop(struct test_unit *u)
{
	assert_int_equal(test_unit_stop(u), 0);
}

/* Processes a test forked: killed by the teardown when an assertion left
 * the test early (and they die with the test process anyway). */
static pid_t kids[WORKERS_MAX];
static int nkids;

static pid_t fork_kid(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		nkids = 0;
	} else if (pid > 0 && nkids < WORKERS_MAX) {
		kids[nkids++] = pid;
	}
	return pid;
}

static void decider_stop(void);

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	nkids = 0;
	decider_stop();
	if (current)
		unit_fini(current);
	return 0;
}

static bool log_has(const struct test_daemon *d, const char *what)
{
	static char buf[1 << 16];
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, what) != NULL;
}

/* ---- what several processes share ---- */

#define WORKERS 4
#define NPOL	6

struct shared {
	_Atomic int go;	  /* phase the parent is in */
	_Atomic int stop; /* workers: finish and report */
	_Atomic int started[WORKERS + 1];
	_Atomic int done[WORKERS + 1];
	/* per process (workers, then the forked child), per policy */
	_Atomic long calls[WORKERS + 1][NPOL];
	_Atomic long admitted[WORKERS + 1][NPOL];
	_Atomic long rejected[WORKERS + 1][NPOL];
	_Atomic long errors[WORKERS + 1];
	_Atomic int last_error[WORKERS + 1];
	_Atomic long retries[WORKERS + 1];	/* budget: retries granted */
	_Atomic long budget_stops[WORKERS + 1]; /* budget: retries refused */
	_Atomic int reattaches[WORKERS + 1];
	_Atomic int row_before[WORKERS + 1];
	_Atomic int row_after[WORKERS + 1];
	_Atomic int child_row;
	_Atomic int child_parent_row;
	_Atomic long after_kill[WORKERS + 1];	 /* calls made while no daemon ran */
	_Atomic int64_t next_check[WORKERS + 1]; /* the process's r->next_check_ns */
};

static struct shared *shared_new(void)
{
	struct shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	return sh;
}

static int cur_row(struct resil *r)
{
	return atomic_load(&r->row);
}

static void pause_a_little(void)
{
	struct timespec ts = {0, 200000};

	nanosleep(&ts, NULL); /* pacing, so the daemons get the CPU too */
}

/* ---- (a) a crash, and a restart with the fd store ---- */

#define A_BRK	 "a-brk"
#define A_BUDGET "a-budget"
#define A_KEYS	 "a-keys"
#define A_WORK	 "a-work"

/* A client that decides on A_WORK until told to stop. */
static void a_worker(struct test_unit *u, struct shared *sh, int i)
{
	resil_policy_t *p;
	resil_permit_t pm;
	resil_t *r;
	int v;

	TEST_CHECK(resil_open(&r, u->d.sock) == 0);
	TEST_CHECK(resil_policy(r, A_WORK, &p) == 0);
	atomic_store(&sh->row_before[i], cur_row(r));
	atomic_store(&sh->started[i], 1);
	while (!atomic_load(&sh->stop)) {
		v = resil_acquire(p, &pm);
		atomic_fetch_add(&sh->calls[i][0], 1);
		if (v < 0) {
			atomic_fetch_add(&sh->errors[i], 1);
			atomic_store(&sh->last_error[i], v);
		} else if (v == RESIL_ADMIT) {
			resil_release(p, &pm, RESIL_SUCCESS);
		}
		atomic_store(&sh->next_check[i], (int64_t)ld_relaxed(&r->next_check_ns));
		pause_a_little();
	}
	atomic_store(&sh->reattaches[i], (int)r->reattaches);
	atomic_store(&sh->row_after[i], cur_row(r));
	resil_close(r);
	_exit(0);
}

/* Spend: a retry after a transient error; true when it was refused for
 * the budget. */
static bool budget_refuses(resil_policy_t *p)
{
	resil_retry_t rt;
	int64_t d;

	resil_retry_begin(p, &rt, 0);
	d = resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0);
	return d < 0 && strstr(resil_retry_reason(&rt), "budget") != NULL;
}

static void test_restart_with_store(void **state)
{
	static struct test_unit u;
	struct shared *sh = shared_new();
	resil_policy_t *brk, *budget, *keys;
	resil_permit_t pm;
	struct resil_map *before;
	pid_t pids[2];
	int64_t killed, restarted;
	resil_t *r;
	long calls;

	(void)state;
	unit_init(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_true(test_unit_store_fd(&u, "config") >= 0 && test_unit_store_fd(&u, "state") >= 0);

	assert_int_equal(resil_open(&r, u.d.sock), 0);
	assert_int_equal(
	    resil_define(r, A_BRK, "breaker.window = consecutive:3; breaker.wait = 1h"), 0);
	assert_int_equal(resil_define(r, A_BUDGET,
				      "retry.budget = aws:20; retry.max_attempts = 10; "
				      "retry.base = 1ms"),
			 0);
	assert_int_equal(
	    resil_define(r, A_KEYS, "limit.rate = 1/1h; limit.burst = 1; limit.keys = 64"), 0);
	assert_int_equal(resil_define(r, A_WORK, "bulkhead.max = 8"), 0);
	assert_int_equal(resil_policy(r, A_BRK, &brk), 0);
	assert_int_equal(resil_policy(r, A_BUDGET, &budget), 0);
	assert_int_equal(resil_policy(r, A_KEYS, &keys), 0);

	/* open the breaker the ordinary way: three failures */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(resil_acquire(brk, &pm), RESIL_ADMIT);
		resil_release(brk, &pm, RESIL_FAILURE);
	}
	assert_int_equal(resil_policy_state(brk), RESIL_STATE_OPEN);
	/* spend the budget: 20 tokens pay one retry after a transient error */
	assert_false(budget_refuses(budget));
	assert_true(budget_refuses(budget));
	/* a key takes its one permit of the hour */
	assert_int_equal(resil_acquire_key(keys, "alice", 5, &pm), RESIL_ADMIT);
	resil_release(keys, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_acquire_key(keys, "alice", 5, &pm), RESIL_REJECT_LIMITED);

	for (int i = 0; i < 2; i++) {
		pids[i] = fork_kid();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			a_worker(&u, sh, i);
	}
	assert_true(TEST_EVENTUALLY(atomic_load(&sh->started[0]) && atomic_load(&sh->started[1])));
	before = ld_acquire(&r->cur);

	/* a crash, then Restart=always with the store, late enough that the
	 * workers saw the heartbeat go stale and found nobody on the socket */
	test_unit_crash(&u);
	killed = test_mono_ns();
	for (int i = 0; i < 2; i++)
		assert_true(TEST_EVENTUALLY(atomic_load(&sh->next_check[i]) >
					    killed + RESIL_BEAT_STALE_NS + RESIL_CHECK_NS));
	calls = atomic_load(&sh->calls[0][0]);
	assert_true(TEST_EVENTUALLY(atomic_load(&sh->calls[0][0]) > calls + 10));
	assert_int_equal(test_unit_start(&u, true), 0);
	restarted = test_mono_ns();
	assert_true(TEST_EVENTUALLY(log_has(&u.d, "adopted the segments")));
	/* a control request reaches the new daemon: same epoch, same mapping */
	assert_int_equal(resil_define(r, "a-after", "bulkhead.max = 1"), 0);

	/* the state survived, in the same mapping */
	assert_int_equal(resil_policy_state(brk), RESIL_STATE_OPEN);
	assert_int_equal(resil_acquire(brk, &pm), RESIL_REJECT_OPEN);
	assert_true(budget_refuses(budget));
	assert_int_equal(resil_acquire_key(keys, "alice", 5, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(resil_acquire_key(keys, "bob", 3, &pm), RESIL_ADMIT);
	resil_release(keys, &pm, RESIL_SUCCESS);

	/* the workers keep deciding through two periodic checks of theirs
	 * made after the restart (each check moves next_check_ns on) */
	for (int i = 0; i < 2; i++)
		assert_true(TEST_EVENTUALLY(atomic_load(&sh->next_check[i]) >
					    restarted + 2 * RESIL_CHECK_NS));
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < 2; i++) {
		int st = test_wait_pid(pids[i], 10000);

		assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		assert_int_equal(atomic_load(&sh->errors[i]), 0);
		assert_int_equal(atomic_load(&sh->reattaches[i]), 0);
		assert_int_equal(atomic_load(&sh->row_after[i]), atomic_load(&sh->row_before[i]));
	}
	assert_int_equal(r->reattaches, 0);
	assert_ptr_equal(ld_acquire(&r->cur), before);

	resil_close(r);
	munmap(sh, sizeof(*sh));
	unit_fini(&u);
}

/* ---- (b) a restart without the store: fresh segments, clients follow ---- */

#define B_POL  "b-own"
#define B_BULK "b-bulk"

static int call_ok(void *arg, resil_attempt_t *a)
{
	(void)arg;
	(void)a;
	return 0;
}

/* Another process: it only looks the policy up (someone else defines it)
 * and decides through resil_call only. */
static void b_follower(struct test_unit *u, struct shared *sh)
{
	resil_policy_t *p;
	resil_t *r;
	int v;

	TEST_CHECK(resil_open(&r, u->d.sock) == 0);
	TEST_CHECK(resil_policy(r, B_POL, &p) == 0);
	atomic_store(&sh->row_before[0], cur_row(r));
	atomic_store(&sh->started[0], 1);
	while (!atomic_load(&sh->stop)) {
		v = resil_call(p, call_ok, NULL);
		atomic_fetch_add(&sh->calls[0][0], 1);
		if (v < 0 || v >= RESIL_CALL_ERR) {
			atomic_fetch_add(&sh->errors[0], 1);
			atomic_store(&sh->last_error[0], v);
		}
		atomic_store(&sh->reattaches[0], (int)r->reattaches);
		pause_a_little();
	}
	atomic_store(&sh->row_after[0], cur_row(r));
	resil_close(r);
	_exit(0);
}

struct drive {
	resil_t *r;
	resil_policy_t *p;
	int errors;
};

/* One decision on the handle (what a worker does all along), then: has
 * the client re-attached? */
static bool drive_until_reattached(void *ctx)
{
	struct drive *dr = ctx;
	resil_permit_t pm;
	int v = resil_acquire(dr->p, &pm);

	if (v < 0)
		dr->errors++;
	else if (v == RESIL_ADMIT)
		resil_release(dr->p, &pm, RESIL_SUCCESS);
	return dr->r->reattaches > 0;
}

static uint64_t stat_of(const struct resil_seg *s, const char *name, enum resil_stat which)
{
	uint32_t slot;
	uint64_t word;
	const struct resil_rec *rec;
	const void *st;

	if (resil_seg_lookup(s, name, &slot, &word) < 0)
		return UINT64_MAX;
	rec = resil_seg_rec_of(s, word);
	st = rec ? resil_stats_state_of(s, rec) : NULL;
	return st ? resil_stats_read(st, which) : UINT64_MAX;
}

/* A thread of the client that decides all along, on whatever mapping it
 * finds, while another thread re-attaches. */
struct decider {
	pthread_t t;
	bool running;
	_Atomic int stop;
	_Atomic long calls, errors;
	resil_policy_t *p;
};
static struct decider decider;

static void *decide_loop(void *arg)
{
	struct decider *dc = arg;

	while (!atomic_load(&dc->stop)) {
		resil_permit_t pm;
		int v = resil_acquire(dc->p, &pm);

		if (v < 0)
			atomic_fetch_add(&dc->errors, 1);
		else if (v == RESIL_ADMIT)
			resil_release(dc->p, &pm, RESIL_SUCCESS);
		atomic_fetch_add(&dc->calls, 1);
		pause_a_little();
	}
	return NULL;
}

static void decider_stop(void)
{
	if (decider.running) {
		atomic_store(&decider.stop, 1);
		pthread_join(decider.t, NULL);
		decider.running = false;
	}
}

static void test_restart_without_store(void **state)
{
	static struct test_unit u;
	struct shared *sh = shared_new();
	resil_policy_t *p, *bulk, *p2;
	resil_permit_t pm, old_permit, a, b;
	struct resil_map *old, *now;
	struct drive dr;
	uint64_t old_success;
	uint64_t epoch;
	pid_t pid;
	resil_t *r;
	int st;

	(void)state;
	unit_init(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_int_equal(resil_open(&r, u.d.sock), 0);
	assert_int_equal(
	    resil_define(r, B_POL, "breaker.window = consecutive:2; breaker.wait = 1h"), 0);
	assert_int_equal(resil_define(r, B_BULK, "bulkhead.max = 1"), 0);
	assert_int_equal(resil_policy(r, B_POL, &p), 0);
	assert_int_equal(resil_policy(r, B_BULK, &bulk), 0);
	pid = fork_kid();
	assert_true(pid >= 0);
	if (pid == 0)
		b_follower(&u, sh);
	assert_true(TEST_EVENTUALLY(atomic_load(&sh->started[0])));
	assert_int_equal(resil_define(r, "b-thr", "bulkhead.max = 64"), 0);
	memset(&decider, 0, sizeof(decider));
	assert_int_equal(resil_policy(r, "b-thr", &decider.p), 0);
	assert_int_equal(pthread_create(&decider.t, NULL, decide_loop, &decider), 0);
	decider.running = true;

	/* state that a fresh daemon will not have: an OPEN breaker, a permit
	 * held across the restart */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_FAILURE);
	}
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	assert_int_equal(resil_acquire(bulk, &old_permit), RESIL_ADMIT);
	assert_int_equal(resil_acquire(bulk, &pm), RESIL_REJECT_FULL);
	old = ld_acquire(&r->cur);
	epoch = old->tag;
	old_success = stat_of(old->seg, B_BULK, RESIL_STAT_SUCCESS);

	/* systemctl stop, then start, on 252: the store is gone */
	unit_stop(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_false(log_has(&u.d, "adopted the segments"));

	/* the client notices by itself while it decides, and keeps going */
	dr.r = r;
	dr.p = p;
	dr.errors = 0;
	assert_true(test_wait_until(drive_until_reattached, &dr, TEST_EVENTUALLY_MS));
	assert_int_equal(dr.errors, 0);
	assert_int_equal(r->reattaches, 1);
	now = ld_acquire(&r->cur);
	assert_ptr_not_equal(now, old);
	assert_true(now->tag != epoch);
	assert_ptr_equal(now->older, old);
	/* the old segments are retired, so every process on them follows */
	assert_true(ld_acquire(&old->seg->st->flags) & RESIL_SEG_RETIRED);
	/* the old mapping is still mapped (old->seg readable) */
	assert_int_equal(old->seg->cfg->magic, RESIL_CFG_MAGIC);
	/* a row of ours in the new segments */
	assert_true(atomic_load(&now->row) >= 0);
	assert_int_equal(cur_row(r), atomic_load(&now->row));

	/* the same handles decide in the new segments: the policies were
	 * defined again there, fresh */
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_policy(r, B_POL, &p2), 0);
	assert_ptr_equal(p2, p);
	assert_true(stat_of(now->seg, B_POL, RESIL_STAT_SUCCESS) >= 1);

	/* the permit from before goes back where it came from: a = the one
	 * permit of the new bulkhead; releasing the old permit must not free
	 * it */
	assert_int_equal(resil_acquire(bulk, &a), RESIL_ADMIT);
	resil_release(bulk, &old_permit, RESIL_SUCCESS);
	assert_int_equal(stat_of(old->seg, B_BULK, RESIL_STAT_SUCCESS), old_success + 1);
	assert_int_equal(resil_acquire(bulk, &b), RESIL_REJECT_FULL);
	resil_release(bulk, &a, RESIL_SUCCESS);
	assert_int_equal(resil_acquire(bulk, &b), RESIL_ADMIT);
	resil_release(bulk, &b, RESIL_SUCCESS);

	/* the other thread went on deciding through it, without an error */
	{
		long c = atomic_load(&decider.calls);

		assert_true(TEST_EVENTUALLY(atomic_load(&decider.calls) > c + 10));
	}
	decider_stop();
	assert_int_equal(atomic_load(&decider.errors), 0);
	assert_true(stat_of(now->seg, "b-thr", RESIL_STAT_SUCCESS) >= 1);

	/* the other process followed too, without an error; the new daemon
	 * found both rows in its table */
	assert_true(TEST_EVENTUALLY(atomic_load(&sh->reattaches[0]) == 1));
	assert_true(TEST_EVENTUALLY(test_unit_status_has(&u, " 2 clients")));
	atomic_store(&sh->stop, 1);
	st = test_wait_pid(pid, 10000);
	assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(atomic_load(&sh->errors[0]), 0);
	assert_true(atomic_load(&sh->row_after[0]) >= 0);

	resil_close(r);
	munmap(sh, sizeof(*sh));
	unit_fini(&u);
}

/* ---- (c) the daemon SIGKILLed under 4 clients and a forked child ---- */

static const char *const c_names[NPOL] = {"c-brk",   "c-lim",  "c-bulk",
					  "c-adapt", "c-shed", "c-budget"};
static const char *const c_confs[NPOL] = {
    "breaker.window = consecutive:5; breaker.wait = 50ms; breaker.half_open_calls = 1",
    "limit.rate = 2000/s; limit.burst = 5",
    "bulkhead.max = 2",
    "adaptive.algorithm = aimd; adaptive.min = 1; adaptive.max = 4; adaptive.initial = 2",
    "shed.k = 2; shed.window = 2s",
    "retry.budget = aws:50; retry.max_attempts = 10; retry.base = 1ms",
};

/* One round over every policy; idx: the counting slot of this process. */
static void c_round(struct shared *sh, int idx, resil_policy_t **pol, unsigned n)
{
	for (int k = 0; k < NPOL; k++) {
		resil_permit_t pm;
		int v = resil_acquire(pol[k], &pm), outcome;

		atomic_fetch_add(&sh->calls[idx][k], 1);
		if (v < 0) {
			atomic_fetch_add(&sh->errors[idx], 1);
			atomic_store(&sh->last_error[idx], v);
			continue;
		}
		if (v > 0) {
			atomic_fetch_add(&sh->rejected[idx][k], 1);
			continue;
		}
		atomic_fetch_add(&sh->admitted[idx][k], 1);
		if (k == 5) {
			/* the retry budget decides a retry */
			resil_retry_t rt;
			int64_t d;

			resil_retry_begin(pol[k], &rt, 0);
			d = resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0);
			if (d >= 0)
				atomic_fetch_add(&sh->retries[idx], 1);
			else if (strstr(resil_retry_reason(&rt), "budget"))
				atomic_fetch_add(&sh->budget_stops[idx], 1);
			else
				atomic_fetch_add(&sh->errors[idx], 1);
		}
		/* failures keep the breaker cycling and the shedder busy */
		outcome = (k == 0 || (k == 4 && n % 3 == 0)) ? RESIL_FAILURE : RESIL_SUCCESS;
		resil_release(pol[k], &pm, outcome);
	}
}

static void c_child(struct shared *sh, resil_t *r, resil_policy_t **pol)
{
	/* first call in the child: its own row, before it holds anything */
	c_round(sh, WORKERS, pol, 1);
	atomic_store(&sh->child_row, cur_row(r));
	for (unsigned n = 2; n < 200; n++)
		c_round(sh, WORKERS, pol, n);
	atomic_store(&sh->done[WORKERS], 1);
	_exit(0);
}

static void c_worker(struct test_unit *u, struct shared *sh, int i)
{
	resil_policy_t *pol[NPOL];
	bool forked = false;
	resil_t *r;
	pid_t child = -1;

	TEST_CHECK(resil_open(&r, u->d.sock) == 0);
	for (int k = 0; k < NPOL; k++)
		TEST_CHECK(resil_policy(r, c_names[k], &pol[k]) == 0);
	atomic_store(&sh->row_before[i], cur_row(r));
	atomic_store(&sh->started[i], 1);
	for (unsigned n = 0; !atomic_load(&sh->stop); n++) {
		int go = atomic_load(&sh->go);

		c_round(sh, i, pol, n);
		atomic_store(&sh->next_check[i], (int64_t)ld_relaxed(&r->next_check_ns));
		if (go == 1)
			atomic_fetch_add(&sh->after_kill[i], 1);
		if (go == 1 && i == 0 && !forked) {
			/* the daemon is gone: a child of ours needs it not */
			forked = true;
			atomic_store(&sh->child_parent_row, cur_row(r));
			child = fork();
			TEST_CHECK(child >= 0);
			if (child == 0)
				prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (child == 0)
				c_child(sh, r, pol);
		}
		pause_a_little();
	}
	if (child > 0) {
		int st = test_wait_pid(child, 10000);

		TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	atomic_store(&sh->reattaches[i], (int)r->reattaches);
	atomic_store(&sh->row_after[i], cur_row(r));
	resil_close(r);
	_exit(0);
}

static bool probe_admitted(void *ctx)
{
	resil_policy_t *p = ctx;
	resil_permit_t pm;
	int v = resil_acquire(p, &pm);

	if (v == RESIL_ADMIT) {
		TEST_CHECK(resil_policy_state(p) == RESIL_STATE_HALF_OPEN);
		resil_release(p, &pm, RESIL_SUCCESS);
		return true;
	}
	TEST_CHECK(v == RESIL_REJECT_OPEN);
	return false;
}

static void test_daemon_killed(void **state)
{
	static struct test_unit u;
	struct shared *sh = shared_new();
	resil_policy_t *probe;
	resil_permit_t pm;
	pid_t pids[WORKERS];
	resil_t *r, *late;
	int64_t t0, killed;
	int err;

	(void)state;
	unit_init(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_int_equal(resil_open(&r, u.d.sock), 0);
	for (int k = 0; k < NPOL; k++)
		assert_int_equal(resil_define(r, c_names[k], c_confs[k]), 0);
	assert_int_equal(resil_define(r, "c-probe",
				      "breaker.window = consecutive:1; breaker.wait = 200ms; "
				      "breaker.half_open_calls = 1"),
			 0);
	assert_int_equal(resil_policy(r, "c-probe", &probe), 0);

	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork_kid();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			c_worker(&u, sh, i);
	}
	for (int i = 0; i < WORKERS; i++)
		assert_true(TEST_EVENTUALLY(atomic_load(&sh->calls[i][0]) > 20));

	/* SIGKILL: nobody stores, nobody restarts yet */
	test_unit_crash(&u);
	killed = test_mono_ns();
	atomic_store(&sh->go, 1);
	for (int i = 0; i < WORKERS; i++) {
		long c = atomic_load(&sh->after_kill[i]);

		assert_true(TEST_EVENTUALLY(atomic_load(&sh->after_kill[i]) > c + 100));
		/* and it made a check after the heartbeat went stale (the
		 * socket answered nobody: it went on deciding) */
		assert_true(TEST_EVENTUALLY(atomic_load(&sh->next_check[i]) >
					    killed + RESIL_BEAT_STALE_NS + RESIL_CHECK_NS));
	}
	/* the forked child decided on its own row */
	assert_true(TEST_EVENTUALLY(atomic_load(&sh->done[WORKERS])));
	assert_true(atomic_load(&sh->child_row) >= 0);
	assert_int_not_equal(atomic_load(&sh->child_row), atomic_load(&sh->child_parent_row));
	assert_int_equal(atomic_load(&sh->errors[WORKERS]), 0);

	/* an OPEN breaker reaches HALF_OPEN by a client's own acquire */
	assert_int_equal(resil_acquire(probe, &pm), RESIL_ADMIT);
	resil_release(probe, &pm, RESIL_FAILURE);
	assert_int_equal(resil_policy_state(probe), RESIL_STATE_OPEN);
	assert_true(test_wait_until(probe_admitted, probe, TEST_EVENTUALLY_MS));
	assert_int_equal(resil_policy_state(probe), RESIL_STATE_CLOSED);

	/* a process that never mapped the segments needs the daemon: a clear
	 * error, within the bound */
	t0 = test_mono_ns();
	err = resil_open(&late, u.d.sock);
	assert_true(err == -ECONNREFUSED || err == -ENOENT);
	assert_true(test_mono_ns() - t0 < 5000 * RESIL_NS_PER_MS);
	assert_non_null(strstr(resil_last_error(), "not running"));

	/* back, with the store: the rows of the running clients stay valid
	 * and the new daemon watches them (ours and the 4 workers'; the
	 * child that exited meanwhile is reclaimed) */
	assert_int_equal(test_unit_start(&u, true), 0);
	assert_true(TEST_EVENTUALLY(log_has(&u.d, "adopted the segments")));
	assert_true(TEST_EVENTUALLY(test_unit_status_has(&u, " 5 clients")));
	atomic_store(&sh->go, 2);
	for (int i = 0; i < WORKERS; i++) {
		long c = atomic_load(&sh->calls[i][0]);

		assert_true(TEST_EVENTUALLY(atomic_load(&sh->calls[i][0]) > c + 20));
	}
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < WORKERS; i++) {
		int st = test_wait_pid(pids[i], 20000);

		assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		if (atomic_load(&sh->errors[i]))
			fprintf(stderr, "worker %d: %ld errors, last %d\n", i,
				atomic_load(&sh->errors[i]), atomic_load(&sh->last_error[i]));
		assert_int_equal(atomic_load(&sh->errors[i]), 0);
		assert_int_equal(atomic_load(&sh->reattaches[i]), 0);
		assert_int_equal(atomic_load(&sh->row_after[i]), atomic_load(&sh->row_before[i]));
	}

	/* no decision lost: every call is in the policy's counters */
	for (int k = 0; k < NPOL; k++) {
		struct resil_map *m = ld_acquire(&r->cur);
		long calls = 0, adm = 0, rej = 0;
		uint32_t slot;
		uint64_t word, v[RESIL_STAT__MAX];
		const struct resil_rec *rec;

		for (int i = 0; i <= WORKERS; i++) {
			calls += atomic_load(&sh->calls[i][k]);
			adm += atomic_load(&sh->admitted[i][k]);
			rej += atomic_load(&sh->rejected[i][k]);
		}
		assert_int_equal(calls, adm + rej);
		assert_int_equal(resil_seg_lookup(m->seg, c_names[k], &slot, &word), 0);
		rec = resil_seg_rec_of(m->seg, word);
		assert_non_null(rec);
		resil_stats_read_all(resil_stats_state_of(m->seg, rec), v);
		assert_int_equal(v[RESIL_STAT_SUCCESS] + v[RESIL_STAT_FAILURE] +
				     v[RESIL_STAT_IGNORED],
				 (uint64_t)adm);
		if (k == 5) {
			long retries = 0, stops = 0;

			for (int i = 0; i <= WORKERS; i++) {
				retries += atomic_load(&sh->retries[i]);
				stops += atomic_load(&sh->budget_stops[i]);
			}
			assert_int_equal(v[RESIL_STAT_RETRIES], (uint64_t)retries);
			assert_int_equal(v[RESIL_STAT_REJ_BUDGET], (uint64_t)stops);
			assert_true(stops > 0);
			/* a budget refusal counts as a call of its own */
			calls += stops;
		}
		assert_int_equal(resil_stats_calls(v), (uint64_t)calls);
		if (k == 0)
			assert_true(v[RESIL_STAT_REJ_OPEN] > 0);
	}
	assert_int_equal(r->reattaches, 0);

	resil_close(r);
	munmap(sh, sizeof(*sh));
	unit_fini(&u);
}

/* ---- (d) segments of another ABI major: retired, clients re-attach ---- */

static void test_retired(void **state)
{
	static struct test_unit u;
	resil_policy_t *p;
	resil_permit_t pm;
	struct resil_map *old;
	struct drive dr;
	uint32_t *abi;
	void *m;
	resil_t *r;
	int cfd;

	(void)state;
	unit_init(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_int_equal(resil_open(&r, u.d.sock), 0);
	assert_int_equal(resil_define(r, "d-pol", "bulkhead.max = 4"), 0);
	assert_int_equal(resil_policy(r, "d-pol", &p), 0);
	old = ld_acquire(&r->cur);

	/* a crash; before the restart, the stored config segment says it
	 * belongs to another ABI major (as a build of another major left it) */
	test_unit_crash(&u);
	cfd = test_unit_store_fd(&u, "config");
	assert_true(cfd >= 0);
	m = mmap(NULL, RESIL_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	assert_true(m != MAP_FAILED);
	abi = (uint32_t *)((char *)m + offsetof(struct resil_cfg_hdr, abi_major));
	*abi = RESIL_ABI_MAJOR + 1;
	munmap(m, RESIL_HDR_SIZE);
	/* the client decides on meanwhile */
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);

	assert_int_equal(test_unit_start(&u, true), 0);
	assert_true(TEST_EVENTUALLY(log_has(&u.d, "not adopted")));
	/* retired in both headers, and the old pair left the store for a new
	 * one */
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_true(ld_acquire(&old->seg->cfg->flags) & RESIL_SEG_RETIRED);
	assert_true(ld_acquire(&old->seg->st->flags) & RESIL_SEG_RETIRED);

	dr.r = r;
	dr.p = p;
	dr.errors = 0;
	assert_true(test_wait_until(drive_until_reattached, &dr, TEST_EVENTUALLY_MS));
	assert_int_equal(dr.errors, 0);
	assert_ptr_not_equal(ld_acquire(&r->cur), old);
	assert_int_equal(ld_acquire(&r->cur)->seg->cfg->abi_major, RESIL_ABI_MAJOR);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	/* our definition came along */
	assert_true(stat_of(ld_acquire(&r->cur)->seg, "d-pol", RESIL_STAT_SUCCESS) >= 1);

	resil_close(r);
	unit_fini(&u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_restart_with_store, teardown),
	    cmocka_unit_test_teardown(test_restart_without_store, teardown),
	    cmocka_unit_test_teardown(test_daemon_killed, teardown),
	    cmocka_unit_test_teardown(test_retired, teardown),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "int_restart: needs root\n");
		return TEST_SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * counts.c - this process's count tables (shm/count_table.h): one per
 * daemon's segment pair it maps, made when it claims its row there,
 * handed to resild over the control connection (CountTable, SCM_RIGHTS),
 * handed again when resild may have lost it (a new connection, a new row,
 * another daemon pid), and the stripe each deciding thread writes. What
 * resild does with it: daemon/counts.c; the design: docs/trust.md,
 * "Count tables".
 *
 * Words: the table's counters are written by this process only, counted
 * on the decision path (shm/count_table.h, resil_count_acquired / _released):
 *   - stripes 1..15 each belong to one live thread (stripes_taken, a
 *     process-local word: taken by CAS at the thread's first
 *     resil_policy or its first claim in a pool, a walk; given back by
 *     its thread-exit destructor, release): one plain add, no locked
 *     instruction, on a line no other thread writes (the next owner
 *     continues the counts: they only grow, and its CAS of stripes_taken
 *     acquires the last owner's stores);
 *   - stripe 0 is shared by the threads that have none: atomic adds
 *     (relaxed for acquired, release for released);
 * the thread's stripe is kept as its entry's offset in a slot's block
 * (resil_count_stripe_off, shm/count_table.c; 0: none), so the decision
 * path pays one test of it and one add, and threads past 15 live
 * deciding ones pay a locked add.
 * A mapping without a table (embedded mode, this process's own pair,
 * a table that could not be made) counts into resil_priv_counts_none,
 * private memory nobody reads: the decision path has no branch on
 * whether a table exists.
 *
 * Fork: the child's copy of a table is its parent's memfd; the child maps
 * private zeroed memory at the same address (bindings keep their
 * pointers) and so counts nowhere: a forked child has no table of its
 * own (docs/trust.md says what that leaves). Its stripes are those of
 * its one thread.
 *
 * Crash window: a process killed between a count and its CAS leaves
 * acquired - released too high (resild frees fewer, never more); killed
 * while handing a table, resild maps it or not, and frees the process's
 * row with it either way.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "binding.h"
#include "internal.h"
#include "resil.pb-c.h"

struct resil_count resil_priv_counts_none[RESIL_COUNT_STRIPES];

static _Thread_local bool stripe_tried;
/* bit 0: the shared stripe, never an owner's; bits past the stripes:
 * none to take */
#define STRIPES_NONE (~0ull << RESIL_COUNT_STRIPES | 1ull)
static ra64 stripes_taken = STRIPES_NONE;
static pthread_key_t stripe_key;
static pthread_once_t stripe_once = PTHREAD_ONCE_INIT;
static bool stripe_key_ok;

static void stripe_exit(void *v)
{
	uint32_t s = (uint32_t)(uintptr_t)v;

	/* a decision in a later destructor of this thread counts shared */
	resil_count_stripe_off = 0;
	/* release: the next owner (acquire CAS) sees this thread's counts */
	atomic_fetch_and_explicit(&stripes_taken, ~(1ull << s), memory_order_release);
}

static void stripe_key_make(void)
{
	stripe_key_ok = pthread_key_create(&stripe_key, stripe_exit) == 0;
}

/* The thread's own stripe, 1..15, or 0: none free (or no destructor to
 * give one back). Once per thread. */
static uint32_t stripe_take(void)
{
	uint64_t t = ld_relaxed(&stripes_taken);

	pthread_once(&stripe_once, stripe_key_make);
	if (!stripe_key_ok)
		return 0;
	while (~t) {
		uint32_t s = (uint32_t)__builtin_ctzll(~t);

		if (atomic_compare_exchange_weak_explicit(&stripes_taken, &t, t | 1ull << s,
							  memory_order_acquire,
							  memory_order_relaxed)) {
			if (pthread_setspecific(stripe_key, (void *)(uintptr_t)s) != 0) {
				stripe_exit((void *)(uintptr_t)s);
				return 0;
			}
			return s;
		}
	}
	return 0;
}

RESIL_COLD void resil_priv_stripe_first(void)
{
	if (stripe_tried)
		return;
	stripe_tried = true;
	resil_count_stripe_off = stripe_take() * sizeof(struct resil_count);
}

RESIL_COLD void resil_priv_count_slow(struct resil_count *e0, uint64_t n)
{
	resil_priv_stripe_first();
	resil_count_acquired(e0, n);
	/* a test's way into the crash window between a claim's count and
	 * its CAS (tests/int_forged_claims_lib.c): stop here, to be killed */
	if (RESIL_UNLIKELY(getenv("RESIL_TEST_STOP_IN_COUNT") != NULL))
		raise(SIGSTOP);
}

void resil_priv_counts_child(void)
{
	uint64_t s = resil_count_stripe_off / sizeof(struct resil_count);

	/* the child's one thread keeps its stripe; the others are not here */
	st_relaxed(&stripes_taken, STRIPES_NONE | (s ? 1ull << s : 0));
}

/* ---- tables ---- */

/* Make m's table: a sealed memfd of the size m's slot count gives, mapped
 * read-write. Under r->lock, before m is published. */
static int table_make(struct resil_map *m)
{
	uint32_t cap = m->seg->cfg->slot_cap;
	uint64_t size = resil_count_table_size(cap);
	void *t;
	int fd;

	fd = memfd_create("resil-counts", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	t = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t == MAP_FAILED) {
		int e = -errno;

		close(fd);
		return e;
	}
	m->counts = t;
	m->counts_cap = cap;
	m->counts_fd = fd;
	return 0;
}

/* Hand m's table to resild, on this process's connection. Under r->lock. */
static int table_hand(struct resil *r, struct resil_map *m)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__CountTable ct = RESIL__COUNT_TABLE__INIT;
	Resil__Response *resp = NULL;
	int err;

	req.body_case = RESIL__REQUEST__BODY_COUNT_TABLE;
	req.count_table = &ct;
	r->pass_fd = m->counts_fd;
	err = resil_priv_request(r, &req, &resp, NULL, NULL);
	r->pass_fd = -1;
	if (err < 0)
		return err;
	resil__response__free_unpacked(resp, NULL);
	m->counts_conn = r->conn_gen;
	m->counts_row = atomic_load_explicit(&m->row, memory_order_relaxed);
	m->counts_daemon = ld_relaxed(&m->seg->st->daemon_pid);
	return 0;
}

void resil_priv_counts_open(struct resil *r, struct resil_map *m)
{
	if (r->embedded || m->local || m->counts)
		return;
	if (table_make(m) < 0)
		return; /* no table: this process keeps the rule of rows without one */
	(void)table_hand(r, m);
}

void resil_priv_counts_check(struct resil *r)
{
	struct resil_map *m = ld_acquire(&r->cur);
	int row = atomic_load_explicit(&m->row, memory_order_relaxed);

	if (!m->counts || m->counts_fd < 0 || row < 0)
		return;
	if (m->counts_row == row && m->counts_conn == r->conn_gen &&
	    m->counts_daemon == ld_relaxed(&m->seg->st->daemon_pid))
		return;
	/* another daemon pid (a restart that adopted these segments, or a
	 * word someone rewrote): is our connection still its? */
	if (resil_priv_ctl_probe(r, RESIL_PROBE_HOT_MS) < 0)
		return;
	if (m->counts_row == row && m->counts_conn == r->conn_gen) {
		m->counts_daemon = ld_relaxed(&m->seg->st->daemon_pid);
		return;
	}
	(void)table_hand(r, m);
}

void resil_priv_counts_drop(struct resil_map *m)
{
	if (!m->counts)
		return;
	/* private zeroed memory where the parent's table was: the bindings
	 * keep their pointers, and what this process counts reaches nobody.
	 * Without memory for it (MAP_FIXED over a mapping fails for nothing
	 * else) the child writes its parent's table: its stripe's counts may
	 * be lost, as rare as a fork that fails for memory */
	(void)mmap(m->counts, resil_count_table_size(m->counts_cap), PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (m->counts_fd >= 0)
		close(m->counts_fd);
	m->counts_fd = -1;
}

void resil_priv_counts_close(struct resil_map *m)
{
	if (!m->counts)
		return;
	munmap(m->counts, resil_count_table_size(m->counts_cap));
	if (m->counts_fd >= 0)
		close(m->counts_fd);
	m->counts = NULL;
	m->counts_fd = -1;
}

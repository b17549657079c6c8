/* SPDX-License-Identifier: MIT */
/*
 * int_poison_restart.c - the poisoned fd-store restart loop.
 *
 * A harness plays systemd 252 for one unit (as int_restart.c: a notify
 * socket keeping what the daemon stores with FDSTORE=1, and a restart
 * that passes the store as fds 3.. with LISTEN_FDS/LISTEN_FDNAMES). Five
 * times: resild is SIGKILLed (a crash: Restart=always brings it back with
 * the store), and before it comes back a client of the trust domain, with
 * its ordinary read-write mapping of the state segment, poisons blocks:
 *   - shed.width_ns = 0 (once the tick's divisor: SIGFPE, and the fd store
 *     handed the same block to every restart: status 136 five times);
 *   - the breaker's layout copies (win_off outside the segment, the
 *     window kind), the bulkhead's slot count, the adaptive
 *     pool's slot offset: blocks no word of which can be read as their
 *     configuration's;
 *   - a breaker state code of 7 (outside the enum: rejected for ever),
 *     adaptive phase 9, budget tokens at INT64_MAX, a p95 cache from the
 *     future, a keyed table's `used` above limit.keys.
 * Every restart adopts the segments and survives (still running, and
 * answering, after several ticks); the blocks with bad layout copies are
 * reset, the other words repaired; resil_state_repairs_total counts both
 * (each restart's own), and the event ring holds a RESIL_EV_REPAIRED event
 * per policy naming RESIL_W_BLOCK_RESET for the resets (logged as "state
 * blocks beyond repair"). The client that poisoned them decides on every
 * policy afterwards, through the same mapping.
 * Skips (77) when not root, as int_restart.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptive.h"
#include "breaker.h"
#include "budget.h"
#include "bulkhead.h"
#include "internal.h"
#include "limit.h"
#include "policy.h"
#include "resil.h"
#include "seg.h"
#include "shed.h"
#include "stats.h"
#include "fdstore_util.h"
#include "testutil.h"

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

static int teardown(void **state)
{
	(void)state;
	if (current)
		unit_fini(current);
	return 0;
}

/* resil_state_repairs_total as resilctl metrics reports it, -1 if absent. */
static long repairs_total(const struct test_unit *u)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", u->d.sock, "metrics", NULL};
	static char out[1 << 20];
	const char *p;

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return -1;
	p = strstr(out, "\nresil_state_repairs_total ");
	return p ? strtol(p + strlen("\nresil_state_repairs_total "), NULL, 10) : -1;
}

/* RESIL_EV_REPAIRED events in the ring naming word for slot. */
static int events_of(const struct resil_seg *s, uint32_t slot, uint32_t word)
{
	uint64_t head = ld_acquire(&s->st->event_head);
	uint64_t from = head > s->geo.event_cap ? head - s->geo.event_cap : 0;
	int n = 0;

	for (uint64_t i = from; i < head; i++) {
		struct resil_event e;

		if (resil_event_read(s, i, &e) == 0 && e.type == RESIL_EV_REPAIRED &&
		    e.slot == slot && e.a == word)
			n++;
	}
	return n;
}

#define NPOL 5
static const char *const NAMES[NPOL] = {"x-shed", "x-brk", "x-pool", "x-budget", "x-keys"};
static const char *const TEXTS[NPOL] = {
    "shed.window = 2s",
    "breaker.window = count:10; breaker.wait = 1h; histogram = on",
    "bulkhead.max = 4; adaptive.max = 8",
    "retry.budget = grpc:10:0.1",
    "limit.rate = 100/s; limit.keys = 64; limit.default_key = any",
};
/* the blocks of each policy whose layout copies the poison rewrites */
static const int RESETS[NPOL] = {1, 1, 2, 0, 0};

static void *comp(const struct resil_seg *s, const struct resil_rec *rec, enum resil_comp c)
{
	assert_true(resil_has(rec, c));
	return resil_comp_state(s, rec, c);
}

static void poison(const struct resil_seg *s, const struct resil_rec *rec[NPOL])
{
	struct resil_shed_state *sh = comp(s, rec[0], RESIL_C_SHED);
	struct resil_breaker_state *b = comp(s, rec[1], RESIL_C_BREAKER);
	struct resil_bulkhead_state *h = comp(s, rec[2], RESIL_C_BULKHEAD);
	struct resil_adaptive_state *a = comp(s, rec[2], RESIL_C_ADAPTIVE);
	struct resil_budget_state *bu = comp(s, rec[3], RESIL_C_BUDGET);
	struct resil_limit_state *ls = comp(s, rec[4], RESIL_C_LIMIT);
	char *st = comp(s, rec[1], RESIL_C_STATS);

	sh->width_ns = 0;
	st_relaxed(&sh->epoch, UINT64_MAX);
	b->win_off = 0xfffffff0u;
	b->probe_off = 0x7fffffffu;
	b->kind = 77;
	st_relaxed(&b->word, (ld_relaxed(&b->word) & ~7ULL) | 7);
	h->nslots = 0;
	a->slots_off = 12;
	st_relaxed(&a->phase, 9);
	st_relaxed(&bu->tokens_milli, INT64_MAX);
	st_relaxed(&ls->used, UINT64_MAX);
	/* the p95 cache: after the stats stripes, value then calls */
	st_relaxed((rai64 *)(st + RESIL_STATS_STRIPES * RESIL_HOT_ALIGN), INT64_MAX - 1);
	st_relaxed((ra64 *)(st + RESIL_STATS_STRIPES * RESIL_HOT_ALIGN + 8), UINT64_MAX);
}

struct alive {
	struct test_unit *u;
	long repairs;
};

/* Repairs counted by this daemon, and it still runs and answers. */
static bool repaired_and_alive(void *ctx)
{
	struct alive *al = ctx;

	al->repairs = repairs_total(al->u);
	return al->repairs > 0 && waitpid(al->u->d.pid, NULL, WNOHANG) == 0 &&
	       test_daemon_answers(&al->u->d);
}

static void test_poisoned_restarts(void **state)
{
	static struct test_unit u;
	const struct resil_rec *rec[NPOL];
	const struct resil_seg *s;
	resil_policy_t *p[NPOL];
	resil_permit_t pm;
	resil_t *r;

	(void)state;
	unit_init(&u);
	assert_int_equal(test_unit_start(&u, false), 0);
	assert_true(TEST_EVENTUALLY(test_unit_stored(&u, 2)));
	assert_int_equal(resil_open(&r, u.d.sock), 0);
	for (int i = 0; i < NPOL; i++) {
		assert_int_equal(resil_define(r, NAMES[i], TEXTS[i]), 0);
		assert_int_equal(resil_policy(r, NAMES[i], &p[i]), 0);
		rec[i] = test_rec_of(r, NAMES[i]);
	}
	s = ld_acquire(&r->cur)->seg;
	for (int i = 0; i < 20; i++) {
		assert_int_equal(resil_acquire(p[1], &pm), RESIL_ADMIT);
		resil_release(p[1], &pm, RESIL_SUCCESS);
	}
	assert_true(resil_acquire_key(p[4], "alice", 5, &pm) == RESIL_ADMIT);
	resil_release(p[4], &pm, RESIL_SUCCESS);

	for (int round = 1; round <= 5; round++) {
		struct alive al = {.u = &u};

		test_unit_crash(&u);
		poison(s, rec);
		assert_int_equal(test_unit_start(&u, true), 0);
		/* adopted (the same segments), survived its ticks, counted */
		assert_true(test_wait_until(repaired_and_alive, &al, TEST_EVENTUALLY_MS));
		assert_ptr_equal(ld_acquire(&r->cur)->seg, s);
		for (int i = 0; i < NPOL; i++) {
			int want = RESETS[i] ? round : 0;

			assert_int_equal(events_of(s, rec[i]->slot, RESIL_W_BLOCK_RESET), want);
		}
		/* 4 blocks reset; tokens, used and the p95 cache repaired */
		assert_true(al.repairs >= 4 + 3);
		/* the blocks as their configuration says */
		assert_true(
		    resil_shed_layout_ok(&rec[0]->conf.shed, comp(s, rec[0], RESIL_C_SHED)));
		assert_true(resil_breaker_layout_ok(&rec[1]->conf.breaker,
						    comp(s, rec[1], RESIL_C_BREAKER)));
		assert_int_equal(resil_policy_state(p[1]), RESIL_STATE_CLOSED);
		/* and the poisoning client decides on every policy */
		for (int i = 0; i < NPOL; i++) {
			if (i == 3)
				continue; /* a budget alone admits every first attempt */
			assert_int_equal(resil_acquire(p[i], &pm), RESIL_ADMIT);
			resil_release(p[i], &pm, RESIL_SUCCESS);
		}
		assert_int_equal(waitpid(u.d.pid, NULL, WNOHANG), 0);
	}
	assert_true(TEST_EVENTUALLY(log_has(&u.d, "state blocks beyond repair")));
	resil_close(r);
	unit_fini(&u);
	printf("int_poison_restart: ok (5 restarts on poisoned blocks: adopted, alive, "
	       "4 blocks reset and the other words repaired each time)\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_poisoned_restarts, teardown),
	};

	if (geteuid() != 0) {
		printf("int_poison_restart: skipped (needs root, as int_restart)\n");
		return TEST_SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

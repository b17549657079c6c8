/* SPDX-License-Identifier: MIT */
/*
 * int_hostile_claims.c - claims a member plants in the state segment do
 * not lock a policy for the others. As a member of the socket group
 * without admin rights (accounts made for the test: group rt-clm, users
 * rt-clm-a, the attacker, and rt-clm-v, the others), on policies root
 * defines:
 *   all-ones  the attacker writes all ones into every word of a bulkhead's
 *             block (its slots, its full hint, its waiters, its geometry).
 *             Without any reset, uid V is admitted again within a tick:
 *             once resild's beat (the state header's daemon_beat_ns,
 *             stored as each tick begins) has moved twice after the
 *             write, a whole tick ran after it, and its sweep freed the
 *             slots. Counted in ticks, not time: under load a tick is
 *             late, not skipped. The bulkhead still holds at most its max.
 *   probes    a breaker with half_open_max_wait = 0 (no timeout) in
 *             HALF_OPEN: the attacker takes every probe and relabels each
 *             to a client id whose row is free (a dead one). uid V gets a
 *             probe within a tick (the same count), no reset.
 * Skips (77) when not root.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "breaker.h"
#include "bulkhead.h"
#include "internal.h"
#include "testutil.h"

static struct test_daemon d;
static gid_t g;
static uid_t ua, uv;

/* Wait for one whole tick of resild to run from now: its beat moves
 * twice (the first move may end a tick that began before the caller's
 * write; the second begins after a tick that began after it). Each move
 * is awaited with no bound in ticks, only the generous time a loaded
 * machine may need to run one tick. */
static void one_tick(resil_t *r)
{
	for (int i = 0; i < 2; i++) {
		uint64_t b = ld_relaxed(&r->seg.st->daemon_beat_ns);

		TEST_CHECK(TEST_EVENTUALLY(ld_relaxed(&r->seg.st->daemon_beat_ns) != b));
	}
}

/* Run fn as uid in a child; its exit status must be 0. */
static void as(uid_t uid, void (*fn)(void))
{
	pid_t pid = fork();

	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		test_become(uid, g);
		fn();
		_exit(0);
	}
	TEST_CHECK(test_wait_pid(pid, 60000) == 0);
}

/* ---- all ones ---- */

static void ones_attack(void)
{
	resil_t *r = NULL;
	const struct resil_rec *rec;
	uint64_t *w;
	uint64_t n;

	TEST_CHECK(resil_open(&r, d.sock) == 0);
	rec = test_rec_of(r, "ones");
	w = resil_comp_state(&r->seg, rec, RESIL_C_BULKHEAD);
	n = resil_bulkhead_state_size(&rec->conf.bulkhead) / sizeof(*w);
	for (uint64_t i = 0; i < n; i++)
		__atomic_store_n(&w[i], UINT64_MAX, __ATOMIC_RELAXED);
	printf("all-ones: uid %u wrote %llu words of all ones\n", (unsigned)getuid(),
	       (unsigned long long)n);
	resil_close(r);
}

static void ones_other(void)
{
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm[5];
	int admitted = 0;

	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(resil_policy(r, "ones", &p) == 0);
	one_tick(r);
	TEST_CHECK(test_try_acquire(p) == RESIL_ADMIT);
	/* healed: the max again, no more */
	for (int i = 0; i < 5; i++)
		admitted += resil_acquire(p, &pm[i]) == RESIL_ADMIT;
	printf("all-ones: uid %u admitted again, %d of 5 at once (max 4)\n", (unsigned)getuid(),
	       admitted);
	TEST_CHECK(admitted == 4);
	for (int i = 0; i < 5; i++)
		resil_release(p, &pm[i], RESIL_SUCCESS);
	resil_close(r);
}

/* ---- probes ---- */

static void probes_attack(void)
{
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm[2];
	const struct resil_rec *rec;
	struct resil_breaker_probe *pr;
	uint32_t dead = 0;

	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(resil_policy(r, "probes", &p) == 0);
	/* both probes of this HALF_OPEN */
	TEST_CHECK(TEST_EVENTUALLY(resil_acquire(p, &pm[0]) == RESIL_ADMIT));
	TEST_CHECK(resil_acquire(p, &pm[1]) == RESIL_ADMIT);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_HALF_OPEN);
	for (uint32_t i = r->seg.geo.client_cap; i-- > 0;)
		if (__atomic_load_n(&resil_seg_client(&r->seg, i)->owner, __ATOMIC_RELAXED) == 0) {
			dead = i + 1;
			break;
		}
	TEST_CHECK(dead != 0);
	rec = test_rec_of(r, "probes");
	pr =
	    (struct resil_breaker_probe *)((char *)resil_comp_state(&r->seg, rec, RESIL_C_BREAKER) +
					   sizeof(struct resil_breaker_state));
	for (int i = 0; i < 2; i++) {
		uint64_t v = __atomic_load_n(&pr[i].owner, __ATOMIC_RELAXED);

		TEST_CHECK(v != 0);
		__atomic_store_n(&pr[i].owner, (v & 0xffffffff00000000ULL) | dead,
				 __ATOMIC_RELAXED);
	}
	printf("probes: uid %u holds both probes, relabelled to client %u (a free row)\n",
	       (unsigned)getuid(), dead);
	/* the permits are dropped without a release: the attacker leaves */
	_exit(0);
}

static void probes_other(void)
{
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;

	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(resil_policy(r, "probes", &p) == 0);
	one_tick(r);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	printf("probes: uid %u got a probe\n", (unsigned)getuid());
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_close(r);
}

int main(void)
{
	char gs[16];
	const char *extra[] = {"--socket-group", gs, NULL};
	resil_t *root = NULL;
	resil_policy_t *p;
	resil_permit_t pm;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0) {
		fprintf(stderr, "int_hostile_claims: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-clm", &g) == 0);
	TEST_CHECK(test_user_make("rt-clm-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-clm-v", g, &uv) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);

	TEST_CHECK(resil_define(root, "ones", "bulkhead.max = 4; bulkhead.wait = 50ms") == 0);
	as(ua, ones_attack);
	as(uv, ones_other);

	TEST_CHECK(resil_define(root, "probes",
				"breaker.window = consecutive:1; breaker.wait = 100ms; "
				"breaker.half_open_calls = 2; breaker.half_open_max_wait = 0") ==
		   0);
	TEST_CHECK(resil_policy(root, "probes", &p) == 0);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	resil_release(p, &pm, RESIL_FAILURE);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_OPEN);
	as(ua, probes_attack);
	as(uv, probes_other);

	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_hostile_claims: ok\n");
	return 0;
}

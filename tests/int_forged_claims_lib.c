/* SPDX-License-Identifier: MIT */
/*
 * int_forged_claims_lib.c - claims a member forges under a live libresil
 * client's id are freed: the library makes, fills and hands resild its
 * count table itself (client/counts.c, daemon/counts.c). As members of the
 * socket group without admin rights (accounts made for the test: group
 * rt-fgl, users rt-fgl-v, the victim, and rt-fgl-a, the attacker), on a
 * bulkhead of 8 root defines:
 *   - the victim (resil_open, resil_acquire, resil_release: nothing by
 *     hand) holds 2 permits; the attacker writes the victim's id into the
 *     6 free slots and exits. After two of resild's ticks exactly 2 slots
 *     name the victim and root gets exactly 6 permits (nobody past the
 *     maximum); `show` lists the victim's row with 2 and nothing "not
 *     its";
 *   - again, then root's `reset`: when it answers, 2 slots name the
 *     victim;
 *   - the victim releases its 2 (a release whose slot was freed in place
 *     of a forged one is a CAS that fails) and takes and releases one
 *     more: admitted; after a tick no slot names it and root gets all 8;
 *   - resild restarts (new segments; the bulkhead now with
 *     bulkhead.wait, the other way of claiming): the victim follows by
 *     itself, hands the new resild a new table and holds 2 there; forged
 *     again, after two ticks exactly 2 slots name it;
 *   - the crash window between a count and its CAS: a thread of the
 *     victim counts its claim and the process stops before the CAS
 *     (RESIL_TEST_STOP_IN_COUNT); forged into the 6 free slots, after two
 *     ticks 3 slots name the victim (its 2, and one forged kept for the
 *     claim counted without a slot: fewer freed, never more) and root
 *     gets 5; the victim SIGKILLed there, everything it named comes back
 *     (root gets 8).
 * Skips (77) when not root.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bulkhead.h"
#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define MAX 8

static struct test_daemon d;
static gid_t g;
static uid_t ua, uv;
static int to_parent[2], to_victim[2];
static uint32_t victim_id;

/* ---- the victim: a libresil client, told what to do over a pipe ---- */

static resil_t *vr;
static resil_policy_t *vp_;
static resil_permit_t held[2];

static uint32_t my_id(void)
{
	struct resil_map *m = atomic_load(&vr->cur);

	return resil_client_id(atomic_load(&m->row));
}

static void *stop_in_count(void *arg)
{
	resil_permit_t pm;

	(void)arg;
	/* this thread's first pooled claim: counted, then the process stops
	 * before the CAS (counts.c) */
	resil_acquire(vp_, &pm);
	return NULL;
}

static void victim(void)
{
	pthread_t th;
	char c;

	test_become(uv, g);
	TEST_CHECK(resil_open(&vr, d.sock) == 0);
	TEST_CHECK(resil_policy(vr, "forged", &vp_) == 0);
	while (read(to_victim[0], &c, 1) == 1) {
		uint32_t reply = 0;

		switch (c) {
		case 'h': /* hold 2 */
			for (int i = 0; i < 2; i++)
				TEST_CHECK(resil_acquire(vp_, &held[i]) == RESIL_ADMIT);
			reply = my_id();
			break;
		case 'r': /* release them; one more taken and released */
			for (int i = 0; i < 2; i++)
				resil_release(vp_, &held[i], RESIL_SUCCESS);
			reply = test_try_acquire(vp_) == RESIL_ADMIT;
			break;
		case 'a': /* follow a restarted resild */
			/* decisions look for the new resild (each 256th) */
			TEST_CHECK(TEST_EVENTUALLY(test_try_acquire(vp_) == RESIL_ADMIT &&
						   atomic_load(&vr->reattaches) > 0));
			reply = atomic_load(&vr->reattaches);
			break;
		case 'k': /* into the crash window */
			setenv("RESIL_TEST_STOP_IN_COUNT", "1", 1);
			TEST_CHECK(pthread_create(&th, NULL, stop_in_count, NULL) == 0);
			pthread_join(th, NULL);
			break;
		}
		TEST_CHECK(write(to_parent[1], &reply, sizeof(reply)) == sizeof(reply));
	}
	resil_close(vr);
}

static uint32_t tell(char c)
{
	uint32_t reply = 0;

	TEST_CHECK(write(to_victim[1], &c, 1) == 1);
	TEST_CHECK(read(to_parent[0], &reply, sizeof(reply)) == sizeof(reply));
	return reply;
}

static void root_open(resil_t **root, resil_policy_t **p, const char *conf)
{
	TEST_CHECK(resil_open(root, d.sock) == 0);
	TEST_CHECK(resil_define(*root, "forged", conf) == 0);
	TEST_CHECK(resil_policy(*root, "forged", p) == 0);
}

int main(void)
{
	char gs[16], name[64];
	const char *extra[] = {"--socket-group", gs, NULL};
	resil_t *root = NULL;
	resil_policy_t *p;
	pid_t vp;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_forged_claims_lib: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-fgl", &g) == 0);
	TEST_CHECK(test_user_make("rt-fgl-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-fgl-v", g, &uv) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	root_open(&root, &p, "bulkhead.max = 8");

	TEST_CHECK(pipe(to_parent) == 0 && pipe(to_victim) == 0);
	vp = fork();
	TEST_CHECK(vp >= 0);
	if (vp == 0) {
		close(to_parent[0]);
		close(to_victim[1]);
		victim();
		_exit(0);
	}
	close(to_parent[1]);
	close(to_victim[0]);

	/* forged, then ticks */
	victim_id = tell('h');
	TEST_CHECK(victim_id != 0 && test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	test_ticks(root, 2);
	printf("after two ticks: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", victim_id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 2);
	snprintf(name, sizeof(name), "held_row_%u_pid_%d", victim_id - 1, (int)vp);
	TEST_CHECK(test_policy_stat(root, "forged", name) == 2);
	snprintf(name, sizeof(name), "forged_row_%u", victim_id - 1);
	TEST_CHECK(test_policy_stat(root, "forged", name) == -1);

	/* forged, then root's reset */
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	test_policy_reset(root, "forged");
	printf("after the reset: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", victim_id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 2);

	/* the victim releases, and decides again */
	TEST_CHECK(tell('r') == 1);
	test_ticks(root, 1);
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 0);
	TEST_CHECK(test_admitted(p, MAX) == MAX);

	/* resild restarts with new segments: the victim hands the new one
	 * its table */
	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	TEST_CHECK(test_daemon_start(&d, extra) == 0);
	/* callers that wait: the bulkhead's own acquire, which takes a
	 * thread's stripe at its first claim (where the crash window's
	 * stop is) */
	root_open(&root, &p, "bulkhead.max = 8; bulkhead.wait = 1ms");
	TEST_CHECK(tell('a') >= 1);
	victim_id = tell('h');
	TEST_CHECK(victim_id != 0 && test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	test_ticks(root, 2);
	printf("after the restart and two ticks: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", victim_id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 2);

	/* the crash window: a claim counted, its CAS not made */
	TEST_CHECK(write(to_victim[1], "k", 1) == 1);
	TEST_CHECK(waitpid(vp, &st, WUNTRACED) == vp && WIFSTOPPED(st));
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 2);
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	test_ticks(root, 2);
	printf("stopped between a count and its CAS, two ticks: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", victim_id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", victim_id) == 3);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 3);
	kill(vp, SIGKILL);
	TEST_CHECK(waitpid(vp, &st, 0) == vp && WIFSIGNALED(st));
	TEST_CHECK(TEST_EVENTUALLY(test_bulkhead_naming(root, "forged", victim_id) == 0));
	TEST_CHECK(test_admitted(p, MAX) == MAX);

	close(to_victim[1]);
	close(to_parent[0]);
	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_forged_claims_lib: ok\n");
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_grace_churn.c - a member's longest wait delays the reuse of its own
 * space only. As members of the socket group without admin rights
 * (accounts made for the test: group rt-grc, users rt-grc-k, the keeper,
 * and rt-grc-c, the churner), on a daemon of --policies 256 (1,024
 * configuration records):
 *   1. the keeper defines a policy with the longest bulkhead.wait allowed
 *      (a week; a second more is refused), holds one of its permits from
 *      a process that stays for the whole test, and defines and deletes a
 *      second such policy: that record waits out its own grace (a week
 *      and a second);
 *   2. the churner runs 2,000 cycles of define and delete of a keyed
 *      limiter, every call answered 0: each cycle takes a record and
 *      retires it, so past 1,024 cycles every define reuses a record
 *      retired after its own policy's grace (1 s), waiting for it if it
 *      must (a grace that were the longest wait ever defined would make
 *      the 1,023rd define fail: "configuration records exhausted");
 *   3. root creates a policy at once: it succeeds;
 *   4. records and arena come back (eventually, 10 s) to their use
 *      before the churn, the keeper's retired record still waiting.
 * Cycles x RESIL_TEST_SCALE. Skips (77) when not root.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

#define WEEK "604800s"

static struct test_daemon d;
static gid_t g;
static uid_t uk, uc;

/* The keeper: defines, holds a permit of "keep" until its stdin (the
 * pipe's read end) reports the test is over. Writes one byte to out once
 * it holds the permit and the retired policy is gone. */
static void keeper(int in, int out)
{
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	char ch = 'k';

	test_become(uk, g);
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(resil_define(r, "keep.over", "bulkhead.max = 2; bulkhead.wait = 604801s") ==
		   -EINVAL);
	printf("keeper: bulkhead.wait = 604801s refused: %s\n", resil_last_error());
	TEST_CHECK(resil_define(r, "keep", "bulkhead.max = 2; bulkhead.wait = " WEEK) == 0);
	TEST_CHECK(resil_define(r, "keep.gone", "bulkhead.max = 2; bulkhead.wait = " WEEK) == 0);
	TEST_CHECK(resil_delete(r, "keep.gone") == 0);
	TEST_CHECK(resil_policy(r, "keep", &p) == 0);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	TEST_CHECK(write(out, &ch, 1) == 1);
	TEST_CHECK(read(in, &ch, 1) == 0); /* the parent closed its end */
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_close(r);
}

/* The churner: cycles of define and delete; exits 0 when every call
 * answered 0. */
static void churner(int cycles)
{
	resil_t *r = NULL;
	int bad = 0;

	test_become(uc, g);
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	for (int i = 0; i < cycles && bad < 5; i++) {
		int e = resil_define(r, "churn", "limit.rate = 1000/s; limit.keys = 50");

		if (e == 0)
			e = resil_delete(r, "churn");
		if (e < 0) {
			fprintf(stderr, "cycle %d: %s: %s\n", i, strerror(-e), resil_last_error());
			bad++;
		}
	}
	resil_close(r);
	_exit(bad ? 1 : 0);
}

int main(void)
{
	char gs[16];
	const char *extra[] = {"--socket-group", gs, "--policies", "256", NULL};
	int cycles = 2000 * resil_test_scale(), kin[2], kout[2], st;
	long long rec0, arena0, wrec0, warena0;
	resil_t *root = NULL;
	pid_t kp, cp;
	char ch;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_grace_churn: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-grc", &g) == 0);
	TEST_CHECK(test_user_make("rt-grc-k", g, &uk) == 0);
	TEST_CHECK(test_user_make("rt-grc-c", g, &uc) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	TEST_CHECK(test_metric(root, "resil_records ") == 1024);

	/* 1: the keeper, for the whole test */
	TEST_CHECK(pipe(kin) == 0 && pipe(kout) == 0);
	kp = fork();
	TEST_CHECK(kp >= 0);
	if (kp == 0) {
		close(kin[1]);
		close(kout[0]);
		keeper(kin[0], kout[1]);
		_exit(0);
	}
	close(kin[0]);
	close(kout[1]);
	TEST_CHECK(read(kout[0], &ch, 1) == 1);
	rec0 = test_metric(root, "resil_records_used ");
	arena0 = test_metric(root, "resil_arena_used_bytes ");
	wrec0 = test_metric(root, "resil_records_waiting ");
	warena0 = test_metric(root, "resil_arena_waiting_bytes ");
	printf("before: %lld records used (%lld waiting), %lld arena bytes used (%lld waiting)\n",
	       rec0, wrec0, arena0, warena0);
	TEST_CHECK(wrec0 >= 1); /* keep.gone's, for a week and a second */

	/* 2: the churn by another member */
	cp = fork();
	TEST_CHECK(cp >= 0);
	if (cp == 0)
		churner(cycles);
	st = test_wait_pid(cp, 240000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("after %d cycles: %lld records used (%lld waiting), %lld arena bytes used "
	       "(%lld waiting)\n",
	       cycles, test_metric(root, "resil_records_used "),
	       test_metric(root, "resil_records_waiting "),
	       test_metric(root, "resil_arena_used_bytes "),
	       test_metric(root, "resil_arena_waiting_bytes "));

	/* 3: root creates at once */
	TEST_CHECK(resil_define(root, "root.after", "bulkhead.max = 8; limit.rate = 100/s") == 0);
	printf("root's create after the churn: ok\n");
	TEST_CHECK(resil_delete(root, "root.after") == 0);

	/* 4: everything but the keeper's comes back */
	TEST_CHECK(TEST_EVENTUALLY(test_metric(root, "resil_records_used ") == rec0));
	TEST_CHECK(TEST_EVENTUALLY(test_metric(root, "resil_arena_used_bytes ") == arena0));
	TEST_CHECK(test_metric(root, "resil_records_waiting ") == wrec0);
	TEST_CHECK(test_metric(root, "resil_arena_waiting_bytes ") == warena0);
	printf("back: %lld records used (%lld waiting: the keeper's), %lld arena bytes used\n",
	       test_metric(root, "resil_records_used "),
	       test_metric(root, "resil_records_waiting "),
	       test_metric(root, "resil_arena_used_bytes "));

	close(kin[1]);
	TEST_CHECK(test_wait_pid(kp, 60000) == 0);
	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_grace_churn: ok\n");
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_rows.c - client rows one member of the socket group cannot
 * take from the others.
 *
 * As a member of the socket group without admin rights (a forked child
 * dropped to a numeric uid and the socket's group; no account is made), on
 * a daemon with --max-clients-per-uid 3: three resil_open succeed, the
 * fourth is refused with -EDQUOT and a message naming the limit; once one
 * is closed, opening succeeds again. Another uid of the group still
 * opens, and root is exempt. Skips (77) when not root.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define G_SOCK 4240
#define U_A    4241
#define U_B    4242

static struct test_daemon d;

static void become(uid_t u)
{
	gid_t g = G_SOCK;

	TEST_CHECK(setgroups(1, &g) == 0 && setresgid(G_SOCK, G_SOCK, G_SOCK) == 0 &&
		   setresuid(u, u, u) == 0);
}

static bool opens(void *ctx)
{
	resil_t **r = ctx;

	return resil_open(r, d.sock) == 0;
}

int main(void)
{
	const char *extra[] = {"--socket-group", "4240", "--max-clients-per-uid", "3", NULL};
	resil_t *root[5] = {NULL};
	pid_t pid;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_exhaust_rows: needs root to change uid: skipped\n");
		return TEST_SKIP;
	}
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;

	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		resil_t *r[4] = {NULL};
		int e;

		become(U_A);
		for (int i = 0; i < 3; i++)
			TEST_CHECK(resil_open(&r[i], d.sock) == 0);
		e = resil_open(&r[3], d.sock);
		printf("uid %d opening a 4th client: %s (%s)\n", U_A, strerror(-e),
		       resil_last_error());
		TEST_CHECK(e == -EDQUOT && r[3] == NULL);
		TEST_CHECK(strstr(resil_last_error(), "at most 3 per uid") != NULL);
		TEST_CHECK(strstr(resil_last_error(), "--max-clients-per-uid") != NULL);
		/* one closed: its row is free, the next open gets one */
		resil_close(r[0]);
		TEST_CHECK(test_wait_until(opens, &r[3], 10000));
		for (int i = 1; i < 4; i++)
			resil_close(r[i]);
		_exit(0);
	}
	st = test_wait_pid(pid, 30000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* another uid of the group is not held back by the first one's */
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		resil_t *r = NULL;

		become(U_B);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		resil_close(r);
		_exit(0);
	}
	st = test_wait_pid(pid, 30000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* root is exempt */
	for (int i = 0; i < 5; i++)
		TEST_CHECK(resil_open(&root[i], d.sock) == 0);
	for (int i = 0; i < 5; i++)
		resil_close(root[i]);
	test_daemon_fini(&d);
	printf("int_exhaust_rows: ok\n");
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_names.c - names and policies one member of the socket group
 * cannot take from the others.
 *
 * As a member of the socket group without admin rights (a forked child
 * dropped to a numeric uid and the socket's group; no account is made):
 *   - a name declared in a configuration file the daemon has not read yet
 *     cannot be created (the real service's would then be refused); root
 *     can, and resilctl show says who owns it;
 *   - at most --max-policies-per-uid policies of its own: the next create
 *     is refused with the limit named; root is exempt.
 * Skips (77) when not root.
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

#define G_SOCK 4200
#define U_A    4201

int main(void)
{
	const char *extra[] = {"--socket-group", "4200", "--max-policies-per-uid", "5", NULL};
	struct test_daemon d;
	char path[PATH_MAX + 32], out[8192];
	resil_t *root = NULL;
	FILE *f;
	pid_t pid;
	int st;

	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_exhaust_names: needs root to change uid: skipped\n");
		return TEST_SKIP;
	}
	if (test_daemon_init(&d) < 0)
		return 1;
	snprintf(path, sizeof(path), "%s/payments.conf", d.confdir);
	f = fopen(path, "w");
	TEST_CHECK(f && fprintf(f, "[policy payments]\nbulkhead.max = 10\n") > 0 && fclose(f) == 0);
	if (test_daemon_start(&d, extra) < 0)
		return 1;
	/* declared after the daemon read the files: not reloaded yet */
	snprintf(path, sizeof(path), "%s/billing.conf", d.confdir);
	f = fopen(path, "w");
	TEST_CHECK(f && fprintf(f, "; billing\n\n[policy billing]\nbulkhead.max = 7\n") > 0 &&
		   fclose(f) == 0);

	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		gid_t g = G_SOCK;
		resil_t *r = NULL;
		char name[32];
		int e;

		TEST_CHECK(setgroups(1, &g) == 0 && setresgid(G_SOCK, G_SOCK, G_SOCK) == 0 &&
			   setresuid(U_A, U_A, U_A) == 0);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		e = resil_define(r, "billing", "bulkhead.max = 1");
		printf("uid %d creating billing: %s (%s)\n", U_A, strerror(-e), resil_last_error());
		TEST_CHECK(e == -EPERM);
		TEST_CHECK(strstr(resil_last_error(), "billing.conf:3") != NULL);
		TEST_CHECK(strstr(resil_last_error(), "reserved") != NULL);
		/* the one in a file already applied: identical re-definition is fine */
		TEST_CHECK(resil_define(r, "payments", "bulkhead.max = 10") == 0);
		for (int i = 0; i < 5; i++) {
			snprintf(name, sizeof(name), "a.p%d", i);
			TEST_CHECK(resil_define(r, name, "bulkhead.max = 2") == 0);
		}
		e = resil_define(r, "a.p5", "bulkhead.max = 2");
		printf("uid %d creating its 6th policy: %s (%s)\n", U_A, strerror(-e),
		       resil_last_error());
		TEST_CHECK(e == -EDQUOT);
		TEST_CHECK(strstr(resil_last_error(), "at most 5 per uid") != NULL);
		/* deleting one of its own makes room again */
		{
			const char *del[] = {RESILCTL_PATH, "--socket", d.sock,
					     "delete",	    "a.p0",	NULL};

			TEST_CHECK(test_run(del, NULL, out, sizeof(out)) == 0);
		}
		TEST_CHECK(resil_define(r, "a.p5", "bulkhead.max = 2") == 0);
		resil_close(r);
		_exit(0);
	}
	st = test_wait_pid(pid, 30000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* root is exempt from both */
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	TEST_CHECK(resil_define(root, "billing", "bulkhead.max = 7") == 0);
	for (int i = 0; i < 7; i++) {
		char name[32];

		snprintf(name, sizeof(name), "root.p%d", i);
		TEST_CHECK(resil_define(root, name, "bulkhead.max = 2") == 0);
	}
	{
		const char *show[] = {RESILCTL_PATH, "--socket", d.sock, "show", "a.p1", NULL};
		const char *showb[] = {RESILCTL_PATH, "--socket", d.sock, "show", "billing", NULL};

		TEST_CHECK(test_run(show, NULL, out, sizeof(out)) == 0);
		TEST_CHECK(strstr(out, "owner uid   4201") != NULL);
		TEST_CHECK(test_run(showb, NULL, out, sizeof(out)) == 0);
		TEST_CHECK(strstr(out, "owner uid   0 (root)") != NULL);
	}
	resil_close(root);
	test_daemon_fini(&d);
	printf("int_exhaust_names: ok\n");
	return 0;
}

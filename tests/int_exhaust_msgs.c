/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_msgs.c - words that say what happened:
 *   - re-creating a policy identically says "unchanged", not "created";
 *   - a process at its descriptor limit (ulimit -n 4) that cannot receive
 *     the segments is told so, not that the daemon sent the wrong count.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

int main(void)
{
	struct test_daemon d;
	char out[4096];
	pid_t pid;
	int st;

	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, NULL) < 0)
		return 1;
	{
		const char *create[] = {RESILCTL_PATH, "--socket",	   d.sock, "create",
					"m1",	       "bulkhead.max = 3", NULL};
		const char *apply[] = {RESILCTL_PATH, "--socket",	  d.sock, "apply",
				       "m1",	      "bulkhead.max = 3", NULL};
		const char *update[] = {RESILCTL_PATH, "--socket",	   d.sock, "update",
					"m1",	       "bulkhead.max = 3", NULL};
		const char *change[] = {RESILCTL_PATH, "--socket",	   d.sock, "update",
					"m1",	       "bulkhead.max = 4", NULL};

		TEST_CHECK(test_run(create, NULL, out, sizeof(out)) == 0);
		printf("first create: %s", out);
		TEST_CHECK(strstr(out, "m1: created") != NULL);
		/* create refuses a name that exists, identical or not */
		TEST_CHECK(test_run(create, NULL, out, sizeof(out)) == 1);
		TEST_CHECK(test_run(apply, NULL, out, sizeof(out)) == 0);
		printf("identical apply: %s", out);
		TEST_CHECK(strstr(out, "m1: unchanged") != NULL);
		TEST_CHECK(test_run(update, NULL, out, sizeof(out)) == 0);
		TEST_CHECK(strstr(out, "m1: unchanged") != NULL);
		TEST_CHECK(test_run(change, NULL, out, sizeof(out)) == 0);
		printf("a real change: %s", out);
		TEST_CHECK(strstr(out, "m1: changed") != NULL);
	}

	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {4, 4};
		resil_t *r = NULL;
		int e;

		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		TEST_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
		e = resil_open(&r, d.sock);
		printf("resil_open at ulimit -n 4: %s (%s)\n", strerror(-e), resil_last_error());
		TEST_CHECK(e == -EMFILE);
		TEST_CHECK(strstr(resil_last_error(), "descriptor limit") != NULL);
		TEST_CHECK(strstr(resil_last_error(), "ulimit -n 4") != NULL);
		_exit(0);
	}
	st = test_wait_pid(pid, 30000);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	test_daemon_fini(&d);
	printf("int_exhaust_msgs: ok\n");
	return 0;
}

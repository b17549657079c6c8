/* SPDX-License-Identifier: MIT */
/*
 * int_deleted_handle.c - every call on a handle whose policy was deleted,
 * in daemon mode, under valgrind: no read of memory the library did not
 * write.
 *
 * A handle keeps its name after a delete; each call on it re-reads the
 * directory, finds nothing, and answers -ENOENT (or the default outcome
 * mapping, or a stopped retry). The periodic liveness check still runs
 * on those calls (every 256th of a thread without a clock reading) and
 * reads the decision context: the path that finds no policy must fill it
 * too. The test starts a resild, then runs its own client part
 * (`--client SOCKET`) under `valgrind --error-exitcode`: define, decide,
 * delete, then a few thousand calls of every kind on the handle (so the
 * periodic check's clock reading comes round many times), and checks each
 * answer. Asserted: the client's answers, and valgrind's exit status 0
 * (no error). Skips (77) without valgrind, and in a sanitized build.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define ROUNDS 2000

static int never(void *arg, resil_attempt_t *a)
{
	(void)arg;
	(void)a;
	return 0;
}

static int client(const char *sock)
{
	resil_t *r = NULL;
	resil_policy_t *p = NULL;
	resil_permit_t pm;
	resil_retry_t rt;

	TEST_CHECK(resil_open(&r, sock) == 0);
	TEST_CHECK(resil_define(r, "gone",
				"breaker.window = count:10; bulkhead.max = 4; "
				"retry.max_attempts = 3") == 0);
	TEST_CHECK(resil_policy(r, "gone", &p) == 0);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED);
	TEST_CHECK(resil_delete(r, "gone") == 0);

	for (int i = 0; i < ROUNDS; i++) {
		TEST_CHECK(resil_policy_state(p) == -ENOENT);
		TEST_CHECK(resil_outcome_http(p, 503) == resil_outcome_http(NULL, 503));
		TEST_CHECK(resil_outcome_errno(p, ECONNRESET) ==
			   resil_outcome_errno(NULL, ECONNRESET));
		TEST_CHECK(resil_policy_may_wait(p) == -ENOENT);
		TEST_CHECK(resil_acquire(p, &pm) == -ENOENT);
		resil_release(p, &pm, RESIL_SUCCESS); /* nothing held: a no-op */
		resil_retry_begin(p, &rt, 0);
		TEST_CHECK(resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) < 0);
		TEST_CHECK(resil_retry_reason(&rt) != NULL);
		TEST_CHECK(resil_call(p, never, NULL) == -ENOENT);
	}
	/* defined again: the same handle decides again */
	TEST_CHECK(resil_define(r, "gone", "bulkhead.max = 2") == 0);
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_close(r);
	return 0;
}

int main(int argc, char **argv)
{
	struct test_daemon d;
	char self[PATH_MAX];
	ssize_t n;
	pid_t pid;
	int st;

	if (argc == 3 && strcmp(argv[1], "--client") == 0)
		return client(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* a sanitizer's runtime and valgrind's cannot share a process: the
	 * plain build's run is the test */
	fprintf(stderr, "int_deleted_handle: a sanitized build under valgrind: skipped\n");
	return TEST_SKIP;
#endif
	if (access("/usr/bin/valgrind", X_OK) != 0) {
		fprintf(stderr, "int_deleted_handle: no /usr/bin/valgrind: skipped\n");
		return TEST_SKIP;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	TEST_CHECK(n > 0);
	self[n] = '\0';
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, NULL) < 0)
		return 1;
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		execl("/usr/bin/valgrind", "valgrind", "-q", "--error-exitcode=99",
		      "--exit-on-first-error=no", self, "--client", d.sock, (char *)NULL);
		_exit(127);
	}
	st = test_wait_pid(pid, 240000);
	printf("client under valgrind: status %#x\n", st);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_deleted_handle: ok\n");
	return 0;
}

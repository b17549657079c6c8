/* SPDX-License-Identifier: MIT */
/*
 * int_dlclose.c - libresil loaded with dlopen, used, closed and unloaded
 * with dlclose, 100 times in one process: no crash.
 *
 * A server unloads its extensions (PHP at shutdown, nginx with an old
 * configuration cycle): whatever libresil's first decision leaves
 * pointing into the library (the restartable sequence the counters'
 * per-CPU adds leave registered with the kernel for the thread, the
 * watchdog and hedge threads resil_call starts, the thread-exit
 * destructor, fork handlers) must not outlive its code. Four forked
 * processes, each 100 rounds of dlopen, decide, resil_close, dlclose:
 *   - libresil.so itself, embedded and on a resild;
 *   - a module linked to it (tests/dlmod_resil.c, as an extension is),
 *     embedded and on a resild: decisions from two threads, a resil_call
 *     that arms the interrupting watchdog, one that hedges.
 * Asserted: each process exits 0 (a crash is a signal), and resild is
 * still serving at the end.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define ROUNDS 100

/* libresil.so alone: its own calls, looked up by name. */
static int run_lib(const char *sock)
{
	for (int i = 0; i < ROUNDS; i++) {
		void *h = dlopen(RESIL_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
		int (*open_d)(resil_t **, const char *);
		int (*open_e)(resil_t **, const void *);
		int (*define)(resil_t *, const char *, const char *);
		int (*policy)(resil_t *, const char *, resil_policy_t **);
		int (*acquire)(resil_policy_t *, resil_permit_t *);
		void (*release)(resil_policy_t *, resil_permit_t *, int);
		void (*close_)(resil_t *);
		resil_policy_t *p[2];
		resil_t *r = NULL;

		TEST_CHECK(h != NULL);
		*(void **)&open_d = dlsym(h, "resil_open");
		*(void **)&open_e = dlsym(h, "resil_open_embedded");
		*(void **)&define = dlsym(h, "resil_define");
		*(void **)&policy = dlsym(h, "resil_policy");
		*(void **)&acquire = dlsym(h, "resil_acquire");
		*(void **)&release = dlsym(h, "resil_release");
		*(void **)&close_ = dlsym(h, "resil_close");
		TEST_CHECK(open_d && open_e && define && policy && acquire && release && close_);
		TEST_CHECK((sock ? open_d(&r, sock) : open_e(&r, NULL)) == 0);
		TEST_CHECK(define(r, "lib_hist", "histogram = on; breaker.window = count:10") == 0);
		TEST_CHECK(define(r, "lib_bh", "bulkhead.max = 4") == 0);
		TEST_CHECK(policy(r, "lib_hist", &p[0]) == 0 && policy(r, "lib_bh", &p[1]) == 0);
		for (int k = 0; k < 1000; k++) {
			resil_permit_t pm;

			TEST_CHECK(acquire(p[k & 1], &pm) == RESIL_ADMIT);
			release(p[k & 1], &pm, RESIL_SUCCESS);
		}
		close_(r);
		TEST_CHECK(dlclose(h) == 0);
	}
	return 0;
}

/* A module linked to libresil.so, as an extension is. */
static int run_module(const char *sock)
{
	for (int i = 0; i < ROUNDS; i++) {
		void *h = dlopen(RESIL_DLMOD_PATH, RTLD_NOW | RTLD_LOCAL);
		int (*run)(const char *);
		int e;

		TEST_CHECK(h != NULL);
		*(void **)&run = dlsym(h, "dlmod_run");
		TEST_CHECK(run != NULL);
		e = run(sock);
		if (e)
			fprintf(stderr, "dlmod_resil.c:%d failed in round %d\n", e, i);
		TEST_CHECK(e == 0);
		TEST_CHECK(dlclose(h) == 0);
	}
	return 0;
}

static void expect_clean(pid_t pid, const char *what)
{
	int st = test_wait_pid(pid, 120000);

	if (st >= 0 && WIFSIGNALED(st))
		printf("%s: killed by signal %d\n", what, WTERMSIG(st));
	else
		printf("%s: status %#x\n", what, st);
	TEST_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	struct test_daemon d;
	const char *what[] = {"libresil.so, embedded", "libresil.so, on resild",
			      "a module linked to it, embedded",
			      "a module linked to it, on resild"};
	pid_t pid[4];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, NULL) < 0)
		return 1;
	for (int k = 0; k < 4; k++) {
		const char *sock = k & 1 ? d.sock : NULL;

		pid[k] = fork();
		TEST_CHECK(pid[k] >= 0);
		if (pid[k] == 0)
			_exit(k < 2 ? run_lib(sock) : run_module(sock));
		/* one at a time: a crash names its case */
		expect_clean(pid[k], what[k]);
	}
	TEST_CHECK(test_daemon_answers(&d));
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_dlclose: ok\n");
	return 0;
}

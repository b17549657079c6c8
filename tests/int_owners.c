/* SPDX-License-Identifier: MIT */
/*
 * int_owners.c - who owns a policy's configuration: the files, then
 * runtime changes (resilctl), then declarations from code; among
 * declarations the newest process's.
 *
 *   (a) a worker declares limit.rate = 5/s; `resilctl update` makes it
 *       7/s; the worker exits and a new one declares 9/s: the live
 *       configuration stays 7/s (resil_define returns 0: the worker
 *       starts), `resilctl show` says a runtime change of uid 0 holds it
 *       with a declaration of the new pid beneath that differs; `resilctl
 *       revert` brings 9/s back, shown as that pid's declaration (pid and
 *       executable); a second revert says there is nothing to revert;
 *   (b) two generations of workers (3 processes each, the second started
 *       after the first, by /proc start time) declare 10/s and 20/s:
 *       once a worker of the second declared, 20 rounds of both
 *       generations declaring again, interleaved, leave 20/s live at one
 *       generation of the record (no flip back), and resild counts every
 *       declaration of the first generation as superseded;
 *   (c) a file's policy: a worker's different declaration is kept beneath
 *       (0 returned, the file's values live, `show` names FILE:LINE); the
 *       section removed and resild reloaded, the policy goes back to the
 *       declaration instead of away;
 *   (d) an empty configuration is refused by resild too (resilctl create
 *       NAME ''), with its reason.
 * Skips (77) when not root.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "clients.h"
#include "testutil.h"

#define GEN    3
#define ROUNDS 20

static struct test_daemon dmn;
static bool dmn_up;

struct worker {
	pid_t pid;
	int cmd, ack; /* pipes: the parent writes cmd, reads ack */
};
static struct worker ws[2 * GEN + 2];
static int nws;

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < nws; i++) {
		if (ws[i].pid > 0) {
			kill(ws[i].pid, SIGKILL);
			waitpid(ws[i].pid, NULL, 0);
		}
		close(ws[i].cmd);
		close(ws[i].ack);
	}
	nws = 0;
	if (dmn_up)
		test_daemon_fini(&dmn);
	dmn_up = false;
	return 0;
}

/* A worker process: each byte on its pipe is a declaration of NAME with
 * text; it answers resil_define's result (as a byte: 0, or -errno). */
static struct worker *worker_start(const char *name, const char *text)
{
	struct worker *w = &ws[nws++];
	int c[2], a[2];

	assert_int_equal(pipe(c), 0);
	assert_int_equal(pipe(a), 0);
	w->pid = fork();
	assert_true(w->pid >= 0);
	if (w->pid == 0) {
		resil_t *r;
		char b;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(c[1]);
		close(a[0]);
		if (resil_open(&r, dmn.sock) != 0)
			_exit(1);
		while (read(c[0], &b, 1) == 1) {
			signed char res = (signed char)resil_define(r, name, text);

			if (write(a[1], &res, 1) != 1)
				_exit(2);
		}
		resil_close(r);
		_exit(0);
	}
	close(c[0]);
	close(a[1]);
	w->cmd = c[1];
	w->ack = a[0];
	return w;
}

static int worker_declare(struct worker *w)
{
	signed char res = 1;

	assert_int_equal(write(w->cmd, "d", 1), 1);
	assert_int_equal(read(w->ack, &res, 1), 1);
	return res;
}

static void worker_stop(struct worker *w)
{
	int st;

	close(w->cmd);
	w->cmd = -1;
	assert_int_equal(waitpid(w->pid, &st, 0), w->pid);
	w->pid = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Does the live configuration of name hold line? */
static bool live_has(resil_t *r, const char *name, const char *line)
{
	Resil__Response *resp;
	Resil__PolicyInfo *pi = test_policy_info(r, name, &resp);
	bool yes;

	assert_non_null(pi);
	yes = strstr(pi->config, line) != NULL;

	resil__response__free_unpacked(resp, NULL);
	return yes;
}

static int ctl(char *out, size_t len, const char *a1, const char *a2, const char *a3)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", dmn.sock, a1, a2, a3, NULL};

	return test_run(argv, NULL, out, len);
}

static void start(void)
{
	assert_int_equal(test_daemon_init(&dmn), 0);
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	dmn_up = true;
}

static void test_operator_wins(void **state)
{
	char out[8192], exe[256], pidw[32];
	Resil__Response *resp;
	Resil__PolicyInfo *pi;
	struct worker *a, *b;
	resil_t *r;
	ssize_t n;

	(void)state;
	start();
	assert_int_equal(resil_open(&r, dmn.sock), 0);
	a = worker_start("ow", "limit.rate = 5/s");
	assert_int_equal(worker_declare(a), 0);
	assert_true(live_has(r, "ow", "limit.rate = 5/1s"));
	assert_int_equal(ctl(out, sizeof(out), "update", "ow", "limit.rate = 7/s"), 0);
	assert_true(live_has(r, "ow", "limit.rate = 7/1s"));
	/* the worker recycles: a new process declares other values */
	worker_stop(a);
	b = worker_start("ow", "limit.rate = 9/s");
	assert_int_equal(worker_declare(b), 0);
	assert_true(live_has(r, "ow", "limit.rate = 7/1s"));
	pi = test_policy_info(r, "ow", &resp);
	assert_non_null(pi);
	assert_non_null(pi->origin);
	assert_int_equal(pi->origin->kind, RESIL__ORIGIN_KIND__ORIGIN_RUNTIME);
	assert_int_equal(pi->origin->uid, 0);
	assert_true(pi->origin->declared_beneath);
	assert_int_equal(pi->origin->declared_pid, (uint32_t)b->pid);
	assert_true(pi->origin->declared_differs);
	resil__response__free_unpacked(resp, NULL);
	assert_int_equal(ctl(out, sizeof(out), "show", "ow", NULL), 0);
	assert_non_null(strstr(out, "by a runtime change of pid"));
	assert_non_null(strstr(out, "it holds until resilctl revert ow"));
	snprintf(pidw, sizeof(pidw), "declaration of pid %d", (int)b->pid);
	assert_non_null(strstr(out, pidw));
	assert_non_null(strstr(out, "which differs"));
	/* and again: the operator's value holds */
	assert_int_equal(worker_declare(b), 0);
	assert_true(live_has(r, "ow", "limit.rate = 7/1s"));
	assert_int_equal(ctl(out, sizeof(out), "revert", "ow", NULL), 0);
	assert_non_null(strstr(out, "reverted to its declaration"));
	assert_true(live_has(r, "ow", "limit.rate = 9/1s"));
	pi = test_policy_info(r, "ow", &resp);
	assert_non_null(pi);
	assert_int_equal(pi->origin->kind, RESIL__ORIGIN_KIND__ORIGIN_DECLARED);
	assert_int_equal(pi->origin->pid, (uint32_t)b->pid);
	{
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/exe", (int)b->pid);
		n = readlink(path, exe, sizeof(exe) - 1);
		assert_true(n > 0);
		exe[n] = '\0';
		assert_string_equal(pi->origin->exe, exe);
	}
	resil__response__free_unpacked(resp, NULL);
	assert_int_equal(ctl(out, sizeof(out), "show", "ow", NULL), 0);
	assert_non_null(strstr(out, "by the declaration of pid"));
	assert_non_null(strstr(out, exe));
	/* nothing left to revert */
	assert_int_equal(ctl(out, sizeof(out), "revert", "ow", NULL), 1);
	assert_non_null(strstr(out, "no runtime change to revert"));
	/* a declaration moves it again, now that nobody holds it */
	worker_stop(b);
	a = worker_start("ow", "limit.rate = 11/s");
	assert_int_equal(worker_declare(a), 0);
	assert_true(live_has(r, "ow", "limit.rate = 11/1s"));
	worker_stop(a);
	resil_close(r);
}

static uint64_t start_of(pid_t pid)
{
	uint64_t st = 0;

	assert_int_equal(resil_proc_stat((uint32_t)pid, &st, NULL), 0);
	return st;
}

static void test_newest_wins(void **state)
{
	struct worker *g1[GEN], *g2[GEN];
	Resil__Response *resp;
	Resil__PolicyInfo *pi;
	uint64_t newest1 = 0, superseded;
	uint32_t gen;
	resil_t *r;

	(void)state;
	start();
	assert_int_equal(resil_open(&r, dmn.sock), 0);
	for (int i = 0; i < GEN; i++) {
		g1[i] = worker_start("roll", "limit.rate = 10/s");
		if (start_of(g1[i]->pid) > newest1)
			newest1 = start_of(g1[i]->pid);
	}
	for (int i = 0; i < GEN; i++)
		assert_int_equal(worker_declare(g1[i]), 0);
	assert_true(live_has(r, "roll", "limit.rate = 10/1s"));
	/* the second generation starts after the first (a clock tick later:
	 * /proc says so; each waits for the tick) */
	for (int i = 0; i < GEN; i++) {
		g2[i] = worker_start("roll", "limit.rate = 20/s");
		while (start_of(g2[i]->pid) <= newest1) {
			kill(g2[i]->pid, SIGKILL);
			waitpid(g2[i]->pid, NULL, 0);
			close(g2[i]->cmd);
			close(g2[i]->ack);
			nws--;
			test_sleep_ms(5);
			g2[i] = worker_start("roll", "limit.rate = 20/s");
		}
	}
	assert_int_equal(worker_declare(g2[0]), 0);
	assert_true(live_has(r, "roll", "limit.rate = 20/1s"));
	pi = test_policy_info(r, "roll", &resp);
	assert_non_null(pi);
	gen = pi->generation;
	superseded = pi->origin->declarations_superseded;
	resil__response__free_unpacked(resp, NULL);
	for (int k = 0; k < ROUNDS; k++) {
		assert_int_equal(worker_declare(g1[k % GEN]), 0);
		assert_true(live_has(r, "roll", "limit.rate = 20/1s"));
		assert_int_equal(worker_declare(g2[k % GEN]), 0);
		assert_true(live_has(r, "roll", "limit.rate = 20/1s"));
	}
	pi = test_policy_info(r, "roll", &resp);
	assert_non_null(pi);
	assert_int_equal(pi->generation, gen);
	/* each of the old generation's declarations was superseded; a
	 * worker that re-attaches sends its declarations again, and those
	 * are superseded too: at least ROUNDS more */
	assert_true(pi->origin->declarations_superseded >= superseded + ROUNDS);
	assert_int_equal(pi->origin->kind, RESIL__ORIGIN_KIND__ORIGIN_DECLARED);
	resil__response__free_unpacked(resp, NULL);
	resil_close(r);
}

static void test_file_owner(void **state)
{
	char path[PATH_MAX + 32], out[8192], fl[PATH_MAX + 64];
	struct worker *w;
	resil_t *r;
	FILE *f;

	(void)state;
	assert_int_equal(test_daemon_init(&dmn), 0);
	dmn_up = true;
	snprintf(path, sizeof(path), "%s/10-own.conf", dmn.confdir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "# owners\n[policy fo]\nlimit.rate = 3/s\n");
	fclose(f);
	assert_int_equal(test_daemon_start(&dmn, NULL), 0);
	assert_int_equal(resil_open(&r, dmn.sock), 0);
	w = worker_start("fo", "limit.rate = 4/s");
	assert_int_equal(worker_declare(w), 0);
	assert_true(live_has(r, "fo", "limit.rate = 3/1s"));
	assert_int_equal(ctl(out, sizeof(out), "show", "fo", NULL), 0);
	snprintf(fl, sizeof(fl), "by %s:2", path);
	assert_non_null(strstr(out, fl));
	assert_non_null(strstr(out, "beneath     the declaration of pid"));
	/* the section goes: back to the declaration, not away */
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "# nothing now\n");
	fclose(f);
	assert_int_equal(ctl(out, sizeof(out), "reload", NULL, NULL), 0);
	assert_true(live_has(r, "fo", "limit.rate = 4/1s"));
	worker_stop(w);
	resil_close(r);
}

static void test_empty(void **state)
{
	char out[4096];

	(void)state;
	start();
	assert_int_equal(ctl(out, sizeof(out), "create", "em", ""), 1);
	assert_non_null(strstr(out, "empty configuration"));
	assert_int_equal(ctl(out, sizeof(out), "create", "em", " # no key\n"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_operator_wins, teardown),
	    cmocka_unit_test_teardown(test_newest_wins, teardown),
	    cmocka_unit_test_teardown(test_file_owner, teardown),
	    cmocka_unit_test_teardown(test_empty, teardown),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "int_owners: needs root, as the other integration tests\n");
		return TEST_SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_reload.c - a reload applies whole or not at all, and says
 * which.
 *
 * 100 policies in a file, breaker.failure_rate toggled between 40 and 60
 * on every SIGHUP, on a daemon with few configuration records (--policies
 * 128). After each reload, counted in resil_reloads_total: either it was
 * counted ok and all 100 policies run the new value, or it was counted
 * failed, all 100 still run the previous value, and
 * resil_reload_last_success_timestamp_seconds did not move. A reload that
 * applies part of a file and calls itself ok fails the test. (Records are
 * reused a grace period after a change, and a reload that needs records
 * still in it waits for them: int_churn shows 1,000 reloads applying.)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define NPOL 100

static struct test_daemon d;

static void write_conf(int rate)
{
	char path[PATH_MAX + 32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/toggle.conf.tmp", d.confdir);
	f = fopen(path, "w");
	TEST_CHECK(f != NULL);
	for (int i = 0; i < NPOL; i++)
		fprintf(f, "[policy t%03d]\nbreaker.failure_rate = %d\n\n", i, rate);
	TEST_CHECK(fclose(f) == 0);
	{
		char to[PATH_MAX + 32];

		snprintf(to, sizeof(to), "%s/toggle.conf", d.confdir);
		TEST_CHECK(rename(path, to) == 0);
	}
}

static long long metric(resil_t *r, const char *name)
{
	return test_metric(r, name);
}

/* How many of the policies run breaker.failure_rate = rate. */
static int running(resil_t *r, int rate)
{
	int n = 0;

	for (int i = 0; i < NPOL; i++) {
		char name[16];

		snprintf(name, sizeof(name), "t%03d", i);
		n += test_rec_of(r, name)->conf.breaker.failure_rate_bp == (uint32_t)rate * 100;
	}
	return n;
}

int main(void)
{
	const char *extra[] = {"--policies", "128", NULL};
	int reloads = 30 * resil_test_scale(), ok = 0, failed = 0, rate = 40;
	long long last_ok, used;
	resil_t *r = NULL;

	if (test_daemon_init(&d) < 0)
		return 1;
	write_conf(rate);
	if (test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(running(r, rate) == NPOL);
	last_ok = metric(r, "resil_reload_last_success_timestamp_seconds ");
	TEST_CHECK(last_ok > 0);
	/* 4 records per policy slot; each definition or change uses one */
	TEST_CHECK(metric(r, "resil_records ") == 4 * 128);
	used = metric(r, "resil_records_used ");
	TEST_CHECK(used >= NPOL);

	for (int i = 1; i <= reloads; i++) {
		int next = rate == 40 ? 60 : 40;
		long long o, f, u;

		write_conf(next);
		TEST_CHECK(kill(d.pid, SIGHUP) == 0);
		TEST_CHECK(TEST_EVENTUALLY(
		    (o = metric(r, "resil_reloads_total{result=\"ok\"} ")) +
			(f = metric(r, "resil_reloads_total{result=\"failed\"} ")) ==
		    i));
		if (o == ok + 1) {
			/* applied: every policy runs the new value */
			TEST_CHECK(running(r, next) == NPOL);
			ok++;
			rate = next;
			last_ok = metric(r, "resil_reload_last_success_timestamp_seconds ");
			/* one record per changed policy, no more (fewer once
			 * retired ones were reused after their grace period) */
			TEST_CHECK((u = metric(r, "resil_records_used ")) <= used + NPOL);
			used = u;
		} else {
			/* not applied: the previous configuration runs, whole */
			TEST_CHECK(f == failed + 1);
			TEST_CHECK(running(r, rate) == NPOL);
			TEST_CHECK(metric(r, "resil_reload_last_success_timestamp_seconds ") ==
				   last_ok);
			/* nothing was spent on a reload that did not apply */
			TEST_CHECK((u = metric(r, "resil_records_used ")) <= used);
			used = u;
			failed++;
		}
	}
	printf("%d reloads toggling %d policies: %d applied, %d counted failed\n", reloads, NPOL,
	       ok, failed);
	TEST_CHECK(ok >= 1);
	if (failed) {
		char out[4096];
		const char *argv[] = {"grep", "-m1", "not applied", d.log, NULL};

		TEST_CHECK(test_run(argv, NULL, out, sizeof(out)) == 0);
		printf("the log says: %s", out);
		TEST_CHECK(strstr(out, "configuration record") != NULL);
	}
	resil_close(r);
	test_daemon_fini(&d);
	printf("int_exhaust_reload: ok\n");
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_reuse_permit.c - a permit held across the reuse of its record and
 * block releases nowhere, never into the policy that got them.
 *
 * On a daemon with few records (--policies 4: 16 records): a handle on x
 * (bulkhead.max = 1) takes x's one permit and keeps it. x then changes
 * shape and is changed until every record was handed out, and deleted;
 * once the grace period is over, y (bulkhead.max = 1) gets x's first
 * record (the one retired longest ago) and, first fit, x's first block.
 * This process takes y's one permit, then releases the old permit of x
 * through x's handle, which was never re-bound. y must still be full: a
 * release that trusted the stale binding (or the reused record) would
 * free y's permit, held under the same client id.
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

static struct test_daemon d;

static long long metric(resil_t *r, const char *name)
{
	return test_metric(r, name);
}

int main(void)
{
	const char *extra[] = {"--policies", "4", NULL};
	const struct resil_rec *x0, *y0;
	resil_policy_t *px = NULL, *py = NULL;
	resil_permit_t pmx, pmy, pm2;
	resil_t *r = NULL;
	long long cap;
	int v;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	cap = metric(r, "resil_records ");
	TEST_CHECK(cap == 16);

	TEST_CHECK(resil_define(r, "x", "bulkhead.max = 1") == 0);
	TEST_CHECK(resil_policy(r, "x", &px) == 0);
	x0 = test_rec_of(r, "x");
	TEST_CHECK(resil_acquire(px, &pmx) == 0);
	/* a new shape, then changes until no record was never used */
	for (long long i = 1; i < cap; i++) {
		char text[96];

		snprintf(text, sizeof(text), "bulkhead.max = 1\nbreaker.failure_rate = %lld",
			 10 + i);
		TEST_CHECK(resil_define(r, "x", text) == 0);
	}
	TEST_CHECK(resil_delete(r, "x") == 0);
	TEST_CHECK(TEST_EVENTUALLY(metric(r, "resil_records_waiting ") == 0));

	TEST_CHECK(resil_define(r, "y", "bulkhead.max = 1") == 0);
	TEST_CHECK(resil_policy(r, "y", &py) == 0);
	y0 = test_rec_of(r, "y");
	printf("x's first record %p, y's record %p, same block: %s\n", (const void *)x0,
	       (const void *)y0, x0 == y0 && x0->state_off == y0->state_off ? "yes" : "no");
	TEST_CHECK(y0 == x0); /* the record retired longest ago */
	TEST_CHECK(resil_acquire(py, &pmy) == 0);
	/* the stale permit: its record is y's now */
	resil_release(px, &pmx, RESIL_SUCCESS);
	v = resil_acquire(py, &pm2);
	printf("y after the stale release: %s\n", v == RESIL_REJECT_FULL ? "full" : "admits");
	TEST_CHECK(v == RESIL_REJECT_FULL);
	resil_release(py, &pmy, RESIL_SUCCESS);
	TEST_CHECK(resil_acquire(py, &pm2) == 0);
	resil_release(py, &pm2, RESIL_SUCCESS);
	resil_close(r);
	test_daemon_fini(&d);
	printf("int_reuse_permit: ok\n");
	return 0;
}

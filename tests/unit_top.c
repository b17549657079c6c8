/* SPDX-License-Identifier: MIT */
/*
 * unit_top.c - what `resilctl top` computes from the segments
 * (client/resilctl_top.c, included to reach its statics), on an embedded
 * segment pair:
 *   - rates and percentages from two refreshes: failure % exact over the
 *     calls in between, "-" (NAN) on first sight and after a counter went
 *     down (a reset);
 *   - in-flight / limit of a bulkhead; budget tokens;
 *   - policy.scope = process: "N/M open" when the processes' breakers
 *     disagree, permits and limits added up over the live processes;
 *   - sorting by each column; the table fits the width it is given.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "../client/resilctl_top.c"
#include "testutil.h"

static struct row *find(struct top *t, const char *name)
{
	for (size_t i = 0; i < t->nrows; i++)
		if (!strcmp(t->rows[i].name, name))
			return &t->rows[i];
	fail_msg("no row %s", name);
	return NULL;
}

static void calls(resil_policy_t *p, int n, int failures)
{
	for (int i = 0; i < n; i++) {
		resil_permit_t pm;

		assert_int_equal(resil_acquire(p, &pm), 0);
		resil_release(p, &pm, i < failures ? RESIL_FAILURE : RESIL_SUCCESS);
	}
}

static struct top *top_of(resil_t *r)
{
	struct top *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->seg = r->seg; /* the same mapping; top_free does not unmap it */
	t->prev = calloc(r->seg.cfg->slot_cap, sizeof(*t->prev));
	assert_non_null(t->prev);
	return t;
}

static void top_free(struct top *t)
{
	free(t->rows);
	free(t->prev);
	free(t);
}

static void test_rates_and_columns(void **state)
{
	resil_t *r;
	resil_policy_t *db;
	struct top *t;
	struct row *w;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_define(r, "db",
				      "breaker.min_calls = 1000; bulkhead.max = 3; "
				      "retry.budget = grpc:10:0.1"),
			 0);
	assert_int_equal(resil_define(r, "a-policy-with-a-rather-long-name", "histogram = on"), 0);
	assert_int_equal(resil_policy(r, "db", &db), 0);
	t = top_of(r);

	calls(db, 5, 5);
	assert_int_equal(collect(t), 0);
	assert_int_equal(t->nrows, 2);
	w = find(t, "db");
	assert_string_equal(w->state, "closed");
	assert_int_equal(w->calls, 5);
	assert_true(isnan(w->calls_s) && isnan(w->fail_pct)); /* first sight */
	assert_int_equal(w->inflight, 0);
	assert_int_equal(w->limit, 3);
	assert_true(w->tokens == 10.0);
	assert_int_equal(w->p50, -1); /* no histogram */

	/* between two refreshes: 10 calls, 3 failures; one permit held */
	calls(db, 10, 3);
	{
		resil_permit_t held;

		assert_int_equal(resil_acquire(db, &held), 0);
		test_sleep_ms(2);
		assert_int_equal(collect(t), 0);
		resil_release(db, &held, RESIL_IGNORED);
	}
	w = find(t, "db");
	assert_true(w->fail_pct == 30.0);
	assert_true(w->slow_pct == 0.0);
	assert_true(w->calls_s > 0 && !isnan(w->rej_s));
	assert_int_equal(w->inflight, 1);
	assert_true(isnan(find(t, "a-policy-with-a-rather-long-name")->fail_pct)); /* no calls */

	/* a counter that went down (a reset): no rate for that interval */
	for (uint32_t i = 0; i < r->seg.cfg->slot_cap; i++)
		if (t->prev[i].state_off)
			t->prev[i].v[RESIL_STAT_SUCCESS] += 1000000;
	test_sleep_ms(2);
	assert_int_equal(collect(t), 0);
	assert_true(isnan(find(t, "db")->calls_s));

	/* sorting: by name, then by calls (db first: it has calls) */
	t->sort = SORT_NAME;
	sort_rows(t);
	assert_string_equal(t->rows[0].name, "a-policy-with-a-rather-long-name");
	calls(db, 4, 0);
	test_sleep_ms(2);
	assert_int_equal(collect(t), 0);
	t->sort = SORT_CALLS;
	sort_rows(t);
	assert_string_equal(t->rows[0].name, "db");
	t->sort = SORT_FAILURE;
	sort_rows(t);
	assert_string_equal(t->rows[0].name, "db"); /* 0% beats "-" */

	/* the table fits the width: 80 columns, a long name cut with '~' */
	{
		char *buf = NULL, *line, *save = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		assert_non_null(f);
		render_table(t, f, 80, -1, "\n");
		fclose(f);
		assert_non_null(strstr(buf, "~"));
		for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			assert_true(strlen(line) <= 79);
		free(buf);
	}
	top_free(t);
	resil_close(r);
}

static void test_process_scope(void **state)
{
	int up[2], down[2], ws;
	resil_t *r;
	resil_policy_t *loc;
	struct top *t;
	struct row *w;
	pid_t child;
	char c;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_define(r, "local",
				      "policy.scope = process; "
				      "breaker.window = consecutive:2; breaker.wait = 60s; "
				      "bulkhead.max = 4"),
			 0);
	assert_int_equal(resil_policy(r, "local", &loc), 0);
	calls(loc, 2, 2); /* this process's copy opens */
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		resil_permit_t pm;

		TEST_CHECK(resil_acquire(loc, &pm) == 0); /* its own copy: closed */
		TEST_CHECK(write(up[1], "x", 1) == 1);
		TEST_CHECK(read(down[0], &c, 1) == 1);
		resil_release(loc, &pm, RESIL_SUCCESS);
		_exit(0);
	}
	assert_int_equal(read(up[0], &c, 1), 1);
	t = top_of(r);
	assert_int_equal(collect(t), 0);
	w = find(t, "local");
	assert_string_equal(w->state, "1/2 open");
	assert_int_equal(w->inflight, 1);
	assert_int_equal(w->limit, 8);
	assert_int_equal(write(down[1], "x", 1), 1);
	assert_int_equal(waitpid(child, &ws, 0), child);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	top_free(t);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	resil_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rates_and_columns),
	    cmocka_unit_test(test_process_scope),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

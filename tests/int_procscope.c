/* SPDX-License-Identifier: MIT */
/*
 * int_procscope.c - policy.scope = process with real forks, embedded mode:
 *   - a worker whose own breaker is OPEN reports OPEN (resil_policy_state
 *     reads the calling process's copy, not the fleet block that process
 *     scope never decides on), while its parent reports CLOSED;
 *   - that worker closes (resil_close frees its row); the next process to
 *     claim the same row starts from a fresh copy: CLOSED, admitted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "resil.h"
#include "internal.h"
#include "testutil.h"

#define CONFIG "policy.scope = process; breaker.window = consecutive:3; breaker.wait = 1h"

static int run_child(void (*fn)(resil_t *r, resil_policy_t *p, int fd), resil_t *r,
		     resil_policy_t *p, int fd)
{
	int st;
	pid_t c = fork();

	TEST_CHECK(c >= 0);
	if (c == 0) {
		fn(r, p, fd);
		_exit(0);
	}
	TEST_CHECK(waitpid(c, &st, 0) == c);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void opens_its_breaker(resil_t *r, resil_policy_t *p, int fd)
{
	resil_permit_t pm;
	int row;

	for (int i = 0; i < 3; i++) {
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
		resil_release(p, &pm, RESIL_FAILURE);
	}
	TEST_CHECK(resil_acquire(p, &pm) == RESIL_REJECT_OPEN);
	/* its own copy decides, and its own copy is what it reports */
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_OPEN);
	row = atomic_load(&r->row);
	TEST_CHECK(row >= 0);
	TEST_CHECK(write(fd, &row, sizeof(row)) == (ssize_t)sizeof(row));
	resil_close(r);
}

static void takes_the_row_again(resil_t *r, resil_policy_t *p, int fd)
{
	resil_permit_t pm;
	int row;

	TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED);
	row = atomic_load(&r->row);
	TEST_CHECK(write(fd, &row, sizeof(row)) == (ssize_t)sizeof(row));
}

int main(void)
{
	resil_policy_t *p;
	int fds[2], row1 = -1, row2 = -2;
	resil_t *r;

	TEST_CHECK(resil_open_embedded(&r, NULL) == 0);
	TEST_CHECK(resil_define(r, "ps", CONFIG) == 0);
	TEST_CHECK(resil_policy(r, "ps", &p) == 0);
	TEST_CHECK(pipe(fds) == 0);

	TEST_CHECK(run_child(opens_its_breaker, r, p, fds[1]) == 0);
	TEST_CHECK(read(fds[0], &row1, sizeof(row1)) == (ssize_t)sizeof(row1));
	/* the parent's own copy never saw a failure */
	TEST_CHECK(resil_policy_state(p) == RESIL_STATE_CLOSED);
	printf("a worker's OPEN breaker reported OPEN by it, CLOSED by its parent\n");

	/* the next claim starts its search at row1, freed by the worker */
	TEST_CHECK(atomic_load(&resil_seg_client(&r->seg, (uint32_t)row1)->owner) == 0);
	atomic_store(&r->seg.st->client_hint, (uint32_t)row1);
	TEST_CHECK(run_child(takes_the_row_again, r, p, fds[1]) == 0);
	TEST_CHECK(read(fds[0], &row2, sizeof(row2)) == (ssize_t)sizeof(row2));
	TEST_CHECK(row2 == row1);
	printf("the next process on row %d started CLOSED\n", row2);
	resil_close(r);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_forged_claims_threads.c - a libresil client's count table is exact
 * with more deciding threads than stripes (shm/count_table.h: the threads
 * past them share stripe 0 with atomic adds) and on every way of claiming:
 * a fail-fast bulkhead (the decision path's branch: the thread's last
 * slot), the same with a histogram (the general path: resil_policy_acquire
 * counts), and an adaptive limit's pool. A client process of 24 threads
 * claims and releases on the three policies, each thread ending with one
 * permit of each held; then claims are forged under its id into every
 * free slot of the three pools. After two of resild's ticks exactly 24
 * slots of each pool name the client: a count one short would have freed
 * one of its own, one over would have kept a forged one. Then the client
 * releases everything, and after a tick no slot names it.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adaptive.h"
#include "bulkhead.h"
#include "internal.h"
#include "testutil.h"

#define THREADS 24
#define ROUNDS	2000
#define NPOL	3

static const char *const names[NPOL] = {"tb", "tg", "ta"};
static const char *const confs[NPOL] = {
    "bulkhead.max = 64",
    "bulkhead.max = 64; histogram = on",
    "adaptive.algorithm = aimd; adaptive.min = 64; adaptive.initial = 64; adaptive.max = 64",
};

static struct test_daemon d;
static resil_t *cr;
static resil_policy_t *cp[NPOL];
static resil_permit_t kept[THREADS][NPOL];
static int to_parent[2], to_child[2];

static struct resil_pool pool_of(resil_t *r, int k)
{
	return test_pool_of(r, names[k], k == 2);
}

static void *worker(void *arg)
{
	resil_permit_t pm;
	intptr_t t = (intptr_t)arg;
	int bad = 0;

	for (int i = 0; i < ROUNDS; i++)
		for (int k = 0; k < NPOL; k++) {
			if (resil_acquire(cp[k], &pm) != RESIL_ADMIT)
				bad++;
			resil_release(cp[k], &pm, i % 3 ? RESIL_SUCCESS : RESIL_FAILURE);
		}
	for (int k = 0; k < NPOL; k++)
		bad += resil_acquire(cp[k], &kept[t][k]) != RESIL_ADMIT;
	return (void *)(intptr_t)bad;
}

/* The client: THREADS threads decide, each keeps one permit of each
 * policy; its id to the parent; on 'r', every permit released. */
static void client(void)
{
	pthread_t th[THREADS];
	uint32_t id, bad = 0;
	char c;

	if (resil_open(&cr, d.sock) != 0)
		_exit(2);
	for (int k = 0; k < NPOL; k++)
		if (resil_policy(cr, names[k], &cp[k]) != 0)
			_exit(2);
	for (intptr_t t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	for (int t = 0; t < THREADS; t++) {
		void *v;

		pthread_join(th[t], &v);
		bad += (uint32_t)(intptr_t)v;
	}
	id = bad ? 0 : resil_client_id(atomic_load(&atomic_load(&cr->cur)->row));
	if (write(to_parent[1], &id, sizeof(id)) != sizeof(id))
		_exit(2);
	if (read(to_child[0], &c, 1) != 1)
		_exit(2);
	for (int t = 0; t < THREADS; t++)
		for (int k = 0; k < NPOL; k++)
			resil_release(cp[k], &kept[t][k], RESIL_SUCCESS);
	if (write(to_parent[1], &id, sizeof(id)) != sizeof(id))
		_exit(2);
	if (read(to_child[0], &c, 1) != 1)
		_exit(2);
	resil_close(cr);
	_exit(0);
}

int main(void)
{
	resil_t *root = NULL;
	uint32_t id = 0, forged[NPOL] = {0};
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, NULL) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	for (int k = 0; k < NPOL; k++)
		TEST_CHECK(resil_define(root, names[k], confs[k]) == 0);
	TEST_CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0)
		client();
	TEST_CHECK(read(to_parent[0], &id, sizeof(id)) == sizeof(id));
	TEST_CHECK(id != 0);
	for (int k = 0; k < NPOL; k++)
		TEST_CHECK(test_pool_naming(pool_of(root, k), id) == THREADS);

	/* the client's id into every free slot of the three pools */
	for (int k = 0; k < NPOL; k++)
		forged[k] = test_pool_forge(pool_of(root, k), id);
	test_ticks(root, 2);
	for (int k = 0; k < NPOL; k++) {
		printf("%s: %u forged, after two ticks %u slots name the client (%d threads "
		       "hold one each)\n",
		       names[k], forged[k], test_pool_naming(pool_of(root, k), id), THREADS);
		TEST_CHECK(forged[k] > 0);
		TEST_CHECK(test_pool_naming(pool_of(root, k), id) == THREADS);
	}

	/* every permit back: none named after a tick */
	TEST_CHECK(write(to_child[1], "r", 1) == 1);
	TEST_CHECK(read(to_parent[0], &id, sizeof(id)) == sizeof(id));
	test_ticks(root, 1);
	for (int k = 0; k < NPOL; k++)
		TEST_CHECK(test_pool_naming(pool_of(root, k), id) == 0);
	TEST_CHECK(write(to_child[1], "x", 1) == 1);
	TEST_CHECK(test_wait_pid(pid, 60000) == 0);

	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_forged_claims_threads: ok\n");
	return 0;
}

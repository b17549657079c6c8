/* SPDX-License-Identifier: MIT */
/*
 * dlmod_resil.c - a loadable module linked to libresil.so, as a server's
 * extension is (a PHP extension, an nginx module): int_dlclose loads it
 * with dlopen, runs dlmod_run and unloads it with dlclose, over and over.
 *
 * dlmod_run opens libresil (embedded when sock is NULL, else on resild's
 * socket), decides on policies of each kind the hot path has a branch
 * for (a breaker, a bulkhead, a rate limiter, the counters with a
 * histogram, a stack), from this thread and from a second one, makes a
 * resil_call with a timeout that arms the interrupting watchdog and one
 * with a hedge, then closes. 0, or the line that failed.
 */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "resil.h"

#define DLMOD_API __attribute__((visibility("default")))

static const char *const pols[][2] = {
    {"dl_bk", "breaker.window = count:10"},
    {"dl_bh", "bulkhead.max = 4"},
    {"dl_lim", "limit.rate = 1000000/s; limit.burst = 100"},
    {"dl_hist", "histogram = on"},
    {"dl_stack", "breaker.window = count:10; limit.rate = 1000000/s; limit.burst = 100; "
		 "bulkhead.max = 8"},
    {"dl_call", "timeout = 1s; timeout.interrupt = SIGUSR2; retry.max_attempts = 1"},
    {"dl_hedge", "hedge.delay = 1ms; idempotent = yes; retry.max_attempts = 1"},
};
#define NPOLS (sizeof(pols) / sizeof(pols[0]))

struct run {
	resil_policy_t *p[NPOLS];
	int failed;
};

static int decide(struct run *u)
{
	for (int k = 0; k < 200; k++)
		for (unsigned i = 0; i < 5; i++) {
			resil_permit_t pm;
			int v = resil_acquire(u->p[i], &pm);

			if (v < 0)
				return __LINE__;
			if (v == RESIL_ADMIT)
				resil_release(u->p[i], &pm, k % 7 ? RESIL_SUCCESS : RESIL_FAILURE);
		}
	return 0;
}

static void *thread_main(void *arg)
{
	struct run *u = arg;

	u->failed = decide(u);
	return NULL;
}

static int quick(void *arg, resil_attempt_t *a)
{
	(void)arg;
	(void)a;
	return 0;
}

static void on_usr2(int sig)
{
	(void)sig;
}

DLMOD_API int dlmod_run(const char *sock)
{
	struct run u = {{NULL}, 0};
	struct sigaction sa = {.sa_handler = on_usr2};
	resil_t *r = NULL;
	pthread_t th;
	int e = 0;

	sigaction(SIGUSR2, &sa, NULL);
	if ((sock ? resil_open(&r, sock) : resil_open_embedded(&r, NULL)) < 0)
		return __LINE__;
	for (unsigned i = 0; i < NPOLS && !e; i++)
		if (resil_define(r, pols[i][0], pols[i][1]) < 0 ||
		    resil_policy(r, pols[i][0], &u.p[i]) < 0)
			e = __LINE__;
	if (!e && pthread_create(&th, NULL, thread_main, &u) != 0)
		e = __LINE__;
	if (!e) {
		int mine = decide(&u);

		pthread_join(th, NULL);
		e = mine ? mine : u.failed;
	}
	if (!e && resil_call(u.p[5], quick, NULL) != 0)
		e = __LINE__;
	if (!e && resil_call(u.p[6], quick, NULL) != 0)
		e = __LINE__;
	resil_close(r);
	return e;
}

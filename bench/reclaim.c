/* SPDX-License-Identifier: MIT */
/*
 * reclaim.c - resil_bench's death to reclaim: how long after a worker dies
 * holding permits they are back.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */

/* ---------------------------------------------------------------------- */
/* Death to reclaim: how long after a worker dies holding permits they are
 * back (reported, not a target). A forked child takes every permit of a
 * bulkhead and says so through a pipe; it is SIGKILLed; from waitpid's
 * return (the death is complete) the parent polls, every 100 us, until it
 * can take every permit itself. resild learns of a new client row at its
 * next tick (every 100 ms) and then watches the process's pidfd: a
 * "watched" child lives 250 ms before it reports (a worker as in a real
 * fleet, its death seen through the pidfd at once); an "unwatched" one
 * dies at once (its row is found dead by the next tick's scan). */

static bool take_all(resil_policy_t *p)
{
	resil_permit_t pm[RECLAIM_PERMITS];
	int got = 0;

	while (got < RECLAIM_PERMITS && resil_acquire(p, &pm[got]) == RESIL_ADMIT)
		got++;
	for (int k = 0; k < got; k++)
		resil_release(p, &pm[k], RESIL_IGNORED);
	return got == RECLAIM_PERMITS;
}

static void reclaim_case(resil_t *r, const char *name, int64_t live_ns)
{
	int rounds = opt.smoke ? 2 : 20, done = 0;
	double ms[32];
	resil_policy_t *p;

	if (!selected("reclaim", name))
		return;
	p = mkpol(r, name, "bulkhead.max = 4"); /* RECLAIM_PERMITS */
	if (!p)
		return;
	for (int i = 0; i < rounds && i < (int)ARRAY_LEN(ms); i++) {
		int fds[2];
		pid_t pid;
		int64_t t0;
		char c;

		if (pipe(fds) < 0)
			break;
		pid = fork();
		if (pid == 0) {
			resil_permit_t pm[RECLAIM_PERMITS];

			close(fds[0]);
			for (int k = 0; k < RECLAIM_PERMITS; k++)
				if (resil_acquire(p, &pm[k]) != RESIL_ADMIT)
					_exit(1);
			if (live_ns)
				sleep_ns(live_ns);
			if (write(fds[1], "x", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		close(fds[1]);
		if (pid < 0 || read(fds[0], &c, 1) != 1) {
			close(fds[0]);
			if (pid > 0) {
				kill(pid, SIGKILL);
				waitpid(pid, NULL, 0);
			}
			break;
		}
		close(fds[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		t0 = mono_ns();
		while (!take_all(p) && mono_ns() - t0 < 10 * NS_PER_S)
			sleep_ns(100 * 1000);
		ms[done++] = (double)(mono_ns() - t0) / 1e6;
	}
	if (!done)
		return;
	qsort(ms, (size_t)done, sizeof(ms[0]), cmp_double);
	char note[96];

	snprintf(note, sizeof(note), "%d rounds, death (waitpid) to every permit back", done);
	emit("reclaim", name, "ms", ms[done / 2], ms[0], ms[done - 1], "ms", note);
}

void run_reclaim(resil_t *r)
{
	reclaim_case(r, "watched", 250 * 1000 * 1000);
	reclaim_case(r, "unwatched", 0);
}

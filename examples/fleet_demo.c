/* SPDX-License-Identifier: MIT */
/*
 * fleet_demo.c - why a fleet wants one breaker: N prefork workers call one
 * flaky dependency, first through one shared circuit breaker, then through
 * one breaker per process, and the master prints both runs side by side.
 *
 * What happens: the master opens libresil (resild over its socket, or
 * embedded segments with --embedded) and forks N workers, the prefork
 * pattern of nginx, PHP-FPM or gunicorn. Every worker calls the fake
 * dependency at a steady pace (one call per millisecond) for the length of
 * the run. The dependency follows a fixed schedule: it is down from 1 s to
 * 3 s into the run (--short: a faster schedule) and fails every call then,
 * instantly; otherwise it succeeds. Nothing is random, so two runs differ
 * only by how the workers are scheduled.
 *
 *   run 1: one policy for the fleet, defined by the master before it forks;
 *   run 2: each worker defines its own policy "demo-local-<pid>" with the
 *          same configuration, as an in-process library would give it.
 *
 * With a shared breaker the fleet pays for the outage once: the first 5
 * consecutive failures (whoever made them) open it for everyone, and each
 * later OPEN -> HALF_OPEN sends a few probes for the fleet. With one breaker
 * per process each worker needs its own 5 failures and sends its own probes,
 * so N times as many calls reach the dead dependency.
 *
 * The board: one MAP_SHARED anonymous page set up before fork. The master
 * writes t0 (release) once every worker has said ready (fetch_add); workers
 * spin on t0 (acquire) so all start on the same clock reading. Each worker
 * writes only its own stats row, with plain stores, and the master reads the
 * rows only after waitpid() reported the worker's exit, which orders them.
 * The dependency's own count of calls it failed is one fetch_add word that
 * every worker writes (relaxed: it is read after every worker exited).
 * A worker killed mid-run leaves its row partly written: the master reports
 * the run as failed (exit 1) instead of printing figures from it.
 *
 * Options: --workers N (8), --socket PATH ($RESIL_SOCKET, then the default
 * path), --short, --embedded, --tsv FILE (append machine-readable rows for
 * bench/run.sh). Exit 0 when both runs completed.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resil.h"

#define MAX_WORKERS 64
#define NS_PER_MS   1000000LL
#define THRESHOLD   5 /* breaker.window = consecutive:5 */
#define PROBES	    3 /* breaker.half_open_calls */

struct schedule {
	int64_t run_ns;	      /* length of each run */
	int64_t down_from_ns; /* the dependency is down in [down_from, down_to) */
	int64_t down_to_ns;
	int64_t pace_ns;  /* one call per pace per worker */
	const char *wait; /* breaker.wait */
	int64_t wait_ns;  /* the same, in ns */
};

static const struct schedule sched_normal = {
    .run_ns = 4000 * NS_PER_MS,
    .down_from_ns = 1000 * NS_PER_MS,
    .down_to_ns = 3000 * NS_PER_MS,
    .pace_ns = 1 * NS_PER_MS,
    .wait = "500ms",
    .wait_ns = 500 * NS_PER_MS,
};

static const struct schedule sched_short = {
    .run_ns = 1300 * NS_PER_MS,
    .down_from_ns = 300 * NS_PER_MS,
    .down_to_ns = 900 * NS_PER_MS,
    .pace_ns = 1 * NS_PER_MS,
    .wait = "150ms",
    .wait_ns = 150 * NS_PER_MS,
};

/* One worker's figures: written by that worker only, read by the master
 * after waitpid(). 128-byte rows so workers never share a line. */
struct worker_row {
	alignas(128) uint64_t calls; /* acquire calls */
	uint64_t reached_down;	     /* admitted while the dependency was down */
	uint64_t reached_up;
	uint64_t rejected;
	uint64_t probes;	 /* admitted while the breaker was HALF_OPEN */
	int64_t first_reject_ns; /* first rejection, ns after the outage began; -1 none */
	int64_t recovered_ns;	 /* first success after the outage, ns after it; -1 none */
	int32_t err;		 /* 0, or the negative errno that stopped the worker */
	int32_t finished;	 /* 1 once the row is complete */
};

struct board {
	/* run start (CLOCK_MONOTONIC ns), 0 until go: the master writes it */
	alignas(128) _Atomic int64_t t0;
	/* workers set up: each worker adds 1 */
	alignas(128) _Atomic uint32_t ready;
	/* calls the dead dependency saw: every worker adds */
	alignas(128) _Atomic uint64_t dep_failed;
	struct worker_row w[MAX_WORKERS];
};

struct run_result {
	uint64_t calls, reached_down, rejected, probes;
	uint64_t dep_failed;
	int64_t open_first_ns, open_last_ns; /* -1: never opened */
	int64_t recov_first_ns, recov_last_ns;
	int opened_workers;
	int recovered_workers;
};

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t)
{
	struct timespec ts = {.tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* The flaky dependency: an in-process function on a fixed schedule. */
static bool dependency_call(struct board *b, const struct schedule *s, int64_t t)
{
	if (t >= s->down_from_ns && t < s->down_to_ns) {
		atomic_fetch_add_explicit(&b->dep_failed, 1, memory_order_relaxed);
		return false;
	}
	return true;
}

static void worker(resil_t *r, resil_policy_t *shared, const char *cfg, struct board *b, int idx,
		   const struct schedule *s)
{
	struct worker_row *w = &b->w[idx];
	resil_policy_t *p = shared;
	char name[64];
	int64_t t0, next, end;
	int ret;

	w->first_reject_ns = -1;
	w->recovered_ns = -1;
	alarm((unsigned)(s->run_ns / 1000000000LL) + 60); /* never outlive a stuck master */

	if (!p) {
		/* per-process: this worker's own breaker, as an in-process library gives */
		snprintf(name, sizeof(name), "demo-local-%d", (int)getpid());
		ret = resil_define(r, name, cfg);
		if (ret == 0)
			ret = resil_policy(r, name, &p);
		if (ret < 0)
			w->err = ret;
	}
	atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
	while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
		usleep(200);
	if (w->err)
		goto out;

	sleep_until(t0);
	end = t0 + s->run_ns;
	for (next = t0;; next += s->pace_ns) {
		int64_t now = mono_ns();
		int64_t t = now - t0;
		resil_permit_t pm;
		bool ok;
		int v;

		if (now >= end)
			break;
		/* a worker that fell behind (descheduled) does not catch up in a burst */
		if (next < now - s->pace_ns)
			next = now;

		w->calls++;
		v = resil_acquire(p, &pm);
		if (v < 0) {
			w->err = v;
			break;
		}
		if (v > 0) {
			w->rejected++;
			if (t >= s->down_from_ns && w->first_reject_ns < 0)
				w->first_reject_ns = t - s->down_from_ns;
		} else {
			/* the caller that moves OPEN -> HALF_OPEN is a probe, and so is
			 * every caller admitted while it stays HALF_OPEN */
			if (resil_policy_state(p) == RESIL_STATE_HALF_OPEN)
				w->probes++;
			ok = dependency_call(b, s, t);
			if (!ok) {
				w->reached_down++;
			} else {
				w->reached_up++;
				if (t >= s->down_to_ns && w->recovered_ns < 0)
					w->recovered_ns = t - s->down_to_ns;
			}
			resil_release(p, &pm, ok ? RESIL_SUCCESS : RESIL_FAILURE);
		}
		sleep_until(next + s->pace_ns);
	}
	if (!shared)
		resil_delete(r, name); /* the demo leaves no policy behind */
out:
	w->finished = 1;
}

/* Fork n workers on a fresh board, start them together, wait for all. */
static int run_fleet(resil_t *r, resil_policy_t *shared, const char *cfg, struct board *b, int n,
		     const struct schedule *s, struct run_result *res)
{
	pid_t pids[MAX_WORKERS];
	int64_t give_up;
	int i, failed = 0;

	memset(b, 0, sizeof(*b));
	for (i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			fprintf(stderr, "fleet_demo: fork: %s\n", strerror(errno));
			n = i;
			failed = 1;
			break;
		}
		if (pids[i] == 0) {
			worker(r, shared, cfg, b, i, s);
			_exit(0);
		}
	}
	/* every worker ready (or 10 s), then one start time for all */
	give_up = mono_ns() + 10000 * NS_PER_MS;
	while (atomic_load_explicit(&b->ready, memory_order_acquire) < (uint32_t)n &&
	       mono_ns() < give_up)
		usleep(1000);
	atomic_store_explicit(&b->t0, mono_ns() + 20 * NS_PER_MS, memory_order_release);

	for (i = 0; i < n; i++) {
		int status;

		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !b->w[i].finished) {
			fprintf(stderr, "fleet_demo: worker %d did not finish\n", i);
			failed = 1;
		} else if (b->w[i].err) {
			fprintf(stderr, "fleet_demo: worker %d: %s\n", i, strerror(-b->w[i].err));
			failed = 1;
		}
	}
	if (failed)
		return -1;

	memset(res, 0, sizeof(*res));
	res->open_first_ns = res->recov_first_ns = -1;
	res->open_last_ns = res->recov_last_ns = -1;
	res->dep_failed = atomic_load_explicit(&b->dep_failed, memory_order_relaxed);
	for (i = 0; i < n; i++) {
		const struct worker_row *w = &b->w[i];

		res->calls += w->calls;
		res->reached_down += w->reached_down;
		res->rejected += w->rejected;
		res->probes += w->probes;
		if (w->first_reject_ns >= 0) {
			if (res->open_first_ns < 0 || w->first_reject_ns < res->open_first_ns)
				res->open_first_ns = w->first_reject_ns;
			if (w->first_reject_ns > res->open_last_ns)
				res->open_last_ns = w->first_reject_ns;
			res->opened_workers++;
		}
		if (w->recovered_ns >= 0) {
			if (res->recov_first_ns < 0 || w->recovered_ns < res->recov_first_ns)
				res->recov_first_ns = w->recovered_ns;
			if (w->recovered_ns > res->recov_last_ns)
				res->recov_last_ns = w->recovered_ns;
			res->recovered_workers++;
		}
	}
	return 0;
}

static const char *span_ms(char *buf, size_t len, int64_t a, int64_t b)
{
	if (a < 0)
		snprintf(buf, len, "never");
	else if (b - a < 100000) /* within 0.1 ms: one figure */
		snprintf(buf, len, "%.1f", a / 1e6);
	else
		snprintf(buf, len, "%.1f .. %.1f", a / 1e6, b / 1e6);
	return buf;
}

static void tsv_row(FILE *f, const char *name, const char *metric, double v, const char *unit)
{
	if (f)
		fprintf(f, "fleet\t%s\t%s\t%.6g\t%.6g\t%.6g\t%s\t\n", name, metric, v, v, v, unit);
}

/* What one breaker may let through in the outage: THRESHOLD failures to
 * open, then at most PROBES per OPEN -> HALF_OPEN, which happens at most
 * once per breaker.wait. */
static double dead_bound(const struct schedule *s)
{
	int64_t outage = s->down_to_ns - s->down_from_ns;

	return THRESHOLD + PROBES * (double)((outage + s->wait_ns - 1) / s->wait_ns);
}

static void tsv_run(FILE *f, const char *name, const struct run_result *x, int n, double bound)
{
	tsv_row(f, name, "workers", n, "processes");
	tsv_row(f, name, "dead_calls_bound", bound, "calls");
	tsv_row(f, name, "calls", (double)x->calls, "calls");
	tsv_row(f, name, "dead_calls", (double)x->dep_failed, "calls");
	tsv_row(f, name, "rejected", (double)x->rejected, "calls");
	tsv_row(f, name, "probes", (double)x->probes, "calls");
	tsv_row(f, name, "open_first_ms", x->open_first_ns / 1e6, "ms");
	tsv_row(f, name, "open_last_ms", x->open_last_ns / 1e6, "ms");
	tsv_row(f, name, "recover_first_ms", x->recov_first_ns / 1e6, "ms");
	tsv_row(f, name, "recover_last_ms", x->recov_last_ns / 1e6, "ms");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fleet_demo [--workers N] [--socket PATH] [--embedded] [--short]"
		   " [--tsv FILE]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"workers", required_argument, NULL, 'w'},
	    {"socket", required_argument, NULL, 's'},
	    {"embedded", no_argument, NULL, 'e'},
	    {"short", no_argument, NULL, 'S'},
	    {"tsv", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	const struct schedule *s = &sched_normal;
	const char *sock = NULL, *tsv = NULL;
	struct run_result shared_res, local_res;
	resil_policy_t *shared = NULL;
	bool embedded = false;
	int workers = 8, c, ret;
	char cfg[256], name[64], a[48], b2[48];
	struct board *board;
	FILE *tf = NULL;
	resil_t *r;

	while ((c = getopt_long(argc, argv, "w:s:eSt:h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			workers = atoi(optarg);
			if (workers < 1 || workers > MAX_WORKERS) {
				fprintf(stderr, "fleet_demo: --workers takes 1..%d\n", MAX_WORKERS);
				return 2;
			}
			break;
		case 's':
			sock = optarg;
			break;
		case 'e':
			embedded = true;
			break;
		case 'S':
			s = &sched_short;
			break;
		case 't':
			tsv = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (embedded)
		ret = resil_open_embedded(&r, NULL);
	else
		ret = resil_open(&r, sock);
	if (ret < 0) {
		const char *path = sock ? sock : getenv("RESIL_SOCKET");

		fprintf(stderr, "fleet_demo: cannot %s: %s\n",
			embedded ? "open embedded segments" : "reach resild", strerror(-ret));
		if (!embedded)
			fprintf(stderr,
				"  start it with `resild --foreground --socket %s --config DIR`"
				" (DIR: its policy files, may be empty), or run `fleet_demo "
				"--embedded`\n",
				path ? path : "/run/resild/control.sock");
		return 1;
	}

	snprintf(cfg, sizeof(cfg),
		 "breaker.window = consecutive:%d; breaker.wait = %s; breaker.half_open_calls = %d",
		 THRESHOLD, s->wait, PROBES);
	board =
	    mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (board == MAP_FAILED) {
		fprintf(stderr, "fleet_demo: mmap: %s\n", strerror(errno));
		resil_close(r);
		return 1;
	}

	printf("resil fleet demo: %d worker processes each call one dependency every %.0f ms"
	       " for %.1f s;\n",
	       workers, s->pace_ns / 1e6, s->run_ns / 1e9);
	printf("the dependency is down from %.1f s to %.1f s and fails every call then.\n",
	       s->down_from_ns / 1e9, s->down_to_ns / 1e9);
	printf("breaker: %s\n", cfg);
	printf("policies: %s\n\n", embedded ? "embedded segments (no daemon)" : "resild");

	/* run 1: one breaker for the whole fleet, defined before fork */
	snprintf(name, sizeof(name), "demo-shared-%d", (int)getpid());
	ret = resil_define(r, name, cfg);
	if (ret == 0)
		ret = resil_policy(r, name, &shared);
	if (ret < 0) {
		fprintf(stderr, "fleet_demo: define %s: %s\n", name, strerror(-ret));
		goto fail;
	}
	printf("run 1: one shared breaker ...\n");
	if (run_fleet(r, shared, cfg, board, workers, s, &shared_res) < 0)
		goto fail;
	resil_delete(r, name);

	/* run 2: one breaker per process */
	printf("run 2: one breaker per process ...\n\n");
	if (run_fleet(r, NULL, cfg, board, workers, s, &local_res) < 0)
		goto fail;

	printf("%-50s %16s %22s\n", "", "shared breaker", "per-process breakers");
	printf("%-50s %16llu %22llu\n", "calls made", (unsigned long long)shared_res.calls,
	       (unsigned long long)local_res.calls);
	printf("%-50s %16llu %22llu\n", "calls that reached the dead dependency",
	       (unsigned long long)shared_res.dep_failed, (unsigned long long)local_res.dep_failed);
	printf("%-50s %16.1f %22.1f\n", "  per worker", (double)shared_res.dep_failed / workers,
	       (double)local_res.dep_failed / workers);
	printf("%-50s %16llu %22llu\n", "calls rejected by the breaker",
	       (unsigned long long)shared_res.rejected, (unsigned long long)local_res.rejected);
	printf("%-50s %16llu %22llu\n", "probes sent (calls admitted in half-open)",
	       (unsigned long long)shared_res.probes, (unsigned long long)local_res.probes);
	printf("%-50s %16s %22s\n", "breaker opened: first rejection, ms into outage",
	       span_ms(a, sizeof(a), shared_res.open_first_ns, shared_res.open_last_ns),
	       span_ms(b2, sizeof(b2), local_res.open_first_ns, local_res.open_last_ns));
	printf("%-50s %16s %22s\n", "recovered: first success, ms after the outage",
	       span_ms(a, sizeof(a), shared_res.recov_first_ns, shared_res.recov_last_ns),
	       span_ms(b2, sizeof(b2), local_res.recov_first_ns, local_res.recov_last_ns));
	printf("(a range is first .. last worker)\n\n");
	printf("one breaker lets through %d failures to open, then up to %d probes each time"
	       " breaker.wait ends:\nat most %.0f in this outage; one breaker per process lets"
	       " each worker through as many.\n\n",
	       THRESHOLD, PROBES, dead_bound(s));
	printf("calls that reached the dead dependency: shared %llu, per-process %llu"
	       " (%d workers x %.1f)\n",
	       (unsigned long long)shared_res.dep_failed, (unsigned long long)local_res.dep_failed,
	       workers, (double)local_res.dep_failed / workers);

	if (tsv) {
		tf = fopen(tsv, "a");
		if (!tf) {
			fprintf(stderr, "fleet_demo: %s: %s\n", tsv, strerror(errno));
			goto fail;
		}
		tsv_run(tf, "breaker.shared", &shared_res, workers, dead_bound(s));
		tsv_run(tf, "breaker.process", &local_res, workers, dead_bound(s) * workers);
		fclose(tf);
	}
	munmap(board, sizeof(*board));
	resil_close(r);
	return 0;
fail:
	if (shared)
		resil_delete(r, name);
	munmap(board, sizeof(*board));
	resil_close(r);
	return 1;
}

/* SPDX-License-Identifier: MIT */
/*
 * fleet.c - resil_bench's fleet scenario: a rate limit of R/s for N
 * workers, shared or kept per process.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */
/* Fleet: a rate limit of R/s for N workers, shared or kept per process */

static void fleet_child(struct mp_board *b, int i, resil_policy_t *p, int64_t run_ns)
{
	uint64_t adm = 0, ops = 0;
	int64_t t0, end;

	atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
	while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
		usleep(100);
	end = t0 + run_ns;
	if (p) {
		while (mono_ns() < t0)
			usleep(50);
		while (mono_ns() < end) {
			resil_permit_t pm;
			int v = resil_acquire(p, &pm);

			ops++;
			if (v == RESIL_ADMIT) {
				adm++;
				resil_release(p, &pm, RESIL_SUCCESS);
			} else if (v == RESIL_REJECT_LIMITED) {
				/* honour Retry-After, as a well-behaved worker does */
				int64_t w = resil_permit_wait_ns(&pm);

				sleep_ns(w < 10000 ? 10000 : w > 2 * NS_PER_MS ? 2 * NS_PER_MS : w);
			} else {
				_exit(1);
			}
		}
	}
	b->w[i].ops = ops;
	b->w[i].admitted = adm;
	b->w[i].done = 1;
	_exit(0);
}

void run_fleet_rate(resil_t *r, const char *where)
{
	static const struct {
		const char *name;
		int shared;
		int divide; /* each process gets R / N */
	} cfgs[] = {
	    {"shared_r", 1, 0},
	    {"process_r_over_n", 0, 1},
	    {"process_r", 0, 0},
	};
	const int nproc = 4;
	const uint32_t rate = 1000;
	int64_t run_ns = (int64_t)(opt.fleet_secs * NS_PER_S);

	fprintf(stderr, "fleet rate limit (%s)\n", where);
	for (int shape = 0; shape < 2; shape++) {
		for (size_t k = 0; k < ARRAY_LEN(cfgs); k++) {
			resil_policy_t *pols[MAX_PROCS] = {0};
			char name[96], base[40], cfg[96], note[96];
			struct mp_board *b;
			pid_t pids[MAX_PROCS];
			double adm = 0;
			int i, ok = 1;

			snprintf(name, sizeof(name), "rate.%s.%s", shape ? "one_busy" : "all_busy",
				 cfgs[k].name);
			if (!selected("fleet", name))
				continue;
			/* a burst of 10 absorbs the workers' wake-up jitter, so a
			 * limiter admits its rate, not less (+ 10 once per run) */
			snprintf(cfg, sizeof(cfg), "limit.rate = %u/s; limit.burst = 10",
				 cfgs[k].divide ? rate / nproc : rate);
			for (i = 0; i < nproc; i++) {
				if (cfgs[k].shared && i > 0) {
					pols[i] = pols[0];
					continue;
				}
				snprintf(base, sizeof(base), "fr%d%zu%d", shape, k, i);
				pols[i] = mkpol(r, base, cfg);
				ok &= pols[i] != NULL;
			}
			if (!ok)
				continue;
			b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
			if (b == MAP_FAILED)
				return;
			for (i = 0; i < nproc; i++) {
				pids[i] = fork();
				if (pids[i] == 0)
					fleet_child(b, i, shape && i > 0 ? NULL : pols[i], run_ns);
			}
			while (atomic_load_explicit(&b->ready, memory_order_acquire) <
			       (uint32_t)nproc)
				usleep(1000);
			atomic_store_explicit(&b->t0, mono_ns() + 10 * NS_PER_MS,
					      memory_order_release);
			for (i = 0; i < nproc; i++) {
				int st;

				waitpid(pids[i], &st, 0);
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !b->w[i].done)
					ok = 0;
				adm += (double)b->w[i].admitted;
			}
			munmap(b, sizeof(*b));
			if (!ok) {
				fprintf(stderr, "resil_bench: fleet %s failed\n", name);
				continue;
			}
			adm /= (double)run_ns / NS_PER_S;
			snprintf(note, sizeof(note), "R=%u/s N=%d %.40s; %.40s", rate, nproc, cfg,
				 where);
			emit("fleet", name, "admitted_per_s", adm, adm, adm, "1/s", note);
			fprintf(stderr, "  fleet          %-34s %8.0f admitted/s (%s)\n", name, adm,
				cfg);
		}
	}
}

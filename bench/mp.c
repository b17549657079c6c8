/* SPDX-License-Identifier: MIT */
/*
 * mp.c - resil_bench's multi-process throughput: 1, 2, 4 processes on
 * one policy or on one each (and, for the cases marked threads, 1, 2, 4
 * threads of this process on one handle or on one policy each).
 */
#include <pthread.h>

#include "bench.h"

/* ---------------------------------------------------------------------- */
/* Multi-process throughput: 1, 2, 4 processes on one policy or on one each */

/* A floor (no policy: MP_FAA, a fetch_add; MP_CLOCK_CAS, GCRA's: the
 * decision clock and a CAS from the word's value) or a policy. */
enum { MP_FAA = 1, MP_CLOCK_CAS, MP_POLICY };

/* GCRA's word operation without GCRA: the word fetched for writing, loaded,
 * and CASed to max(word, now) + 1 until a CAS takes (gcra_take's shape). */
static inline void clock_cas(_Atomic uint64_t *word)
{
	uint64_t now = (uint64_t)resil_clock_fast(), cur;

	resil_prefetch_write(word);
	cur = atomic_load_explicit(word, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(word, &cur, (cur > now ? cur : now) + 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

/* Worker i's run: shared, the floors' workers on one word (else each on
 * its own line); keys, a keyed policy decided on uniform keys
 * 0..keys-1 (each worker its own sequence). Its figures go to b->w[i]. */
static void mp_work(struct mp_board *b, int i, int kind, bool shared, resil_policy_t *p,
		    uint32_t keys, int64_t run_ns)
{
	_Atomic uint64_t *word = &b->line[shared ? 0 : i].word;
	uint64_t ops = 0, adm = 0, s = 1000 + (uint64_t)i;
	int64_t t0, end;

	atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
	while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
		usleep(100);
	if (!p && kind == MP_POLICY)
		return;
	end = t0 + run_ns;
	while (mono_ns() < t0)
		;
	do {
		for (int k = 0; k < 256; k++) {
			if (kind == MP_FAA) {
				atomic_fetch_add_explicit(word, 1, memory_order_relaxed);
			} else if (kind == MP_CLOCK_CAS) {
				clock_cas(word);
			} else {
				resil_permit_t pm;
				uint32_t key;
				int v;

				if (keys) {
					key = key_of((uint32_t)(splitmix(&s) % keys));
					v = resil_acquire_key(p, &key, sizeof(key), &pm);
				} else {
					v = resil_acquire(p, &pm);
				}
				if (v == RESIL_ADMIT) {
					adm++;
					resil_release(p, &pm, RESIL_SUCCESS);
				}
			}
		}
		ops += 256;
	} while (mono_ns() < end);
	b->w[i].ops = ops;
	b->w[i].admitted = adm;
	b->w[i].done = 1;
}

struct mp_thread {
	struct mp_board *b;
	int i, kind;
	bool shared;
	resil_policy_t *p;
	uint32_t keys;
	int64_t run_ns;
};

static void *mp_thread_main(void *arg)
{
	struct mp_thread *t = arg;

	mp_work(t->b, t->i, t->kind, t->shared, t->p, t->keys, t->run_ns);
	return NULL;
}

/* Aggregate operations per second; pols[i] is worker i's policy; threads:
 * the workers are threads of this process, else forked children. */
static double mp_once(int kind, bool shared, int nproc, resil_policy_t **pols, uint32_t keys,
		      int64_t run_ns, bool threads)
{
	struct mp_thread ts[MAX_PROCS];
	pthread_t tids[MAX_PROCS];
	struct mp_board *b;
	pid_t pids[MAX_PROCS];
	double total = 0;
	int i, started = 0;

	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return -1;
	for (i = 0; i < nproc; i++) {
		if (threads) {
			ts[i] = (struct mp_thread){b, i, kind, shared, pols[i], keys, run_ns};
			if (pthread_create(&tids[i], NULL, mp_thread_main, &ts[i]) != 0)
				break;
			started++;
			continue;
		}
		pids[i] = fork();
		if (pids[i] == 0) {
			mp_work(b, i, kind, shared, pols[i], keys, run_ns);
			_exit(b->w[i].done ? 0 : 1);
		}
	}
	if (threads && started < nproc)
		atomic_store_explicit(&b->ready, (uint32_t)nproc, memory_order_release);
	while (atomic_load_explicit(&b->ready, memory_order_acquire) < (uint32_t)nproc)
		usleep(1000);
	atomic_store_explicit(&b->t0, mono_ns() + 5 * NS_PER_MS, memory_order_release);
	for (i = 0; i < nproc; i++) {
		int st = 0;

		if (threads) {
			if (i < started)
				pthread_join(tids[i], NULL);
		} else {
			waitpid(pids[i], &st, 0);
		}
		if ((!threads && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) || !b->w[i].done)
			total = -1e30;
		total += (double)b->w[i].ops;
	}
	munmap(b, sizeof(*b));
	return total < 0 ? -1 : total / ((double)run_ns / NS_PER_S);
}

static const struct mp_case mp_cases[] = {
    {"fetch_add", NULL, NULL, 0, MP_FAA},
    /* two-process GCRA's floor: a clock read and a CAS on one word */
    {"clock_cas", NULL, NULL, 0, MP_CLOCK_CAS},
    {"breaker.count100", "mpb", "breaker.window = count:100"},
    {"bulkhead", "mpbulk", "bulkhead.max = 1000"},
    {"bulkhead25", "mpbulk25", "bulkhead.max = 25"},
    {"bulkhead.wait", "mpbulkw", "bulkhead.max = 1000; bulkhead.wait = 100ms"},
    /* a partition (callers here are not critical) */
    {"bulkhead.critical", "mpbulkc",
     "bulkhead.max = 1000; bulkhead.wait = 100ms; bulkhead.critical = 10%"},
    /* packed slots: above 1024 permits (counted before) */
    {"bulkhead2000", "mpbulk2k", "bulkhead.max = 2000"},
    /* threads of one process on one handle: spread slots, then packed */
    {"bulkhead.threads", "mtbulk", "bulkhead.max = 1000", .threads = true},
    {"bulkhead2000.threads", "mtbulk2k", "bulkhead.max = 2000", .threads = true},
    {"limit.admit", "mplim", "limit.rate = 1000000000/s; limit.burst = 1000000"},
    {"limit.keyed_1k", "mpkeyed",
     "limit.rate = 1000000000/s; limit.burst = 1000000; limit.keys = 1000", 1000},
};

void run_mp(resil_t *r, const char *where)
{
	int64_t run_ns = (int64_t)(opt.mp_secs * NS_PER_S);
	int runs = opt.smoke ? 1 : 3;

	fprintf(stderr, "mp (%s)\n", where);
	for (size_t k = 0; k < ARRAY_LEN(mp_cases); k++) {
		const struct mp_case *c = &mp_cases[k];

		for (int sep = 0; sep < 2; sep++) {
			for (int np = 1; np <= 4; np *= 2) {
				resil_policy_t *pols[MAX_PROCS] = {0};
				double v[MAX_RUNS];
				char name[96], base[40], note[64];
				int ok = 1, kind;

				snprintf(name, sizeof(name), "%s.%s.p%d", c->name,
					 sep ? "separate" : "shared", np);
				if (!selected("mp", name))
					continue;
				kind = c->cfg ? MP_POLICY : c->kind;
				for (int i = 0; i < np; i++) {
					if (!c->cfg)
						continue;
					if (sep || i == 0) {
						snprintf(base, sizeof(base), "%s%d", c->base,
							 sep ? i : 99);
						pols[i] = mkpol(r, base, c->cfg);
						ok &= pols[i] != NULL;
					} else {
						pols[i] = pols[0];
					}
				}
				if (!ok)
					continue;
				for (int j = 0; j < runs; j++) {
					v[j] = mp_once(kind, !sep, np, pols, c->keys, run_ns,
						       c->threads);
					if (v[j] < 0)
						ok = 0;
				}
				if (!ok) {
					fprintf(stderr, "resil_bench: mp %s failed\n", name);
					continue;
				}
				qsort(v, runs, sizeof(v[0]), cmp_double);
				snprintf(note, sizeof(note), "%s; %d runs of %.2f s", where, runs,
					 opt.mp_secs);
				emit("mp", name, "mops", v[runs / 2] / 1e6, v[0] / 1e6,
				     v[runs - 1] / 1e6, "M/s", note);
				fprintf(stderr, "  mp             %-34s %8.1f M/s [%.1f-%.1f]\n",
					name, v[runs / 2] / 1e6, v[0] / 1e6, v[runs - 1] / 1e6);
			}
		}
	}
}

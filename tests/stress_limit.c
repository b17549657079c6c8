/* SPDX-License-Identifier: MIT */
/*
 * stress_limit.c - forked processes hammering one limiter in shared memory.
 *
 * The state block lives in a MAP_SHARED anonymous region, as it does in the
 * state segment; every process decides on it with the real CLOCK_MONOTONIC.
 * Checked at quiescence, upper bounds only (never a duration):
 *   - gcra: admitted <= (t_end - t_start) / T + burst, over 4 processes;
 *   - sliding: every admission time recorded; no span of one period holds
 *     more than the limit, across all processes;
 *   - keyed gcra: the same bound for every key;
 *   - 2 processes inserting the same keys at once: one entry per key;
 *   - through a real segment pair and resil_policy_acquire (the segment's
 *     SipHash key): the keyed bound per key, and a change of rate keeps
 *     each key's state;
 *   - workers SIGKILLed at random instants while inserting and evicting:
 *     still one entry per key, and maintenance repairs `used` exactly.
 * Also prints decisions per second (the bench part; not asserted).
 * RESIL_TEST_SCALE multiplies the run time (1 s per part by default).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "limit.h"
#include "policy.h"
#include "seg_records.h"
#include "resil.h"

#define NPROC	4
#define MAXREC	(1 << 18)
#define NKEYS	16
#define NINSERT 20000

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

struct shared {
	_Atomic int go;
	_Atomic int ready;
	int64_t deadline;
	uint64_t tries[NPROC];
	uint64_t admitted[NPROC];
	uint64_t key_admitted[NPROC][NKEYS];
	int64_t rec[NPROC][MAXREC];
	uint32_t nrec[NPROC];
};

static struct shared *sh;
static void *state;
static struct resil_limit_conf conf;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

static int scale(void)
{
	const char *s = getenv("RESIL_TEST_SCALE");
	int v = s ? atoi(s) : 1;

	return v > 0 ? v : 1;
}

static void *map_shared(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	return p;
}

static void setup(const char *text)
{
	char buf[256], err[256], *save = NULL, *pair;
	uint64_t size;

	resil_limit_conf_defaults(&conf);
	snprintf(buf, sizeof(buf), "%s", text);
	for (pair = strtok_r(buf, ";", &save); pair; pair = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(pair, '=');

		CHECK(eq);
		*eq = '\0';
		while (*pair == ' ')
			pair++;
		for (char *e = eq - 1; e > pair && *e == ' '; e--)
			*e = '\0';
		while (*++eq == ' ')
			;
		if (resil_limit_conf_set(&conf, pair, eq, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s\n", err);
			exit(1);
		}
	}
	CHECK(resil_limit_conf_check(&conf, err, sizeof(err)) == 0);
	if (state)
		munmap(state, 64 << 20);
	size = resil_limit_state_size(&conf);
	CHECK(size <= (64 << 20));
	state = map_shared(64 << 20);
	resil_limit_state_init(state, &conf, now_ns());
	memset(sh, 0, sizeof(*sh));
}

typedef void (*worker_fn)(int id);

/* Fork n workers, release them at once, wait for all. Returns elapsed
 * t_end - t_start, where every decision happened inside [t_start, t_end]. */
static int64_t run(int n, worker_fn fn, int64_t dur)
{
	pid_t pid[NPROC];
	int64_t t0, t1;
	int i, st;

	for (i = 0; i < n; i++) {
		pid[i] = fork();
		CHECK(pid[i] >= 0);
		if (pid[i] == 0) {
			atomic_fetch_add(&sh->ready, 1);
			while (!atomic_load(&sh->go))
				;
			fn(i);
			_exit(0);
		}
	}
	while (atomic_load(&sh->ready) < n)
		;
	t0 = now_ns();
	sh->deadline = t0 + dur;
	atomic_store(&sh->go, 1);
	for (i = 0; i < n; i++) {
		CHECK(waitpid(pid[i], &st, 0) == pid[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	t1 = now_ns();
	return t1 - t0;
}

static int cmp64u(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void hammer(int id)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	while (now_ns() < sh->deadline) {
		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		sh->tries[id]++;
		if (resil_limit_acquire(&x, &conf, state, &pm) == 0) {
			sh->admitted[id]++;
			if (sh->nrec[id] < MAXREC)
				sh->rec[id][sh->nrec[id]++] = x.now; /* the reading it decided at */
		}
	}
}

static void hammer_keys(int id)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	char key[16];
	uint64_t i = (uint64_t)id;

	memset(&x, 0, sizeof(x));
	while (now_ns() < sh->deadline) {
		int k = (int)(i++ % NKEYS);

		snprintf(key, sizeof(key), "client-%d", k);
		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		x.key = key;
		x.key_len = strlen(key);
		sh->tries[id]++;
		if (resil_limit_acquire(&x, &conf, state, &pm) == 0)
			sh->key_admitted[id][k]++;
	}
}

static void insert_same(int id)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	char key[24];
	int i;

	memset(&x, 0, sizeof(x));
	for (i = 0; i < NINSERT; i++) {
		snprintf(key, sizeof(key), "same-%d", i);
		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		x.key = key;
		x.key_len = strlen(key);
		if (resil_limit_acquire(&x, &conf, state, &pm) == 0)
			sh->admitted[id]++;
	}
}

/* ---- through the segment and the policy ---- */

static struct resil_seg seg;

static const struct resil_rec *policy_rec(const char *name)
{
	uint32_t slot;
	uint64_t w;

	CHECK(resil_seg_lookup(&seg, name, &slot, &w) == 0);
	return resil_seg_rec_of(&seg, w);
}

static void hammer_policy(int id)
{
	const struct resil_rec *rec = policy_rec("api");
	struct resil_permit_priv pm;
	struct resil_ctx x;
	char key[16];
	uint64_t i = (uint64_t)id;

	memset(&x, 0, sizeof(x));
	x.seg = &seg;
	while (now_ns() < sh->deadline) {
		int k = (int)(i++ % NKEYS);

		snprintf(key, sizeof(key), "tenant-%d", k);
		memset(&pm, 0, sizeof(pm));
		pm.limit_permits = 1;
		x.now = 0;
		sh->tries[id]++;
		if (resil_policy_acquire(&x, rec, &pm, key, strlen(key)) == 0) {
			sh->key_admitted[id][k]++;
			x.now = 0;
			resil_policy_release(&x, rec, &pm, RESIL_SUCCESS);
		}
	}
}

/* ---- killed at random instants ---- */

static void churn(int id)
{
	struct resil_permit_priv pm;
	struct resil_ctx x;
	uint64_t r = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL;
	char key[24];

	memset(&x, 0, sizeof(x));
	for (;;) {
		snprintf(key, sizeof(key), "churn-%u", (unsigned)(resil_splitmix64(&r) % 3000));
		memset(&pm, 0, sizeof(pm));
		x.now = 0;
		x.key = key;
		x.key_len = strlen(key);
		sh->tries[id & 3]++;
		resil_limit_acquire(&x, &conf, state, &pm);
	}
}

static void kill_test(void)
{
	struct resil_limit_info info;
	struct resil_limit_entry *t;
	struct resil_ctx x;
	uint64_t *fps, n, live = 0, i;
	pid_t pid[NPROC];
	int round, j, st;

	/* 1 per 10 s: keys stay limited, so the table fills and the
	 * when_full path, evictions of cold keys and TOMBs all happen */
	setup("limit.rate = 1/10s; limit.burst = 2; limit.keys = 512");
	for (j = 0; j < NPROC; j++) {
		pid[j] = fork();
		CHECK(pid[j] >= 0);
		if (pid[j] == 0)
			churn(j);
	}
	for (round = 0; round < 60 * scale(); round++) {
		struct timespec ts = {0, (long)(1 + round % 7) * 1000000L};

		nanosleep(&ts, NULL); /* pacing the kills, not waiting for anything */
		j = round % NPROC;
		kill(pid[j], SIGKILL);
		CHECK(waitpid(pid[j], &st, 0) == pid[j]);
		pid[j] = fork();
		CHECK(pid[j] >= 0);
		if (pid[j] == 0)
			churn(j + NPROC * (round + 1));
	}
	for (j = 0; j < NPROC; j++) {
		kill(pid[j], SIGKILL);
		CHECK(waitpid(pid[j], &st, 0) == pid[j]);
	}
	/* one entry per key, whatever instant the writers died at, once the
	 * daemon's tick folded the twins a killed inserter can leave */
	memset(&x, 0, sizeof(x));
	resil_limit_maintain(&x, &conf, state);
	t = (struct resil_limit_entry *)(void *)((struct resil_limit_state *)state)->data;
	n = (uint64_t)(conf.keys / 2) * RESIL_LIMIT_BUCKET;
	fps = calloc(n, sizeof(*fps));
	CHECK(fps);
	for (i = 0; i < n; i++) {
		uint64_t f = atomic_load(&t[i].fp) & ~(1ULL << 63);

		if (f > RESIL_LIMIT_FP_TOMB)
			fps[live++] = f;
	}
	qsort(fps, live, sizeof(*fps), cmp64u);
	for (i = 1; i < live; i++)
		CHECK(fps[i] != fps[i - 1]);
	free(fps);
	resil_limit_info(&conf, state, &info);
	CHECK(info.size == live);
	CHECK(live <= conf.keys);
	/* and recounted what a killed inserter left skewed */
	CHECK(atomic_load(&((struct resil_limit_state *)state)->used) == live);
	printf("kill     %d SIGKILLs: %llu keys, %llu evictions, %llu full, %llu merged, "
	       "used repaired %llu time(s)\n",
	       60 * scale(), (unsigned long long)live, (unsigned long long)info.evictions,
	       (unsigned long long)info.full_rejects, (unsigned long long)info.merges,
	       (unsigned long long)atomic_load(&((struct resil_limit_state *)state)->repairs));
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, int n, int64_t el, uint64_t admitted)
{
	uint64_t tries = 0;
	int i;

	for (i = 0; i < n; i++)
		tries += sh->tries[i];
	printf("%-8s %d procs %.3f s: %llu decisions (%.1f M/s), %llu admitted\n", what, n,
	       el / 1e9, (unsigned long long)tries, tries / (el / 1e3),
	       (unsigned long long)admitted);
}

/* Every key admitted at least once and at most rate x elapsed + burst
 * (summed over the processes); returns the total admitted. */
static uint64_t keys_within(int64_t el, const struct resil_limit_conf *c)
{
	uint64_t total = 0;

	for (int k = 0; k < NKEYS; k++) {
		uint64_t per = 0;

		for (int i = 0; i < NPROC; i++)
			per += sh->key_admitted[i][k];
		CHECK(per > 0);
		CHECK((int64_t)per <= el / c->interval_ns + c->burst);
		total += per;
	}
	return total;
}

int main(void)
{
	int64_t dur = (int64_t)scale() * RESIL_NS_PER_S, el, bound;
	uint64_t total;
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = map_shared(sizeof(*sh));

	/* 1. gcra: 4 processes, 20000/s (precise clock), burst 50 */
	setup("limit.rate = 20000/s; limit.burst = 50");
	el = run(NPROC, hammer, dur);
	for (total = 0, i = 0; i < NPROC; i++)
		total += sh->admitted[i];
	bound = el / conf.interval_ns + conf.burst;
	report("gcra", NPROC, el, total);
	printf("         bound rate x elapsed + burst = %lld\n", (long long)bound);
	CHECK(total > 0);
	CHECK((int64_t)total <= bound);

	/* 2. gcra at a coarse-clock rate: the bound gains at most one coarse
	 * resolution (limit.c) */
	setup("limit.rate = 10/s; limit.burst = 3");
	el = run(NPROC, hammer, dur);
	for (total = 0, i = 0; i < NPROC; i++)
		total += sh->admitted[i];
	bound = (el + resil_clock_coarse_resolution_ns()) / conf.interval_ns + conf.burst;
	report("coarse", NPROC, el, total);
	CHECK(total >= 3);
	CHECK((int64_t)total <= bound);

	/* 3. sliding: no span of the period holds more than the limit */
	setup("limit.rate = 500/100ms; limit.algorithm = sliding");
	el = run(NPROC, hammer, dur);
	{
		static int64_t all[NPROC * MAXREC];
		uint32_t n = 0, j = 0, best = 0;

		for (i = 0; i < NPROC; i++) {
			CHECK(sh->nrec[i] < MAXREC);
			memcpy(all + n, sh->rec[i], sh->nrec[i] * sizeof(int64_t));
			n += sh->nrec[i];
		}
		qsort(all, n, sizeof(all[0]), cmp64);
		for (i = 0; i < (int)n; i++) {
			while (all[j] <= all[i] - conf.period_ns)
				j++;
			if ((uint32_t)i - j + 1 > best)
				best = (uint32_t)i - j + 1;
		}
		report("sliding", NPROC, el, n);
		printf("         most admissions in any 100 ms span: %u (limit %u)\n", best,
		       conf.count);
		CHECK(best <= conf.count);
		CHECK(n >= conf.count);
	}

	/* 4. keyed gcra: every key within its own bound */
	setup("limit.rate = 5000/s; limit.burst = 10; limit.keys = 64");
	el = run(NPROC, hammer_keys, dur);
	total = keys_within(el, &conf);
	report("keyed", NPROC, el, total);

	/* 5. the same keys inserted by 2 processes at once: one entry each */
	for (int round = 0; round < 3 * scale(); round++) {
		struct resil_limit_info info;

		setup("limit.rate = 1/h; limit.keys = 65536");
		run(2, insert_same, 0);
		resil_limit_info(&conf, state, &info);
		CHECK(info.size == NINSERT);
		CHECK(atomic_load(&((struct resil_limit_state *)state)->used) == NINSERT);
		/* burst 1, once per key, whoever came first; a fold may forget the
		 * admission made through the losing entry */
		CHECK(sh->admitted[0] + sh->admitted[1] >= NINSERT);
		CHECK(sh->admitted[0] + sh->admitted[1] <= NINSERT + info.merges);
		printf("insert   2 procs x %d same keys: %llu entries, %llu merged races\n",
		       NINSERT, (unsigned long long)info.size, (unsigned long long)info.merges);
	}
	/* 6. a real segment pair, through resil_policy_acquire */
	{
		struct resil_seg_params sp = {
		    .slots = 16, .clients = 16, .events = 64, .state_size = 16 << 20};
		struct resil_conf pc;
		struct resil_ctx x;
		char err[256];
		int64_t tat, wait;
		uint64_t off;

		CHECK(resil_seg_create(&seg, &sp) == 0);
		resil_conf_init(&pc);
		CHECK(resil_conf_parse(&pc,
				       "limit.rate = 5000/s; limit.burst = 10; limit.keys = 64", 1,
				       err, sizeof(err)) == 0);
		CHECK(resil_seg_define(&seg, "api", &pc, 0, 0, now_ns(), err, sizeof(err)) == 0);
		memset(sh, 0, sizeof(*sh));
		el = run(NPROC, hammer_policy, dur);
		total = keys_within(el, &pc.limit);
		report("policy", NPROC, el, total);
		/* a change of rate keeps the block and every key's state */
		off = policy_rec("api")->state_off;
		memset(&x, 0, sizeof(x));
		x.seg = &seg;
		CHECK(resil_limit_key_info(&x, &policy_rec("api")->conf.limit,
					   resil_comp_state(&seg, policy_rec("api"), RESIL_C_LIMIT),
					   "tenant-3", 8, &tat, &wait) == 0);
		CHECK(resil_conf_parse(&pc, "limit.rate = 1/m", 1, err, sizeof(err)) == 0);
		if (resil_seg_define(&seg, "api", &pc, 0, 0, now_ns(), err, sizeof(err)) < 0) {
			fprintf(stderr, "define: %s\n", err);
			exit(1);
		}
		CHECK(policy_rec("api")->state_off == off);
		CHECK(resil_limit_key_info(&x, &policy_rec("api")->conf.limit,
					   resil_comp_state(&seg, policy_rec("api"), RESIL_C_LIMIT),
					   "tenant-3", 8, &tat, &wait) == 0);
		resil_seg_unmap(&seg);
	}

	/* 7. writers killed at random instants */
	kill_test();
	printf("ok\n");
	return 0;
}

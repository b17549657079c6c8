/* SPDX-License-Identifier: MIT */
/*
 * resil_bench.c - what one decision costs, next to what it would cost
 * otherwise: per-op cost of every hot path, the floors it is built from,
 * the same policy kept per process, a round trip to the daemon per
 * decision, Redis on loopback, multi-process throughput, and two fleet
 * scenarios (a shared rate limit against per-process ones).
 *
 * Method. A case is a loop of n calls. It is calibrated so one run lasts
 * about --target-ms, run --runs times (7; 1 with --smoke), and reported as
 * the median ns/op with the min and max of the runs. With --callgrind it
 * runs a fixed count instead (--cg-iters) between two client requests that
 * switch collection on and off, and dumps one profile per case named
 * "group|name|iters"; bench/run.sh divides the instructions by iters.
 * Valgrind hides the vDSO, so instruction counts of cases that call
 * clock_gettime do not include it (it becomes a syscall valgrind runs
 * itself); the ns/op figures do. The decision clock (shm/clock.c) reads
 * the TSC, which valgrind counts (and re-anchors through clock_gettime).
 *
 * Output: one TSV row per figure on --out (stdout by default):
 *   group  name  metric  median  min  max  unit  note
 * groups: floor, resil (the fleet's segments: resild's when --socket is
 * given, else embedded), resil-process (embedded, unshared: the same
 * policy kept per process), socket (a Get round trip to resild per
 * decision), redis, mp (aggregate throughput of 1, 2, 4 processes), fleet.
 * Round trips are timed twice, the second time with a spinning process
 * keeping the other vCPU awake (metrics *_warm; see spinner_start).
 * Progress goes to stderr.
 *
 * Shared memory here: the floors use one MAP_SHARED memfd page (written by
 * this process only, except in the multi-process floor where each child
 * adds to one word, or to its own 128-byte line), and the keyed table's
 * memory floor a MAP_SHARED memfd the size of a keyed table (written, then
 * read, by this process only; unmapped after the keyed case's runs). The
 * multi-process boards are MAP_SHARED anonymous pages: the parent publishes
 * t0 (release) after every child said ready (fetch_add), children read it
 * (acquire); each child writes only its own 128-byte row, read by the
 * parent after waitpid(). A child killed mid-run leaves its row unwritten:
 * the parent reports the run as failed. Nothing here survives the process:
 * no crash repair needed.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bulkhead.h" /* a global bulkhead's lease, set by hand */
#include "common.h"   /* resil_clock_fast, inline */
#include "internal.h" /* the policy's state block (the lease) */
#include "limit.h"    /* the keyed table's size, for its memory floor */
#include "resil.h"
#include "resil.pb-c.h"
#include "lua_gcra.h" /* the per-request Redis limiter */

#ifdef RESIL_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif
#ifdef RESIL_HAVE_CALLGRIND
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT                                                                   \
	do {                                                                                       \
	} while (0)
#define CALLGRIND_DUMP_STATS_AT(s)                                                                 \
	do {                                                                                       \
		(void)(s);                                                                         \
	} while (0)
#define RUNNING_ON_VALGRIND 0
#endif

#define NS_PER_S     1000000000LL
#define NS_PER_MS    1000000LL
#define MAX_RUNS     15
#define MAX_PROCS    8
#define SEQ_LEN	     (1u << 20) /* key index sequence, a power of two */
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static struct {
	bool smoke;
	bool callgrind;
	const char *only; /* run only cases whose "group/name" contains this */
	const char *socket;
	const char *redis;
	int runs;
	double target_ms;
	uint64_t cg_iters;
	double mp_secs;
	double fleet_secs;
	FILE *out;
} opt = {
    .runs = 7,
    .target_ms = 40,
    .cg_iters = 20000,
    .mp_secs = 0.3,
    .fleet_secs = 2,
};

static volatile uint64_t sink;
static uint64_t admits; /* verdicts RESIL_ADMIT counted by the loops */

/* Policies this run defined in resild, deleted at the end. */
static struct {
	resil_t *r;
	char name[64];
} defined[256];
static int ndefined;

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / NS_PER_S, .tv_nsec = ns % NS_PER_S};

	nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void emit(const char *group, const char *name, const char *metric, double med, double mn,
		 double mx, const char *unit, const char *note)
{
	fprintf(opt.out, "%s\t%s\t%s\t%.6g\t%.6g\t%.6g\t%s\t%s\n", group, name, metric, med, mn, mx,
		unit, note ? note : "");
	fflush(opt.out);
}

static bool selected(const char *group, const char *name)
{
	const char *o = opt.only;
	char full[256];

	if (!o)
		return true;
	snprintf(full, sizeof(full), "%s/%s", group, name);
	/* --only A,B: any of the comma-separated parts */
	for (;;) {
		size_t len = strcspn(o, ",");
		char part[256];

		if (len > 0 && len < sizeof(part)) {
			memcpy(part, o, len);
			part[len] = '\0';
			if (strstr(full, part))
				return true;
		}
		if (!o[len])
			return false;
		o += len + 1;
	}
}

/* ---------------------------------------------------------------------- */
/* The harness */

typedef void (*loop_fn)(void *ctx, uint64_t n);

static double run_once(loop_fn fn, void *ctx, uint64_t n)
{
	int64_t t = mono_ns();

	fn(ctx, n);
	return (double)(mono_ns() - t);
}

/*
 * Interleaved runs: between batch_begin() and batch_flush(), measure()
 * only calibrates a case; the flush then runs run 1 of every case, run 2
 * of every case, and so on. A neighbour that loads the shared machine for
 * a few hundred ms then slows one run of many cases (the median drops it)
 * instead of every run of one case, and the floors a ratio divides by are
 * measured in the same rounds as the operations.
 */
struct pending {
	const char *group, *name;
	loop_fn fn;
	void *ctx;
	uint64_t n, admits;
	double v[MAX_RUNS];
};
static struct pending batch[64];
static int nbatch;
static bool batching;

static void report_case(const char *group, const char *name, double *v, uint64_t n,
			uint64_t admitted)
{
	char note[128];

	qsort(v, opt.runs, sizeof(v[0]), cmp_double);
	if (strcmp(group, "floor") == 0)
		snprintf(note, sizeof(note), "n=%llu", (unsigned long long)n);
	else
		snprintf(note, sizeof(note), "admitted=%.4f n=%llu",
			 (double)admitted / (double)(n * (uint64_t)opt.runs),
			 (unsigned long long)n);
	emit(group, name, "ns_op", v[opt.runs / 2], v[0], v[opt.runs - 1], "ns", note);
	fprintf(stderr, "  %-14s %-34s %9.2f ns/op [%.2f-%.2f] %s\n", group, name, v[opt.runs / 2],
		v[0], v[opt.runs - 1], note);
}

static void batch_begin(void)
{
	batching = !opt.callgrind;
	nbatch = 0;
}

static void batch_flush(void)
{
	for (int i = 0; i < opt.runs; i++) {
		for (int k = 0; k < nbatch; k++) {
			struct pending *b = &batch[k];

			admits = 0;
			b->v[i] = run_once(b->fn, b->ctx, b->n) / (double)b->n;
			b->admits += admits;
		}
	}
	for (int k = 0; k < nbatch; k++)
		report_case(batch[k].group, batch[k].name, batch[k].v, batch[k].n, batch[k].admits);
	nbatch = 0;
	batching = false;
}

static void measure(const char *group, const char *name, loop_fn fn, void *ctx)
{
	double v[MAX_RUNS], target = opt.target_ms * 1e6, el;
	uint64_t n = 64;
	int i;

	if (!selected(group, name))
		return;
	if (opt.callgrind) {
		char tag[200];

		fn(ctx, 1000); /* warm: first-touch, table fills, branch history */
		admits = 0;
		CALLGRIND_TOGGLE_COLLECT;
		fn(ctx, opt.cg_iters);
		CALLGRIND_TOGGLE_COLLECT;
		snprintf(tag, sizeof(tag), "%s|%s|%llu|%.4f", group, name,
			 (unsigned long long)opt.cg_iters, (double)admits / opt.cg_iters);
		CALLGRIND_DUMP_STATS_AT(tag);
		fprintf(stderr, "  callgrind %s/%s\n", group, name);
		return;
	}
	/* calibrate: grow n until one run takes about the target */
	fn(ctx, n);
	for (;;) {
		el = run_once(fn, ctx, n);
		if (el >= target / 4 || n >= (1ULL << 34))
			break;
		n *= el < target / 64 ? 16 : 2;
	}
	n = (uint64_t)((double)n * target / (el > 1 ? el : 1));
	if (n < 16)
		n = 16;
	if (batching && nbatch < (int)ARRAY_LEN(batch)) {
		batch[nbatch++] =
		    (struct pending){.group = group, .name = name, .fn = fn, .ctx = ctx, .n = n};
		return;
	}
	admits = 0;
	for (i = 0; i < opt.runs; i++)
		v[i] = run_once(fn, ctx, n) / (double)n;
	report_case(group, name, v, n, admits);
}

/* Latency distribution of a round-trip case: p50, p99, mean. */
/*
 * On a VM a round trip costs more when the peer's vCPU is idle: waking a
 * halted vCPU goes through the hypervisor. Round trips are timed twice:
 * as they come ("idle"), and with a spinning process at the lowest priority
 * keeping the other vCPU awake ("warm", metrics *_warm), the faster case
 * the targets compare with.
 */
static pid_t spinner_start(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (nice(19) < 0)
			_exit(1);
		for (;;)
			__asm__ volatile("" ::: "memory");
	}
	usleep(20000); /* let it reach the other vCPU */
	return pid;
}

static void spinner_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

static void emit_latency(const char *group, const char *name, double *lat, int n, bool warm)
{
	const char *sfx = warm ? "_warm" : "";
	double mean = 0, p50, p99;
	char note[96], m[32];
	int i;

	if (n <= 0)
		return;
	for (i = 0; i < n; i++)
		mean += lat[i];
	mean /= n;
	qsort(lat, n, sizeof(lat[0]), cmp_double);
	p50 = lat[n / 2];
	p99 = lat[(int)((n - 1) * 0.99)];
	snprintf(note, sizeof(note), "n=%d%s", n, warm ? " other vCPU kept busy" : "");
	snprintf(m, sizeof(m), "ns_op%s", sfx);
	emit(group, name, m, mean, lat[0], lat[n - 1], "ns", note);
	snprintf(m, sizeof(m), "p50_us%s", sfx);
	emit(group, name, m, p50 / 1e3, p50 / 1e3, p50 / 1e3, "us", note);
	snprintf(m, sizeof(m), "p99_us%s", sfx);
	emit(group, name, m, p99 / 1e3, p99 / 1e3, p99 / 1e3, "us", note);
	fprintf(stderr, "  %-14s %-34s mean %.1f us, p50 %.1f us, p99 %.1f us%s\n", group, name,
		mean / 1e3, p50 / 1e3, p99 / 1e3, warm ? " (warm)" : "");
}

/* ---------------------------------------------------------------------- */
/* Floors */

static _Atomic uint64_t *floor_page; /* one MAP_SHARED memfd page */

/* The bare call: the dependency itself, out of line so it stays a call. */
static __attribute__((noinline)) int dep_ok(uint64_t i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return 0;
}

static void loop_bare(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += dep_ok(i);
	sink += s;
}

static void loop_faa(void *ctx, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		atomic_fetch_add_explicit(&floor_page[0], 1, memory_order_relaxed);
}

static void loop_load(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += atomic_load_explicit(&floor_page[0], memory_order_acquire);
	sink += s;
}

static void loop_cas(void *ctx, uint64_t n)
{
	uint64_t e = atomic_load_explicit(&floor_page[16], memory_order_relaxed);

	for (uint64_t i = 0; i < n; i++) {
		/* succeeds every time (one writer); e holds the current value */
		if (atomic_compare_exchange_strong_explicit(
			&floor_page[16], &e, e + 1, memory_order_acq_rel, memory_order_acquire))
			e++;
	}
}

static void loop_clock(void *ctx, uint64_t n)
{
	clockid_t id = (clockid_t)(intptr_t)ctx;
	struct timespec ts;
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(id, &ts);
		s += (uint64_t)ts.tv_nsec;
	}
	sink += s;
}

/* GCRA's own floor: one precise clock read and one successful CAS. */
static void loop_clock_cas(void *ctx, uint64_t n)
{
	clockid_t id = (clockid_t)(intptr_t)ctx;
	uint64_t e = atomic_load_explicit(&floor_page[32], memory_order_relaxed);
	struct timespec ts;

	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(id, &ts);
		if (atomic_compare_exchange_strong_explicit(
			&floor_page[32], &e, e + (uint64_t)ts.tv_nsec, memory_order_acq_rel,
			memory_order_acquire))
			e += (uint64_t)ts.tv_nsec;
	}
}

/* The decision clock (shm/clock.c and common.h, linked from libresil.a):
 * CLOCK_MONOTONIC extrapolated from the TSC where the host allows it. */

static void loop_clock_fast(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += (uint64_t)resil_clock_fast();
	sink += s;
}

/* GCRA's floor on the decision clock: one fast clock read and one CAS. */
static void loop_fast_cas(void *ctx, uint64_t n)
{
	uint64_t e = atomic_load_explicit(&floor_page[48], memory_order_relaxed);

	for (uint64_t i = 0; i < n; i++) {
		uint64_t t = (uint64_t)resil_clock_fast();

		if (atomic_compare_exchange_strong_explicit(
			&floor_page[48], &e, e + t, memory_order_acq_rel, memory_order_acquire))
			e += t;
	}
}

static void loop_syscall(void *ctx, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		sink += (uint64_t)syscall(SYS_getppid);
}

/*
 * The keyed limiter's memory floor. A keyed decision at many keys reads a
 * line of its table that no cache holds and waits for it before it can
 * decide: a floor no software removes. It is measured on a MAP_SHARED memfd
 * (the same kind of mapping as a segment) exactly the size of the keyed
 * case's table (limit.keys = keys, as keyed_case defines it; the bytes
 * come from the library's own layout, resil_limit_state_size), every line
 * written first, then walked by a chain of 8-byte loads where the next
 * index is the loaded value mixed with a splitmix step: each load waits for
 * the one before and no prefetcher can guess it, and the step (independent
 * of the loads) keeps the walk from closing into a short cycle that a cache
 * would hold. One load per op. Written and read by this process only; the
 * mapping lives for the keyed case's runs (keyed_case).
 */
struct mem_floor {
	uint32_t keys;	     /* the keyed case whose table this is */
	char name[40];	     /* "mem_random_<MB>mb", kept: the batch holds the pointer */
	uint64_t bytes;	     /* the table's bytes */
	uint64_t words;	     /* 8-byte words walked, < 2^32 */
	size_t map_len;	     /* bytes rounded up to a page */
	_Atomic uint64_t *a; /* NULL: not mapped */
	uint64_t idx, s;     /* where the chain is, carried from run to run */
};

static uint64_t splitmix(uint64_t *s);

static void loop_mem_random(void *ctx, uint64_t n)
{
	struct mem_floor *m = ctx;
	uint64_t idx = m->idx, s = m->s;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = atomic_load_explicit(&m->a[idx], memory_order_relaxed);

		/* multiply-shift: the top 32 bits of the mix onto [0, words) */
		idx = (((v ^ splitmix(&s)) >> 32) * m->words) >> 32;
	}
	m->idx = idx;
	m->s = s;
}

static int mem_floor_init(struct mem_floor *m)
{
	struct resil_limit_conf c = {.algorithm = RESIL_LIMIT_GCRA, .keys = m->keys};
	long page = sysconf(_SC_PAGESIZE);
	uint64_t s = 11;
	int fd;

	m->bytes = resil_limit_state_size(&c) - sizeof(struct resil_limit_state);
	m->words = m->bytes / sizeof(uint64_t);
	m->map_len = (size_t)((m->bytes + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page);
	snprintf(m->name, sizeof(m->name), "mem_random_%.3gmb", (double)m->bytes / 1e6);
	if (!selected("floor", m->name) || m->words < 2 || m->words >= (1ULL << 32))
		return 0;
	fd = memfd_create("resil-bench-table", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)m->map_len) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		fprintf(stderr, "resil_bench: memfd %zu bytes: %s\n", m->map_len, strerror(e));
		return -e;
	}
	m->a = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m->a == MAP_FAILED) {
		int e = errno;

		m->a = NULL;
		fprintf(stderr, "resil_bench: mmap %zu bytes: %s\n", m->map_len, strerror(e));
		return -e;
	}
	/* every line written: the walk finds it mapped, and its values random */
	for (uint64_t i = 0; i < m->words; i++)
		atomic_store_explicit(&m->a[i], splitmix(&s), memory_order_relaxed);
	m->idx = 0;
	m->s = 13;
	return 0;
}

static int floors_init(void)
{
	int fd = memfd_create("resil-bench-floor", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, 4096) < 0) {
		fprintf(stderr, "resil_bench: memfd: %s\n", strerror(errno));
		return -errno;
	}
	floor_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (floor_page == MAP_FAILED) {
		fprintf(stderr, "resil_bench: mmap: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

static void mem_floor_fini(struct mem_floor *m)
{
	if (m->a)
		munmap((void *)m->a, m->map_len);
	m->a = NULL;
}

static void run_floors(void)
{
	fprintf(stderr, "floors\n");
	measure("floor", "bare_call", loop_bare, NULL);
	measure("floor", "fetch_add", loop_faa, NULL);
	measure("floor", "load_acquire", loop_load, NULL);
	measure("floor", "cas", loop_cas, NULL);
	measure("floor", "clock_monotonic", loop_clock, (void *)(intptr_t)CLOCK_MONOTONIC);
	measure("floor", "clock_fast", loop_clock_fast, NULL);
	measure("floor", "clock_coarse", loop_clock, (void *)(intptr_t)CLOCK_MONOTONIC_COARSE);
	measure("floor", "clock_cas", loop_clock_cas, (void *)(intptr_t)CLOCK_MONOTONIC);
	measure("floor", "fast_cas", loop_fast_cas, NULL);
	measure("floor", "coarse_cas", loop_clock_cas, (void *)(intptr_t)CLOCK_MONOTONIC_COARSE);
	if (!opt.callgrind)
		measure("floor", "syscall_getppid", loop_syscall, NULL);
}

/* A keyed case's memory floor, measured in the case's own interleaved
 * runs (memory latency moves with the neighbours' load more than anything
 * else here). */
static void measure_mem_floor(struct mem_floor *m)
{
	char note[96];

	if (!m->a)
		return;
	/* which table it stands for, for the report */
	snprintf(note, sizeof(note), "the table of limit.keyed_* with %u keys (limit.keys)",
		 m->keys);
	emit("floor", m->name, "keys", m->keys, m->keys, m->keys, "keys", note);
	emit("floor", m->name, "bytes", (double)m->bytes, (double)m->bytes, (double)m->bytes, "B",
	     note);
	measure("floor", m->name, loop_mem_random, m);
}

/* ---------------------------------------------------------------------- */
/* resil hot paths */

struct pctx {
	resil_policy_t *p;
	const uint32_t *seq;  /* keyed: index sequence, SEQ_LEN long */
	uint64_t pos;
};

static void loop_acq_rel(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++) {
		resil_permit_t pm;

		if (resil_acquire(x->p, &pm) == RESIL_ADMIT) {
			a++;
			resil_release(x->p, &pm, RESIL_SUCCESS);
		}
	}
	admits += a;
}

/* Key i of a keyed case: a bijection of the 32-bit integers (an odd
 * multiplier), so keys are distinct and scattered, and computed where it
 * is used: the loop reads no key array (a real caller has its key in the
 * request it is deciding, in cache), so a case's figure is the library's
 * own memory traffic. */
static inline uint32_t key_of(uint32_t i)
{
	return i * 2654435761u;
}

static void loop_keyed(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0, pos = x->pos;

	for (uint64_t i = 0; i < n; i++, pos++) {
		uint32_t k = key_of(x->seq[pos & (SEQ_LEN - 1)]);
		resil_permit_t pm;

		if (resil_acquire_key(x->p, &k, sizeof(k), &pm) == RESIL_ADMIT) {
			a++;
			resil_release(x->p, &pm, RESIL_SUCCESS);
		}
	}
	x->pos = pos;
	admits += a;
}

static int call_ok(void *arg, resil_attempt_t *a)
{
	return dep_ok((uint64_t)(uintptr_t)arg);
}

static void loop_call(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++)
		a += resil_call(x->p, call_ok, NULL) == 0;
	admits += a;
}

/* One retry decision against the budget: begin, then "may I retry?" */
static void loop_retry(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++) {
		resil_retry_t rt;

		resil_retry_begin(x->p, &rt, 0);
		a += resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) >= 0;
	}
	admits += a;
}

static resil_policy_t *mkpol(resil_t *r, const char *base, const char *cfg)
{
	resil_policy_t *p;
	char name[64];
	int ret;

	snprintf(name, sizeof(name), "bench-%s-%d", base, (int)getpid());
	ret = resil_define(r, name, cfg);
	if (ret == 0)
		ret = resil_policy(r, name, &p);
	if (ret < 0) {
		fprintf(stderr, "resil_bench: define %s \"%s\": %s\n", name, cfg, strerror(-ret));
		return NULL;
	}
	if (ndefined < (int)ARRAY_LEN(defined)) {
		defined[ndefined].r = r;
		snprintf(defined[ndefined].name, sizeof(defined[ndefined].name), "%s", name);
		ndefined++;
	}
	return p;
}

static void drop_defined(resil_t *r)
{
	for (int i = 0; i < ndefined; i++)
		if (defined[i].r == r)
			resil_delete(r, defined[i].name);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Distinct IPv4-like keys and index sequences: uniform, or Zipf (s = 0.99,
 * as YCSB) over nkeys, from a fixed seed. */

static uint32_t *make_seq(uint32_t nkeys, bool zipf)
{
	uint32_t *seq = malloc(sizeof(*seq) * SEQ_LEN);
	double *cdf = NULL, sum = 0;
	uint64_t s = 7;

	if (!seq)
		return NULL;
	if (!zipf) {
		for (uint32_t i = 0; i < SEQ_LEN; i++)
			seq[i] = (uint32_t)(splitmix(&s) % nkeys);
		return seq;
	}
	cdf = malloc(sizeof(*cdf) * nkeys);
	if (!cdf) {
		free(seq);
		return NULL;
	}
	for (uint32_t i = 0; i < nkeys; i++) {
		sum += 1.0 / pow((double)(i + 1), 0.99);
		cdf[i] = sum;
	}
	for (uint32_t i = 0; i < SEQ_LEN; i++) {
		double u = (double)(splitmix(&s) >> 11) / (double)(1ULL << 53) * sum;
		uint32_t lo = 0, hi = nkeys - 1;

		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* scatter ranks over the key array so hot keys are not neighbours */
		seq[i] = (uint32_t)(((uint64_t)lo * 2654435761u) % nkeys);
	}
	free(cdf);
	return seq;
}

static void keyed_case(resil_t *r, const char *group, uint32_t nkeys, const char *label)
{
	struct mem_floor floor = {.keys = nkeys};
	char cfg[160], base[32], names[2][64];
	struct pctx x[2] = {{0}};
	bool any = false;

	for (int z = 0; z < 2; z++) {
		snprintf(names[z], sizeof(names[z]), "limit.keyed_%s.%s", label,
			 z ? "zipf" : "random");
		any |= selected(group, names[z]);
	}
	if (!any)
		return;
	snprintf(base, sizeof(base), "keyed%s", label);
	/* a table sized for the keys, as one would configure it ("_global":
	 * policy.scope = global, the keys' admissions counted for the
	 * exchange; embedded, no daemon: the hot path alone) */
	snprintf(cfg, sizeof(cfg),
		 "%slimit.rate = 1000000000/s; limit.burst = 1000000; limit.keys = %u",
		 strstr(label, "_global") ? "policy.scope = global; " : "", nkeys);
	x[0].p = mkpol(r, base, cfg);
	if (!x[0].p)
		return;
	/* every key once, so the measured loop finds them in the table */
	for (uint32_t i = 0; i < nkeys; i++) {
		uint32_t k = key_of(i);
		resil_permit_t pm;

		if (resil_acquire_key(x[0].p, &k, sizeof(k), &pm) == RESIL_ADMIT)
			resil_release(x[0].p, &pm, RESIL_SUCCESS);
	}
	/* the table's floor (from 100k keys: smaller tables stay in cache),
	 * the uniform and the Zipf case, interleaved */
	if (nkeys >= 100000)
		mem_floor_init(&floor); /* unmapped (an error): only the floor is lost */
	batch_begin();
	measure_mem_floor(&floor);
	for (int z = 0; z < 2; z++) {
		x[z].p = x[0].p;
		x[z].seq = make_seq(nkeys, z);
		if (x[z].seq)
			measure(group, names[z], loop_keyed, &x[z]);
	}
	batch_flush();
	mem_floor_fini(&floor);
	for (int z = 0; z < 2; z++)
		free((void *)x[z].seq);
}

static void keyed_reject_case(resil_t *r, const char *group)
{
	struct pctx x = {0};
	uint32_t nkeys = 1000, *seq;

	if (!selected(group, "limit.keyed_reject"))
		return;
	seq = make_seq(nkeys, false);
	x.p = mkpol(r, "keyedrej", "limit.rate = 1/h; limit.keys = 2048");
	if (!x.p || !seq)
		goto out;
	for (uint32_t i = 0; i < nkeys; i++) { /* spend each key's one permit */
		uint32_t k = key_of(i);
		resil_permit_t pm;

		if (resil_acquire_key(x.p, &k, sizeof(k), &pm) == RESIL_ADMIT)
			resil_release(x.p, &pm, RESIL_SUCCESS);
	}
	x.seq = seq;
	measure(group, "limit.keyed_reject", loop_keyed, &x);
out:
	free(seq);
}

struct simple_case {
	const char *name;
	const char *base; /* policy name part */
	const char *cfg;
	int prep; /* PREP_* */
	loop_fn fn;
};

/* PREP_HOLD_ALL: the bench process takes every permit it can and holds
 * them during the loop, so each acquire of the loop is a rejection. */
/* PREP_LEASE: a global bulkhead leased all of its slots until far in the
 * future, as its daemon would (no cluster here): the hot path under a
 * live lease. */
enum { PREP_NONE, PREP_FAIL_ONCE, PREP_ADMIT_ONCE, PREP_HOLD_ALL, PREP_LEASE };
#define HOLD_MAX 64

static const struct simple_case simple_cases[] = {
    {"empty.acq_rel", "empty", "policy.scope = fleet", PREP_NONE, loop_acq_rel},
    {"breaker.count100.acq_rel", "bcount", "breaker.window = count:100", PREP_NONE, loop_acq_rel},
    {"breaker.consecutive.acq_rel", "bcons", "breaker.window = consecutive:5", PREP_NONE,
     loop_acq_rel},
    {"breaker.time.acq_rel", "btime", "breaker.window = time:10s", PREP_NONE, loop_acq_rel},
    {"breaker.open_reject", "bopen", "breaker.window = consecutive:1; breaker.wait = 1h",
     PREP_FAIL_ONCE, loop_acq_rel},
    {"limit.admit", "ladmit", "limit.rate = 1000000000/s; limit.burst = 1000000", PREP_NONE,
     loop_acq_rel},
    {"limit.admit_global", "lglobal",
     "policy.scope = global; limit.rate = 1000000000/s; limit.burst = 1000000", PREP_NONE,
     loop_acq_rel},
    {"limit.admit_slow_rate", "lslow", "limit.rate = 10/s; limit.burst = 100000000", PREP_NONE,
     loop_acq_rel},
    {"limit.reject", "lrej", "limit.rate = 1/h", PREP_ADMIT_ONCE, loop_acq_rel},
    {"bulkhead.acq_rel", "bulk", "bulkhead.max = 25", PREP_NONE, loop_acq_rel},
    {"bulkhead.reject", "bulkrej", "bulkhead.max = 25", PREP_HOLD_ALL, loop_acq_rel},
    {"bulkhead.acq_rel_global", "bglobal", "policy.scope = global; bulkhead.max = 25", PREP_LEASE,
     loop_acq_rel},
    {"adaptive.acq_rel", "adapt", "adaptive.algorithm = vegas", PREP_NONE, loop_acq_rel},
    {"shed.acq_rel", "shed", "shed.k = 2", PREP_NONE, loop_acq_rel},
    {"budget.acq_rel", "budget", "retry.budget = grpc:100:0.1", PREP_NONE, loop_acq_rel},
    {"retry.next", "retry", "retry.max_attempts = 3", PREP_NONE, loop_retry},
    {"budget.retry_next", "rbudget", "retry.max_attempts = 3; retry.budget = grpc:100:0.1",
     PREP_NONE, loop_retry},
    {"breaker.count100.call", "call", "breaker.window = count:100", PREP_NONE, loop_call},
    {"stack.acq_rel", "stack",
     "breaker.window = count:100; limit.rate = 1000000000/s; limit.burst = 1000000;"
     " bulkhead.max = 25",
     PREP_NONE, loop_acq_rel},
};

/* The simple cases of one group: measured (or queued into the batch),
 * their contexts and held permits kept until release_simple(). */
struct simple_group {
	struct pctx x[ARRAY_LEN(simple_cases)];
	resil_policy_t *held_p;
	resil_permit_t held[HOLD_MAX];
	int nheld;
};

static void run_simple(resil_t *r, const char *group, struct simple_group *g)
{
	fprintf(stderr, "%s\n", group);
	memset(g, 0, sizeof(*g));
	for (size_t i = 0; i < ARRAY_LEN(simple_cases); i++) {
		const struct simple_case *c = &simple_cases[i];
		struct pctx *x = &g->x[i];
		resil_permit_t pm;

		if (!selected(group, c->name))
			continue;
		x->p = mkpol(r, c->base, c->cfg);
		if (!x->p)
			continue;
		if (c->prep == PREP_LEASE) {
			/* one decision binds the policy (its state block) */
			if (resil_acquire(x->p, &pm) == RESIL_ADMIT)
				resil_release(x->p, &pm, RESIL_SUCCESS);
			void *st = atomic_load(&x->p->lean_st);

			if (st)
				resil_bulkhead_lease_set(st, INT64_MAX, 25, 0);
			if (!st || resil_acquire(x->p, &pm) != RESIL_ADMIT) {
				fprintf(stderr, "%s: no lease set\n", c->name);
				continue;
			}
			resil_release(x->p, &pm, RESIL_SUCCESS);
		} else if (c->prep == PREP_HOLD_ALL && !g->held_p) {
			g->held_p = x->p;
			while (g->nheld < HOLD_MAX &&
			       resil_acquire(x->p, &g->held[g->nheld]) == RESIL_ADMIT)
				g->nheld++;
		} else if (c->prep != PREP_NONE && c->prep != PREP_HOLD_ALL &&
			   resil_acquire(x->p, &pm) == RESIL_ADMIT) {
			resil_release(x->p, &pm,
				      c->prep == PREP_FAIL_ONCE ? RESIL_FAILURE : RESIL_SUCCESS);
		}
		measure(group, c->name, c->fn, x);
	}
}

static void release_simple(struct simple_group *g)
{
	while (g->nheld > 0)
		resil_release(g->held_p, &g->held[--g->nheld], RESIL_IGNORED);
}

static void run_keyed(resil_t *r, const char *group, bool keyed)
{
	keyed_reject_case(r, group);
	if (!keyed)
		return;
	keyed_case(r, group, 1000, "1k");
	keyed_case(r, group, 1000, "1k_global");
	keyed_case(r, group, 100000, "100k");
	if (!opt.smoke)
		keyed_case(r, group, 1000000, "1m");
}

/* ---------------------------------------------------------------------- */
/* A naive policy server: one Get request to resild per decision */

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

/* One request, one response: pack, send, receive, unpack, as a client of
 * a policy server would for every decision. */
static int ctl_roundtrip(int fd, Resil__Request *req, uint8_t *buf, size_t cap)
{
	size_t len = resil__request__get_packed_size(req);
	Resil__Response *resp;
	ssize_t n;
	int ret = 0;

	if (len > cap)
		return -EMSGSIZE;
	resil__request__pack(req, buf);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -errno;
	n = recv(fd, buf, cap, 0);
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	resp = resil__response__unpack(NULL, (size_t)n, buf);
	if (!resp)
		return -EPROTO;
	if (resp->error)
		ret = -(int)resp->error->errno_value;
	resil__response__free_unpacked(resp, NULL);
	return ret;
}

static void run_socket(resil_t *r)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello hello = RESIL__HELLO__INIT;
	Resil__Get get = RESIL__GET__INIT;
	int n = opt.smoke ? 200 : 20000, fd, ret, i;
	static uint8_t buf[65536];
	char name[64];
	double *lat;

	if (!selected("socket", "get_roundtrip") || !mkpol(r, "sock", "breaker.window = count:100"))
		return;
	fprintf(stderr, "socket\n");
	snprintf(name, sizeof(name), "bench-sock-%d", (int)getpid());
	fd = ctl_connect(opt.socket);
	if (fd < 0) {
		fprintf(stderr, "resil_bench: connect %s: %s\n", opt.socket, strerror(-fd));
		return;
	}
	hello.min_version = 1;
	hello.max_version = 1;
	hello.client = "resil_bench";
	req.id = 1;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &hello;
	ret = ctl_roundtrip(fd, &req, buf, sizeof(buf));
	if (ret < 0)
		fprintf(stderr, "resil_bench: hello: %s (going on)\n", strerror(-ret));

	lat = calloc(n, sizeof(*lat));
	get.name = name;
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &get;
	for (int warm = 0; warm < 2 && lat; warm++) {
		pid_t spin = warm ? spinner_start() : -1;

		for (i = 0; i < n; i++) {
			int64_t t = mono_ns();

			req.id = (uint64_t)i + 2;
			ret = ctl_roundtrip(fd, &req, buf, sizeof(buf));
			if (ret < 0) {
				fprintf(stderr, "resil_bench: get %s: %s\n", name, strerror(-ret));
				break;
			}
			lat[i] = (double)(mono_ns() - t);
		}
		spinner_stop(spin);
		if (i == n)
			emit_latency("socket", "get_roundtrip", lat, n, warm);
	}
	free(lat);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* Redis on loopback (unix socket), through hiredis */

#ifdef RESIL_HAVE_HIREDIS
/* A consecutive-failures breaker in one hash: record an outcome and read
 * the state in one round trip. ARGV: outcome (1 failure), threshold, wait (us). */
static const char lua_breaker[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local h = redis.call('HMGET', KEYS[1], 's', 'f', 'o')\n"
    "local s = tonumber(h[1]) or 0\n"
    "local f = tonumber(h[2]) or 0\n"
    "local o = tonumber(h[3]) or 0\n"
    "if s == 1 then\n"
    "  if now - o < tonumber(ARGV[3]) then return 1 end\n"
    "  s = 2\n"
    "end\n"
    "if ARGV[1] == '1' then\n"
    "  f = f + 1\n"
    "  if s == 2 or f >= tonumber(ARGV[2]) then s = 1; o = now; f = 0 end\n"
    "else\n"
    "  f = 0; s = 0\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 's', s, 'f', f, 'o', o)\n"
    "return s\n";

static int redis_load(redisContext *c, const char *lua, char *sha, size_t len)
{
	redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", lua);
	int ret = -EPROTO;

	if (rep && rep->type == REDIS_REPLY_STRING) {
		snprintf(sha, len, "%s", rep->str);
		ret = 0;
	} else {
		fprintf(stderr, "resil_bench: SCRIPT LOAD: %s\n",
			rep && rep->str ? rep->str : c->errstr);
	}
	if (rep)
		freeReplyObject(rep);
	return ret;
}

static long long redis_used_memory(redisContext *c)
{
	redisReply *rep = redisCommand(c, "INFO memory");
	long long v = -1;
	char *p;

	if (rep && rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, "used_memory:")))
		v = atoll(p + strlen("used_memory:"));
	if (rep)
		freeReplyObject(rep);
	return v;
}

static bool redis_ok(redisContext *c, redisReply *rep, const char *what)
{
	bool ok = rep && rep->type != REDIS_REPLY_ERROR;

	if (!ok)
		fprintf(stderr, "resil_bench: redis %s: %s\n", what, rep ? rep->str : c->errstr);
	if (rep)
		freeReplyObject(rep);
	return ok;
}

enum { R_PING, R_GCRA, R_SLIDING, R_BREAKER };

/* One decision of kind op on key number k; false on an error. */
static bool redis_decide(redisContext *c, int op, const char *sha_gcra, const char *sha_br,
			 uint32_t k, uint64_t *seqno)
{
	redisReply *rep = NULL;
	struct timespec ts;
	long long now_us;
	int i;

	switch (op) {
	case R_PING:
		return redis_ok(c, redisCommand(c, "PING"), "PING");
	case R_GCRA:
		/* 1 per minute per key, burst 1000000: admits, and keys live 60 s */
		rep = redisCommand(c, "EVALSHA %s 1 rl:%u 60000000 1000000", sha_gcra, k);
		return redis_ok(c, rep, "EVALSHA gcra");
	case R_BREAKER:
		return redis_ok(c, redisCommand(c, "EVALSHA %s 1 br:%u 0 5 500000", sha_br, k),
				"EVALSHA breaker");
	case R_SLIDING:
		/* seed 004's window: 100 per 60 s, one MULTI pipeline per request */
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
		redisAppendCommand(c, "MULTI");
		redisAppendCommand(c, "ZREMRANGEBYSCORE sw:%u 0 %lld", k, now_us - 60000000LL);
		redisAppendCommand(c, "ZADD sw:%u %lld %lld-%llu", k, now_us, now_us,
				   (unsigned long long)++*seqno);
		redisAppendCommand(c, "ZCARD sw:%u", k);
		redisAppendCommand(c, "EXPIRE sw:%u 60", k);
		redisAppendCommand(c, "EXEC");
		for (i = 0; i < 6; i++) {
			if (redisGetReply(c, (void **)&rep) != REDIS_OK)
				return redis_ok(c, NULL, "sliding window");
			if (!redis_ok(c, rep, "sliding window"))
				return false;
		}
		return true;
	}
	return false;
}

struct redis_case {
	const char *name;
	int op;
	uint32_t keys;
};

static const struct redis_case redis_cases[] = {
    {"ping", R_PING, 1},
    {"gcra_evalsha", R_GCRA, 10000},
    {"sliding_window_pipeline", R_SLIDING, 1000},
    {"breaker_lua", R_BREAKER, 1000},
};

/* Aggregate decisions/s of nproc clients, each on its own connection. */
static double redis_throughput(int op, uint32_t keys, int nproc, const char *sha_g,
			       const char *sha_b)
{
	struct board {
		alignas(128) _Atomic int64_t t0;
		alignas(128) _Atomic uint32_t ready;
		struct {
			alignas(128) uint64_t ops;
		} w[MAX_PROCS];
	} * b;
	double secs = opt.smoke ? 0.1 : 1.0, total = 0;
	pid_t pids[MAX_PROCS];
	int i;

	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return -1;
	for (i = 0; i < nproc; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			redisContext *c = redisConnectUnix(opt.redis);
			uint64_t s = 99 + (uint64_t)i, seqno = (uint64_t)i << 40, ops = 0;
			int64_t t0, end;

			atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
			while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
				usleep(100);
			if (!c || c->err)
				_exit(1);
			end = t0 + (int64_t)(secs * NS_PER_S);
			while (mono_ns() < end) {
				if (!redis_decide(c, op, sha_g, sha_b,
						  (uint32_t)(splitmix(&s) % keys), &seqno))
					_exit(1);
				ops++;
			}
			b->w[i].ops = ops;
			redisFree(c);
			_exit(0);
		}
	}
	while (atomic_load_explicit(&b->ready, memory_order_acquire) < (uint32_t)nproc)
		usleep(1000);
	atomic_store_explicit(&b->t0, mono_ns() + 10 * NS_PER_MS, memory_order_release);
	for (i = 0; i < nproc; i++) {
		int st;

		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			total = -1e30;
		total += (double)b->w[i].ops;
	}
	munmap(b, sizeof(*b));
	return total < 0 ? -1 : total / secs;
}

static void run_redis(void)
{
	int n = opt.smoke ? 200 : 20000;
	char sha_g[64], sha_b[64];
	redisContext *c;
	uint64_t s = 5, seqno = 0;

	fprintf(stderr, "redis\n");
	c = redisConnectUnix(opt.redis);
	if (!c || c->err) {
		fprintf(stderr, "resil_bench: redis %s: %s\n", opt.redis,
			c ? c->errstr : "cannot allocate");
		if (c)
			redisFree(c);
		return;
	}
	if (redis_load(c, lua_gcra, sha_g, sizeof(sha_g)) < 0 ||
	    redis_load(c, lua_breaker, sha_b, sizeof(sha_b)) < 0)
		goto out;

	for (size_t k = 0; k < ARRAY_LEN(redis_cases); k++) {
		const struct redis_case *rc = &redis_cases[k];
		double *lat;
		long long m0, m1;
		char name[64];
		int i;

		if (!selected("redis", rc->name))
			continue;
		/* memory per key: fill every key once on an empty server */
		redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
		m0 = redis_used_memory(c);
		for (uint32_t key = 0; rc->op != R_PING && key < rc->keys; key++)
			if (!redis_decide(c, rc->op, sha_g, sha_b, key, &seqno))
				goto out;
		m1 = redis_used_memory(c);
		if (rc->op != R_PING && m0 > 0 && m1 > 0)
			emit("redis", rc->name, "bytes_per_key", (double)(m1 - m0) / rc->keys,
			     (double)(m1 - m0) / rc->keys, (double)(m1 - m0) / rc->keys, "B",
			     "one entry per key");

		lat = calloc(n, sizeof(*lat));
		for (int warm = 0; warm < 2 && lat; warm++) {
			pid_t spin = warm ? spinner_start() : -1;

			for (i = 0; i < n; i++) {
				int64_t t = mono_ns();

				if (!redis_decide(c, rc->op, sha_g, sha_b,
						  (uint32_t)(splitmix(&s) % rc->keys), &seqno))
					break;
				lat[i] = (double)(mono_ns() - t);
			}
			spinner_stop(spin);
			if (i == n)
				emit_latency("redis", rc->name, lat, n, warm);
		}
		free(lat);

		for (int np = 1; np <= 4; np *= 4) {
			double v = redis_throughput(rc->op, rc->keys, np, sha_g, sha_b);

			snprintf(name, sizeof(name), "%s.clients%d", rc->name, np);
			if (v > 0) {
				emit("redis", name, "decisions_per_s", v, v, v, "1/s", "");
				fprintf(stderr, "  redis          %-34s %.0f decisions/s\n", name,
					v);
			}
		}
	}
	/* a full window of 100 in seed 004's sorted set */
	if (!opt.smoke && selected("redis", "sliding_window_full")) {
		long long m0, m1;

		redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
		m0 = redis_used_memory(c);
		for (uint32_t key = 0; key < 100; key++)
			for (int j = 0; j < 100; j++)
				if (!redis_decide(c, R_SLIDING, sha_g, sha_b, key, &seqno))
					goto out;
		m1 = redis_used_memory(c);
		if (m0 > 0 && m1 > 0)
			emit("redis", "sliding_window_full", "bytes_per_key", (m1 - m0) / 100.0,
			     (m1 - m0) / 100.0, (m1 - m0) / 100.0, "B", "window of 100 entries");
	}
	redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
out:
	redisFree(c);
}
#else
static void run_redis(void)
{
	fprintf(stderr, "resil_bench: built without hiredis: no Redis figures\n");
}
#endif

/* ---------------------------------------------------------------------- */
/* Multi-process throughput: 1, 2, 4 processes on one policy or on one each */

struct mp_board {
	alignas(128) _Atomic int64_t t0;     /* parent writes (release) */
	alignas(128) _Atomic uint32_t ready; /* children add 1 */
	struct {
		alignas(128) uint64_t ops; /* child i writes, parent reads after waitpid */
		uint64_t admitted;
		int32_t done;
	} w[MAX_PROCS];
	struct {
		alignas(128) _Atomic uint64_t word; /* the fetch_add floor */
	} line[MAX_PROCS];
};

enum { MP_FAA_ONE_WORD, MP_FAA_OWN_LINE, MP_POLICY };

/* keys: a keyed policy, decided on uniform keys 0..keys-1 (each child its
 * own sequence) */
static void mp_child(struct mp_board *b, int i, int kind, resil_policy_t *p, uint32_t keys,
		     int64_t run_ns)
{
	_Atomic uint64_t *word = &b->line[kind == MP_FAA_ONE_WORD ? 0 : i].word;
	uint64_t ops = 0, adm = 0, s = 1000 + (uint64_t)i;
	int64_t t0, end;

	atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
	while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
		usleep(100);
	if (!p && kind == MP_POLICY)
		_exit(1);
	end = t0 + run_ns;
	while (mono_ns() < t0)
		;
	do {
		for (int k = 0; k < 256; k++) {
			if (kind != MP_POLICY) {
				atomic_fetch_add_explicit(word, 1, memory_order_relaxed);
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
	_exit(0);
}

/* Aggregate operations per second; pols[i] is child i's policy. */
static double mp_once(int kind, int nproc, resil_policy_t **pols, uint32_t keys, int64_t run_ns)
{
	struct mp_board *b;
	pid_t pids[MAX_PROCS];
	double total = 0;
	int i;

	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return -1;
	for (i = 0; i < nproc; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			mp_child(b, i, kind, pols[i], keys, run_ns);
	}
	while (atomic_load_explicit(&b->ready, memory_order_acquire) < (uint32_t)nproc)
		usleep(1000);
	atomic_store_explicit(&b->t0, mono_ns() + 5 * NS_PER_MS, memory_order_release);
	for (i = 0; i < nproc; i++) {
		int st;

		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !b->w[i].done)
			total = -1e30;
		total += (double)b->w[i].ops;
	}
	munmap(b, sizeof(*b));
	return total < 0 ? -1 : total / ((double)run_ns / NS_PER_S);
}

struct mp_case {
	const char *name;
	const char *base;
	const char *cfg; /* NULL: the fetch_add floor */
	uint32_t keys;	 /* keyed: decided on this many keys */
};

static const struct mp_case mp_cases[] = {
    {"fetch_add", NULL, NULL},
    {"breaker.count100", "mpb", "breaker.window = count:100"},
    {"bulkhead", "mpbulk", "bulkhead.max = 1000"},
    {"bulkhead25", "mpbulk25", "bulkhead.max = 25"},
    {"limit.admit", "mplim", "limit.rate = 1000000000/s; limit.burst = 1000000"},
    {"limit.keyed_1k", "mpkeyed",
     "limit.rate = 1000000000/s; limit.burst = 1000000; limit.keys = 1000", 1000},
};

static void run_mp(resil_t *r, const char *where)
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
				kind = c->cfg ? MP_POLICY : sep ? MP_FAA_OWN_LINE : MP_FAA_ONE_WORD;
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
					v[j] = mp_once(kind, np, pols, c->keys, run_ns);
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

static void run_fleet_rate(resil_t *r, const char *where)
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

#define RECLAIM_PERMITS 4

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

static void run_reclaim(resil_t *r)
{
	reclaim_case(r, "watched", 250 * 1000 * 1000);
	reclaim_case(r, "unwatched", 0);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: resil_bench [--smoke] [--callgrind] [--only GROUP/NAME-PART[,...]]\n"
		   "                   [--socket PATH] [--redis PATH] [--out FILE] [--runs N]\n"
		   "                   [--target-ms MS] [--cg-iters N]\n"
		   "       resil_bench --which-clock\n");
}

/* --which-clock: the decision clock this process chose (shm/clock.c), after
 * 20 ms of readings (calibration needs two anchors 1 ms apart; polled, not
 * slept: the readings are what calibrates). */
static int which_clock(void)
{
	int64_t t0 = mono_ns();
	const char *env = getenv("RESIL_CLOCK");

	while (mono_ns() - t0 < 20 * NS_PER_MS && !resil_clock_fast_tsc())
		sink += (uint64_t)resil_clock_fast();
	if (resil_clock_fast_tsc())
		printf("TSC, extrapolated to CLOCK_MONOTONIC (shm/clock.c)%s\n",
		       env && strcmp(env, "tsc") == 0
			   ? "; forced by RESIL_CLOCK=tsc: the kernel's clocksource is not the TSC"
			   : "");
	else
		printf("clock_gettime(CLOCK_MONOTONIC) (no usable TSC%s)\n",
		       env && strcmp(env, "monotonic") == 0 ? ": RESIL_CLOCK=monotonic"
							    : " on this host");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"smoke", no_argument, NULL, 'S'},		{"callgrind", no_argument, NULL, 'C'},
	    {"only", required_argument, NULL, 'o'},	{"socket", required_argument, NULL, 's'},
	    {"redis", required_argument, NULL, 'R'},	{"out", required_argument, NULL, 'O'},
	    {"runs", required_argument, NULL, 'n'},	{"target-ms", required_argument, NULL, 't'},
	    {"cg-iters", required_argument, NULL, 'i'}, {"which-clock", no_argument, NULL, 'W'},
	    {"help", no_argument, NULL, 'h'},		{0},
	};
	resil_t *emb = NULL, *dmn = NULL;
	const char *outpath = NULL;
	int c, ret;

	opt.out = stdout;
	while ((c = getopt_long(argc, argv, "SCo:s:R:O:n:t:i:Wh", opts, NULL)) != -1) {
		switch (c) {
		case 'W':
			return which_clock();
		case 'S':
			opt.smoke = true;
			break;
		case 'C':
			opt.callgrind = true;
			break;
		case 'o':
			opt.only = optarg;
			break;
		case 's':
			opt.socket = optarg;
			break;
		case 'R':
			opt.redis = optarg;
			break;
		case 'O':
			outpath = optarg;
			break;
		case 'n':
			opt.runs = atoi(optarg);
			break;
		case 't':
			opt.target_ms = atof(optarg);
			break;
		case 'i':
			opt.cg_iters = strtoull(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (opt.smoke) {
		opt.runs = 1;
		opt.target_ms = 1;
		opt.cg_iters = 1000;
		opt.mp_secs = 0.02;
		opt.fleet_secs = 0.1;
	}
	if (opt.runs < 1 || opt.runs > MAX_RUNS)
		opt.runs = opt.runs < 1 ? 1 : MAX_RUNS;
	if (opt.callgrind && !RUNNING_ON_VALGRIND)
		fprintf(stderr, "resil_bench: --callgrind outside valgrind: nothing is counted\n");
	if (outpath) {
		opt.out = fopen(outpath, "w");
		if (!opt.out) {
			fprintf(stderr, "resil_bench: %s: %s\n", outpath, strerror(errno));
			return 1;
		}
	}
	fprintf(opt.out, "#group\tname\tmetric\tmedian\tmin\tmax\tunit\tnote\n");
	if (floors_init() < 0)
		return 1;
	batch_begin();
	run_floors();

	/* the fleet's segments: resild's when it runs, else embedded */
	if (opt.socket && !opt.callgrind) {
		ret = resil_open(&dmn, opt.socket);
		if (ret < 0) {
			fprintf(stderr, "resil_bench: resil_open %s: %s\n", opt.socket,
				strerror(-ret));
			dmn = NULL;
		}
	}
	ret = resil_open_embedded(&emb, NULL);
	if (ret < 0) {
		fprintf(stderr, "resil_bench: resil_open_embedded: %s\n", strerror(-ret));
		emb = NULL;
	}
	{
		static struct simple_group gd, ge;
		const char *eg = dmn ? "resil-process" : "resil";

		if (dmn)
			run_simple(dmn, "resil", &gd);
		if (emb)
			run_simple(emb, eg, &ge);
		fprintf(stderr, "interleaved runs of the cases above\n");
		batch_flush();
		release_simple(&gd);
		release_simple(&ge);
		if (dmn)
			run_keyed(dmn, "resil", true);
		if (emb)
			run_keyed(emb, eg, !dmn || !opt.smoke);
	}

	if (!opt.callgrind) {
		resil_t *fleet = dmn ? dmn : emb;
		const char *where = dmn ? "resild segments" : "embedded segments";

		if (dmn) {
			run_socket(dmn);
			run_reclaim(dmn);
		}
		if (opt.redis)
			run_redis();
		if (fleet) {
			run_mp(fleet, where);
			run_fleet_rate(fleet, where);
		}
	}
	if (dmn) {
		drop_defined(dmn);
		resil_close(dmn);
	}
	resil_close(emb);
	if (opt.out != stdout)
		fclose(opt.out);
	return 0;
}

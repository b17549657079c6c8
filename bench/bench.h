/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what the files of resil_bench share: the options, the
 * harness (measure, emit, the batch of rows), the policies the run
 * defined, the types of the cases and the entry of each scenario.
 * resil_bench.c holds the harness and main; each scenario its own file
 * (floors.c, hot.c, socket.c, redis.c, mp.c, fleet.c, reclaim.c). The
 * method, the output and the shared memory of the whole program are
 * resil_bench.c's top comment.
 */
#ifndef RESIL_BENCH_H
#define RESIL_BENCH_H

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

struct bench_opts {
	bool smoke;
	bool callgrind;
	bool list;	  /* --list: name the cases selected, run none */
	const char *only; /* run only cases whose "group/name" contains this */
	const char *socket;
	const char *redis;
	int runs;
	double target_ms;
	uint64_t cg_iters;
	double mp_secs;
	double fleet_secs;
	FILE *out;
};
extern struct bench_opts opt;

/* Policies this run defined in resild, deleted at the end. */
struct bench_defined {
	resil_t *r;
	char name[64];
};
extern struct bench_defined defined[256];

extern volatile uint64_t sink;
extern uint64_t admits;
extern int ndefined;

/* the resil hot paths' cases (hot.c) */
#define N_SIMPLE_CASES 25

typedef void (*loop_fn)(void *ctx, uint64_t n);

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
 * mapping lives for the keyed case's runs (keyed_case; the 1k table's, which
 * an L1 holds, until release_simple).
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

struct pctx {
	resil_policy_t *p;
	const uint32_t *seq; /* keyed: index sequence, SEQ_LEN long */
	uint64_t pos;
};

struct simple_case {
	const char *name;
	const char *base; /* policy name part */
	const char *cfg;
	int prep; /* PREP_* */
	loop_fn fn;
};

/* the permits of every PREP_HOLD_ALL case of a group (bulkhead.max 25, 1000 and 2000) */
#define HOLD_MAX 3136

/* the keyed cases queued with the simple ones: the rejection, 1k keys and
 * 1k keys of global scope, each uniform and Zipf */
#define KEYED_QUEUED   5
#define KEYED_NAME_MAX 48

/* The simple cases of one group (and its keyed cases on 1k keys):
 * measured (or queued into the batch), their contexts, sequences and held
 * permits kept until release_simple(). */
struct simple_group {
	struct pctx x[N_SIMPLE_CASES];
	struct pctx keyed[KEYED_QUEUED];
	char keyed_name[KEYED_QUEUED][KEYED_NAME_MAX];
	int nkeyed;
	struct mem_floor floor; /* the 1k table's */
	resil_policy_t *held_p[HOLD_MAX];
	resil_permit_t held[HOLD_MAX];
	int nheld;
};

struct redis_case {
	const char *name;
	int op;
	uint32_t keys;
};

struct mp_board {
	alignas(128) _Atomic int64_t t0;     /* parent writes (release) */
	alignas(128) _Atomic uint32_t ready; /* children add 1 */
	struct {
		alignas(128) uint64_t ops; /* child i writes, parent reads after waitpid */
		uint64_t admitted;
		int32_t done;
	} w[MAX_PROCS];
	struct {
		alignas(128) _Atomic uint64_t word; /* the floors' word */
	} line[MAX_PROCS];
};

struct mp_case {
	const char *name;
	const char *base;
	const char *cfg; /* NULL: a floor, by kind */
	uint32_t keys;	 /* keyed: decided on this many keys */
	int kind;	 /* a floor's: MP_FAA or MP_CLOCK_CAS (mp.c) */
	bool threads;	 /* threads of this process, not forked processes */
};

#define RECLAIM_PERMITS 4

/* Key i of a keyed case: a bijection of the 32-bit integers (an odd
 * multiplier), so keys are distinct and scattered, and computed where it
 * is used: the loop reads no key array (a real caller has its key in the
 * request it is deciding, in cache), so a case's figure is the library's
 * own memory traffic. */
static inline uint32_t key_of(uint32_t i)
{
	return i * 2654435761u;
}

__attribute__((noinline)) int dep_ok(uint64_t i);
int mem_floor_init(struct mem_floor *m);
int floors_init(void);
void mem_floor_fini(struct mem_floor *m);
void run_floors(void);
void measure_mem_floor(struct mem_floor *m);
resil_policy_t *mkpol(resil_t *r, const char *base, const char *cfg);
void drop_defined(resil_t *r);
uint64_t splitmix(uint64_t *s);
void run_simple(resil_t *r, const char *group, bool keyed, struct simple_group *g);
void release_simple(struct simple_group *g);
void run_keyed(resil_t *r, const char *group);
void run_socket(resil_t *r);
void run_redis(void);
void run_mp(resil_t *r, const char *where);
void run_fleet_rate(resil_t *r, const char *where);
void run_reclaim(resil_t *r);
int64_t mono_ns(void);
void sleep_ns(int64_t ns);
int cmp_double(const void *a, const void *b);
void emit(const char *group, const char *name, const char *metric, double med, double mn, double mx,
	  const char *unit, const char *note);
bool selected(const char *group, const char *name);
void batch_begin(void);
void batch_flush(void);
void measure(const char *group, const char *name, loop_fn fn, void *ctx);
pid_t spinner_start(void);
void spinner_stop(pid_t pid);
void emit_latency(const char *group, const char *name, double *lat, int n, bool warm);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * common.h - types, atomics and small helpers shared by every shm module.
 *
 * Everything in shm/ is plain C over a memory region plus a clock: no
 * sockets, no daemon, no allocation. The daemon and libresil both compile
 * these files; the unit tests run them on an anonymous region with a
 * manual clock.
 *
 * Only lock-free 32- and 64-bit atomics are used (no 16-byte CAS), always
 * through the *_explicit forms, so every access states its memory order.
 */
#ifndef RESIL_SHM_COMMON_H
#define RESIL_SHM_COMMON_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#if ATOMIC_LLONG_LOCK_FREE != 2 || ATOMIC_INT_LOCK_FREE != 2
#error "resil needs lock-free 32- and 64-bit atomics"
#endif

/* One cache line. Hot words written by different parties sit on different
 * lines; 128 keeps them apart from the adjacent-line prefetcher too. */
#define RESIL_LINE      64
#define RESIL_HOT_ALIGN 128

typedef _Atomic uint32_t ra32;
typedef _Atomic uint64_t ra64;
typedef _Atomic int64_t rai64;

/* 64-bit fields are aligned to 8 even on i386, where the ABI aligns them
 * to 4: the layout is shared by processes of different builds. */
#define RESIL_A8 alignas(8)

#define RESIL_STATIC_ASSERT(c, m) _Static_assert(c, m)

#define ld_relaxed(p)     atomic_load_explicit((p), memory_order_relaxed)
#define ld_acquire(p)     atomic_load_explicit((p), memory_order_acquire)
#define st_relaxed(p, v)  atomic_store_explicit((p), (v), memory_order_relaxed)
#define st_release(p, v)  atomic_store_explicit((p), (v), memory_order_release)
#define faa_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define faa_acq_rel(p, v) atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
#define cas_acq_rel(p, e, v)                                                                       \
	atomic_compare_exchange_strong_explicit((p), (e), (v), memory_order_acq_rel,               \
						memory_order_acquire)
#define cas_relaxed(p, e, v)                                                                       \
	atomic_compare_exchange_strong_explicit((p), (e), (v), memory_order_relaxed,               \
						memory_order_relaxed)

/* Fetch p's line for writing before a load that a CAS on it follows: a
 * word other processes CAS too comes over once, owned, instead of shared
 * by the load and then owned by the CAS (two transfers between CPUs).
 * x86's PREFETCHW (a NOP on CPUs without it); elsewhere the compiler's
 * write prefetch. A hint: it orders and changes nothing. */
static inline void resil_prefetch_write(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p, 1, 3);
#endif
}

#define RESIL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define RESIL_COLD	  __attribute__((noinline, cold)) /* kept out of inlined hot paths */
#define RESIL_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define RESIL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define RESIL_NS_PER_US 1000LL
#define RESIL_NS_PER_MS 1000000LL
#define RESIL_NS_PER_S  1000000000LL

static inline uint64_t resil_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static inline int64_t resil_max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static inline int64_t resil_min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}
/* a + b, saturating at INT64_MIN and INT64_MAX: time arithmetic on values
 * a client can reach (a clock of its own, a word of the state segment). */
static inline int64_t resil_add_sat(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* The clock every decision uses: CLOCK_MONOTONIC nanoseconds, one time base
 * for the host. A process may replace it (embedded mode, tests). */
typedef int64_t (*resil_clock_fn)(void *ctx);
struct resil_clock {
	resil_clock_fn fn; /* NULL: CLOCK_MONOTONIC */
	void *ctx;
};

int64_t resil_clock_monotonic(void *ctx);
int64_t resil_clock_coarse(void *ctx);

/* clock_gettime in line: the vDSO call and the conversion, nothing else
 * (the decision clock's fallback, and the coarse reading). */
static inline int64_t resil_clock_kernel_id(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t resil_clock_kernel(void)
{
	return resil_clock_kernel_id(CLOCK_MONOTONIC);
}

/* CLOCK_MONOTONIC extrapolated from the TSC where the host allows it
 * (docs/internals/clock.md: eligibility, error bound, RESIL_CLOCK), else
 * clock_gettime. It may step back at a re-anchor by its error bound:
 * readers clamp. resil_clock_fast_tsc(): the TSC is in use right now. */
bool resil_clock_fast_tsc(void);
#if defined(__x86_64__)
/* clock.c: the calibration (a seqlock over an anchor and a rate) and its
 * cold path; the reader below is inlined into every decision. */
struct resil_tsc_cal {
	ra32 seq;    /* seqlock: odd while a writer stores the words below */
	ra32 usable; /* 1: eligible; 0: clock_gettime (constructor, once) */
	ra64 tsc0;   /* anchor TSC; 0: no anchor yet */
	ra64 ns0;    /* CLOCK_MONOTONIC at tsc0 */
	ra64 mult;   /* ns per tick, 32.32; 0: not calibrated */
	ra64 limit;  /* ticks after tsc0 that extrapolate; 0: not calibrated */
};
extern struct resil_tsc_cal resil_tsc_cal;
int64_t resil_tsc_anchor(void);

static inline int64_t resil_clock_tsc(void)
{
	uint32_t s = ld_acquire(&resil_tsc_cal.seq);
	uint64_t tsc0 = ld_relaxed(&resil_tsc_cal.tsc0);
	uint64_t ns0 = ld_relaxed(&resil_tsc_cal.ns0);
	uint64_t mult = ld_relaxed(&resil_tsc_cal.mult);
	uint64_t limit = ld_relaxed(&resil_tsc_cal.limit);
	uint64_t d = __builtin_ia32_rdtsc() - tsc0;

	atomic_thread_fence(memory_order_acquire);
	if (__builtin_expect(d < limit && ld_relaxed(&resil_tsc_cal.seq) == s && !(s & 1), 1))
		return (int64_t)(ns0 + ((d * mult) >> 32));
	return resil_tsc_anchor();
}

static inline int64_t resil_clock_fast(void)
{
	/* decided once per process (clock.c's constructor): a host without a
	 * usable TSC reads the kernel's clock and nothing else */
	if (!ld_relaxed(&resil_tsc_cal.usable))
		return resil_clock_kernel();
	return resil_clock_tsc();
}
#else
static inline int64_t resil_clock_fast(void)
{
	return resil_clock_kernel();
}
#endif
/* Resolution of CLOCK_MONOTONIC_COARSE (a kernel tick), read once. */
int64_t resil_clock_coarse_resolution_ns(void);

static inline int64_t resil_clock_now(const struct resil_clock *c)
{
	return c->fn ? c->fn(c->ctx) : resil_clock_fast();
}

/* A coarse reading (a kernel tick's resolution, same time base):
 * for decisions whose precision allows it. A manual clock is exact. */
static inline int64_t resil_clock_now_coarse(const struct resil_clock *c)
{
	return c->fn ? c->fn(c->ctx) : resil_clock_kernel_id(CLOCK_MONOTONIC_COARSE);
}

/* xoshiro-style splitmix64 step: a fast per-thread generator. */
static inline uint64_t resil_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The random source a decision uses (shedding, jitter). NULL fn: the
 * process's per-thread generator. */
struct resil_random {
	uint64_t (*fn)(void *ctx);
	void *ctx;
};

uint64_t resil_random_thread(void);
/* Bump in a forked child: every thread of it reseeds on its next draw. */
extern ra32 resil_random_epoch;

static inline uint64_t resil_random_next(const struct resil_random *r)
{
	return r->fn ? r->fn(r->ctx) : resil_random_thread();
}

uint64_t resil_hash64(const void *data, size_t len, uint64_t k0, uint64_t k1);

/* /proc/PID/stat (pid 0: /proc/self/stat): field 22, the start time in
 * clock ticks since boot, and field 4, the parent's pid, when ppid is not
 * NULL. 0 or -errno (-ESRCH: no such process, -EIO: a line not of that
 * form). The one parser of it: a client row's identity and the daemon's
 * check of it. */
int resil_proc_stat(uint32_t pid, uint64_t *start_time, uint32_t *ppid);
/* Words for an error: formats into err (when err and errlen are given) and
 * returns r, so a caller reports and fails in one step. */
int resil_errf(char *err, size_t errlen, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif

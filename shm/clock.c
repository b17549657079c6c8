/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the decision clock: CLOCK_MONOTONIC extrapolated from the TSC.
 *
 * resil_clock_fast() returns CLOCK_MONOTONIC nanoseconds computed from one
 * rdtsc and four words of a process-private calibration:
 *   ns0 + (rdtsc - tsc0) * mult >> 32
 * (tsc0, ns0) is an anchor (a TSC value and a clock_gettime reading taken
 * between two TSC reads around it); mult is ns per tick in 32.32 fixed
 * point. A reading at most `limit` ticks after the anchor is extrapolated;
 * a later one (or one before tsc0) takes a new anchor first (the cold
 * path, resil_tsc_anchor). Where the TSC is not usable (decided once by
 * the constructor: clocksource, CPU flags, RESIL_CLOCK) every reading is
 * clock_gettime in line. resil_clock_monotonic() stays the plain
 * clock_gettime: futex deadlines and sleeps are kernel time. The design
 * (eligibility, anchors, the extrapolation span, the error bound, overflow)
 * is docs/internals/clock.md.
 *
 * Calibration words (struct resil_tsc_cal in common.h, process-private,
 *   one 128-byte line of its own). A seqlock, seq, over tsc0, ns0, mult and
 *   limit:
 *   - writer (resil_tsc_anchor, any thread): CAS seq even -> odd (acq_rel: the
 *     acquire sees the previous writer's words; a failed CAS means another
 *     thread is anchoring, and the reading it took is returned), release
 *     fence (orders the odd seq before the word stores: pairs with the
 *     readers' acquire fence), relaxed stores of the words, release store
 *     of seq + 2 (publishes the words: pairs with the readers' acquire
 *     load of seq).
 *   - reader (resil_clock_fast, inlined from common.h): s = acquire load of seq, relaxed loads of
 *     the words, rdtsc (no fence: nanosecond granularity, and a TSC read
 *     early falls before tsc0 and goes cold), acquire fence, relaxed load
 *     of seq: the words are a consistent set if s is even and seq did not
 *     move. limit == 0 means not calibrated (or not eligible), so one
 *     unsigned compare, rdtsc - tsc0 < limit, rejects all of: stale span,
 *     TSC behind the anchor, no calibration.
 *   - usable: stored once by the constructor (before main, one thread),
 *     loaded relaxed by every reading before anything else (it publishes
 *     nothing: the seqlock above orders the words).
 *   Nobody spins: a reader that meets a writer (or a signal handler that
 *   interrupts one on its own thread) takes a clock_gettime reading. A
 *   fork while another thread holds seq odd would leave the child's clock
 *   cold for ever: the atfork child handler (the child has one thread)
 *   drops the calibration and releases seq. Process-private: no crash
 *   window outlives the process.
 *
 * Error: bounded against CLOCK_MONOTONIC (docs/internals/clock.md, "Error
 * bound"; readers and tests assume 1 ms; tests/unit_clock.c measures it);
 * at a re-anchor a reading may step back by up to that error, and readers
 * tolerate it (durations clamped at 0, GCRA takes max(tat, now),
 * comparisons by difference).
 *
 * No syscall, no allocation, no lock on the hot path; the cold path adds
 * one vDSO clock_gettime (no syscall with the TSC clocksource).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#if defined(__x86_64__)
#include <x86intrin.h>

RESIL_STATIC_ASSERT(sizeof(struct resil_tsc_cal) <= RESIL_HOT_ALIGN, "tsc_cal fits one line");

#define ANCHOR_MAX_TICKS 1024ULL		 /* 2^10: more means interrupted */
#define CAL_MIN_NS	 (1 * RESIL_NS_PER_MS)	 /* shortest calibration interval */
#define SPAN_MAX_NS	 (100 * RESIL_NS_PER_MS) /* longest extrapolation */
#define SPAN_FACTOR	 16			 /* span <= 16 x calibration interval */
#define MULT_MIN	 ((1ULL << 32) / 10)	 /* 0.1 ns per tick, 10 GHz */
#define MULT_MAX	 (10ULL << 32)		 /* 10 ns per tick, 100 MHz */

/* The calibration words (common.h: the reader is inlined there). */
alignas(RESIL_HOT_ALIGN) struct resil_tsc_cal resil_tsc_cal;
#define tc resil_tsc_cal

/* A TSC read that does not start before the instructions ahead of it
 * complete: an anchor's bracket must hold the vDSO's own read. */
static inline uint64_t tsc_ordered(void)
{
	_mm_lfence();
	return __rdtsc();
}

RESIL_COLD int64_t resil_tsc_anchor(void)
{
	uint64_t a, b, mid, tsc0, mult, limit, span;
	unsigned __int128 q;
	int64_t ns, ns0, dn, reach;
	uint32_t s;

	if (!ld_relaxed(&tc.usable))
		return resil_clock_monotonic(NULL);
	a = tsc_ordered();
	ns = resil_clock_monotonic(NULL);
	b = tsc_ordered();
	if (b - a > ANCHOR_MAX_TICKS)
		return ns;
	/* Not calibrated and too early to calibrate: keep the first anchor,
	 * without taking the lock (a hint: the locked code decides). */
	if (ld_relaxed(&tc.limit) == 0 && ld_relaxed(&tc.tsc0) != 0 &&
	    ns - (int64_t)ld_relaxed(&tc.ns0) < CAL_MIN_NS)
		return ns;
	mid = a + (b - a) / 2;
	s = ld_relaxed(&tc.seq);
	if ((s & 1) || !cas_acq_rel(&tc.seq, &s, s + 1))
		return ns;
	atomic_thread_fence(memory_order_release);
	tsc0 = ld_relaxed(&tc.tsc0);
	ns0 = (int64_t)ld_relaxed(&tc.ns0);
	limit = ld_relaxed(&tc.limit);
	span = mid - tsc0;
	dn = ns - ns0;
	/* Another thread anchored since our reader looked; or too soon after
	 * the previous anchor (first anchor kept; or a TSC read a little
	 * behind tsc0): nothing to change. */
	if (tsc0 && ((limit && span < limit) || dn < CAL_MIN_NS))
		goto out;
	mult = 0;
	limit = 0;
	if (tsc0 && (int64_t)span > 0) {
		q = ((unsigned __int128)dn << 32) / span;
		if (q >= MULT_MIN && q <= MULT_MAX) {
			mult = (uint64_t)q;
			reach =
			    resil_min64(SPAN_MAX_NS, SPAN_FACTOR * resil_min64(dn, SPAN_MAX_NS));
			limit = ((uint64_t)reach << 32) / mult;
		}
	}
	/* mult out of range (a TSC that jumped, a stalled clock): start over
	 * from this anchor, calibrated again 1 ms later. */
	st_relaxed(&tc.tsc0, mid);
	st_relaxed(&tc.ns0, (uint64_t)ns);
	st_relaxed(&tc.mult, mult);
	st_relaxed(&tc.limit, limit);
out:
	st_release(&tc.seq, s + 2);
	return ns;
}

bool resil_clock_fast_tsc(void)
{
	uint32_t s = ld_acquire(&tc.seq);
	uint64_t mult = ld_relaxed(&tc.mult);

	atomic_thread_fence(memory_order_acquire);
	return ld_relaxed(&tc.usable) && mult != 0 && ld_relaxed(&tc.seq) == s && !(s & 1);
}

/* The child of a fork has one thread: a seq left odd by another thread
 * of the parent would never be released. */
static void tsc_atfork_child(void)
{
	uint32_t s = ld_relaxed(&tc.seq);

	if (!(s & 1))
		return;
	st_relaxed(&tc.tsc0, 0);
	st_relaxed(&tc.ns0, 0);
	st_relaxed(&tc.mult, 0);
	st_relaxed(&tc.limit, 0);
	st_release(&tc.seq, s + 1);
}

/* Does the first line of path read exactly want? */
static bool file_is(const char *path, const char *want)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	bool ok = false;

	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f)) {
		buf[strcspn(buf, "\n")] = 0;
		ok = strcmp(buf, want) == 0;
	}
	fclose(f);
	return ok;
}

static bool has_word(const char *line, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = strstr(line, w); p; p = strstr(p + 1, w)) {
		if ((p == line || p[-1] == ' ' || p[-1] == '\t') &&
		    (p[n] == ' ' || p[n] == '\n' || p[n] == 0))
			return true;
	}
	return false;
}

/* The first "flags" line of /proc/cpuinfo has constant_tsc and nonstop_tsc. */
static bool cpu_tsc_invariant(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	bool ok = false;

	if (!f)
		return false;
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		ok = has_word(line, "constant_tsc") && has_word(line, "nonstop_tsc");
		break;
	}
	free(line);
	fclose(f);
	return ok;
}

static __attribute__((constructor)) void tsc_init(void)
{
	const char *e = getenv("RESIL_CLOCK");

	if (e && strcmp(e, "monotonic") == 0)
		return;
	/* RESIL_CLOCK=tsc: the TSC even where the kernel keeps another
	 * clocksource (kvm-clock with tsc=unstable), if the CPU says it is
	 * invariant: what a TSC host's readings cost, measured here */
	if (!(e && strcmp(e, "tsc") == 0) &&
	    !file_is("/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc"))
		return;
	if (!cpu_tsc_invariant())
		return;
	if (pthread_atfork(NULL, NULL, tsc_atfork_child) != 0)
		return;
	st_relaxed(&tc.usable, 1);
	resil_tsc_anchor();
}

#else /* not x86_64: the plain clock */

bool resil_clock_fast_tsc(void)
{
	return false;
}

#endif

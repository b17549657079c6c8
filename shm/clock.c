/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the decision clock: CLOCK_MONOTONIC extrapolated from the TSC.
 *
 * What. resil_clock_fast() returns CLOCK_MONOTONIC nanoseconds computed
 *   from one rdtsc and four words of a process-private calibration:
 *     ns0 + (rdtsc - tsc0) * mult >> 32
 *   (tsc0, ns0) is an anchor: a TSC value and the CLOCK_MONOTONIC reading
 *   taken between two TSC reads around it; mult is nanoseconds per tick in
 *   32.32 fixed point, measured between the previous anchor and this one.
 *   A reading at most `limit` ticks after the anchor is extrapolated; a
 *   later one (or one before tsc0) takes a new anchor first.
 *
 * Why. Every decision that needs the time (GCRA, the breaker's time window
 *   and slow calls, histograms) reads this clock. clock_gettime through
 *   the vDSO costs about twice a bare rdtsc (floor/clock_monotonic against
 *   floor/clock_fast), and the GCRA admit is one clock read and one CAS:
 *   the read must get cheaper.
 *   resil_clock_monotonic() stays the plain clock_gettime: futex deadlines
 *   and sleeps are kernel time and use it.
 *   Per process, not a calibration published by the daemon: each process
 *   anchors to the kernel's CLOCK_MONOTONIC itself at least every 100 ms
 *   it reads the clock, so any two agree within twice the error bound
 *   below, with no shared word to trust, and whether the daemon runs or
 *   not.
 *
 * Eligibility, decided once by the constructor: x86_64; the kernel's
 *   clocksource is the TSC (so CLOCK_MONOTONIC itself is a linear function
 *   of the TSC, which is synchronized across CPUs, or the kernel would not
 *   use it); /proc/cpuinfo has constant_tsc and nonstop_tsc (the rate does
 *   not follow the CPU frequency nor stop in idle states); and the
 *   environment variable RESIL_CLOCK is not "monotonic" (the escape hatch:
 *   RESIL_CLOCK=monotonic makes every reading a clock_gettime). Otherwise,
 *   and before the constructor ran, resil_clock_fast() is clock_gettime.
 *   RESIL_CLOCK=tsc waives the clocksource test (the CPU flags still
 *   hold): on a VM whose kernel distrusts the TSC (kvm-clock,
 *   tsc=unstable) it measures what a TSC host's readings cost. Not for
 *   production there: the kernel had its reasons, and the per-process
 *   anchors bound the error only within one process.
 *
 * The fallback. Where the TSC is not usable (kvm-clock with tsc=unstable,
 *   Xen, Hyper-V, RESIL_CLOCK=monotonic) a reading must cost no more than
 *   the clock_gettime it falls back to. The choice is made once, by the
 *   constructor, into `usable`, and every reading tests that word first:
 *   0 calls clock_gettime in line (resil_clock_kernel: the vDSO call and
 *   the conversion to ns), with no TSC read, no seqlock and no call into
 *   this file. What it adds to a bare clock_gettime is one load of a line
 *   nobody writes after the constructor and one predicted branch.
 *
 * Anchors (resil_tsc_anchor, the cold path): a = rdtsc, clock_gettime, b =
 *   rdtsc, both TSC reads behind an lfence so they bracket the TSC read
 *   inside the vDSO. When b - a > ANCHOR_MAX_TICKS (2^10; 74-90 ticks is
 *   usual here, 1 in 2000 exceeds it: the thread was interrupted in
 *   between) the reading is returned and nothing is anchored; the next
 *   reading tries again. The anchor is mid = a + (b - a) / 2, off the
 *   kernel's own TSC sample by at most (b - a) / 2 ticks. Calibration
 *   needs an earlier anchor at least CAL_MIN_NS (1 ms) before: until then
 *   the first anchor is kept (moving it at every reading would never leave
 *   1 ms between two) and readings are clock_gettime.
 *
 * Extrapolation span. limit = the ticks of min(100 ms, 16 x the interval
 *   that measured mult). The factor bounds how far an anchor's jitter is
 *   magnified: the first calibration (an interval of ~1 ms) is used for
 *   16 ms, the next (>= 16 ms) for 100 ms, and every later interval is
 *   >= 100 ms (a re-anchor happens only when the span ran out).
 *
 * Error bound. Against CLOCK_MONOTONIC, a reading S ticks after its
 *   anchor is off by at most
 *     J/2 + S * J / I  ticks,  plus  S * dR
 *   where J = ANCHOR_MAX_TICKS, I = the interval that measured mult
 *   (S <= 16 I, and S <= I once I >= 100 ms), and dR the change of the
 *   kernel's CLOCK_MONOTONIC rate against the TSC since that interval. The
 *   first term is <= 16.5 J ticks for the first 17 ms of a process, <=
 *   6.75 J up to ~120 ms, then <= 1.5 J: a few microseconds at GHz rates
 *   (BENCHMARKS.md, "Figures behind the design comments", converts them
 *   for one machine; 0.17 ms at the slowest rate accepted, 10 ns per
 *   tick, for the first 17 ms). The second is 0 without NTP (here); NTP
 *   frequency updates move dR by a few ppm (1 ppm = 0.1 us over 100 ms),
 *   and the kernel bounds the frequency at +-500 ppm (a full swing: 100 us
 *   over 100 ms); a fast slew (ADJ_TICK, or the kernel PLL with a large
 *   offset, up to 10 %) exceeds the bound for at most one span. Nothing
 *   accumulates: every anchor (<= 100 ms apart while the clock is read)
 *   resets the offset to the kernel's. The tolerance readers and tests
 *   assume is 1 ms. The error measured (tests/unit_clock.c prints it:
 *   readings across re-anchors and from 4 threads, each against a pair of
 *   clock_gettime readings around it; BENCHMARKS.md, "Figures behind the
 *   design comments", has a run) is a fraction of a microsecond, growing
 *   from an anchor to the end of its span.
 *   At a re-anchor the reading may step back by up to that error; readers
 *   tolerate it (a duration now - start is clamped at 0, GCRA takes
 *   max(tat, now), comparisons are by difference). Two processes each
 *   within the bound of CLOCK_MONOTONIC agree within twice the bound, so a
 *   GCRA TAT written by one and read by another is off by no more.
 *
 * Calibration words (struct resil_tsc_cal in common.h, process-private,
 *   one 128-byte line
 *   of its own). A seqlock, seq, over tsc0, ns0, mult and limit:
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
 * Overflow. (rdtsc - tsc0) * mult < limit * mult + mult <= 100 ms << 32 +
 *   mult < 2^59: the hot path multiplies in 64 bits. The calibration
 *   divides in 128 bits (an interval of seconds << 32 does not fit 64).
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

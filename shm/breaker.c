/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - a lock-free circuit breaker in shared memory.
 *
 * Size: above 900 lines on purpose: one state machine. The packed
 * words' accessors, the windows, the transitions and the probe decisions
 * are static inline helpers that acquire, release and the lean path inline
 * within this translation unit; the configuration's keys and words are
 * already breaker_conf.c.
 *
 * What: one breaker shared by every process of the fleet. CLOSED counts
 * outcomes in a window (last N calls, last T in B buckets, or N consecutive
 * failures) and opens when a rate reaches its threshold; OPEN rejects until
 * its wait is over; the first acquire after that (or the daemon's tick)
 * moves it to HALF_OPEN, where a limited number of probes decide between
 * OPEN again and a fresh CLOSED (Resilience4j's rule). Forced states
 * (DISABLED, FORCED_OPEN, METRICS_ONLY) are more codes of the same word.
 *
 * The state word (struct resil_breaker_state in breaker.h) packs
 * state:3 | streak:5 | gen:20 | since_ms:36. Every transition is one CAS of
 * that word, so it is the linearization point of the transition; exactly
 * one party wins it and that party alone pushes the event. gen grows on
 * every transition: a permit carries the gen it was granted in, and a
 * result of an older gen neither enters the fresh window nor decides the
 * probes. since_ms (ms after base_ns, rounded up) is the time the state
 * was entered, so OPEN's opened time is published by the same CAS as the
 * state itself (no second word a reader could see half-written); the
 * transition out of OPEN happens at most 1 ms after opened + wait. streak
 * counts repeated opens for the growing wait.
 *
 * Words, writers, readers, orders:
 *   word      CAS (acq_rel) by whoever makes a transition (any client, the
 *             daemon's maintain, force); loaded (acquire) by every call.
 *             The release of the CAS publishes a window reset done before
 *             it (HALF_OPEN -> CLOSED, force CLOSED).
 *   seq       count window: fetch_add (relaxed) by recorders, of 1 to 8
 *             numbers at once (seq_take): the slots the records take.
 *             Only the index matters, no data hangs on it.
 *   slots[]   exchange (relaxed) by recorders; the value returned says
 *             which counters to adjust. Relaxed: the counters are
 *             statistics, a decision never waits on one slot.
 *   counters  fetch_add (relaxed) of a packed signed delta, only when the
 *             outcome in a slot changed (1 atomic for 3 counters).
 *             Transiently a field can be one below its slots' histogram
 *             per in-flight record (or -1); readers decode balanced and
 *             clamp at 0. At quiescence counters == histogram of slots.
 *   consec    CAS (acq_rel) by a failing recorder (+1), by a succeeding
 *             one only when non-zero (reset); tagged with gen so a fresh
 *             window needs no reset.
 *   buckets   time window: epoch CAS (acq_rel) by the first recorder of a
 *             new span, which then stores its counts to 0; calls (and
 *             failures/slow calls, when there are some) fetch_add by
 *             recorders: one atomic for a fast success. Bounded error:
 *             increments racing the rotation (between the winner's CAS
 *             and its stores) are lost, at most the records in flight at
 *             the bucket boundary; a record whose clock reading is older
 *             than the bucket's epoch is dropped.
 *   probes[]  owner CAS by a prober (claim, any free slot or one left by
 *             an older gen), CAS back to 0 by the same prober (release)
 *             or by reclaim (dead client); claimed_at stored by the owner
 *             after its claim, INT64_MAX while free.
 *   ho        CAS by probers adding a result; tagged with gen, so entering
 *             HALF_OPEN resets it implicitly.
 *   moves[]   fetch_add (relaxed) by the winner of a transition's CAS, after
 *             it; read (relaxed) by metrics. Statistics: nothing is ordered
 *             by them, a scrape may see the new state before its count.
 *   base_ns, offsets, sizes: plain, written once by state_init (or
 *             carry) before the record's slot word publishes the block
 *             (release, seg.c). Offsets and sizes are read by nobody (the
 *             configuration gives them: win_off_of, seq_slot); base_ns
 *             is read by everyone, with arithmetic that no value of it
 *             can overflow (rel_ns); the daemon's tick repairs them all
 *             (state_repair).
 * Lines (breaker.h): the word with the immutable fields (read by every
 * call, written on transitions only), seq (every count record), counters
 * and consec (on outcome changes, failures), ho (HALF_OPEN only), then the
 * probe slots and the window. The daemon writes these words only through
 * the same operations as a client (maintain, reclaim, force), rarely.
 *
 * Hot path (CLOSED, count window, a success, no slow-call threshold):
 * check = one acquire load of the word; release = one load, a record
 * number (seq_take: a fetch_add of seq every k records, else a thread-local
 * increment), the slot (seq % N, N from the configuration) exchanged
 * unless it already says success, and the
 * counters only when the outcome differs from the overwritten one; no
 * threshold evaluation when a success overwrote a present outcome (the
 * window is warm and neither a rate nor the call count rose). The
 * evaluation runs on a failure, a slow call, and while the window fills,
 * so the call that completes min_calls opens at once even if it is a
 * success. No clock unless a decision needs a duration: the slow-call
 * rate (slow_call_rate below 100%: 100% means slowness is not judged, as
 * no rate can exceed it; the permit is stamped, RESIL_PERMIT_TIMED), the
 * time window, OPEN's wait (a coarse reading when the wait is 100 ms or
 * more: at most 4 ms late) and transitions. An OPEN rejection is one load
 * and one clock reading (coarse for waits of 100 ms or more); FORCED_OPEN
 * one load.
 *
 * Windows: count (last N calls: slots + packed counters), time (last T
 * in B buckets of T/B, each tagged with the tick it counts; a record is
 * tick = now / (T/B); the first recorder of a new tick CASes the epoch and
 * zeroes the counters: increments racing that rotation are lost, at most
 * the records in flight at the boundary, and the span judged is the
 * current bucket plus B - 1 whole ones, between T - T/B and T), consecutive
 * (N failures in a row; slowness not judged). min_calls is capped at N for
 * count windows (as Resilience4j).
 *
 * Half-open (probes): the number of probes at once is the number of probe
 * slots (half_open_concurrent); the total is enforced by a claimer that
 * owns a slot counting answered (ho) + held (slots of the current gen) and
 * giving its slot back when that exceeds half_open_calls, or when the word
 * moved on meanwhile (a claim for a gen that is over would admit a call in
 * OPEN). Answers add to ho before freeing the slot and claimers scan slots
 * (after a seq_cst fence) before loading ho, so a probe is always counted
 * at least once: never more than half_open_calls probes (those given back
 * by undo or RESIL_IGNORED excepted) per HALF_OPEN. The read-only check
 * already rejects when no probe is to be had, so nothing else is spent.
 * The prober whose answer makes answered == half_open_calls (one CAS:
 * exactly one) decides: OPEN when the failure or slow rate of the probes
 * is at or over its threshold, else CLOSED with a fresh window. With a
 * consecutive window one failed probe re-opens at once and
 * half_open_calls successes close.
 *
 * half_open_max_wait (the choice): a probe of the current gen held longer
 * than that (claimed_at) sends the breaker back to OPEN (reason probe
 * timed out, streak + 1): a probe that never answers is a dependency that
 * does not answer. Seen by every call in HALF_OPEN (whether a probe is
 * free or not: embedded mode, without a tick, decides like daemon mode)
 * and by the daemon's tick. 0 turns it off (a hung live prober then holds
 * its slot).
 *
 * Crash windows (a process may be SIGKILLed between any two instructions):
 *   - transition: one CAS, nothing to repair.
 *   - decision to CLOSED: the window is reset before the CAS; killed in
 *     between (or between the last answer and the CAS), the breaker stays
 *     HALF_OPEN with every probe answered and none held. Repair: the
 *     daemon's tick redoes the decision; so does a client's check once
 *     HALF_OPEN is older than half_open_max_wait (60 s when off).
 *   - count record: killed between the slot exchange and the counters
 *     fetch_add, the counters stay skewed by one outcome for good (the
 *     slot holds the new outcome, the counters the old one). Repair:
 *     resil_breaker_reclaim recomputes the histogram of the slots and adds
 *     the difference, from a snapshot where seq and the counters did not
 *     move during the scan (a live writer preempted in the same window at
 *     that moment looks the same and would be repaired twice: the error
 *     is at most the writers in flight; a writer recording inside a batch
 *     it took earlier moves no seq, the same bound). A fresh window also
 *     clears it.
 *   - probe claim: killed after the owner CAS, the slot is owned by a
 *     dead client: reclaim frees it (and answered + held drops, so another
 *     probe can go). Killed before stamping claimed_at, the slot reads
 *     "not timed": maintain stamps it with its own time so
 *     half_open_max_wait applies from then (unregistered clients, id 0,
 *     are never reclaimed and rely on this).
 *   - probe answer: killed between the ho CAS and freeing the slot: the
 *     probe is counted twice in answered + held (conservative) until
 *     reclaim frees the slot.
 *   - time-window rotation: killed between the epoch CAS and zeroing the
 *     counters, the bucket keeps the counts of B buckets ago for one span
 *     (bounded, it rotates again).
 *   - consecutive: one CAS per step, nothing to repair.
 *
 * Keys, outcome rules and the names of states and reasons live in
 * breaker_conf.c: nothing there touches the shared state.
 */
#include <errno.h>
#include <string.h>

#include "breaker.h"
#include "resil.h"
#include "stats.h"

/* ---- packed words ---------------------------------------------------- */

/* Rare paths out of line, so the hot ones stay small. */
#define BK_COLD RESIL_COLD

#define GEN_BITS	 20
#define GEN_MASK	 ((1u << GEN_BITS) - 1)
#define SINCE_BITS	 36
#define SINCE_MASK	 ((1ULL << SINCE_BITS) - 1)
#define STREAK_MAX	 31u
#define ELAPSED_PLAIN_NS ((int64_t)SINCE_MASK * RESIL_NS_PER_MS - 3600 * RESIL_NS_PER_S)

static inline int w_state(uint64_t w)
{
	return (int)(w & 7);
}
static inline uint32_t w_streak(uint64_t w)
{
	return (uint32_t)(w >> 3) & 31;
}
static inline uint32_t w_gen(uint64_t w)
{
	return (uint32_t)(w >> 8) & GEN_MASK;
}
static inline uint64_t w_since(uint64_t w)
{
	return w >> 28;
}
static inline uint64_t w_make(int state, uint32_t streak, uint32_t gen, uint64_t since_ms)
{
	return (uint64_t)(state & 7) | (uint64_t)(streak & 31) << 3 |
	       (uint64_t)(gen & GEN_MASK) << 8 | (since_ms & SINCE_MASK) << 28;
}

/* gen a is newer than b (modulo 2^20). */
static inline bool gen_newer(uint32_t a, uint32_t b)
{
	uint32_t d = (a - b) & GEN_MASK;

	return d != 0 && d < (1u << (GEN_BITS - 1));
}

#define F21 21
#define M21 ((1ULL << 21) - 1)

/* Packed delta from one slot outcome to another. */
static inline uint64_t cnt_delta(uint32_t old, uint32_t nw)
{
	int64_t dc = (int64_t)(nw & 1) - (int64_t)(old & 1);
	int64_t df = (int64_t)((nw >> 1) & 1) - (int64_t)((old >> 1) & 1);
	int64_t ds = (int64_t)((nw >> 2) & 1) - (int64_t)((old >> 2) & 1);

	return (uint64_t)dc + (uint64_t)df * (1ULL << F21) + (uint64_t)ds * (1ULL << (2 * F21));
}

static inline int64_t sext(uint64_t v, int bits)
{
	uint64_t m = 1ULL << (bits - 1);

	v &= (1ULL << bits) - 1;
	return (int64_t)(v ^ m) - (int64_t)m;
}

void resil_breaker_unpack(uint64_t v, struct resil_breaker_counts *out)
{
	int64_t c, f, s;

	c = sext(v, F21);
	v = (v - (uint64_t)c) >> F21;
	f = sext(v, F21);
	v = (v - (uint64_t)f) >> F21;
	s = sext(v, 64 - 2 * F21);
	out->calls = c < 0 ? 0 : c;
	out->failures = f < 0 ? 0 : f;
	out->slow = s < 0 ? 0 : s;
}

/* consec: gen << 32 | count */
static inline uint32_t cw_gen(uint64_t v)
{
	return (uint32_t)(v >> 32) & GEN_MASK;
}
static inline uint32_t cw_cnt(uint64_t v)
{
	return (uint32_t)v;
}

/* ho: gen:20 << 44 | answered:14 << 28 | failed:14 << 14 | slow:14 */
#define HO_M14 0x3fffu
static inline uint32_t ho_gen(uint64_t v)
{
	return (uint32_t)(v >> 44) & GEN_MASK;
}
static inline uint32_t ho_done(uint64_t v)
{
	return (uint32_t)(v >> 28) & HO_M14;
}
static inline uint32_t ho_fail(uint64_t v)
{
	return (uint32_t)(v >> 14) & HO_M14;
}
static inline uint32_t ho_slow(uint64_t v)
{
	return (uint32_t)v & HO_M14;
}
static inline uint64_t ho_make(uint32_t gen, uint32_t done, uint32_t fail, uint32_t slow)
{
	return (uint64_t)(gen & GEN_MASK) << 44 | (uint64_t)(done & HO_M14) << 28 |
	       (uint64_t)(fail & HO_M14) << 14 | (slow & HO_M14);
}

/* probe owner: (gen | 1 << 31) << 32 | client id */
static inline uint64_t probe_tag(uint32_t gen, uint32_t client)
{
	return (uint64_t)((gen & GEN_MASK) | 0x80000000u) << 32 | client;
}
static inline uint32_t probe_gen(uint64_t v)
{
	return (uint32_t)(v >> 32) & GEN_MASK;
}
static inline uint32_t probe_client(uint64_t v)
{
	return (uint32_t)v;
}
/* The client id a probe carries: the caller's row + 1, or 0 without a
 * row (a pid-tagged claim id, seg.h, does not fit a permit's probe index;
 * such a probe ends by half_open_max_wait, as before) */
static inline uint32_t probe_id(const struct resil_ctx *x)
{
	return x->client_id < (1u << 21) ? x->client_id : 0;
}

/* ---- configuration-derived values ------------------------------------ */

typedef struct resil_breaker_state bk_t;

static inline bool slow_on(const struct resil_breaker_conf *c)
{
	return c->slow_rate_bp < 10000 && c->window_kind != RESIL_WINDOW_CONSECUTIVE;
}

static inline uint32_t ho_calls(const struct resil_breaker_conf *c)
{
	uint32_t n = c->half_open_calls;

	if (n == 0)
		n = 1;
	return n > RESIL_BK_HALF_OPEN_MAX ? RESIL_BK_HALF_OPEN_MAX : n;
}

static uint32_t nprobe_of(const struct resil_breaker_conf *c)
{
	uint32_t n = c->half_open_concurrent ? c->half_open_concurrent : c->half_open_calls;

	if (n > ho_calls(c))
		n = ho_calls(c);
	if (n == 0)
		n = 1;
	return n > RESIL_BK_PROBES_MAX ? RESIL_BK_PROBES_MAX : n;
}

static uint32_t wsize_of(const struct resil_breaker_conf *c)
{
	uint32_t n;

	switch (c->window_kind) {
	case RESIL_WINDOW_TIME:
		n = c->buckets ? c->buckets : 1;
		return n > RESIL_BK_BUCKETS_MAX ? RESIL_BK_BUCKETS_MAX : n;
	case RESIL_WINDOW_CONSECUTIVE:
		return 0;
	default:
		n = c->window_size ? c->window_size : 1;
		return n > RESIL_BK_WINDOW_MAX ? RESIL_BK_WINDOW_MAX : n;
	}
}

static int64_t bucket_ns_of(const struct resil_breaker_conf *c)
{
	int64_t b = c->window_ns / (int64_t)wsize_of(c);

	return b > 0 ? b : 1;
}

/* Count windows judge from min(min_calls, N) like Resilience4j; a time
 * window from min_calls. */
static int64_t min_calls_of(const struct resil_breaker_conf *c)
{
	int64_t m = c->min_calls ? c->min_calls : 1;

	if (c->window_kind == RESIL_WINDOW_COUNT && m > (int64_t)wsize_of(c))
		m = wsize_of(c);
	return m;
}

/* The OPEN wait after `streak` repeated opens: wait * multiplier^streak,
 * capped at wait_max (0: wait). */
static int64_t open_wait(const struct resil_breaker_conf *c, uint32_t streak)
{
	int64_t w = c->wait_ns < 0 ? 0 : c->wait_ns;
	int64_t cap = c->wait_max_ns > 0 ? c->wait_max_ns : w;
	uint32_t m = c->wait_multiplier_milli;

	if (m > 1000) {
		for (uint32_t i = 0; i < streak && w < cap; i++) {
			if (w > INT64_MAX / m) {
				w = cap;
				break;
			}
			w = w * m / 1000;
		}
	}
	return w > cap ? cap : w;
}

/* open_wait(c, 0) without a loop */
static inline int64_t first_wait(const struct resil_breaker_conf *c)
{
	int64_t w = c->wait_ns < 0 ? 0 : c->wait_ns;

	return c->wait_max_ns > 0 && c->wait_max_ns < w ? c->wait_max_ns : w;
}

/* The count window's slot of record number seq: seq % n, n from the
 * configuration (the read-only segment), never from a word of the block,
 * which any client can write. A 32-bit division by a divisor that is
 * loaded with the configuration, before the fetch_add whose result it
 * divides: bench case breaker.count100.acq_rel (BENCHMARKS.md). */
static inline uint32_t seq_slot(uint64_t seq, uint32_t n)
{
	return (uint32_t)seq % n;
}

/*
 * Record numbers in batches (count window). A thread takes k = N / 32
 * numbers (1 to 8) with one fetch_add of seq and records into those slots
 * one after the other; the next fetch_add comes k records later. Two
 * processes deciding on one breaker then bounce seq's line once per k
 * records instead of once per record (bench case mp
 * breaker.count100.shared.p2, BENCHMARKS.md). What stays exact: every
 * record lands in exactly one slot, the counters stay equal to the
 * histogram of the slots (the exchange says what to adjust), and one
 * thread's records take consecutive slots in its own order. What the
 * window means: the N slots hold the last N records of the fleet except
 * for numbers taken but not yet used: at most T x (k - 1) slots, T the
 * threads recording, still hold the outcome of one lap (N numbers) ago;
 * for N = 100 (k = 3) and two threads, at most 4 of the 100. Windows
 * below 64 slots take one number at a time, as before. A number a thread
 * took and never used (it stopped deciding, or was killed) leaves its
 * slot a lap old: the same. A forked child inherits its parent's batch:
 * both may write one slot of it, the later exchange wins, the counters
 * stay equal to the slots (like a lapping recorder). The batch is keyed
 * by the block's address: an entry left by an unmapped block gives
 * numbers that are only positions, taken modulo this window's N.
 */
#define SEQ_CACHE 4 /* power of two */
struct seq_batch {
	uintptr_t tag; /* the block's address + the numbers left (0 to 7) */
	uint32_t next; /* low 32 bits: all seq_slot uses */
};
static _Thread_local
    __attribute__((tls_model("initial-exec"))) struct seq_batch seq_cache[SEQ_CACHE];

static inline uint64_t seq_take(bk_t *b, uint32_t n)
{
	struct seq_batch *e = &seq_cache[((uintptr_t)b / RESIL_HOT_ALIGN) & (SEQ_CACHE - 1)];
	uint32_t k = n / 32;
	uint64_t s;

	/* one compare: numbers left for this block (blocks are more than 8
	 * bytes apart, so tag - b in 1..7 names b alone) */
	if (RESIL_LIKELY(e->tag - (uintptr_t)b - 1 < 7)) {
		e->tag--;
		return e->next++;
	}
	k = k < 1 ? 1 : k > 8 ? 8 : k;
	s = faa_relaxed(&b->seq, k);
	e->tag = (uintptr_t)b + (k - 1);
	e->next = (uint32_t)s + 1;
	return s;
}

/* The block's layout, from the configuration only (the read-only config
 * segment): the one place offsets are computed. The copies in line 0
 * (probe_off, win_off, ...) are for dumps of the segment; no access is
 * ever addressed through them, since any client can write them. The
 * words read here share the conf's first line with those every call
 * reads. */
#define PROBE_OFF ((uint32_t)sizeof(bk_t))
static inline uint32_t win_off_of(const struct resil_breaker_conf *c)
{
	return (uint32_t)(sizeof(bk_t) + resil_align_up((uint64_t)nprobe_of(c) *
							    sizeof(struct resil_breaker_probe),
							RESIL_HOT_ALIGN));
}
static inline ra32 *cslots(bk_t *b, const struct resil_breaker_conf *c)
{
	return (ra32 *)((char *)b + win_off_of(c));
}

/* A success's release is a record without a clock: count window, no
 * slow-call rate. */
static inline bool count_fast(const struct resil_breaker_conf *c)
{
	return c->window_kind == RESIL_WINDOW_COUNT && c->slow_rate_bp >= 10000 &&
	       c->window_size - 1 < RESIL_BK_WINDOW_MAX;
}

/* The window's offset, and in bit 0 whether a success's release may be
 * the lean one (count_fast): offsets are even. */
RESIL_STATIC_ASSERT(sizeof(bk_t) % 2 == 0 && RESIL_HOT_ALIGN % 2 == 0, "win_off is even");
uint32_t resil_breaker_win_off(const struct resil_breaker_conf *c)
{
	return win_off_of(c) | (count_fast(c) ? 1u : 0u);
}

/* resil_breaker_win_off for a decision of x on configuration c: the one
 * the caller computed when it bound c (libresil.c's binding: the same
 * function of the same read-only words), else computed now. */
static inline uint32_t win_off_x(const struct resil_ctx *x, const struct resil_breaker_conf *c)
{
	return RESIL_LIKELY(x->bk_conf == c) ? x->bk_off : resil_breaker_win_off(c);
}
static inline struct resil_breaker_bucket *buckets(bk_t *b, const struct resil_breaker_conf *c)
{
	return (struct resil_breaker_bucket *)((char *)b + win_off_of(c));
}
static inline struct resil_breaker_probe *probes(bk_t *b)
{
	return (struct resil_breaker_probe *)((char *)b + PROBE_OFF);
}

/* ---- time --------------------------------------------------------------- */

static inline int64_t rel_ns(const bk_t *b, int64_t now)
{
	int64_t base = b->base_ns;
	uint64_t r;

	/* time appearing to go backwards clamps; unsigned, so no value of
	 * base_ns (a client may write any) overflows */
	if (now <= base)
		return 0;
	r = (uint64_t)now - (uint64_t)base;
	return r > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r;
}

static inline uint64_t since_of(const bk_t *b, int64_t now)
{
	return ((uint64_t)rel_ns(b, now) + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS;
}

/* ns since the word's since (0 if not yet or if the clock went back). The
 * 36-bit ms difference is taken modulo and sign-extended: exact for
 * states younger than 397 days. */
static inline int64_t elapsed_ns(const bk_t *b, uint64_t w, int64_t now)
{
	int64_t rel = rel_ns(b, now), e;

	if (RESIL_LIKELY(rel < ELAPSED_PLAIN_NS)) {
		/* the first 795 days of the block, less an hour: no wrap */
		e = rel - (int64_t)w_since(w) * RESIL_NS_PER_MS;
	} else {
		uint64_t now_ms = (uint64_t)rel / RESIL_NS_PER_MS;
		int64_t d = sext((now_ms - w_since(w)) & SINCE_MASK, SINCE_BITS);

		e = d * RESIL_NS_PER_MS + (rel - (int64_t)now_ms * RESIL_NS_PER_MS);
	}
	return e < 0 ? 0 : e;
}

/* The floor of the word's since, as an absolute time. */
static int64_t since_abs_floor(const bk_t *b, uint64_t w, int64_t now)
{
	return now - elapsed_ns(b, w, now) - RESIL_NS_PER_MS;
}

/* A reading for OPEN's wait: the cached precise one if any, else coarse
 * when the wait is long enough for a 4 ms resolution. */
static int64_t wait_clock(struct resil_ctx *x, int64_t wait)
{
	if (x->now)
		return x->now;
	if (wait >= 100 * RESIL_NS_PER_MS)
		return resil_clock_now_coarse(&x->clock);
	return resil_ctx_now(x);
}

static inline void stamp(struct resil_ctx *x, struct resil_permit_priv *pm)
{
	if (!(pm->flags & RESIL_PERMIT_TIMED)) {
		pm->start_ns = resil_ctx_now(x);
		pm->flags |= RESIL_PERMIT_TIMED;
	}
}

/* ---- transitions -------------------------------------------------------- */

/* The slot of moves[] counting from -> to (breaker.h), -1 for a pair no
 * transition takes (or a state out of range, before its repair). */
static int move_idx(int from, int to)
{
	if (from < 0 || from > RESIL_STATE_METRICS_ONLY)
		return -1;
	switch (to) {
	case RESIL_STATE_CLOSED:
		return from; /* 0..5: probes passed, or a reset from anywhere */
	case RESIL_STATE_DISABLED:
		return 6 + from;
	case RESIL_STATE_FORCED_OPEN:
		return 12 + from;
	case RESIL_STATE_METRICS_ONLY:
		return 18 + from;
	case RESIL_STATE_OPEN:
		return from == RESIL_STATE_CLOSED ? 24 : from == RESIL_STATE_HALF_OPEN ? 25 : -1;
	case RESIL_STATE_HALF_OPEN:
		return from == RESIL_STATE_OPEN ? 26 : -1;
	default:
		return -1;
	}
}
RESIL_STATIC_ASSERT(26 < RESIL_BK_MOVES, "moves[] holds every pair");

/* CAS *w -> (to, streak, gen + 1, now). The winner pushes the event. On
 * failure *w holds the current word. */
static bool move(struct resil_ctx *x, bk_t *b, uint64_t *w, int to, uint32_t streak, uint32_t why,
		 uint64_t value)
{
	int64_t now = resil_ctx_now(x);
	uint64_t nw = w_make(to, streak, w_gen(*w) + 1, since_of(b, now));
	int from = w_state(*w), idx;

	if (!cas_acq_rel(&b->word, w, nw))
		return false;
	*w = nw;
	idx = move_idx(from, to);
	if (idx >= 0)
		faa_relaxed(&b->moves[idx], 1);
	resil_event_push_by(x->seg, x->client_id, x->pid, RESIL_EV_TRANSITION,
			    x->rec ? x->rec->slot : 0, x->rec ? x->rec->gen : 0, (uint32_t)from,
			    (uint32_t)to, why, value, now);
	if (x->seg && x->rec)
		resil_stats_add(x, resil_comp_state(x->seg, x->rec, RESIL_C_STATS),
				RESIL_STAT_TRANSITIONS, 1);
	return true;
}

static inline uint32_t streak_up(uint64_t w)
{
	uint32_t s = w_streak(w);

	return s < STREAK_MAX ? s + 1 : s;
}

/* CLOSED -> OPEN after a record of gen crossed a threshold. */
static void closed_open(struct resil_ctx *x, bk_t *b, uint32_t gen, uint32_t why, uint64_t value)
{
	uint64_t w = ld_acquire(&b->word);

	if (w_state(w) == RESIL_STATE_CLOSED && w_gen(w) == gen)
		move(x, b, &w, RESIL_STATE_OPEN, 0, why, value);
}

/* ---- windows ------------------------------------------------------------ */

static bool count_counters(bk_t *b, const struct resil_breaker_conf *c, uint32_t old, uint32_t code,
			   bool judge, uint32_t *why, uint64_t *value);
static BK_COLD void count_after(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				uint32_t gen, uint32_t old, uint32_t code);

/* Empty the window: each slot exchanged to EMPTY with its counters
 * adjusted, the same steps as a record, so counters stay equal to the
 * slots' histogram even against a straggling recorder. Rare path. */
static void window_reset(bk_t *b, const struct resil_breaker_conf *c)
{
	uint32_t n = wsize_of(c);

	if (c->window_kind == RESIL_WINDOW_COUNT) {
		ra32 *s = cslots(b, c);

		for (uint32_t i = 0; i < n; i++) {
			uint32_t old = ld_relaxed(&s[i]);

			if (old == RESIL_BK_EMPTY)
				continue;
			old = atomic_exchange_explicit(&s[i], RESIL_BK_EMPTY, memory_order_relaxed);
			if (old != RESIL_BK_EMPTY)
				faa_relaxed(&b->counters, cnt_delta(old, RESIL_BK_EMPTY));
		}
	} else if (c->window_kind == RESIL_WINDOW_TIME) {
		struct resil_breaker_bucket *bk = buckets(b, c);

		for (uint32_t i = 0; i < n; i++) {
			st_relaxed(&bk[i].epoch, 0);
			st_relaxed(&bk[i].calls, 0);
			st_relaxed(&bk[i].bad, 0);
		}
	}
	/* consecutive: tagged with gen, the transition resets it */
}

/* n / calls in basis points, 0 to INT64_MAX. 128-bit: n and calls are
 * sums of words any client can write, up to INT64_MAX. */
static uint64_t rate_bp(int64_t n, int64_t calls)
{
	__int128 r = (__int128)n * 10000 / calls;

	return r < 0 ? 0 : r > INT64_MAX ? (uint64_t)INT64_MAX : (uint64_t)r;
}

static bool over_threshold(const struct resil_breaker_conf *c, const struct resil_breaker_counts *k,
			   int64_t min, uint32_t *why, uint64_t *value)
{
	if (k->calls <= 0 || k->calls < min)
		return false;
	/* 128-bit products, as rate_bp's */
	if ((__int128)k->failures * 10000 >= (__int128)c->failure_rate_bp * k->calls) {
		*why = RESIL_WHY_FAILURE_RATE;
		*value = rate_bp(k->failures, k->calls);
		return true;
	}
	if (slow_on(c) && (__int128)k->slow * 10000 >= (__int128)c->slow_rate_bp * k->calls) {
		*why = RESIL_WHY_SLOW_RATE;
		*value = rate_bp(k->slow, k->calls);
		return true;
	}
	return false;
}

/* The sum of the n buckets at bk that count the span ending at tick1. */
static void time_sum_n(const struct resil_breaker_bucket *bk, uint32_t n, uint64_t tick1,
		       struct resil_breaker_counts *k)
{
	/* calls: a 128-bit sum, clamped (any client can write the words);
	 * failures and slow calls are 32-bit fields, their sums fit */
	unsigned __int128 calls = 0;
	uint64_t failures = 0, slow = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t e = ld_acquire(&bk[i].epoch), bad;

		/* the span (tick1 - n, tick1] */
		if (e == 0 || e > tick1 || e + n <= tick1)
			continue;
		bad = ld_relaxed(&bk[i].bad);
		calls += ld_relaxed(&bk[i].calls);
		failures += bad >> 32;
		slow += (uint32_t)bad;
	}
	k->calls = calls > INT64_MAX ? INT64_MAX : (int64_t)calls;
	k->failures = (int64_t)failures;
	k->slow = (int64_t)slow;
}

static void time_sum(bk_t *b, const struct resil_breaker_conf *c, uint64_t tick1,
		     struct resil_breaker_counts *k)
{
	time_sum_n(buckets(b, c), wsize_of(c), tick1, k);
}

/* Record one outcome in CLOSED (or DISABLED, METRICS_ONLY). Returns true
 * with why/value when the window is at or over a threshold after it. */
static bool record(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c, uint32_t gen,
		   uint32_t code, bool judge, uint32_t *why, uint64_t *value)
{
	struct resil_breaker_counts k;

	switch (c->window_kind) {
	case RESIL_WINDOW_CONSECUTIVE: {
		uint64_t v = ld_acquire(&b->consec), nv;

		if (!(code & 2)) {
			/* success: reset only when there is something to reset */
			while (cw_gen(v) == gen && cw_cnt(v) != 0)
				if (cas_acq_rel(&b->consec, &v, (uint64_t)gen << 32))
					break;
			return false;
		}
		for (;;) {
			if (cw_gen(v) == gen)
				nv = v + 1;
			else if (gen_newer(gen, cw_gen(v)))
				nv = (uint64_t)gen << 32 | 1;
			else
				return false; /* a newer window: this result is stale */
			if (cas_acq_rel(&b->consec, &v, nv))
				break;
		}
		if (judge && cw_cnt(nv) >= (c->window_size ? c->window_size : 1)) {
			*why = RESIL_WHY_CONSECUTIVE;
			*value = cw_cnt(nv);
			return true;
		}
		return false;
	}
	case RESIL_WINDOW_TIME: {
		/* A reading before the block's origin counts as the origin:
		 * a comparison, no arithmetic on base_ns (any client may
		 * write it). The geometry once, from the configuration. */
		int64_t now = resil_max64(resil_ctx_now(x), b->base_ns);
		uint32_t n = wsize_of(c);
		int64_t span = c->window_ns / (int64_t)n;
		uint64_t tick1 =
		    (uint64_t)(now < 0 ? 0 : now) / (uint64_t)(span > 0 ? span : 1) + 1;
		struct resil_breaker_bucket *win =
		    (struct resil_breaker_bucket *)((char *)b + (win_off_x(x, c) & ~1u));
		struct resil_breaker_bucket *bk = &win[(tick1 - 1) % n];
		uint64_t e = ld_acquire(&bk->epoch);

		if (e != tick1) {
			if (e > tick1)
				return false; /* our reading is older than the bucket */
			if (cas_acq_rel(&bk->epoch, &e, tick1)) {
				/* CRASH WINDOW: killed here, the bucket keeps
				 * the counts of one window ago for one span. */
				st_relaxed(&bk->calls, 0);
				st_relaxed(&bk->bad, 0);
			} else if (e > tick1) {
				return false;
			}
		}
		faa_relaxed(&bk->calls, 1);
		if (code & (RESIL_BK_FAIL & ~RESIL_BK_OK))
			faa_relaxed(&bk->bad, 1ULL << 32);
		if (code & RESIL_BK_SLOW)
			faa_relaxed(&bk->bad, 1);
		if (!judge)
			return false;
		time_sum_n(win, n, tick1, &k);
		return over_threshold(c, &k, c->min_calls ? c->min_calls : 1, why, value);
	}
	default: {
		uint32_t n = wsize_of(c);
		uint64_t s = seq_take(b, n);
		/* 32-bit modulo: once every 2^32 records one slot is taken
		 * out of turn, harmless for "the last N" */
		ra32 *slot = &((ra32 *)((char *)b + (win_off_x(x, c) & ~1u)))[seq_slot(s, n)];
		uint32_t old = atomic_exchange_explicit(slot, code, memory_order_relaxed);

		/* CRASH WINDOW: killed here, the counters miss this change
		 * for good; resil_breaker_reclaim repairs them from the slots. */
		return count_counters(b, c, old, code, judge, why, value);
	}
	}
}

/* The rest of a count record after the slot exchange gave old. */
static bool count_counters(bk_t *b, const struct resil_breaker_conf *c, uint32_t old, uint32_t code,
			   bool judge, uint32_t *why, uint64_t *value)
{
	struct resil_breaker_counts k;
	uint64_t packed;

	if (old != code)
		packed = faa_relaxed(&b->counters, cnt_delta(old, code)) + cnt_delta(old, code);
	else if (code == RESIL_BK_OK)
		return false; /* nothing can have risen */
	else
		packed = ld_relaxed(&b->counters);
	/* a fast success that overwrote an outcome: the window is warm and
	 * neither rate nor the count rose */
	if (!judge || (code == RESIL_BK_OK && old != RESIL_BK_EMPTY))
		return false;
	resil_breaker_unpack(packed, &k);
	return over_threshold(c, &k, min_calls_of(c), why, value);
}

static BK_COLD void count_after(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				uint32_t gen, uint32_t old, uint32_t code)
{
	uint32_t why = 0;
	uint64_t value = 0;

	if (count_counters(b, c, old, code, true, &why, &value))
		closed_open(x, b, gen, why, value);
}

/* ---- probes ------------------------------------------------------------- */

static void probe_free(bk_t *b, uint32_t i, uint64_t tag)
{
	struct resil_breaker_probe *p = &probes(b)[i];
	uint64_t v = ld_acquire(&p->owner);

	if (v != tag)
		return; /* taken over by a newer gen, or reclaimed */
	/* INT64_MAX first: if a newer gen takes the slot over in between, it
	 * reads "not timed" (never a false timeout); maintain stamps it. */
	st_relaxed(&p->claimed_at, INT64_MAX);
	cas_acq_rel(&p->owner, &v, 0);
}

/* Held probes of gen (slots scanned before ho is loaded: see top). */
static uint32_t probes_held(bk_t *b, uint32_t np, uint32_t gen)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t held = 0;

	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		if (v && probe_gen(v) == gen)
			held++;
	}
	return held;
}

/* probes_held, and the oldest claimed_at among them (INT64_MAX: none
 * stamped) for the half_open_max_wait check of a caller. */
static uint32_t probes_held_since(bk_t *b, uint32_t np, uint32_t gen, int64_t *oldest)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t held = 0;

	*oldest = INT64_MAX;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);
		int64_t t;

		if (!v || probe_gen(v) != gen)
			continue;
		held++;
		t = ld_relaxed(&p[i].claimed_at);
		if (t < *oldest)
			*oldest = t;
	}
	return held;
}

static uint32_t answered(bk_t *b, uint32_t gen)
{
	uint64_t h = ld_acquire(&b->ho);

	return ho_gen(h) == gen ? ho_done(h) : 0;
}

/* Claim a probe slot for gen; its index or -1 when none may go. */
static int probe_claim(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c, uint64_t w)
{
	uint32_t gen = w_gen(w);
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), calls = ho_calls(c);
	uint64_t tag = probe_tag(gen, probe_id(x));

	if (answered(b, gen) >= calls)
		return -1;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		if (v && !gen_newer(gen, probe_gen(v)))
			continue; /* held in this gen */
		if (!cas_acq_rel(&p[i].owner, &v, tag))
			continue;
		/* Two claimers each store their slot and load the other's:
		 * without a total order both could miss each other. */
		atomic_thread_fence(memory_order_seq_cst);
		/* CRASH WINDOW: killed here, the slot is owned but not timed:
		 * reclaim frees it, maintain stamps it. */
		st_relaxed(&p[i].claimed_at, resil_ctx_now(x));
		/* Over the total, or the state moved on since the caller
		 * read it (a claim for a gen that is over would admit a call
		 * in OPEN, and its gen's answers are no longer in ho): give
		 * the slot back. Loaded after ho, so a ho of this gen was
		 * read if the word still says this gen. */
		if (probes_held(b, np, gen) + answered(b, gen) > calls ||
		    ld_acquire(&b->word) != w) {
			probe_free(b, i, tag);
			return -1;
		}
		return (int)i;
	}
	return -1;
}

/* HALF_OPEN of word w: a probe of its gen held longer than max_wait sends
 * it back to OPEN; with every probe answered but no decision (the decider
 * died), decide again. */
static void half_open_repair(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
			     uint64_t w, bool daemon);

/* ---- decisions on probes ------------------------------------------------ */

static void probes_decide(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
			  uint64_t w, uint64_t h)
{
	uint32_t done = ho_done(h), calls = ho_calls(c);
	struct resil_breaker_counts k = {done, ho_fail(h), ho_slow(h)};
	uint32_t why;
	uint64_t value;

	if (w_state(w) != RESIL_STATE_HALF_OPEN || w_gen(w) != ho_gen(h))
		return;
	if (c->window_kind == RESIL_WINDOW_CONSECUTIVE && k.failures > 0) {
		move(x, b, &w, RESIL_STATE_OPEN, streak_up(w), RESIL_WHY_PROBE_FAILED,
		     (uint64_t)k.failures);
		return;
	}
	if (done < calls)
		return;
	if (c->window_kind != RESIL_WINDOW_CONSECUTIVE && over_threshold(c, &k, 1, &why, &value)) {
		move(x, b, &w, RESIL_STATE_OPEN, streak_up(w), why, value);
		return;
	}
	/* Fresh window first, then the CAS publishes it (release). The word
	 * is loaded again just before: a late repairer holding an old copy
	 * must not wipe the records of the CLOSED that followed. */
	if (ld_acquire(&b->word) != w)
		return;
	window_reset(b, c);
	move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_PROBES_PASSED, done);
}

static void half_open_repair(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
			     uint64_t w, bool daemon)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), gen = w_gen(w);
	int64_t now = resil_ctx_now(x), floor = since_abs_floor(b, w, now), oldest = INT64_MAX;
	uint64_t h;
	uint32_t held = 0;

	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);
		int64_t t;

		if (!v || probe_gen(v) != gen)
			continue;
		held++;
		t = ld_relaxed(&p[i].claimed_at);
		if (t == INT64_MAX || t < floor) {
			/* not stamped (claimer in its crash window, or a slot
			 * taken over from an older gen not stamped yet) */
			if (daemon)
				atomic_compare_exchange_strong_explicit(&p[i].claimed_at, &t, now,
									memory_order_relaxed,
									memory_order_relaxed);
			continue;
		}
		if (t < oldest)
			oldest = t;
	}
	if (c->half_open_max_wait_ns > 0 && oldest != INT64_MAX &&
	    now - oldest >= c->half_open_max_wait_ns) {
		move(x, b, &w, RESIL_STATE_OPEN, streak_up(w), RESIL_WHY_PROBE_TIMEOUT,
		     (uint64_t)(now - oldest));
		return;
	}
	/* Every answer in, nobody holding a probe, and still HALF_OPEN: the
	 * decider died between its answer and its CAS. The daemon redoes
	 * the decision at once; a client only once HALF_OPEN is older than
	 * half_open_max_wait (60 s when off), so callers do not pile onto
	 * the decision a live decider is making right now. */
	if (held != 0)
		return;
	if (!daemon &&
	    elapsed_ns(b, w, now) <
		(c->half_open_max_wait_ns > 0 ? c->half_open_max_wait_ns : 60 * RESIL_NS_PER_S))
		return;
	h = ld_acquire(&b->ho);
	if (ho_gen(h) == gen && (ho_done(h) >= ho_calls(c) ||
				 (c->window_kind == RESIL_WINDOW_CONSECUTIVE && ho_fail(h) > 0)))
		probes_decide(x, b, c, w, h);
}

/* Add a probe's answer; returns the new ho word, 0 when it did not count
 * (stale gen, or every answer already in). */
static uint64_t ho_add(bk_t *b, const struct resil_breaker_conf *c, uint32_t gen, bool fail,
		       bool slow)
{
	uint64_t h = ld_acquire(&b->ho), nh;

	for (;;) {
		uint64_t base;

		if (ho_gen(h) == gen)
			base = h;
		else if (gen_newer(gen, ho_gen(h)))
			base = ho_make(gen, 0, 0, 0);
		else
			return 0;
		if (ho_done(base) >= ho_calls(c))
			return 0;
		nh = ho_make(gen, ho_done(base) + 1, ho_fail(base) + fail, ho_slow(base) + slow);
		if (cas_acq_rel(&b->ho, &h, nh))
			return nh;
	}
}

/* ---- the component interface -------------------------------------------- */

uint64_t resil_breaker_state_size(const struct resil_breaker_conf *c)
{
	uint64_t sz = sizeof(bk_t);

	sz += resil_align_up((uint64_t)nprobe_of(c) * sizeof(struct resil_breaker_probe),
			     RESIL_HOT_ALIGN);
	if (c->window_kind == RESIL_WINDOW_COUNT)
		sz += resil_align_up((uint64_t)wsize_of(c) * sizeof(ra32), RESIL_HOT_ALIGN);
	else if (c->window_kind == RESIL_WINDOW_TIME)
		sz += resil_align_up((uint64_t)wsize_of(c) * sizeof(struct resil_breaker_bucket),
				     RESIL_HOT_ALIGN);
	return sz;
}

/*
 * The layout words of line 0 (kind, size, bucket_ns, nprobe and the
 * offsets) are all derived from the configuration, which lives in the
 * read-only config segment. Written at init for observers; nothing
 * addresses memory through them (win_off_of, PROBE_OFF): the state
 * segment is writable by every client. The daemon rewrites them from the
 * configuration in its tick and counts what it had to repair. Plain
 * stores: the values are the ones every reader already expects.
 */
static uint32_t layout_repair(bk_t *b, const struct resil_breaker_conf *c)
{
	uint32_t np = nprobe_of(c), n = 0;
	uint32_t size = c->window_kind == RESIL_WINDOW_CONSECUTIVE ? c->window_size : wsize_of(c);
	int64_t bucket_ns = c->window_kind == RESIL_WINDOW_TIME ? bucket_ns_of(c) : 0;

#define FIX(field, val)                                                                            \
	do {                                                                                       \
		if (b->field != (val)) {                                                           \
			b->field = (val);                                                          \
			n++;                                                                       \
		}                                                                                  \
	} while (0)
	FIX(kind, c->window_kind);
	FIX(size, size);
	FIX(bucket_ns, bucket_ns);
	FIX(nprobe, np);
	FIX(probe_off, PROBE_OFF);
	FIX(win_off, win_off_of(c));
#undef FIX
	return n;
}

bool resil_breaker_layout_ok(const struct resil_breaker_conf *c, const void *st)
{
	bk_t copy;

	/* on a copy of the plain words of line 0 (after the state word, up to
	 * the end of win_off): layout_repair counts what differs and writes
	 * only the copy */
	memcpy(&copy.base_ns, &((const bk_t *)st)->base_ns,
	       offsetof(bk_t, win_off) + sizeof(copy.win_off) - offsetof(bk_t, base_ns));
	return layout_repair(&copy, c) == 0;
}

void resil_breaker_state_init(void *st, const struct resil_breaker_conf *c, int64_t now)
{
	bk_t *b = st;
	uint32_t np = nprobe_of(c);

	memset(st, 0, resil_breaker_state_size(c));
	b->base_ns = now;
	(void)layout_repair(b, c);
	for (uint32_t i = 0; i < np; i++)
		st_relaxed(&probes(b)[i].claimed_at, INT64_MAX);
	/* published by the record's slot word (release) in seg.c */
	st_release(&b->word, w_make(RESIL_STATE_CLOSED, 0, 0, 0));
}

bool resil_breaker_same_shape(const struct resil_breaker_conf *a,
			      const struct resil_breaker_conf *b)
{
	if (a->window_kind != b->window_kind || nprobe_of(a) != nprobe_of(b))
		return false;
	switch (a->window_kind) {
	case RESIL_WINDOW_COUNT:
		return wsize_of(a) == wsize_of(b);
	case RESIL_WINDOW_TIME:
		return wsize_of(a) == wsize_of(b) && bucket_ns_of(a) == bucket_ns_of(b);
	default:
		/* consecutive:N: a new N starts a fresh count (carry keeps
		 * OPEN and forced states) */
		return a->window_size == b->window_size;
	}
}

/* A new block for a new shape: OPEN keeps its opened time and streak,
 * forced states stay; HALF_OPEN starts its probes over (from now) in the
 * new block; CLOSED starts with a fresh window. The gen continues, so
 * permits of the old block (probes included) never match the new. */
void resil_breaker_carry(void *nst, const struct resil_breaker_conf *nc, const void *ost,
			 const struct resil_breaker_conf *oc, int64_t now)
{
	bk_t *nb = nst;
	const bk_t *ob = ost;
	uint64_t ow = ld_acquire(&((bk_t *)ob)->word);
	int s = w_state(ow);
	uint32_t gen = w_gen(ow) + 1;
	int64_t since = now - elapsed_ns(ob, ow, now);
	uint64_t nw;

	if (s == RESIL_STATE_CLOSED || s == RESIL_STATE_HALF_OPEN)
		since = now;
	/* the new base may be after the old since: move the base back */
	if (since < nb->base_ns)
		nb->base_ns = since;
	nw = w_make(s, w_streak(ow), gen, since_of(nb, since));
	/* the transition counters go on (before the word's release publishes
	 * them with the rest of the block) */
	for (unsigned i = 0; i < RESIL_BK_MOVES; i++)
		st_relaxed(&nb->moves[i], ld_relaxed(&((bk_t *)ob)->moves[i]));
	st_release(&nb->word, nw);
}

/* OPEN before its wait is over: rejected, with the time to the next
 * probe as the permit's wait (resil_permit_wait_ns: a Retry-After). */
static int open_reject(int64_t wait, int64_t elapsed, struct resil_permit_priv *pm)
{
	pm->wait_ns = elapsed < 0 ? wait : wait - elapsed;
	return RESIL_REJECT_OPEN;
}

/* OPEN: reject until the wait is over, then a probe is needed. Out of
 * line so the CLOSED path saves no registers. */
static __attribute__((noinline)) int check_open(struct resil_ctx *x,
						const struct resil_breaker_conf *c, bk_t *b,
						uint64_t w, struct resil_permit_priv *pm)
{
	int64_t wait = w_streak(w) ? open_wait(c, w_streak(w)) : first_wait(c);
	int64_t e = elapsed_ns(b, w, wait_clock(x, wait));

	if (e < wait)
		return open_reject(wait, e, pm);
	pm->flags |= RESIL_PERMIT_PROBE;
	return 0;
}

static BK_COLD int check_slow(struct resil_ctx *x, const struct resil_breaker_conf *c, bk_t *b,
			      uint64_t w, struct resil_permit_priv *pm)
{
	switch (w_state(w)) {
	case RESIL_STATE_DISABLED:
	case RESIL_STATE_METRICS_ONLY:
		if (slow_on(c))
			stamp(x, pm);
		return 0;
	case RESIL_STATE_OPEN: {
		int64_t wait = open_wait(c, w_streak(w));
		int64_t e = elapsed_ns(b, w, wait_clock(x, wait));

		if (e < wait)
			return open_reject(wait, e, pm);
		pm->flags |= RESIL_PERMIT_PROBE;
		return 0;
	}
	case RESIL_STATE_HALF_OPEN: {
		/* No probe to be had (every slot busy, or answered + held
		 * reach the total): reject here, before a later component
		 * spends anything. A probe held too long, or a decision whose
		 * maker died, is dealt with on the way (nothing is spent). */
		uint32_t np = nprobe_of(c), held;
		int64_t oldest;

		held = probes_held_since(b, np, w_gen(w), &oldest);
		if (held >= np || held + answered(b, w_gen(w)) >= ho_calls(c)) {
			half_open_repair(x, b, c, w, false);
			return RESIL_REJECT_OPEN;
		}
		/* A probe is free, but one held past half_open_max_wait sends
		 * the breaker back to OPEN first, as the daemon's tick would:
		 * embedded mode (no tick) decides the same. The repair
		 * confirms it (a stale stamp is not a timeout); a caller that
		 * finds the word moved is rejected like any caller in OPEN. */
		/* oldest is a client's word: compared with now - wait (the
		 * clock and the configuration: no overflow), never subtracted */
		if (oldest != INT64_MAX && c->half_open_max_wait_ns > 0 &&
		    oldest <= resil_ctx_now(x) - c->half_open_max_wait_ns) {
			half_open_repair(x, b, c, w, false);
			if (ld_acquire(&b->word) != w)
				return RESIL_REJECT_OPEN;
		}
		pm->flags |= RESIL_PERMIT_PROBE;
		return 0;
	}
	default:
		return RESIL_REJECT_OPEN; /* FORCED_OPEN, or a corrupt word */
	}
}

int resil_breaker_check(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			struct resil_permit_priv *pm)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	pm->breaker_gen = w_gen(w);
	if (RESIL_LIKELY(w_state(w) == RESIL_STATE_CLOSED)) {
		if (slow_on(c))
			stamp(x, pm);
		return 0;
	}
	/* rejections stay short too: one (coarse) clock reading in OPEN,
	 * none in FORCED_OPEN */
	if (w_state(w) == RESIL_STATE_OPEN)
		return check_open(x, c, b, w, pm);
	if (w_state(w) == RESIL_STATE_FORCED_OPEN)
		return RESIL_REJECT_OPEN;
	return check_slow(x, c, b, w, pm);
}

int resil_breaker_acquire(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			  struct resil_permit_priv *pm)
{
	bk_t *b = st;
	uint64_t w;
	int i;

	if (!(pm->flags & RESIL_PERMIT_PROBE))
		return 0;
	w = ld_acquire(&b->word);
	for (;;) {
		int s = w_state(w);

		if (s == RESIL_STATE_HALF_OPEN)
			break;
		if (s == RESIL_STATE_OPEN) {
			int64_t wait = open_wait(c, w_streak(w));

			if (elapsed_ns(b, w, resil_ctx_now(x)) < wait)
				goto reject;
			/* the first acquire after the wait: HALF_OPEN, and
			 * it goes on to claim a probe like any other */
			move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w), RESIL_WHY_WAIT_OVER,
			     (uint64_t)wait);
			continue;
		}
		if (s == RESIL_STATE_CLOSED || s == RESIL_STATE_DISABLED ||
		    s == RESIL_STATE_METRICS_ONLY) {
			/* closed meanwhile: an ordinary call */
			pm->flags &= ~RESIL_PERMIT_PROBE;
			pm->breaker_gen = w_gen(w);
			if (slow_on(c))
				stamp(x, pm);
			return 0;
		}
		goto reject;
	}
	i = probe_claim(x, b, c, w);
	if (i < 0) {
		half_open_repair(x, b, c, w, false);
		goto reject;
	}
	pm->probe_idx = RESIL_BK_PROBE_IDX(probe_id(x), (uint32_t)i);
	pm->breaker_gen = w_gen(w);
	if (slow_on(c))
		stamp(x, pm);
	return 0;
reject:
	pm->flags &= ~RESIL_PERMIT_PROBE;
	pm->probe_idx = 0;
	pm->wait_ns = 0; /* a probe's race lost: when the next is free is not known */
	return RESIL_REJECT_OPEN;
}

void resil_breaker_undo(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			struct resil_permit_priv *pm)
{
	if (pm->probe_idx) {
		uint32_t i = RESIL_BK_PROBE_SLOT(pm->probe_idx);

		if (i < nprobe_of(c))
			probe_free(
			    st, i,
			    probe_tag(pm->breaker_gen, RESIL_BK_PROBE_CLIENT(pm->probe_idx)));
		pm->probe_idx = 0;
	}
	pm->flags &= ~RESIL_PERMIT_PROBE;
}

/* CLOSED (or DISABLED, METRICS_ONLY) and the permit of this gen: record;
 * CLOSED -> OPEN by the record that crossed a threshold (a lost CAS means
 * someone else moved it first). */
static BK_COLD void release_closed(struct resil_ctx *x, const struct resil_breaker_conf *c, bk_t *b,
				   uint64_t w, uint32_t code)
{
	uint32_t why = 0;
	uint64_t value = 0;

	if (w_state(w) == RESIL_STATE_CLOSED) {
		if (record(x, b, c, w_gen(w), code, true, &why, &value))
			closed_open(x, b, w_gen(w), why, value);
	} else if (w_state(w) == RESIL_STATE_DISABLED || w_state(w) == RESIL_STATE_METRICS_ONLY) {
		record(x, b, c, w_gen(w), code, false, &why, &value);
	}
}

static BK_COLD void release_probe(struct resil_ctx *x, const struct resil_breaker_conf *c, bk_t *b,
				  struct resil_permit_priv *pm, uint32_t code)
{
	uint32_t idx = RESIL_BK_PROBE_SLOT(pm->probe_idx);
	uint64_t w = ld_acquire(&b->word), h = 0;

	/* an answer of an older gen decides nothing */
	if (w_state(w) == RESIL_STATE_HALF_OPEN && w_gen(w) == pm->breaker_gen)
		h = ho_add(b, c, pm->breaker_gen, code & 2, code & RESIL_BK_SLOW);
	/* answer counted before the slot is freed (see top) */
	if (idx < nprobe_of(c))
		probe_free(b, idx,
			   probe_tag(pm->breaker_gen, RESIL_BK_PROBE_CLIENT(pm->probe_idx)));
	pm->probe_idx = 0;
	pm->flags &= ~RESIL_PERMIT_PROBE;
	if (h)
		probes_decide(x, b, c, ld_acquire(&b->word), h);
}

bool resil_breaker_lean(const struct resil_breaker_conf *c)
{
	return !slow_on(c);
}

int64_t resil_breaker_lean_wait(const struct resil_breaker_conf *c, uint64_t *streaks)
{
	int64_t w = first_wait(c);

	/* open_wait grows with the streak only with a multiplier above 1
	 * and a cap above the first wait */
	*streaks = c->wait_multiplier_milli > 1000 && open_wait(c, STREAK_MAX) > w
		       ? (uint64_t)STREAK_MAX << 3
		       : 0;
	return w;
}

/*
 * The lean rejection's end: elapsed_ns(b, w, now) < wait judged before
 * the reading, so that the caller keeps one number across it. With rel =
 * now - base and S the word's since in ns, below ELAPSED_PLAIN_NS elapsed
 * is max(0, rel - S), under wait (> 0) exactly when rel < S + wait; a
 * reading before base is elapsed 0, a rejection too. So a reading below
 * base + min(S + wait, ELAPSED_PLAIN_NS) rejects. When that sum passes
 * INT64_MAX every reading rejects: no reading needed. Any other reading
 * (the wait over, or a block so old that elapsed_ns takes its modulo) is
 * the general path's. S + wait: below 2^36 ms plus INT64_MAX, no
 * unsigned overflow; base is any value a client wrote.
 */
static inline struct resil_bk_lean_open reject_until(const bk_t *b, uint64_t w, int64_t wait)
{
	struct resil_bk_lean_open o = {.verdict = RESIL_BK_LEAN_UNTIL};
	uint64_t lim;

	/* a wait a coarse reading may judge (check_open's reading) */
	if (wait < 100 * RESIL_NS_PER_MS)
		return (struct resil_bk_lean_open){.verdict = 0};
	lim = w_since(w) * (uint64_t)RESIL_NS_PER_MS + (uint64_t)wait;
	if (lim > (uint64_t)ELAPSED_PLAIN_NS)
		lim = (uint64_t)ELAPSED_PLAIN_NS;
	if (__builtin_add_overflow(b->base_ns, (int64_t)lim, &o.until))
		return (struct resil_bk_lean_open){.verdict = RESIL_REJECT_OPEN};
	return o;
}

/* The same after a repeated open whose wait grows: out of line, so the
 * common path makes no call before the caller's reading. */
static BK_COLD struct resil_bk_lean_open reject_until_grown(const struct resil_breaker_conf *c,
							    const bk_t *b, uint64_t w)
{
	return reject_until(b, w, open_wait(c, w_streak(w)));
}

struct resil_bk_lean_open resil_breaker_reject_lean(const struct resil_breaker_conf *c, void *st,
						    int64_t wait0, uint64_t streaks)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	if (w_state(w) == RESIL_STATE_FORCED_OPEN)
		return (struct resil_bk_lean_open){.verdict = RESIL_REJECT_OPEN};
	if (RESIL_UNLIKELY(w_state(w) != RESIL_STATE_OPEN))
		return (struct resil_bk_lean_open){.verdict = 0};
	/* the wait of this streak: wait0 unless it grows (streaks: w_streak's
	 * bits when it does) */
	if (RESIL_UNLIKELY(w & streaks))
		return reject_until_grown(c, b, w);
	return reject_until(b, w, wait0);
}

int resil_breaker_acquire_lean(void *st, struct resil_permit_priv *pm)
{
	uint64_t w = ld_acquire(&((bk_t *)st)->word);

	/* CLOSED, the only state whose acquire is this load (a lean
	 * configuration stamps no time: no slow-call rate) */
	if (RESIL_UNLIKELY(w_state(w) != RESIL_STATE_CLOSED))
		return 1;
	pm->breaker_gen = w_gen(w);
	return 0;
}

/* The hot path: a success in CLOSED, count window, no slow-call
 * threshold, overwriting a success: load, fetch_add, load. */
uint32_t resil_breaker_release_lean(const struct resil_breaker_conf *c, void *st,
				    const struct resil_permit_priv *pm, int outcome,
				    uint32_t win_off)
{
	bk_t *b = st;
	uint64_t w, s;
	uint32_t old;
	ra32 *slot;

	/* win_off's bit 0: count_fast(c) (resil_breaker_win_off) */
	if (RESIL_UNLIKELY(outcome != RESIL_SUCCESS || pm->probe_idx != 0 || !(win_off & 1)))
		return RESIL_BK_LEAN_NO;
	w = ld_acquire(&b->word);
	if (RESIL_UNLIKELY(w != (w & ~(uint64_t)7) || w_gen(w) != pm->breaker_gen))
		return RESIL_BK_LEAN_NO;
	s = seq_take(b, c->window_size);
	slot = &((ra32 *)((char *)b + (win_off - 1)))[seq_slot(s, c->window_size)];
	/* A slot that already says "success" needs no write: the exchange
	 * would store the same code and leave the counters as they are.
	 * Skipping it is the ordering in which this record came just before
	 * any concurrent writer of the same slot (a lapping recorder, a
	 * window reset), which the exchange allows too. So a healthy window
	 * costs a record number (seq_take) and a load here. */
	if (RESIL_LIKELY(ld_relaxed(slot) == RESIL_BK_OK))
		return RESIL_BK_LEAN_DONE;
	old = atomic_exchange_explicit(slot, RESIL_BK_OK, memory_order_relaxed);
	/* CRASH WINDOW: as in record() */
	if (RESIL_LIKELY(old == RESIL_BK_OK))
		return RESIL_BK_LEAN_DONE;
	return RESIL_BK_LEAN_AFTER | old;
}

void resil_breaker_lean_after(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			      uint32_t gen, uint32_t r)
{
	count_after(x, st, c, gen, r & ~RESIL_BK_LEAN_AFTER, RESIL_BK_OK);
}

void resil_breaker_release(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			   struct resil_permit_priv *pm, int outcome)
{
	bk_t *b = st;
	uint32_t code, r;
	uint64_t w;

	r = resil_breaker_release_lean(c, st, pm, outcome, win_off_x(x, c));
	if (RESIL_LIKELY(r == RESIL_BK_LEAN_DONE))
		return;
	if (r != RESIL_BK_LEAN_NO) {
		resil_breaker_lean_after(x, c, st, pm->breaker_gen, r);
		return;
	}
	if (outcome == RESIL_IGNORED) {
		/* neither: a probe goes back unanswered (another may go) */
		resil_breaker_undo(x, c, st, pm);
		return;
	}
	code = outcome == RESIL_SUCCESS ? RESIL_BK_OK : RESIL_BK_FAIL;
	if ((pm->flags & RESIL_PERMIT_TIMED) && slow_on(c) &&
	    resil_ctx_now(x) - pm->start_ns >= c->slow_call_ns)
		code |= RESIL_BK_SLOW;
	if (pm->probe_idx) {
		release_probe(x, c, b, pm, code);
		return;
	}
	w = ld_acquire(&b->word);
	if (w_gen(w) != pm->breaker_gen)
		return; /* granted in another state: not this window's */
	release_closed(x, c, b, w, code);
}

/*
 * The daemon's checks of the words it acts on (any client may write any
 * value into them); each bad one is repaired and counted (resil_repaired):
 *   - layout copies in line 0: rewritten from the configuration;
 *   - base_ns: the time origin of since_ms; one from the future
 *     would make every state look brand new, so
 *     it is moved to now and the state word re-stamped from now;
 *   - the state code: one outside the enum (6, 7) would reject forever;
 *     it becomes a fresh CLOSED breaker, as after a reset.
 * A client of the same fleet can still make decisions wrong (a state
 * word naming OPEN); it cannot make the daemon or a caller stick.
 */
static void state_repair(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c)
{
	int64_t now = resil_ctx_now(x);
	uint64_t w;

	if (layout_repair(b, c))
		resil_repaired(x, RESIL_W_BREAKER_LAYOUT);
	if (b->base_ns > now) {
		b->base_ns = now;
		w = ld_acquire(&b->word);
		cas_acq_rel(&b->word, &w, w_make(w_state(w), w_streak(w), w_gen(w), 0));
		resil_repaired(x, RESIL_W_BREAKER_BASE);
	}
	w = ld_acquire(&b->word);
	if (w_state(w) > RESIL_STATE_METRICS_ONLY) {
		window_reset(b, c);
		while (w_state(w) > RESIL_STATE_METRICS_ONLY &&
		       !move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_RESET, 0))
			;
		resil_repaired(x, RESIL_W_BREAKER_STATE);
	}
}

void resil_breaker_maintain(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w;

	state_repair(x, b, c);
	w = ld_acquire(&b->word);

	if (w_state(w) == RESIL_STATE_OPEN) {
		int64_t wait = open_wait(c, w_streak(w));

		if (elapsed_ns(b, w, resil_ctx_now(x)) < wait)
			return;
		if (!move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w), RESIL_WHY_WAIT_OVER,
			  (uint64_t)wait))
			return;
	}
	if (w_state(w) == RESIL_STATE_HALF_OPEN)
		half_open_repair(x, b, c, w, true);
}

/* Counters from the slots' histogram, from a snapshot where neither seq nor
 * the counters moved during the scan; a few tries, then give up (the next
 * reclaim or fresh window repairs). */
static bool count_repair(bk_t *b, const struct resil_breaker_conf *c)
{
	uint32_t n = wsize_of(c);
	ra32 *s = cslots(b, c);

	for (int tries = 0; tries < 8; tries++) {
		uint64_t s1 = ld_acquire(&b->seq), c1 = ld_acquire(&b->counters), hist = 0;
		uint64_t c2, s2;

		for (uint32_t i = 0; i < n; i++)
			hist += cnt_delta(RESIL_BK_EMPTY, ld_relaxed(&s[i]) & 7);
		c2 = ld_acquire(&b->counters);
		s2 = ld_acquire(&b->seq);
		if (s1 != s2 || c1 != c2)
			continue;
		if (hist == c1)
			return false;
		/* a delta, so a record that starts now composes with it */
		faa_relaxed(&b->counters, hist - c1);
		return true;
	}
	return false;
}

void resil_breaker_reclaim(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			   uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	bk_t *b = st;
	struct resil_breaker_probe *p;
	uint32_t np = nprobe_of(c);

	p = probes(b);
	if (dead_client != 0) {
		for (uint32_t i = 0; i < np; i++) {
			uint64_t v = ld_acquire(&p[i].owner);

			if (!v || probe_client(v) != dead_client)
				continue;
			st_relaxed(&p[i].claimed_at, INT64_MAX);
			if (cas_acq_rel(&p[i].owner, &v, 0) && counts)
				counts->probes++;
		}
	}
	if (c->window_kind == RESIL_WINDOW_COUNT && count_repair(b, c) && counts)
		counts->repaired++;
}

uint32_t resil_breaker_sweep(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			     resil_stray_fn stray, void *ctx)
{
	bk_t *b = st;
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), n = 0;

	(void)x;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		/* a probe of no live client (stray(), as the permits'
		 * sweep: a free row, an id past the table): freed as a dead
		 * client's is (reclaim); a slot claimed again since the load
		 * is left alone by the CAS. Id 0 (unregistered) is never
		 * guessed about: half_open_max_wait ends it */
		if (!v || probe_client(v) == 0 || !stray(probe_client(v), ctx))
			continue;
		st_relaxed(&p[i].claimed_at, INT64_MAX);
		if (cas_acq_rel(&p[i].owner, &v, 0))
			n++;
	}
	return n;
}

int resil_breaker_state(const void *st)
{
	return w_state(ld_acquire(&((bk_t *)st)->word));
}

int resil_breaker_settle(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	/* what a decision in HALF_OPEN would find first (check_slow): a
	 * probe held past half_open_max_wait, or a decision whose maker
	 * died; a read that comes before any decision says what it would
	 * say (embedded mode has no tick to do it) */
	if (w_state(w) == RESIL_STATE_HALF_OPEN)
		half_open_repair(x, b, c, w, false);
	return w_state(ld_acquire(&b->word));
}

int64_t resil_breaker_moves(const void *st, int from, int to)
{
	int idx = move_idx(from, to);

	return idx < 0 ? -1 : (int64_t)ld_relaxed(&((bk_t *)st)->moves[idx]);
}

int resil_breaker_window(const struct resil_breaker_conf *c, const void *st, int64_t now,
			 struct resil_breaker_counts *out)
{
	bk_t *b = (bk_t *)st;

	switch (c->window_kind) {
	case RESIL_WINDOW_COUNT:
		resil_breaker_unpack(ld_relaxed(&b->counters), out);
		return 0;
	case RESIL_WINDOW_TIME: {
		/* the span a record made now would be judged in (record) */
		int64_t t = rel_ns(b, now) + b->base_ns;

		time_sum(b, c, (uint64_t)(t < 0 ? 0 : t) / (uint64_t)bucket_ns_of(c) + 1, out);
		return 0;
	}
	default:
		return -ENODATA;
	}
}

void resil_breaker_host_window(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			       struct resil_breaker_counts *k)
{
	bk_t *b = st;
	int64_t now;

	memset(k, 0, sizeof(*k));
	if (c->window_kind != RESIL_WINDOW_TIME)
		return;
	now = rel_ns(b, resil_ctx_now(x)) + b->base_ns;
	time_sum(b, c, (uint64_t)(now < 0 ? 0 : now) / (uint64_t)bucket_ns_of(c) + 1, k);
	/* what leaves the host is what its window can hold: any client can
	 * write the buckets, and a count past that would break the fleet's
	 * sums (every host's, in Redis). A bucket's calls to 32 bits, like
	 * its failures and slow calls; failures and slow calls no more than
	 * calls. The window's own decisions read the words as they are. */
	k->calls = resil_min64(k->calls, (int64_t)wsize_of(c) * UINT32_MAX);
	k->failures = resil_min64(k->failures, k->calls);
	k->slow = resil_min64(k->slow, k->calls);
}

/* The fleet's evidence opens the host's breaker as its own would (the same
 * CAS and event as closed_open); the host then runs its own OPEN wait and
 * half-open probes. */
bool resil_breaker_trip(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			uint32_t why, uint64_t value)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	(void)c;
	while (w_state(w) == RESIL_STATE_CLOSED)
		if (move(x, b, &w, RESIL_STATE_OPEN, 0, why, value))
			return true;
	return false;
}

/* Push OPEN's end to `until`: since = until - wait, in one CAS of the
 * word that keeps its state, streak and gen (a permit of this gen is a
 * rejection either way). A client that read the old word and found the
 * wait over fails its CAS to HALF_OPEN, reloads and is rejected
 * (resil_breaker_acquire re-checks the wait). */
bool resil_breaker_hold(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int64_t until)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word), want;

	(void)x;
	while (w_state(w) == RESIL_STATE_OPEN) {
		int64_t wait = open_wait(c, w_streak(w));

		want = since_of(b, until > INT64_MIN + wait ? until - wait : until);
		if (want <= w_since(w))
			return false;
		if (cas_acq_rel(&b->word, &w,
				w_make(RESIL_STATE_OPEN, w_streak(w), w_gen(w), want)))
			return true;
	}
	return false;
}

bool resil_breaker_probe_now(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	while (w_state(w) == RESIL_STATE_OPEN)
		if (move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w), RESIL_WHY_WAIT_OVER,
			 (uint64_t)open_wait(c, w_streak(w))))
			return true;
	return false;
}

/* As the decision of passed probes: the window reset before the CAS that
 * publishes it (a caller of the old OPEN gen records nothing into it). */
bool resil_breaker_fleet_close(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	if (w_state(w) != RESIL_STATE_OPEN)
		return false;
	window_reset(b, c);
	while (w_state(w) == RESIL_STATE_OPEN)
		if (move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_FLEET_CLOSED, 0))
			return true;
	return false;
}

int resil_breaker_force(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int state)
{
	bk_t *b = st;
	uint64_t w;

	if (state != RESIL_STATE_CLOSED && state != RESIL_STATE_DISABLED &&
	    state != RESIL_STATE_FORCED_OPEN && state != RESIL_STATE_METRICS_ONLY)
		return -EINVAL;
	if (state == RESIL_STATE_CLOSED)
		window_reset(b, c);
	w = ld_acquire(&b->word);
	while (!move(x, b, &w, state, 0,
		     state == RESIL_STATE_CLOSED ? RESIL_WHY_RESET : RESIL_WHY_FORCED, 0))
		;
	return 0;
}

/* ---- observers ------------------------------------------------------- */

/*
 * A snapshot for `resilctl show`: plain loads of words written by anyone,
 * not atomic across them (a record racing the read can be counted in the
 * window but not yet in the rates' denominator, or the reverse: off by the
 * records in flight). Reads only; every index comes from the configuration.
 */
void resil_breaker_info(const struct resil_breaker_conf *c, const void *st, int64_t now,
			struct resil_breaker_info *out)
{
	bk_t *b = (bk_t *)(uintptr_t)st;
	uint64_t w = ld_acquire(&b->word);
	uint32_t gen = w_gen(w);

	memset(out, 0, sizeof(*out));
	out->state = w_state(w);
	out->streak = w_streak(w);
	out->since_ns = now - elapsed_ns(b, w, now);
	out->min_calls = (uint32_t)min_calls_of(c);
	out->probes_max = ho_calls(c);
	if (out->state == RESIL_STATE_OPEN)
		out->wait_ns = open_wait(c, out->streak);
	if (out->state == RESIL_STATE_HALF_OPEN) {
		uint64_t h = ld_acquire(&b->ho);

		out->probes_held = probes_held(b, nprobe_of(c), gen);
		if (ho_gen(h) == gen) {
			out->calls = ho_done(h);
			out->failures = ho_fail(h);
			out->slow = ho_slow(h);
		}
		return;
	}
	switch (c->window_kind) {
	case RESIL_WINDOW_CONSECUTIVE: {
		uint64_t v = ld_acquire(&b->consec);

		out->failures = cw_gen(v) == gen ? cw_cnt(v) : 0;
		out->calls = out->failures;
		break;
	}
	case RESIL_WINDOW_TIME: {
		int64_t t = rel_ns(b, now) + b->base_ns;
		uint64_t tick1 = (uint64_t)(t < 0 ? 0 : t) / (uint64_t)bucket_ns_of(c) + 1;
		struct resil_breaker_counts k;

		time_sum(b, c, tick1, &k);
		out->calls = k.calls;
		out->failures = k.failures;
		out->slow = k.slow;
		break;
	}
	default: {
		struct resil_breaker_counts k;

		resil_breaker_unpack(ld_relaxed(&b->counters), &k);
		out->calls = k.calls;
		out->failures = k.failures;
		out->slow = k.slow;
		break;
	}
	}
}

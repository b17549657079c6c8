/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - a lock-free circuit breaker in shared memory: the state
 * word and its transitions, the windows, and the decision (check,
 * acquire, release, the lean path).
 *
 * One breaker is shared by every process of the fleet. CLOSED counts
 * outcomes in a window (last N calls, last T in B buckets, or N
 * consecutive failures) and opens when a rate reaches its threshold; OPEN
 * rejects until its wait is over; then HALF_OPEN lets a limited number of
 * probes decide between OPEN again and a fresh CLOSED. The design (the
 * hot path, the windows' bounds, half-open, every crash window) is
 * docs/internals/breaker.md.
 *
 * The breaker's files: breaker_priv.h (the packed words' accessors, the
 * geometry from the configuration, the time helpers, the functions each
 * file calls in another); breaker_probe.c (probe slots, answers and the
 * probes' decision); breaker_maint.c (the block's layout, init and carry,
 * the daemon's maintenance, reclaim and sweep, the fleet's moves, force
 * and the observers); breaker_conf.c (keys, outcome rules, names: nothing
 * there touches the shared state).
 *
 * Words (struct resil_breaker_state, breaker.h), writers, readers, orders:
 *   word      CAS (acq_rel) by whoever makes a transition (any client, the
 *             daemon's maintain, force): the linearization point of the
 *             transition, and its winner alone pushes the event; loaded
 *             (acquire) by every call. The CAS's release publishes a
 *             window reset done before it.
 *   seq       count window: fetch_add (relaxed) by recorders, 1 to 8
 *             numbers at once (seq_take): only the index matters.
 *   slots[]   exchange (relaxed) by recorders; the old value says which
 *             counters to adjust.
 *   counters  fetch_add (relaxed) of a packed signed delta when a slot's
 *             outcome changed; equal to the slots' histogram at
 *             quiescence, readers clamp at 0.
 *   consec    CAS (acq_rel) by a failing recorder, by a succeeding one
 *             only to reset; tagged with gen.
 *   buckets   time window: epoch CAS (acq_rel) by the first recorder of a
 *             span, which then zeroes the counts; counts fetch_add
 *             (relaxed) by recorders.
 *   probes[]  owner CAS (acq_rel) by a prober (claim, release) or by
 *             reclaim and sweep (dead client); claimed_at stored by the
 *             owner after its claim, INT64_MAX while free
 *             (breaker_probe.c).
 *   ho        CAS (acq_rel) by probers adding an answer; tagged with gen.
 *   moves[]   fetch_add (relaxed) by a transition's winner; statistics.
 *   base_ns, layout copies: plain, written by state_init or carry before
 *             the record's slot word publishes the block; no access is
 *             addressed through them, base_ns is read with arithmetic no
 *             value can overflow, and the daemon's tick repairs them
 *             (breaker_maint.c).
 * The daemon writes these words only through the operations a client
 * uses (maintain, reclaim, force). Any value a client may write is
 * survived: offsets and sizes come from the read-only configuration.
 */
#include <errno.h>
#include <string.h>

#include "breaker_priv.h"
#include "stats.h"

/* Rare paths out of line, so the hot ones stay small. */
#define BK_COLD RESIL_COLD

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

/* ---- layout ------------------------------------------------------------ */

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

/* ---- time --------------------------------------------------------------- */

/* A reading for OPEN's wait: the cached precise one if any, else coarse
 * when the wait is long enough (100 ms) for a kernel tick's resolution. */
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
int resil_breaker_priv_move_idx(int from, int to)
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
bool resil_breaker_priv_move(struct resil_ctx *x, bk_t *b, uint64_t *w, int to, uint32_t streak,
			     uint32_t why, uint64_t value)
{
	int64_t now = resil_ctx_now(x);
	uint64_t nw = w_make(to, streak, w_gen(*w) + 1, since_of(b, now));
	int from = w_state(*w), idx;

	if (!cas_acq_rel(&b->word, w, nw))
		return false;
	*w = nw;
	idx = resil_breaker_priv_move_idx(from, to);
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

/* CLOSED -> OPEN after a record of gen crossed a threshold. */
static void closed_open(struct resil_ctx *x, bk_t *b, uint32_t gen, uint32_t why, uint64_t value)
{
	uint64_t w = ld_acquire(&b->word);

	if (w_state(w) == RESIL_STATE_CLOSED && w_gen(w) == gen)
		resil_breaker_priv_move(x, b, &w, RESIL_STATE_OPEN, 0, why, value);
}

/* ---- windows ------------------------------------------------------------ */

static bool count_counters(bk_t *b, const struct resil_breaker_conf *c, uint32_t old, uint32_t code,
			   bool judge, uint32_t *why, uint64_t *value);
static BK_COLD void count_after(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				uint32_t gen, uint32_t old, uint32_t code);

/* Empty the window: each slot exchanged to EMPTY with its counters
 * adjusted, the same steps as a record, so counters stay equal to the
 * slots' histogram even against a straggling recorder. Rare path. */
void resil_breaker_priv_window_reset(bk_t *b, const struct resil_breaker_conf *c)
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

bool resil_breaker_priv_over_threshold(const struct resil_breaker_conf *c,
				       const struct resil_breaker_counts *k, int64_t min,
				       uint32_t *why, uint64_t *value)
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

void resil_breaker_priv_time_sum(bk_t *b, const struct resil_breaker_conf *c, uint64_t tick1,
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
		return resil_breaker_priv_over_threshold(c, &k, c->min_calls ? c->min_calls : 1,
							 why, value);
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
	return resil_breaker_priv_over_threshold(c, &k, min_calls_of(c), why, value);
}

static BK_COLD void count_after(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				uint32_t gen, uint32_t old, uint32_t code)
{
	uint32_t why = 0;
	uint64_t value = 0;

	if (count_counters(b, c, old, code, true, &why, &value))
		closed_open(x, b, gen, why, value);
}

/* ---- the decision ------------------------------------------------------- */

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

		held = resil_breaker_priv_probes_held_since(b, np, w_gen(w), &oldest);
		if (held >= np || held + answered(b, w_gen(w)) >= ho_calls(c)) {
			resil_breaker_priv_half_open_repair(x, b, c, w, false);
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
			resil_breaker_priv_half_open_repair(x, b, c, w, false);
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
			resil_breaker_priv_move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w),
						RESIL_WHY_WAIT_OVER, (uint64_t)wait);
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
	i = resil_breaker_priv_probe_claim(x, b, c, w);
	if (i < 0) {
		resil_breaker_priv_half_open_repair(x, b, c, w, false);
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
			resil_breaker_priv_probe_free(
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
		h = resil_breaker_priv_ho_add(b, c, pm->breaker_gen, code & 2,
					      code & RESIL_BK_SLOW);
	/* answer counted before the slot is freed (breaker_probe.c's top) */
	if (idx < nprobe_of(c))
		resil_breaker_priv_probe_free(
		    b, idx, probe_tag(pm->breaker_gen, RESIL_BK_PROBE_CLIENT(pm->probe_idx)));
	pm->probe_idx = 0;
	pm->flags &= ~RESIL_PERMIT_PROBE;
	if (h)
		resil_breaker_priv_probes_decide(x, b, c, ld_acquire(&b->word), h);
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

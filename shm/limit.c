/* SPDX-License-Identifier: MIT */
/*
 * limit.c - the rate limiter: GCRA in one word, an exact sliding window,
 * keyed tables with eviction (the table itself: limit_keyed.c).
 *
 * Size: above 900 lines on purpose: the algorithms' word operations, the
 * sliding ring and the component's acquire share static inline helpers
 * on the hot path, and the design below is one argument (the keyed
 * table's code, cut along its own section, is limit_keyed.c).
 *
 * GCRA (limit.algorithm = gcra, the default)
 *   One 64-bit word, the theoretical arrival time (TAT, CLOCK_MONOTONIC ns).
 *   T = emission interval = period / count (integer ns: the truncation
 *   makes the limiter faster by < 1 ns per permit, a relative error below
 *   1 / T); tau = T * burst. n permits at time now:
 *     ntat = max(tat, now) + n * T;  wait = ntat - tau - now
 *   wait <= 0 admits (CAS tat -> ntat); 0 < wait <= limit.wait reserves
 *   (the same CAS; the caller sleeps wait ns, RESIL_PERMIT_LIMIT_WAIT);
 *   otherwise the call is rejected WITHOUT writing anything and wait is the
 *   exact Retry-After. From idle (tat <= now) exactly `burst` single
 *   permits pass at once, then one every T.
 *   Translations (docs/configuration.md's tables):
 *     token bucket, capacity C, refill R per second -> rate = R/s, burst = C
 *     limit L per period P (Resilience4j)           -> rate = L/P, burst = L
 *   Both admit up to 2L - 1 inside the first period from idle (L at once,
 *   then one every P/L; the 2L-th at its closing instant): twice the
 *   limit in a span of one period. `sliding` never does.
 *   Linearization point: the successful CAS (admission) or the load of the
 *   word whose value made the decision (rejection).
 *
 * Sliding window (limit.algorithm = sliding, unkeyed): never more than
 * `count` admissions in any half-open span [a, a + period).
 *   A ring of N = count 64-bit slots holds admission times, and a sequence
 *   word S (admissions so far) points at the slot of the oldest. Admission
 *   at t replaces, by CAS, a slot whose time v satisfies v <= t - period
 *   with t (n permits: n slots, all with the same time).
 *   Proof: along the history of one slot each stored time is >= the one it
 *   replaced + period, so two admissions recorded in the same slot are at
 *   least a period apart. N + 1 admissions inside a span shorter than a
 *   period would need, by pigeonhole, two of them in one slot. QED. The
 *   argument uses nothing but the CAS on the slot: S is only a hint that
 *   finds the oldest slot in O(1), and a process killed anywhere (even
 *   between the slot CAS and the S advance) cannot break the bound; it can
 *   leave S one behind, which the next caller detects (the slot S points at
 *   is newer than the next one) and repairs by advancing S.
 *   Reservation works the same with t' = max(t, v + period) <= t + wait.
 *   Times are stored biased by 2^62 so a zeroed slot reads "never".
 *
 * Keyed limiters (limit.keys = N): a table of N/2 buckets of 4 entries of
 *   16 bytes (one cache line per bucket): 32 bytes of table per key of
 *   capacity (64 bytes for N = 1, one line). An entry is a 64-bit
 *   fingerprint, SipHash-2-4 of the key under the segment's key
 *   (cfg->hash_k0/k1, a fixed key when there is no segment), and the
 *   64-bit state of that key (GCRA TAT, or the sliding-approx window word).
 *   Every key has two buckets: a new key goes to its first bucket b1 while
 *   b1 has room, else to b2, so a lookup mostly reads one line (at the
 *   table's full 50% load about 4% of keys sit in b2 and 0.4% further, on
 *   an overflow chain, below; filling the less loaded of the two would put
 *   27% in b2, a second line waited for on every fourth decision, to make
 *   chains rarer still).
 *   b1 comes from fingerprint bits 31..62 (limit_priv.h chain_init), so
 *   every bucket is some key's first.
 *   Lookups are lock-free; a bucket's four fingerprints are compared at
 *   once into a mask (which entry holds a key is as random as the keys: a
 *   branch per entry mispredicted on nearly every lookup), b1's first, so
 *   b2's line is waited for only when the key is not in b1. A client's
 *   call whose key is in b1 or b2 is decided without the decision context
 *   (resil_limit_acquire_keyed; any other key, a new one included, takes
 *   resil_limit_acquire). Two different keys share a fingerprint (63 bits)
 *   with probability 2^-63 per pair: they would share a state.
 *   When both buckets are full and fewer than N keys are in use, the key
 *   goes on along a chain of following buckets marked FP_OVF (see
 *   resil_limit_priv_key_find): no key is lost or evicted while the table is under
 *   capacity.
 *   Insert: CAS the fingerprint into an EMPTY entry (while fewer than N
 *   keys are in use), a TOMB, or evict: an idle key (its state equals a
 *   fresh one: nothing is lost), else the least recently used key of the
 *   two buckets that is not being limited right now (smallest TAT / lowest
 *   weighted count). A key that is being limited is never evicted (evicting
 *   it would reset an abuser); when only such keys remain,
 *   limit.when_full decides (reject by default) and full_rejects /
 *   full_admits count it (also after INSERT_TRIES lost claim races in a
 *   row), and RESIL_EV_KEYS_FULL goes into the event ring, at most once a
 *   second per policy (full_event_ns, below). An eviction is counted in
 *   the table (evictions) and in the policy's counters
 *   (RESIL_STAT_EVICTIONS, for metrics). At capacity only the key's own
 *   two buckets are searched for a victim; idle keys elsewhere are freed
 *   by the daemon's sweep (keys idle for SWEEP_SLACK become TOMBs at the
 *   next tick), which lowers `used`.
 *   An empty key (a key of length 0; a NULL key is the unkeyed word) has
 *   no entry: limit.empty_key admits it holding nothing (the default, as
 *   nginx's limit_req) or rejects it, and empty_keys counts it
 *   (empty_key, below).
 *   A keyed limiter called without a key limits those calls together, on
 *   the unkeyed word.
 *   One key, one entry: after a claim the inserter re-reads its chain
 *   (claims and re-reads are seq_cst, so of two processes inserting the
 *   same key at once at least one sees the other); of two entries with the
 *   same fingerprint the one earlier in probe order stays, the later one is
 *   folded into it (max of the states) and turned into a TOMB. Crash
 *   window: an inserter killed between its claim and its re-read, whose
 *   claim the other inserter missed, leaves a twin that lookups never
 *   reach (they stop at the first holder); the daemon's maintenance folds
 *   it at the next tick.
 *   Bounded errors, all on rare races: a key inserted by two processes at
 *   once may forget the admissions made through the losing entry before
 *   the fold (max, not sum: in practice at most one); an admission racing
 *   with the eviction of its own idle key is lost (the key regains that one
 *   permit); a new key that replaced a cold one may inherit, for at most
 *   tau + limit.wait, the victim's state if the reset CAS lost a race
 *   (conservative).
 *   `used` counts keys in the table, and capacity is taken from it before
 *   a key is added (fetch_add, given back when over limit.keys or when the
 *   claim fails), so concurrent inserters never hold more than limit.keys
 *   keys; -1 when an entry becomes a TOMB. Crash window: a writer killed
 *   between taking capacity and its claim leaves `used` one high (one key
 *   less fits); the daemon recounts the table in maintenance and repairs
 *   it when no insert ran during the count.
 *
 * Sliding-approx (limit.algorithm = sliding-approx, keyed or not; a keyed
 * `sliding` runs it too; limit.burst and limit.wait do not apply):
 *   a sliding-window counter in one word: 24 bits of fixed-window index
 *   (now / period, modulo 2^24), 20 bits count of the current window, 20
 *   bits count of the previous one. n permits at e ns into the window pass
 *   iff prev * (period - e) / period + cur + n <= count (exact integer
 *   arithmetic). Worst-case error: the estimate assumes the previous
 *   window's admissions were spread evenly. In any span of one period the
 *   admissions are at most count + floor(prev * e / period) <= 2 * count - 1
 *   (all of the previous window's admissions at its very end, then the
 *   current window filling as the weight decays); it can also admit less
 *   than count when they came early. Tested: no span ever holds more than
 *   2 * count - 1, and the adversarial pattern reaches 2 * count - 1. A window index that wraps
 * (2^24 idle periods) reads as one window old for one period: conservative.
 *
 * Clock. GCRA needs the time on every call; clock_gettime costs several
 *   atomics, CLOCK_MONOTONIC_COARSE a fraction of one at a resolution of
 *   milliseconds (same time base; floor/clock_monotonic and
 *   floor/clock_coarse against floor/fetch_add). When T >=
 *   RESIL_LIMIT_COARSE_FACTOR (16) x the coarse resolution (queried once
 *   per process: resil_clock_coarse_resolution_ns) the coarse reading is
 *   used, unless the call already holds a precise
 *   one (ctx->now). A coarse reading lags the precise time by less than
 *   one resolution r: the limiter then admits at most floor((elapsed + r)
 *   / T) + burst in any interval, i.e. at most 1/16 of a permit interval
 *   early, and reports Retry-After up to r (<= T/16) late. Every process
 *   of the host makes the same choice (same configuration, same
 *   resolution). With a manual clock both readings are the clock's.
 *   Time that appears to go backwards (a stale reading: the process was
 *   descheduled after reading the clock, or a coarse reading next to a
 *   precise one) is clamped: GCRA uses max(tat, now); a reported wait is
 *   capped at what any writer can legitimately have set (tau + wait +
 *   n*T; sliding: period + wait); sliding-approx reads a word one window
 *   ahead as the start of that window (a word further off reads as
 *   fresh). A TAT or ring time further ahead than any writer can set
 *   (corruption: every client can write the segment; it would block the
 *   limiter for ever) is healed by the client that meets it: a TAT more
 *   than tau + wait + HEAL_SLACK (10 s) ahead of its reading is set
 *   to now + tau (full at now), a ring time more than wait + HEAL_SLACK
 *   ahead to now + wait (an admission at the latest time any writer can
 *   have recorded, so the slot's history stays increasing and the
 *   sliding proof holds). Both are conservative; a false heal
 *   needs a reading 10 s stale (the process stalled that long between
 *   reading the clock and loading the word) and then credits at most that
 *   stall. The daemon heals nothing: processes that share a manual clock
 *   (tests, simulations) may run ahead of the daemon's clock.
 *
 * Undo (a later component rejected): GCRA gives back n*T: CAS tat ->
 *   max(tat - n*T, now) while tat > now. Exact when nothing else happened
 *   in between; concurrent admissions stay correct (the later ones built
 *   on our increment; removing it shifts them as if we had never come).
 *   Bounded error: if the limiter drained to idle and was re-entered
 *   between the admission and the undo (more than T later), up to n*T of
 *   credit too much is given back (n extra permits once); a stale-reader
 *   race can leave the TAT a few ns high (conservative). Sliding: the
 *   slots claimed hold t' and are set back to t' - period, which frees
 *   them for every reader at a time >= t' and keeps the proof (the next
 *   claim is >= t'). Sliding-approx: the count of the window admitted in is
 *   decremented (the previous count if the window turned since). Keyed
 *   undo re-derives the fingerprint and does nothing if the entry changed
 *   hands.
 *
 * Dry run (limit.dry_run = yes, nginx's limit_req_dry_run): every call is
 *   decided exactly as above, on the same words, and a call the decision
 *   rejects with RESIL_REJECT_LIMITED (rate exceeded, or a full keyed
 *   table with limit.when_full = reject) is admitted instead. The state is
 *   left as that rejection leaves it (the word unwritten; full_rejects and
 *   RESIL_EV_KEYS_FULL as usual: they say what the limiter decided), the
 *   permit holds nothing of the limiter (as when_full = admit: key_idx 0,
 *   no RESIL_PERMIT_LIMIT, so undo and release give nothing back), its
 *   wait is 0, and dry_run_rejects counts it. limit.wait reserves nothing
 *   under dry run (the rate is not limited, so nobody sleeps for it): the
 *   decision is made as if limit.wait were 0 (struct lp's `grant`), and a
 *   call that would have waited is counted and goes at once; the bounds
 *   that clamp and heal still use limit.wait, since states written before
 *   a live switch to dry run can hold reservations. -E2BIG (more permits
 *   than the configuration can ever give) stays an error. The check sits
 *   on the rejection branch: an admission costs what it costs without dry
 *   run (plus one test of limit.wait, already in a register).
 *
 * Global scope (policy.scope = global, GCRA only: conf.c). Keyed: no
 *   lease; each admission adds its permits to the entry's counter after
 *   the table (one relaxed add, behind a test of limit.global), and the
 *   daemon publishes and charges them (limit_global.c). Unkeyed: the
 *   daemon leases the host a share of the fleet's rate (daemon/cluster.c)
 *   and writes it into line 2: lease_ns (the share's emission interval, 0
 *   for no share), lease_expiry_ns (the lease's end on this host's
 *   CLOCK_MONOTONIC, taken no later than the end Redis granted) and
 *   fallback_ns (what applies past it: the configured rate, a rejection,
 *   or a share of the fleet's rate), and the fallback's own end,
 *   fallback_until_ns, past which after_ns applies (0: reject): a daemon
 *   that dies leaves its clients on a fallback that ends when Redis stops
 *   holding that share for its host. Each decision
 *   loads the expiry (acquire) and then the interval it covers; the daemon
 *   stores the interval first and the expiry last (release), so a client
 *   that sees an expiry sees an interval at least as new, and a share
 *   lowered by the daemon is applied before any expiry that follows it.
 *   A client past the expiry falls back on its own: a stopped or dead
 *   daemon cannot leave its host on a share Redis has handed to others.
 *   The GCRA runs on the same TAT with T replaced, and tau kept (burst x
 *   the configured interval, at least the share's T): limit.burst is the
 *   fleet's, each host's share of it its share of the rate (the hosts
 *   together burst at most limit.burst + one permit each). A changed
 *   share changes the rate from the next permit on. A TAT ahead
 *   of now by more than tau + limit.wait (debt run up under a smaller
 *   share, whose T was longer) is cut to now + tau by the heal path with
 *   no slack: the host is then full and goes on at its new share. Cost: two
 *   loads of a line the daemon writes once per cluster interval (one
 *   cache miss per interval per CPU), and no store.
 *
 * Who writes what. Line 0 (the hot word), the sliding ring and the keyed
 *   table: every client, by CAS, as above. Line 1 (used, evictions,
 *   full_rejects, full_admits, merges, heals, full_event_ns,
 *   dry_run_rejects): clients, on rare events (and on every would-be
 *   rejection under dry run), with relaxed RMWs; `used` gates inserts and
 *   the daemon repairs it (above), full_event_ns elects the process that
 *   pushes an event (resil_limit_priv_keys_full_event), the others are statistics that the
 *   daemon and observers read with relaxed loads (resil_limit_info).
 *   Line 2: the daemon only (maintenance, the lease). A client killed anywhere around
 *   a dry-run count leaves nothing to repair: the count is one fetch_add,
 *   and a call killed before it never returned (at most that one
 *   would-be rejection goes uncounted).
 *
 * Memory order. Every limiter word is self-contained: it publishes no
 * other data, and each algorithm only needs the atomicity of one RMW and
 * the modification order of one word. So loads and CAS are relaxed, except
 * the keyed-table claims, FP_OVF marks and the re-reads after them
 * (seq_cst, above: a mark is set before the claim it leads to, so a load
 * ordered after the claim also sees the marks on the way to it), and the
 * fingerprint loads of lookups (acquire, pairs with the claim and marks).
 *
 * Nothing here allocates, locks, logs or makes a syscall on the hot path
 * (the first coarse-clock decision of a process queries clock_getres once).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "limit.h"
#include "limit_global.h"
#include "limit_priv.h"
#include "parse.h"
#include "resil.h"
#include "stats.h"

/* ---------------------------------------------------------------- math */

/* a * b <= c * d, exactly, for unsigned 64-bit operands. */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
	uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
	uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
	uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;

	*lo = (mid << 32) | (uint32_t)ll;
	*hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

static bool mul_le(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	uint64_t h1, l1, h2, l2;

	mul64(a, b, &h1, &l1);
	mul64(c, d, &h2, &l2);
	return h1 < h2 || (h1 == h2 && l1 <= l2);
}

/* floor(a * b / c), c > 0, the result known to fit in 64 bits. */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t hi, lo, q;

	mul64(a, b, &hi, &lo);
	if (hi == 0)
		return lo / c;
	q = (uint64_t)((long double)a * (long double)b / (long double)c);
	/* correct the float estimate to the exact floor */
	while (q > 0 && !mul_le(q, c, a, b))
		q--;
	while (mul_le(q + 1, c, a, b))
		q++;
	return q;
}

/* ---------------------------------------------------------------- GCRA */

static inline int gcra_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	int64_t inc = p->T * (int64_t)p->n;
	uint64_t cur;

	/* two processes on one limiter: one transfer of the word per decision
	 * (mp/limit.admit, 2 processes: 17.6 M/s, 14.2 without) */
	resil_prefetch_write(w);
	cur = ld_relaxed(w);

	for (;;) {
		int64_t tat = (int64_t)cur;
		int64_t from = tat > p->now ? tat : p->now;

		/* The heal check first, unsigned (exact: from >= now): a TAT
		 * further ahead than any writer can set it (corruption, or a
		 * client's write: it may hold INT64_MAX) is healed before any
		 * arithmetic with it could overflow (see the top). Same
		 * condition as d > max_wait + inc + HEAL_SLACK below. */
		if (RESIL_UNLIKELY((uint64_t)from - (uint64_t)p->now >
				   (uint64_t)(p->max_wait + p->tau + p->slack))) {
			if (cas_relaxed(w, &cur, (uint64_t)(p->now + p->tau)))
				faa_relaxed(p->heals, 1);
			*wait = p->max_wait + p->tau + inc;
			return RESIL_REJECT_LIMITED;
		}

		int64_t ntat = from + inc;
		int64_t d = ntat - p->tau - p->now;

		if (d > p->grant) {
			*wait = resil_min64(d, p->max_wait + p->tau + inc);
			return RESIL_REJECT_LIMITED;
		}
		if (cas_relaxed(w, &cur, (uint64_t)ntat)) {
			*wait = d > 0 ? d : 0;
			*stamp = ntat;
			return 0;
		}
	}
}

static void gcra_give(ra64 *w, const struct lp *p)
{
	int64_t inc = p->T * (int64_t)p->n;
	uint64_t cur = ld_relaxed(w);

	for (;;) {
		int64_t tat = (int64_t)cur;

		if (tat <= p->now)
			return; /* idle already: nothing to give back */
		if (cas_relaxed(w, &cur, (uint64_t)resil_max64(tat - inc, p->now)))
			return;
	}
}

static bool gcra_idle(uint64_t v, const struct lp *p)
{
	return (int64_t)v <= p->now;
}

/* time until one permit passes (<= 0: now) */
static int64_t gcra_wait1(uint64_t v, const struct lp *p)
{
	int64_t tat = (int64_t)v;
	uint64_t ahead = tat > p->now ? (uint64_t)tat - (uint64_t)p->now : 0;

	/* unsigned, capped: a TAT any client may have written overflows nothing */
	if (ahead > (uint64_t)(p->max_wait + p->tau + HEAL_SLACK))
		ahead = (uint64_t)(p->max_wait + p->tau + HEAL_SLACK);
	return (int64_t)ahead + p->T - p->tau;
}

/* ------------------------------------------------- sliding-approx word */

struct ax {
	uint64_t win; /* the window the decision is made in */
	int64_t e;    /* ns into it */
	uint32_t cur, prev;
};

static inline uint64_t ax_pack(uint64_t win, uint32_t cur, uint32_t prev)
{
	return (win & AX_WMASK) << 40 | (uint64_t)cur << 20 | prev;
}

static void ax_view(uint64_t v, const struct lp *p, struct ax *a)
{
	int64_t now = p->now < 0 ? 0 : p->now;
	uint64_t win = (uint64_t)now / (uint64_t)p->P;
	uint64_t sw = v >> 40;
	uint32_t c = (uint32_t)(v >> 20) & AX_CMASK, pv = (uint32_t)v & AX_CMASK;

	a->win = win;
	a->e = now - (int64_t)(win * (uint64_t)p->P);
	if (sw == (win & AX_WMASK)) {
		a->cur = c;
		a->prev = pv;
	} else if (sw == ((win - 1) & AX_WMASK)) {
		a->cur = 0;
		a->prev = c;
	} else if (sw == ((win + 1) & AX_WMASK)) {
		/* our reading lags a window behind a writer's: decide at the
		 * start of that window (clamped, conservative) */
		a->win = win + 1;
		a->e = 0;
		a->cur = c;
		a->prev = pv;
	} else {
		a->cur = 0;
		a->prev = 0;
	}
}

static bool ax_fits(const struct ax *a, const struct lp *p, uint32_t n)
{
	uint64_t P = (uint64_t)p->P;

	if ((uint64_t)a->cur + n > p->L)
		return false;
	return mul_le(a->prev, P - (uint64_t)a->e, p->L - a->cur - n, P);
}

/* time until n permits fit, for a view where they do not */
static int64_t ax_wait(const struct ax *a, const struct lp *p, uint32_t n)
{
	uint64_t P = (uint64_t)p->P, q;
	int64_t d;

	if ((uint64_t)a->cur + n <= p->L) {
		q = a->prev ? muldiv(p->L - a->cur - n, P, a->prev) : P;
		if (q > P - (uint64_t)a->e)
			q = P - (uint64_t)a->e;
		return (int64_t)(P - (uint64_t)a->e - q);
	}
	d = (int64_t)(P - (uint64_t)a->e);
	if (a->cur) {
		q = muldiv(p->L - n, P, a->cur);
		if (q < P)
			d += (int64_t)(P - q);
	}
	return d;
}

static int ax_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	uint64_t cur = ld_relaxed(w);
	struct ax a;

	for (;;) {
		ax_view(cur, p, &a);
		if (!ax_fits(&a, p, p->n)) {
			*wait = resil_min64(ax_wait(&a, p, p->n), 2 * p->P);
			return RESIL_REJECT_LIMITED;
		}
		if (cas_relaxed(w, &cur, ax_pack(a.win, a.cur + p->n, a.prev))) {
			*wait = 0;
			*stamp = (int64_t)a.win;
			return 0;
		}
	}
}

static void ax_give(ra64 *w, uint64_t win, uint32_t n)
{
	uint64_t cur = ld_relaxed(w), nv;

	for (;;) {
		uint64_t sw = cur >> 40;
		uint32_t c = (uint32_t)(cur >> 20) & AX_CMASK, pv = (uint32_t)cur & AX_CMASK;

		if (sw == (win & AX_WMASK))
			c -= c < n ? c : n;
		else if (sw == ((win + 1) & AX_WMASK))
			pv -= pv < n ? pv : n;
		else
			return;
		nv = sw << 40 | (uint64_t)c << 20 | pv;
		if (cas_relaxed(w, &cur, nv))
			return;
	}
}

/* ------------------------------------------------ per-word dispatching */

inline int resil_limit_priv_word_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_take(w, p, wait, stamp);
	return ax_take(w, p, wait, stamp);
}

static void word_give(ra64 *w, const struct lp *p, int64_t stamp)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		gcra_give(w, p);
	else
		ax_give(w, (uint64_t)stamp, p->n);
}

/* The state equals a fresh one: evicting it loses nothing. */
bool resil_limit_priv_word_idle(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_idle(v, p);
	ax_view(v, p, &a);
	return a.cur == 0 && a.prev == 0;
}

/* Time until one permit passes: <= 0 means the key is not being limited. */
int64_t resil_limit_priv_word_wait1(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_wait1(v, p);
	ax_view(v, p, &a);
	return ax_fits(&a, p, 1) ? 0 : ax_wait(&a, p, 1);
}

/* Eviction order among keys not being limited: least recently used first. */
int64_t resil_limit_priv_word_age(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)v;
	ax_view(v, p, &a);
	return (int64_t)a.cur + (int64_t)muldiv(a.prev, (uint64_t)(p->P - a.e), (uint64_t)p->P);
}

/* The sweep's mark on an entry it found claimed with no permit taken:
 * GCRA reads it as a TAT far in the past, sliding-approx as a window long
 * gone with no counts, so any take starts fresh from it. */
#define SWEEP_MARK (1ULL << 63)

/* Idle, and last written at least SWEEP_SLACK ago. */
static bool word_swept(uint64_t v, const struct lp *p)
{
	uint64_t win, sw;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)v <= p->now - SWEEP_SLACK;
	if (!resil_limit_priv_word_idle(v, p))
		return false;
	/* the window written last ended at least SWEEP_SLACK ago */
	win = (uint64_t)(p->now < 0 ? 0 : p->now) / (uint64_t)p->P;
	sw = v >> 40;
	if (v == 0)
		return true; /* never written, or reset */
	return (uint64_t)p->P * (((win & AX_WMASK) - sw) & AX_WMASK) >=
	       (uint64_t)(p->P + SWEEP_SLACK);
}

/* Two states of one key, folded (max: never more permissive than either). */
uint64_t resil_limit_priv_word_merge(uint64_t x, uint64_t y, const struct lp *p)
{
	struct ax a, b;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)x > (int64_t)y ? x : y;
	ax_view(x, p, &a);
	ax_view(y, p, &b);
	if (a.win != b.win)
		return a.win > b.win ? x : y;
	return ax_pack(a.win, a.cur > b.cur ? a.cur : b.cur, a.prev > b.prev ? a.prev : b.prev);
}

/* ---------------------------------------------------------- the clock */

/* A reading of clk for c: coarse when c's interval allows it, else precise
 * (and then also in *precise). */
static inline int64_t limit_read(const struct resil_clock *clk, const struct resil_limit_conf *c,
				 int64_t *precise)
{
	if (c->interval_ns >= RESIL_LIMIT_COARSE_FACTOR * resil_clock_coarse_resolution_ns())
		return resil_clock_now_coarse(clk);
	return *precise = resil_clock_now(clk);
}

static inline int64_t limit_now(struct resil_ctx *x, const struct resil_limit_conf *c)
{
	if (x->now)
		return x->now;
	return limit_read(&x->clock, c, &x->now);
}

static void lp_init(struct lp *p, const struct resil_limit_conf *c, int64_t now, uint32_t n)
{
	p->now = now;
	p->T = c->interval_ns;
	p->tau = c->interval_ns * (int64_t)(c->burst ? c->burst : 1);
	p->max_wait = c->wait_ns;
	p->grant = c->dry_run ? 0 : c->wait_ns; /* dry run reserves nothing (see the top) */
	p->P = c->period_ns;
	p->L = c->count;
	p->n = n ? n : 1;
	p->slack = HEAL_SLACK;
	p->algo = resil_limit_algo(c);
	p->heals = NULL;
}

/* n permits can never be granted by this configuration */
static bool too_many(const struct lp *p)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		return (uint64_t)p->n > (uint64_t)(p->tau + p->max_wait) / (uint64_t)p->T;
	return p->n > p->L;
}

/* ------------------------------------------------------- sliding ring */

/* When a ring slot's admission leaves the window: raw - RING_BIAS + P,
 * saturated. A slot is any client's to write; a value near either end
 * of int64 reads as far ahead (and is healed), never overflows. */
static inline int64_t ring_end(int64_t raw, const struct lp *p)
{
	int64_t v;

	if (__builtin_sub_overflow(raw, RING_BIAS, &v) || __builtin_add_overflow(v, p->P, &v))
		return raw < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
	return v;
}

static int slide_take(struct resil_limit_state *s, const struct lp *p, struct resil_permit_priv *pm)
{
	rai64 *ring = ring_of(s);
	uint32_t N = p->L, n = p->n, k, i;
	int help = 0;
	uint64_t seq;
	int64_t t, v, vi;

again:
	seq = ld_relaxed(&s->word);
	i = (uint32_t)(seq % N);
	t = p->now;
	for (k = 0; k < n; k++) {
		v = ring_end(ld_relaxed(&ring[(i + k) % N]), p);
		if (v > t)
			t = v;
	}
	if (t - p->now > p->grant) {
		if (RESIL_UNLIKELY(t - p->now > p->P + p->max_wait + HEAL_SLACK)) {
			/* a time further ahead than any writer sets: heal it */
			for (k = 0; k < n; k++) {
				rai64 *slot = &ring[(i + k) % N];
				int64_t old = ld_relaxed(slot);

				if (ring_end(old, p) - p->P > p->now + p->max_wait + HEAL_SLACK &&
				    cas_relaxed(slot, &old, p->now + p->max_wait + RING_BIAS))
					faa_relaxed(&s->heals, 1);
			}
		}
		/* S one behind (its advance lost to a race or a crash): the slot
		 * it names is then newer than the next one */
		if (N > n && help < 4) {
			vi = ld_relaxed(&ring[i]);
			if (ld_relaxed(&ring[(i + 1) % N]) < vi) {
				help++;
				cas_relaxed(&s->word, &seq, seq + 1);
				goto again;
			}
		}
		pm->wait_ns = resil_min64(t - p->now, p->P + p->max_wait);
		return RESIL_REJECT_LIMITED;
	}
	/* the claims: each slot by CAS from a time <= t - period to t */
	for (k = 0; k < n; k++) {
		rai64 *slot = &ring[(i + k) % N];
		int64_t old = ld_relaxed(slot);

		if (ring_end(old, p) > t || !cas_relaxed(slot, &old, t + RING_BIAS)) {
			/* lost a slot to another process: free ours (as undo does) */
			while (k-- > 0) {
				int64_t mine = t + RING_BIAS;

				cas_relaxed(&ring[(i + k) % N], &mine, t - p->P + RING_BIAS);
			}
			goto again;
		}
	}
	/* a crash here leaves S behind: the next caller repairs it (above) */
	cas_relaxed(&s->word, &seq, seq + n);
	pm->key_idx = i + 1;
	pm->limit_tat = (uint64_t)t;
	pm->wait_ns = t - p->now;
	return 0;
}

static void slide_give(struct resil_limit_state *s, const struct lp *p,
		       const struct resil_permit_priv *pm)
{
	rai64 *ring = ring_of(s);
	int64_t t = (int64_t)pm->limit_tat;
	uint32_t k, i = pm->key_idx - 1;

	if (!pm->key_idx || i >= p->L)
		return;
	for (k = 0; k < p->n; k++) {
		int64_t mine = t + RING_BIAS;

		cas_relaxed(&ring[(i + k) % p->L], &mine, t - p->P + RING_BIAS);
	}
}

int64_t resil_limit_key_entry(const struct resil_limit_conf *c, void *st, uint64_t fp, int64_t now,
			      bool insert)
{
	struct resil_limit_state *s = lstate(st);
	struct resil_ctx x = {0};
	struct chain ch;
	struct lp p;
	int64_t idx, full_wait;

	if (!c->keys || fp < 2 || (fp & FP_OVF))
		return -1;
	chain_init(&ch, fp, c);
	idx = resil_limit_priv_key_find_bounded(table_of(s), &ch, fp);
	if (idx >= 0 || idx == -2 || !insert)
		return idx >= 0 ? idx : -1;
	lp_init(&p, c, now, 1);
	p.heals = &s->heals;
	return resil_limit_priv_key_get(&x, s, c, &p, fp, &ch, &full_wait);
}

/* ------------------------------------------------------ the component */

uint64_t resil_limit_state_size(const struct resil_limit_conf *c)
{
	uint64_t size = sizeof(struct resil_limit_state);

	if (c->keys)
		size +=
		    (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET * sizeof(struct resil_limit_entry) +
		    resil_limit_global_counts_size(c);
	else if (c->algorithm == RESIL_LIMIT_SLIDING)
		size += resil_align_up((uint64_t)c->count * sizeof(int64_t), RESIL_HOT_ALIGN);
	return size;
}

void resil_limit_state_init(void *st, const struct resil_limit_conf *c, int64_t now)
{
	struct resil_limit_state *s = lstate(st);
	uint64_t i, n;

	resil_limit_state_init_zeroed(st, c, now);
	if (c->keys) {
		struct resil_limit_entry *t = table_of(s);

		n = (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET;
		for (i = 0; i < n; i++) {
			st_relaxed(&t[i].fp, RESIL_LIMIT_FP_EMPTY);
			st_relaxed(&t[i].st, 0);
		}
		if (c->global)
			for (i = 0; i < n; i++)
				st_relaxed(&resil_limit_global_counts(c, s)[i], 0);
	} else if (c->algorithm == RESIL_LIMIT_SLIDING) {
		for (i = 0; i < c->count; i++)
			st_relaxed(&ring_of(s)[i], 0); /* biased: "never" */
	}
}

/* resil_limit_state_init's header words; the table, its global counts
 * and the sliding ring are what a zeroed block holds already (an empty
 * entry is RESIL_LIMIT_FP_EMPTY, 0; the ring is biased: 0 is "never") */
void resil_limit_state_init_zeroed(void *st, const struct resil_limit_conf *c, int64_t now)
{
	struct resil_limit_state *s = lstate(st);

	(void)now;
	(void)c;
	RESIL_STATIC_ASSERT(RESIL_LIMIT_FP_EMPTY == 0, "an empty entry is a zero one");
	st_relaxed(&s->word, 0);
	st_relaxed(&s->used, 0);
	st_relaxed(&s->evictions, 0);
	st_relaxed(&s->full_rejects, 0);
	st_relaxed(&s->full_admits, 0);
	st_relaxed(&s->merges, 0);
	st_relaxed(&s->heals, 0);
	st_relaxed(&s->full_event_ns, 0);
	st_relaxed(&s->dry_run_rejects, 0);
	st_relaxed(&s->empty_keys, 0);
	st_relaxed(&s->swept, 0);
	st_relaxed(&s->repairs, 0);
	st_relaxed(&s->ticks, 0);
	/* no lease: a global policy runs at the configured rate until its
	 * daemon's first exchange writes one */
	resil_limit_lease_set(st, 0, 0, 0);
	resil_limit_fallback_end_set(st, 0, 0);
	st_relaxed(&s->fleet_hosts, 0);
}

bool resil_limit_same_shape(const struct resil_limit_conf *a, const struct resil_limit_conf *b)
{
	if (a->keys != b->keys || a->algorithm != b->algorithm ||
	    (a->keys && a->global != b->global))
		return false;
	/* the exact ring has one slot per admission of the period */
	if (!a->keys && a->algorithm == RESIL_LIMIT_SLIDING && a->count != b->count)
		return false;
	/* sliding-approx words count fixed windows of one period */
	if (resil_limit_algo(a) == RESIL_LIMIT_SLIDING_APPROX && a->period_ns != b->period_ns)
		return false;
	return true;
}

/* Single-threaded (the new block is not published yet): put an old key
 * into the new table with its state. */
static void carry_key(struct resil_limit_state *ns, const struct resil_limit_conf *nc, uint64_t fp,
		      uint64_t v)
{
	struct resil_limit_entry *t = table_of(ns);
	struct chain ch;
	int64_t pick = -1;
	uint32_t k, j, nbk;
	uint64_t seen;

	if (ld_relaxed(&ns->used) >= nc->keys)
		return;
	chain_init(&ch, fp, nc);
	nbk = ch.nb > 1 ? 2 : 1;
	/* the first EMPTY entry of b1, then of b2 (as resil_limit_priv_key_get fills) */
	for (k = 0; k < nbk && pick < 0; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET && pick < 0; j++) {
			int64_t e = chain_bucket(&ch, k) * RESIL_LIMIT_BUCKET + j;

			if (fp_key(ld_relaxed(&t[e].fp)) == RESIL_LIMIT_FP_EMPTY)
				pick = e;
		}
	}
	if (pick < 0)
		pick = resil_limit_priv_overflow_slot(t, &ch, &seen);
	if (pick < 0)
		return;
	st_relaxed(&t[pick].fp, (ld_relaxed(&t[pick].fp) & FP_OVF) | fp);
	st_relaxed(&t[pick].st, v);
	faa_relaxed(&ns->used, 1);
}

void resil_limit_carry(void *nst, const struct resil_limit_conf *nc, const void *ost,
		       const struct resil_limit_conf *oc, int64_t now)
{
	struct resil_limit_state *ns = lstate(nst);
	struct resil_limit_state *os = lstate((void *)(uintptr_t)ost);
	struct lp p;
	uint64_t i, n;

	/* another algorithm: its state means nothing here (fresh) */
	if (resil_limit_algo(nc) != resil_limit_algo(oc))
		return;
	if (resil_limit_algo(nc) == RESIL_LIMIT_SLIDING_APPROX && nc->period_ns != oc->period_ns)
		return;
	lp_init(&p, oc, now, 1);
	if (nc->keys && oc->keys) {
		/* a new capacity: keys that hold information move over (the
		 * admissions made on the old block until the swap are lost) */
		struct resil_limit_entry *t = table_of(os);

		n = (uint64_t)nbuckets(oc) * RESIL_LIMIT_BUCKET;
		for (i = 0; i < n; i++) {
			uint64_t f = fp_key(ld_relaxed(&t[i].fp)), v = ld_relaxed(&t[i].st);

			if (f > RESIL_LIMIT_FP_TOMB && !resil_limit_priv_word_idle(v, &p))
				carry_key(ns, nc, f, v);
		}
	} else if (!nc->keys && !oc->keys && nc->algorithm == RESIL_LIMIT_SLIDING) {
		/* another count: the newest admissions keep their times, so the
		 * bound holds across the change */
		rai64 *ro = ring_of(os), *rn = ring_of(ns);
		uint64_t seq = ld_relaxed(&os->word);
		uint32_t m = oc->count < nc->count ? oc->count : nc->count, k;

		for (k = 1; k <= m; k++)
			st_relaxed(&rn[m - k], ld_relaxed(&ro[(seq + oc->count - k) % oc->count]));
		st_relaxed(&ns->word, m);
	} else if (!nc->keys && !oc->keys) {
		st_relaxed(&ns->word, ld_relaxed(&os->word));
	}
}

/*
 * limit.dry_run: the call just rejected goes (see the top). The state is as
 * the rejection left it; the permit holds nothing of the limiter.
 * dry_run_rejects: line 1, clients, relaxed (a statistic: it orders nothing).
 */
static int dry_run_admit(struct resil_limit_state *s, struct resil_permit_priv *pm)
{
	faa_relaxed(&s->dry_run_rejects, 1);
	pm->key_idx = 0;
	pm->limit_tat = 0;
	pm->wait_ns = 0;
	return 0;
}

/*
 * A keyed limiter's call with an empty key (a key of length 0: an nginx
 * variable with no value): no entry of the table is the key of everyone
 * without one, so limit.empty_key decides. admit: the permit holds
 * nothing of the limiter; reject: RESIL_REJECT_LIMITED without a wait
 * (time gives an empty key no permit), which a dry run admits. The lean
 * keyed path (resil_limit_acquire_keyed) pays nothing for it: no entry is
 * ever made for the empty key, so its lookup misses and asks this path.
 * empty_keys: line 1, clients, relaxed (a statistic: it orders nothing).
 */
static int empty_key(struct resil_limit_state *s, const struct resil_limit_conf *c,
		     struct resil_permit_priv *pm)
{
	faa_relaxed(&s->empty_keys, 1);
	pm->key_idx = 0;
	pm->limit_tat = 0;
	pm->wait_ns = 0;
	if (!c->empty_key_reject)
		return 0;
	if (c->dry_run)
		return dry_run_admit(s, pm);
	return RESIL_REJECT_LIMITED;
}

/* ------------------------------------------------------ global lease */

void resil_limit_lease_set(void *st, int64_t lease_ns, int64_t expiry_ns, int64_t fallback_ns)
{
	struct resil_limit_state *s = lstate(st);

	/* interval and fallback before the expiry (release): a client that
	 * loads this expiry (acquire) reads them at least as new (see top) */
	st_relaxed(&s->lease_ns, (uint64_t)lease_ns);
	st_relaxed(&s->fallback_ns, (uint64_t)fallback_ns);
	atomic_store_explicit(&s->lease_expiry_ns, (uint64_t)expiry_ns, memory_order_release);
}

void resil_limit_fallback_end_set(void *st, int64_t until_ns, int64_t after_ns)
{
	struct resil_limit_state *s = lstate(st);

	/* after first, the end last (release): a client that loads this end
	 * (acquire) reads an after_ns at least as new */
	st_relaxed(&s->after_ns, (uint64_t)after_ns);
	atomic_store_explicit(&s->fallback_until_ns, (uint64_t)until_ns, memory_order_release);
}

/* Past the lease: the fallback's interval, or after its end the after
 * tier's (0: the configured rate, RESIL_LIMIT_FALLBACK_REJECT: none). A
 * fallback of the configured rate (--cluster-fallback local, or no daemon
 * has leased: embedded mode, no cluster) has no end: its words are read
 * no further. The end is loaded before what it covers (acquire, pairs
 * with resil_limit_fallback_end_set): a fallback_ns read after it is at
 * least as new; one read before a daemon's switch of tier is the older
 * tier's, which holds until the older end. */
static inline int64_t fallback_T(const struct resil_limit_state *s, int64_t now)
{
	int64_t fb = (int64_t)ld_relaxed((ra64 *)&s->fallback_ns), until;

	if (fb == 0)
		return 0;
	until = (int64_t)atomic_load_explicit((ra64 *)&s->fallback_until_ns, memory_order_acquire);
	if (until && now >= until) {
		int64_t a = (int64_t)ld_relaxed((ra64 *)&s->after_ns);

		return a ? a : RESIL_LIMIT_FALLBACK_REJECT;
	}
	return fb;
}

int64_t resil_limit_lease_T(const struct resil_limit_conf *c, const void *st, int64_t now,
			    bool *leased)
{
	const struct resil_limit_state *s = (const struct resil_limit_state *)st;
	int64_t exp =
	    (int64_t)atomic_load_explicit((ra64 *)&s->lease_expiry_ns, memory_order_acquire);
	int64_t T;

	*leased = now < exp;
	if (*leased)
		T = (int64_t)ld_relaxed((ra64 *)&s->lease_ns);
	else if ((T = fallback_T(s, now)) == 0)
		T = c->interval_ns;
	/* any client can write line 2: a value no daemon writes reads as "no
	 * share"; an interval above a day would overflow tau (one unsigned
	 * comparison: T <= 0 wraps above the day) */
	if ((uint64_t)T - 1 >= (uint64_t)86400 * RESIL_NS_PER_S)
		return 0;
	return T < c->interval_ns ? c->interval_ns : T;
}

/* The lease's interval into p (global scope); false: no share now. */
static inline bool lease_apply(struct resil_ctx *x, const struct resil_limit_conf *c,
			       struct resil_limit_state *s, struct lp *p)
{
	int64_t T;

	/* keyed: no lease, the whole per-key rate on every host (limit_global.c) */
	if (!x->rec || x->rec->conf.scope != RESIL_SCOPE_GLOBAL || c->keys)
		return true;
	/* resil_limit_lease_T inline, the common cases first: a live lease
	 * (its T range-checked: any client can write line 2), or past the
	 * expiry with fallback 0, the configuration's own interval (trusted:
	 * lp_init's T and tau stand) */
	if (p->now < (int64_t)atomic_load_explicit(&s->lease_expiry_ns, memory_order_acquire))
		T = (int64_t)ld_relaxed(&s->lease_ns);
	else if ((T = fallback_T(s, p->now)) == 0)
		return true;
	if ((uint64_t)T - 1 >= (uint64_t)86400 * RESIL_NS_PER_S)
		return false;
	T = T < c->interval_ns ? c->interval_ns : T;
	/* limit.burst is the fleet's: tau stays lp_init's (burst x the
	 * configured interval), so a share s of the rate bursts s / rate of
	 * it, and the hosts together the configured burst (each at least
	 * one permit: tau never below the share's T) */
	if (T != p->T) {
		p->T = T;
		if (p->tau < T)
			p->tau = T;
	}
	/* a TAT run ahead under a smaller share (a longer T) is a debt in the
	 * old T's units: past tau + wait it is cut to now + tau (full now,
	 * the next permit one new T later) instead of holding the host back
	 * for seconds after its share grew; what it admits stays within the
	 * share it holds now */
	p->slack = 0;
	return true;
}

/* An acquire's end: a rejection (that a dry run admits instead), or the
 * permit marked as the limiter's. */
static inline int take_end(struct resil_limit_state *s, const struct resil_limit_conf *c,
			   struct resil_permit_priv *pm, int v)
{
	if (v) {
		if (c->dry_run && v == RESIL_REJECT_LIMITED)
			return dry_run_admit(s, pm);
		return v;
	}
	pm->flags |= RESIL_PERMIT_LIMIT;
	if (pm->wait_ns > 0)
		pm->flags |= RESIL_PERMIT_LIMIT_WAIT;
	return 0;
}

int resil_limit_acquire(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			struct resil_permit_priv *pm)
{
	struct resil_limit_state *s = lstate(st);
	int64_t wait = 0, stamp = 0;
	uint64_t fp = 0;
	struct chain ch;
	struct lp p;
	int v;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	if (c->keys && x->key && !x->key_len)
		return empty_key(s, c, pm);
	/* keyed: the key's buckets are asked of memory before the clock is
	 * read, so that the two waits overlap (bench case limit.keyed_1m) */
keyed:
	if (c->keys && x->key) {
		uint64_t k[2];

		resil_limit_key_seeds(x->seg, k);
		fp = resil_limit_priv_key_ask(k, s, c, x->key, x->key_len, &ch);
	} else if (RESIL_UNLIKELY(c->keys)) {
		/* a call without a key: the configured one (limit.default_key),
		 * else a mistake: pooling every such caller in one bucket would
		 * limit them all together */
		if (!c->default_key_len)
			return -EINVAL;
		x->key = c->default_key;
		x->key_len = c->default_key_len;
		goto keyed;
	}
	lp_init(&p, c, limit_now(x, c), pm->limit_permits);
	p.heals = &s->heals;
	if (!lease_apply(x, c, s, &p)) {
		/* no share of the fleet's rate for this host now */
		pm->wait_ns = c->interval_ns;
		if (c->dry_run)
			return dry_run_admit(s, pm);
		return RESIL_REJECT_LIMITED;
	}
	/* one permit always fits (burst >= 1, count >= 1): no division then */
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	pm->key_idx = 0;
	if (c->keys && x->key) {
		v = resil_limit_priv_keyed_take(x, s, c, &p, fp, &ch, pm);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		v = slide_take(s, &p, pm);
	} else {
		v = resil_limit_priv_word_take(&s->word, &p, &wait, &stamp);
		pm->wait_ns = wait;
		pm->limit_tat = (uint64_t)stamp;
	}
	return take_end(s, c, pm, v);
}

bool resil_limit_lean_gcra(const struct resil_limit_conf *c, uint32_t scope)
{
	return !c->keys && resil_limit_algo(c) == RESIL_LIMIT_GCRA && scope != RESIL_SCOPE_GLOBAL;
}

/*
 * resil_limit_acquire for a configuration resil_limit_lean_gcra accepts,
 * from the clock alone: what the general acquire does for it (the same
 * checks, the same clock choice, the same word operation, the same permit
 * fields), without the decision context that it would read only to find
 * out that there is no key and no lease. *now: the precise reading taken
 * (the caller's liveness check reuses it, as it reuses a context's), 0
 * after a coarse one.
 */
int resil_limit_acquire_gcra(const struct resil_clock *clk, const struct resil_limit_conf *c,
			     void *st, struct resil_permit_priv *pm, int64_t *now)
{
	struct resil_limit_state *s = lstate(st);
	int64_t wait = 0, stamp = 0;
	struct lp p;
	int v;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	*now = 0;
	lp_init(&p, c, limit_read(clk, c, now), pm->limit_permits);
	p.heals = &s->heals;
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	pm->key_idx = 0;
	v = gcra_take(&s->word, &p, &wait, &stamp);
	pm->wait_ns = wait;
	pm->limit_tat = (uint64_t)stamp;
	return take_end(s, c, pm, v);
}

bool resil_limit_lean_keyed(const struct resil_limit_conf *c)
{
	return c->keys != 0;
}

/*
 * resil_limit_acquire for a keyed limiter and a key already in its
 * chain's first two buckets (nearly every call once a key has been seen),
 * from the clock, the segment (the table's hash seeds) and the key: the
 * same checks, fingerprint, prefetch, clock choice, entry, word operation
 * and permit fields, without the decision context. A keyed limiter holds
 * no lease (lease_apply admits it as it is). RESIL_LIMIT_ASK: the key is
 * in neither bucket (new, further along its chain, or no room for it);
 * nothing was written, and resil_limit_acquire decides (an insert,
 * eviction or full-table event reads the context).
 */
int resil_limit_acquire_keyed(const struct resil_clock *clk, const struct resil_limit_conf *c,
			      void *st, const uint64_t k[2], const void *key, size_t len,
			      struct resil_permit_priv *pm, int64_t *now)
{
	struct resil_limit_state *s = lstate(st);
	struct chain ch;
	uint64_t fp;
	int64_t idx;
	struct lp p;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	fp = resil_limit_priv_key_ask(k, s, c, key, len, &ch);
	*now = 0;
	lp_init(&p, c, limit_read(clk, c, now), pm->limit_permits);
	p.heals = &s->heals;
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	idx = resil_limit_priv_key_find_pair(table_of(s), &ch, fp);
	if (RESIL_UNLIKELY(idx < 0))
		return RESIL_LIMIT_ASK;
	pm->key_idx = 0;
	return take_end(s, c, pm, resil_limit_priv_keyed_at(s, c, &p, idx, pm));
}

void resil_limit_undo(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
		      struct resil_permit_priv *pm)
{
	struct resil_limit_state *s = lstate(st);
	struct lp p;

	if (!(pm->flags & RESIL_PERMIT_LIMIT))
		return;
	pm->flags &= ~(RESIL_PERMIT_LIMIT | RESIL_PERMIT_LIMIT_WAIT);
	lp_init(&p, c, limit_now(x, c), pm->limit_permits);
	if (!lease_apply(x, c, s, &p))
		return; /* the share went away: nothing to give it back to */
	if (c->keys && x->key) {
		struct resil_limit_entry *e;
		uint64_t idx = pm->key_idx;

		/* admitted by limit.when_full = admit: nothing was taken */
		if (!idx || idx > (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET)
			return;
		e = &table_of(s)[idx - 1];
		if (fp_key(ld_acquire(&e->fp)) != resil_limit_priv_key_fp(x, x->key, x->key_len))
			return; /* the entry changed hands meanwhile */
		word_give(&e->st, &p, (int64_t)pm->limit_tat);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		slide_give(s, &p, pm);
	} else {
		word_give(&s->word, &p, (int64_t)pm->limit_tat);
	}
	pm->key_idx = 0;
	pm->wait_ns = 0;
}

/* A spent permit is spent: nothing to return on completion. */
void resil_limit_release(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 struct resil_permit_priv *pm, int outcome)
{
	(void)x;
	(void)c;
	(void)st;
	(void)outcome;
	pm->flags &= ~(RESIL_PERMIT_LIMIT | RESIL_PERMIT_LIMIT_WAIT);
}

/*
 * Daemon tick, keyed tables only: folds twins (crash window of an insert:
 * a writer killed between its claim and its re-read can leave the same key
 * in two entries if the other inserter missed its claim), frees keys idle
 * for SWEEP_SLACK (TOMB: the race with a client that found the key and has
 * not CASed its state yet needs that client to stall for SWEEP_SLACK) and
 * recounts `used`.
 * Idleness is judged on the daemon's clock: a key whose state lies in that
 * clock's future (clients on a manual clock that runs ahead) is kept.
 * Nothing is healed here (see the top).
 */
/*
 * Pages of the table that were never written (a new block's are holes of
 * the memfd: resil_seg_zero) hold only empty entries, and reading one
 * would give it memory: the sweep asks the kernel which pages hold
 * something (mincore, RES_PAGES at a time) and skips the others. A page
 * it skipped may hold entries after all (swapped out): when the entries
 * counted disagree with `used`, all pages are counted before `used` is
 * repaired (count_keys).
 */
#define RES_PAGES 1024
struct resident {
	const struct resil_limit_entry *t;
	uintptr_t from; /* the first page of vec */
	size_t page;
	bool ok; /* mincore answered for [from, from + RES_PAGES pages) */
	unsigned char vec[RES_PAGES];
};

/* Entry i's page holds something (or the kernel cannot say); asked at
 * the first entry of each page only (else true). */
static bool entry_resident(struct resident *r, uint64_t i, uint64_t n)
{
	uintptr_t e = (uintptr_t)&r->t[i], a = e & ~(uintptr_t)(r->page - 1);
	uintptr_t end = ((uintptr_t)&r->t[n] + r->page - 1) & ~(uintptr_t)(r->page - 1);

	if (i && e - a >= sizeof(r->t[0]))
		return true;
	if (!r->from || a < r->from || a >= r->from + RES_PAGES * r->page) {
		size_t len = end - a < RES_PAGES * r->page ? end - a : RES_PAGES * r->page;

		r->from = a;
		r->ok = mincore((void *)a, len, r->vec) == 0;
	}
	return !r->ok || (r->vec[(a - r->from) / r->page] & 1);
}

static void resident_init(struct resident *r, const struct resil_limit_entry *t)
{
	r->t = t;
	r->from = 0;
	r->page = (size_t)sysconf(_SC_PAGESIZE);
}

/* The last entry on entry i's page (the loop goes on with the next). */
static uint64_t page_last(const struct resident *r, uint64_t i)
{
	return i + r->page / sizeof(r->t[0]) - 1 -
	       ((uintptr_t)&r->t[i] & (r->page - 1)) / sizeof(r->t[0]);
}

/* The entries holding a key: on the pages that hold something, or on
 * every page (a repair's count: this reads them all). */
static uint64_t count_keys(const struct resil_limit_entry *t, uint64_t n, bool every_page)
{
	struct resident res;
	uint64_t live = 0;

	resident_init(&res, t);
	for (uint64_t i = 0; i < n; i++) {
		if (!every_page && !entry_resident(&res, i, n)) {
			i = page_last(&res, i);
			continue;
		}
		live += fp_key(ld_relaxed(&t[i].fp)) > RESIL_LIMIT_FP_TOMB;
	}
	return live;
}

void resil_limit_maintain(struct resil_ctx *x, const struct resil_limit_conf *c, void *st)
{
	struct resil_limit_state *s = lstate(st);
	uint64_t i, n, live = 0, u1, u2;
	struct resident res;
	bool skipped = false;
	struct chain ch;
	int64_t first;
	struct lp p;

	if (c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0)
		return;
	faa_relaxed(&s->ticks, 1);
	if (!c->keys)
		return;
	lp_init(&p, c, resil_clock_now(&x->clock), 1);
	n = (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET;
	u1 = ld_relaxed(&s->used);
	resident_init(&res, table_of(s));
	for (i = 0; i < n; i++) {
		struct resil_limit_entry *e = &table_of(s)[i];
		uint64_t f, v;

		if (!entry_resident(&res, i, n)) {
			/* a page never written: on to the next one */
			skipped = true;
			i = page_last(&res, i);
			continue;
		}
		f = ld_sc(&e->fp);
		if (fp_key(f) <= RESIL_LIMIT_FP_TOMB)
			continue;
		v = ld_relaxed(&e->st);
		/* a twin left by an inserter killed before its re-read (or a key
		 * no lookup can reach): fold it into the entry lookups find */
		chain_init(&ch, fp_key(f), c);
		first = resil_limit_priv_key_find_bounded(table_of(s), &ch, fp_key(f));
		if (first != (int64_t)i && first != -2) {
			if (first >= 0) {
				uint64_t m = ld_relaxed(&table_of(s)[first].st);

				while (!cas_relaxed(&table_of(s)[first].st, &m,
						    resil_limit_priv_word_merge(m, v, &p)))
					;
			}
			if (cas_sc(&e->fp, &f, (f & FP_OVF) | RESIL_LIMIT_FP_TOMB)) {
				faa_relaxed(&s->used, (uint64_t)-1);
				faa_relaxed(&s->merges, 1);
				u1--;
			}
			continue;
		}
		if (v == 0) {
			/* claimed, no permit taken yet: an inserter in flight, or
			 * one killed in that window. Mark it (a state any take
			 * reads as fresh); a later sweep that still finds the mark
			 * frees it, an inserter's take replaces it. */
			cas_relaxed(&e->st, &v, SWEEP_MARK);
			live++;
			continue;
		}
		if (word_swept(v, &p) && cas_sc(&e->fp, &f, (f & FP_OVF) | RESIL_LIMIT_FP_TOMB)) {
			faa_relaxed(&s->used, (uint64_t)-1);
			faa_relaxed(&s->swept, 1);
			u1--;
			continue;
		}
		live++;
	}
	/* repair only when no insert ran during the count (used unchanged
	 * except by our own sweeping). A count above limit.keys is out of
	 * range (inserters give back what they take over it; a client wrote
	 * it): a state repair too, for the daemon's count and event. */
	u2 = ld_relaxed(&s->used);
	if (u1 == u2 && live < u2 && skipped)
		live = count_keys(table_of(s), n, true);
	if (u1 == u2 && live != u2 && cas_relaxed(&s->used, &u2, live)) {
		faa_relaxed(&s->repairs, 1);
		if (u2 > c->keys)
			resil_repaired(x, RESIL_W_LIMIT_USED);
	}
}

/* A dead client holds nothing here: what it took was spent. */
void resil_limit_reclaim(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	(void)x;
	(void)c;
	(void)st;
	(void)dead_client;
	(void)counts;
}

/* ---------------------------------------------------------- inspection */

void resil_limit_info(const struct resil_limit_conf *c, const void *st,
		      struct resil_limit_info *out)
{
	struct resil_limit_state *s = lstate((void *)(uintptr_t)st);

	memset(out, 0, sizeof(*out));
	out->algorithm = resil_limit_algo(c);
	out->keyed = c->keys != 0;
	out->capacity = c->keys;
	out->evictions = ld_relaxed(&s->evictions);
	out->full_rejects = ld_relaxed(&s->full_rejects);
	out->full_admits = ld_relaxed(&s->full_admits);
	out->merges = ld_relaxed(&s->merges);
	out->dry_run_rejects = ld_relaxed(&s->dry_run_rejects);
	out->empty_keys = ld_relaxed(&s->empty_keys);
	out->word = (int64_t)ld_relaxed(&s->word);
	if (!c->keys)
		return;
	/* the pages that hold something (a page swapped out is not counted) */
	out->size = count_keys(table_of(s), (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET, false);
}

uint64_t resil_limit_dry_run_rejects(const void *st)
{
	return ld_relaxed(&lstate((void *)(uintptr_t)st)->dry_run_rejects);
}

int resil_limit_key_info(struct resil_ctx *x, const struct resil_limit_conf *c, const void *st,
			 const void *key, size_t len, int64_t *tat_or_count, int64_t *wait_ns)
{
	struct resil_limit_state *s = lstate((void *)(uintptr_t)st);
	uint64_t v;
	struct lp p;
	struct ax a;
	int64_t w;

	if (c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0)
		return -EINVAL;
	lp_init(&p, c, resil_clock_now(&x->clock), 1);
	if (c->keys && key) {
		struct resil_limit_entry *t = table_of(s);
		uint64_t fp = resil_limit_priv_key_fp(x, key, len);
		struct chain ch;
		int64_t i;

		chain_init(&ch, fp, c);
		i = resil_limit_priv_key_find(t, &ch, fp, memory_order_acquire);
		if (i < 0)
			return -ENOENT;
		v = ld_relaxed(&t[i].st);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		rai64 *ring = ring_of(s);
		int64_t cnt = 0, oldest = INT64_MAX, ti;
		uint32_t i;

		for (i = 0; i < c->count; i++) {
			ti = ring_end(ld_relaxed(&ring[i]), &p) - p.P;
			if (ti + p.P > p.now)
				cnt++;
			oldest = resil_min64(oldest, ti);
		}
		*tat_or_count = cnt;
		*wait_ns = cnt < c->count ? 0 : resil_max64(0, oldest + p.P - p.now);
		return 0;
	} else {
		v = ld_relaxed(&s->word);
	}
	if (p.algo == RESIL_LIMIT_GCRA) {
		*tat_or_count = (int64_t)v;
	} else {
		ax_view(v, &p, &a);
		*tat_or_count =
		    (int64_t)a.cur + (int64_t)muldiv(a.prev, (uint64_t)(p.P - a.e), (uint64_t)p.P);
	}
	w = resil_limit_priv_word_wait1(v, &p);
	*wait_ns = w > 0 ? w : 0;
	return 0;
}

int64_t resil_limit_available(struct resil_ctx *x, const struct resil_limit_conf *c, const void *st)
{
	int64_t v, wait, now = resil_clock_now(&x->clock);
	struct lp p;
	int r = resil_limit_key_info(x, c, st, NULL, 0, &v, &wait);

	if (r < 0)
		return r;
	lp_init(&p, c, now, 1);
	if (p.algo == RESIL_LIMIT_GCRA) {
		/* v is the TAT; the debt ahead of now, in emission intervals */
		int64_t debt = v > now ? v - now : 0;

		return debt >= p.tau ? 0 : (p.tau - debt) / p.T;
	}
	return v >= (int64_t)c->count ? 0 : (int64_t)c->count - v;
}

/* ------------------------------------------------------- configuration */

void resil_limit_conf_defaults(struct resil_limit_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->algorithm = RESIL_LIMIT_GCRA;
	c->burst = 1;
}

/* value without the blanks around it */
static bool word_is(const char *value, const char *w)
{
	size_t n = strlen(w);

	while (*value == ' ' || *value == '\t')
		value++;
	if (strncmp(value, w, n) != 0)
		return false;
	for (value += n; *value; value++)
		if (*value != ' ' && *value != '\t' && *value != '\n' && *value != '\r')
			return false;
	return true;
}

int resil_limit_conf_check(const struct resil_limit_conf *c, char *err, size_t errlen)
{
	unsigned algo = resil_limit_algo(c);

	if (!c->on)
		return 0;
	if (c->count == 0 || c->period_ns <= 0 || c->interval_ns <= 0)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.rate: required (N/DURATION, e.g. 100/s)");
	if (algo == RESIL_LIMIT_SLIDING && c->count > RESIL_LIMIT_SLIDING_MAX)
		return resil_errf(
		    err, errlen, -EINVAL,
		    "limit.rate: sliding keeps one slot per admission: at most %u per "
		    "period (sliding-approx counts more)",
		    RESIL_LIMIT_SLIDING_MAX);
	if (algo == RESIL_LIMIT_SLIDING_APPROX && c->count > RESIL_LIMIT_APPROX_MAX)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.rate: sliding-approx counts up to %u per period",
				  RESIL_LIMIT_APPROX_MAX);
	if (c->burst == 0 ||
	    (uint64_t)c->burst > (uint64_t)(INT64_MAX / 4) / (uint64_t)c->interval_ns)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.burst: at least 1, and burst x interval below 2^61 ns");
	if (c->keys > RESIL_LIMIT_KEYS_MAX)
		return resil_errf(err, errlen, -EINVAL, "limit.keys: at most %u",
				  RESIL_LIMIT_KEYS_MAX);
	return 0;
}

int resil_limit_conf_set(struct resil_limit_conf *c, const char *key, const char *value, char *err,
			 size_t errlen)
{
	struct resil_limit_conf n = *c;
	uint32_t u;
	int64_t d;
	int r;

	if (strcmp(key, "limit.rate") == 0) {
		if (resil_parse_rate(value, &n.count, &n.period_ns) < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.rate: '%s' is not N/DURATION (e.g. 100/s, 5/2m)",
					  value);
		n.interval_ns = n.period_ns / n.count;
		if (n.interval_ns <= 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.rate: '%s' is faster than one per nanosecond",
					  value);
	} else if (strcmp(key, "limit.burst") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.burst: '%s' is not a count >= 1", value);
		n.burst = u;
	} else if (strcmp(key, "limit.algorithm") == 0) {
		if (word_is(value, "gcra"))
			n.algorithm = RESIL_LIMIT_GCRA;
		else if (word_is(value, "sliding"))
			n.algorithm = RESIL_LIMIT_SLIDING;
		else if (word_is(value, "sliding-approx"))
			n.algorithm = RESIL_LIMIT_SLIDING_APPROX;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.algorithm: '%s' is not gcra, sliding or "
					  "sliding-approx",
					  value);
	} else if (strcmp(key, "limit.keys") == 0) {
		if (resil_parse_u32(value, &u) < 0)
			return resil_errf(err, errlen, -EINVAL, "limit.keys: '%s' is not a count",
					  value);
		n.keys = u;
	} else if (strcmp(key, "limit.when_full") == 0) {
		if (word_is(value, "reject"))
			n.when_full_admit = 0;
		else if (word_is(value, "admit"))
			n.when_full_admit = 1;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.when_full: '%s' is neither reject nor admit",
					  value);
	} else if (strcmp(key, "limit.wait") == 0) {
		if (resil_parse_duration(value, &d) < 0 || d < 0 || d > INT64_MAX / 4)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.wait: '%s' is not a duration", value);
		n.wait_ns = d;
	} else if (strcmp(key, "limit.empty_key") == 0) {
		if (word_is(value, "admit"))
			n.empty_key_reject = 0;
		else if (word_is(value, "reject"))
			n.empty_key_reject = 1;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.empty_key: '%s' is neither admit nor reject",
					  value);
	} else if (strcmp(key, "limit.dry_run") == 0) {
		if (resil_parse_bool(value, &n.dry_run) < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.dry_run: '%s' is not yes or no", value);
	} else if (strcmp(key, "limit.default_key") == 0) {
		/* a word: the text's blanks and separators cannot be in it */
		if (!*value || strlen(value) >= sizeof(n.default_key) || strpbrk(value, " \t;#"))
			return resil_errf(err, errlen, -EINVAL,
					  "limit.default_key: '%s' is not a key of 1 to %zu "
					  "characters without blanks",
					  value, sizeof(n.default_key) - 1);
		memset(n.default_key, 0, sizeof(n.default_key));
		n.default_key_len = (uint8_t)strlen(value);
		memcpy(n.default_key, value, n.default_key_len);
	} else {
		if (err && errlen)
			snprintf(err, errlen, "unknown key '%s'", key);
		return -ENOENT;
	}
	n.on = 1;
	/* the combination so far (a missing rate is checked at the end) */
	if (n.count) {
		r = resil_limit_conf_check(&n, err, errlen);
		if (r < 0)
			return r;
	}
	*c = n;
	return 0;
}

static const char *algo_name(unsigned a)
{
	switch (a) {
	case RESIL_LIMIT_SLIDING:
		return "sliding";
	case RESIL_LIMIT_SLIDING_APPROX:
		return "sliding-approx";
	default:
		return "gcra";
	}
}

size_t resil_limit_conf_format(const struct resil_limit_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t n = 0;

#define PUTF(...)                                                                                  \
	do {                                                                                       \
		int w_ = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__);   \
		if (w_ > 0)                                                                        \
			n += (size_t)w_;                                                           \
	} while (0)

	if (len)
		buf[0] = '\0';
	if (!c->on)
		return 0;
	if (c->count) {
		resil_format_duration(c->period_ns, d, sizeof(d));
		PUTF("limit.rate = %" PRIu32 "/%s\n", c->count, d);
	}
	PUTF("limit.burst = %" PRIu32 "\n", c->burst);
	PUTF("limit.algorithm = %s\n", algo_name(c->algorithm));
	if (c->keys) {
		PUTF("limit.keys = %" PRIu32 "\n", c->keys);
		PUTF("limit.when_full = %s\n", c->when_full_admit ? "admit" : "reject");
		if (c->empty_key_reject)
			PUTF("limit.empty_key = reject\n");
	}
	if (c->wait_ns) {
		resil_format_duration(c->wait_ns, d, sizeof(d));
		PUTF("limit.wait = %s\n", d);
	}
	if (c->dry_run)
		PUTF("limit.dry_run = yes\n");
	if (c->default_key_len)
		PUTF("limit.default_key = %.*s\n", (int)c->default_key_len, c->default_key);
#undef PUTF
	return n;
}

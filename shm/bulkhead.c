/* SPDX-License-Identifier: MIT */
/*
 * bulkhead.c - at most bulkhead.max calls in flight for the whole fleet,
 * with permits that a SIGKILL can neither leak nor double: the counted
 * pool (resil_pool_*, the adaptive limit's and the waiters'), the slots'
 * scan and claims (the hot path), waiting, and the global scope's claim.
 *
 * A permit is a slot claimed by CAS 0 -> client id: the claim is the
 * record of who holds it, so the daemon gives back exactly what a dead
 * client held and nothing else; there are exactly bulkhead.max slots, so
 * "never more than max in flight" holds by construction. The scan's
 * claim, walk and free are always_inline helpers of the acquire and
 * release, one copy per slot stride. The design (the scan and its costs,
 * the full hint and its race, the counted pool's repair, waiting's Dekker
 * pair, priorities, the global scope's lease, every crash window) is
 * docs/internals/bulkhead.md; bulkhead_priv.h holds what the files share,
 * bulkhead_maint.c the block's layout, the daemon's lease and parking,
 * maintenance, reclaim and sweep, bulkhead_conf.c the keys.
 *
 * Shared words (state block, bulkhead.h), writers, readers, orders:
 *   slots[i]   the claimer (CAS 0 -> id, acq_rel: pairs with the previous
 *              holder's release CAS), the holder (CAS its own id -> 0,
 *              release, never a plain store of 0: a slot wrongly taken
 *              back and claimed again stays its new holder's), the daemon
 *              (CAS id -> 0 for a dead or stray id; 0 <-> PARKED for a
 *              global pool's lease). Read by claimers (relaxed pre-check
 *              and walks), the daemon and observers, at an index from
 *              the configuration, never from the block's geometry words.
 *   full       the full hint, line 0: set (relaxed) by a walk that found
 *              no slot, cleared by releasers, by a walk that found the
 *              hint stale and by the daemon; read relaxed by claimers
 *              and releasers: a hint, it orders nothing.
 *   count      a counted pool's in-flight hint (the adaptive limit's,
 *              the waiters' nwait): fetch_add/fetch_sub (seq_cst) by
 *              acquirers and releasers, fetch_sub by the daemon's repair
 *              and reclaim.
 *   wake_seq   futex word: fetch_add (release) by releasers when nwait
 *              != 0; loaded (acquire) by waiters before they sleep.
 *   wslots[]   a waiter's claim, so a dead waiter is taken off exactly.
 *   lease      line 2 (lease_slots, fallback_slots, sure_slots, then
 *              lease_expiry_ns, release), fallback_until_ns and
 *              after_slots: written by the daemon only
 *              (bulkhead_maint.c), read (acquire) by a global claim.
 *   geometry   nslots, shift, slots_off: init, then the daemon's tick;
 *              read by no code (dumps).
 * Linearization points: an admission and a release at the slot CAS; a
 * rejection at a walk that saw every slot taken, each when it looked, or
 * at a load of the full hint.
 */
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bulkhead_priv.h"
#include "count_table.h"

#define seq_faa(p, v) atomic_fetch_add_explicit((p), (v), memory_order_seq_cst)
#define seq_fas(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_seq_cst)
/* A free that waiters may wait for (a release with bulkhead.wait, the
 * daemon's reclaim and sweep): a seq_cst RMW, the releaser's half of the
 * Dekker pair with waiters ("Waiting"). */
#define cas_seq(p, e, v)                                                                           \
	atomic_compare_exchange_strong_explicit((p), (e), (v), memory_order_seq_cst,               \
						memory_order_relaxed)
/* A release: what the holder did during the call happens-before the next
 * claimer's acq_rel CAS; a failed CAS publishes and reads nothing. */
#define cas_release(p, e, v)                                                                       \
	atomic_compare_exchange_strong_explicit((p), (e), (v), memory_order_release,               \
						memory_order_relaxed)

/* Where this thread's next claim starts: its last slot + 1 (0: none yet,
 * start at the client id). A freed slot is usually free again for the
 * same thread, so an uncontended claim succeeds at the first CAS, and
 * processes start at different slots. A few entries, picked by the pool's
 * address, so a policy's bulkhead and adaptive pools keep their own. */
#define POOL_NEXT 4
static _Thread_local __attribute__((tls_model("initial-exec"))) uint32_t resil_pool_next[POOL_NEXT];

static inline uint32_t *next_of(const void *key)
{
	return &resil_pool_next[((uintptr_t)key / RESIL_HOT_ALIGN) & (POOL_NEXT - 1)];
}

static inline uint32_t *pool_next(const struct resil_pool *p)
{
	return next_of(p->count);
}

static inline ra32 *pool_slot(const struct resil_pool *p, uint32_t i)
{
	return &p->slots[(size_t)i << p->shift];
}

uint32_t resil_pool_claim(const struct resil_pool *p, uint32_t limit, uint32_t id,
			  uint32_t *inflight)
{
	int32_t lim = (int32_t)(limit < (uint32_t)INT32_MAX ? limit : INT32_MAX);
	uint32_t i, s, n = p->n;
	int32_t old;

	/* Read-only rejection: the common case of a full pool costs a load. */
	if ((int32_t)ld_relaxed(p->count) >= lim)
		goto full;
	old = (int32_t)seq_faa(p->count, 1);
	if (old >= lim) {
		/* crash window D: repaired by resil_pool_repair */
		seq_fas(p->count, 1);
		goto full;
	}
	/* crash window A: counted, not claimed; repaired by resil_pool_repair */
	s = *pool_next(p);
	if (RESIL_UNLIKELY(s == 0 || s > n))
		s = id % n;
	else
		s--;
	for (i = 0; i < n; i++) {
		ra32 *w = pool_slot(p, s);
		uint32_t exp = 0;

		if (ld_relaxed(w) == 0 && cas_acq_rel(w, &exp, id)) {
			/* crash window B: the slot names us; reclaim frees it */
			*pool_next(p) = s + 1;
			*inflight = (uint32_t)old + 1;
			return s + 1;
		}
		if (++s == n)
			s = 0;
	}
	/* The hint was low (a correction in flight): every slot is taken. */
	seq_fas(p->count, 1);
full:
	*inflight = 0;
	return 0;
}

bool resil_pool_free(const struct resil_pool *p, uint32_t idx, uint32_t id)
{
	uint32_t exp = id;

	if (RESIL_UNLIKELY(idx == 0 || idx > p->n))
		return false;
	/* A CAS from our own id, never a store of 0: a slot the daemon took
	 * back (it judged us dead) and handed to another client stays that
	 * client's, and its hint unit went with the reclaim. */
	if (RESIL_UNLIKELY(!cas_release(pool_slot(p, idx - 1), &exp, 0)))
		return false;
	/* crash window C: slot free, hint one too high; repaired */
	seq_fas(p->count, 1);
	return true;
}

uint32_t resil_pool_reclaim(const struct resil_pool *p, bool counted, uint32_t id)
{
	uint32_t i, freed = 0;

	if (id == 0 || id == RESIL_CLIENT_UNREGISTERED)
		return 0;
	for (i = 0; i < p->n; i++) {
		uint32_t exp = id;

		/* a load first: a locked CAS only on a slot that names id;
		 * seq_cst: for a bulkhead with waiters, the releaser's half of
		 * "Waiting" */
		if (ld_relaxed(pool_slot(p, i)) != id || !cas_seq(pool_slot(p, i), &exp, 0))
			continue;
		/* The dead holder's fetch_add is still in the hint: take it
		 * back. A crash between these two lines leaves an excess the
		 * next repair removes. */
		if (counted)
			seq_fas(p->count, 1);
		freed++;
	}
	return freed;
}

uint32_t resil_pool_claimed(const struct resil_pool *p)
{
	uint32_t i, held = 0;

	for (i = 0; i < p->n; i++)
		held += ld_acquire(pool_slot(p, i)) != 0;
	return held;
}

uint32_t resil_pool_sweep(const struct resil_pool *p, bool counted, resil_stray_fn stray, void *ctx)
{
	uint32_t i, freed = 0;

	for (i = 0; i < p->n; i++) {
		uint32_t id = ld_acquire(pool_slot(p, i)), exp = id;

		if (id == 0 || !stray(id, ctx))
			continue;
		/* Only that word: a slot freed and claimed anew since the load
		 * holds another word (or the same stray id planted again) */
		if (cas_seq(pool_slot(p, i), &exp, 0)) {
			if (counted)
				seq_fas(p->count, 1); /* as resil_pool_reclaim */
			freed++;
		}
	}
	return freed;
}

void resil_pool_holders(const struct resil_pool *p, resil_holder_fn fn, void *ctx)
{
	for (uint32_t i = 0; i < p->n; i++) {
		uint32_t id = ld_acquire(pool_slot(p, i));

		if (id)
			fn(id, ctx);
	}
}

int32_t resil_pool_repair(const struct resil_pool *p, int32_t *prev_excess)
{
	int32_t excess, prev = *prev_excess, fix = 0;
	uint32_t held = resil_pool_claimed(p);
	/* 64-bit, then clamped: the count is any client's to write, and
	 * INT32_MIN minus what is held must not overflow */
	int64_t ex = (int64_t)(int32_t)ld_acquire(p->count) - (int64_t)held;

	excess = ex > INT32_MAX ? INT32_MAX : ex < -INT32_MAX ? -INT32_MAX : (int32_t)ex;
	if (prev == INT32_MIN)
		prev = -INT32_MAX;
	if ((excess > 0 && prev > 0) || (excess < 0 && prev < 0)) {
		/* only what persisted since the last tick */
		fix =
		    excess > 0 ? (excess < prev ? excess : prev) : (excess > prev ? excess : prev);
		/* fetch_add, never a store: concurrent claims are kept */
		seq_fas(p->count, (uint32_t)fix);
		excess -= fix;
	}
	*prev_excess = excess;
	return fix;
}

/* ---- the slots ---- */

/* Rejections on the full hint by this thread, per entry of
 * resil_pool_next: every RESIL_BULKHEAD_RECHECK-th one walks instead. */
static _Thread_local __attribute__((tls_model("initial-exec")))
uint32_t resil_full_skips[POOL_NEXT];

static inline uint32_t *skips_of(const void *key)
{
	return &resil_full_skips[((uintptr_t)key / RESIL_HOT_ALIGN) & (POOL_NEXT - 1)];
}

/* Slot i claimed for id: a load, and a CAS only when it looked free. */
static inline __attribute__((always_inline)) bool try_slot(struct resil_bulkhead_state *s,
							   uint32_t i, uint32_t id, uint32_t sh)
{
	ra32 *w = scan_slot(s, i, sh);
	uint32_t exp = 0;

	return ld_relaxed(w) == 0 && cas_acq_rel(w, &exp, id);
}

/* The full hint, as a thread that may claim the slots below lim of n
 * reads it: set for those slots (ALL; SHARED too when lim < n), and this
 * is not the resil_bulkhead_recheck(lim)-th rejection on it (which walks
 * instead). */
static inline __attribute__((always_inline)) bool hint_full(struct resil_bulkhead_state *s,
							    uint32_t lim, uint32_t n)
{
	uint32_t v = ld_relaxed(&s->full);

	return v && (v == RESIL_BULKHEAD_FULL_ALL || lim < n) &&
	       (++*skips_of(s) & (resil_bulkhead_recheck(lim) - 1));
}

/* Slots lo..hi-1: read-only loads, a CAS only on a slot seen free. */
static inline __attribute__((always_inline)) uint32_t scan_range(struct resil_bulkhead_state *s,
								 uint32_t lo, uint32_t hi,
								 uint32_t id, uint32_t *next,
								 uint32_t sh)
{
	for (uint32_t i = lo; i < hi; i++) {
		if (try_slot(s, i, id, sh)) {
			/* crash window B: the slot names us; reclaim frees it */
			*next = i + 1;
			return i + 1;
		}
	}
	return 0;
}

/* (u64)v - 1 has bit 63 set only for a free slot (v == 0). */
static inline uint64_t free_bit(const ra32 *w)
{
	return (uint64_t)ld_relaxed(w) - 1;
}

/* Whether one of the 8 slots from lo looked free: 8 loads and no branch
 * per slot. */
static inline bool any_free8(struct resil_bulkhead_state *s, uint32_t lo, uint32_t sh)
{
	const ra32 *w = scan_slot(s, lo, sh);
	const size_t d = (size_t)1 << sh;

	return (free_bit(w) | free_bit(w + d) | free_bit(w + 2 * d) | free_bit(w + 3 * d) |
		free_bit(w + 4 * d) | free_bit(w + 5 * d) | free_bit(w + 6 * d) |
		free_bit(w + 7 * d)) >>
	       63;
}

/* Once around, by groups of 8 from the group of slot i. 0: every slot was
 * taken when looked at. */
static inline __attribute__((always_inline)) uint32_t walk_sh(struct resil_bulkhead_state *s,
							      uint32_t n, uint32_t id, uint32_t i,
							      uint32_t *next, uint32_t sh)
{
	uint32_t ng = (n + 7) / 8, g = i / 8;

	for (uint32_t k = 0; k < ng; k++, g = g + 1 == ng ? 0 : g + 1) {
		uint32_t lo = g * 8, hi = lo + 8 < n ? lo + 8 : n, idx;

		if (hi - lo == 8 && !any_free8(s, lo, sh))
			continue;
		idx = scan_range(s, lo, hi, id, next, sh);
		if (idx)
			return idx;
	}
	return 0;
}

/* Out of line, one copy per stride (the hot paths' code stays small). */
static __attribute__((noinline)) uint32_t walk_spread(struct resil_bulkhead_state *s, uint32_t n,
						      uint32_t id, uint32_t i, uint32_t *next)
{
	return walk_sh(s, n, id, i, next, SPREAD);
}

static __attribute__((noinline)) uint32_t walk_packed(struct resil_bulkhead_state *s, uint32_t n,
						      uint32_t id, uint32_t i, uint32_t *next)
{
	return walk_sh(s, n, id, i, next, PACKED);
}

static inline __attribute__((always_inline)) uint32_t scan_walk(struct resil_bulkhead_state *s,
								uint32_t n, uint32_t id, uint32_t i,
								uint32_t *next, uint32_t sh)
{
	return sh == SPREAD ? walk_spread(s, n, id, i, next) : walk_packed(s, n, id, i, next);
}

static inline __attribute__((always_inline)) uint32_t
scan_claim_rest(struct resil_bulkhead_state *s, uint32_t lim, uint32_t n, uint32_t id, uint32_t i,
		uint32_t *next, uint32_t sh);
static inline __attribute__((always_inline)) uint32_t
scan_walk_claim(struct resil_bulkhead_state *s, uint32_t lim, uint32_t n, uint32_t id, uint32_t i,
		uint32_t *next, uint32_t sh);

/* This thread's ordinal among the threads of its process that claimed a
 * scan slot, 0 for the first (a forked child keeps its forking thread's).
 * Written once by its own thread; the counter is process-private (relaxed:
 * it orders nothing, each thread only needs a value of its own). */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint32_t resil_thread_ord;
static ra32 resil_thread_ords;

static __attribute__((noinline, cold)) uint32_t thread_ord(void)
{
	if (!resil_thread_ord)
		resil_thread_ord = faa_relaxed(&resil_thread_ords, 1) + 1;
	return resil_thread_ord - 1;
}

/* 2^32 / the golden ratio: the k-th thread's start is k strides past its
 * client's, and any few strides fall far apart (Fibonacci hashing). */
#define THREAD_STRIDE 0x9e3779b9u

/* Where a thread's first claim starts (0-based): its client id's slot,
 * or, packed, the first slot of line id, so that processes start on lines
 * of their own; and a thread other than its process's first, THREAD_STRIDE
 * times its ordinal further: packed, threads of one process that started
 * on one line would bounce it at every decision, as two processes would
 * (mp/bulkhead2000.threads). */
static uint32_t first_slot(uint32_t n, uint32_t id, uint32_t sh)
{
	uint32_t u = id + thread_ord() * THREAD_STRIDE;

	return (uint32_t)(((uint64_t)u << (SPREAD - sh)) % n);
}

/* Where a thread's claim starts (0-based): its last slot (next: that
 * slot + 1), else first_slot's. */
static inline uint32_t scan_start(uint32_t next, uint32_t n, uint32_t id, uint32_t sh)
{
	return RESIL_UNLIKELY(next == 0 || next > n) ? first_slot(n, id, sh) : next - 1;
}

/* Where a walk of the slots below lim starts when slot i (the thread's
 * last, 0-based) was not free. Packed: beside a slot another client holds
 * now, the walk would claim in its line, and the two would bounce it at
 * every decision (a fork copies the thread's last slot into every child:
 * children that started on it would never part). So the walk starts on
 * this client's own line then; beside a slot of its own (this process
 * holds more than one permit), from i: a fill stays one step a claim. */
static inline uint32_t walk_start(struct resil_bulkhead_state *s, uint32_t i, uint32_t lim,
				  uint32_t id, uint32_t sh)
{
	if (sh == PACKED && ld_relaxed(scan_slot(s, i, sh)) != id)
		return scan_start(0, lim, id, sh);
	return i;
}

/* A claim of one of the slots below lim (1..n) of the pool's n. The slot
 * this thread used last is usually free again: one load and one CAS. Else
 * the full hint (saturated: one load), else a walk. */
static inline __attribute__((always_inline)) uint32_t
scan_claim(struct resil_bulkhead_state *s, uint32_t lim, uint32_t n, uint32_t id, uint32_t sh)
{
	uint32_t *next = next_of(s), i = scan_start(*next, lim, id, sh);

	if (RESIL_LIKELY(try_slot(s, i, id, sh))) {
		/* crash window B: the slot names us; reclaim frees it */
		*next = i + 1;
		return i + 1;
	}
	return scan_claim_rest(s, lim, n, id, walk_start(s, i, lim, id, sh), next, sh);
}

/* scan_claim after the thread's last slot (i, 0-based) was not free: the
 * full hint (saturated: one load), else a walk from i. */
static inline __attribute__((always_inline)) uint32_t
scan_claim_rest(struct resil_bulkhead_state *s, uint32_t lim, uint32_t n, uint32_t id, uint32_t i,
		uint32_t *next, uint32_t sh)
{
	if (hint_full(s, lim, n))
		return 0; /* saturated: one load, no scan */
	return scan_walk_claim(s, lim, n, id, i, next, sh);
}

/* A walk of the slots below lim from slot i, and the full hint set or
 * cleared by what it found: set to what the walk covered (SHARED under a
 * partition, never over ALL); cleared when it found a slot where the hint
 * said none was (a critical caller's slot may lie above the shared part:
 * it leaves SHARED as it is). */
static inline __attribute__((always_inline)) uint32_t
scan_walk_claim(struct resil_bulkhead_state *s, uint32_t lim, uint32_t n, uint32_t id, uint32_t i,
		uint32_t *next, uint32_t sh)
{
	uint32_t idx = scan_walk(s, lim, id, i, next, sh), v = ld_relaxed(&s->full);

	if (!idx) {
		uint32_t mark = lim < n ? RESIL_BULKHEAD_FULL_SHARED : RESIL_BULKHEAD_FULL_ALL;

		if (v != mark && v != RESIL_BULKHEAD_FULL_ALL)
			st_relaxed(&s->full, mark);
	} else if (RESIL_UNLIKELY(v) && (v == RESIL_BULKHEAD_FULL_ALL || lim < n)) {
		st_relaxed(&s->full, 0); /* a stale hint found out */
	}
	return idx;
}

/* A critical caller's walk of the reserve (slots shared..n-1), once the
 * shared part had none: ALL when it finds none either, else SHARED where
 * it said ALL (the shared part is still full). */
static __attribute__((noinline)) uint32_t reserve_walk(struct resil_bulkhead_state *s,
						       uint32_t shared, uint32_t n, uint32_t id,
						       uint32_t *next, uint32_t sh)
{
	uint32_t idx = scan_range(s, shared, n, id, next, sh), v = ld_relaxed(&s->full);

	if (!idx && v != RESIL_BULKHEAD_FULL_ALL)
		st_relaxed(&s->full, RESIL_BULKHEAD_FULL_ALL);
	else if (idx && v == RESIL_BULKHEAD_FULL_ALL)
		st_relaxed(&s->full, RESIL_BULKHEAD_FULL_SHARED);
	return idx;
}

/* A claim under a partition of shared slots below the reserve: a shared
 * slot first, for every caller; then, for a critical one, a reserved slot
 * (unless the hint says ALL). So the reserve stays free for as long as
 * the shared part has room. shared == n: no partition, scan_claim. */
static inline __attribute__((always_inline)) uint32_t part_claim(struct resil_bulkhead_state *s,
								 uint32_t shared, uint32_t n,
								 bool critical, uint32_t id,
								 uint32_t sh)
{
	uint32_t idx = RESIL_LIKELY(shared) ? scan_claim(s, shared, n, id, sh) : 0;

	if (RESIL_LIKELY(idx) || !critical || shared == n || hint_full(s, n, n))
		return idx;
	return reserve_walk(s, shared, n, id, next_of(s), sh);
}

/* The release: a CAS from the holder's id (a line this thread just wrote,
 * so usually still in its cache); then the hint, when set (a read-mostly
 * line): cleared, or, for a slot at or above the shared part of c's
 * partition (c NULL: none), SHARED (that part is as full as it was). A
 * slot that no longer names us was reclaimed: nothing to give.
 * waits (bulkhead.wait > 0): the CAS is seq_cst and the waiter count is
 * loaded after it, seq_cst: the releaser's half of the Dekker pair (see
 * "Waiting" in docs/internals/bulkhead.md). On x86 the CAS is the same instruction. */
static inline __attribute__((always_inline)) void
scan_free(struct resil_bulkhead_state *s, uint32_t n, const struct resil_bulkhead_conf *c,
	  uint32_t idx, uint32_t id, bool waits, uint32_t sh)
{
	ra32 *w;
	uint32_t exp = id, v;

	if (RESIL_UNLIKELY(idx - 1 >= n))
		return;
	w = scan_slot(s, idx - 1, sh);
	if (waits) {
		if (RESIL_UNLIKELY(!cas_seq(w, &exp, 0)))
			return;
	} else if (RESIL_UNLIKELY(!cas_release(w, &exp, 0))) {
		return;
	}
	/* the race of the hint: see "The full hint" in docs/internals/bulkhead.md */
	v = ld_relaxed(&s->full);
	if (RESIL_UNLIKELY(v)) {
		uint32_t shared = c ? resil_bulkhead_shared(c, n) : n;
		uint32_t nv = idx - 1 < shared ? 0 : RESIL_BULKHEAD_FULL_SHARED;

		if (v != nv)
			st_relaxed(&s->full, nv);
	}
	if (waits && RESIL_UNLIKELY(seq_ld(&s->nwait) != 0))
		resil_bulkhead_priv_wake_one(s);
}

/* A claim's end: slot idx (1-based) held by id in the permit, or, for no
 * slot, the rejection. */
static inline int granted(struct resil_permit_priv *pm, uint32_t id, uint32_t idx)
{
	if (RESIL_UNLIKELY(!idx))
		return RESIL_REJECT_FULL;
	pm->holder = id;
	pm->bulkhead_idx = idx;
	pm->flags |= RESIL_PERMIT_BULKHEAD;
	return 0;
}

static inline uint32_t claim_id(const struct resil_ctx *x)
{
	return x->client_id ? x->client_id : RESIL_CLIENT_UNREGISTERED;
}

__attribute__((noinline, cold)) void resil_bulkhead_priv_wake_one(struct resil_bulkhead_state *s)
{
	atomic_fetch_add_explicit(&s->wake_seq, 1, memory_order_release);
	syscall(SYS_futex, (uint32_t *)&s->wake_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* A waiter's try: a walk of the shared slots from where a claim's walk
 * starts (walk_start), then, for a critical caller (limit n), of the
 * reserved ones, whatever the full hint says ("Waiting" in
 * docs/internals/bulkhead.md). */
static inline uint32_t wait_claim(struct resil_bulkhead_state *s, uint32_t limit,
				  const struct resil_bulkhead_conf *c, uint32_t id)
{
	uint32_t *next = next_of(s), n = resil_bulkhead_max_of(c), sh = resil_pool_shift(n);
	uint32_t shared = resil_bulkhead_shared(c, n), idx = 0;

	if (RESIL_LIKELY(shared)) /* bulkhead.critical = 100%: no shared slot */
		idx = scan_walk_claim(
		    s, shared, n, id,
		    walk_start(s, scan_start(*next, shared, id, sh), shared, id, sh), next, sh);
	if (!idx && limit > shared)
		idx = reserve_walk(s, shared, n, id, next, sh);
	return idx;
}

/* limit: the slots this caller may claim (all, or the shared part). */
static __attribute__((noinline, cold)) int bulkhead_wait(struct resil_bulkhead_claimant *w,
							 const struct resil_bulkhead_conf *c,
							 struct resil_bulkhead_state *s,
							 uint32_t limit, uint32_t id,
							 struct resil_permit_priv *pm)
{
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t widx, idx = 0, dummy;
	int64_t deadline, rem;
	bool woken = false;

	/* The waiter count is this pool's hint: a dead waiter is taken off
	 * exactly by reclaim (its slot) or by repair (its windows). */
	widx = resil_pool_claim(&wp, RESIL_BULKHEAD_WAITERS, id, &dummy);
	if (widx == 0)
		return RESIL_REJECT_FULL; /* too many waiters: fail fast */
	faa_relaxed(&s->waits, 1);
	atomic_thread_fence(memory_order_seq_cst); /* Dekker with the releaser */

	deadline = resil_clock_monotonic(NULL) + c->wait_ns;
	for (;;) {
		uint32_t seen = ld_acquire(&s->wake_seq);
		struct timespec ts;

		idx = wait_claim(s, limit, c, id);
		if (idx)
			break;
		rem = deadline - resil_clock_monotonic(NULL);
		if (rem <= 0)
			break;
		ts.tv_sec = rem / RESIL_NS_PER_S;
		ts.tv_nsec = rem % RESIL_NS_PER_S;
		if (syscall(SYS_futex, (uint32_t *)&s->wake_seq, FUTEX_WAIT, seen, &ts, NULL, 0) ==
		    0)
			woken = true;
	}
	resil_pool_free(&wp, widx, id);
	if (!idx && woken && seq_ld(&s->nwait) != 0)
		resil_bulkhead_priv_wake_one(s); /* the wakeup we took and did not use goes on */
	w->now = 0;				 /* time went by: the next reading must be fresh */
	return granted(pm, id, idx);
}

/* ---- global scope ---- */

/* Past the lease: a slot below fallback_slots (after_slots past the
 * fallback's end), free or parked. */
static __attribute__((noinline, cold)) uint32_t fallback_claim(struct resil_bulkhead_state *s,
							       uint32_t n, uint32_t id, int64_t now)
{
	/* pairs with resil_bulkhead_fallback_end_set's release */
	int64_t until = (int64_t)ld_acquire(&s->fallback_until_ns);
	uint32_t fb =
	    until && now >= until ? ld_relaxed(&s->after_slots) : ld_relaxed(&s->fallback_slots);

	if (fb > n)
		fb = n;
	for (uint32_t i = 0; i < fb; i++) {
		ra32 *w = scan_slot(s, i, SPREAD);
		uint32_t v = ld_relaxed(w);

		if ((v == 0 || v == RESIL_BULKHEAD_PARKED) && cas_acq_rel(w, &v, id))
			return i + 1;
	}
	return 0;
}

/* A global bulkhead's claim. The thread's last slot first, when it lies
 * below sure_slots: a slot the live lease allows and its fallback allows
 * too, so the claim holds whether the lease has expired or not, and no
 * clock is read. Else the usual claim under a live lease (the parked slots
 * bound it), the fallback's past it. */
static inline uint32_t global_claim(const struct resil_clock *clk, struct resil_bulkhead_state *s,
				    uint32_t n, uint32_t id)
{
	/* pairs with resil_bulkhead_lease_set's release: the parking done
	 * before it is seen (a slot parked since is refused by the CAS) */
	uint32_t sure = ld_acquire(&s->sure_slots), i = *next_of(s);
	int64_t exp, now;

	/* a client's word: never past the configuration */
	if (RESIL_UNLIKELY(sure > n))
		sure = n;
	/* i == 0 (no slot yet) wraps to UINT32_MAX */
	if (RESIL_LIKELY(i - 1 < sure) && RESIL_LIKELY(try_slot(s, i - 1, id, SPREAD)))
		return i; /* crash window B, as scan_claim's */
	/* pairs with resil_bulkhead_lease_set's release: the parking done
	 * for this lease is seen with it */
	exp = (int64_t)ld_acquire(&s->lease_expiry_ns);
	now = resil_clock_now_coarse(clk);
	if (RESIL_LIKELY(now < exp)) {
		/* only below the share: slots above it drain (a call that
		 * ends there frees a slot nobody takes; the daemon parks it) */
		uint32_t lim = ld_relaxed(&s->lease_slots);

		if (RESIL_UNLIKELY(lim < n))
			n = lim;
		return n ? scan_claim(s, n, n, id, SPREAD) : 0;
	}
	if (exp == 0)
		return scan_claim(s, n, n, id, SPREAD); /* no daemon ever leased it */
	return fallback_claim(s, n, id, now);
}

/* ---- the decision ---- */

/* An acquire of any host- or global-scope bulkhead, in the stride sh. */
static inline __attribute__((always_inline)) int
acquire_sh(struct resil_bulkhead_claimant *w, const struct resil_bulkhead_conf *c,
	   struct resil_bulkhead_state *s, struct resil_permit_priv *pm, uint32_t n, uint32_t sh)
{
	uint32_t id = w->id, limit = n, idx;

	if (sh == SPREAD && RESIL_UNLIKELY(w->global)) {
		idx =
		    global_claim(w->clock, s, n, id); /* fail-fast, no partition, spread: conf.c */
	} else if (RESIL_LIKELY(c->critical_bp == 0)) {
		idx = scan_claim(s, n, n, id, sh);
	} else {
		/* a partition: the slots below its reserve, then, for a
		 * critical caller, the reserve */
		uint32_t shared = resil_bulkhead_shared(c, n);
		bool critical = pm->priority == RESIL_PRIO_CRITICAL;

		limit = critical ? n : shared;
		idx = part_claim(s, shared, n, critical, id, sh);
	}
	if (RESIL_LIKELY(idx) || c->wait_ns <= 0)
		return granted(pm, id, idx);
	return bulkhead_wait(w, c, s, limit, id, pm);
}

int resil_bulkhead_claim(struct resil_bulkhead_claimant *w, const struct resil_bulkhead_conf *c,
			 void *st, struct resil_permit_priv *pm)
{
	if (RESIL_LIKELY(resil_bulkhead_spread(c)))
		return acquire_sh(w, c, st, pm, resil_bulkhead_max_of(c), SPREAD);
	return acquire_sh(w, c, st, pm, resil_bulkhead_max_of(c), PACKED);
}

int resil_bulkhead_acquire(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			   struct resil_permit_priv *pm)
{
	struct resil_bulkhead_claimant w = {
	    .id = claim_id(x),
	    .global = x->rec && x->rec->conf.scope == RESIL_SCOPE_GLOBAL,
	    .clock = &x->clock,
	    .now = x->now,
	};
	int v = resil_bulkhead_claim(&w, c, st, pm);

	x->now = w.now;
	return v;
}

void resil_bulkhead_release(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			    struct resil_permit_priv *pm, int outcome)
{
	uint32_t n = resil_bulkhead_max_of(c);

	if (!(pm->flags & RESIL_PERMIT_BULKHEAD))
		return;
	if (RESIL_LIKELY(resil_bulkhead_spread(c)))
		scan_free(st, n, c, pm->bulkhead_idx, pm->holder, c->wait_ns > 0, SPREAD);
	else
		scan_free(st, n, c, pm->bulkhead_idx, pm->holder, c->wait_ns > 0, PACKED);
	pm->bulkhead_idx = 0;
	pm->flags &= ~RESIL_PERMIT_BULKHEAD;
}

/* A spread pool's acquire and release alone, for a caller that knows the
 * stride from the configuration (the client's lean decisions, chosen at
 * bind time): the same words as resil_bulkhead_acquire/release, without
 * the stride's test. The acquires never wait (a fail-fast
 * bulkhead; a waiting one calls resil_bulkhead_acquire) and read
 * x->client_id only; resil_bulkhead_release_scan_n never looks for
 * waiters (a fail-fast bulkhead's release; a lean bulkhead whose callers
 * wait is released by resil_bulkhead_release). */
int resil_bulkhead_acquire_scan(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
				struct resil_permit_priv *pm)
{
	uint32_t id = claim_id(x), idx;

	uint32_t n = resil_bulkhead_max_of(c);

	idx = scan_claim(st, n, n, id, SPREAD);
	return granted(pm, id, idx);
}

int resil_bulkhead_acquire_scan_global(struct resil_ctx *x, const struct resil_bulkhead_conf *c,
				       void *st, struct resil_permit_priv *pm)
{
	uint32_t id = claim_id(x), idx;

	idx = global_claim(&x->clock, st, resil_bulkhead_max_of(c), id);
	return granted(pm, id, idx);
}

int resil_bulkhead_claim_walk(uint32_t id, const struct resil_bulkhead_conf *c, void *st,
			      struct resil_permit_priv *pm)
{
	uint32_t n = resil_bulkhead_max_of(c), *next = next_of(st), idx;

	idx = scan_walk_claim(st, n, n, id, scan_start(*next, n, id, SPREAD), next, SPREAD);
	return granted(pm, id, idx);
}

uint32_t resil_bulkhead_claim_last(void *st, uint32_t n, uint32_t id, struct resil_count *mine)
{
	uint32_t i = *next_of(st), exp = 0;
	ra32 *w;

	/* i == 0 (no slot yet) wraps */
	if (RESIL_UNLIKELY(i - 1 >= n))
		return 0;
	w = scan_slot(st, i - 1, SPREAD);
	if (RESIL_LIKELY(ld_relaxed(w) == 0)) {
		/* counted before the CAS (acq_rel: the count is seen before
		 * the slot), crash window: counted, no slot (resild frees
		 * fewer, never more) */
		resil_count_own_add(&mine->acquired, 1);
		if (RESIL_LIKELY(cas_acq_rel(w, &exp, id)))
			return i; /* crash window B, as scan_claim's; the next claim starts here too
				   */
		atomic_signal_fence(memory_order_seq_cst);
		resil_count_own_add(&mine->released, 1); /* no slot after all */
	}
	/* scan_claim_rest's hint, so that a saturated pool's rejection is
	 * decided here too */
	return hint_full(st, n, n) ? RESIL_BULKHEAD_LAST_FULL : 0;
}

bool resil_bulkhead_release_scan_n(void *st, uint32_t n, struct resil_permit_priv *pm)
{
	if (!(pm->flags & RESIL_PERMIT_BULKHEAD))
		return false;
	scan_free(st, n, NULL, pm->bulkhead_idx, pm->holder, false, SPREAD);
	pm->bulkhead_idx = 0;
	pm->flags &= ~RESIL_PERMIT_BULKHEAD;
	return true;
}

void resil_bulkhead_undo(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			 struct resil_permit_priv *pm)
{
	resil_bulkhead_release(x, c, st, pm, RESIL_IGNORED);
}

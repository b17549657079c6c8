/* SPDX-License-Identifier: MIT */
/*
 * bulkhead.c - at most bulkhead.max calls in flight for the whole fleet,
 * with permits that a SIGKILL can neither leak nor double.
 *
 * Size: above 900 lines on purpose: the scan's claim, walk and free are
 * always_inline helpers of resil_bulkhead_acquire and release (the hot
 * path), one copy per slot stride; the global scope's lease and parking
 * work on the same slots through the same helpers; and the counted pool
 * (resil_pool_*) of the adaptive limit lives here too.
 *
 * A permit is a slot claimed by CAS 0 -> client id: the claim IS the
 * record of who holds it, so the daemon gives back exactly what a dead
 * client held (reclaim: CAS id -> 0) and nothing else. There are exactly
 * bulkhead.max slots, so "never more than max in flight" holds by
 * construction, whatever happens to any other word.
 *
 * The scan, for every bulkhead, with or without bulkhead.wait and
 * bulkhead.critical (a partition: "Priorities"). No in-flight counter:
 *   enter  load this thread's last slot; free: CAS 0 -> id, done (one
 *          locked RMW). Else, unless the full hint says otherwise, walk
 *          the slots once around by groups of 8 (read-only loads, a CAS
 *          only on a slot seen free); none free: RESIL_REJECT_FULL.
 *   exit   CAS id -> 0 (release) from the id the permit was claimed with
 *          (pm->holder), then a load of the full hint: one RMW on the
 *          line this thread's claim just wrote. With bulkhead.wait, the
 *          CAS is seq_cst and a load of the waiter count follows (see
 *          "Waiting"): still no shared word written.
 *   Nothing counts, so nothing can drift: the daemon has no hint to
 *   repair, only dead holders' slots to free. And no word is written by
 *   every decision: two processes on one pool write their own slots'
 *   lines only (mp/bulkhead, max 1000: 105 M decisions/s together;
 *   mp/bulkhead2000, packed slots: 72 to 76; a pool above 1024 permits was
 *   counted before, its in-flight word crossing between the two CPUs
 *   twice per decision: 7 to 14 M/s; mp/bulkhead.wait measures the scan
 *   with waiters allowed, mp/bulkhead.critical with a partition).
 *   Slots up to RESIL_POOL_SPREAD_MAX (1024) are spread one per 128-byte
 *   line (resil_pool_shift's layout): packed, two processes on one
 *   max-25 policy bounce one line (mp/bulkhead25 measures it: spread,
 *   they decide as fast as on two policies; packed, several times
 *   slower). Above, spreading would cost 128 bytes a permit (8 MiB at
 *   the parser's 65536), so the slots are packed, 32 to a line, and a
 *   claim whose last slot another client holds walks from the line of
 *   its client id (slot 32 x id), and so does a thread's first, a
 *   process's later threads from lines further on (first_slot):
 *   processes claim on lines of their own (forked children too, which
 *   all inherit their parent's last slot), and so do threads of one
 *   process (mp/bulkhead2000.threads). The stride is a constant in each
 *   copy of the helpers (SPREAD, PACKED): resil_bulkhead_acquire and
 *   release test bulkhead.max once.
 *   The lean paths' scan functions and the global scope take spread
 *   pools only; a lean bulkhead of packed slots decides through
 *   resil_bulkhead_acquire and _release (resil/bulkhead2000.*).
 *   What a walk costs: a walk reads every slot, and a walk comes with
 *   every resil_bulkhead_recheck(n)-th rejection on the hint (16 per 128
 *   slots: about 8 slots read per rejection at any size), with the first
 *   rejection after a release into a saturated pool, and with an
 *   admission into a nearly full pool. Enter+exit costs the same at any
 *   size (resil/bulkhead.acq_rel against resil/bulkhead1000.acq_rel); a
 *   rejection of a saturated pool grows with the lines a walk reads
 *   (resil/bulkhead1000.reject: about 1.5x the 25-slot rejection): 1024
 *   spread, or 2048 packed at 65536 permits. A count would make a
 *   saturated pool's rejection one load; it would cost every admission
 *   two RMWs on one word all processes write, which is what limited two
 *   processes to 7-14 M decisions/s.
 *
 * The counted pool (resil_pool_claim, _free, _repair): the adaptive
 * limit's (adaptive.c), whose limit moves. An in-flight word `count` is
 * a hint that makes a rejection cheap (one load, or one fetch_add and its
 * undo). Three locked RMWs per admission: hint fetch_add, slot CAS, hint
 * fetch_sub.
 *
 * The shape (resil_bulkhead_same_shape): bulkhead.max, whose change
 * publishes a fresh block, and permits of the old block go back to the
 * old block (a permit is released under the record it was granted under:
 * that record's block and stride). Whether callers wait is part of it
 * too: a fail-fast permit's release (the lean paths') reads no waiter
 * count, so a block waiters sleep on is never one such permits are
 * released into (bulkhead.wait from 0 to 200ms: a fresh block). The
 * geometry (slot count, stride, offset) is written into the block's
 * geometry line at init (before publication) for someone reading a dump
 * of the segment, but every reader in the
 * code (the hot path, the release, the daemon's maintain/reclaim, the
 * observers' resil_bulkhead_held) takes it from the configuration (the
 * read-only segment): a client that scribbles on the geometry words
 * cannot send anyone out of bounds. The daemon's tick rewrites them from
 * the configuration (layout_repair).
 *
 * Shared words (state block, see bulkhead.h):
 *   slots[i]   writers: the claimer (CAS 0 -> id, acq_rel: pairs with the
 *              previous holder's release CAS, so a holder sees what the
 *              one before it did), the holder (CAS its own id -> 0,
 *              release: never a plain store of 0, so a slot the daemon
 *              wrongly took back and another client claimed stays that
 *              client's: a wrong reclaim admits one caller too many once,
 *              it never spreads), the daemon (CAS id -> 0 for a dead id,
 *              or for an id that names no live row: stray claims). Readers: claimers
 *              (relaxed pre-check and walks), the daemon and observers
 *              (scan, acquire; geometry from the configuration).
 *   full       line 0. Writers: a walk that found no slot free
 *              (store 1, relaxed, only if it read 0), releasers and a walk
 *              that found the hint stale (store 0, relaxed, only if they
 *              read 1), the daemon (tick, reclaim: store 0 when a slot is
 *              free). Readers: acquirers whose own slot was taken, every
 *              releaser (relaxed: a hint, it orders nothing; a read-mostly
 *              line, written only when the pool fills or drains).
 *              (A counted pool's `count` word, the waiters' and the
 *              adaptive limit's: writers every acquirer (fetch_add,
 *              seq_cst) and releaser (fetch_sub, seq_cst), the daemon
 *              (repair, reclaim: fetch_sub); readers acquirers (relaxed
 *              pre-check), the daemon (repair).)
 *   wake_seq   futex word; writers: releasers when nwait != 0 (fetch_add,
 *              release); readers: waiters (acquire) before they sleep.
 *   nwait      count word of the waiter pool (a counted pool: `count`).
 *   wslots[]   a waiter's claim, so a dead waiter is taken off exactly.
 *   geometry   nslots, shift, slots_off: init, then the daemon's
 *              tick when they differ; read by no code (dumps).
 *
 * Linearization points: an admission takes effect at the slot CAS, a
 * release at the slot CAS. A rejection is a walk that saw every slot
 * taken, each when it looked (not one snapshot: under churn a slot may
 * have been free for a moment during the walk; fail-fast accepts that, as
 * a counted pool accepts its hint's acquirers in flight), or a load of
 * the full hint. (A counted pool's rejection: at the hint load or
 * fetch_add.)
 *
 * Full hint: a saturated pool would cost every rejection a
 * walk; with the hint it costs one load. The race: a walk reads slot j
 * taken, its holder stores 0 and then reads `full` == 0 (nothing to
 * clear), and the walk stores full = 1: the hint says full while slot j is
 * free (a release that misses the hint). It cannot be closed without a
 * StoreLoad fence (a locked RMW) in the release. With a partition the
 * hint has two values: SHARED, a normal caller's walk (the slots below
 * the reserve) found them all taken, and ALL, a critical caller's walk
 * (every slot) did. A normal caller rejects on either, a critical one on
 * ALL only; a walk never lowers ALL to SHARED; a release clears it, but
 * of a reserved slot's only ALL, to SHARED (the shared part is as full as
 * it was); the tick clears SHARED when a shared slot is free, ALL when
 * any is. Without a partition only ALL is written. Bounded and repaired:
 * the next release of any permit clears it; a thread that rejects on the
 * hint walks anyway every resil_bulkhead_recheck(n)-th time (16 per 128
 * slots) and clears it when it finds a slot, so no release and no daemon
 * is needed; the daemon's tick clears it when a slot is free. A stale hint
 * costs at most 15 spurious rejections per thread and pool (127 for 513
 * to 1024 slots, 8191 above 32768; the count lives beside the
 * thread's last slot; two saturated pools that share that entry share the
 * count, and then the next release or tick repairs), never an excess
 * admission: the slots bound the total.
 *
 * Global scope (policy.scope = global, spread slots only: conf.c). The
 * fleet's bulkhead.max is leased to hosts (daemon/cluster_bulkhead.c).
 * Under a live lease of S slots a client claims only slots below S (the
 * scan claim over the first S slots: lease_slots); the daemon parks the
 * slots above (CAS 0 -> PARKED on a free one; PARKED -> 0 below S when
 * the share grows), so what a host may hold is visible in its slots. A
 * slot held by a call is never revoked: above S it drains (its release
 * frees a slot no client of this host claims again, and the daemon parks
 * it), and the daemon reports meanwhile that its host still holds it. The
 * lease sits in line 2 (lease_slots, fallback_slots, sure_slots, then
 * lease_expiry_ns last, release), a line written once per interval.
 * No clock below sure_slots: sure_slots = min(lease_slots,
 * fallback_slots) is a slot count both sides of the expiry allow, so a
 * claim of a slot below it holds whether the lease is live or not, and
 * needs no clock to tell. A thread tries its last slot there first: one
 * load of line 2 and the usual CAS, the only cost over a host bulkhead
 * (bench case bulkhead.acq_rel_global). Any other claim loads the expiry,
 * acquire, reads the coarse clock, and claims below lease_slots (live) or
 * fallback_slots (past). A staler sure_slots than the slots is harmless
 * the same way a stale lease_slots is: a slot parked since refuses the
 * CAS, and a slot freed above a shrunk share is claimable for as long as
 * the old words are seen, one store away.
 * A block no daemon has leased (expiry 0: no --cluster-redis) is a host
 * bulkhead. Past it (the daemon is stopped, dead, or cannot reach Redis) a client
 * claims only slots below fallback_slots, free or parked alike (CAS 0 or
 * PARKED -> id): the configured fallback (the fleet's max over the hosts
 * last seen, all of it, or none) whatever the parked slots say. Its
 * release is the usual CAS id -> 0; the daemon parks again when it is
 * back. The fallback has an end (fallback_until_ns, after_slots past it:
 * daemon/cluster_bulkhead.c says why), read on that slow path only. Below
 * sure_slots no clock is read, so a claim there must hold past that end
 * too: with an end, sure_slots is also at most after_slots (set before the
 * lease, resil_bulkhead_lease_set), and a daemon that dies leaves no
 * worker a slot past the end that the fleet does not hold for it. No word
 * can send anyone out of bounds: the slot count comes from the
 * configuration, fallback_slots and sure_slots are clamped to it.
 *
 * Crash windows (a process can die between any two instructions):
 *   bulkhead:
 *   B  after the slot CAS, before pm->bulkhead_idx is written: the slot
 *      holds the dead id; reclaim frees it. (The release is one CAS: no
 *      window. A process killed between its store and clearing the full
 *      hint, or between a walk and setting it, leaves the hint stale or
 *      unset: the race above, repaired the same way.)
 *   counted pool (the adaptive limit's):
 *   A  after the hint fetch_add, before the slot CAS: the hint is one too
 *      high and no slot records it;
 *   B  as above (reclaim also takes its hint unit back);
 *   C  after the release CAS, before the hint fetch_sub: the hint is one
 *      too high, the slot is already free;
 *   D  a rejected acquirer between its fetch_add and the undo fetch_sub:
 *      like A.
 * A and C and D leave an excess of the hint over the claims that no live
 * process will remove: resil_pool_repair (daemon tick) subtracts the part
 * of the excess that persisted over two ticks (transient excess is live
 * acquirers in flight). A correction that turns out wrong (a live
 * acquirer happened to sit in its window at both ticks) shows up as a
 * deficit at the next ticks and is corrected back the same way. A hint
 * that is low only admits a little more eagerly: the slots still bound
 * the total. Until the daemon repairs, a leaked unit lowers the usable
 * max by one: a spurious rejection, never an excess admission. Two
 * maintainers at once (embedded processes) may both correct the same
 * excess; the deficit shows at the next ticks and is corrected back.
 *
 * Waiting (bulkhead.wait > 0): a caller that finds no
 * permit claims a waiter slot (the waiter count is that pool's hint, so a
 * dead waiter's count is repaired exactly like a permit), then loops:
 * read wake_seq, try again, FUTEX_WAIT(wake_seq, seen) (shared futex: no
 * FUTEX_PRIVATE_FLAG, the word lives in a MAP_SHARED segment) until it
 * claims or the wait is over. A releaser bumps wake_seq and wakes ONE
 * waiter, and only when nwait != 0: a release nobody waits for makes no
 * syscall. Lost wakeups are excluded by a Dekker pair: the waiter's
 * nwait fetch_add (seq_cst) + fence before it looks at the slots, the
 * releaser's seq_cst RMW (the slot CAS itself) before its seq_cst load of nwait: if the
 * waiter's load of the slot missed the CAS, its fence
 * precedes the CAS in the single order of seq_cst operations, so the
 * nwait load, after the CAS, sees the waiter's fetch_add; either way one
 * of them sees the other. A waiter tries by a walk, never on the full
 * hint (a release that missed the hint would leave it asleep with a slot
 * free). A woken waiter that gives up without a permit passes the wakeup
 * on. The wait is measured on CLOCK_MONOTONIC, not the policy clock: a
 * futex sleeps in real time (a manual clock would never end it).
 *
 * Priorities: bulkhead.critical reserves a share of max for callers with
 * pm->priority == RESIL_PRIO_CRITICAL (resil_bulkhead_shared: the rest).
 * The reserve is the top slots. Every caller claims a slot
 * below them (the shared part) while there is one; a critical caller
 * then claims a reserved one (part_claim). So normal callers never hold
 * more than max - reserve, and a reserved slot no critical call holds is
 * free whatever the normal callers do, at any moment. A critical call in
 * a shared slot leaves the normal callers one less, so while no critical
 * call had to take a reserved slot this is the rule a count kept before
 * (normal callers admitted while fewer than max - reserve calls of any
 * priority are in flight). After one did, normal callers may fill the
 * shared part while it holds its reserved slot: critical callers then
 * find the reserve less what their own calls hold (the count would have
 * kept it whole). Nothing counts, so a partition drifts no more than the
 * rest; a change of the share keeps the block (calls in flight keep
 * their slots; from the change on, claims follow the new bound).
 *
 * Reshaping (bulkhead.max or the wait's presence changes) publishes a new block;
 * permits granted in the old block are released there, so nothing is
 * carried: for a moment the old block's holders and the new max add up.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "resil.h"
#include "bulkhead.h"
#include "parse.h"

#define seq_faa(p, v) atomic_fetch_add_explicit((p), (v), memory_order_seq_cst)
#define seq_fas(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_seq_cst)
#define seq_ld(p)     atomic_load_explicit((p), memory_order_seq_cst)
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

/* ---- configuration ---- */

void resil_bulkhead_conf_defaults(struct resil_bulkhead_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->max = 25;
	c->critical_bp = 0;
	c->wait_ns = 0;
}

int resil_bulkhead_conf_set(struct resil_bulkhead_conf *c, const char *key, const char *value,
			    char *err, size_t errlen)
{
	if (strcmp(key, "bulkhead.max") == 0) {
		uint32_t v;

		if (resil_parse_u32(value, &v) < 0 || v == 0 || v > RESIL_POOL_MAX) {
			snprintf(err, errlen,
				 "bulkhead.max: '%s' is not a number of permits in 1..%u", value,
				 RESIL_POOL_MAX);
			return -EINVAL;
		}
		c->max = v;
	} else if (strcmp(key, "bulkhead.wait") == 0) {
		int64_t ns;

		if (resil_parse_duration(value, &ns) < 0 || ns < 0) {
			snprintf(err, errlen,
				 "bulkhead.wait: '%s' is not a duration (e.g. 200ms, 0)", value);
			return -EINVAL;
		}
		c->wait_ns = ns;
	} else if (strcmp(key, "bulkhead.critical") == 0) {
		uint32_t bp;

		if (resil_parse_percent_bp(value, &bp) < 0 || bp > 10000) {
			snprintf(err, errlen, "bulkhead.critical: '%s' is not a percent in 0..100",
				 value);
			return -EINVAL;
		}
		c->critical_bp = bp;
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

size_t resil_bulkhead_conf_format(const struct resil_bulkhead_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	resil_priv_put(buf, len, &off, "bulkhead.max = %u\n", c->max);
	resil_format_duration(c->wait_ns, d, sizeof(d));
	resil_priv_put(buf, len, &off, "bulkhead.wait = %s\n", d);
	if (c->critical_bp % 100 == 0)
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u%%\n", c->critical_bp / 100);
	else if (c->critical_bp % 10 == 0)
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u.%u%%\n",
			       c->critical_bp / 100, c->critical_bp / 10 % 10);
	else
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u.%02u%%\n",
			       c->critical_bp / 100, c->critical_bp % 100);
	return off;
}

/* ---- state ---- */

uint64_t resil_bulkhead_state_size(const struct resil_bulkhead_conf *c)
{
	return sizeof(struct resil_bulkhead_state) + resil_pool_bytes(resil_bulkhead_max_of(c));
}

/* The geometry words, from the configuration (no code reads them: they
 * are for a dump of the segment): the daemon rewrites them at each tick.
 * Stores only when a word differs: the line stays clean and shared
 * otherwise. */
static void layout_repair(struct resil_bulkhead_state *s, const struct resil_bulkhead_conf *c)
{
	uint32_t n = resil_bulkhead_max_of(c), shift = resil_pool_shift(n);

	if (s->nslots != n)
		s->nslots = n;
	if (s->shift != shift)
		s->shift = shift;
	if (s->slots_off != sizeof(*s))
		s->slots_off = sizeof(*s);
}

bool resil_bulkhead_layout_ok(const struct resil_bulkhead_conf *c, const void *st)
{
	const struct resil_bulkhead_state *s = st;
	uint32_t n = resil_bulkhead_max_of(c);

	return s->nslots == n && s->shift == resil_pool_shift(n) && s->slots_off == sizeof(*s);
}

void resil_bulkhead_state_init(void *st, const struct resil_bulkhead_conf *c, int64_t now)
{
	struct resil_bulkhead_state *s = st;

	/* Nobody else sees the block before the record that points at it is
	 * published (release), so plain initialisation is enough. */
	memset(s, 0, resil_bulkhead_state_size(c));
	layout_repair(s, c);
}

bool resil_bulkhead_same_shape(const struct resil_bulkhead_conf *a,
			       const struct resil_bulkhead_conf *b)
{
	/* a fail-fast permit's release does not look for waiters */
	return resil_bulkhead_max_of(a) == resil_bulkhead_max_of(b) &&
	       (a->wait_ns > 0) == (b->wait_ns > 0);
}

void resil_bulkhead_carry(void *nst, const struct resil_bulkhead_conf *nc, const void *ost,
			  const struct resil_bulkhead_conf *oc, int64_t now)
{
	const struct resil_bulkhead_state *o = ost;
	struct resil_bulkhead_state *s = nst;

	/* Permits stay in the block they were granted in (see the top). Only
	 * the statistics carry over. */
	st_relaxed(&s->reclaimed, ld_relaxed(&o->reclaimed));
	st_relaxed(&s->repaired, ld_relaxed(&o->repaired));
	st_relaxed(&s->waits, ld_relaxed(&o->waits));
}

/* The pool, from the configuration (never from the block's geometry
 * words, which clients can write). Uncounted (no count word): only
 * resil_pool_claimed, _sweep and _reclaim (uncounted) and _holders read
 * the pool. */
static inline struct resil_pool conf_pool(struct resil_bulkhead_state *s,
					  const struct resil_bulkhead_conf *c)
{
	uint32_t n = resil_bulkhead_max_of(c);
	struct resil_pool p = {
	    .count = NULL,
	    .slots = (ra32 *)(s + 1),
	    .n = n,
	    .shift = resil_pool_shift(n),
	};
	return p;
}

uint32_t resil_bulkhead_held(const struct resil_bulkhead_conf *c, const void *st)
{
	struct resil_pool p = conf_pool((struct resil_bulkhead_state *)st, c);

	return resil_pool_claimed(&p);
}

/* ---- the slots ---- */

/* The slots' stride (log2 of words), a constant in each copy of the
 * always_inline helpers below: the lean paths' scan functions and the
 * global scope see SPREAD only; resil_bulkhead_acquire and _release pick
 * one from the configuration. */
#define SPREAD RESIL_POOL_SPREAD_SHIFT
#define PACKED 0u

/* Rejections on the full hint by this thread, per entry of
 * resil_pool_next: every RESIL_BULKHEAD_RECHECK-th one walks instead. */
static _Thread_local __attribute__((tls_model("initial-exec")))
uint32_t resil_full_skips[POOL_NEXT];

static inline uint32_t *skips_of(const void *key)
{
	return &resil_full_skips[((uintptr_t)key / RESIL_HOT_ALIGN) & (POOL_NEXT - 1)];
}

static inline ra32 *scan_slot(struct resil_bulkhead_state *s, uint32_t i, uint32_t sh)
{
	return (ra32 *)(s + 1) + ((size_t)i << sh);
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

static __attribute__((noinline, cold)) void wake_one(struct resil_bulkhead_state *s);

/* The release: a CAS from the holder's id (a line this thread just wrote,
 * so usually still in its cache); then the hint, when set (a read-mostly
 * line): cleared, or, for a slot at or above the shared part of c's
 * partition (c NULL: none), SHARED (that part is as full as it was). A
 * slot that no longer names us was reclaimed: nothing to give.
 * waits (bulkhead.wait > 0): the CAS is seq_cst and the waiter count is
 * loaded after it, seq_cst: the releaser's half of the Dekker pair (see
 * "Waiting" at the top). On x86 the CAS is the same instruction. */
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
	/* the race of the hint: see "Full hint" at the top */
	v = ld_relaxed(&s->full);
	if (RESIL_UNLIKELY(v)) {
		uint32_t shared = c ? resil_bulkhead_shared(c, n) : n;
		uint32_t nv = idx - 1 < shared ? 0 : RESIL_BULKHEAD_FULL_SHARED;

		if (v != nv)
			st_relaxed(&s->full, nv);
	}
	if (waits && RESIL_UNLIKELY(seq_ld(&s->nwait) != 0))
		wake_one(s);
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

static __attribute__((noinline, cold)) void wake_one(struct resil_bulkhead_state *s)
{
	atomic_fetch_add_explicit(&s->wake_seq, 1, memory_order_release);
	syscall(SYS_futex, (uint32_t *)&s->wake_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* A waiter's try: a walk of the shared slots from where a claim's walk
 * starts (walk_start), then, for a critical caller (limit n), of the
 * reserved ones, whatever the full hint says (see "Waiting" at the
 * top). */
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
static __attribute__((noinline, cold)) int bulkhead_wait(struct resil_ctx *x,
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
		wake_one(s); /* the wakeup we took and did not use goes on */
	x->now = 0;	     /* time went by: the next reading must be fresh */
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
static inline uint32_t global_claim(struct resil_ctx *x, struct resil_bulkhead_state *s, uint32_t n,
				    uint32_t id)
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
	now = resil_clock_now_coarse(&x->clock);
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

uint32_t resil_bulkhead_park(const struct resil_bulkhead_conf *c, void *st, uint32_t target,
			     uint32_t *busy)
{
	struct resil_bulkhead_state *s = st;
	uint32_t n = resil_bulkhead_max_of(c), parked = 0, held = 0;
	/* spread or packed alike (a global pool is spread: conf.c; a move's
	 * bridge parks either, daemon/segmove.c) */
	uint32_t sh = resil_bulkhead_spread(c) ? SPREAD : PACKED;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t v = ld_acquire(scan_slot(s, i, sh));

		parked += v == RESIL_BULKHEAD_PARKED;
		held += v != 0 && v != RESIL_BULKHEAD_PARKED;
	}
	*busy = held;
	if (target == UINT32_MAX)
		return parked; /* a count only */
	if (target > n)
		target = n;
	for (uint32_t i = n; i-- > n - target;) {
		uint32_t exp = 0;

		if (ld_relaxed(scan_slot(s, i, sh)) == 0 &&
		    cas_acq_rel(scan_slot(s, i, sh), &exp, RESIL_BULKHEAD_PARKED))
			parked++;
	}
	for (uint32_t i = 0; i < n - target; i++) {
		uint32_t exp = RESIL_BULKHEAD_PARKED;

		if (ld_relaxed(scan_slot(s, i, sh)) == RESIL_BULKHEAD_PARKED &&
		    cas_acq_rel(scan_slot(s, i, sh), &exp, 0)) {
			parked--;
			if (ld_relaxed(&s->full))
				st_relaxed(&s->full, 0); /* a slot is free now */
		}
	}
	return parked;
}

void resil_bulkhead_lease_set(void *st, int64_t expiry_ns, uint32_t slots, uint32_t fallback_slots)
{
	struct resil_bulkhead_state *s = st;
	uint32_t sure = slots < fallback_slots ? slots : fallback_slots;

	/* a fallback with an end: only what its after tier allows too (the
	 * daemon's own words, set before this call) */
	if (ld_relaxed(&s->fallback_until_ns) && ld_relaxed(&s->after_slots) < sure)
		sure = ld_relaxed(&s->after_slots);
	st_relaxed(&s->lease_slots, slots);
	st_relaxed(&s->fallback_slots, fallback_slots);
	/* release: pairs with global_claim's acquire of it */
	atomic_store_explicit(&s->sure_slots, sure, memory_order_release);
	/* last, release: pairs with global_claim's acquire */
	atomic_store_explicit(&s->lease_expiry_ns, (uint64_t)expiry_ns, memory_order_release);
}

void resil_bulkhead_fallback_end_set(void *st, int64_t until_ns, uint32_t after_slots)
{
	struct resil_bulkhead_state *s = st;

	st_relaxed(&s->after_slots, after_slots);
	/* last, release: pairs with fallback_claim's acquire */
	atomic_store_explicit(&s->fallback_until_ns, (uint64_t)until_ns, memory_order_release);
}

/* An acquire of any host- or global-scope bulkhead, in the stride sh. */
static inline __attribute__((always_inline)) int
acquire_sh(struct resil_ctx *x, const struct resil_bulkhead_conf *c, struct resil_bulkhead_state *s,
	   struct resil_permit_priv *pm, uint32_t n, uint32_t sh)
{
	uint32_t id = claim_id(x), limit = n, idx;

	if (sh == SPREAD && RESIL_UNLIKELY(x->rec && x->rec->conf.scope == RESIL_SCOPE_GLOBAL)) {
		idx = global_claim(x, s, n, id); /* fail-fast, no partition, spread: conf.c */
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
	return bulkhead_wait(x, c, s, limit, id, pm);
}

int resil_bulkhead_acquire(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			   struct resil_permit_priv *pm)
{
	if (RESIL_LIKELY(resil_bulkhead_spread(c)))
		return acquire_sh(x, c, st, pm, resil_bulkhead_max_of(c), SPREAD);
	return acquire_sh(x, c, st, pm, resil_bulkhead_max_of(c), PACKED);
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

	idx = global_claim(x, st, resil_bulkhead_max_of(c), id);
	return granted(pm, id, idx);
}

int resil_bulkhead_acquire_scan_rest(struct resil_ctx *x, const struct resil_bulkhead_conf *c,
				     void *st, struct resil_permit_priv *pm)
{
	uint32_t n = resil_bulkhead_max_of(c), id = claim_id(x), *next = next_of(st), idx;

	idx = scan_walk_claim(st, n, n, id, scan_start(*next, n, id, SPREAD), next, SPREAD);
	return granted(pm, id, idx);
}

uint32_t resil_bulkhead_claim_last(void *st, uint32_t n, uint32_t id)
{
	uint32_t i = *next_of(st);

	/* i == 0 (no slot yet) wraps */
	if (RESIL_UNLIKELY(i - 1 >= n))
		return 0;
	if (RESIL_LIKELY(try_slot(st, i - 1, id, SPREAD)))
		return i; /* crash window B, as scan_claim's; the next claim starts here too */
	/* scan_claim_rest's hint, so that a saturated pool's rejection is
	 * decided here too */
	return hint_full(st, n, n) ? RESIL_BULKHEAD_LAST_FULL : 0;
}

void resil_bulkhead_release_scan_n(void *st, uint32_t n, struct resil_permit_priv *pm)
{
	if (!(pm->flags & RESIL_PERMIT_BULKHEAD))
		return;
	scan_free(st, n, NULL, pm->bulkhead_idx, pm->holder, false, SPREAD);
	pm->bulkhead_idx = 0;
	pm->flags &= ~RESIL_PERMIT_BULKHEAD;
}

void resil_bulkhead_undo(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			 struct resil_permit_priv *pm)
{
	resil_bulkhead_release(x, c, st, pm, RESIL_IGNORED);
}

void resil_bulkhead_maintain(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool covered = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t v = ld_relaxed(&s->full);

	layout_repair(s, c);
	/* a hint that a release missed: cleared when a slot it covers is
	 * free (SHARED: the shared part's; ALL, or a word no code writes:
	 * any) */
	if (v == RESIL_BULKHEAD_FULL_SHARED)
		covered.n = resil_bulkhead_shared(c, covered.n);
	if (RESIL_UNLIKELY(v) && resil_pool_claimed(&covered) < covered.n) {
		st_relaxed(&s->full, 0);
		faa_relaxed(&s->repaired, 1);
	}
	/* the waiters are counted */
	if (c->wait_ns > 0 && resil_pool_repair(&wp, &s->prev_wexcess))
		faa_relaxed(&s->repaired, 1);
}

uint32_t resil_bulkhead_sweep(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			      resil_stray_fn stray, void *ctx)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool p = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t n = resil_pool_sweep(&p, false, stray, ctx);

	/* waiter claims too: a stray one would keep every release paying a
	 * wake (the count is repaired by maintain, the claim only here) */
	if (c->wait_ns > 0)
		(void)resil_pool_sweep(&wp, true, stray, ctx);
	if (n) {
		faa_relaxed(&s->reclaimed, n);
		if (ld_relaxed(&s->full))
			st_relaxed(&s->full, 0); /* slots are free now */
		/* after the sweep's seq_cst CASes: the releaser's half of the
		 * Dekker pair ("Waiting") */
		if (c->wait_ns > 0 && seq_ld(&s->nwait) != 0)
			wake_one(s);
	}
	return n;
}

void resil_bulkhead_holders(const struct resil_bulkhead_conf *c, const void *st, resil_holder_fn fn,
			    void *ctx)
{
	struct resil_pool p = conf_pool((struct resil_bulkhead_state *)st, c);

	resil_pool_holders(&p, fn, ctx);
}

void resil_bulkhead_reclaim(struct resil_ctx *x, const struct resil_bulkhead_conf *c, void *st,
			    uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool p = conf_pool(s, c);
	struct resil_pool wp = {
	    .count = &s->nwait, .slots = s->wslots, .n = RESIL_BULKHEAD_WAITERS, .shift = 0};
	uint32_t n = resil_pool_reclaim(&p, false, dead_client);
	uint32_t w = c->wait_ns > 0 ? resil_pool_reclaim(&wp, true, dead_client) : 0;

	if (n && ld_relaxed(&s->full))
		st_relaxed(&s->full, 0); /* slots are free now */
	if (n) {
		faa_relaxed(&s->reclaimed, n);
		/* freed permits may let a waiter in (after a seq_cst RMW, the
		 * releaser's half of "Waiting": the slot's CAS) */
		if (c->wait_ns > 0 && seq_ld(&s->nwait) != 0)
			wake_one(s);
	}
	if (counts) {
		counts->permits += n;
		counts->waiters += w;
	}
}

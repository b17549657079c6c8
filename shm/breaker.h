/* SPDX-License-Identifier: MIT */
/*
 * breaker.h - circuit breaker: count, time and consecutive windows,
 * half-open probes, forced states.
 *
 * The component interface is described in decision.h; the algorithm, the
 * layout and every crash window in docs/internals/breaker.md; who writes
 * which word in breaker.c; its keys, outcome rules and names in
 * breaker_conf.c.
 */
#ifndef RESIL_SHM_BREAKER_H
#define RESIL_SHM_BREAKER_H

#include "decision.h"

/* Why a transition happened (an event's reason): RESIL_WHY_* of names.h. */

/* Outcome codes stored in a count-window slot and accumulated in the
 * packed counters: bit 0 present, bit 1 failure, bit 2 slow. */
#define RESIL_BK_EMPTY 0u
#define RESIL_BK_OK    1u
#define RESIL_BK_FAIL  3u
#define RESIL_BK_SLOW  4u /* or'ed into OK or FAIL */

/* Transition counters (32-bit, wrapping: a counter reset to Prometheus). */
#define RESIL_BK_MOVES 32

/*
 * The state block (shared memory, part of the ABI). Each line below is
 * written by a different kind of party; see breaker.c for who writes and
 * reads each word and with which order.
 *
 *   word:  state:3 | streak:5 | gen:20 | since_ms:36 (ms after base_ns, rounded up)
 *   counters: calls:21 | failures:21 | slow:22, each a two's-complement
 *             field summed with one fetch_add (transiently negative fields
 *             borrow from the next one; decoding balances them)
 *   consec: gen:20 << 32 | consecutive failures:32
 *   ho:     gen:20 << 44 | answered:14 << 28 | failed:14 << 14 | slow:14
 *   probe owner: (gen | 1 << 31) << 32 | client id; 0 = free
 */
struct resil_breaker_probe {
	ra64 owner;
	rai64 claimed_at; /* INT64_MAX: not timed (free, or claim not stamped yet) */
};

struct resil_breaker_bucket {
	ra64 epoch; /* tick + 1 of the span it counts; 0 never used */
	ra64 calls; /* 64 bits: a busy time window outgrows 21-bit fields */
	ra64 bad;   /* failures << 32 | slow calls */
	uint64_t reserved;
};

struct resil_breaker_state {
	/* line 0: the state word (CAS on transitions, loaded by every call) and
	 * the immutable shape written once by state_init */
	alignas(RESIL_HOT_ALIGN) ra64 word;
	RESIL_A8 int64_t base_ns;   /* time origin of since_ms */
	RESIL_A8 int64_t bucket_ns; /* time window: span of one bucket */
	uint32_t kind;		    /* enum resil_window_kind */
	uint32_t size;		    /* count: slots; time: buckets; consecutive: N */
	uint32_t nprobe;	    /* probe slots = half-open concurrency */
	uint32_t probe_off;	    /* from the block start */
	uint32_t win_off;	    /* count slots or time buckets, from the block start */
	uint32_t reserved32;
	/* line 1: count window position, fetch_add by every recorder */
	alignas(RESIL_HOT_ALIGN) ra64 seq;
	/* line 2: count-window counters (on change of a slot's outcome), the
	 * consecutive-failure word (on failures) */
	alignas(RESIL_HOT_ALIGN) ra64 counters;
	ra64 consec;
	/* line 3: half-open results, CAS by probers */
	alignas(RESIL_HOT_ALIGN) ra64 ho;
	/* lines 4-5: transitions by (from, to), fetch_add (relaxed) by the
	 * CAS winner of each transition (resil_breaker_moves) */
	alignas(RESIL_HOT_ALIGN) ra32 moves[RESIL_BK_MOVES];
	/* then: nprobe x struct resil_breaker_probe at probe_off;
	 *       count: size x ra32 slots, time: size x struct resil_breaker_bucket
	 *       at win_off */
};

RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, word) == 0, "breaker word");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, base_ns) == 8, "breaker base");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, bucket_ns) == 16, "breaker bucket_ns");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, kind) == 24, "breaker kind");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, win_off) == 40, "breaker win_off");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, seq) == 128, "breaker seq line");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, counters) == 256, "breaker counters");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, consec) == 264, "breaker consec");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, ho) == 384, "breaker ho line");
RESIL_STATIC_ASSERT(offsetof(struct resil_breaker_state, moves) == 512, "breaker moves");
RESIL_STATIC_ASSERT(sizeof(struct resil_breaker_state) == 640, "breaker state size");
RESIL_STATIC_ASSERT(sizeof(struct resil_breaker_probe) == 16, "probe size");
RESIL_STATIC_ASSERT(sizeof(struct resil_breaker_bucket) == 32, "bucket size");

/*
 * Lean decisions (libresil.c, "Lean decisions"): a breaker without a
 * slow-call rate decides a CLOSED acquire and an OPEN rejection, and on a
 * count window a success's release, without a decision context, on the
 * same words as resil_breaker_check/acquire/release (which call the same
 * code or decide the same way).
 *   resil_breaker_lean: the configuration is one (no slow-call rate: an
 *     admission stamps no time).
 *   resil_breaker_acquire_lean: CLOSED: 0, pm->breaker_gen set; else 1
 *     and nothing read but the word: decide through resil_breaker_check
 *     and resil_breaker_acquire.
 *   resil_breaker_reject_lean: verdict RESIL_REJECT_OPEN for
 *     FORCED_OPEN (no reading needed); RESIL_BK_LEAN_UNTIL for OPEN
 *     with a wait of 100 ms or more: a coarse clock reading below until
 *     is before the wait is over, as check_open judges it (reject); else
 *     (a reading at or after until, any other state: verdict 0) decide
 *     through the general path. Returned in registers, so that the
 *     caller's other paths stay tail calls. wait0 and streaks:
 *     resil_breaker_lean_wait(c), taken once when the caller bound the
 *     configuration.
 *   resil_breaker_lean_wait: the OPEN wait of a first open (streak 0);
 *     in *streaks the state word's streak bits when a repeated open
 *     waits longer (a multiplier and a cap above it), else 0.
 *   resil_breaker_release_lean: RESIL_BK_LEAN_DONE: recorded;
 *     RESIL_BK_LEAN_NO: nothing done (not a success of this gen in
 *     CLOSED on a count window): release through resil_breaker_release;
 *     else
 *     RESIL_BK_LEAN_AFTER | the code the slot held: recorded, and the
 *     counters and the threshold are resil_breaker_lean_after's, with a
 *     context (a transition may follow). win_off:
 *     resil_breaker_win_off(c), taken once when the caller bound the
 *     configuration.
 *   resil_breaker_win_off: the window's offset in a block of
 *     configuration c (the probes' slots before it; even), | 1 when a
 *     success's release may be the lean one, from c alone. A
 *     caller that binds a configuration (libresil.c's handle binding)
 *     computes it once and hands it over: in resil_ctx (bk_conf, bk_off:
 *     the general path uses bk_off only when bk_conf is the very
 *     configuration it decides with) or as release_lean's argument.
 */
#define RESIL_BK_LEAN_DONE  0u
#define RESIL_BK_LEAN_NO    0x100u
#define RESIL_BK_LEAN_AFTER 0x200u
bool resil_breaker_lean(const struct resil_breaker_conf *c);
int resil_breaker_acquire_lean(void *st, struct resil_permit_priv *pm);
#define RESIL_BK_LEAN_UNTIL (-1)
struct resil_bk_lean_open {
	int64_t until; /* RESIL_BK_LEAN_UNTIL: a time of the policy's clock, ns */
	int verdict;   /* 0, RESIL_REJECT_OPEN or RESIL_BK_LEAN_UNTIL */
};
struct resil_bk_lean_open resil_breaker_reject_lean(const struct resil_breaker_conf *c, void *st,
						    int64_t wait0, uint64_t streaks);
int64_t resil_breaker_lean_wait(const struct resil_breaker_conf *c, uint64_t *streaks);
/* The longest OPEN wait c can have (breaker.wait_max, else breaker.wait):
 * a bound for a Retry-After judged on a coarse reading, which may lag the
 * reading the breaker opened at. */
static inline int64_t resil_breaker_wait_cap(const struct resil_breaker_conf *c)
{
	return c->wait_max_ns > 0 ? c->wait_max_ns : (c->wait_ns > 0 ? c->wait_ns : 0);
}
uint32_t resil_breaker_release_lean(const struct resil_breaker_conf *c, void *st,
				    const struct resil_permit_priv *pm, int outcome,
				    uint32_t win_off);
uint32_t resil_breaker_win_off(const struct resil_breaker_conf *c);
void resil_breaker_lean_after(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			      uint32_t gen, uint32_t r);

/* pm->probe_idx of a probe: the claiming client's id << 11 | slot + 1, so
 * its release frees the slot it claimed whoever releases it (a thread, a
 * forked child). 0: no probe. */
#define RESIL_BK_PROBE_IDX(client, slot) ((uint32_t)(client) << 11 | ((slot) + 1))
#define RESIL_BK_PROBE_SLOT(idx)	 (((idx)&0x7ffu) - 1)
#define RESIL_BK_PROBE_CLIENT(idx)	 ((idx) >> 11)

/* Limits of the configuration (the packed fields above). */
#define RESIL_BK_WINDOW_MAX    1000000u /* count window slots (21-bit fields) */
#define RESIL_BK_BUCKETS_MAX   4096u
#define RESIL_BK_TIME_MAX_NS   (24 * 3600 * RESIL_NS_PER_S) /* longest time window: a day */
#define RESIL_BK_HALF_OPEN_MAX 10000u /* 14-bit fields */
#define RESIL_BK_PROBES_MAX    1024u  /* probe slots (half-open concurrency) */

/* Decoded packed counters, clamped at 0. */
struct resil_breaker_counts {
	int64_t calls;
	int64_t failures;
	int64_t slow;
};
void resil_breaker_unpack(uint64_t packed, struct resil_breaker_counts *out);

uint64_t resil_breaker_state_size(const struct resil_breaker_conf *c);
void resil_breaker_state_init(void *st, const struct resil_breaker_conf *c, int64_t now);
bool resil_breaker_same_shape(const struct resil_breaker_conf *a,
			      const struct resil_breaker_conf *b);
void resil_breaker_carry(void *nst, const struct resil_breaker_conf *nc, const void *ost,
			 const struct resil_breaker_conf *oc, int64_t now);
int resil_breaker_acquire(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			  struct resil_permit_priv *pm);
void resil_breaker_undo(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			struct resil_permit_priv *pm);
void resil_breaker_release(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			   struct resil_permit_priv *pm, int outcome);
void resil_breaker_maintain(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st);
/* The block's layout copies are the configuration's (adoption: a block
 * whose are not is reset, see policy.c). */
bool resil_breaker_layout_ok(const struct resil_breaker_conf *c, const void *st);
void resil_breaker_reclaim(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			   uint32_t dead_client, struct resil_reclaim_counts *counts);

/* Step 1 of acquire, read-only: RESIL_REJECT_OPEN when OPEN and the wait
 * is not over, or FORCED_OPEN; else 0. Records in pm whether the breaker
 * needs a probe (the wait is over, or HALF_OPEN), which
 * resil_breaker_acquire then claims as the last step. */
int resil_breaker_check(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			struct resil_permit_priv *pm);
/* RESIL_STATE_* of resil.h. */
int resil_breaker_state(const void *st);
/* Daemon tick: free the probes whose client id stray() says no live
 * client holds (as resil_policy_sweep frees permits); how many. */
uint32_t resil_breaker_sweep(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			     resil_stray_fn stray, void *ctx);
/* The state, once what a decision would settle first is settled: in
 * HALF_OPEN, a probe held past half_open_max_wait sends it back to OPEN
 * (as check_slow and the daemon's tick do). A state read, not a decision:
 * nothing is spent. */
int resil_breaker_settle(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st);
/*
 * Transitions made from state `from` to state `to` (RESIL_STATE_*), or -1
 * for a pair the breaker never takes (CLOSED -> HALF_OPEN...). Counted by
 * this version's writers only, 32 bits wrapping. The natural cycle is
 * CLOSED -> OPEN -> HALF_OPEN -> CLOSED or OPEN; an operator's force and
 * reset reach DISABLED, FORCED_OPEN, METRICS_ONLY and CLOSED from any state.
 */
int64_t resil_breaker_moves(const void *st, int from, int to);
/*
 * The window as the thresholds see it now: calls, failures and slow calls
 * in a count or time window (as of now, the monotonic clock, for a time
 * window). -ENODATA for a consecutive window (no rates), 0 otherwise.
 */
int resil_breaker_window(const struct resil_breaker_conf *c, const void *st, int64_t now,
			 struct resil_breaker_counts *out);
/* policy.scope = global (daemon/cluster.c). The host's time window now
 * (zero for other windows; calls at most the window's buckets x 2^32 - 1,
 * failures and slow calls at most calls: the counts a host reports), and
 * CLOSED -> OPEN because the fleet crossed a
 * threshold (why, value as for a local open): true if this call moved it. */
void resil_breaker_host_window(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			       struct resil_breaker_counts *k);
bool resil_breaker_trip(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			uint32_t why, uint64_t value);
/* The fleet's half-open (cluster.c): one host at a time probes for every
 * host. hold: OPEN keeps rejecting until `until` at least (the wait's end
 * is pushed later, never earlier; no transition, no event); true if it
 * moved. probe_now: OPEN -> HALF_OPEN now, whatever the wait (this host
 * holds the fleet's probes). fleet_close: OPEN -> a fresh CLOSED (another
 * host's probes passed). Both true if this call moved the word. */
bool resil_breaker_hold(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int64_t until);
bool resil_breaker_probe_now(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st);
bool resil_breaker_fleet_close(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st);
/* Force a state (RESIL_STATE_DISABLED, FORCED_OPEN, METRICS_ONLY) or go
 * back to normal (RESIL_STATE_CLOSED: a fresh, closed breaker). 0 or
 * -EINVAL. */
int resil_breaker_force(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int state);
/* Outcome for an HTTP status or an errno with the breaker.record rules. */
int resil_breaker_outcome_http(const struct resil_breaker_conf *c, int status);
int resil_breaker_outcome_errno(const struct resil_breaker_conf *c, int err);

/* Configuration: defaults, and "breaker.x = y\n" lines (snprintf-like:
 * returns the length the whole text needs). */
void resil_breaker_conf_defaults(struct resil_breaker_conf *c);
/* Its keys (conf.c dispatches breaker.*): 0, -ENOENT for a key that is not
 * one of them, -EINVAL with a message in err. */
int resil_breaker_conf_set(struct resil_breaker_conf *c, const char *key, const char *value,
			   char *err, size_t errlen);
size_t resil_breaker_conf_format(const struct resil_breaker_conf *c, char *buf, size_t len);

/* What `resilctl show` says of a breaker (resil_breaker_info). */
struct resil_breaker_info {
	int state;	  /* RESIL_STATE_* */
	uint32_t streak;  /* repeated opens (the growing wait) */
	int64_t since_ns; /* the state was entered (the clock of now, to 1 ms) */
	int64_t wait_ns;  /* OPEN: this open's wait; the next probe at since + wait */
	int64_t calls;	  /* the window's records; HALF_OPEN: probes answered */
	int64_t failures; /* consecutive window: the failures in a row */
	int64_t slow;
	uint32_t min_calls;   /* records before a rate is judged */
	uint32_t probes_held; /* HALF_OPEN: probes in flight */
	uint32_t probes_max;  /* probes per HALF_OPEN (half_open_calls) */
};
void resil_breaker_info(const struct resil_breaker_conf *c, const void *st, int64_t now,
			struct resil_breaker_info *out);

/* Words for a reason and a state: names.h. */

#endif

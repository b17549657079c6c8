/* SPDX-License-Identifier: MIT */
/*
 * acquire.c - resil_acquire*, the decision path of an admission: the
 * arguments, fork detection, the handle's binding, then the decision of
 * the policy's components (shm/policy.c's resil_policy_acquire, or the
 * branch of the binding's kind, binding.h) and the periodic check of the
 * daemon's liveness. No syscall, no lock, no allocation: a binding that
 * is not good sends the call through bind.c's slow path under r->lock.
 * The design: docs/internals/libresil.md, "The decision path".
 *
 * Shared-memory words this file touches: each component's (their
 * headers in shm/ say who writes which, and with which order); here only
 * the slot word (acquire load: the record is whole) and the config
 * segment's flags (relaxed: RESIL_SEG_RETIRED is a hint the slow path
 * re-reads under the lock).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "budget.h"
#include "conf.h"
#include "binding.h"
#include "internal.h"
#include "bulkhead.h"
#include "stats.h"
#include "limit.h"
#include "resil.pb-c.h"

/* The clock reading a decision made, for resil_priv_check: x->now, or a
 * coarse reading every 256th call of a thread that decides without one. */
/* initial-exec: no __tls_get_addr call in the shared library */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint32_t clockless;

static inline void after_reading(struct resil *r, const struct resil_clock *clk, int64_t now)
{
	if (r->embedded)
		return;
	if (!now) {
		if (RESIL_LIKELY(++clockless & ld_relaxed(&r->clockless_mask)))
			return;
		now = resil_clock_now_coarse(clk);
	}
	resil_priv_check(r, now);
}

static inline void after_decision(struct resil *r, const struct resil_ctx *x)
{
	after_reading(r, &x->clock, x->now);
}

/* after_decision of a decision that read no clock and has no context:
 * every 256th call of a thread reads the process's clock (coarse). */
static RESIL_COLD __attribute__((noinline)) void clockless_check(struct resil *r)
{
	resil_priv_check(r, resil_clock_now_coarse(ld_acquire(&r->clock)));
}

static inline __attribute__((always_inline)) void after_clockless(struct resil *r)
{
	if (RESIL_LIKELY(r->embedded || (++clockless & ld_relaxed(&r->clockless_mask))))
		return;
	clockless_check(r);
}

/* after_clockless's periodic check, then v. */
static RESIL_COLD __attribute__((noinline)) int clockless_then(struct resil *r, int v)
{
	clockless_check(r);
	return v;
}

/* after_clockless, then v, the check's call a tail call off the common
 * return (a hot function that returns this makes no call of its own). */
static inline __attribute__((always_inline)) int clockless_return(struct resil *r, int v)
{
	if (RESIL_LIKELY(r->embedded || (++clockless & ld_relaxed(&r->clockless_mask))))
		return v;
	return clockless_then(r, v);
}

/* Handle p's binding, if it is good for a decision now: the mapping is
 * the current one and not retired, and the slot word still names the
 * bound record. No syscall. The caller has made fork_check (or tested
 * forked()). */
static inline __attribute__((always_inline)) bool good_binding(resil_policy_t *p,
							       const struct resil_binding **bp)
{
	struct resil *r = p->r;
	const struct resil_binding *b;

	/* acquire: pairs with bind's release, so the binding is whole */
	b = ld_acquire(&p->b);
	*bp = b;
	/* acquire on the slot word: pairs with the release store that
	 * published the record, so the record is whole; cur: the binding
	 * is only good for the mapping decisions use now */
	return b->word != 0 && b->m == ld_acquire(&r->cur) &&
	       !(ld_relaxed(b->flagsp) & RESIL_SEG_RETIRED) && ld_acquire(b->slotp) == b->word;
}

/* The same after fork_check (the hot functions test forked() themselves
 * and take a function of their own after a fork: acquire_forked). */
static inline __attribute__((always_inline)) bool bound(resil_policy_t *p,
							const struct resil_binding **bp)
{
	fork_check(p->r);
	return good_binding(p, bp);
}

/* The record and mapping of a decision on handle p, and the permit's
 * where, from the binding b when it is good (ok), else the slow path.
 * rel: b carries the breaker's window offset (bind), which
 * the context then carries for a release. */
static inline __attribute__((always_inline)) const struct resil_rec *
ctx_bound(resil_policy_t *p, const struct resil_binding *b, bool ok, bool rel, struct resil_ctx *x,
	  struct resil_map **ret_m, uint32_t *where, int *err)
{
	if (RESIL_LIKELY(ok)) {
		fill_ctx(p->r, b->m, x);
		x->rec = b->rec;
		if (rel) {
			x->bk_conf = &b->rec->conf.breaker;
			x->bk_off = LEAN_BK_OFF(b->lean);
		}
		*ret_m = b->m;
		*where = b->where;
		return b->rec;
	}
	return resil_priv_ctx_slow(p, x, ret_m, where, err);
}

static inline __attribute__((always_inline)) const struct resil_rec *
ctx_map(resil_policy_t *p, struct resil_ctx *x, struct resil_map **ret_m, uint32_t *where, int *err,
	bool rel)
{
	const struct resil_binding *b;
	bool ok = bound(p, &b);

	return ctx_bound(p, b, ok, rel, x, ret_m, where, err);
}

static inline __attribute__((always_inline)) const struct resil_rec *
priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err, bool rel)
{
	const struct resil_rec *rec;
	struct resil_map *m;
	uint32_t where;

	rec = ctx_map(p, x, &m, &where, err, rel);
	/* resil_call and retries decide through here: they get the periodic
	 * check too (no clock read yet: the clockless count) */
	after_decision(p->r, x);
	return rec;
}

const struct resil_rec *resil_priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	return priv_ctx(p, x, err, false);
}

/* The same, for a caller that releases with x (resil_call): x carries
 * the binding's breaker window offset (resil_ctx bk_conf, bk_off). */
const struct resil_rec *resil_priv_ctx_rel(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	return priv_ctx(p, x, err, true);
}

/*
 * limit.wait: the limiter reserved a permit that becomes free wait_ns from
 * now; the caller sleeps until then (a syscall, on this path only). With a
 * clock of the application's (resil_set_clock: a simulation) nothing
 * sleeps: the caller reads resil_permit_wait_ns() and advances its own
 * time. A call that measures its duration starts after the sleep.
 */
static RESIL_COLD void reservation_sleep(struct resil *r, struct resil_permit_priv *pm)
{
	struct timespec ts;
	int64_t until;

	if (ld_acquire(&r->clock)->fn)
		return;
	until = resil_clock_monotonic(NULL) + pm->wait_ns;
	ts.tv_sec = until / RESIL_NS_PER_S;
	ts.tv_nsec = until % RESIL_NS_PER_S;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	if (pm->flags & RESIL_PERMIT_TIMED)
		pm->start_ns += pm->wait_ns;
}

/* ---- hot path ---- */

/* A lean acquire's end: the rejection counted as resil_policy_acquire
 * counts it, or the permit made whole. */
static inline __attribute__((always_inline)) int
lean_done(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	  int64_t now, struct resil_permit_priv *pm, int v)
{
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	after_reading(p->r, clk, now);
	return v;
}

/* A lean bulkhead's decision v made whole: a rejection counted, an
 * admission's permit tagged with the binding's record. */
static inline int lean_bulkhead_done(resil_policy_t *p, const struct resil_binding *b,
				     struct resil_permit_priv *pm, int v)
{
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	after_clockless(p->r);
	return v;
}

/* Lean acquires (see "Lean decisions"): the component's own acquire with
 * a context that holds what it reads, one function per kind so that each
 * context stays in registers, and out of line (see acquire_general below:
 * resil_acquire_ex reaches them by a tail call). The scan bulkhead reads
 * the client id. */
static __attribute__((noinline, flatten)) int acquire_lean_bulkhead(resil_policy_t *p,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    bool last_tried)
{
	struct resil_ctx x;
	int v;

	/* A fail-fast bulkhead reads the client id alone (resil_bulkhead_acquire:
	 * no wait, no clock), so only that is written; the rest of x stays
	 * unread, as the counters' rejection and the clockless check read
	 * no context. */
	x.client_id = ld_relaxed(&b->m->claim_id);
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = 1;
	if (RESIL_UNLIKELY(b->rec->conf.scope == RESIL_SCOPE_GLOBAL)) {
		/* a global bulkhead checks its lease (bulkhead.c, global_claim):
		 * the clock too, unless the slot is sure */
		x.clock = *ld_acquire(&p->r->clock);
		v = resil_bulkhead_acquire_scan_global(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	} else if (last_tried) {
		/* resil_bulkhead_claim_last found the last slot taken */
		v = resil_bulkhead_acquire_scan_rest(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	} else {
		v = resil_bulkhead_acquire_scan(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	}
	return lean_bulkhead_done(p, b, pm, v);
}

/* A lean bulkhead of host scope whose callers wait, with a critical share
 * or of packed slots: the bulkhead's acquire, which reads x->rec for the
 * scope, the permit's priority for the share and, when it waits, writes
 * x->now (the wait reads CLOCK_MONOTONIC), and the count. Its own
 * function: the fail-fast and global claims keep their frames. */
static __attribute__((noinline, flatten)) int
acquire_lean_bulkhead_wait(resil_policy_t *p, const struct resil_binding *b,
			   const struct resil_req *req, struct resil_permit_priv *pm)
{
	struct resil_ctx x;
	int v;

	x.client_id = ld_relaxed(&b->m->claim_id);
	x.rec = NULL;
	x.now = 0;
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = 1;
	if (req)
		pm->priority = (uint32_t)req->priority;
	v = resil_bulkhead_acquire(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	return lean_bulkhead_done(p, b, pm, v);
}

/* A lean limiter's permit before its acquire: zeroed, and the permits the
 * request takes (req->permits; 0 without a request: one). */
static inline void limit_permit_start(struct resil_permit_priv *pm, int permits)
{
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = permits > 1 ? (uint32_t)permits : 1;
}

/* The limiter reads the clock (and caches its reading in x); a keyed one
 * the key, and the segment and record (the table's hash seed, the
 * full-table event, the eviction count). */
static __attribute__((noinline, flatten)) int acquire_lean_limit(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	struct resil_ctx x = {.seg = b->m->seg, .rec = b->rec, .clock = *ld_acquire(&p->r->clock)};
	int v;

	limit_permit_start(pm, req ? req->permits : 0);
	if (req) {
		x.key = req->key;
		x.key_len = req->key_len;
	}
	v = resil_limit_acquire(&x, &b->rec->conf.limit, b->lean_st, pm);
	return lean_done(p, b, &x.clock, x.now, pm, v);
}

/* An unkeyed GCRA of host scope: no context, the clock's pair as
 * published (immutable: resil_set_clock), and the liveness check with the
 * precise reading when one was taken. A key in req is not this limiter's
 * business (the general path ignores it too). */
static __attribute__((noinline, flatten)) int acquire_lean_gcra(resil_policy_t *p,
								const struct resil_binding *b,
								const struct resil_req *req,
								struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&p->r->clock);
	int64_t now;
	int v;

	limit_permit_start(pm, req ? req->permits : 0);
	v = resil_limit_acquire_gcra(clk, &b->rec->conf.limit, b->lean_st, pm, &now);
	return lean_done(p, b, clk, now, pm, v);
}

/* A keyed limiter, a call with a key: no context while the key's entry is
 * found in its first two buckets; else (RESIL_LIMIT_ASK: nothing was
 * written) the context's path, which inserts it. */
static __attribute__((noinline, flatten)) int acquire_lean_keyed(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&p->r->clock);
	int64_t now;
	int v;

	limit_permit_start(pm, req->permits);
	v = resil_limit_acquire_keyed(clk, &b->rec->conf.limit, b->lean_st, b->key_seeds, req->key,
				      req->key_len, pm, &now);
	if (RESIL_UNLIKELY(v == RESIL_LIMIT_ASK))
		return acquire_lean_limit(p, b, req, pm);
	return lean_done(p, b, clk, now, pm, v);
}

/*
 * The general path of an acquire: the decision context and
 * resil_policy_acquire, from the binding b that bound() returned (ok) or
 * through the slow path. Each path of an acquire is its own function, so
 * that each pays for its own frame only: the counters alone and a CLOSED
 * lean breaker (resil_acquire_ex itself) save no register and make no
 * call; the general path, a lean bulkhead's scan and a lean limiter's
 * clock reading are reached by a tail call.
 */
static __attribute__((noinline, flatten)) int
acquire_general(resil_policy_t *p, const struct resil_req *req, struct resil_permit_priv *pm,
		const struct resil_binding *b, bool ok)
{
	const void *key = req ? req->key : NULL;
	size_t key_len = req ? req->key_len : 0;
	const struct resil_rec *rec;
	struct resil_map *m;
	struct resil_ctx x;
	int err = -ENOENT, ret;
	uint32_t where = 0;

	memset(pm, 0, sizeof(*pm));
	rec = ctx_bound(p, b, ok, false, &x, &m, &where, &err);
	if (RESIL_UNLIKELY(!rec))
		return err;
	if (req) {
		if (RESIL_UNLIKELY(key && !rec->conf.limit.keys))
			return -EINVAL; /* see resil_acquire_ex */
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	} else {
		pm->limit_permits = 1;
	}
	x.key = key;
	x.key_len = key_len;
	ret = resil_policy_acquire(&x, rec, pm, key, key_len);
	if (ret == RESIL_ADMIT) {
		pm->where = where;
		pm->flags |= permit_held(rec);
		if (RESIL_UNLIKELY(resil_limit_reserved_wait(pm) > 0))
			reservation_sleep(p->r, pm);
	}
	after_decision(p->r, &x);
	return ret;
}

/* A lean rejection that makes no permit whole: what the API reads of a
 * rejected permit, its flags (resil_release: nothing held) and wait_ns
 * (resil_permit_wait_ns), and the count, as the general path counts it. */
static inline __attribute__((always_inline)) int lean_reject(struct resil *r,
							     const struct resil_binding *b,
							     struct resil_permit_priv *pm, int v,
							     int64_t wait_ns)
{
	pm->flags = 0;
	pm->wait_ns = wait_ns;
	resil_stats_rejected(NULL, b->stats_st, v);
	return clockless_return(r, v);
}

/* A lean breaker that is not CLOSED: OPEN before its wait, and
 * FORCED_OPEN, reject with a coarse clock reading at most, counted as the
 * general path counts them. Any other state (the first caller after the
 * wait, HALF_OPEN, a short wait that needs a precise reading): the
 * general path decides. The permit is as resil_acquire_ex left it (not
 * made whole): a rejection writes what the API reads of a rejected
 * permit, its flags (resil_release: nothing held) and wait_ns
 * (resil_permit_wait_ns); the general path makes it whole itself. The
 * breaker judges the word before the clock is read, so that what is kept
 * across the reading is the time it is compared with and what the
 * rejection or the general path need. */
static __attribute__((noinline, flatten)) int acquire_open(resil_policy_t *p,
							   const struct resil_req *req,
							   struct resil_permit_priv *pm,
							   const struct resil_binding *b)
{
	struct resil_bk_lean_open o =
	    resil_breaker_reject_lean(&b->rec->conf.breaker, b->lean_st, b->bk_wait, b->bk_streaks);

	int64_t now;

	if (RESIL_UNLIKELY(!o.verdict))
		return acquire_general(p, req, pm, b, true);
	if (o.verdict != RESIL_BK_LEAN_UNTIL)
		return lean_reject(p->r, b, pm, RESIL_REJECT_OPEN, 0); /* FORCED_OPEN */
	/* acquire: pairs with the release in resil_set_clock */
	now = resil_clock_now_coarse(ld_acquire(&p->r->clock));
	if (RESIL_UNLIKELY(now >= o.until))
		return acquire_general(p, req, pm, b, true);
	/* the Retry-After: until the next probe (bounded by the longest wait:
	 * the coarse reading may lag the one the breaker opened at) */
	return lean_reject(p->r, b, pm, RESIL_REJECT_OPEN, resil_min64(o.until - now, b->bk_cap));
}

/* An admission of the counters alone, or of a CLOSED lean breaker (gen:
 * its word's gen): no context and no clock; the permit made whole as the
 * general path makes it. */
static inline __attribute__((always_inline)) int
lean_admit(struct resil *r, const struct resil_req *req, struct resil_permit_priv *pm,
	   const struct resil_binding *b, uint32_t gen)
{
	memset(pm, 0, sizeof(*pm));
	pm->breaker_gen = gen;
	pm->limit_permits = 1;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	}
	pm->where = b->where;
	pm->flags = b->held;
	return clockless_return(r, RESIL_ADMIT);
}

/* A lean bulkhead's rejection on its full hint, out of line: a tail call
 * of resil_acquire_ex. */
static __attribute__((noinline)) int rejected_full(struct resil *r, const struct resil_binding *b,
						   struct resil_permit_priv *pm)
{
	return lean_reject(r, b, pm, RESIL_REJECT_FULL, 0);
}

/* A lean stack's end: lean_done after a clock reading (clk: the limiter's),
 * else the counting and the clockless check of a decision without one. */
static inline __attribute__((always_inline)) int
stack_done(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	   int64_t now, struct resil_permit_priv *pm, int v)
{
	if (clk)
		return lean_done(p, b, clk, now, pm, v);
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	return clockless_return(p->r, v);
}

/* A lean stack's bulkhead rejected (v): the limiter's permit back, as
 * resil_policy_acquire's undo gives it (its crash window: a token simply
 * spent), then the count. Out of line: the limiter's undo wants a
 * context. */
static RESIL_COLD __attribute__((noinline)) int
stack_full(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	   int64_t now, struct resil_permit_priv *pm, int v)
{
	if (b->lim_st) {
		struct resil_ctx x = {.seg = b->m->seg, .rec = b->rec, .clock = *clk, .now = now};

		resil_limit_undo(&x, &b->rec->conf.limit, b->lim_st, pm);
	}
	return stack_done(p, b, clk, now, pm, v);
}

/* A lean stack (see "Lean decisions"): each component's lean acquire in
 * resil_policy_acquire's order; a breaker that is not CLOSED goes to
 * acquire_open (which rejects, or hands the decision to the general
 * path), having spent nothing. */
static __attribute__((noinline, flatten)) int acquire_lean_stack(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	const struct resil_clock *clk = NULL;
	struct resil_ctx x;
	int64_t now = 0;
	uint32_t gen = 0;
	int v;

	if (b->lean_st) {
		if (RESIL_UNLIKELY(resil_breaker_acquire_lean(b->lean_st, pm)))
			return acquire_open(p, req, pm, b);
		gen = pm->breaker_gen;
	}
	memset(pm, 0, sizeof(*pm));
	pm->breaker_gen = gen;
	pm->limit_permits = 1;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	}
	if (b->lim_st) {
		/* acquire: pairs with the release in resil_set_clock */
		clk = ld_acquire(&p->r->clock);
		v = resil_limit_acquire_gcra(clk, &b->rec->conf.limit, b->lim_st, pm, &now);
		if (RESIL_UNLIKELY(v))
			return lean_done(p, b, clk, now, pm, v);
	}
	if (b->bh_st) {
		/* a fail-fast bulkhead reads the client id alone */
		x.client_id = ld_relaxed(&b->m->claim_id);
		v = resil_bulkhead_acquire_scan(&x, &b->rec->conf.bulkhead, b->bh_st, pm);
		if (RESIL_UNLIKELY(v))
			return stack_full(p, b, clk, now, pm, v);
	}
	return stack_done(p, b, clk, now, pm, 0);
}

/*
 * A call with a key: a keyed limiter decides it, lean when it can
 * (acquire_lean_keyed); a policy without one refuses it (-EINVAL): a key
 * given to a policy that would not look at it is a mistake, not a key to
 * ignore. So resil_acquire_ex's own paths never test for a key.
 */
static __attribute__((noinline, flatten)) int
acquire_keyed(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;

	fork_check(p->r);
	if (RESIL_UNLIKELY(!good_binding(p, &b)))
		return acquire_general(p, req, pm, b, false);
	/* the lean keyed limiter's word says keyed: one compare */
	if (RESIL_LIKELY(b->lean == ((uint64_t)LEAN_KEYED << 32 | RESIL_LEAN_LIMIT)))
		return acquire_lean_keyed(p, b, req, pm);
	if (RESIL_UNLIKELY(!b->rec->conf.limit.keys))
		return -EINVAL;
	if (LEAN_KIND(b->lean) == RESIL_LEAN_LIMIT)
		return acquire_lean_limit(p, b, req, pm);
	return acquire_general(p, req, pm, b, true);
}

/* The first decision of a forked child: its own identity first
 * (fork_check), then the decision. Out of line, as every call the hot
 * functions make: a call they made inline would cost each of their paths
 * the registers it keeps across it. */
static RESIL_COLD __attribute__((noinline)) int
acquire_forked(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	fork_check(p->r);
	return resil_acquire_ex(p, req, permit);
}

RESIL_API __attribute__((flatten)) int
resil_acquire_ex(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;
	struct resil *r;
	uint32_t kind;

	if (RESIL_UNLIKELY(!p || !permit))
		return -EINVAL;
	if (req) {
		if (req->key_len && !req->key)
			return -EINVAL;
		if (req->permits < 0 ||
		    (req->priority != RESIL_PRIO_NORMAL && req->priority != RESIL_PRIO_CRITICAL))
			return -EINVAL;
		/* a call with a key: the keyed limiter's own way */
		if (RESIL_LIKELY(req->key != NULL))
			return acquire_keyed(p, req, permit);
	}
	r = p->r;
	if (forked(r))
		return acquire_forked(p, req, permit);
	if (RESIL_UNLIKELY(!good_binding(p, &b)))
		return acquire_general(p, req, pm, b, false);
	/* the kinds tested one by one, in this order: each lean path pays
	 * for the tests before it only */
	kind = LEAN_KIND(b->lean);
	if (kind == RESIL_LEAN_BULKHEAD) {
		/* the thread's last slot, free again: no call, no frame; a
		 * slot taken (or the first claim) goes on in
		 * acquire_lean_bulkhead, a global bulkhead starts there, and a
		 * bulkhead whose callers wait, with a critical share or of
		 * packed slots in acquire_lean_bulkhead_wait */
		uint32_t n = LEAN_BH_N(b->lean), id, idx;

		if (RESIL_UNLIKELY(!n)) {
			/* no slot count: global scope (fail-fast, conf.c), or
			 * callers that wait, a critical share, packed slots */
			if (b->rec->conf.scope != RESIL_SCOPE_GLOBAL)
				return acquire_lean_bulkhead_wait(p, b, req, pm);
			return acquire_lean_bulkhead(p, b, pm, false);
		}
		id = ld_relaxed(&b->m->claim_id);
		idx = resil_bulkhead_claim_last(b->lean_st, n, id);
		if (RESIL_UNLIKELY(idx - 1 >= n)) {
			if (idx == 0)
				return acquire_lean_bulkhead(p, b, pm, true);
			return rejected_full(r, b, pm); /* full, by the hint */
		}
		memset(pm, 0, sizeof(*pm));
		pm->limit_permits = 1;
		pm->holder = id;
		pm->bulkhead_idx = idx;
		pm->where = b->where;
		pm->flags = RESIL_PERMIT_BULKHEAD | b->held;
		return clockless_return(r, RESIL_ADMIT);
	}
	if (kind == RESIL_LEAN_BREAKER) {
		/* CLOSED spends nothing: the word's gen is all it takes; a
		 * rejection does not make the permit whole (acquire_open) */
		if (RESIL_UNLIKELY(resil_breaker_acquire_lean(b->lean_st, pm)))
			return acquire_open(p, req, pm, b);
		return lean_admit(r, req, pm, b, pm->breaker_gen);
	}
	if (kind == RESIL_LEAN_STATS)
		return lean_admit(r, req, pm, b, 0);
	if (kind == RESIL_LEAN_LIMIT) {
		uint32_t way = LEAN_LIMIT_WAY(b->lean);

		/* a call with a key went to acquire_keyed */
		if (way == LEAN_GCRA)
			return acquire_lean_gcra(p, b, req, pm);
		return acquire_lean_limit(p, b, req, pm);
	}
	if (kind == RESIL_LEAN_STACK)
		return acquire_lean_stack(p, b, req, pm);
	return acquire_general(p, req, pm, b, true);
}

RESIL_API int resil_acquire(resil_policy_t *p, resil_permit_t *permit)
{
	return resil_acquire_ex(p, NULL, permit);
}

RESIL_API int resil_acquire_key(resil_policy_t *p, const void *key, size_t len,
				resil_permit_t *permit)
{
	struct resil_req req = {.key = key, .key_len = len};

	if (RESIL_UNLIKELY(!key && len))
		return -EINVAL;
	return resil_acquire_ex(p, &req, permit);
}

/*
 * Whether an acquire on p may sleep: a bulkhead or a limiter with a wait
 * (bulkhead.wait, limit.wait). Bindings ask it before each acquire to
 * give up their own lock (Python's GIL) only around a decision that can
 * block: giving it up costs more than a decision that cannot. A lean
 * binding answers from the handle alone (of the lean kinds only a
 * bulkhead with bulkhead.wait waits).
 */
RESIL_API int resil_policy_may_wait(const resil_policy_t *p)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	const struct resil_binding *b;
	int err = -ENOENT;

	if (!p)
		return -EINVAL;
	/* a lean decision waits only for a bulkhead whose callers wait */
	if (bound((resil_policy_t *)p, &b) && LEAN_KIND(b->lean))
		return LEAN_KIND(b->lean) == RESIL_LEAN_BULKHEAD &&
		       b->rec->conf.bulkhead.wait_ns > 0;
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return err;
	return (resil_has(rec, RESIL_C_BULKHEAD) && rec->conf.bulkhead.wait_ns > 0) ||
	       (resil_has(rec, RESIL_C_LIMIT) && rec->conf.limit.wait_ns > 0);
}

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

/*
 * The periodic check (resil_priv_check: the daemon's liveness, the row)
 * after a decision: with the clock reading the decision took, else every
 * 256th decision of a thread that took none reads the coarse clock. Not
 * in embedded mode (no daemon).
 */
/* initial-exec: no __tls_get_addr call in the shared library */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint32_t clockless;

static RESIL_COLD __attribute__((noinline)) void clockless_check(struct resil *r)
{
	/* acquire: pairs with the release in resil_set_clock */
	resil_priv_check(r, resil_clock_now_coarse(ld_acquire(&r->clock)));
}

/* clockless_check, then v: a tail call off the common return, so that a
 * decision that returns through here makes no call of its own. */
static RESIL_COLD __attribute__((noinline)) int clockless_then(struct resil *r, int v)
{
	clockless_check(r);
	return v;
}

/* The check after a decision that read the clock at now (0: none), then v. */
static inline __attribute__((always_inline)) int checked(struct resil *r, int64_t now, int v)
{
	if (r->embedded)
		return v;
	if (now) {
		resil_priv_check(r, now);
		return v;
	}
	if (RESIL_LIKELY(++clockless & ld_relaxed(&r->clockless_mask)))
		return v;
	return clockless_then(r, v);
}

static inline void after_decision(struct resil *r, const struct resil_ctx *x)
{
	(void)checked(r, x->now, 0);
}

/* Handle p's binding, if it is good for a decision now: the mapping is
 * the current one and not retired, and the slot word still names the
 * bound record. No syscall. The caller has made fork_check (or tested
 * forked()). */
static inline __attribute__((always_inline)) bool good_binding(struct resil *r, resil_policy_t *p,
							       const struct resil_binding **bp)
{
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
	return good_binding(p->r, p, bp);
}

/* The record and mapping of a decision on handle p, its whole context
 * and the permit's where, from the binding b when it is good (ok), else
 * through the slow path. */
static inline __attribute__((always_inline)) const struct resil_rec *
ctx_bound(resil_policy_t *p, const struct resil_binding *b, bool ok, struct resil_ctx *x,
	  struct resil_map **ret_m, uint32_t *where, int *err)
{
	if (RESIL_LIKELY(ok)) {
		binding_ctx(p->r, b, x);
		*ret_m = b->m;
		*where = b->where;
		return b->rec;
	}
	return resil_priv_ctx_slow(p, x, ret_m, where, err);
}

/* resil_priv_ctx in a forked child (its own identity first) or from a
 * binding that is not good: the slow path (bind.c). Out of line: the
 * bound case keeps no frame. */
static RESIL_COLD __attribute__((noinline)) const struct resil_rec *
ctx_unbound(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	const struct resil_rec *rec;
	struct resil_map *m;
	uint32_t where;

	fork_check(p->r);
	rec = resil_priv_ctx_slow(p, x, &m, &where, err);
	after_decision(p->r, x);
	return rec;
}

/* The record of a decision on handle p and its whole context, for the
 * callers that decide through shm/policy.c themselves (resil_call,
 * retries, the handle's questions), with the periodic check; NULL and
 * *err when the policy is gone. */
const struct resil_rec *resil_priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	struct resil *r = p->r;
	const struct resil_binding *b;

	if (RESIL_UNLIKELY(forked(r) || !good_binding(r, p, &b)))
		return ctx_unbound(p, x, err);
	binding_ctx(r, b, x);
	(void)checked(r, 0, 0); /* no reading yet: x->now is 0 */
	return b->rec;
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

/* ---- the decision path ---- */

/*
 * The end of an acquire the binding's branches rejected (v): counted as
 * resil_policy_acquire counts it, with its Retry-After only from who knows
 * one (the limiter, an OPEN breaker); then the periodic check (checked:
 * now, the reading the decision took, or 0 when it took none).
 */
static inline __attribute__((always_inline)) int count_rejected(struct resil *r,
								const struct resil_binding *b,
								struct resil_permit_priv *pm, int v,
								int64_t now)
{
	if (v != RESIL_REJECT_LIMITED && v != RESIL_REJECT_OPEN)
		pm->wait_ns = 0;
	pm->flags = 0;
	resil_stats_rejected(NULL, b->stats_st, v);
	return checked(r, now, v);
}

/* The bulkhead's rejection on its full hint, with no clock reading, out of
 * line: the count is a call, and the admissions of resil_acquire_ex keep
 * no frame for it. */
static __attribute__((noinline)) int rejected_full(struct resil *r, const struct resil_binding *b,
						   struct resil_permit_priv *pm)
{
	return count_rejected(r, b, pm, RESIL_REJECT_FULL, 0);
}

/* The end of every acquire the binding's branches decide: a rejection,
 * or an admission's permit made whole (the record and mapping it was
 * granted under, its tag) and the periodic check. */
static inline __attribute__((always_inline)) int decided(struct resil *r,
							 const struct resil_binding *b,
							 struct resil_permit_priv *pm, int v,
							 int64_t now)
{
	if (RESIL_UNLIKELY(v))
		return count_rejected(r, b, pm, v, now);
	pm->where = b->where;
	pm->flags |= b->held;
	return checked(r, now, v);
}

/* A request whose fields are out of range (a key's length without a
 * key, negative permits, an unknown priority). */
static inline bool request_bad(const struct resil_req *req)
{
	return (req->key_len && !req->key) || req->permits < 0 ||
	       (req->priority != RESIL_PRIO_NORMAL && req->priority != RESIL_PRIO_CRITICAL);
}

/* The permit an acquire starts from: zeroed, the breaker's gen (0: none),
 * the request's priority and the permits it takes (one without a
 * request). */
static inline __attribute__((always_inline)) void
permit_start(struct resil_permit_priv *pm, const struct resil_req *req, uint32_t gen)
{
	memset(pm, 0, sizeof(*pm));
	pm->breaker_gen = gen;
	pm->limit_permits = 1;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	}
}

/* An admission that holds nothing but the counters' (and the breaker's
 * gen, 0: none): the permit started and made whole, no clock read. */
static inline __attribute__((always_inline)) int
admitted(struct resil *r, const struct resil_binding *b, const struct resil_req *req,
	 struct resil_permit_priv *pm, uint32_t gen)
{
	permit_start(pm, req, gen);
	pm->where = b->where;
	pm->flags = b->held;
	return checked(r, 0, RESIL_ADMIT);
}

/*
 * The general path: the whole context and resil_policy_acquire, from the
 * binding b that good_binding() returned (ok), or through the slow path
 * (bind.c) when it was not good.
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

	permit_start(pm, req, 0);
	rec = ctx_bound(p, b, ok, &x, &m, &where, &err);
	if (RESIL_UNLIKELY(!rec))
		return err;
	if (RESIL_UNLIKELY(key && !rec->conf.limit.keys))
		return -EINVAL; /* see resil_acquire_ex */
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

/*
 * The breaker, not CLOSED: OPEN before its wait, and FORCED_OPEN, reject
 * with a coarse clock reading at most, counted as the general path counts
 * them. Any other state (the first caller after the wait, HALF_OPEN, a
 * short wait that needs a precise reading): the general path decides. A
 * rejection writes what the API reads of a rejected permit: its flags
 * (resil_release: nothing held) and wait_ns (the Retry-After: until the
 * next probe, bounded by the longest wait, since the coarse reading may
 * lag the one the breaker opened at).
 */
static __attribute__((noinline, flatten)) int acquire_open(resil_policy_t *p,
							   const struct resil_req *req,
							   struct resil_permit_priv *pm,
							   const struct resil_binding *b)
{
	struct resil_bk_lean_open o =
	    resil_breaker_reject_lean(&b->rec->conf.breaker, b->bk_st, b->bk_wait, b->bk_streaks);
	int64_t now;

	if (RESIL_UNLIKELY(!o.verdict))
		return acquire_general(p, req, pm, b, true);
	pm->wait_ns = 0;
	if (o.verdict == RESIL_BK_LEAN_UNTIL) {
		/* acquire: pairs with the release in resil_set_clock */
		now = resil_clock_now_coarse(ld_acquire(&p->r->clock));
		if (RESIL_UNLIKELY(now >= o.until))
			return acquire_general(p, req, pm, b, true);
		pm->wait_ns = resil_min64(o.until - now, b->bk_cap);
	}
	return count_rejected(p->r, b, pm, RESIL_REJECT_OPEN, 0);
}

/* A rejection of the bulkhead after the limiter's admission: the
 * limiter's permit given back, as resil_policy_acquire's undo (its crash
 * window: a token simply spent), with the whole context (now: the
 * limiter's reading). */
static RESIL_COLD __attribute__((noinline)) void limit_undo(struct resil *r,
							    const struct resil_binding *b,
							    struct resil_permit_priv *pm,
							    int64_t now)
{
	struct resil_ctx x;

	binding_ctx(r, b, &x);
	x.now = now;
	resil_limit_undo(&x, &b->rec->conf.limit, b->lim_st, pm);
}

/*
 * The bulkhead's own acquire (a bulkhead whose callers wait, with a
 * critical share, of packed slots or of global scope; or the walk after
 * the thread's last slot was taken), from what it reads (struct
 * resil_bulkhead_claimant: the claim id, the scope, the clock); a
 * rejection gives the limiter's permit back first. now: the limiter's
 * reading.
 */
static __attribute__((noinline, flatten)) int acquire_bulkhead_own(struct resil *r,
								   const struct resil_binding *b,
								   struct resil_permit_priv *pm,
								   int64_t now, bool walk)
{
	const struct resil_bulkhead_conf *c = &b->rec->conf.bulkhead;
	/* acquire: pairs with the release in resil_set_clock */
	struct resil_bulkhead_claimant w = {
	    .id = ld_relaxed(&b->m->claim_id),
	    .global = b->rec->conf.scope == RESIL_SCOPE_GLOBAL,
	    .clock = ld_acquire(&r->clock),
	    .now = now,
	};
	int v;

	count_acquired_out(b->cnt, 1);
	if (walk)
		v = resil_bulkhead_claim_walk(w.id, c, b->bh_st, pm);
	else
		v = resil_bulkhead_claim(&w, c, b->bh_st, pm);
	if (RESIL_UNLIKELY(v)) {
		resil_count_released(b->cnt, 1); /* ended without a slot */
		if (b->lim_st)
			limit_undo(r, b, pm, now);
	}
	return decided(r, b, pm, v, w.now);
}

/*
 * The bulkhead: a fail-fast one of host scope claims the thread's last
 * slot, free again, with no context (resil_bulkhead_claim_last), and
 * rejects on the pool's full hint; anything else is
 * acquire_bulkhead_own's. started: the limiter started the permit; else
 * it is started here (from req and the breaker's gen) before anything
 * reads or writes it, and a rejection on the hint writes only what the
 * API reads of a rejected permit (count_rejected).
 */
static inline __attribute__((always_inline)) int
acquire_bulkhead(struct resil *r, const struct resil_binding *b, const struct resil_req *req,
		 struct resil_permit_priv *pm, uint32_t gen, int64_t now, bool started)
{
	uint32_t n = b->bh_n, id, idx;
	uint64_t off;

	if (RESIL_UNLIKELY(!n)) {
		if (!started)
			permit_start(pm, req, gen);
		return acquire_bulkhead_own(r, b, pm, now, false);
	}
	id = ld_relaxed(&b->m->claim_id);
	/* a thread without a stripe of its own walks (acquire_bulkhead_own
	 * takes it one) */
	off = resil_count_stripe_off;
	idx = RESIL_LIKELY(off)
		  ? resil_bulkhead_claim_last(b->bh_st, n, id, resil_count_mine(b->cnt, off))
		  : 0;
	if (RESIL_UNLIKELY(idx - 1 >= n)) {
		if (idx == 0 || started) {
			if (!started)
				permit_start(pm, req, gen);
			return acquire_bulkhead_own(r, b, pm, now, true);
		}
		return rejected_full(r, b, pm); /* full, by the hint */
	}
	if (!started)
		permit_start(pm, req, gen);
	pm->holder = id;
	pm->bulkhead_idx = idx;
	pm->flags |= RESIL_PERMIT_BULKHEAD;
	return decided(r, b, pm, RESIL_ADMIT, now);
}

/* The limiter decided (v, at the clock reading now): a rejection, or
 * an admission that goes on to the bulkhead if the policy has one. */
static inline __attribute__((always_inline)) int limited(struct resil *r,
							 const struct resil_binding *b,
							 struct resil_permit_priv *pm, int v,
							 int64_t now)
{
	if (RESIL_UNLIKELY(v) || !(b->steps & RESIL_STEP_BULKHEAD))
		return decided(r, b, pm, v, now);
	return acquire_bulkhead(r, b, NULL, pm, 0, now, true);
}

/* The limiter with the whole context: any limiter but an unkeyed GCRA of
 * host scope, and a key the keyed way did not find. */
static __attribute__((noinline, flatten)) int acquire_limit(struct resil *r,
							    const struct resil_binding *b,
							    const struct resil_req *req,
							    struct resil_permit_priv *pm)
{
	struct resil_ctx x;
	int v;

	binding_ctx(r, b, &x);
	if (req) {
		x.key = req->key;
		x.key_len = req->key_len;
	}
	v = resil_limit_acquire(&x, &b->rec->conf.limit, b->lim_st, pm);
	return limited(r, b, pm, v, x.now);
}

/* An unkeyed GCRA of host scope: from the clock alone (its pair as
 * published: immutable, resil_set_clock). */
static __attribute__((noinline, flatten)) int
acquire_gcra(struct resil *r, const struct resil_binding *b, struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&r->clock);
	int64_t now;
	int v;

	v = resil_limit_acquire_gcra(clk, &b->rec->conf.limit, b->lim_st, pm, &now);
	return limited(r, b, pm, v, now);
}

/* A keyed limiter, a call with a key: from the clock, the key and the
 * binding's hash seeds while the key's entry is where most keys are;
 * else (RESIL_LIMIT_ASK: nothing was written) with the whole context,
 * which inserts it. */
static __attribute__((noinline, flatten)) int acquire_keyed(struct resil *r,
							    const struct resil_binding *b,
							    const struct resil_req *req,
							    struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&r->clock);
	int64_t now;
	int v;

	v = resil_limit_acquire_keyed(clk, &b->rec->conf.limit, b->lim_st, b->key_seeds, req->key,
				      req->key_len, pm, &now);
	if (RESIL_UNLIKELY(v == RESIL_LIMIT_ASK))
		return acquire_limit(r, b, req, pm);
	return limited(r, b, pm, v, now);
}

/* The first decision of a forked child: its own identity first
 * (fork_check), then the decision. */
static RESIL_COLD __attribute__((noinline)) int
acquire_forked(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	fork_check(p->r);
	return resil_acquire_ex(p, req, permit);
}

/*
 * The one acquire. Each step either decides or goes on to the next; the
 * binding's steps (internal.h: a bit per component the branches decide)
 * say which steps a policy has, tested so that a policy pays one test
 * for the steps it does not have. Steps that need a clock or a context
 * are functions of their own, so that the steps before them pay for no
 * frame.
 */
RESIL_API __attribute__((flatten)) int
resil_acquire_ex(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;
	struct resil *r;
	uint32_t gen = 0, steps;

	/* 1. the arguments */
	if (RESIL_UNLIKELY(!p || !permit))
		return -EINVAL;
	/* 2. a forked child takes its own identity first */
	r = p->r;
	if (forked(r))
		return acquire_forked(p, req, permit);
	/* 3. the handle's binding, good for a decision now; else, the
	 * request checked, the slow path resolves the name */
	if (RESIL_UNLIKELY(!good_binding(r, p, &b))) {
		if (req && request_bad(req))
			return -EINVAL;
		return acquire_general(p, req, pm, b, false);
	}
	/* 4. the request: its fields, and a key only to a keyed limiter
	 * (-EINVAL: a mistake, not a key to ignore) */
	if (req && (request_bad(req) || (req->key && RESIL_UNLIKELY(!b->keyed))))
		return -EINVAL;
	steps = b->steps;
	/* 5. a policy the branches do not decide; the breaker: CLOSED
	 * spends nothing but its gen, and a breaker alone admits */
	if (steps & (RESIL_STEP_GENERAL | RESIL_STEP_BREAKER)) {
		if (steps & RESIL_STEP_GENERAL)
			return acquire_general(p, req, pm, b, true);
		if (RESIL_UNLIKELY(resil_breaker_acquire_lean(b->bk_st, pm)))
			return acquire_open(p, req, pm, b);
		gen = pm->breaker_gen;
		if (!(steps & (RESIL_STEP_LIMIT | RESIL_STEP_BULKHEAD)))
			return admitted(r, b, req, pm, gen);
	}
	/* 6. the limiter, its way (which goes on to the bulkhead), from the
	 * permit started */
	if (steps & RESIL_STEP_LIMIT) {
		permit_start(pm, req, gen);
		if (b->lim_way == RESIL_LIM_GCRA)
			return acquire_gcra(r, b, pm);
		if (b->lim_way == RESIL_LIM_KEYED && req && req->key)
			return acquire_keyed(r, b, req, pm);
		return acquire_limit(r, b, req, pm);
	}
	/* 7. the bulkhead, which starts the permit */
	if (steps & RESIL_STEP_BULKHEAD)
		return acquire_bulkhead(r, b, req, pm, gen, 0, false);
	/* 8. the counters alone: admitted */
	return admitted(r, b, req, pm, 0);
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
 * block: giving it up costs more than a decision that cannot. A binding
 * the branches decide answers from the handle alone (of their
 * components only a bulkhead with bulkhead.wait waits).
 */
RESIL_API int resil_policy_may_wait(const resil_policy_t *p)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	const struct resil_binding *b;
	int err = -ENOENT;

	if (!p)
		return -EINVAL;
	if (bound((resil_policy_t *)p, &b) && !(b->steps & RESIL_STEP_GENERAL))
		return b->bh_st && b->rec->conf.bulkhead.wait_ns > 0;
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return err;
	return (resil_has(rec, RESIL_C_BULKHEAD) && rec->conf.bulkhead.wait_ns > 0) ||
	       (resil_has(rec, RESIL_C_LIMIT) && rec->conf.limit.wait_ns > 0);
}

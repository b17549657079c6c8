/* SPDX-License-Identifier: MIT */
/*
 * libretry.c - resil_retry_begin / resil_retry_next / resil_retry_reason:
 * a retry loop the caller writes itself, decided by the policy.
 *
 *	resil_retry_t rt;
 *	resil_retry_begin(p, &rt, deadline);
 *	for (;;) {
 *		int cls = call();                 (0 on success)
 *		int64_t d = resil_retry_next(&rt, cls, retry_after);
 *		if (d < 0)
 *			break;                    (resil_retry_reason(&rt) says why)
 *		sleep(d);
 *	}
 *
 * Report the success too (class RESIL_ERR_NONE): it is what refunds the
 * retry budget (gRPC ratio, AWS refunds). The state is the engine's
 * (shm/retry.c) inside resil_retry_t, on the caller's stack: nothing is
 * allocated, nothing is locked. begin reads the clock only with a
 * deadline (the reasons speak from the start) or a ratio budget; next only
 * after a failure (is the next attempt past the deadline?). Nested loops: a loop begun inside a
 *resil_call attempt never outlives that attempt's deadline (the thread's current attempt,
 * libcall.c).
 *
 * Counting: retries, give-ups and budget refusals go to the policy's
 * stats counters (RESIL_STAT_RETRIES, _GIVEUPS, _REJ_BUDGET), give-ups
 * also by reason (resil_stats_giveup), and to the budget's own counters
 * when it has a budget.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "budget.h"
#include "stats.h"

RESIL_STATIC_ASSERT(sizeof(struct resil_retry_priv) <= sizeof(resil_retry_t),
		    "retry state fits resil_retry_t");
RESIL_STATIC_ASSERT(RESIL_RSTOP_MAX <= RESIL_GIVEUP_REASONS, "a counter per give-up reason");

void resil_priv_budget_event(struct resil_ctx *x, const struct resil_rec *rec);

/* libcall.c: the deadline of the attempt this thread is running, 0: none. */
int64_t resil_priv_attempt_deadline(void);

static void count(struct resil_ctx *x, const struct resil_rec *rec, enum resil_stat which)
{
	resil_stats_add(x, resil_comp_state(x->seg, rec, RESIL_C_STATS), which, 1);
}

/* After an engine step: the counters of what it decided. */
void resil_priv_retry_counted(struct resil_ctx *x, const struct resil_rec *rec,
			      const struct resil_retry_priv *t, int64_t delay)
{
	if (delay >= 0) {
		count(x, rec, RESIL_STAT_RETRIES);
		return;
	}
	if (t->reason == RESIL_RSTOP_SUCCESS)
		return;
	count(x, rec, RESIL_STAT_GIVEUPS);
	resil_stats_giveup(x, resil_comp_state(x->seg, rec, RESIL_C_STATS), t->reason);
	if (t->reason == RESIL_RSTOP_BUDGET)
		count(x, rec, RESIL_STAT_REJ_BUDGET);
	if (t->flags & RESIL_RETRYF_EXHAUSTED)
		resil_priv_budget_event(x, rec);
}

/* One event per exhaustion episode of a budget (a rare path). */
void resil_priv_budget_event(struct resil_ctx *x, const struct resil_rec *rec)
{
	const struct resil_retry_conf *bc = NULL;
	void *b = resil_budget_state_for(x->seg, rec, &bc);

	resil_event_push(x->seg, RESIL_EV_BUDGET_EXHAUSTED, rec->slot, rec->gen, 0, 0, 0,
			 b ? (uint64_t)resil_budget_tokens_milli(b, bc, x->now) : 0,
			 resil_ctx_now(x));
}

RESIL_API void resil_retry_begin(resil_policy_t *p, resil_retry_t *rt, int64_t deadline_ns)
{
	struct resil_retry_priv *t = (struct resil_retry_priv *)rt;
	const struct resil_retry_conf *bc;
	const struct resil_rec *rec = NULL;
	struct resil_ctx x;
	int64_t outer = resil_priv_attempt_deadline(), now = 0;
	void *budget;
	int err = 0;

	if (!rt)
		return;
	if (outer && (deadline_ns <= 0 || outer < deadline_ns))
		deadline_ns = outer;
	if (deadline_ns < 0)
		deadline_ns = 0;
	if (p)
		rec = resil_priv_ctx(p, &x, &err);
	budget = rec ? resil_budget_state_for(x.seg, rec, &bc) : NULL;
	/* the clock only for a deadline (the reasons speak from the start)
	 * or the ratio budget's buckets */
	if (rec && (deadline_ns || (budget && bc->budget_kind == RESIL_BUDGET_RATIO)))
		now = resil_ctx_now(&x);
	t->policy = p;
	resil_retry_engine_begin(t, now, deadline_ns);
	if (!rec) {
		t->reason = RESIL_RSTOP_GONE;
		t->flags |= RESIL_RETRYF_STOPPED;
		return;
	}
	if (budget) {
		resil_budget_begin(budget, bc, now);
		t->flags |= RESIL_RETRYF_COUNTED;
	}
}

RESIL_API int64_t resil_retry_next(resil_retry_t *rt, int error_class, int64_t retry_after_ns)
{
	struct resil_retry_priv *t = (struct resil_retry_priv *)rt;
	const struct resil_retry_conf *bc = NULL;
	const struct resil_rec *rec;
	struct resil_ctx x;
	void *budget;
	int64_t d;
	int err = 0;

	if (!rt)
		return -EINVAL;
	if (t->flags & RESIL_RETRYF_STOPPED)
		return -1;
	if (error_class < 0)
		error_class = RESIL_ERR_TRANSIENT;
	rec = t->policy ? resil_priv_ctx(t->policy, &x, &err) : NULL;
	if (!rec) {
		t->reason = RESIL_RSTOP_GONE;
		t->flags |= RESIL_RETRYF_STOPPED;
		return -1;
	}
	budget = resil_budget_state_for(x.seg, rec, &bc);
	/* a success needs no time; a failure does (deadline, ratio window) */
	d = resil_retry_engine_next(
	    t, &rec->conf.retry, budget, bc, (uint32_t)error_class, retry_after_ns,
	    error_class != RESIL_ERR_NONE ? resil_ctx_now(&x) : 0, &x.random);
	resil_priv_retry_counted(&x, rec, t, d);
	return d;
}

RESIL_API const char *resil_retry_reason(const resil_retry_t *rt)
{
	static _Thread_local char buf[160];

	if (!rt)
		return "no retry state";
	return resil_retry_engine_reason((const struct resil_retry_priv *)rt, buf, sizeof(buf));
}

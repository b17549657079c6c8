/* SPDX-License-Identifier: MIT */
/*
 * budget.c - the retry budget every process of the fleet shares. The
 * retry engine that spends it, and the retry.* keys that configure it,
 * are retry.c's.
 *
 * Budget (component RESIL_C_BUDGET, struct resil_budget_state in
 * budget.h, shared by every process and by every policy naming it):
 *   grpc:MAX:RATIO  gRPC A6 retry throttling. Tokens start at MAX; a
 *                   failure of a retried class costs 1, a success refunds
 *                   RATIO; retries and hedges only while tokens > MAX/2.
 *   aws:TOKENS      AWS SDK retry quota. A retry costs 14 after a
 *                   transient error or a timeout, 5 after throttling, and
 *                   is refused when the bucket cannot pay; a first attempt
 *                   that succeeds refunds 1, a retry that succeeds refunds
 *                   what it paid, a give-up refunds nothing. The first
 *                   attempt is never refused. With 3 attempts it drains
 *                   above about 22% transient (32% throttling) failures.
 *   ratio:PERCENT   SRE retry ratio: retries at most PERCENT% of the
 *                   requests begun in the last 10 s (10 buckets of 1 s).
 * Tokens are fixed-point (1 token = 1000) in one word updated by one CAS
 * (retried only under contention), clamped to [0, MAX]. Nothing refills
 * with time (gRPC and AWS refill on successes only), so no clock is read
 * for them; the ratio buckets take the reading the caller already has.
 * Cost on the success path: gRPC and AWS one load (no store while the
 * bucket is full), ratio one CAS on the current request bucket. A hedge
 * pays like a retry after a transient error.
 *
 * Shared budgets: retry.budget = @NAME stores NAME; the definer resolves
 * the policy "@NAME" (defined with a grpc, aws or ratio budget) into
 * rec->budget_slot, and resil_budget_state_for() follows that slot word to
 * the named policy's current record and its budget block, so every policy
 * and every process naming it spends the same tokens.
 *
 * Events: the refusal that finds the budget not yet marked exhausted
 * marks it (CAS) and its caller pushes RESIL_EV_BUDGET_EXHAUSTED; the next
 * retry allowed clears the mark: one event per episode.
 */
#include <errno.h>
#include <string.h>

#include "budget.h"

#define MILLI 1000

/* ---------------------------------------------------------------- budget */

uint64_t resil_budget_state_size(const struct resil_retry_conf *c)
{
	return resil_budget_has_state(c) ? sizeof(struct resil_budget_state) : 0;
}

static int64_t max_milli(const struct resil_retry_conf *c)
{
	return (int64_t)c->budget_max * MILLI;
}

void resil_budget_state_init(void *st, const struct resil_retry_conf *c, int64_t now)
{
	struct resil_budget_state *b = st;

	(void)now;
	/* a fresh block nobody else sees yet: plain stores, published by the
	 * record's release */
	memset(b, 0, sizeof(*b));
	st_relaxed(&b->tokens_milli, max_milli(c));
}

void resil_budget_reset(void *st, const struct resil_retry_conf *c)
{
	struct resil_budget_state *b = st;

	for (int i = 0; i < RESIL_BUDGET_BUCKETS; i++) {
		st_relaxed(&b->req[i], 0);
		st_relaxed(&b->rty[i], 0);
	}
	st_relaxed(&b->tokens_milli, max_milli(c));
	/* release: whoever sees the flag cleared sees the tokens back */
	st_release(&b->exhausted, 0);
}

bool resil_budget_same_shape(const struct resil_retry_conf *a, const struct resil_retry_conf *b)
{
	return a->budget_kind == b->budget_kind;
}

/*
 * A new block for a changed kind: what was spent carries over where it
 * still means something. grpc <-> aws: the same fraction of the bucket
 * stays spent; counters always carry; ratio buckets only to ratio.
 */
void resil_budget_carry(void *nst, const struct resil_retry_conf *nc, const void *ost,
			const struct resil_retry_conf *oc, int64_t now)
{
	struct resil_budget_state *n = nst;
	struct resil_budget_state *o = (struct resil_budget_state *)ost;

	resil_budget_state_init(n, nc, now);
	for (int i = 0; i < RESIL_BUDGET_CNT_MAX; i++)
		st_relaxed(&n->counters[i], ld_relaxed(&o->counters[i]));
	if ((nc->budget_kind == RESIL_BUDGET_GRPC || nc->budget_kind == RESIL_BUDGET_AWS) &&
	    (oc->budget_kind == RESIL_BUDGET_GRPC || oc->budget_kind == RESIL_BUDGET_AWS) &&
	    oc->budget_max) {
		int64_t t = ld_relaxed(&o->tokens_milli);

		t = resil_max64(0, resil_min64(t, max_milli(oc)));
		st_relaxed(&n->tokens_milli,
			   t * max_milli(nc) / max_milli(oc)); /* <= 1e9 * 1e9: fits */
	}
	if (nc->budget_kind == RESIL_BUDGET_RATIO && oc->budget_kind == RESIL_BUDGET_RATIO) {
		for (int i = 0; i < RESIL_BUDGET_BUCKETS; i++) {
			st_relaxed(&n->req[i], ld_relaxed(&o->req[i]));
			st_relaxed(&n->rty[i], ld_relaxed(&o->rty[i]));
		}
	}
}

/*
 * The daemon's checks (every word here is any client's to write; the
 * engine's arithmetic saturates, so none of them can overflow it, but a
 * bad value would steer every process's retries for good). Each bad one
 * is repaired and counted (resil_repaired):
 *   - tokens outside [0, max]: clamped (a bucket above max never refuses;
 *     below 0, gRPC refuses until enough successes come back);
 *   - exhausted neither 0 nor 1: 1 (a refusal pushed its event);
 *   - g_req, g_rty, until_ns not 0 on a budget that is not global (only
 *     the cluster exchange sets them, and rewrites them every interval).
 * The ratio buckets need nothing: a word of any epoch and count is summed
 * only inside the window (by difference), and the first writer of its
 * bucket's next span overwrites it.
 */
void resil_budget_maintain(struct resil_ctx *x, const struct resil_retry_conf *c, void *st)
{
	struct resil_budget_state *b = st;
	int64_t v = ld_relaxed(&b->tokens_milli);
	uint32_t f = ld_relaxed(&b->exhausted);

	if ((c->budget_kind == RESIL_BUDGET_GRPC || c->budget_kind == RESIL_BUDGET_AWS) &&
	    (v < 0 || v > max_milli(c)) &&
	    cas_relaxed(&b->tokens_milli, &v, v < 0 ? 0 : max_milli(c)))
		resil_repaired(x, RESIL_W_BUDGET_TOKENS);
	if (f > 1 && cas_relaxed(&b->exhausted, &f, 1))
		resil_repaired(x, RESIL_W_BUDGET_FLAG);
	if (x->rec && x->rec->conf.scope != RESIL_SCOPE_GLOBAL &&
	    (ld_relaxed(&b->g_req) || ld_relaxed(&b->g_rty) || ld_relaxed(&b->until_ns))) {
		resil_budget_mirror_ratio(b, 0, 0);
		resil_budget_lease_set(b, 0);
		resil_repaired(x, RESIL_W_BUDGET_MIRROR);
	}
}

void *resil_budget_state_for(const struct resil_seg *s, const struct resil_rec *rec,
			     const struct resil_retry_conf **conf)
{
	const struct resil_rec *brec = rec;

	if (rec->conf.retry.budget_kind == RESIL_BUDGET_SHARED) {
		uint64_t w;

		if (rec->budget_slot == 0 || rec->budget_slot > s->cfg->slot_cap)
			return NULL;
		/* acquire: pairs with the definer's release of the slot word, so
		 * the record it points at is whole */
		w = ld_acquire(&resil_seg_slots(s)[rec->budget_slot - 1]);
		brec = resil_seg_rec_of(s, w);
		if (!brec)
			return NULL;
	}
	if (!resil_budget_has_state(&brec->conf.retry) || !resil_has(brec, RESIL_C_BUDGET))
		return NULL;
	if (conf)
		*conf = &brec->conf.retry;
	return resil_comp_state(s, brec, RESIL_C_BUDGET);
}

/* v -> clamp(v + d, 0, max) by CAS; returns the new value. */
static int64_t tokens_add(struct resil_budget_state *b, int64_t d, int64_t max)
{
	int64_t v = ld_relaxed(&b->tokens_milli), n;

	do {
		/* saturating: v is any client's to write (INT64_MAX, INT64_MIN) */
		if (__builtin_add_overflow(v, d, &n))
			n = d > 0 ? max : 0;
		if (n < 0)
			n = 0;
		if (n > max)
			n = max;
		if (n == v)
			return v;
	} while (!cas_relaxed(&b->tokens_milli, &v, n));
	return n;
}

/* ratio buckets: (epoch << 32 | count) */
static void bucket_add(ra64 *w, uint32_t epoch)
{
	uint64_t v = ld_relaxed(w), n;

	do {
		if ((uint32_t)(v >> 32) == epoch)
			n = v + 1;
		else
			n = (uint64_t)epoch << 32 | 1u;
	} while (!cas_relaxed(w, &v, n));
}

static uint64_t window_sum(ra64 *w, uint32_t epoch)
{
	uint64_t sum = 0;

	for (int i = 0; i < RESIL_BUDGET_BUCKETS; i++) {
		uint64_t v = ld_relaxed(&w[i]);
		uint32_t e = (uint32_t)(v >> 32);

		/* inside the window: epoch - e < BUCKETS (by difference, wraps) */
		if ((uint32_t)(epoch - e) < RESIL_BUDGET_BUCKETS)
			sum += (uint32_t)v;
	}
	return sum;
}

static uint32_t epoch_of(int64_t now)
{
	/* +1 so that the zero word of a fresh block is never a current bucket */
	return (uint32_t)(now / RESIL_BUDGET_BUCKET_NS) + 1u;
}

void resil_budget_begin(void *st, const struct resil_retry_conf *bc, int64_t now)
{
	struct resil_budget_state *b = st;

	if (bc->budget_kind == RESIL_BUDGET_RATIO) {
		uint32_t e = epoch_of(now);

		bucket_add(&b->req[e % RESIL_BUDGET_BUCKETS], e);
	}
}

/* policy.scope = global: past the slice's end (budget.h, until_ns) */
static inline bool slice_over(struct resil_budget_state *b, int64_t now)
{
	int64_t u = ld_relaxed(&b->until_ns);

	return RESIL_UNLIKELY(u != 0) && now >= u;
}

static int refuse(struct resil_budget_state *b, bool *first)
{
	uint32_t e = 0;

	if (first)
		*first = ld_relaxed(&b->exhausted) == 0 && cas_relaxed(&b->exhausted, &e, 1);
	return RESIL_REJECT_BUDGET;
}

int resil_budget_try_retry(void *st, const struct resil_retry_conf *bc, uint32_t cls, bool hedge,
			   int64_t now, uint32_t *cost_milli, bool *first_refusal)
{
	struct resil_budget_state *b = st;
	int64_t v, cost;
	uint32_t e;

	*cost_milli = 0;
	if (first_refusal)
		*first_refusal = false;
	switch (bc->budget_kind) {
	case RESIL_BUDGET_GRPC:
		/* retries and hedges only while tokens > max/2; failures paid */
		v = ld_relaxed(&b->tokens_milli);
		/* v <= max / 2, without doubling a word any client may set */
		if (v <= max_milli(bc) / 2 || slice_over(b, now))
			return refuse(b, first_refusal);
		break;
	case RESIL_BUDGET_AWS:
		cost = (int64_t)(cls == RESIL_ERR_THROTTLED ? RESIL_AWS_COST_THROTTLED
							    : RESIL_AWS_COST_TRANSIENT) *
		       MILLI;
		v = ld_relaxed(&b->tokens_milli);
		if (slice_over(b, now))
			return refuse(b, first_refusal);
		do {
			if (v < cost)
				return refuse(b, first_refusal);
		} while (!cas_relaxed(&b->tokens_milli, &v, v - cost));
		*cost_milli = (uint32_t)cost;
		break;
	case RESIL_BUDGET_RATIO:
		e = epoch_of(now);
		/* (retries + 1) / requests <= ratio; a check then an add: two
		 * processes deciding at once may both pass, overshooting by at
		 * most the number deciding concurrently */
		if ((window_sum(b->rty, e) + ld_relaxed(&b->g_rty) + 1) * MILLI >
		    (uint64_t)bc->budget_ratio_milli *
			(window_sum(b->req, e) + ld_relaxed(&b->g_req)))
			return refuse(b, first_refusal);
		bucket_add(&b->rty[e % RESIL_BUDGET_BUCKETS], e);
		break;
	default:
		break;
	}
	if (RESIL_UNLIKELY(ld_relaxed(&b->exhausted)))
		st_relaxed(&b->exhausted, 0);
	if (hedge)
		resil_budget_count(b, RESIL_BUDGET_CNT_HEDGES);
	return 0;
}

void resil_budget_record(void *st, const struct resil_retry_conf *bc, bool success,
			 bool retryable_failure, uint32_t attempt, uint32_t cost_milli)
{
	struct resil_budget_state *b = st;

	switch (bc->budget_kind) {
	case RESIL_BUDGET_GRPC:
		if (success)
			tokens_add(b, bc->budget_ratio_milli, max_milli(bc));
		else if (retryable_failure)
			tokens_add(b, -MILLI, max_milli(bc));
		break;
	case RESIL_BUDGET_AWS:
		if (!success)
			break;
		if (attempt <= 1)
			tokens_add(b, RESIL_AWS_REFUND_FIRST * MILLI, max_milli(bc));
		else if (cost_milli)
			tokens_add(b, cost_milli, max_milli(bc));
		break;
	default:
		break;
	}
}

int64_t resil_budget_tokens_milli(const void *st, const struct resil_retry_conf *bc, int64_t now)
{
	struct resil_budget_state *b = (struct resil_budget_state *)st;
	uint32_t e;

	uint64_t req, rty, allowed;

	/* every word is any client's to write: the value is the budget's
	 * range, its arithmetic saturating (the daemon's cluster exchange
	 * adds and subtracts what this returns) */
	switch (bc->budget_kind) {
	case RESIL_BUDGET_GRPC:
	case RESIL_BUDGET_AWS:
		return resil_max64(
		    0, resil_min64((int64_t)ld_relaxed(&b->tokens_milli), max_milli(bc)));
	case RESIL_BUDGET_RATIO:
		e = epoch_of(now);
		if (__builtin_add_overflow(window_sum(b->req, e), ld_relaxed(&b->g_req), &req))
			req = UINT64_MAX;
		if (__builtin_add_overflow(window_sum(b->rty, e), ld_relaxed(&b->g_rty), &rty))
			rty = UINT64_MAX;
		if (__builtin_mul_overflow((uint64_t)bc->budget_ratio_milli, req, &allowed))
			allowed = UINT64_MAX;
		allowed /= MILLI;
		if (allowed >= rty)
			return allowed - rty > (uint64_t)INT64_MAX ? INT64_MAX
								   : (int64_t)(allowed - rty);
		return rty - allowed > (uint64_t)INT64_MAX ? -INT64_MAX : -(int64_t)(rty - allowed);
	default:
		return 0;
	}
}

int64_t resil_budget_mirror_tokens(void *st, const struct resil_retry_conf *bc, int64_t fleet_milli,
				   int64_t seen_milli, int64_t *was_milli)
{
	struct resil_budget_state *b = st;
	int64_t max = max_milli(bc), v = ld_relaxed(&b->tokens_milli), n;

	do {
		/* saturating: v is any client's to write */
		if (__builtin_sub_overflow(v, seen_milli, &n) ||
		    __builtin_add_overflow(n, fleet_milli, &n))
			n = v > seen_milli ? max : 0;
		n = resil_max64(0, resil_min64(n, max));
	} while (n != v && !cas_relaxed(&b->tokens_milli, &v, n));
	/* what the word held, as a value of the budget's range */
	*was_milli = resil_max64(0, resil_min64(v, max));
	return n;
}

void resil_budget_mirror_ratio(void *st, uint64_t others_req, uint64_t others_rty)
{
	struct resil_budget_state *b = st;

	st_relaxed(&b->g_req, others_req);
	st_relaxed(&b->g_rty, others_rty);
}

void resil_budget_lease_set(void *st, int64_t until_ns)
{
	struct resil_budget_state *b = st;

	st_relaxed(&b->until_ns, until_ns);
}

int64_t resil_budget_lease_until(const void *st)
{
	return ld_relaxed(&((struct resil_budget_state *)st)->until_ns);
}

void resil_budget_window(const void *st, int64_t now, uint64_t *req, uint64_t *rty)
{
	struct resil_budget_state *b = (struct resil_budget_state *)st;
	uint32_t e = epoch_of(now);

	*req = window_sum(b->req, e);
	*rty = window_sum(b->rty, e);
}

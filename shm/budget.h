/* SPDX-License-Identifier: MIT */
/*
 * budget.h - retries: configuration keys, the backoff and rule engine
 * (retry.c), and the retry budget shared by every process (component
 * RESIL_C_BUDGET, budget.c).
 *
 * The engine (resil_retry_engine_*) is pure: a retry state on the caller's
 * stack, a configuration, a clock reading and a random source in, a delay
 * or a stop with its reason out. libresil (client/libretry.c) feeds it from
 * a policy handle; the unit tests feed it a manual clock and a seeded
 * random source, so every delay is exact.
 *
 * The budget follows the component interface of decision.h (state size,
 * init, same shape, carry) and adds what a retry loop needs: start of a
 * request, try to pay for a retry (or a hedge), outcome of an attempt.
 * Fixed-point tokens: 1 token = 1000 milli-tokens.
 */
#ifndef RESIL_SHM_BUDGET_H
#define RESIL_SHM_BUDGET_H

#include "decision.h"
#include "resil.h"

/* retry.on.all: a rule matching every error class. */
#define RESIL_RETRY_CLASS_ALL 0xffffffffu
/* A rule field left at this value takes the policy's retry.* value. */
#define RESIL_RETRY_JITTER_INHERIT 0xffu

/* ---- configuration keys (conf.c dispatches retry.*, timeout*, hedge.*, idempotent) ---- */

void resil_retry_conf_defaults(struct resil_retry_conf *c);
/* 0, -ENOENT for a key that is not one of them, -EINVAL with a message. */
int resil_retry_conf_set(struct resil_retry_conf *c, const char *key, const char *value, char *err,
			 size_t errlen);
int resil_retry_conf_check(const struct resil_retry_conf *c, char *err, size_t errlen);
/* "retry.x = y\n" lines; snprintf semantics (buf may be NULL when len is 0). */
size_t resil_retry_conf_format(const struct resil_retry_conf *c, char *buf, size_t len);

/* ---- the engine: backoff, rules, deadline, reasons ---- */

/* Why a retry loop stopped (resil_retry_priv.reason). */
enum resil_retry_stop {
	RESIL_RSTOP_RETRYING = 0, /* not stopped */
	RESIL_RSTOP_SUCCESS,	  /* the attempt succeeded */
	RESIL_RSTOP_NOT_RETRIED,  /* the class is never retried (a rule says never, or permanent) */
	RESIL_RSTOP_ATTEMPTS,	  /* the rule's attempts are used up */
	RESIL_RSTOP_DEADLINE,	  /* the next attempt would start at or after the deadline */
	RESIL_RSTOP_BUDGET,	  /* the retry budget refused */
	RESIL_RSTOP_GONE,	  /* the policy was deleted */
	RESIL_RSTOP_REJECTED,	  /* the policy refused an attempt (breaker, limiter, ...) */
	RESIL_RSTOP_MAX,
};

/*
 * The inside of resil_retry_t (128 bytes, on the caller's stack, never in
 * shared memory). Times are on the policy clock; start_ns is the reading
 * taken by begin, so reasons speak in times relative to the start.
 */
struct resil_retry_priv {
	void *policy;			/* resil_policy_t *, NULL for the bare engine */
	RESIL_A8 int64_t start_ns;	/* clock at begin */
	RESIL_A8 int64_t deadline_ns;	/* absolute, 0: none */
	RESIL_A8 int64_t prev_delay_ns; /* decorrelated jitter: the previous delay */
	RESIL_A8 int64_t next_at_ns;	/* DEADLINE: when the refused attempt would start */
	uint32_t attempts;		/* attempts made, the one just reported included */
	uint32_t reason;		/* enum resil_retry_stop */
	uint32_t last_class;		/* class of the last failed attempt */
	uint32_t rule;			/* rule index + 1 of the last step, 0: defaults */
	uint32_t limit;			/* ATTEMPTS: the limit that was reached */
	uint32_t cost_milli;		/* what the last retry paid (AWS refund) */
	uint32_t verdict;		/* REJECTED: the RESIL_REJECT_* */
	uint8_t rule_count[RESIL_RETRY_RULES + 1]; /* failures per rule; [0]: defaults */
	uint8_t flags;				   /* RESIL_RETRYF_* */
	uint8_t pad[2];
	RESIL_A8 uint64_t reserved[4];
};
RESIL_STATIC_ASSERT(sizeof(struct resil_retry_priv) <= 128, "retry state fits resil_retry_t");

#define RESIL_RETRYF_COUNTED   0x1u /* the ratio budget counted this request */
#define RESIL_RETRYF_STOPPED   0x2u /* a stop was decided; next keeps answering stop */
#define RESIL_RETRYF_EXHAUSTED 0x4u /* this loop's refusal emptied the budget: push an event */

/* Begin a request: attempts = 0, no reason. */
void resil_retry_engine_begin(struct resil_retry_priv *rt, int64_t now, int64_t deadline_ns);

/* What a class resolves to under c's rules (first match wins). */
struct resil_retry_plan {
	uint32_t rule; /* rule index + 1, 0: the defaults */
	uint32_t max_attempts;
	uint32_t multiplier_milli;
	uint8_t jitter;
	uint8_t retry; /* 0: never retried */
	uint8_t pad[2];
	RESIL_A8 int64_t base_ns;
	RESIL_A8 int64_t max_delay_ns;
};
void resil_retry_plan_for(const struct resil_retry_conf *c, uint32_t error_class,
			  struct resil_retry_plan *plan);

/*
 * The delay before retry number n (0 for the first retry) of a plan, with
 * its jitter; prev is the previous delay (decorrelated jitter). Exact for a
 * given random source. random(lo, hi) is lo + (r * (hi - lo + 1)) >> 64.
 */
int64_t resil_retry_backoff(const struct resil_retry_plan *plan, uint32_t n, int64_t prev_ns,
			    const struct resil_random *rnd);

/*
 * One step after an attempt ended with error_class (RESIL_ERR_NONE:
 * success). Returns the delay before the next attempt (>= 0) or -1 with
 * rt->reason set. budget/bconf: the budget the policy uses (NULL: none).
 * now: a clock reading taken after the attempt ended.
 */
int64_t resil_retry_engine_next(struct resil_retry_priv *rt, const struct resil_retry_conf *c,
				void *budget, const struct resil_retry_conf *bconf,
				uint32_t error_class, int64_t retry_after_ns, int64_t now,
				const struct resil_random *rnd);

/* The reason in words into buf (always NUL-terminated); returns buf. */
const char *resil_retry_engine_reason(const struct resil_retry_priv *rt, char *buf, size_t len);

/* Words for a class ("transient", "throttled", ..., "error 101"). */
const char *resil_retry_class_name(uint32_t error_class, char *buf, size_t len);

/* ---- the budget: component RESIL_C_BUDGET ---- */

#define RESIL_BUDGET_BUCKETS	 10		      /* ratio: time buckets in the window */
#define RESIL_BUDGET_BUCKET_NS	 (1 * RESIL_NS_PER_S) /* ratio: window = 10 s */
#define RESIL_AWS_COST_TRANSIENT 14 /* tokens a retry costs after a transient error or timeout */
#define RESIL_AWS_COST_THROTTLED 5  /* after throttling */
#define RESIL_AWS_REFUND_FIRST	 1  /* a first attempt that succeeds gives back */

/* Counters every process adds to (relaxed: statistics, read by observers). */
enum resil_budget_counter {
	RESIL_BUDGET_CNT_RETRIES = 0, /* retries paid for */
	RESIL_BUDGET_CNT_HEDGES,      /* hedges paid for */
	RESIL_BUDGET_CNT_REFUSED,     /* retries or hedges the budget refused */
	RESIL_BUDGET_CNT_GIVEUP_NOT_RETRIED,
	RESIL_BUDGET_CNT_GIVEUP_ATTEMPTS,
	RESIL_BUDGET_CNT_GIVEUP_DEADLINE,
	RESIL_BUDGET_CNT_GIVEUP_BUDGET,
	RESIL_BUDGET_CNT_MAX = 12,
};

/*
 * The budget state in the state segment (512 bytes, 128-aligned).
 *
 * tokens_milli (grpc, aws): written by every client with one CAS per
 * update (clamped to [0, max]); read relaxed for the gRPC "above half"
 * test. Relaxed is enough: the word publishes nothing but itself, and a
 * CAS on one word is totally ordered on its own.
 *
 * ratio buckets: each word is (bucket epoch << 32 | count); a writer that
 * finds an older epoch CASes it to (epoch << 32 | 1), else CASes count + 1.
 * Readers sum the words whose epoch is inside the window. Relaxed: counts
 * only.
 *
 * exhausted: CAS 0 -> 1 by the process whose refusal finds it 0 (that one
 * pushes the event), store 0 by a process whose retry is allowed and finds
 * it 1; relaxed, a flag for events only.
 *
 * counters: fetch_add relaxed, on their own line (written on the retry
 * path only, never on a first attempt that succeeds).
 *
 * g_req, g_rty (ratio, policy.scope = global): the other hosts' requests
 * and retries in their windows, stored relaxed by the daemon's cluster
 * exchange every interval (resil_budget_mirror_ratio), read relaxed by
 * the ratio test beside the local window; 0 on a host-scoped budget.
 * Relaxed: two counts that publish nothing else; a client that reads one
 * interval's g_req with the next one's g_rty errs by one interval's
 * change, which the fleet's own reports lag by anyway. With global scope
 * tokens_milli is also written by the daemon (resil_budget_mirror_tokens,
 * one CAS like a client's).
 *
 * until_ns (grpc, aws, policy.scope = global): the end of the slice the
 * daemon mirrored into tokens_milli (CLOCK_MONOTONIC; 0: no end, a host
 * budget or --cluster-fallback local). Stored relaxed by the daemon only
 * (resil_budget_lease_set), read relaxed by every retry decision: at or
 * past it no retry passes, whatever tokens_milli holds, so the clients of
 * a daemon that died stop spending a slice the fleet no longer keeps for
 * them (docs/internals/cluster.md, "Slices"). Relaxed: the word publishes
 * nothing else; a client that reads an end a renewal has just moved
 * refuses once, one that reads a new end beside an older tokens value
 * spends what the older slice allowed. A client can write it (0 spends
 * the local bucket without end, as writing tokens_milli can already); the
 * daemon rewrites it at every answer and clears it on a host budget.
 *
 * Crash windows: every update is a single atomic on one word, so a
 * process killed between two of them leaves each word whole; what it
 * loses is an update it had not made (a retry paid for and never run is a
 * token lost to the budget, the same as a failed retry: the budget errs on
 * the side of fewer retries, never more).
 */
struct resil_budget_state {
	alignas(RESIL_HOT_ALIGN) rai64 tokens_milli;
	ra32 exhausted; /* 1 from a refusal to the next retry allowed: CAS, rare */
	uint32_t pad0a;
	rai64 until_ns; /* scope = global: the slice's end (daemon), 0: none */
	RESIL_A8 uint64_t pad0[13];
	alignas(RESIL_HOT_ALIGN) ra64 req[RESIL_BUDGET_BUCKETS]; /* ratio: requests */
	ra64 rty[RESIL_BUDGET_BUCKETS];				 /* ratio: retries */
	ra64 g_req; /* ratio, scope = global: the other hosts' requests in the window */
	ra64 g_rty; /* ... and their retries (the daemon's mirror) */
	RESIL_A8 uint64_t pad1[10];
	alignas(RESIL_HOT_ALIGN) ra64 counters[RESIL_BUDGET_CNT_MAX];
	RESIL_A8 uint64_t pad2[4];
};
RESIL_STATIC_ASSERT(sizeof(struct resil_budget_state) == 512, "budget state size");
RESIL_STATIC_ASSERT(offsetof(struct resil_budget_state, tokens_milli) == 0, "tokens line");
RESIL_STATIC_ASSERT(offsetof(struct resil_budget_state, exhausted) == 8, "exhausted offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_budget_state, until_ns) == 16, "slice end offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_budget_state, req) % RESIL_HOT_ALIGN == 0, "ratio line");
RESIL_STATIC_ASSERT(offsetof(struct resil_budget_state, counters) % RESIL_HOT_ALIGN == 0,
		    "counters line");

uint64_t resil_budget_state_size(const struct resil_retry_conf *c);
void resil_budget_state_init(void *st, const struct resil_retry_conf *c, int64_t now);
bool resil_budget_same_shape(const struct resil_retry_conf *a, const struct resil_retry_conf *b);
void resil_budget_carry(void *nst, const struct resil_retry_conf *nc, const void *ost,
			const struct resil_retry_conf *oc, int64_t now);
/* Daemon tick: refills are lazy; checks and repairs the shared words
 * (budget.c). */
void resil_budget_maintain(struct resil_ctx *x, const struct resil_retry_conf *c, void *st);

/* An operator's reset (resilctl reset): the bucket full again, the ratio's
 * window empty, not exhausted; the counters stay. Relaxed stores: a
 * retry paid at the same moment may be forgotten (a reset is a fresh
 * start, not an account). */
void resil_budget_reset(void *st, const struct resil_retry_conf *c);

/* True when c itself holds budget state (grpc, aws, ratio). */
static inline bool resil_budget_has_state(const struct resil_retry_conf *c)
{
	return c->budget_kind == RESIL_BUDGET_GRPC || c->budget_kind == RESIL_BUDGET_AWS ||
	       c->budget_kind == RESIL_BUDGET_RATIO;
}

/*
 * The budget state a policy uses: its own, or that of the policy "@NAME"
 * whose slot + 1 is rec->budget_slot. NULL when it has none (or the shared
 * one is gone); *conf gets that budget's configuration.
 */
void *resil_budget_state_for(const struct resil_seg *s, const struct resil_rec *rec,
			     const struct resil_retry_conf **conf);

/* A request begins (ratio: counted as a request). */
void resil_budget_begin(void *st, const struct resil_retry_conf *bc, int64_t now);
/*
 * Pay for a retry after an error of error_class (hedge: a hedge attempt).
 * 0 and *cost_milli what was paid, or RESIL_REJECT_BUDGET. A first attempt
 * never comes here. *first_refusal (may be NULL): this refusal is the
 * first since retries were last allowed (one RESIL_EV_BUDGET_EXHAUSTED
 * event per episode, not one per refusal).
 */
int resil_budget_try_retry(void *st, const struct resil_retry_conf *bc, uint32_t error_class,
			   bool hedge, int64_t now, uint32_t *cost_milli, bool *first_refusal);
/*
 * An attempt ended. success: attempt was the first (attempts == 1) or a
 * retry that paid cost_milli. retryable_failure: a failure of a class the
 * rules retry (gRPC counts only those).
 */
void resil_budget_record(void *st, const struct resil_retry_conf *bc, bool success,
			 bool retryable_failure, uint32_t attempt, uint32_t cost_milli);
/*
 * policy.scope = global (the daemon's cluster exchange; cluster_budget.c).
 * mirror_tokens (grpc, aws): the fleet's tokens fleet_milli, computed from
 * this host's reports up to the local value seen_milli, become the local
 * value; what clients changed since seen_milli stays on top (one CAS
 * loop, clamped to [0, max]). Returns the value stored; *was_milli the
 * local value it replaced.
 * mirror_ratio: the other hosts' window totals into g_req, g_rty.
 * window (ratio): this host's own requests and retries in the window.
 */
int64_t resil_budget_mirror_tokens(void *st, const struct resil_retry_conf *bc, int64_t fleet_milli,
				   int64_t seen_milli, int64_t *was_milli);
void resil_budget_mirror_ratio(void *st, uint64_t others_req, uint64_t others_rty);
/* The slice's end (daemon only): no retry passes at or past until_ns
 * (CLOCK_MONOTONIC; 0: no end). */
void resil_budget_lease_set(void *st, int64_t until_ns);
int64_t resil_budget_lease_until(const void *st);
void resil_budget_window(const void *st, int64_t now, uint64_t *req, uint64_t *rty);
/* Tokens now, in milli-tokens (grpc, aws); ratio: retries allowed now. */
int64_t resil_budget_tokens_milli(const void *st, const struct resil_retry_conf *bc, int64_t now);
static inline void resil_budget_count(void *st, enum resil_budget_counter i)
{
	struct resil_budget_state *b = st;

	faa_relaxed(&b->counters[i], 1);
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - Prometheus text exposition (0.0.4) of a segment pair.
 *
 * What: one pass per metric family over the live policies (slot order),
 * so every family is contiguous and its # HELP / # TYPE lines come before
 * its samples, as the format requires. Counters come from the stats
 * stripes (stats.c), but the limiter's dry-run count and available
 * permits from its state (limit.h), the breaker's state (an enum: every
 * state a sample, 1 for the current one), window rates and transitions by
 * (from, to) from the breaker's own block (breaker.h), the
 * budget's tokens from budget.h, the histogram from the stats buckets
 * folded onto power-of-two bounds (every fold bound is a bucket edge, so
 * each cumulative count is exact for its le).
 *
 * Why no snapshot: the text is assembled while calls run. Each counter is
 * a sum of relaxed loads (monotonic per stripe), so a scrape never sees a
 * counter go down; a histogram's buckets, _count and +Inf come from one
 * copy, so _count always equals the +Inf bucket and le counts are
 * cumulative. _sum is read apart and may lag by the calls in flight.
 *
 * policy.scope = process: the decision components (breaker, limiter,
 * bulkhead, adaptive limit, shedder) have one copy per client row; each
 * live row's copy is a sample of its own with a pid label, so the states
 * show side by side. The stats counters, histogram and budget are
 * fleet-wide (one block); the limiter's dry-run count and the breaker's
 * transitions live in the components' states, so they are per process
 * there too (a row reclaimed from a dead process starts again from 0: a
 * counter reset, as Prometheus expects of a restarted process).
 *
 * The segment is untrusted input: names are read up to RESIL_NAME_MAX and
 * escaped, every component's state is bounds-checked against the mapping
 * before it is read. Reads only: a read-only observer mapping is enough.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "stats.h"
#include "adaptive.h"
#include "breaker.h"
#include "budget.h"
#include "bulkhead.h"
#include "limit.h"
#include "shed.h"

#ifndef RESIL_VERSION_STRING
#define RESIL_VERSION_STRING "unknown"
#endif

struct out {
	char *buf;
	size_t len;
	size_t pos;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->pos < o->len ? o->buf + o->pos : NULL,
		      o->pos < o->len ? o->len - o->pos : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

size_t resil_metrics_escape(const char *src, size_t srclen, char *buf, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < srclen && src[i]; i++) {
		const char *e = NULL;
		char one[2] = {src[i], 0};

		if (src[i] == '\\')
			e = "\\\\";
		else if (src[i] == '"')
			e = "\\\"";
		else if (src[i] == '\n')
			e = "\\n";
		else
			e = one;
		for (; *e; e++, n++)
			if (n + 1 < len)
				buf[n] = *e;
	}
	if (len)
		buf[n < len ? n : len - 1] = '\0';
	return n;
}

enum family {
	F_CALLS,
	F_SLOW,
	F_RETRIES,
	F_GIVEUPS,
	F_TRANSITIONS,
	F_EVICTIONS,
	F_LIMIT_DRY_RUN,
	F_BREAKER_STATE,
	F_BREAKER_FAILURE_RATE,
	F_BREAKER_SLOW_RATE,
	F_BREAKER_WINDOW_CALLS,
	F_LIMIT_AVAILABLE,
	F_BULKHEAD_MAX,
	F_BULKHEAD_IN_USE,
	F_ADAPTIVE_LIMIT,
	F_ADAPTIVE_IN_USE,
	F_SHED_PROBABILITY,
	F_BUDGET_TOKENS,
	F_DURATION,
	F__MAX
};

static const struct {
	const char *name;
	const char *type;
	const char *help;
} families[F__MAX] = {
    [F_CALLS] = {"resil_calls_total", "counter",
		 "Calls decided by the policy, by outcome or rejection."},
    [F_SLOW] = {"resil_slow_calls_total", "counter",
		"Calls that took breaker.slow_call or longer."},
    [F_RETRIES] = {"resil_retries_total", "counter", "Retries the policy allowed."},
    [F_GIVEUPS] = {"resil_giveups_total", "counter", "Retry loops that stopped on a failure."},
    [F_TRANSITIONS] = {"resil_breaker_transitions_total", "counter",
		       "Circuit breaker state changes, by state left (from) and entered (to)."},
    [F_EVICTIONS] = {"resil_limit_evictions_total", "counter",
		     "Keys evicted from a keyed rate limiter's table."},
    [F_LIMIT_DRY_RUN] = {"resil_limit_dry_run_rejects_total", "counter",
			 "Calls a rate limiter in limit.dry_run would have rejected (admitted)."},
    [F_BREAKER_STATE] = {"resil_breaker_state", "gauge",
			 "Circuit breaker state: 1 for the state it is in, 0 for the others."},
    [F_BREAKER_FAILURE_RATE] = {"resil_breaker_failure_rate", "gauge",
				"Failed share of the calls in the breaker's window now, 0 to 1 "
				"(0 while the window is empty; count and time windows)."},
    [F_BREAKER_SLOW_RATE] = {"resil_breaker_slow_call_rate", "gauge",
			     "Slow share (breaker.slow_call or longer) of the calls in the "
			     "breaker's window now, 0 to 1 (count and time windows with a "
			     "breaker.slow_call_rate under 100)."},
    [F_BREAKER_WINDOW_CALLS] = {"resil_breaker_window_calls", "gauge",
				"Calls in the breaker's window now (the rates' denominator; "
				"count and time windows)."},
    [F_LIMIT_AVAILABLE] = {"resil_limit_available_permits", "gauge",
			   "Permits the rate limiter would admit at once now (unkeyed limiters "
			   "and keyed ones' calls without a key)."},
    [F_BULKHEAD_MAX] = {"resil_bulkhead_max", "gauge", "Bulkhead permits (bulkhead.max)."},
    [F_BULKHEAD_IN_USE] = {"resil_bulkhead_in_use", "gauge",
			   "Bulkhead permits held now (a scan of the claims)."},
    [F_ADAPTIVE_LIMIT] = {"resil_adaptive_limit", "gauge",
			  "Adaptive concurrency limit now (recomputed each window)."},
    [F_ADAPTIVE_IN_USE] = {"resil_adaptive_in_use", "gauge",
			   "Adaptive permits held now (a scan of the claims)."},
    [F_SHED_PROBABILITY] = {"resil_shed_probability", "gauge",
			    "Probability the load shedder rejects a call now."},
    [F_BUDGET_TOKENS] = {"resil_retry_budget_tokens", "gauge",
			 "Retry budget tokens now (ratio budgets: retries allowed now)."},
    [F_DURATION] = {"resil_call_duration_seconds", "histogram",
		    "Duration of timed calls that succeeded or failed."},
};

static const char *const state_names[] = {"closed",   "open",	     "half_open",
					  "disabled", "forced_open", "metrics_only"};

static const enum resil_stat call_stats[] = {
    RESIL_STAT_SUCCESS,	 RESIL_STAT_FAILURE,	 RESIL_STAT_IGNORED,  RESIL_STAT_REJ_OPEN,
    RESIL_STAT_REJ_FULL, RESIL_STAT_REJ_LIMITED, RESIL_STAT_REJ_SHED, RESIL_STAT_REJ_BUDGET,
};

struct visit {
	struct out *o;
	enum family f;
	int64_t now;
};

/*
 * The state of component comp in the block [base, base + bsize) of rec (the
 * main block, or one process's copy under policy.scope = process), if it
 * lies inside the mapping: the block inside the state segment, the
 * component's size (0: unknown, at least one word) inside the block.
 */
static void *block_comp(const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
			uint64_t bsize, enum resil_comp comp, uint64_t size)
{
	uint64_t off = rec->comp_off[comp];

	if (!resil_has(rec, comp) || base > s->st_size || bsize > s->st_size - base ||
	    (base + off) % 8)
		return NULL;
	if (size < 8)
		size = 8;
	if (off > bsize || size > bsize - off)
		return NULL;
	return resil_seg_state(s, base + off);
}

static void *comp_state(const struct resil_seg *s, const struct resil_rec *rec,
			enum resil_comp comp, uint64_t size)
{
	return block_comp(s, rec, rec->state_off, rec->state_size, comp, size);
}

/* Every process's copy (policy.scope = process) lies inside the mapping. */
static bool copies_inside(const struct resil_seg *s, const struct resil_rec *rec)
{
	uint64_t cap = s->geo.client_cap;

	return rec->proc_stride && rec->proc_off <= s->st_size &&
	       rec->proc_stride <= (s->st_size - rec->proc_off) / (cap ? cap : 1);
}

/* One sample of a decision component's family for the block at base;
 * pl holds the labels (policy, and pid for a process's copy). */
static void put_decision(struct out *o, enum family f, const char *pl, const struct resil_seg *s,
			 const struct resil_rec *rec, uint64_t base, uint64_t bsize);

/* Seconds as the text format reads them ("1.024e-06", "68.719476736"). */
static void put_seconds(struct out *o, int64_t ns)
{
	put(o, "%.9g", (double)ns / 1e9);
}

static void put_hist(struct out *o, const char *pl, const void *st, const struct resil_conf *c)
{
	uint64_t counts[RESIL_HIST_BUCKETS], total = 0, sum = 0, cum = 0;
	const char *n = families[F_DURATION].name;
	unsigned b = 0;

	if (resil_stats_hist_read(st, c, counts, NULL, &sum))
		return;
	for (unsigned i = 0; i < RESIL_HIST_BUCKETS; i++)
		total += counts[i];
	/*
	 * Fold onto the power-of-two edges 2^10 ns (~1 us) .. 2^36 ns (~69 s):
	 * the first bucket of each group of 8 starts at one, so le = edge
	 * counts exactly the buckets below it.
	 */
	for (unsigned k = 10; k <= 36; k++) {
		int64_t edge = (int64_t)1 << k;

		while (b < RESIL_HIST_BUCKETS && resil_hist_lower_ns(b) < edge)
			cum += counts[b++];
		put(o, "%s_bucket{%s,le=\"", n, pl);
		put_seconds(o, edge);
		put(o, "\"} %" PRIu64 "\n", cum);
	}
	put(o, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", n, pl, total);
	put(o, "%s_sum{%s} %" PRIu64 ".%09" PRIu64 "\n", n, pl, sum / 1000000000u,
	    sum % 1000000000u);
	put(o, "%s_count{%s} %" PRIu64 "\n", n, pl, total);
}

static void put_decision(struct out *o, enum family f, const char *pl, const struct resil_seg *s,
			 const struct resil_rec *rec, uint64_t base, uint64_t bsize)
{
	const struct resil_conf *c = &rec->conf;
	const char *fam = families[f].name;
	void *cs;
	int state;

	switch (f) {
	case F_BREAKER_STATE:
		cs = block_comp(s, rec, base, bsize, RESIL_C_BREAKER,
				resil_breaker_state_size(&c->breaker));
		if (!cs || !c->breaker.on)
			break;
		/* the enum convention: every state always present, 1 for the
		 * current one (a state out of range, before its repair: all 0) */
		state = resil_breaker_state(cs);
		for (int i = 0; i < (int)RESIL_ARRAY_SIZE(state_names); i++)
			put(o, "%s{%s,state=\"%s\"} %d\n", fam, pl, state_names[i], i == state);
		break;
	case F_TRANSITIONS:
		cs = block_comp(s, rec, base, bsize, RESIL_C_BREAKER,
				resil_breaker_state_size(&c->breaker));
		if (!cs || !c->breaker.on)
			break;
		/* the natural cycle always (a series that appears loses its
		 * first increment to rate()); forced ones once they happened */
		for (int from = 0; from < (int)RESIL_ARRAY_SIZE(state_names); from++)
			for (int to = 0; to < (int)RESIL_ARRAY_SIZE(state_names); to++) {
				int64_t n = resil_breaker_moves(cs, from, to);
				bool cycle =
				    (from == RESIL_STATE_CLOSED && to == RESIL_STATE_OPEN) ||
				    (from == RESIL_STATE_OPEN && to == RESIL_STATE_HALF_OPEN) ||
				    (from == RESIL_STATE_HALF_OPEN &&
				     (to == RESIL_STATE_CLOSED || to == RESIL_STATE_OPEN));

				if (n < 0 || (!n && !cycle))
					continue;
				put(o, "%s{%s,from=\"%s\",to=\"%s\"} %" PRId64 "\n", fam, pl,
				    state_names[from], state_names[to], n);
			}
		break;
	case F_BREAKER_FAILURE_RATE:
	case F_BREAKER_SLOW_RATE:
	case F_BREAKER_WINDOW_CALLS: {
		struct resil_breaker_counts k;
		int64_t num;

		cs = block_comp(s, rec, base, bsize, RESIL_C_BREAKER,
				resil_breaker_state_size(&c->breaker));
		/* slow calls are counted in the window only when a slow-call
		 * rate under 100% is judged (breaker.c, slow_on) */
		if (!cs || !c->breaker.on ||
		    (f == F_BREAKER_SLOW_RATE && c->breaker.slow_rate_bp >= 10000) ||
		    resil_breaker_window(&c->breaker, cs, resil_clock_monotonic(NULL), &k) < 0)
			break;
		if (f == F_BREAKER_WINDOW_CALLS) {
			put(o, "%s{%s} %" PRId64 "\n", fam, pl, k.calls);
			break;
		}
		num = f == F_BREAKER_FAILURE_RATE ? k.failures : k.slow;
		/* a racing record can leave a part above the whole for a moment */
		put(o, "%s{%s} %.6f\n", fam, pl,
		    k.calls > 0 ? (double)resil_min64(num, k.calls) / (double)k.calls : 0.0);
		break;
	}
	case F_LIMIT_AVAILABLE: {
		struct resil_ctx x = {.seg = (struct resil_seg *)(uintptr_t)s, .rec = rec};
		int64_t n;

		cs = block_comp(s, rec, base, bsize, RESIL_C_LIMIT,
				resil_limit_state_size(&c->limit));
		if (!cs || !c->limit.on)
			break;
		n = resil_limit_available(&x, &c->limit, cs);
		if (n >= 0)
			put(o, "%s{%s} %" PRId64 "\n", fam, pl, n);
		break;
	}
	case F_BULKHEAD_IN_USE:
		cs = block_comp(s, rec, base, bsize, RESIL_C_BULKHEAD,
				resil_bulkhead_state_size(&c->bulkhead));
		if (cs && c->bulkhead.on)
			put(o, "%s{%s} %" PRIu32 "\n", fam, pl,
			    resil_bulkhead_held(&c->bulkhead, cs));
		break;
	case F_ADAPTIVE_LIMIT:
	case F_ADAPTIVE_IN_USE:
		cs = block_comp(s, rec, base, bsize, RESIL_C_ADAPTIVE,
				resil_adaptive_state_size(&c->adaptive));
		if (cs && c->adaptive.on)
			put(o, "%s{%s} %" PRIu32 "\n", fam, pl,
			    f == F_ADAPTIVE_LIMIT ? resil_adaptive_limit(cs)
						  : resil_adaptive_held(&c->adaptive, cs));
		break;
	case F_LIMIT_DRY_RUN:
		cs = block_comp(s, rec, base, bsize, RESIL_C_LIMIT,
				resil_limit_state_size(&c->limit));
		if (cs && c->limit.on)
			put(o, "%s{%s} %" PRIu64 "\n", fam, pl, resil_limit_dry_run_rejects(cs));
		break;
	case F_SHED_PROBABILITY:
		cs = block_comp(s, rec, base, bsize, RESIL_C_SHED, resil_shed_state_size(&c->shed));
		if (cs && c->shed.on)
			put(o, "%s{%s} %.6f\n", fam, pl, resil_shed_probability(cs));
		break;
	default:
		break;
	}
}

static int visit(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec, void *ctx)
{
	static const enum resil_stat one[F__MAX] = {
	    [F_SLOW] = RESIL_STAT_SLOW,
	    [F_RETRIES] = RESIL_STAT_RETRIES,
	    [F_GIVEUPS] = RESIL_STAT_GIVEUPS,
	    [F_EVICTIONS] = RESIL_STAT_EVICTIONS,
	};
	struct visit *v = ctx;
	struct out *o = v->o;
	const char *fam = families[v->f].name;
	char esc[RESIL_NAME_MAX * 2 + 1], pl[sizeof(esc) + 16];
	const struct resil_conf *c = &rec->conf;
	bool budget_only = rec->flags & RESIL_REC_BUDGET;
	void *st = resil_stats_state_of(s, rec);
	void *cs;

	(void)slot;
	resil_metrics_escape(rec->name, RESIL_NAME_MAX, esc, sizeof(esc));
	if (!esc[0])
		return 0;
	snprintf(pl, sizeof(pl), "policy=\"%s\"", esc);

	switch (v->f) {
	case F_CALLS:
		if (!st || budget_only)
			break;
		for (unsigned i = 0; i < RESIL_ARRAY_SIZE(call_stats); i++)
			put(o, "%s{%s,outcome=\"%s\"} %" PRIu64 "\n", fam, pl,
			    resil_stat_name(call_stats[i]), resil_stats_read(st, call_stats[i]));
		break;
	case F_SLOW:
	case F_RETRIES:
	case F_GIVEUPS:
		if (!st || budget_only)
			break;
		put(o, "%s{%s} %" PRIu64 "\n", fam, pl, resil_stats_read(st, one[v->f]));
		break;
	case F_EVICTIONS:
		if (!st || !c->limit.on || !c->limit.keys)
			break;
		put(o, "%s{%s} %" PRIu64 "\n", fam, pl, resil_stats_read(st, one[v->f]));
		break;
	case F_BREAKER_STATE:
	case F_TRANSITIONS:
	case F_BREAKER_FAILURE_RATE:
	case F_BREAKER_SLOW_RATE:
	case F_BREAKER_WINDOW_CALLS:
	case F_LIMIT_AVAILABLE:
	case F_BULKHEAD_IN_USE:
	case F_ADAPTIVE_LIMIT:
	case F_ADAPTIVE_IN_USE:
	case F_LIMIT_DRY_RUN:
	case F_SHED_PROBABILITY:
		if (budget_only)
			break;
		if (!rec->proc_stride) {
			put_decision(o, v->f, pl, s, rec, rec->state_off, rec->state_size);
			break;
		}
		/* policy.scope = process: each live process's copy, side by side */
		if (!copies_inside(s, rec))
			break;
		for (uint32_t i = 0; i < s->geo.client_cap; i++) {
			const struct resil_client_row *row = resil_seg_client(s, i);
			uint64_t owner = ld_acquire(&row->owner);
			char ppl[sizeof(pl) + 24];

			if (!owner || (ld_relaxed(&row->flags) & RESIL_ROW_DEAD))
				continue;
			snprintf(ppl, sizeof(ppl), "%s,pid=\"%u\"", pl, (uint32_t)(owner >> 32));
			put_decision(o, v->f, ppl, s, rec, rec->proc_off + i * rec->proc_stride,
				     rec->proc_stride);
		}
		break;
	case F_BULKHEAD_MAX:
		if (c->bulkhead.on && !budget_only)
			put(o, "%s{%s} %" PRIu32 "\n", fam, pl, c->bulkhead.max);
		break;
	case F_BUDGET_TOKENS: {
		int64_t t;
		uint64_t mag;

		cs = comp_state(s, rec, RESIL_C_BUDGET, sizeof(struct resil_budget_state));
		if (!cs || !resil_budget_has_state(&c->retry))
			break;
		/* a client-written word: any value, INT64_MIN included, so the
		 * magnitude is taken unsigned (and -0.5 keeps its sign) */
		t = resil_budget_tokens_milli(cs, &c->retry, v->now);
		mag = t < 0 ? 0 - (uint64_t)t : (uint64_t)t;
		put(o, "%s{%s} %s%" PRIu64 ".%03" PRIu64 "\n", fam, pl, t < 0 ? "-" : "",
		    mag / 1000, mag % 1000);
		break;
	}
	case F_DURATION:
		if (st && c->histogram && !budget_only)
			put_hist(o, pl, st, c);
		break;
	default:
		break;
	}
	return 0;
}

static int count_policy(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			void *ctx)
{
	(void)s;
	(void)slot;
	if (!(rec->flags & RESIL_REC_BUDGET))
		(*(uint64_t *)ctx)++;
	return 0;
}

/* Configuration records and the state arena: what is used, what waits
 * out the grace period before reuse, how fragmented the holes are. From
 * the config header's figures (seg.h: the daemon's, display only). */
static void put_space(struct out *o, const struct resil_seg *s)
{
	const struct resil_cfg_hdr *c = s->cfg;
	uint32_t rused = ld_relaxed(&c->rec_used), rfree = ld_relaxed(&c->rec_free);
	uint64_t live = ld_relaxed(&c->arena_live), largest = ld_relaxed(&c->arena_largest_free);

	if (!live) { /* embedded mode, or a daemon without the figures: the bump */
		live = ld_relaxed(&s->st->arena_used);
		largest = 0;
	}
	if (live > s->geo.arena_size)
		live = s->geo.arena_size;
	put(o,
	    "# HELP resil_records_used Configuration records in use: live or waiting out "
	    "the grace period before reuse.\n# TYPE resil_records_used gauge\n"
	    "resil_records_used %" PRIu32 "\n"
	    "# HELP resil_records Configuration records in the config segment (4 x "
	    "--policies).\n# TYPE resil_records gauge\nresil_records %" PRIu32 "\n"
	    "# HELP resil_records_waiting Records retired by a change or a delete, reused "
	    "after the grace period.\n# TYPE resil_records_waiting gauge\n"
	    "resil_records_waiting %" PRIu32 "\n",
	    rused > rfree ? rused - rfree : 0, c->rec_cap, ld_relaxed(&c->rec_waiting));
	put(o,
	    "# HELP resil_arena_used_bytes State arena in use: live blocks and blocks "
	    "waiting out the grace period.\n# TYPE resil_arena_used_bytes gauge\n"
	    "resil_arena_used_bytes %" PRIu64 "\n"
	    "# HELP resil_arena_bytes State arena size (--state-size).\n"
	    "# TYPE resil_arena_bytes gauge\nresil_arena_bytes %" PRIu64 "\n"
	    "# HELP resil_arena_waiting_bytes State blocks retired, reused after the grace "
	    "period.\n# TYPE resil_arena_waiting_bytes gauge\n"
	    "resil_arena_waiting_bytes %" PRIu64 "\n"
	    "# HELP resil_arena_free_bytes Free holes between used blocks.\n"
	    "# TYPE resil_arena_free_bytes gauge\nresil_arena_free_bytes %" PRIu64 "\n"
	    "# HELP resil_arena_holes Free holes between used blocks (fragmentation).\n"
	    "# TYPE resil_arena_holes gauge\nresil_arena_holes %" PRIu32 "\n"
	    "# HELP resil_arena_largest_free_bytes The largest block a definition can get "
	    "now.\n# TYPE resil_arena_largest_free_bytes gauge\n"
	    "resil_arena_largest_free_bytes %" PRIu64 "\n",
	    live, s->geo.arena_size, ld_relaxed(&c->arena_waiting), ld_relaxed(&c->arena_free),
	    ld_relaxed(&c->arena_holes), largest ? largest : s->geo.arena_size - live);
}

size_t resil_metrics_text(const struct resil_seg *s, char *buf, size_t len)
{
	struct out o = {.buf = buf, .len = len, .pos = 0};
	struct visit v = {.o = &o, .now = resil_clock_monotonic(NULL)};
	uint64_t npol = 0;

	if (buf && len)
		buf[0] = '\0';
	if (!s || !s->cfg || !s->st)
		return 0;
	/* first: a text cut at its end for many policies keeps these */
	put_space(&o, s);
	/* and the daemon-wide figures, before the per-policy families */
	resil_seg_foreach(s, count_policy, &npol);
	put(&o,
	    "# HELP resil_policies Policies defined (named budgets not counted).\n"
	    "# TYPE resil_policies gauge\nresil_policies %" PRIu64 "\n",
	    npol);
	put(&o,
	    "# HELP resil_events_dropped_total Events lost before the daemon read them.\n"
	    "# TYPE resil_events_dropped_total counter\nresil_events_dropped_total %" PRIu64 "\n",
	    ld_relaxed(&s->st->events_dropped));
	put(&o,
	    "# HELP resil_clients_full_total Decisions made unregistered: the client "
	    "table was full.\n# TYPE resil_clients_full_total counter\n"
	    "resil_clients_full_total %" PRIu64 "\n",
	    ld_relaxed(&s->st->clients_full));
	put(&o,
	    "# HELP resil_state_repairs_total State words the daemon found out of range "
	    "and repaired, and state blocks it reset (beyond repair at adoption).\n"
	    "# TYPE resil_state_repairs_total counter\n"
	    "resil_state_repairs_total %" PRIu64 "\n",
	    s->repairs_own ? ld_relaxed(&s->repairs) : ld_relaxed(&s->st->state_repairs));
	put(&o,
	    "# HELP resil_build_info The resil version that serves these metrics.\n"
	    "# TYPE resil_build_info gauge\nresil_build_info{version=\"%s\"} 1\n",
	    RESIL_VERSION_STRING);
	for (int f = 0; f < F__MAX; f++) {
		put(&o, "# HELP %s %s\n# TYPE %s %s\n", families[f].name, families[f].help,
		    families[f].name, families[f].type);
		v.f = (enum family)f;
		resil_seg_foreach(s, visit, &v);
	}
	return o.pos;
}

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

/* ---- values ---- */

static uint64_t pow10u(unsigned dec)
{
	uint64_t p = 1;

	while (dec--)
		p *= 10;
	return p;
}

double resil_mvalue_double(struct resil_mvalue v)
{
	uint64_t p;
	double d;

	switch (v.kind) {
	case RESIL_MV_UINT:
		return (double)v.u;
	case RESIL_MV_INT:
		return (double)v.i;
	case RESIL_MV_FIXED:
		p = pow10u(v.dec);
		d = (double)(v.u / p) + (double)(v.u % p) / (double)p;
		return v.neg ? -d : d;
	default:
		return v.d;
	}
}

unsigned resil_mvalue_decimals(struct resil_mvalue v)
{
	return v.kind == RESIL_MV_FIXED || v.kind == RESIL_MV_REAL ? v.dec : 0;
}

size_t resil_mvalue_format(struct resil_mvalue v, char *buf, size_t len)
{
	uint64_t p;
	int n;

	switch (v.kind) {
	case RESIL_MV_UINT:
		n = snprintf(buf, len, "%" PRIu64, v.u);
		break;
	case RESIL_MV_INT:
		n = snprintf(buf, len, "%" PRId64, v.i);
		break;
	case RESIL_MV_FIXED:
		p = pow10u(v.dec);
		n = snprintf(buf, len, "%s%" PRIu64 ".%0*" PRIu64, v.neg ? "-" : "", v.u / p,
			     (int)v.dec, v.u % p);
		break;
	default:
		n = snprintf(buf, len, "%.*f", (int)v.dec, v.d);
		break;
	}
	return n > 0 ? (size_t)n : 0;
}

/* ---- the text sink ---- */

static void tput(struct resil_mtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tput(struct resil_mtext *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(t->pos < t->len ? t->buf + t->pos : NULL,
		      t->pos < t->len ? t->len - t->pos : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->pos += (size_t)n;
}

/* s with the text format's escapes: \\ and \n, and \" when quoted (a
 * label value) */
static void tput_escaped(struct resil_mtext *t, const char *s, bool quoted)
{
	for (; *s; s++) {
		if (*s == '\\')
			tput(t, "\\\\");
		else if (*s == '\n')
			tput(t, "\\n");
		else if (*s == '"' && quoted)
			tput(t, "\\\"");
		else
			tput(t, "%c", *s);
	}
}

static void text_family(struct resil_msink *k, const char *name, const char *help,
			enum resil_mtype type)
{
	struct resil_mtext *t = (struct resil_mtext *)k;

	tput(t, "# HELP %s ", name);
	tput_escaped(t, help, false);
	tput(t, "\n# TYPE %s %s\n", name,
	     (unsigned)type <= RESIL_MT_SUMMARY ? resil_mtype_name(type) : "untyped");
}

static void text_sample(struct resil_msink *k, const char *family, const char *suffix,
			const struct resil_mlabel *l, size_t nl, struct resil_mvalue v)
{
	struct resil_mtext *t = (struct resil_mtext *)k;
	char val[64];

	tput(t, "%s%s", family, suffix);
	for (size_t i = 0; i < nl; i++) {
		tput(t, "%s%s=\"", i ? "," : "{", l[i].name);
		tput_escaped(t, l[i].value, true);
		tput(t, "\"");
	}
	resil_mvalue_format(v, val, sizeof(val));
	tput(t, "%s %s\n", nl ? "}" : "", val);
}

void resil_mtext_init(struct resil_mtext *t, char *buf, size_t len)
{
	*t = (struct resil_mtext){.sink = {text_family, text_sample}, .buf = buf, .len = len};
	if (buf && len)
		buf[0] = '\0';
}

/* ---- a recording ---- */

static void rec_put(struct resil_mrec *r, const void *p, size_t n)
{
	if (r->full || n > sizeof(r->buf) - r->used) {
		r->full = true;
		return;
	}
	memcpy(r->buf + r->used, p, n);
	r->used += n;
}

static void rec_str(struct resil_mrec *r, const char *s)
{
	rec_put(r, s, strlen(s) + 1);
}

static void rec_family(struct resil_msink *k, const char *name, const char *help,
		       enum resil_mtype type)
{
	struct resil_mrec *r = (struct resil_mrec *)k;
	uint8_t b[2] = {'F', (uint8_t)type};

	rec_put(r, b, 2);
	rec_str(r, name);
	rec_str(r, help);
}

static void rec_sample(struct resil_msink *k, const char *family, const char *suffix,
		       const struct resil_mlabel *l, size_t nl, struct resil_mvalue v)
{
	struct resil_mrec *r = (struct resil_mrec *)k;
	uint8_t b[2] = {'S', (uint8_t)(nl > 8 ? 8 : nl)};

	rec_put(r, b, 2);
	rec_put(r, &v, sizeof(v));
	rec_str(r, family);
	rec_str(r, suffix);
	for (size_t i = 0; i < b[1]; i++) {
		rec_str(r, l[i].name);
		rec_str(r, l[i].value);
	}
}

void resil_mrec_init(struct resil_mrec *r)
{
	r->sink = (struct resil_msink){rec_family, rec_sample};
	r->used = 0;
	r->full = false;
}

/* The next string of a recording at *pos (its own bytes: always ended). */
static const char *rec_next(const struct resil_mrec *r, size_t *pos)
{
	const char *s = r->buf + *pos;

	*pos += strlen(s) + 1;
	return s;
}

void resil_mrec_replay(const struct resil_mrec *r, struct resil_msink *k)
{
	size_t pos = 0;

	if (r->full)
		return;
	while (pos + 2 <= r->used) {
		uint8_t what = (uint8_t)r->buf[pos], n = (uint8_t)r->buf[pos + 1];

		pos += 2;
		if (what == 'F') {
			const char *name = rec_next(r, &pos);
			const char *help = rec_next(r, &pos);

			k->family(k, name, help, (enum resil_mtype)n);
		} else {
			struct resil_mlabel l[8];
			struct resil_mvalue v;
			const char *family, *suffix;

			memcpy(&v, r->buf + pos, sizeof(v));
			pos += sizeof(v);
			family = rec_next(r, &pos);
			suffix = rec_next(r, &pos);
			for (unsigned i = 0; i < n; i++) {
				l[i].name = rec_next(r, &pos);
				l[i].value = rec_next(r, &pos);
			}
			k->sample(k, family, suffix, l, n, v);
		}
	}
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
	enum resil_mtype type;
	const char *help;
} families[F__MAX] = {
    [F_CALLS] = {"resil_calls_total", RESIL_MT_COUNTER,
		 "Calls decided by the policy, by outcome or rejection."},
    [F_SLOW] = {"resil_slow_calls_total", RESIL_MT_COUNTER,
		"Calls that took breaker.slow_call or longer."},
    [F_RETRIES] = {"resil_retries_total", RESIL_MT_COUNTER, "Retries the policy allowed."},
    [F_GIVEUPS] = {"resil_giveups_total", RESIL_MT_COUNTER,
		   "Retry loops that stopped on a failure."},
    [F_TRANSITIONS] = {"resil_breaker_transitions_total", RESIL_MT_COUNTER,
		       "Circuit breaker state changes, by state left (from) and entered (to)."},
    [F_EVICTIONS] = {"resil_limit_evictions_total", RESIL_MT_COUNTER,
		     "Keys evicted from a keyed rate limiter's table."},
    [F_LIMIT_DRY_RUN] = {"resil_limit_dry_run_rejects_total", RESIL_MT_COUNTER,
			 "Calls a rate limiter in limit.dry_run would have rejected (admitted)."},
    [F_BREAKER_STATE] = {"resil_breaker_state", RESIL_MT_GAUGE,
			 "Circuit breaker state: 1 for the state it is in, 0 for the others."},
    [F_BREAKER_FAILURE_RATE] = {"resil_breaker_failure_rate", RESIL_MT_GAUGE,
				"Failed share of the calls in the breaker's window now, 0 to 1 "
				"(0 while the window is empty; count and time windows)."},
    [F_BREAKER_SLOW_RATE] = {"resil_breaker_slow_call_rate", RESIL_MT_GAUGE,
			     "Slow share (breaker.slow_call or longer) of the calls in the "
			     "breaker's window now, 0 to 1 (count and time windows with a "
			     "breaker.slow_call_rate under 100)."},
    [F_BREAKER_WINDOW_CALLS] = {"resil_breaker_window_calls", RESIL_MT_GAUGE,
				"Calls in the breaker's window now (the rates' denominator; "
				"count and time windows)."},
    [F_LIMIT_AVAILABLE] = {"resil_limit_available_permits", RESIL_MT_GAUGE,
			   "Permits the rate limiter would admit at once now (unkeyed limiters "
			   "and keyed ones' calls without a key)."},
    [F_BULKHEAD_MAX] = {"resil_bulkhead_max", RESIL_MT_GAUGE, "Bulkhead permits (bulkhead.max)."},
    [F_BULKHEAD_IN_USE] = {"resil_bulkhead_in_use", RESIL_MT_GAUGE,
			   "Bulkhead permits held now (a scan of the claims)."},
    [F_ADAPTIVE_LIMIT] = {"resil_adaptive_limit", RESIL_MT_GAUGE,
			  "Adaptive concurrency limit now (recomputed each window)."},
    [F_ADAPTIVE_IN_USE] = {"resil_adaptive_in_use", RESIL_MT_GAUGE,
			   "Adaptive permits held now (a scan of the claims)."},
    [F_SHED_PROBABILITY] = {"resil_shed_probability", RESIL_MT_GAUGE,
			    "Probability the load shedder rejects a call now."},
    [F_BUDGET_TOKENS] = {"resil_retry_budget_tokens", RESIL_MT_GAUGE,
			 "Retry budget tokens now (ratio budgets: retries allowed now)."},
    [F_DURATION] = {"resil_call_duration_seconds", RESIL_MT_HISTOGRAM,
		    "Duration of timed calls that succeeded or failed."},
};

static const enum resil_stat call_stats[] = {
    RESIL_STAT_SUCCESS,	 RESIL_STAT_FAILURE,	 RESIL_STAT_IGNORED,  RESIL_STAT_REJ_OPEN,
    RESIL_STAT_REJ_FULL, RESIL_STAT_REJ_LIMITED, RESIL_STAT_REJ_SHED, RESIL_STAT_REJ_BUDGET,
};

struct visit {
	struct resil_msink *k;
	enum family f;
	int64_t now;
};

/* A policy's labels: policy="NAME", and pid="N" for a process's copy. */
struct plabels {
	struct resil_mlabel l[2];
	size_t n;
};

/* One sample of family f with the policy's labels and up to two more. */
static void smp(struct resil_msink *k, enum family f, const char *suffix, const struct plabels *p,
		const char *xn, const char *xv, const char *yn, const char *yv,
		struct resil_mvalue v)
{
	struct resil_mlabel l[4];
	size_t n = 0;

	for (size_t i = 0; i < p->n; i++)
		l[n++] = p->l[i];
	if (xn)
		l[n++] = (struct resil_mlabel){xn, xv};
	if (yn)
		l[n++] = (struct resil_mlabel){yn, yv};
	k->sample(k, families[f].name, suffix, l, n, v);
}

/* The daemon-wide families: one sample, no label. */
static void one(struct resil_msink *k, const char *name, const char *help, enum resil_mtype type,
		struct resil_mvalue v)
{
	k->family(k, name, help, type);
	k->sample(k, name, "", NULL, 0, v);
}

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
 * p holds the labels (policy, and pid for a process's copy). */
static void put_decision(struct resil_msink *k, enum family f, const struct plabels *p,
			 const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
			 uint64_t bsize);

static void put_hist(struct resil_msink *k, const struct plabels *p, const void *st,
		     const struct resil_conf *c)
{
	uint64_t counts[RESIL_HIST_BUCKETS], total = 0, sum = 0, cum = 0;
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
	for (unsigned e = 10; e <= 36; e++) {
		int64_t edge = (int64_t)1 << e;

		while (b < RESIL_HIST_BUCKETS && resil_hist_lower_ns(b) < edge)
			cum += counts[b++];
		/* seconds as the text format reads them ("1.024e-06",
		 * "68.719476736") */
		char le[32];

		snprintf(le, sizeof(le), "%.9g", (double)edge / 1e9);
		smp(k, F_DURATION, "_bucket", p, "le", le, NULL, NULL, resil_mv_uint(cum));
	}
	smp(k, F_DURATION, "_bucket", p, "le", "+Inf", NULL, NULL, resil_mv_uint(total));
	smp(k, F_DURATION, "_sum", p, NULL, NULL, NULL, NULL, resil_mv_fixed(false, sum, 9));
	smp(k, F_DURATION, "_count", p, NULL, NULL, NULL, NULL, resil_mv_uint(total));
}

static void put_decision(struct resil_msink *k, enum family f, const struct plabels *p,
			 const struct resil_seg *s, const struct resil_rec *rec, uint64_t base,
			 uint64_t bsize)
{
	const struct resil_conf *c = &rec->conf;
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
		for (int i = 0; i < RESIL_STATE_COUNT; i++)
			smp(k, f, "", p, "state", resil_breaker_state_label(i), NULL, NULL,
			    resil_mv_uint(i == state));
		break;
	case F_TRANSITIONS:
		cs = block_comp(s, rec, base, bsize, RESIL_C_BREAKER,
				resil_breaker_state_size(&c->breaker));
		if (!cs || !c->breaker.on)
			break;
		/* the natural cycle always (a series that appears loses its
		 * first increment to rate()); forced ones once they happened */
		for (int from = 0; from < RESIL_STATE_COUNT; from++)
			for (int to = 0; to < RESIL_STATE_COUNT; to++) {
				int64_t n = resil_breaker_moves(cs, from, to);
				bool cycle =
				    (from == RESIL_STATE_CLOSED && to == RESIL_STATE_OPEN) ||
				    (from == RESIL_STATE_OPEN && to == RESIL_STATE_HALF_OPEN) ||
				    (from == RESIL_STATE_HALF_OPEN &&
				     (to == RESIL_STATE_CLOSED || to == RESIL_STATE_OPEN));

				if (n < 0 || (!n && !cycle))
					continue;
				smp(k, f, "", p, "from", resil_breaker_state_label(from), "to",
				    resil_breaker_state_label(to), resil_mv_int(n));
			}
		break;
	case F_BREAKER_FAILURE_RATE:
	case F_BREAKER_SLOW_RATE:
	case F_BREAKER_WINDOW_CALLS: {
		struct resil_breaker_counts w;
		int64_t num;

		cs = block_comp(s, rec, base, bsize, RESIL_C_BREAKER,
				resil_breaker_state_size(&c->breaker));
		/* slow calls are counted in the window only when a slow-call
		 * rate under 100% is judged (breaker.c, slow_on) */
		if (!cs || !c->breaker.on ||
		    (f == F_BREAKER_SLOW_RATE && c->breaker.slow_rate_bp >= 10000) ||
		    resil_breaker_window(&c->breaker, cs, resil_clock_monotonic(NULL), &w) < 0)
			break;
		if (f == F_BREAKER_WINDOW_CALLS) {
			smp(k, f, "", p, NULL, NULL, NULL, NULL, resil_mv_int(w.calls));
			break;
		}
		num = f == F_BREAKER_FAILURE_RATE ? w.failures : w.slow;
		/* a racing record can leave a part above the whole for a moment */
		smp(k, f, "", p, NULL, NULL, NULL, NULL,
		    resil_mv_real(w.calls > 0 ? (double)resil_min64(num, w.calls) / (double)w.calls
					      : 0.0,
				  6));
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
			smp(k, f, "", p, NULL, NULL, NULL, NULL, resil_mv_int(n));
		break;
	}
	case F_BULKHEAD_IN_USE:
		cs = block_comp(s, rec, base, bsize, RESIL_C_BULKHEAD,
				resil_bulkhead_state_size(&c->bulkhead));
		if (cs && c->bulkhead.on)
			smp(k, f, "", p, NULL, NULL, NULL, NULL,
			    resil_mv_uint(resil_bulkhead_held(&c->bulkhead, cs)));
		break;
	case F_ADAPTIVE_LIMIT:
	case F_ADAPTIVE_IN_USE:
		cs = block_comp(s, rec, base, bsize, RESIL_C_ADAPTIVE,
				resil_adaptive_state_size(&c->adaptive));
		if (cs && c->adaptive.on)
			smp(k, f, "", p, NULL, NULL, NULL, NULL,
			    resil_mv_uint(f == F_ADAPTIVE_LIMIT
					      ? resil_adaptive_limit(cs)
					      : resil_adaptive_held(&c->adaptive, cs)));
		break;
	case F_LIMIT_DRY_RUN:
		cs = block_comp(s, rec, base, bsize, RESIL_C_LIMIT,
				resil_limit_state_size(&c->limit));
		if (cs && c->limit.on)
			smp(k, f, "", p, NULL, NULL, NULL, NULL,
			    resil_mv_uint(resil_limit_dry_run_rejects(cs)));
		break;
	case F_SHED_PROBABILITY:
		cs = block_comp(s, rec, base, bsize, RESIL_C_SHED, resil_shed_state_size(&c->shed));
		if (cs && c->shed.on)
			smp(k, f, "", p, NULL, NULL, NULL, NULL,
			    resil_mv_real(resil_shed_probability(cs), 6));
		break;
	default:
		break;
	}
}

static int visit(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec, void *ctx)
{
	static const enum resil_stat one_stat[F__MAX] = {
	    [F_SLOW] = RESIL_STAT_SLOW,
	    [F_RETRIES] = RESIL_STAT_RETRIES,
	    [F_GIVEUPS] = RESIL_STAT_GIVEUPS,
	    [F_EVICTIONS] = RESIL_STAT_EVICTIONS,
	};
	struct visit *v = ctx;
	struct resil_msink *k = v->k;
	char name[RESIL_NAME_MAX + 1];
	struct plabels p = {.l = {{"policy", name}}, .n = 1};
	const struct resil_conf *c = &rec->conf;
	bool budget_only = rec->flags & RESIL_REC_BUDGET;
	void *st = resil_stats_state_of(s, rec);
	void *cs;

	(void)slot;
	/* the name as it lies in the record, up to its NUL or RESIL_NAME_MAX
	 * bytes (the text sink escapes it) */
	memcpy(name, rec->name, RESIL_NAME_MAX);
	name[RESIL_NAME_MAX] = '\0';
	if (!name[0])
		return 0;

	switch (v->f) {
	case F_CALLS:
		if (!st || budget_only)
			break;
		for (unsigned i = 0; i < RESIL_ARRAY_SIZE(call_stats); i++)
			smp(k, v->f, "", &p, "outcome", resil_stat_name(call_stats[i]), NULL, NULL,
			    resil_mv_uint(resil_stats_read(st, call_stats[i])));
		break;
	case F_SLOW:
	case F_RETRIES:
	case F_GIVEUPS:
		if (!st || budget_only)
			break;
		smp(k, v->f, "", &p, NULL, NULL, NULL, NULL,
		    resil_mv_uint(resil_stats_read(st, one_stat[v->f])));
		break;
	case F_EVICTIONS:
		if (!st || !c->limit.on || !c->limit.keys)
			break;
		smp(k, v->f, "", &p, NULL, NULL, NULL, NULL,
		    resil_mv_uint(resil_stats_read(st, one_stat[v->f])));
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
			put_decision(k, v->f, &p, s, rec, rec->state_off, rec->state_size);
			break;
		}
		/* policy.scope = process: each live process's copy, side by side */
		if (!copies_inside(s, rec))
			break;
		for (uint32_t i = 0; i < s->geo.client_cap; i++) {
			const struct resil_client_row *row = resil_seg_client(s, i);
			uint64_t owner = ld_acquire(&row->owner);
			char pid[16];
			struct plabels pp = {.l = {{"policy", name}, {"pid", pid}}, .n = 2};

			if (!owner || (ld_relaxed(&row->flags) & RESIL_ROW_DEAD))
				continue;
			snprintf(pid, sizeof(pid), "%u", (uint32_t)(owner >> 32));
			put_decision(k, v->f, &pp, s, rec, rec->proc_off + i * rec->proc_stride,
				     rec->proc_stride);
		}
		break;
	case F_BULKHEAD_MAX:
		if (c->bulkhead.on && !budget_only)
			smp(k, v->f, "", &p, NULL, NULL, NULL, NULL,
			    resil_mv_uint(c->bulkhead.max));
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
		smp(k, v->f, "", &p, NULL, NULL, NULL, NULL, resil_mv_fixed(t < 0, mag, 3));
		break;
	}
	case F_DURATION:
		if (st && c->histogram && !budget_only)
			put_hist(k, &p, st, c);
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
static void put_space(struct resil_msink *k, const struct resil_seg *s)
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
	one(k, "resil_records_used",
	    "Configuration records in use: live or waiting out the grace period before reuse.",
	    RESIL_MT_GAUGE, resil_mv_uint(rused > rfree ? rused - rfree : 0));
	one(k, "resil_records", "Configuration records in the config segment (4 x --policies).",
	    RESIL_MT_GAUGE, resil_mv_uint(c->rec_cap));
	one(k, "resil_records_waiting",
	    "Records retired by a change or a delete, reused after the grace period.",
	    RESIL_MT_GAUGE, resil_mv_uint(ld_relaxed(&c->rec_waiting)));
	one(k, "resil_arena_used_bytes",
	    "State arena in use: live blocks and blocks waiting out the grace period.",
	    RESIL_MT_GAUGE, resil_mv_uint(live));
	one(k, "resil_arena_bytes", "State arena size (--state-size).", RESIL_MT_GAUGE,
	    resil_mv_uint(s->geo.arena_size));
	one(k, "resil_arena_waiting_bytes", "State blocks retired, reused after the grace period.",
	    RESIL_MT_GAUGE, resil_mv_uint(ld_relaxed(&c->arena_waiting)));
	one(k, "resil_arena_free_bytes", "Free holes between used blocks.", RESIL_MT_GAUGE,
	    resil_mv_uint(ld_relaxed(&c->arena_free)));
	one(k, "resil_arena_holes", "Free holes between used blocks (fragmentation).",
	    RESIL_MT_GAUGE, resil_mv_uint(ld_relaxed(&c->arena_holes)));
	one(k, "resil_arena_largest_free_bytes", "The largest block a definition can get now.",
	    RESIL_MT_GAUGE, resil_mv_uint(largest ? largest : s->geo.arena_size - live));
}

void resil_metrics_emit(const struct resil_seg *s, struct resil_msink *k)
{
	struct visit v = {.k = k, .now = resil_clock_monotonic(NULL)};
	struct resil_mlabel version = {"version", RESIL_VERSION_STRING};
	uint64_t npol = 0;

	if (!s || !s->cfg || !s->st)
		return;
	/* first: a text cut at its end for many policies keeps these */
	put_space(k, s);
	/* and the daemon-wide figures, before the per-policy families */
	resil_seg_foreach(s, count_policy, &npol);
	one(k, "resil_policies", "Policies defined (named budgets not counted).", RESIL_MT_GAUGE,
	    resil_mv_uint(npol));
	one(k, "resil_events_dropped_total", "Events lost before the daemon read them.",
	    RESIL_MT_COUNTER, resil_mv_uint(ld_relaxed(&s->st->events_dropped)));
	one(k, "resil_clients_full_total",
	    "Decisions made unregistered: the client table was full.", RESIL_MT_COUNTER,
	    resil_mv_uint(ld_relaxed(&s->st->clients_full)));
	one(k, "resil_state_repairs_total",
	    "State words the daemon found out of range and repaired, and state blocks it reset "
	    "(beyond repair at adoption).",
	    RESIL_MT_COUNTER,
	    resil_mv_uint(s->repairs_own ? ld_relaxed(&s->repairs)
					 : ld_relaxed(&s->st->state_repairs)));
	k->family(k, "resil_build_info", "The resil version that serves these metrics.",
		  RESIL_MT_GAUGE);
	k->sample(k, "resil_build_info", "", &version, 1, resil_mv_uint(1));
	for (int f = 0; f < F__MAX; f++) {
		k->family(k, families[f].name, families[f].help, families[f].type);
		v.f = (enum family)f;
		resil_seg_foreach(s, visit, &v);
	}
}

size_t resil_metrics_text(const struct resil_seg *s, char *buf, size_t len)
{
	struct resil_mtext t;

	resil_mtext_init(&t, buf, len);
	resil_metrics_emit(s, &t.sink);
	return t.pos;
}

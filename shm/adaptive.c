/* SPDX-License-Identifier: MIT */
/*
 * adaptive.c - adaptive concurrency limit: the bulkhead's crash-exact
 * permits against a limit the fleet learns from the latencies it sees
 * (Little's law: the concurrency a dependency sustains is its throughput
 * times its latency; past that, latency only grows as calls queue).
 *
 * Algorithms (vegas, gradient2, aimd, as in Netflix concurrency-limits with
 * its defaults) are fed one aggregated sample per window: the window's
 * average RTT, the most calls in flight, whether anything was dropped.
 * Every adaptive.probe the limit drops to 3 for one window and the next
 * measures the no-load RTT (Envoy's min-RTT re-probe). Outcomes: SUCCESS
 * gives an RTT sample (now - pm->start_ns); FAILURE is a drop, no RTT;
 * IGNORED frees the permit and says nothing. The design (the algorithms'
 * rules, Gradient2's tolerance, the re-probe, the untrusted words) is
 * docs/internals/adaptive.md.
 *
 * Shared words (see adaptive.h for the lines):
 *   inflight, slots   the permit pool of bulkhead.c (same protocol, same
 *                     crash windows A-D, same repair, reclaim and sweep of
 *                     stray claims; released by a CAS from pm->holder).
 *   rtt_sum, rtt_count, drops   fetch_add (relaxed) by releasers,
 *                     exchanged to 0 by the recomputer.
 *   rtt_min, max_inflight   CAS-min / CAS-max (relaxed) by releasers /
 *                     acquirers, exchanged by the recomputer.
 *   limit             store (relaxed) by the recomputer, load (relaxed) by
 *                     every acquirer: a stale limit for a few ns admits or
 *                     rejects one call more, nothing else.
 *   epoch             the current window's start (ns, even); odd while a
 *                     recomputation runs. CAS even -> odd by the first
 *                     releaser past the window's end (acq_rel: it then
 *                     owns the algorithm's memory), store of the new even
 *                     start (release) when it is done.
 *   algorithm memory  relaxed loads and stores by the owner of the odd
 *                     epoch only (relaxed is enough: the epoch CAS/store
 *                     orders one owner after the other).
 *
 * Untrusted words: every word of the block is any client's to write. The
 * pool and the limit's bound come from the configuration, never from the
 * block's geometry copies; the algorithms' doubles go back into words
 * saturated (d2u); the daemon's tick (state_repair) repairs and counts
 * each bad word that steers a decision.
 *
 * Crash windows: the owner of an odd epoch dies before it stores the new
 * epoch: nobody recomputes until someone (a releaser or the daemon's
 * maintenance) sees the epoch odd for 8 windows and steals it by CAS; a
 * stealer racing a merely slow owner only mixes two windows' updates of
 * bounded, clamped values. A sample split by the exchanges (its sum taken,
 * its count not yet) moves to the next window: statistics, not state.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "resil.h"
#include "adaptive.h"
#include "parse.h"

#define STEAL_WINDOWS	  8
#define AIMD_TIMEOUT_NS	  (5 * RESIL_NS_PER_S)
#define G2_TOLERANCE	  1.5  /* adaptive.tolerance when not given (Netflix's) */
#define G2_TOLERANCE_MIN  1000 /* adaptive.tolerance bounds, thousandths */
#define G2_TOLERANCE_MAX  10000
#define G2_SMOOTHING	  0.2
#define G2_QUEUE	  4.0
#define G2_LONG_WINDOW	  600
#define G2_WARMUP	  10
#define AIMD_BACKOFF	  0.9
#define PROBE_JITTER	  0.15
#define PROBE_MAX_WINDOWS 10 /* give up measuring after this many thin windows */

/* ---- configuration ---- */

static const char *const algo_names[] = {"vegas", "gradient2", "aimd"};

uint32_t resil_adaptive_min(const struct resil_adaptive_conf *c)
{
	uint32_t v = c->min ? c->min : c->algorithm == RESIL_ADAPTIVE_VEGAS ? 1 : 20;
	uint32_t mx = c->max ? c->max : c->algorithm == RESIL_ADAPTIVE_VEGAS ? 1000 : 200;

	return v > mx ? mx : v;
}

uint32_t resil_adaptive_max(const struct resil_adaptive_conf *c)
{
	uint32_t v = c->max ? c->max : c->algorithm == RESIL_ADAPTIVE_VEGAS ? 1000 : 200;

	return v > RESIL_POOL_MAX ? RESIL_POOL_MAX : v;
}

uint32_t resil_adaptive_tolerance_milli(const struct resil_adaptive_conf *c)
{
	uint32_t v = c->tolerance_milli;

	if (!v)
		return (uint32_t)(G2_TOLERANCE * 1000);
	if (v < G2_TOLERANCE_MIN)
		return G2_TOLERANCE_MIN;
	return v > G2_TOLERANCE_MAX ? G2_TOLERANCE_MAX : v;
}

uint32_t resil_adaptive_initial(const struct resil_adaptive_conf *c)
{
	uint32_t v = c->initial ? c->initial : 20, lo = resil_adaptive_min(c),
		 hi = resil_adaptive_max(c);

	return v < lo ? lo : v > hi ? hi : v;
}

void resil_adaptive_conf_defaults(struct resil_adaptive_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->algorithm = RESIL_ADAPTIVE_VEGAS;
	c->window_ns = RESIL_NS_PER_S;
	c->probe_ns = 60 * RESIL_NS_PER_S;
}

int resil_adaptive_conf_set(struct resil_adaptive_conf *c, const char *key, const char *value,
			    char *err, size_t errlen)
{
	uint32_t v;
	int64_t ns;

	if (strcmp(key, "adaptive.algorithm") == 0) {
		size_t i;

		while (*value == ' ' || *value == '\t')
			value++;
		for (i = 0; i < RESIL_ARRAY_SIZE(algo_names); i++)
			if (strcmp(value, algo_names[i]) == 0)
				break;
		if (i == RESIL_ARRAY_SIZE(algo_names)) {
			snprintf(err, errlen,
				 "adaptive.algorithm: '%s' is not vegas, gradient2 or aimd", value);
			return -EINVAL;
		}
		c->algorithm = (uint8_t)i;
	} else if (strcmp(key, "adaptive.min") == 0 || strcmp(key, "adaptive.max") == 0 ||
		   strcmp(key, "adaptive.initial") == 0) {
		if (resil_parse_u32(value, &v) < 0 || v == 0 || v > RESIL_POOL_MAX) {
			snprintf(err, errlen, "%s: '%s' is not a number of calls in 1..%u", key,
				 value, RESIL_POOL_MAX);
			return -EINVAL;
		}
		if (key[9] == 'm' && key[10] == 'i')
			c->min = v;
		else if (key[9] == 'm')
			c->max = v;
		else
			c->initial = v;
	} else if (strcmp(key, "adaptive.window") == 0) {
		if (resil_parse_duration(value, &ns) < 0 || ns < RESIL_NS_PER_MS) {
			snprintf(
			    err, errlen,
			    "adaptive.window: '%s' is not a duration of at least 1ms (e.g. 1s)",
			    value);
			return -EINVAL;
		}
		c->window_ns = ns;
	} else if (strcmp(key, "adaptive.probe") == 0) {
		uint8_t on;

		if (resil_parse_bool(value, &on) == 0 && !on) {
			c->probe_ns = 0;
		} else if (resil_parse_duration(value, &ns) < 0 || ns < 0) {
			snprintf(err, errlen,
				 "adaptive.probe: '%s' is not a duration (e.g. 60s) or off", value);
			return -EINVAL;
		} else {
			c->probe_ns = ns;
		}
	} else if (strcmp(key, "adaptive.tolerance") == 0) {
		if (resil_parse_milli(value, &v) < 0 || v < G2_TOLERANCE_MIN ||
		    v > G2_TOLERANCE_MAX) {
			snprintf(err, errlen,
				 "adaptive.tolerance: '%s' is not a number in 1..10 (e.g. 1.5)",
				 value);
			return -EINVAL;
		}
		c->tolerance_milli = v;
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

size_t resil_adaptive_conf_format(const struct resil_adaptive_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	resil_priv_put(buf, len, &off, "adaptive.algorithm = %s\n",
		       c->algorithm < RESIL_ARRAY_SIZE(algo_names) ? algo_names[c->algorithm]
								   : "vegas");
	/* only bounds that were given: an unset one follows the algorithm's
	 * default, and what is written parses back to the same bytes */
	if (c->min)
		resil_priv_put(buf, len, &off, "adaptive.min = %u\n", c->min);
	if (c->max)
		resil_priv_put(buf, len, &off, "adaptive.max = %u\n", c->max);
	if (c->initial)
		resil_priv_put(buf, len, &off, "adaptive.initial = %u\n", c->initial);
	resil_format_duration(c->window_ns, d, sizeof(d));
	resil_priv_put(buf, len, &off, "adaptive.window = %s\n", d);
	if (c->probe_ns > 0)
		resil_format_duration(c->probe_ns, d, sizeof(d));
	else
		snprintf(d, sizeof(d), "off");
	resil_priv_put(buf, len, &off, "adaptive.probe = %s\n", d);
	/* only when given, as the bounds: 0 (not given) follows the default */
	if (c->tolerance_milli) {
		uint32_t f = c->tolerance_milli % 1000;
		int w = 3;

		while (f && f % 10 == 0) {
			f /= 10;
			w--;
		}
		if (f)
			resil_priv_put(buf, len, &off, "adaptive.tolerance = %u.%0*u\n",
				       c->tolerance_milli / 1000, w, f);
		else
			resil_priv_put(buf, len, &off, "adaptive.tolerance = %u\n",
				       c->tolerance_milli / 1000);
	}
	return off;
}

/* ---- state ---- */

uint64_t resil_adaptive_state_size(const struct resil_adaptive_conf *c)
{
	return sizeof(struct resil_adaptive_state) + resil_pool_bytes(resil_adaptive_max(c));
}

/* The published limit, within 1..adaptive.max (the configuration's
 * bound, never the block's copy of it). */
static void publish(struct resil_adaptive_state *s, const struct resil_adaptive_conf *c,
		    uint64_t milli)
{
	uint64_t l = milli / 1000, hi = resil_adaptive_max(c);

	if (l < 1)
		l = 1;
	if (l > hi)
		l = hi;
	st_relaxed(&s->limit, (uint32_t)l);
}

/* A double the algorithms computed from shared words, as an unsigned
 * word: saturated (and NaN as 0), never an out-of-range conversion. */
static uint64_t d2u(double v)
{
	if (!(v > 0))
		return 0;
	return v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
}

static int64_t window_of(const struct resil_adaptive_conf *c)
{
	return c->window_ns > 0 ? c->window_ns : RESIL_NS_PER_S;
}

void resil_adaptive_state_init(void *st, const struct resil_adaptive_conf *c, int64_t now)
{
	struct resil_adaptive_state *s = st;
	uint32_t n = resil_adaptive_max(c);

	memset(s, 0, resil_adaptive_state_size(c));
	s->nslots = n;
	s->shift = resil_pool_shift(n);
	s->slots_off = sizeof(*s);
	st_relaxed(&s->rtt_min, UINT64_MAX);
	st_relaxed(&s->limit_milli, (uint64_t)resil_adaptive_initial(c) * 1000);
	publish(s, c, (uint64_t)resil_adaptive_initial(c) * 1000);
	st_relaxed(&s->epoch, (uint64_t)(now > 0 ? now : 0) & ~1ull);
	/* the first probe after one interval: the no-load RTT is learned from
	 * the lowest windows until then */
	if (c->probe_ns > 0)
		st_relaxed(&s->probe_at, (uint64_t)resil_add_sat(now, c->probe_ns));
}

bool resil_adaptive_same_shape(const struct resil_adaptive_conf *a,
			       const struct resil_adaptive_conf *b)
{
	return resil_adaptive_max(a) == resil_adaptive_max(b);
}

void resil_adaptive_carry(void *nst, const struct resil_adaptive_conf *nc, const void *ost,
			  const struct resil_adaptive_conf *oc, int64_t now)
{
	struct resil_adaptive_state *o = (struct resil_adaptive_state *)ost;
	struct resil_adaptive_state *s = nst;
	uint64_t milli = ld_relaxed(&o->limit_milli);
	uint64_t lo = (uint64_t)resil_adaptive_min(nc) * 1000;
	uint64_t hi = (uint64_t)resil_adaptive_max(nc) * 1000;

	/* What was learned carries over; permits stay in the old block (see
	 * bulkhead.c). A probe in progress is abandoned at its saved value. */
	if (ld_relaxed(&o->phase) != RESIL_ADAPTIVE_NORMAL)
		milli = ld_relaxed(&o->saved_milli);
	milli = milli < lo ? lo : milli > hi ? hi : milli;
	st_relaxed(&s->limit_milli, milli);
	publish(s, nc, milli);
	st_relaxed(&s->noload_ns, ld_relaxed(&o->noload_ns));
	st_relaxed(&s->long_rtt_x1k, ld_relaxed(&o->long_rtt_x1k));
	st_relaxed(&s->long_n, ld_relaxed(&o->long_n));
	st_relaxed(&s->windows, ld_relaxed(&o->windows));
	st_relaxed(&s->probes, ld_relaxed(&o->probes));
	st_relaxed(&s->reclaimed, ld_relaxed(&o->reclaimed));
}

uint32_t resil_adaptive_limit(const void *st)
{
	return ld_relaxed(&((struct resil_adaptive_state *)st)->limit);
}

uint32_t resil_adaptive_held(const struct resil_adaptive_conf *c, const void *st)
{
	struct resil_pool p = resil_adaptive_pool((struct resil_adaptive_state *)st, c);

	return resil_pool_claimed(&p);
}

/* ---- the algorithms: one aggregated sample per window ---- */

struct sample {
	double rtt;	   /* average RTT of the window, ns */
	double min_rtt;	   /* lowest RTT of the window, ns */
	uint32_t inflight; /* most in flight */
	bool drop;
};

/* No libm: the few roundings the algorithms need, for what they see. */
static double floor_pos(double v)
{
	return v > 0 ? (double)(uint64_t)v : 0;
}

static double ceil_any(double v)
{
	double t = (double)(int64_t)v;

	return t < v ? t + 1 : t;
}

/* Netflix's Log10RootFunction: the integer log10 of the limit, at least 1. */
static double lg10(double limit)
{
	uint64_t n = limit > 1 ? (uint64_t)limit : 1;
	int d = 0;

	while (n >= 10) {
		n /= 10;
		d++;
	}
	return d < 1 ? 1 : d;
}

static double vegas(struct resil_adaptive_state *s, double limit, const struct sample *m)
{
	double noload = (double)ld_relaxed(&s->noload_ns), queue, lg = lg10(limit);

	if (noload <= 0 || m->rtt < noload) {
		/* a new floor: learn it, decide nothing this window */
		st_relaxed(&s->noload_ns, d2u(m->rtt));
		return limit;
	}
	if (m->drop)
		return limit - lg;
	if ((double)m->inflight * 2 < limit)
		return limit; /* app-limited: no evidence the limit is too low */
	queue = ceil_any(limit * (1.0 - noload / m->rtt));
	if (queue <= lg)
		return limit + 6 * lg; /* threshold: + beta */
	if (queue < 3 * lg)
		return limit + lg; /* below alpha */
	if (queue > 6 * lg)
		return limit - lg; /* above beta */
	return limit;
}

static double ewma_add(struct resil_adaptive_state *s, double rtt)
{
	uint32_t n = ld_relaxed(&s->long_n);
	double v = (double)ld_relaxed(&s->long_rtt_x1k) / 1024.0;

	if (n < G2_WARMUP) {
		v = (v * n + rtt) / (n + 1);
		st_relaxed(&s->long_n, n + 1);
	} else {
		double f = 2.0 / (G2_LONG_WINDOW + 1);

		v = v * (1 - f) + rtt * f;
	}
	st_relaxed(&s->long_rtt_x1k, d2u(v * 1024.0));
	return v;
}

static double gradient2(struct resil_adaptive_state *s, double limit, const struct sample *m,
			double tolerance)
{
	double lrtt = ewma_add(s, m->rtt), grad, nl;

	if (lrtt / m->rtt > 2) {
		/* the long average is far above the present: pull it down */
		lrtt *= 0.95;
		st_relaxed(&s->long_rtt_x1k, d2u(lrtt * 1024.0));
	}
	if ((double)m->inflight < limit / 2)
		return limit;
	grad = tolerance * lrtt / m->rtt;
	grad = grad < 0.5 ? 0.5 : grad > 1.0 ? 1.0 : grad;
	nl = limit * grad + G2_QUEUE;
	return limit * (1 - G2_SMOOTHING) + nl * G2_SMOOTHING;
}

static double aimd(double limit, const struct sample *m)
{
	if (m->drop || m->rtt > AIMD_TIMEOUT_NS)
		return floor_pos(limit * AIMD_BACKOFF);
	if ((double)m->inflight * 2 >= limit)
		return limit + 1;
	return limit;
}

static void schedule_probe(struct resil_ctx *x, const struct resil_adaptive_conf *c,
			   struct resil_adaptive_state *s, int64_t now)
{
	double j;

	if (c->probe_ns <= 0 || c->algorithm == RESIL_ADAPTIVE_AIMD) {
		st_relaxed(&s->probe_at, 0);
		return;
	}
	/* +-15%: processes of a fleet of policies do not probe in step */
	j = ((double)(resil_random_next(&x->random) >> 11) / 9007199254740992.0 * 2 - 1) *
	    PROBE_JITTER;
	st_relaxed(&s->probe_at,
		   (uint64_t)resil_add_sat(now, (int64_t)((double)c->probe_ns * (1 + j))));
}

/* The owner of the odd epoch decides the window that just ended. */
static void decide(struct resil_ctx *x, const struct resil_adaptive_conf *c,
		   struct resil_adaptive_state *s, int64_t now)
{
	uint32_t count = atomic_exchange_explicit(&s->rtt_count, 0, memory_order_relaxed);
	uint64_t sum = atomic_exchange_explicit(&s->rtt_sum, 0, memory_order_relaxed);
	uint64_t mn = atomic_exchange_explicit(&s->rtt_min, UINT64_MAX, memory_order_relaxed);
	uint32_t mx = atomic_exchange_explicit(&s->max_inflight, 0, memory_order_relaxed);
	uint32_t drops = atomic_exchange_explicit(&s->drops, 0, memory_order_relaxed);
	uint32_t phase = ld_relaxed(&s->phase);
	double lo = resil_adaptive_min(c), hi = resil_adaptive_max(c), limit, nl;
	uint64_t probe_at = ld_relaxed(&s->probe_at);
	struct sample m;

	if (c->probe_ns > 0 && c->algorithm != RESIL_ADAPTIVE_AIMD && probe_at == 0) {
		schedule_probe(x, c, s, now); /* probing was just switched on */
		probe_at = ld_relaxed(&s->probe_at);
	}
	if (phase == RESIL_ADAPTIVE_PROBE_DRAIN) {
		st_relaxed(&s->phase, RESIL_ADAPTIVE_PROBE_MEASURE);
		st_relaxed(&s->probe_windows, 0);
		return;
	}
	if (phase == RESIL_ADAPTIVE_PROBE_MEASURE) {
		uint32_t w = ld_relaxed(&s->probe_windows) + 1;

		if (count < RESIL_ADAPTIVE_MIN_SAMPLES && w < PROBE_MAX_WINDOWS) {
			/* too few calls at this concurrency yet: measure on, keeping
			 * what was sampled */
			st_relaxed(&s->probe_windows, w);
			faa_relaxed(&s->rtt_count, count);
			faa_relaxed(&s->rtt_sum, sum);
			return;
		}
		if (count >= RESIL_ADAPTIVE_MIN_SAMPLES) {
			double avg = (double)sum / count;

			st_relaxed(&s->noload_ns, d2u(avg));
			st_relaxed(&s->long_rtt_x1k, d2u(avg * 1024.0));
			st_relaxed(&s->long_n, G2_WARMUP);
			faa_relaxed(&s->probes, 1);
		}
		limit = (double)ld_relaxed(&s->saved_milli) / 1000.0;
		limit = limit < lo ? lo : limit > hi ? hi : limit;
		st_relaxed(&s->limit_milli, d2u(limit * 1000.0));
		publish(s, c, d2u(limit * 1000.0));
		st_relaxed(&s->phase, RESIL_ADAPTIVE_NORMAL);
		schedule_probe(x, c, s, now);
		return;
	}

	limit = (double)ld_relaxed(&s->limit_milli) / 1000.0;
	if (count >= RESIL_ADAPTIVE_MIN_SAMPLES || (drops && c->algorithm == RESIL_ADAPTIVE_AIMD)) {
		m.rtt = count ? (double)sum / count : 0;
		m.min_rtt = count ? (double)mn : 0;
		m.inflight = mx;
		m.drop = drops != 0;
		switch (c->algorithm) {
		case RESIL_ADAPTIVE_GRADIENT2:
			nl = count ? gradient2(s, limit, &m,
					       resil_adaptive_tolerance_milli(c) / 1000.0)
				   : limit;
			break;
		case RESIL_ADAPTIVE_AIMD:
			nl = aimd(limit, &m);
			break;
		default:
			nl = count ? vegas(s, limit, &m) : limit;
			break;
		}
		if (nl != nl)
			nl = limit; /* 0/0 from RTTs of 0: decide nothing */
		nl = nl < lo ? lo : nl > hi ? hi : nl;
		if (nl < 1)
			nl = 1;
		st_relaxed(&s->limit_milli, d2u(nl * 1000.0));
		publish(s, c, d2u(nl * 1000.0));
		st_relaxed(&s->last_rtt_ns, d2u(m.rtt));
		faa_relaxed(&s->windows, 1);
	}
	if (probe_at && c->probe_ns > 0 && c->algorithm != RESIL_ADAPTIVE_AIMD &&
	    now >= (int64_t)probe_at) {
		/* Envoy-style re-probe: drop to a handful of calls, let the
		 * calls admitted under the old limit drain for one window, then
		 * measure */
		st_relaxed(&s->saved_milli, ld_relaxed(&s->limit_milli));
		st_relaxed(&s->phase, RESIL_ADAPTIVE_PROBE_DRAIN);
		publish(s, c, RESIL_ADAPTIVE_PROBE_LIMIT * 1000);
	}
}

/* Cross the window boundary: whoever CASes the epoch to odd decides. */
static void maybe_decide(struct resil_ctx *x, const struct resil_adaptive_conf *c,
			 struct resil_adaptive_state *s, int64_t now)
{
	uint64_t e = ld_acquire(&s->epoch);
	int64_t w = window_of(c);
	/* time since the window's start, by difference of unsigned words: the
	 * epoch is any client's to write, and no value of it overflows this
	 * (one from the future reads negative until the daemon repairs it) */
	int64_t since = (int64_t)((uint64_t)now - (e & ~1ull));

	if (RESIL_UNLIKELY(e & 1)) {
		/* someone is deciding; if they died doing it, take over */
		if (since > STEAL_WINDOWS * w)
			cas_acq_rel(&s->epoch, &e, (uint64_t)now & ~1ull);
		return;
	}
	if (RESIL_LIKELY(since < w))
		return;
	if (!cas_acq_rel(&s->epoch, &e, e | 1))
		return;
	/* crash window: epoch odd until stolen STEAL_WINDOWS windows later */
	decide(x, c, s, now);
	st_release(&s->epoch, (uint64_t)now & ~1ull);
}

/* ---- the hot path ---- */

static inline uint32_t claim_id(const struct resil_ctx *x)
{
	return x->client_id ? x->client_id : RESIL_CLIENT_UNREGISTERED;
}

int resil_adaptive_acquire(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			   struct resil_permit_priv *pm)
{
	struct resil_adaptive_state *s = st;
	struct resil_pool p = resil_adaptive_pool(s, c);
	uint32_t inflight, idx, mx;

	idx = resil_pool_claim(&p, ld_relaxed(&s->limit), claim_id(x), &inflight);
	if (!idx)
		return RESIL_REJECT_FULL;
	/* the bulkhead (if any) claimed with the same id */
	pm->holder = claim_id(x);
	pm->adaptive_idx = idx;
	pm->flags |= RESIL_PERMIT_ADAPTIVE;
	if (!(pm->flags & RESIL_PERMIT_TIMED)) {
		pm->start_ns = resil_ctx_now(x);
		pm->flags |= RESIL_PERMIT_TIMED;
	}
	/* the window's most in flight: a load, a CAS only on a new maximum */
	mx = ld_relaxed(&s->max_inflight);
	while (inflight > mx && !cas_relaxed(&s->max_inflight, &mx, inflight))
		;
	return 0;
}

void resil_adaptive_undo(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			 struct resil_permit_priv *pm)
{
	struct resil_adaptive_state *s = st;
	struct resil_pool p;

	if (!(pm->flags & RESIL_PERMIT_ADAPTIVE))
		return;
	p = resil_adaptive_pool(s, c);
	/* a CAS from the id we claimed with: see resil_pool_free */
	resil_pool_free(&p, pm->adaptive_idx, pm->holder);
	pm->adaptive_idx = 0;
	pm->flags &= ~RESIL_PERMIT_ADAPTIVE;
}

void resil_adaptive_release(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			    struct resil_permit_priv *pm, int outcome)
{
	struct resil_adaptive_state *s = st;
	int64_t now;

	if (!(pm->flags & RESIL_PERMIT_ADAPTIVE))
		return;
	resil_adaptive_undo(x, c, st, pm);
	if (outcome == RESIL_IGNORED)
		return;
	now = resil_ctx_now(x);
	if (outcome == RESIL_SUCCESS && (pm->flags & RESIL_PERMIT_TIMED)) {
		uint64_t rtt = now > pm->start_ns ? (uint64_t)(now - pm->start_ns) : 0;
		uint64_t mn = ld_relaxed(&s->rtt_min);

		faa_relaxed(&s->rtt_sum, rtt);
		faa_relaxed(&s->rtt_count, 1);
		while (rtt < mn && !cas_relaxed(&s->rtt_min, &mn, rtt))
			;
	} else if (outcome == RESIL_FAILURE) {
		faa_relaxed(&s->drops, 1);
	}
	maybe_decide(x, c, s, now);
}

/* The geometry copies of line 3, from the configuration (observers of
 * dumps read them; nothing addresses memory through them): how many
 * differ. Plain stores, as at init. */
static uint32_t layout_repair(struct resil_adaptive_state *s, const struct resil_adaptive_conf *c)
{
	uint32_t n = resil_adaptive_max(c), bad = 0;

	bad += s->nslots != n;
	bad += s->shift != resil_pool_shift(n);
	bad += s->slots_off != sizeof(*s);
	s->nslots = n;
	s->shift = resil_pool_shift(n);
	s->slots_off = sizeof(*s);
	return bad;
}

bool resil_adaptive_layout_ok(const struct resil_adaptive_conf *c, const void *st)
{
	const struct resil_adaptive_state *s = st;
	uint32_t n = resil_adaptive_max(c);

	return s->nslots == n && s->shift == resil_pool_shift(n) && s->slots_off == sizeof(*s);
}

/*
 * The daemon's checks of the words it acts on or that steer every
 * decision (any client may write any value into them); each bad one is
 * repaired and counted (resil_repaired):
 *   - the geometry copies: rewritten from the configuration;
 *   - phase outside the enum: back to NORMAL at the saved estimate;
 *   - the published limit outside 1..adaptive.max, or the estimate
 *     outside 1..adaptive.max calls: the estimate clamped and published;
 *   - an epoch more than STEAL_WINDOWS windows ahead of the daemon's
 *     clock (no process of the fleet is that far ahead: it would stop
 *     every recomputation): the window restarts now;
 *   - a probe scheduled further ahead than adaptive.probe with its
 *     jitter: scheduled anew.
 * The pool's count is corrected by resil_pool_repair (bulkhead.c).
 */
static void state_repair(struct resil_ctx *x, const struct resil_adaptive_conf *c,
			 struct resil_adaptive_state *s, int64_t now)
{
	uint64_t hi = (uint64_t)resil_adaptive_max(c) * 1000, milli = ld_relaxed(&s->limit_milli);
	uint32_t phase = ld_relaxed(&s->phase), lim = ld_relaxed(&s->limit);
	uint64_t e = ld_acquire(&s->epoch), at = ld_relaxed(&s->probe_at);
	int64_t ahead = (int64_t)((e & ~1ull) - (uint64_t)now);

	if (layout_repair(s, c))
		resil_repaired(x, RESIL_W_ADAPTIVE_LAYOUT);
	if (phase > RESIL_ADAPTIVE_PROBE_MEASURE) {
		milli = ld_relaxed(&s->saved_milli);
		st_relaxed(&s->phase, RESIL_ADAPTIVE_NORMAL);
		lim = 0; /* publish below */
		resil_repaired(x, RESIL_W_ADAPTIVE_PHASE);
	}
	if (milli < 1000 || milli > hi || lim < 1 || lim > hi / 1000) {
		milli = milli < 1000 ? 1000 : milli > hi ? hi : milli;
		st_relaxed(&s->limit_milli, milli);
		publish(s, c,
			phase == RESIL_ADAPTIVE_NORMAL || phase > RESIL_ADAPTIVE_PROBE_MEASURE
			    ? milli
			    : RESIL_ADAPTIVE_PROBE_LIMIT * 1000);
		resil_repaired(x, RESIL_W_ADAPTIVE_LIMIT);
	}
	if (ahead > STEAL_WINDOWS * window_of(c) &&
	    cas_acq_rel(&s->epoch, &e, (uint64_t)(now > 0 ? now : 0) & ~1ull))
		resil_repaired(x, RESIL_W_ADAPTIVE_EPOCH);
	if (at && c->probe_ns > 0 &&
	    (int64_t)(at - (uint64_t)now) > c->probe_ns + c->probe_ns / 4 + window_of(c)) {
		schedule_probe(x, c, s, now);
		resil_repaired(x, RESIL_W_ADAPTIVE_PROBE);
	}
}

void resil_adaptive_maintain(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st)
{
	struct resil_adaptive_state *s = st;
	struct resil_pool p = resil_adaptive_pool(s, c);
	int64_t now = resil_ctx_now(x);

	state_repair(x, c, s, now);
	resil_pool_repair(&p, &s->prev_excess);
	maybe_decide(x, c, s, now);
}

uint32_t resil_adaptive_sweep(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			      resil_stray_fn stray, void *ctx)
{
	struct resil_adaptive_state *s = st;
	struct resil_pool p = resil_adaptive_pool(s, c);
	uint32_t n = resil_pool_sweep(&p, true, stray, ctx);

	if (n)
		faa_relaxed(&s->reclaimed, n);
	return n;
}

void resil_adaptive_holders(const struct resil_adaptive_conf *c, const void *st, resil_holder_fn fn,
			    void *ctx)
{
	struct resil_pool p = resil_adaptive_pool((struct resil_adaptive_state *)st, c);

	resil_pool_holders(&p, fn, ctx);
}

void resil_adaptive_reclaim(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			    uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	struct resil_adaptive_state *s = st;
	struct resil_pool p = resil_adaptive_pool(s, c);
	uint32_t n = resil_pool_reclaim(&p, true, dead_client);

	if (n)
		faa_relaxed(&s->reclaimed, n);
	if (counts)
		counts->permits += n;
}

/* SPDX-License-Identifier: MIT */
/*
 * ctl_info.c - the control protocol's reads of policies: get and list.
 *
 * A PolicyInfo is a policy's head (name, slot, generation, breaker state,
 * owner), and for get its configuration, its origin and its stats: the
 * counters, the limiter's state, the fleet's (policy.scope = global), why
 * it decides as it does now (why_*), who holds its permits and, with a
 * key, that key's state in the keyed limiter. Everything is read from the
 * segments as a snapshot (relaxed or plain loads of words clients write),
 * offsets checked against the mapping first; reading never changes
 * anything (a key looked up is not inserted). fill_info is also what
 * define, declare, revert and force answer with (ctl_policy.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "counts.h"
#include "cluster.h"
#include "owners.h"
#include "limit.h"
#include "policy.h"
#include "breaker.h"
#include "bulkhead.h"
#include "stats.h"
#include "budget.h"

#include "ctl_priv.h"

static void add_stat(struct info *in, size_t *n, const char *name, int64_t value)
{
	if (*n >= STATS_MAX)
		return;
	resil__stat__init(&in->st[*n]);
	snprintf(in->stname[*n], sizeof(in->stname[*n]), "%s", name);
	in->st[*n].name = in->stname[*n];
	in->st[*n].value = value;
	in->stp[*n] = &in->st[*n];
	(*n)++;
}

static void fill_head(struct resild *d, const struct resil_rec *rec, struct info_head *h)
{
	Resil__PolicyInfo *pi = &h->pi;

	resil__policy_info__init(pi);
	pi->name = (char *)rec->name;
	pi->slot = rec->slot;
	pi->generation = rec->gen;
	int s = resil_policy_breaker_state(&d->seg, rec);

	pi->breaker = s < 0 ? RESIL__BREAKER_STATE__BREAKER_NONE : (Resil__BreakerState)(s + 1);
	pi->owner_uid = rec->owner_uid;
	pi->from_file = !!(rec->flags & RESIL_REC_FROM_FILE);
}

/*
 * rec's limiter state, NULL when it has none or its offsets do not lie in
 * the mapped state segment (the daemon wrote them; the check is what
 * resil_stats_state_of does, so a reply never reads outside the mapping).
 * The state's contents are read with relaxed loads: a snapshot, not atomic
 * across counters, like every counter in a reply.
 */
static const void *limit_state_of(struct resild *d, const struct resil_rec *rec)
{
	const struct resil_seg *s = &d->seg;
	uint64_t off, need;

	if (!resil_has(rec, RESIL_C_LIMIT))
		return NULL;
	if (rec->state_off > s->st_size || rec->state_size > s->st_size - rec->state_off)
		return NULL;
	off = rec->comp_off[RESIL_C_LIMIT];
	need = resil_limit_state_size(&rec->conf.limit);
	if (off > rec->state_size || need > rec->state_size - off || (rec->state_off + off) % 8)
		return NULL;
	return resil_seg_state(s, rec->state_off + off);
}

/* A limiter: the calls limit.dry_run admitted instead of rejecting (every
 * limiter), and a keyed one's table, as `resilctl show` prints them. The
 * size is counted in the table (one pass over limit.keys entries: at most
 * 2^24, a few ms, only when asked). */
static void add_limit_stats(struct resild *d, const struct resil_rec *rec, struct info *in,
			    size_t *n)
{
	const struct resil_limit_conf *c = &rec->conf.limit;
	struct resil_limit_info li;
	const void *st = limit_state_of(d, rec);

	if (!st)
		return;
	resil_limit_info(c, st, &li);
	if (c->keys) {
		add_stat(in, n, "limit_keys_used", (int64_t)li.size);
		add_stat(in, n, "limit_keys_capacity", (int64_t)li.capacity);
		add_stat(in, n, "limit_evictions", (int64_t)li.evictions);
		add_stat(in, n, "limit_full_rejected", (int64_t)li.full_rejects);
		add_stat(in, n, "limit_full_admitted", (int64_t)li.full_admits);
		add_stat(in, n, "limit_empty_keys", (int64_t)li.empty_keys);
	}
	add_stat(in, n, "limit_dry_run_rejects", (int64_t)li.dry_run_rejects);
}

/* rec's component comp (size bytes, at least a word) when it lies inside
 * the mapped state segment; the offsets are the daemon's (see
 * limit_state_of). Fleet block only. */
static const void *comp_of(struct resild *d, const struct resil_rec *rec, enum resil_comp comp,
			   uint64_t size)
{
	const struct resil_seg *s = &d->seg;
	uint64_t off = rec->comp_off[comp];

	if (!resil_has(rec, comp))
		return NULL;
	if (rec->state_off > s->st_size || rec->state_size > s->st_size - rec->state_off)
		return NULL;
	if (size < 8)
		size = 8;
	if (off > rec->state_size || size > rec->state_size - off || (rec->state_off + off) % 8)
		return NULL;
	return resil_seg_state(s, rec->state_off + off);
}

/* A CLOCK_MONOTONIC time (the policies' clock) as Unix time in ns, through
 * one reading of each clock: off by the time between the two readings. */
static int64_t mono_to_unix_ns(int64_t mono, int64_t mono_now)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec - (mono_now - mono);
}

/*
 * Why the policy decides as it does now, for `resilctl show` (stats named
 * why_*; a snapshot of words clients write, read with plain loads):
 *   breaker (fleet scope: a process's own breaker is in breaker_pid_N):
 *     why_breaker_state (RESIL_STATE_*), why_since_unix_ns (the state was
 *     entered, to 1 ms), why_next_probe_unix_ns (OPEN: the first call at or
 *     after it probes), why_open_streak, why_window_calls, _failures,
 *     _slow, why_min_calls, why_failure_rate_bp and why_slow_rate_bp (of
 *     the window; HALF_OPEN: of the probes answered) against
 *     why_failure_threshold_bp and why_slow_threshold_bp (10000: slowness
 *     not judged), why_probes_in_flight, why_probes_answered,
 *     why_probes_max;
 *   limiter (unkeyed): why_limit_available (permits that pass at once
 *     now), why_limit_next_ns (until the next one when none does);
 *   bulkhead: why_bulkhead_in_use, why_bulkhead_max, why_bulkhead_waiters;
 *   retry budget: why_budget_tokens_milli.
 */
/* policy.scope = global: the host's lease and the fleet's breaker as this
 * daemon last exchanged them (cluster.c). Fixed point: _milli is x 1000. */
static void add_cluster_stats(struct resild *d, const struct resil_rec *rec, struct info *in,
			      size_t *n)
{
	struct resild_cluster_policy cp;
	struct resild_cluster_info ci;

	if (rec->conf.scope != RESIL_SCOPE_GLOBAL ||
	    resild_cluster_policy_info(d, rec->slot, rec->gen, &cp) < 0 ||
	    resild_cluster_info(d, &ci) < 0)
		return;
	add_stat(in, n, "cluster_connected", ci.connected);
	add_stat(in, n, "cluster_last_exchange_ms",
		 ci.last_exchange_ns < 0 ? -1 : ci.last_exchange_ns / RESIL_NS_PER_MS);
	if (cp.limit) {
		add_stat(in, n, "cluster_share_milli", llround(cp.share * 1000.0));
		add_stat(in, n, "cluster_lease_ms", cp.lease_ns / RESIL_NS_PER_MS);
		add_stat(in, n, "cluster_demand_milli", llround(cp.demand * 1000.0));
		add_stat(in, n, "cluster_hosts", cp.hosts);
	}
	if (cp.bulkhead) {
		add_stat(in, n, "cluster_slots", cp.slots);
		add_stat(in, n, "cluster_slots_max", cp.max);
		add_stat(in, n, "cluster_slots_parked", cp.parked);
		add_stat(in, n, "cluster_slots_lease_ms", cp.slots_lease_ns / RESIL_NS_PER_MS);
		add_stat(in, n, "cluster_slots_hosts", cp.slots_hosts);
	}
	if (cp.breaker) {
		add_stat(in, n, "cluster_fleet", cp.fleet);
		add_stat(in, n, "cluster_fleet_open", (int64_t)cp.fleet_open);
		add_stat(in, n, "cluster_fleet_calls", cp.fleet_calls);
	}
	if (cp.keyed) {
		add_stat(in, n, "cluster_keyed_charged", (int64_t)cp.keyed_charged);
		add_stat(in, n, "cluster_keyed_owing", (int64_t)cp.keyed_owing);
	}
	add_stat(in, n, "cluster_conflicts", cp.conflicts);
	add_stat(in, n, "cluster_script_errors", (int64_t)cp.errors);
	add_stat(in, n, "cluster_failing", cp.error[0] != '\0');
}

static void add_why_stats(struct resild *d, const struct resil_rec *rec, struct info *in, size_t *n)
{
	const struct resil_conf *c = &rec->conf;
	int64_t now = resil_clock_monotonic(NULL);
	const void *cs;

	cs = comp_of(d, rec, RESIL_C_BREAKER, resil_breaker_state_size(&c->breaker));
	if (cs && c->breaker.on && !rec->proc_stride) {
		struct resil_breaker_info bi;

		resil_breaker_info(&c->breaker, cs, now, &bi);
		add_stat(in, n, "why_breaker_state", bi.state);
		add_stat(in, n, "why_since_unix_ns", mono_to_unix_ns(bi.since_ns, now));
		if (bi.state == RESIL_STATE_OPEN) {
			add_stat(in, n, "why_next_probe_unix_ns",
				 mono_to_unix_ns(bi.since_ns + bi.wait_ns, now));
			add_stat(in, n, "why_open_streak", bi.streak);
		}
		add_stat(in, n, "why_window_calls", bi.calls);
		add_stat(in, n, "why_window_failures", bi.failures);
		add_stat(in, n, "why_window_slow", bi.slow);
		add_stat(in, n, "why_min_calls", bi.min_calls);
		if (c->breaker.window_kind != RESIL_WINDOW_CONSECUTIVE ||
		    bi.state == RESIL_STATE_HALF_OPEN) {
			add_stat(in, n, "why_failure_rate_bp",
				 bi.calls > 0 ? bi.failures * 10000 / bi.calls : 0);
			add_stat(in, n, "why_slow_rate_bp",
				 bi.calls > 0 ? bi.slow * 10000 / bi.calls : 0);
			add_stat(in, n, "why_failure_threshold_bp", c->breaker.failure_rate_bp);
			add_stat(in, n, "why_slow_threshold_bp", c->breaker.slow_rate_bp);
		}
		if (bi.state == RESIL_STATE_HALF_OPEN) {
			add_stat(in, n, "why_probes_in_flight", bi.probes_held);
			add_stat(in, n, "why_probes_answered", bi.calls);
			add_stat(in, n, "why_probes_max", bi.probes_max);
		}
	}
	cs = limit_state_of(d, rec);
	if (cs && c->limit.on && !c->limit.keys && !rec->proc_stride) {
		struct resil_ctx x = {.seg = &d->seg, .rec = rec, .pid = (uint32_t)getpid()};
		int64_t v = 0, wait = 0, avail = 0;

		if (resil_limit_key_info(&x, &c->limit, cs, NULL, 0, &v, &wait) == 0) {
			switch (resil_limit_algo(&c->limit)) {
			case RESIL_LIMIT_GCRA: {
				/* n pass while max(tat, now) + n T - tau <= now */
				int64_t t = c->limit.interval_ns, lag = v > now ? v - now : 0;
				int64_t tau = t * (int64_t)(c->limit.burst ? c->limit.burst : 1);

				avail = t > 0 && tau > lag ? (tau - lag) / t : 0;
				break;
			}
			default: /* sliding: admissions in the period; approx: weighted */
				avail = (int64_t)c->limit.count - v;
				break;
			}
			add_stat(in, n, "why_limit_available", avail < 0 ? 0 : avail);
			add_stat(in, n, "why_limit_next_ns", avail > 0 ? 0 : wait);
		}
	}
	cs = comp_of(d, rec, RESIL_C_BULKHEAD, resil_bulkhead_state_size(&c->bulkhead));
	if (cs && c->bulkhead.on && !rec->proc_stride) {
		const struct resil_bulkhead_state *b = cs;

		add_stat(in, n, "why_bulkhead_in_use", resil_bulkhead_held(&c->bulkhead, cs));
		add_stat(in, n, "why_bulkhead_max", c->bulkhead.max);
		add_stat(in, n, "why_bulkhead_waiters",
			 c->bulkhead.wait_ns ? ld_relaxed(&b->nwait) : 0);
	}
	cs = comp_of(d, rec, RESIL_C_BUDGET, sizeof(struct resil_budget_state));
	if (cs && resil_budget_has_state(&c->retry))
		add_stat(in, n, "why_budget_tokens_milli",
			 resil_budget_tokens_milli(cs, &c->retry, now));
}

/* Who holds the permits of rec (bulkhead and adaptive, fleet block). */
struct holders {
	uint32_t held, unregistered, others;
	uint32_t n;
	uint32_t id[HOLDERS_MAX], count[HOLDERS_MAX];
};

static void count_holder(uint32_t id, void *ctx)
{
	struct holders *h = ctx;
	uint32_t i;

	h->held++;
	if (id >= RESIL_CLIENT_PID_TAG)
		h->unregistered++; /* a process without a row: its pid tag */
	for (i = 0; i < h->n && h->id[i] != id; i++)
		;
	if (i == h->n) {
		if (h->n == HOLDERS_MAX) {
			h->others++;
			return;
		}
		h->id[h->n] = id;
		h->count[h->n++] = 0;
	}
	h->count[i]++;
}

/* permits_held, permits_unregistered, and one stat per holder:
 * "held_row_R_pid_P" (P: our pid for the row's process, the row's owner
 * word when we did not identify it, 0 for a free row: a stray claim the
 * next sweep frees), "forged_row_R" (claims under row R's id beyond what
 * its process's count table says it holds: nobody's, the next tick frees
 * them), "held_norow_pid_P" (a process without a row, by the
 * pid its claims carry), "held_by_nobody" (an id that names no one: the
 * next sweep frees it). */
static void add_holder_stats(struct resild *d, const struct resil_rec *rec, struct info *in,
			     size_t *n)
{
	struct holders h = {0};
	char nm[32];

	if (!resil_has(rec, RESIL_C_BULKHEAD) && !resil_has(rec, RESIL_C_ADAPTIVE))
		return;
	resil_policy_holders(&d->seg, rec, count_holder, &h);
	add_stat(in, n, "permits_held", h.held);
	add_stat(in, n, "permits_unregistered", h.unregistered);
	for (uint32_t i = 0; i < h.n; i++) {
		int row = resil_client_row_of(h.id[i], d->seg.geo.client_cap);
		uint64_t bound;
		uint32_t pid = row >= 0 ? resild_clients_pid_of(d, (uint32_t)row) : 0;

		if (row >= 0 && !pid)
			pid = (uint32_t)(ld_relaxed(
					     &resil_seg_client(&d->seg, (uint32_t)row)->owner) >>
					 32);
		if (row >= 0 && resild_counts_bound(d, (uint32_t)row, rec->slot, &bound) &&
		    h.count[i] > bound) {
			/* claims under its id beyond what its process holds:
			 * not its (counts.c), the next tick frees them */
			snprintf(nm, sizeof(nm), "forged_row_%d", row);
			add_stat(in, n, nm, h.count[i] - bound);
			h.count[i] = (uint32_t)bound;
		}
		if (row >= 0)
			snprintf(nm, sizeof(nm), "held_row_%d_pid_%u", row, pid);
		else if (h.id[i] >= RESIL_CLIENT_PID_TAG &&
			 h.id[i] - RESIL_CLIENT_PID_TAG < RESIL_CLIENT_PID_MAX)
			snprintf(nm, sizeof(nm), "held_norow_pid_%u",
				 h.id[i] - RESIL_CLIENT_PID_TAG);
		else
			snprintf(nm, sizeof(nm), "held_by_nobody");
		add_stat(in, n, nm, h.count[i]);
	}
	if (h.others)
		add_stat(in, n, "held_by_other_rows", h.others);
}

void fill_info(struct resild *d, const struct resil_rec *rec, struct info *in)
{
	Resil__PolicyInfo *pi = &in->h.pi;

	fill_head(d, rec, &in->h);
	in->config[0] = '\0';
	resil_conf_format(&rec->conf, in->config, sizeof(in->config));
	pi->config = in->config;
	resild_owners_origin(d, rec, &in->origin);
	pi->origin = &in->origin.o;
	/* the counters the state has, summed over stripes */
	{
		const void *st = resil_stats_state_of(&d->seg, rec);
		uint64_t v[RESIL_STAT__MAX];
		static const double qs[] = {0.5, 0.95, 0.99};
		static const char *qn[] = {"p50_ns", "p95_ns", "p99_ns"};
		size_t n = 0;

		if (!st)
			return;
		resil_stats_read_all(st, v);
		add_stat(in, &n, "calls", (int64_t)resil_stats_calls(v));
		for (int i = 0; i < RESIL_STAT__MAX; i++)
			if (resil_stat_name((enum resil_stat)i))
				add_stat(in, &n, resil_stat_name((enum resil_stat)i),
					 (int64_t)v[i]);
		for (size_t i = 0; i < RESIL_ARRAY_SIZE(qs); i++) {
			int64_t ns;

			if (resil_stats_percentile_ns(st, &rec->conf, qs[i], &ns) == 0)
				add_stat(in, &n, qn[i], ns);
		}
		add_limit_stats(d, rec, in, &n);
		add_holder_stats(d, rec, in, &n);
		add_why_stats(d, rec, in, &n);
		add_cluster_stats(d, rec, in, &n);
		/* give-ups by reason (RESIL_RSTOP_* of budget.h) */
		{
			static const char *const why[] = {
			    [RESIL_RSTOP_NOT_RETRIED] = "giveups_not_retried",
			    [RESIL_RSTOP_ATTEMPTS] = "giveups_attempts",
			    [RESIL_RSTOP_DEADLINE] = "giveups_deadline",
			    [RESIL_RSTOP_BUDGET] = "giveups_budget",
			    [RESIL_RSTOP_GONE] = "giveups_deleted",
			    [RESIL_RSTOP_REJECTED] = "giveups_rejected",
			};
			for (size_t i = 0; i < RESIL_ARRAY_SIZE(why); i++)
				if (why[i])
					add_stat(in, &n, why[i],
						 (int64_t)resil_stats_giveups_by(st, (unsigned)i));
		}
		/* policy.scope = process: each live process's breaker, side by
		 * side ("breaker_pid_1234 = 1" is OPEN, as RESIL_STATE_*) */
		for (uint32_t i = 0; rec->proc_stride && i < d->seg.geo.client_cap; i++) {
			uint64_t owner = ld_relaxed(&resil_seg_client(&d->seg, i)->owner);
			int bs = resil_policy_breaker_state_of(&d->seg, rec, i + 1);
			char nm[32];

			if (!owner || bs < 0)
				continue;
			snprintf(nm, sizeof(nm), "breaker_pid_%u", (unsigned)(owner >> 32));
			add_stat(in, &n, nm, bs);
		}
		pi->n_stats = n;
		pi->stats = in->stp;
	}
}

/*
 * get NAME with a key: that key's state in the keyed limiter, appended to
 * the policy's stats. key_present 1 with key_tat_ns (gcra: the key's TAT,
 * CLOCK_MONOTONIC ns) or key_count (sliding-approx: the weighted count in
 * the window) and key_wait_ns (the Retry-After the key would get now, 0:
 * a permit passes now); key_present 0 and key_wait_ns 0 for a key the
 * table does not hold (a fresh key: its first call starts from idle).
 * Read-only: looking a key up never inserts it. Judged on the daemon's
 * clock (CLOCK_MONOTONIC; clients on the coarse clock lag it by less than
 * its resolution).
 */
static int add_key_stats(struct resild *d, const struct resil_rec *rec, const Resil__Get *g,
			 const void *st, struct reply *rp, struct info *in)
{
	const struct resil_limit_conf *c = &rec->conf.limit;
	struct resil_ctx x = {.seg = &d->seg, .rec = rec, .pid = (uint32_t)getpid()};
	/* an empty key is a key (the library hashes zero bytes too) */
	const void *key = g->key.len ? (const void *)g->key.data : "";
	size_t n = in->h.pi.n_stats;
	int64_t v = 0, wait = 0;
	int r;

	r = resil_limit_key_info(&x, c, st, key, g->key.len, &v, &wait);
	if (r < 0 && r != -ENOENT)
		return reply_error(rp, r, "policy %s: cannot read the key: %s", rec->name,
				   strerror(-r));
	add_stat(in, &n, "key_present", r == 0);
	if (r == 0)
		add_stat(in, &n,
			 resil_limit_algo(c) == RESIL_LIMIT_GCRA ? "key_tat_ns" : "key_count", v);
	add_stat(in, &n, "key_wait_ns", r == 0 ? wait : 0);
	in->h.pi.n_stats = n;
	in->h.pi.stats = in->stp;
	return 0;
}

int handle_get(struct resild *d, const Resil__Get *g, struct reply *rp, struct info *in)
{
	const struct resil_rec *rec = find_or_fail(d, g->name, rp);
	const void *lst = NULL;
	int r;

	if (!rec)
		return -ENOENT;
	if (g->has_key) {
		lst = limit_state_of(d, rec);
		if (!lst || !rec->conf.limit.keys)
			return reply_error(
			    rp, -ENODATA, "policy %s has no keyed limiter (limit.keys)", rec->name);
	}
	fill_info(d, rec, in);
	if (g->has_key) {
		r = add_key_stats(d, rec, g, lst, rp, in);
		if (r < 0)
			return r;
	}
	rp->resp.body_case = RESIL__RESPONSE__BODY_POLICY;
	rp->resp.policy = &in->h.pi;
	return 0;
}

struct list_ctx {
	const char *after;
	uint32_t n, cap;
	const struct resil_rec **recs;
};

static int list_collect(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			void *ctx)
{
	struct list_ctx *l = ctx;

	if (l->after && strcmp(rec->name, l->after) <= 0)
		return 0;
	if (l->n < l->cap)
		l->recs[l->n++] = rec;
	return 0;
}

static int rec_cmp(const void *a, const void *b)
{
	const struct resil_rec *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

int handle_list(struct resild *d, const Resil__List *l, struct reply *rp, Resil__ListReply *lr,
		void **to_free)
{
	struct list_ctx lc = {0};
	uint32_t limit = l->limit ? l->limit : RESILD_LIST_MAX;
	Resil__PolicyInfo **pp;
	struct info_head *infos;
	size_t total = 64;

	if (limit > RESILD_LIST_MAX)
		limit = RESILD_LIST_MAX;
	lc.after = l->after && l->after[0] ? l->after : NULL;
	lc.cap = d->seg.cfg->slot_cap;
	lc.recs = calloc(lc.cap ? lc.cap : 1, sizeof(*lc.recs));
	if (!lc.recs)
		return reply_error(rp, -ENOMEM, "out of memory");
	resil_seg_foreach(&d->seg, list_collect, &lc);
	qsort(lc.recs, lc.n, sizeof(*lc.recs), rec_cmp);

	infos = calloc(limit, sizeof(*infos));
	pp = calloc(limit, sizeof(*pp));
	to_free[0] = lc.recs;
	to_free[1] = infos;
	to_free[2] = pp;
	if (!infos || !pp)
		return reply_error(rp, -ENOMEM, "out of memory");
	lr->policies = pp;
	for (uint32_t i = 0; i < lc.n; i++) {
		size_t sz;

		if (i == limit) {
			lr->more = true;
			break;
		}
		fill_head(d, lc.recs[i], &infos[i]);
		sz = resil__policy_info__get_packed_size(&infos[i].pi) + 8;
		if (total + sz > RESILD_MSG_MAX - 256) {
			lr->more = true;
			break;
		}
		total += sz;
		pp[lr->n_policies++] = &infos[i].pi;
	}
	rp->resp.body_case = RESIL__RESPONSE__BODY_LIST;
	rp->resp.list = lr;
	return 0;
}

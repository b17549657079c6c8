/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - policy.scope = global across hosts, through Redis: the
 * daemon's side of it (settings, the loop's tick, what status and metrics
 * say). The parts, each with its design at its top:
 *   cluster_conn.c     where Redis is and the connection (URL, TLS relay,
 *                      Sentinel, AUTH, the scripts loaded, errors);
 *   cluster_rc.c       Redis Cluster's redirections, the exchange round
 *                      and the thread that runs it;
 *   cluster_lease.c    global limiters: leases, their length, the fallback;
 *   cluster_breaker.c  global breakers and the fleet's half-open;
 *   cluster_bulkhead.c, cluster_budget.c, cluster_keyed.c, cluster_host.c
 *                      bulkheads, retry budgets and configurations, keyed
 *                      limiters, the hosts' identity.
 *
 * What. A global GCRA limiter allows `limit.rate` to the whole fleet of
 * hosts. Each daemon leases its host a share of it: every cluster
 * interval it reports the host's demand (calls that reached the limiter,
 * admitted or rejected, per second over the last interval) and receives a
 * share from one atomic Lua script per policy (cluster_lease.c), which it
 * writes into the limiter's lease words (shm/limit.c: the hot path reads
 * them; nothing else changes for a decision). Breakers, bulkheads, retry
 * budgets and keyed limiters ride in the same round.
 *
 * Why a thread of its own. hiredis speaks blocking or through an event
 * library; the loop is io_uring, and an adapter for it (poll SQEs, partial
 * replies, reconnects in the loop's state machine) would put the slowest
 * and least trusted peer of the daemon inside the loop that serves
 * clients and reclaims their holdings. The thread talks to Redis with the
 * plain blocking API under socket timeouts; the loop never waits on it.
 * They meet in `struct xchg` under a mutex held only to copy a few words
 * per policy: each tick the loop (1) applies the answers the thread left,
 * then (2) leaves its requests (name, generation, rate, demand, the lease
 * it has applied) and signals the thread, which runs one exchange: one
 * pipelined round trip with one script call per global policy, then
 * writes an eventfd the loop reads: the loop applies the answers at once
 * (a tick that posts nothing), not a whole tick later. The thread
 * never touches the segments (a policy deleted meanwhile could have its
 * space reused); the loop checks the slot's generation before it writes an
 * answer into a state block.
 *
 * The interval. Requests are posted at the loop's tick (100 ms) once
 * --cluster-interval has passed since the last post: an interval below the
 * tick runs at the tick. Between posts, early lease calls (cluster_lease.c,
 * "Early calls") bring a host's new demand to Redis, and the smaller share
 * that makes room for it back, within a fraction of an interval: the
 * thread wakes the loop every interval / SAMPLES to sample global
 * limiters.
 *
 * Who writes what. The requests and answers (req, ereq, ans, the kicks):
 * both threads, under c->lock. struct cl_slot and every word this file
 * writes into the segments: the loop only.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

#include "breaker.h"
#include "bulkhead.h"
#include "cluster.h"
#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "cluster_priv.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
#include "policy.h"
#include "resil.h"
#include "resild.h"
#include "segmove.h"
#include "stats.h"

int resild_cluster_parse_fallback(const char *s, int *ret)
{
	int v = resil_fallback_parse(s);

	if (v < 0)
		return v;
	*ret = v;
	return 0;
}

/* -------------------------------------------------------------- loop */

int resild_cluster_init(struct resild *d)
{
	struct resild_cluster *c;
	const struct resild_opts *o = &d->opts;
	char mid[HOST_MAX];
	pthread_condattr_t ca;
	int r;

	if (!o->cluster_redis)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return log_error_errno(-ENOMEM, "cluster: out of memory");
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->cluster = c;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0)
		return log_error_errno(-errno, "cluster: eventfd: %m");
	snprintf(c->url, sizeof(c->url), "%s", o->cluster_redis);
	r = cl_parse_url(c, o->cluster_redis);
	if (r < 0)
		return r;
	c->interval_ns =
	    o->cluster_interval_ns ? o->cluster_interval_ns : RESILD_CLUSTER_INTERVAL_NS;
	c->fallback = o->cluster_fallback;
	c->hosts_expected = o->cluster_hosts;
	c->fallback_for_ns = o->cluster_fallback_for_ns ? o->cluster_fallback_for_ns
							: RESILD_CLUSTER_FALLBACK_FOR_NS;
	if (c->fallback_for_ns < 2 * lease_ns(c)) {
		log_notice("cluster: --cluster-fallback-for raised to %lld ms: two leases of "
			   "--cluster-interval %lld ms",
			   (long long)(2 * lease_ns(c) / RESIL_NS_PER_MS),
			   (long long)(c->interval_ns / RESIL_NS_PER_MS));
		c->fallback_for_ns = 2 * lease_ns(c);
	}
	if (strlen(o->cluster_name ? o->cluster_name : "resil") >= sizeof(c->prefix))
		return log_error_errno(-EINVAL, "--cluster-name: at most %d bytes",
				       RESIL_NAME_MAX - 1);
	snprintf(c->prefix, sizeof(c->prefix), "%s", o->cluster_name ? o->cluster_name : "resil");
	if (o->cluster_host) {
		if (!*o->cluster_host || strlen(o->cluster_host) >= sizeof(c->host))
			return log_error_errno(-EINVAL, "--cluster-host: 1 to %d bytes",
					       HOST_MAX - 1);
		snprintf(c->host, sizeof(c->host), "%s", o->cluster_host);
	} else {
		r = cl_read_line_file("/etc/machine-id", mid, sizeof(mid),
				      "cluster host id (--cluster-host):");
		if (r < 0)
			return r;
		snprintf(c->host, sizeof(c->host), "%s", mid);
	}
	cl_ident_init(c, d->seg.cfg->run ? d->seg.cfg->run : d->seg.cfg->epoch);
	if (o->cluster_tls_ca || o->cluster_tls_cert || o->cluster_tls_server_name)
		c->tls = true;
	if (c->tls && c->unix_sock)
		return log_error_errno(-EINVAL, "--cluster-tls-*: not over a unix socket");
	if (c->tls && (r = cl_tls_init(c, o)) < 0)
		return r;
	if (o->cluster_password_file) {
		r = cl_read_line_file(o->cluster_password_file, c->password, sizeof(c->password),
				      "--cluster-password-file");
		if (r < 0)
			return r;
		c->have_password = true;
	}
	c->cap = d->seg.cfg->slot_cap;
	c->slots = calloc(c->cap, sizeof(*c->slots));
	c->req = calloc(c->cap, sizeof(*c->req));
	c->ereq = calloc(c->cap, sizeof(*c->ereq));
	c->ans = calloc(c->cap, sizeof(*c->ans));
	c->work = calloc(c->cap, sizeof(*c->work));
	c->ck_thr = calloc(c->cap, sizeof(*c->ck_thr));
	c->perr = calloc(c->cap, sizeof(*c->perr));
	if (!c->slots || !c->req || !c->ereq || !c->ans || !c->work || !c->ck_thr || !c->perr)
		return log_error_errno(-ENOMEM, "cluster: out of memory");
	r = -pthread_create(&c->thread, NULL, cluster_main, c);
	if (r < 0)
		return log_error_errno(r, "cluster: cannot start the exchange thread: %m");
	c->started = true;
	/* the fallback's words of the policies the files define, before the
	 * loop serves their first client */
	resild_cluster_woken(d);
	return 0;
}

void resild_cluster_fini(struct resild *d)
{
	struct resild_cluster *c = d->cluster;

	if (!c)
		return;
	if (c->started) {
		pthread_mutex_lock(&c->lock);
		c->stop = true;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	if (c->efd >= 0)
		close(c->efd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	for (uint32_t i = 0; c->slots && i < c->cap; i++)
		resild_ck_slot_fini(&c->slots[i].ck);
	for (uint32_t i = 0; c->req && c->ans && c->work && i < c->cap; i++) {
		resild_ck_free_req(&c->req[i].ck);
		resild_ck_free_req(&c->work[i].ck);
		resild_ck_free_ans(&c->ans[i].ck);
	}
	free(c->slots);
	free(c->req);
	free(c->ereq);
	free(c->ans);
	free(c->work);
	free(c->ck_thr);
	free(c->perr);
	free(c->pend);
	explicit_bzero(c->password, sizeof(c->password));
	if (c->ssl)
		SSL_CTX_free(c->ssl); /* the sessions of relays still closing hold a reference */
	free(c);
	d->cluster = NULL;
}

static int tick_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *arg)
{
	struct tick_ctx *t = arg;
	struct resild_cluster *c = t->c;
	struct cl_slot *cs = &c->slots[slot];
	struct xreq q = {.active = true, .gen = rec->gen};
	bool lim, bk, bud, bh, keyed;
	struct xans a;

	if (slot >= c->cap || rec->conf.scope != RESIL_SCOPE_GLOBAL)
		return 0;
	keyed = resild_ck_wants(rec);
	lim = resil_has(rec, RESIL_C_LIMIT) && !rec->conf.limit.keys;
	bk = resil_has(rec, RESIL_C_BREAKER) && rec->conf.breaker.window_kind == RESIL_WINDOW_TIME;
	bud = resild_cb_wants_budget(rec);
	bh = resild_cbh_wants(rec);
	if (!lim && !bk && !bud && !bh && !keyed)
		return 0;
	if (!cs->active || cs->gen != rec->gen) {
		resild_ck_slot_fini(&cs->ck);
		memset(cs, 0, sizeof(*cs));
		cs->active = true;
		cs->gen = rec->gen;
		cs->fb_tier = -1; /* none said yet */
		cs->bh.fb_tier = -1;
		pthread_mutex_lock(&c->lock);
		memset(&c->perr[slot], 0, sizeof(c->perr[slot]));
		pthread_mutex_unlock(&c->lock);
	}
	/* the answer of the last exchange, if it is for this policy */
	pthread_mutex_lock(&c->lock);
	a = c->ans[slot];
	c->ans[slot].fresh = false;
	c->ans[slot].bk_fresh = false;
	c->ans[slot].cb.fresh = false;
	c->ans[slot].cb.conf_fresh = false;
	c->ans[slot].bh.fresh = false;
	c->ans[slot].ck.fresh = false;
	c->ans[slot].ck.blob = NULL; /* the loop's now */
	c->ans[slot].ck.len = 0;
	pthread_mutex_unlock(&c->lock);
	t->early = t->grant = false;
	if (lim)
		cl_tick_limit(t, s, rec, cs, &a, &q);
	if (bk)
		cl_tick_breaker(t, s, rec, cs, &a, &q);
	if (a.gen != rec->gen) {
		memset(&a.cb, 0, sizeof(a.cb));
		memset(&a.bh, 0, sizeof(a.bh));
	}
	if (bh)
		resild_cbh_tick(c, s, rec, &cs->bh, &a.bh, &q.bh, t->now, &t->fleet_seen,
				resild_seg_move_held(t->d, rec), t->post);
	if ((!lim || cs->in_lease) && (!bh || cs->bh.in_lease))
		cs->ranout_said = false;
	{
		struct resild_cb_env e = {.now = t->now,
					  .interval_ns = c->interval_ns,
					  .lease_ns = lease_ns(c),
					  .hold_ns = hold_ns(c),
					  .fallback_for_ns = c->fallback_for_ns,
					  .fallback = c->fallback,
					  .hosts = t->hosts_known,
					  .strict = c->hosts_expected > 0,
					  .post = t->post};

		resild_cb_tick(s, rec, &cs->cb, &a.cb, &q.cb, &e);
	}
	if (a.gen != rec->gen)
		resild_ck_free_ans(&a.ck);
	if (keyed)
		resild_ck_tick(s, rec, &cs->ck, &a.ck, &q.ck, t->now, c->interval_ns, lease_ns(c),
			       t->post);
	resild_ck_free_ans(&a.ck);
	if (t->early && !t->post) {
		snprintf(q.name, sizeof(q.name), "%s", rec->name);
		pthread_mutex_lock(&c->lock);
		c->ereq[slot] = q;
		/* an early call is a lease only: the keys' records stay with
		 * the regular request */
		memset(&c->ereq[slot].ck, 0, sizeof(c->ereq[slot].ck));
		c->kick_early = true;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	if (!t->post)
		return 0;
	snprintf(q.name, sizeof(q.name), "%s", rec->name);
	pthread_mutex_lock(&c->lock);
	/* admissions of a request the thread has not taken yet go with this one */
	if (c->req[slot].gen == q.gen)
		resild_ck_keep_req(&q.ck, &c->req[slot].ck);
	resild_ck_free_req(&c->req[slot].ck);
	c->req[slot] = q;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void cluster_tick(struct resild *d, bool may_post)
{
	struct resild_cluster *c = d->cluster;
	struct tick_ctx t = {.d = d, .c = c, .now = mono_ns()};

	if (!c)
		return;
	t.post = may_post && t.now - c->last_post_ns >= c->interval_ns - c->interval_ns / 4;
	pthread_mutex_lock(&c->lock);
	c->loop_connected = c->connected;
	t.hosts_known = c->hosts_expected		 ? c->hosts_expected
			: c->hosts_live > c->fleet_known ? c->hosts_live
							 : c->fleet_known;
	if (t.post) {
		c->last_post_ns = t.now;
		for (uint32_t i = 0; i < c->cap; i++)
			c->req[i].active = false;
	}
	pthread_mutex_unlock(&c->lock);
	resil_seg_foreach(&d->seg, tick_one, &t);
	c->fleet_known = t.fleet_seen;
	for (uint32_t i = 0; i < c->cap; i++) {
		if (!c->slots[i].active)
			continue;
		uint64_t w = ld_relaxed(&resil_seg_slots(&d->seg)[i]);
		const struct resil_rec *rec = resil_seg_rec_of(&d->seg, w);

		if (!rec || rec->gen != c->slots[i].gen || rec->conf.scope != RESIL_SCOPE_GLOBAL) {
			c->slots[i].active = false;
			resild_ck_slot_fini(&c->slots[i].ck);
		}
	}
	pthread_mutex_lock(&c->lock);
	if (c->sampling != t.limiters) {
		c->sampling = t.limiters;
		pthread_cond_signal(&c->cond);
	}
	if (t.post) {
		c->kick = true;
		pthread_cond_signal(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

void resild_cluster_tick(struct resild *d)
{
	cluster_tick(d, true);
}

int resild_cluster_wake_fd(const struct resild *d)
{
	return d->cluster ? d->cluster->efd : -1;
}

void resild_cluster_woken(struct resild *d)
{
	cluster_tick(d, false);
}

/* A family of one sample without labels. */
static void cl_one(struct resil_msink *k, const char *name, const char *help, enum resil_mtype type,
		   struct resil_mvalue v)
{
	k->family(k, name, help, type);
	k->sample(k, name, "", NULL, 0, v);
}

static void fallback_metrics(const struct resild_cluster *c, int tier, double share, double kept,
			     const char *name, const char *comp, struct resil_msink *k)
{
	struct resil_mlabel l[2] = {{"policy", name}, {"component", comp}};

	k->sample(k, "resil_cluster_fallback_rejecting", "", l, 2,
		  resil_mv_uint(tier == FB_NONE && c->fallback == RESILD_FALLBACK_SHARE));
	k->sample(k, "resil_cluster_fallback_share", "", l, 2, resil_mv_real(share, 3));
	k->sample(k, "resil_cluster_fallback_kept", "", l, 2, resil_mv_real(kept, 3));
}

void resild_cluster_metrics(struct resild *d, struct resil_msink *k)
{
	struct resild_cluster *c = d->cluster;
	int64_t now = mono_ns(), last_ok;
	uint64_t calls, errors, exchanges;
	uint32_t dup, live;
	int64_t rtt;
	bool connected, too;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	connected = c->connected;
	last_ok = c->last_ok_ns;
	calls = c->script_calls;
	errors = c->errors;
	exchanges = c->exchanges;
	dup = c->dup_runs;
	live = c->hosts_live;
	rtt = c->rtt_ns;
	too = c->rtt_too_long;
	pthread_mutex_unlock(&c->lock);
	cl_one(k, "resil_cluster_connected", "1 when the exchange with Redis works.",
	       RESIL_MT_GAUGE, resil_mv_uint(connected ? 1 : 0));
	cl_one(k, "resil_cluster_last_exchange_age_seconds",
	       "Since the last exchange that answered every global policy (-1: never).",
	       RESIL_MT_GAUGE, resil_mv_real(last_ok ? (double)(now - last_ok) / 1e9 : -1.0, 3));
	cl_one(k, "resil_cluster_exchanges_total", "Rounds with Redis.", RESIL_MT_COUNTER,
	       resil_mv_uint(exchanges));
	cl_one(k, "resil_cluster_script_calls_total", "Lease script calls answered.",
	       RESIL_MT_COUNTER, resil_mv_uint(calls));
	cl_one(k, "resil_cluster_errors_total", "Failed connections and exchanges.",
	       RESIL_MT_COUNTER, resil_mv_uint(errors));
	k->family(k, "resil_cluster_script_errors_total",
		  "Script calls that failed or answered garbage for one policy (the others "
		  "untouched).",
		  RESIL_MT_COUNTER);
	cl_one(k, "resil_cluster_duplicate_runs",
	       "Other daemons running now under this host id (--cluster-host): each counts as a "
	       "host of its own.",
	       RESIL_MT_GAUGE, resil_mv_uint(dup));
	cl_one(k, "resil_cluster_hosts_live", "Daemons of the fleet that reported lately.",
	       RESIL_MT_GAUGE, resil_mv_uint(live));
	cl_one(k, "resil_cluster_round_trip_seconds",
	       "The longest round trip to Redis of the last rounds (it sizes the leases).",
	       RESIL_MT_GAUGE, resil_mv_real((double)rtt / 1e9, 3));
	cl_one(k, "resil_cluster_lease_length_seconds", "How long a lease lasts now.",
	       RESIL_MT_GAUGE, resil_mv_real((double)lease_ns(c) / 1e9, 3));
	cl_one(k, "resil_cluster_round_trip_too_long",
	       "1 when leases cannot cover the round trip within --cluster-fallback-for.",
	       RESIL_MT_GAUGE, resil_mv_uint(too));
	cl_one(k, "resil_cluster_lease_expiries_connected_total",
	       "Leases that ran out unrenewed while connected to Redis.", RESIL_MT_COUNTER,
	       resil_mv_uint(c->expired_connected));
	k->family(k, "resil_cluster_share", "Requests per second leased to this host.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_lease_seconds",
		  "Until the lease expires (<= 0: expired, clients fall back).", RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_demand", "Calls per second reaching the limiter here.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_hosts", "Hosts present in the policy's last lease.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_early_calls_total",
		  "Lease calls between intervals (a demand rise, an acknowledgement).",
		  RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_fallbacks_total", "Leases that expired unrenewed.",
		  RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_fallback_rejecting",
		  "1 when the policy's clients would reject past their lease: no exchange with "
		  "Redis, and no fleet size known (--cluster-hosts) or nothing the fleet keeps "
		  "for this host.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_fallback_share",
		  "What the clients fall back on past their lease, per second (bulkhead: "
		  "slots).",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_fallback_kept",
		  "What the fleet keeps for this host past --cluster-fallback-for without "
		  "--cluster-hosts (rate / N per second, bulkhead: max / N slots), as its last "
		  "answered report said; 0: its clients reject then.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_breaker_opens_total",
		  "Fleet-wide opens that opened the breaker here.", RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_breaker_fleet_calls", "Calls in the fleet's time window.",
		  RESIL_MT_GAUGE);
	resild_cb_metrics_help(k);
	resild_ck_metrics_help(k);
	resild_cbh_metrics_help(k);
	for (uint32_t i = 0; i < c->cap; i++) {
		const struct cl_slot *cs = &c->slots[i];
		uint64_t sw = ld_relaxed(&resil_seg_slots(&d->seg)[i]);
		const struct resil_rec *rec = resil_seg_rec_of(&d->seg, sw);
		char name[RESIL_NAME_MAX + 1];
		struct resil_mlabel l = {"policy", name};
		uint64_t perrs;

		if (!cs->active || !rec || rec->gen != cs->gen)
			continue;
		/* the name as it is (the text sink escapes it) */
		memcpy(name, rec->name, RESIL_NAME_MAX);
		name[RESIL_NAME_MAX] = '\0';
		pthread_mutex_lock(&c->lock);
		perrs = c->perr[i].count;
		pthread_mutex_unlock(&c->lock);
		k->sample(k, "resil_cluster_script_errors_total", "", &l, 1, resil_mv_uint(perrs));
		resild_cb_metrics(rec, &cs->cb, name, k);
		if (resild_cbh_wants(rec)) {
			resild_cbh_metrics(&cs->bh, name, now, k);
			fallback_metrics(c, cs->bh.fb_tier, (double)cs->bh.fb_slots,
					 (double)cs->bh.kept, name, "bulkhead", k);
		}
		if (rec->conf.breaker.on) {
			k->sample(k, "resil_cluster_breaker_opens_total", "", &l, 1,
				  resil_mv_uint(cs->bk_trips));
			k->sample(k, "resil_cluster_breaker_fleet_calls", "", &l, 1,
				  resil_mv_int(cs->bk_calls));
		}
		if (resild_ck_wants(rec))
			resild_ck_metrics(&cs->ck, name, k);
		if (!rec->conf.limit.on || rec->conf.limit.keys)
			continue;
		k->sample(k, "resil_cluster_share", "", &l, 1,
			  resil_mv_real(cs->applied ? cs->share : 0.0, 3));
		k->sample(
		    k, "resil_cluster_lease_seconds", "", &l, 1,
		    resil_mv_real(cs->expiry_ns ? (double)(cs->expiry_ns - now) / 1e9 : 0.0, 3));
		k->sample(k, "resil_cluster_demand", "", &l, 1, resil_mv_real(cs->demand, 3));
		k->sample(k, "resil_cluster_hosts", "", &l, 1, resil_mv_uint(cs->hosts));
		k->sample(k, "resil_cluster_fallbacks_total", "", &l, 1,
			  resil_mv_uint(cs->fallbacks));
		k->sample(k, "resil_cluster_early_calls_total", "", &l, 1,
			  resil_mv_uint(cs->early));
		fallback_metrics(c, cs->fb_tier, cs->fb_share, cs->kept, name, "limit", k);
	}
}

int resild_cluster_info(struct resild *d, struct resild_cluster_info *out)
{
	struct resild_cluster *c = d->cluster;
	int64_t now = mono_ns(), last_ok;

	if (!c)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->redis = c->url;
	out->name = c->prefix;
	out->host = c->host;
	out->fallback = resil_fallback_name((uint32_t)c->fallback);
	out->interval_ns = c->interval_ns;
	pthread_mutex_lock(&c->lock);
	out->connected = c->connected;
	snprintf(out->last_error, sizeof(out->last_error), "%s", c->last_error);
	snprintf(out->reached, sizeof(out->reached), "%s", c->reached);
	last_ok = c->last_ok_ns;
	out->exchanges = c->exchanges;
	out->script_calls = c->script_calls;
	out->errors = c->errors;
	out->dup_runs = c->dup_runs;
	out->hosts_live = c->hosts_live;
	out->rtt_ns = c->rtt_ns;
	out->rtt_too_long = c->rtt_too_long;
	pthread_mutex_unlock(&c->lock);
	out->lease_ns = lease_ns(c);
	out->expired_connected = c->expired_connected;
	out->run = c->run;
	out->hosts_expected = c->hosts_expected;
	out->fallback_for_ns = c->fallback_for_ns;
	out->last_exchange_ns = last_ok ? now - last_ok : -1;
	for (uint32_t i = 0; i < c->cap; i++)
		if (c->slots[i].active && c->slots[i].hosts > out->hosts_seen)
			out->hosts_seen = c->slots[i].hosts;
	return 0;
}

int resild_cluster_policy_info(struct resild *d, uint32_t slot, uint32_t gen,
			       struct resild_cluster_policy *out)
{
	struct resild_cluster *c = d->cluster;
	const struct cl_slot *cs;
	uint64_t w;
	const struct resil_rec *rec;

	if (!c || slot >= c->cap)
		return -ENOENT;
	cs = &c->slots[slot];
	w = ld_relaxed(&resil_seg_slots(&d->seg)[slot]);
	rec = resil_seg_rec_of(&d->seg, w);
	if (!cs->active || cs->gen != gen || !rec || rec->gen != gen)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->limit = resil_has(rec, RESIL_C_LIMIT) && !rec->conf.limit.keys;
	out->share = cs->applied ? cs->share : 0.0;
	out->lease_ns = cs->expiry_ns ? cs->expiry_ns - mono_ns() : 0;
	out->demand = cs->demand;
	out->hosts = cs->hosts;
	out->breaker =
	    resil_has(rec, RESIL_C_BREAKER) && rec->conf.breaker.window_kind == RESIL_WINDOW_TIME;
	out->fleet = cs->bk_probing ? 2 : cs->bk_open ? 1 : 0;
	out->fleet_open = cs->bk_gen;
	out->fleet_calls = cs->bk_calls;
	out->conflicts = cs->cb.conflicts;
	snprintf(out->conflict_host, sizeof(out->conflict_host), "%s", cs->cb.other_host);
	out->bulkhead = resild_cbh_wants(rec);
	out->slots = cs->bh.applied ? cs->bh.share : 0;
	out->max = resil_bulkhead_max_of(&rec->conf.bulkhead);
	out->parked = cs->bh.parked;
	out->slots_lease_ns = cs->bh.expiry_ns ? cs->bh.expiry_ns - mono_ns() : 0;
	out->slots_hosts = cs->bh.hosts;
	out->keyed = resild_ck_wants(rec);
	out->keyed_published = cs->ck.published;
	out->keyed_charged = cs->ck.charged;
	out->keyed_owing = cs->ck.debt_n;
	out->fallback = out->limit ? cs->fb_tier : cs->bh.fb_tier;
	out->fallback_share = cs->fb_share;
	out->fallback_slots = cs->bh.fb_slots;
	pthread_mutex_lock(&c->lock);
	snprintf(out->error, sizeof(out->error), "%s", c->perr[slot].text);
	out->errors = c->perr[slot].count;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void resild_cluster_fallback_text(const struct resild_cluster_policy *p, char *buf, size_t len)
{
	bool bh = !p->limit && p->bulkhead;

	switch (p->fallback) {
	case FB_HELD:
		if (bh)
			snprintf(buf, len, "its last share, %u slots, held by the fleet",
				 p->fallback_slots);
		else
			snprintf(buf, len, "its last share, %.1f/s, held by the fleet",
				 p->fallback_share);
		break;
	case FB_BASE:
		if (bh)
			snprintf(buf, len, "the fleet's max / its size: %u slots",
				 p->fallback_slots);
		else
			snprintf(buf, len, "the fleet's rate / its size: %.1f/s",
				 p->fallback_share);
		break;
	case FB_LOCAL:
		snprintf(buf, len, "the whole %s here (local)", bh ? "bulkhead" : "rate");
		break;
	case FB_NONE:
		snprintf(buf, len, "nothing: REJECT");
		break;
	default:
		snprintf(buf, len, "%s", "");
		break;
	}
}

const char *resild_cluster_lease_lua(void)
{
	return LEASE_LUA;
}

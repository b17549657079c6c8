/* SPDX-License-Identifier: MIT */
/*
 * ctl_status.c - the control protocol's metrics and status.
 *
 * Metrics answers families of samples: the producers (metrics_render
 * here, cluster.c, shm/metrics.c) emit samples into a sink
 * (shm/metrics.h); the reply's families are built from them (struct
 * psink), GET /metrics is the text sink's rendering of the same calls
 * (resild_metrics_http_text, on the HTTP thread). Status is what an
 * operator asks first: which daemon, since when, how full, the last
 * reload, the cluster's exchange and each uid's share of the state
 * segment.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "cluster.h"
#include "owners.h"
#include "stats.h"

#include "ctl_priv.h"

/*
 * Metrics: what only the daemon knows (connections, reloads, the arena,
 * the records...) first, then every policy from the segments. Two
 * readers: the control socket (`resilctl metrics`, on the loop thread:
 * the numbers are taken then) and the HTTP thread (http.c), which must not
 * touch the loop's structures: it renders the copy the loop published at
 * its last tick (resild_metrics_publish, every RESILD_TICK_NS), so both
 * serve exactly the same families and HTTP's daemon numbers are at most a
 * tick old. `published` is written by the loop and read by the HTTP
 * thread, both under published_lock (a copy of a few words each way; the
 * loop never waits on a scrape longer than that copy).
 */
struct health {
	uint32_t clients, conns, subscribers, slot_cap;
	struct resild_clients_stats cs;
	uint64_t conns_refused, conns_idle, conns_cut, events_seen, reclaims;
	uint64_t reloads, reload_errors, clients_over_quota;
	uint64_t requests[RESILD_PROTO_VERSION + 1];
	int64_t reload_ok_time;
	struct resil_mrec cluster; /* resil_cluster_* samples (cluster.c), taken by the loop */
};

static pthread_mutex_t published_lock = PTHREAD_MUTEX_INITIALIZER;
static struct health published;

static void health_take(struct resild *d, struct health *h)
{
	memset(h, 0, sizeof(*h));
	h->clients = resild_clients_live(d);
	resild_clients_stats(d, &h->cs);
	h->conns = d->nconns;
	h->subscribers = d->nsubscribers;
	h->conns_refused = d->conns_refused;
	h->conns_idle = d->conns_idle;
	h->conns_cut = d->conns_cut;
	h->events_seen = d->events_seen;
	h->reclaims = d->reclaims;
	h->reloads = d->reloads;
	h->reload_errors = d->reload_errors;
	h->reload_ok_time = d->reload_ok_time;
	h->clients_over_quota = d->clients_over_quota;
	memcpy(h->requests, d->requests, sizeof(h->requests));
	if (d->seg.cfg)
		h->slot_cap = d->seg.cfg->slot_cap;
	/* the cluster's figures live in the loop's memory: recorded here, on
	 * the loop's thread, so the HTTP thread replays a copy */
	resil_mrec_init(&h->cluster);
	if (d->cluster)
		resild_cluster_metrics(d, &h->cluster.sink);
}

void resild_metrics_publish(struct resild *d)
{
	struct health h;

	health_take(d, &h);
	pthread_mutex_lock(&published_lock);
	published = h;
	pthread_mutex_unlock(&published_lock);
}

/* A family of one sample without labels. */
static void m1(struct resil_msink *k, const char *name, const char *help, enum resil_mtype type,
	       struct resil_mvalue v)
{
	k->family(k, name, help, type);
	k->sample(k, name, "", NULL, 0, v);
}

/* A sample of family name with one label. */
static void ml(struct resil_msink *k, const char *name, const char *lname, const char *lvalue,
	       struct resil_mvalue v)
{
	struct resil_mlabel l = {lname, lvalue};

	k->sample(k, name, "", &l, 1, v);
}

/* The whole exposition as samples into k: the daemon's, the cluster's,
 * then every policy's (resil_metrics_emit). */
static void metrics_render(const struct health *h, const struct resil_seg *seg,
			   struct resil_msink *k)
{
	m1(k, "resil_clients", "Client processes registered and alive.", RESIL_MT_GAUGE,
	   resil_mv_uint(h->clients));
	m1(k, "resil_client_rows_unidentified",
	   "Client rows naming a process resild cannot see while clients connect from a pid "
	   "namespace it cannot see: kept, counted against those clients' uids.",
	   RESIL_MT_GAUGE, resil_mv_uint(h->cs.unknown));
	m1(k, "resil_client_rows_refused_total",
	   "Client rows freed: claimed without a connection for no process that maps the "
	   "segments, or past its uid's quota.",
	   RESIL_MT_COUNTER, resil_mv_uint(h->cs.refused));
	m1(k, "resil_client_rows_evicted_total",
	   "Client rows given to a connecting client while the table was full: nobody's, or "
	   "unidentified.",
	   RESIL_MT_COUNTER, resil_mv_uint(h->cs.evicted));
	m1(k, "resil_permits_stray_freed_total",
	   "Permits freed: held by an id naming no live client row.", RESIL_MT_COUNTER,
	   resil_mv_uint(h->cs.stray_freed));
	m1(k, "resil_permits_unregistered",
	   "Permits held by live processes without a client row (freed when the process is "
	   "gone, or by an operator's reset).",
	   RESIL_MT_GAUGE, resil_mv_uint(h->cs.unregistered_last));
	m1(k, "resil_client_rows_over_quota_total",
	   "Client rows refused to a uid holding --max-clients-per-uid already (segments or a "
	   "forked child's row).",
	   RESIL_MT_COUNTER, resil_mv_uint(h->cs.over_quota + h->clients_over_quota));
	m1(k, "resil_connections", "Control connections open.", RESIL_MT_GAUGE,
	   resil_mv_uint(h->conns));
	k->family(k, "resil_connections_closed_total",
		  "Control connections the daemon refused or closed, by reason.", RESIL_MT_COUNTER);
	ml(k, "resil_connections_closed_total", "reason", "uid_limit",
	   resil_mv_uint(h->conns_refused));
	ml(k, "resil_connections_closed_total", "reason", "idle", resil_mv_uint(h->conns_idle));
	ml(k, "resil_connections_closed_total", "reason", "unread", resil_mv_uint(h->conns_cut));
	k->family(k, "resil_control_requests_total",
		  "Control requests by the protocol version they spoke.", RESIL_MT_COUNTER);
	for (int v = RESILD_PROTO_MIN; v <= RESILD_PROTO_VERSION; v++) {
		char ver[12];

		snprintf(ver, sizeof(ver), "%d", v);
		ml(k, "resil_control_requests_total", "version", ver,
		   resil_mv_uint(h->requests[v]));
	}
	m1(k, "resil_subscribers", "Event subscribers.", RESIL_MT_GAUGE,
	   resil_mv_uint(h->subscribers));
	m1(k, "resil_events_total", "Events drained from the ring.", RESIL_MT_COUNTER,
	   resil_mv_uint(h->events_seen));
	m1(k, "resil_reclaims_total", "Dead clients whose holdings were reclaimed.",
	   RESIL_MT_COUNTER, resil_mv_uint(h->reclaims));
	k->family(k, "resil_reloads_total", "Configuration reloads (and failed ones).",
		  RESIL_MT_COUNTER);
	ml(k, "resil_reloads_total", "result", "ok", resil_mv_uint(h->reloads));
	ml(k, "resil_reloads_total", "result", "failed", resil_mv_uint(h->reload_errors));
	m1(k, "resil_reload_last_success_timestamp_seconds",
	   "When the configuration files last applied (at start or on reload), Unix time.",
	   RESIL_MT_GAUGE, resil_mv_int(h->reload_ok_time));
	m1(k, "resil_policy_slots", "Policy slots (--policies).", RESIL_MT_GAUGE,
	   resil_mv_uint(h->slot_cap));
	resil_mrec_replay(&h->cluster, k);
	/* records and the arena, every policy (the HTTP text too) */
	resil_metrics_emit(seg, k);
}

size_t resild_metrics_http_text(const struct resil_seg *seg, char *buf, size_t len)
{
	struct health h;
	struct resil_mtext t;

	pthread_mutex_lock(&published_lock);
	h = published;
	pthread_mutex_unlock(&published_lock);
	resil_mtext_init(&t, buf, len);
	metrics_render(&h, seg, &t.sink);
	return t.pos;
}

static void *palloc(struct psink *p, size_t n)
{
	struct pchunk *c = p->chunks;

	n = (n + 15) & ~(size_t)15;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 16384 ? n : 16384;

		c = calloc(1, sizeof(*c) + cap);
		if (!c) {
			p->oom = true;
			return NULL;
		}
		c->cap = cap;
		c->next = p->chunks;
		p->chunks = c;
	}
	c->used += n;
	return c->mem + c->used - n;
}

static char *pstr(struct psink *p, const char *a, const char *b)
{
	size_t la = strlen(a), lb = b ? strlen(b) : 0;
	char *s = palloc(p, la + lb + 1);

	if (s) {
		memcpy(s, a, la);
		if (lb)
			memcpy(s + la, b, lb);
		s[la + lb] = '\0';
	}
	return s;
}

static struct pfam *pfam_of(struct psink *p, const char *name)
{
	for (size_t i = p->nfam; i-- > 0;)
		if (!strcmp(p->fams[i]->f.name, name))
			return p->fams[i];
	return NULL;
}

static struct pfam *pfam_new(struct psink *p, const char *name, const char *help,
			     enum resil_mtype type)
{
	struct pfam *m = palloc(p, sizeof(*m));

	if (!m)
		return NULL;
	resil__metric_family__init(&m->f);
	m->f.name = pstr(p, name, NULL);
	m->f.help = pstr(p, help, NULL);
	m->f.type = (Resil__MetricType)type;
	if (!m->f.name || !m->f.help)
		return NULL;
	if (p->nfam == p->famcap) {
		size_t cap = p->famcap ? 2 * p->famcap : 64;
		struct pfam **a = palloc(p, cap * sizeof(*a));

		if (!a)
			return NULL;
		if (p->nfam)
			memcpy(a, p->fams, p->nfam * sizeof(*a));
		p->fams = a;
		p->famcap = cap;
	}
	p->fams[p->nfam++] = m;
	return m;
}

static void psink_family(struct resil_msink *k, const char *name, const char *help,
			 enum resil_mtype type)
{
	struct psink *p = (struct psink *)k;

	if (!pfam_of(p, name))
		pfam_new(p, name, help, type);
}

static void psink_sample(struct resil_msink *k, const char *family, const char *suffix,
			 const struct resil_mlabel *l, size_t nl, struct resil_mvalue v)
{
	struct psink *p = (struct psink *)k;
	struct pfam *m = pfam_of(p, family);
	Resil__Sample *x;

	if (!m)
		m = pfam_new(p, family, "", RESIL_MT_UNTYPED);
	x = palloc(p, sizeof(*x));
	if (!m || !x)
		return;
	resil__sample__init(x);
	x->name = pstr(p, family, suffix);
	x->value = resil_mvalue_double(v);
	x->decimals = resil_mvalue_decimals(v);
	if (nl) {
		x->labels = palloc(p, nl * sizeof(*x->labels));
		if (!x->labels)
			return;
		for (size_t i = 0; i < nl; i++) {
			Resil__Label *lab = palloc(p, sizeof(*lab));

			if (!lab)
				return;
			resil__label__init(lab);
			lab->name = pstr(p, l[i].name, NULL);
			lab->value = pstr(p, l[i].value, NULL);
			if (!lab->name || !lab->value)
				return;
			x->labels[x->n_labels++] = lab;
		}
	}
	if (!x->name)
		return;
	if (m->f.n_samples == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 8;
		Resil__Sample **a = palloc(p, cap * sizeof(*a));

		if (!a)
			return;
		if (m->f.n_samples)
			memcpy(a, m->f.samples, m->f.n_samples * sizeof(*a));
		m->f.samples = a;
		m->cap = cap;
	}
	m->f.samples[m->f.n_samples++] = x;
}

void psink_free(struct psink *p)
{
	while (p->chunks) {
		struct pchunk *c = p->chunks;

		p->chunks = c->next;
		free(c);
	}
}

/* Families of samples, the text rendered by the asker (as many families
 * as fit in a reply; truncated when some were left off). */
int handle_metrics(struct resild *d, struct reply *rp, Resil__MetricsReply *mr, struct psink *ps)
{
	size_t cap = RESILD_MSG_MAX - 1024, total = 256;
	struct health h;

	rp->resp.body_case = RESIL__RESPONSE__BODY_METRICS;
	rp->resp.metrics = mr;
	*ps = (struct psink){.sink = {psink_family, psink_sample}};
	health_take(d, &h);
	metrics_render(&h, &d->seg, &ps->sink);
	if (ps->oom)
		return reply_error(rp, -ENOMEM, "out of memory");
	for (size_t i = 0; i < ps->nfam; i++) {
		size_t sz = resil__metric_family__get_packed_size(&ps->fams[i]->f) + 8;

		if (total + sz > cap) {
			mr->truncated = true;
			break;
		}
		total += sz;
		mr->n_families++;
	}
	/* struct pfam starts with its family: the array of pfam pointers is
	 * one of family pointers */
	mr->families = (Resil__MetricFamily **)ps->fams;
	return 0;
}

static int count_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		     void *ctx)
{
	(void)s;
	(void)slot;
	(void)rec;
	(*(uint32_t *)ctx)++;
	return 0;
}

/* What an operator asks first: which daemon, since when, how full, did
 * the last reload apply, is the metrics listener serving. Anyone who may
 * connect may read it. */
struct cluster_status {
	Resil__ClusterStatus st;
	struct resild_cluster_info ci;
	uint32_t n;
	char (*hosts)[sizeof(((struct resild_cluster_policy *)0)->conflict_host)];
	struct {
		char error[160];
		char fallback[96];
	} * texts;
	Resil__ClusterPolicy *pp[];
};

static int cluster_policy_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			      void *arg)
{
	void **a = arg;
	struct resild *d = a[0];
	struct cluster_status *cs = a[1];
	Resil__ClusterPolicy *p = (Resil__ClusterPolicy *)(cs->pp + d->seg.cfg->slot_cap) + cs->n;
	struct resild_cluster_policy cp;

	(void)s;
	if (cs->n >= d->seg.cfg->slot_cap || rec->conf.scope != RESIL_SCOPE_GLOBAL ||
	    resild_cluster_policy_info(d, slot, rec->gen, &cp) < 0)
		return 0;
	resil__cluster_policy__init(p);
	p->name = (char *)rec->name;
	p->limit = cp.limit;
	p->share = cp.share;
	p->lease_ms = cp.lease_ns / RESIL_NS_PER_MS;
	p->demand = cp.demand;
	p->hosts = cp.hosts;
	p->breaker = cp.breaker;
	p->fleet_state = (Resil__FleetState)cp.fleet; /* RESIL_FLEET_* (names.h) */
	p->fleet_open = cp.fleet_open;
	p->fleet_calls = cp.fleet_calls < 0 ? 0 : (uint64_t)cp.fleet_calls;
	p->conflicts = cp.conflicts;
	/* the copy outlives this call: cs is freed after packing */
	snprintf(cs->hosts[cs->n], sizeof(cs->hosts[0]), "%s", cp.conflict_host);
	p->conflict_host = cs->hosts[cs->n];
	p->bulkhead = cp.bulkhead;
	p->slots = cp.slots;
	p->slots_max = cp.max;
	p->slots_lease_ms = cp.slots_lease_ns / RESIL_NS_PER_MS;
	p->parked = cp.parked;
	p->keyed = cp.keyed;
	p->keyed_published = cp.keyed_published;
	p->keyed_charged = cp.keyed_charged;
	p->keyed_owing = cp.keyed_owing;
	p->script_errors = cp.errors;
	/* the copies outlive this call: cs is freed after packing */
	snprintf(cs->texts[cs->n].error, sizeof(cs->texts[0].error), "%s", cp.error);
	p->error = cs->texts[cs->n].error;
	resild_cluster_fallback_text(&cp, cs->texts[cs->n].fallback, sizeof(cs->texts[0].fallback));
	p->fallback_text = cs->texts[cs->n].fallback;
	cs->pp[cs->n++] = p;
	return 0;
}

/* The exchange with Redis and each global policy's sync; NULL when the
 * daemon runs without --cluster-redis (or out of memory: status goes on
 * without it). The caller frees it after packing. */
static struct cluster_status *cluster_status(struct resild *d)
{
	uint32_t cap = d->seg.cfg->slot_cap;
	struct cluster_status *cs;
	void *arg[2];

	if (!d->cluster)
		return NULL;
	cs = calloc(1, sizeof(*cs) +
			   cap * (sizeof(Resil__ClusterPolicy *) + sizeof(Resil__ClusterPolicy) +
				  sizeof(cs->hosts[0]) + sizeof(cs->texts[0])));
	if (!cs)
		return NULL;
	cs->hosts = (void *)((Resil__ClusterPolicy *)(cs->pp + cap) + cap);
	cs->texts = (void *)(cs->hosts + cap);
	if (resild_cluster_info(d, &cs->ci) < 0) {
		free(cs);
		return NULL;
	}
	resil__cluster_status__init(&cs->st);
	cs->st.redis = (char *)cs->ci.redis;
	cs->st.name = (char *)cs->ci.name;
	cs->st.host = (char *)cs->ci.host;
	cs->st.interval_ms = (uint64_t)(cs->ci.interval_ns / RESIL_NS_PER_MS);
	{
		int fb = RESILD_FALLBACK_SHARE;

		resild_cluster_parse_fallback(cs->ci.fallback, &fb);
		cs->st.fallback_mode = (Resil__ClusterFallback)fb;
	}
	cs->st.connected = cs->ci.connected;
	cs->st.last_error = cs->ci.last_error;
	cs->st.reached = cs->ci.reached;
	cs->st.last_exchange_ms =
	    cs->ci.last_exchange_ns < 0 ? -1 : cs->ci.last_exchange_ns / RESIL_NS_PER_MS;
	cs->st.exchanges = cs->ci.exchanges;
	cs->st.script_calls = cs->ci.script_calls;
	cs->st.errors = cs->ci.errors;
	cs->st.hosts_seen = cs->ci.hosts_seen;
	cs->st.run = (char *)cs->ci.run;
	cs->st.duplicate_runs = cs->ci.dup_runs;
	cs->st.hosts_live = cs->ci.hosts_live;
	cs->st.hosts_expected = cs->ci.hosts_expected;
	cs->st.fallback_for_ms = (uint64_t)(cs->ci.fallback_for_ns / RESIL_NS_PER_MS);
	cs->st.round_trip_ms = (uint64_t)(cs->ci.rtt_ns / RESIL_NS_PER_MS);
	cs->st.lease_length_ms = (uint64_t)(cs->ci.lease_ns / RESIL_NS_PER_MS);
	cs->st.round_trip_too_long = cs->ci.rtt_too_long;
	cs->st.expired_connected = cs->ci.expired_connected;
	arg[0] = d;
	arg[1] = cs;
	resil_seg_foreach(&d->seg, cluster_policy_one, arg);
	cs->st.n_policies = cs->n;
	cs->st.policies = cs->pp;
	return cs;
}

/* resilctl status's per-uid share of the state segment. */
#define STATUS_UIDS 256
struct uid_usage {
	Resil__UidUsage u[STATUS_UIDS];
	Resil__UidUsage *p[STATUS_UIDS];
	size_t n;
};

static int uid_usage_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			 void *ctx)
{
	struct uid_usage *uu = ctx;
	size_t i;

	(void)slot;
	for (i = 0; i < uu->n && uu->u[i].uid != rec->owner_uid; i++)
		;
	if (i == uu->n) {
		if (uu->n == STATUS_UIDS)
			return 0;
		resil__uid_usage__init(&uu->u[i]);
		uu->u[i].uid = rec->owner_uid;
		uu->n++;
	}
	uu->u[i].policies++;
	uu->u[i].state_bytes += resil_seg_rec_bytes(s, rec);
	return 0;
}

static int uid_usage_cmp(const void *a, const void *b)
{
	const Resil__UidUsage *x = *(Resil__UidUsage *const *)a, *y = *(Resil__UidUsage *const *)b;

	return x->state_bytes > y->state_bytes ? -1 : x->state_bytes < y->state_bytes;
}

static void status_uids(struct resild *d, Resil__StatusReply *sr, struct uid_usage *uu)
{
	resil_seg_foreach(&d->seg, uid_usage_one, uu);
	for (size_t i = 0; i < uu->n; i++) {
		Resil__UidUsage *u = &uu->u[i];

		u->waiting_bytes = resil_seg_waiting_bytes_of(&d->seg, u->uid);
		u->state_bytes += u->waiting_bytes;
		u->rows = resild_clients_of_uid(d, u->uid);
		u->exempt = u->uid == 0 || u->uid == (uint32_t)d->uid;
		uu->p[i] = u;
	}
	qsort(uu->p, uu->n, sizeof(uu->p[0]), uid_usage_cmp);
	sr->n_uids = uu->n;
	sr->uids = uu->p;
	sr->state_per_uid = d->opts.max_state_per_uid;
	sr->clients_per_uid = d->opts.max_clients_per_uid;
	sr->policies_per_uid = d->opts.max_policies_per_uid;
}

int handle_status(struct resild *d, struct reply *rp, Resil__StatusReply *sr, void **to_free)
{
	struct cluster_status *cs = cluster_status(d);
	struct uid_usage *uu = calloc(1, sizeof(*uu));
	uint32_t n = 0;

	resil_seg_foreach(&d->seg, count_one, &n);
	sr->version = (char *)RESILD_VERSION;
	sr->pid = (uint32_t)getpid();
	sr->started = d->started;
	sr->uptime_s = (uint64_t)((resil_clock_monotonic(NULL) - d->started_ns) / RESIL_NS_PER_S);
	sr->clients = resild_clients_live(d);
	sr->connections = d->nconns;
	sr->policies = n;
	sr->policy_slots = d->seg.cfg->slot_cap;
	sr->arena_used = d->seg.arena_used;
	sr->arena_size = d->seg.geo.arena_size;
	/* rec_used: written by this daemon only: a relaxed load reads our own store */
	sr->records_used = ld_relaxed(&d->seg.cfg->rec_used);
	sr->records = d->seg.cfg->rec_cap;
	sr->config_dir = (char *)d->opts.config_dir;
	sr->options_file = d->optfile.path;
	sr->reload_ok = d->reload_ok;
	sr->reload_message = d->reload_msg;
	sr->reload_time = d->reload_time;
	sr->reloads = d->reloads;
	sr->reload_errors = d->reload_errors;
	sr->metrics = (Resil__MetricsState)d->metrics_state;
	sr->metrics_listen = d->metrics_activated     ? (char *)"socket-activated"
			     : d->opts.metrics_listen ? (char *)d->opts.metrics_listen
						      : (char *)"";
	sr->metrics_error = d->metrics_error;
	sr->adopted = d->adopted;
	if (uu) {
		status_uids(d, sr, uu);
		to_free[1] = uu;
	}
	if (cs) {
		sr->cluster = &cs->st;
		*to_free = cs;
	}
	rp->resp.body_case = RESIL__RESPONSE__BODY_STATUS;
	rp->resp.status = sr;
	return 0;
}

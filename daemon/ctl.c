/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - the control protocol: one Request in, one Response out.
 *
 * Size: above 900 lines on purpose: one table of request handlers
 * (handle_hello .. handle_status, dispatched by resild_handle) that share
 * the reply and error helpers, the authorization checks (may_change,
 * may_create), the lookup (find_or_fail) and the one place that shapes a
 * reply; apart, each handler would export them. The metrics' families
 * (struct psink) are the seam a further cut would take.
 *
 * Everything a peer sends is untrusted: the request is unpacked by
 * protobuf-c (bounded by the datagram, at most RESILD_MSG_MAX bytes),
 * names are checked, configuration text goes through resil_conf_parse and
 * resil_conf_check before anything touches the segments. A request that
 * does not unpack gets an error Response and the connection is closed
 * (RESILD_HANDLE_CLOSE); every other connection is unaffected.
 *
 * Authorization: whoever can connect may read (the socket's mode and
 * group are the gate) and may create a policy that does not exist or
 * re-define one identically (workers declare what they use at start).
 * Changing, deleting, forcing or resetting an existing policy takes root,
 * a member of the admin group (primary or supplementary, SO_PEERGROUPS),
 * or the uid that created it.
 *
 * Define NAME CONFIG defines the policy from the defaults plus CONFIG (a
 * change when it exists and differs; must_not_exist: refused when it
 * exists); with merge it must find it and applies CONFIG over its current
 * configuration (keys not given keep their values). A change keeps the
 * creator (owner_uid) and the from-file flag: the file still wins at the
 * next reload. ForceState with reset = force closed: a fresh, closed
 * breaker (counters are not reset: shm has no call for it), and the
 * permits held unregistered freed.
 *
 * Writes to the segments go through resil_seg_define / resil_seg_delete
 * (the daemon is the only writer of configuration) and resil_policy_force
 * (breaker state, an atomic store clients read).
 *
 * Replies never exceed RESILD_MSG_MAX: a list page stops early (more =
 * true), metrics stop at a family (truncated = true), anything else that
 * would not fit becomes an E2BIG error.
 *
 * Protocol versions (proto/resil.proto): every Request names its version
 * (0: version 1); one past RESILD_PROTO_VERSION is refused. Metrics
 * answers families of samples: the producers (metrics_render here,
 * cluster.c, shm/metrics.c) emit samples into a sink (shm/metrics.h); the
 * reply's families are built from them (struct psink), GET /metrics is the
 * text sink's rendering of the same calls. Requests are counted by version
 * (resil_control_requests_total).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "resil.pb-c.h"

#include "cfgfile.h"
#include "clients.h"
#include "cluster.h"
#include "ctl.h"
#include "log.h"
#include "owners.h"
#include "limit.h"
#include "loop.h"
#include "metrics.h"
#include "policy.h"
#include "resil.h"
#include "breaker.h"
#include "bulkhead.h"
#include "stats.h"
#include "budget.h"

#define CONF_TEXT_MAX 16384
/* counters, percentiles, keyed limiter and one key (16), up to 64 processes side by side,
 * held permits (2 + up to HOLDERS_MAX holders + 1) */
#define HOLDERS_MAX 16
#define STATS_MAX   (RESIL_STAT__MAX + 8 + 16 + 8 + 64 + 3 + HOLDERS_MAX + WHY_MAX + CLUSTER_MAX)
/* the why_* stats of add_why_stats */
#define WHY_MAX 24
/* the cluster_* stats of add_cluster_stats */
#define CLUSTER_MAX 20

/* Every enum this file and events.c cast into the protocol is its
 * list's (names.h), and so are the daemon's own. */
RESIL_NAMES_PROTO_CHECK
RESIL_NAMES_DAEMON_CHECK

/* A reply under construction: the error (if any) and the body. */
struct reply {
	Resil__Response resp;
	Resil__Error error;
	uint32_t version; /* the request's protocol version */
	int64_t wait_until; /* the peer's: a define may wait for space until */
	int64_t later_ns;   /* != 0: no reply yet, try again then */
	char errmsg[512];
};

static int reply_error(struct reply *rp, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int reply_error(struct reply *rp, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rp->errmsg, sizeof(rp->errmsg), fmt, ap);
	va_end(ap);
	resil__error__init(&rp->error);
	rp->error.errno_value = err < 0 ? -err : err;
	rp->error.message = rp->errmsg;
	rp->resp.error = &rp->error;
	rp->resp.body_case = RESIL__RESPONSE__BODY__NOT_SET;
	return err;
}

static int pack(const Resil__Response *resp, uint8_t *out, size_t *outlen)
{
	size_t n = resil__response__get_packed_size(resp);

	if (n > *outlen || n > RESILD_MSG_MAX)
		return -E2BIG;
	*outlen = resil__response__pack(resp, out);
	return 0;
}

int resild_error_reply(uint64_t id, int err, const char *msg, uint8_t *out, size_t *outlen)
{
	Resil__Response resp = RESIL__RESPONSE__INIT;
	Resil__Error e = RESIL__ERROR__INIT;

	e.errno_value = err < 0 ? -err : err;
	e.message = (char *)msg;
	resp.id = id;
	resp.error = &e;
	return pack(&resp, out, outlen);
}

static bool peer_in_group(const struct resild_peer *p, gid_t g)
{
	if (p->gid == g)
		return true;
	for (int i = 0; i < p->ngroups; i++)
		if (p->groups[i] == g)
			return true;
	return false;
}

bool resild_peer_exempt(const struct resild *d, const struct resild_peer *p)
{
	if (p->uid == 0 || p->uid == d->uid)
		return true;
	return d->has_admin_gid && peer_in_group(p, d->admin_gid);
}

static bool may_change_ok(struct resild *d, const struct resild_peer *p,
			  const struct resil_rec *rec)
{
	return p->uid == 0 || p->uid == rec->owner_uid ||
	       (d->has_admin_gid && peer_in_group(p, d->admin_gid));
}

/* May this peer change or delete rec? 0 or -EPERM with the rule in words. */
static int may_change(struct resild *d, const struct resild_peer *p, const struct resil_rec *rec,
		      const char *verb, struct reply *rp)
{
	if (may_change_ok(d, p, rec))
		return 0;
	if (d->has_admin_gid)
		return reply_error(rp, -EPERM, "%s policy %s needs root, group %s or uid %u", verb,
				   rec->name, d->opts.admin_group, rec->owner_uid);
	return reply_error(rp, -EPERM, "%s policy %s needs root or uid %u", verb, rec->name,
			   rec->owner_uid);
}

struct owned {
	uint32_t uid, n;
	uint64_t bytes;
};

static int count_owned(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		       void *ctx)
{
	struct owned *o = ctx;

	if (rec->owner_uid == o->uid) {
		o->n++;
		o->bytes += resil_seg_rec_bytes(s, rec);
	}
	return 0;
}

/* The state segment bytes uid's policies take: live, and retired ones in
 * their grace period (their space is not back yet). */
static uint64_t bytes_of_uid(struct resild *d, uint32_t uid)
{
	struct owned o = {.uid = uid};

	resil_seg_foreach(&d->seg, count_owned, &o);
	return o.bytes + resil_seg_waiting_bytes_of(&d->seg, uid);
}

/* May peer p give uid's policy name the configuration c, as far as the
 * state segment goes? A uid's policies take at most --max-state-per-uid
 * bytes of it (a fair share of --state-size by default), so one member
 * cannot fill the arena with keyed tables and leave no room for the
 * others; root, our uid and the admin group are exempt. 0 or -EDQUOT. */
static int may_take_state(struct resild *d, const struct resild_peer *p, uint32_t uid,
			  const char *name, const struct resil_conf *c, struct reply *rp)
{
	struct resil_define_cost cost;
	uint64_t have, max = d->opts.max_state_per_uid;

	if (!max || resild_peer_exempt(d, p) ||
	    resil_seg_define_cost(&d->seg, name, c, 0, &cost) < 0 || !cost.arena)
		return 0;
	have = bytes_of_uid(d, uid);
	if (have + cost.arena <= max)
		return 0;
	return reply_error(rp, -EDQUOT,
			   "policy %s needs %llu bytes of state; uid %u's policies take %llu, at "
			   "most %llu per uid (--max-state-per-uid)",
			   name, (unsigned long long)cost.arena, uid, (unsigned long long)have,
			   (unsigned long long)max);
}

/* May this peer create a policy named name (it does not exist)? Anyone in
 * the socket's group, within its quota of policies, unless the name is
 * declared in the configuration files (reserved for them: no member can
 * take a name the real service needs before the daemon reads it). Root,
 * our uid and the admin group are exempt. 0 or -errno with the reply. */
static int may_create(struct resild *d, const struct resild_peer *p, const char *name,
		      struct reply *rp)
{
	struct owned o = {.uid = (uint32_t)p->uid};
	char where[4200];

	if (resild_peer_exempt(d, p))
		return 0;
	if (resild_name_in_files(d->opts.config_dir, name, where, sizeof(where)))
		return reply_error(rp, -EPERM,
				   "policy %s is declared in %s: reserved for the configuration "
				   "files (a reload creates it; root%s%s may create it now)",
				   name, where, d->has_admin_gid ? " or group " : "",
				   d->has_admin_gid ? d->opts.admin_group : "");
	if (d->opts.max_policies_per_uid) {
		resil_seg_foreach(&d->seg, count_owned, &o);
		if (o.n >= d->opts.max_policies_per_uid)
			return reply_error(rp, -EDQUOT,
					   "uid %u owns %u policies, at most %u per uid "
					   "(--max-policies-per-uid)",
					   o.uid, o.n, d->opts.max_policies_per_uid);
	}
	return 0;
}

static const struct resil_rec *find(struct resild *d, const char *name, uint64_t *word)
{
	uint64_t w;
	uint32_t slot;

	if (!name || resil_seg_lookup(&d->seg, name, &slot, &w) < 0)
		return NULL;
	if (word)
		*word = w;
	return resil_seg_rec_of(&d->seg, w);
}

static int check_name(const char *name, struct reply *rp)
{
	char err[256];

	if (resild_name_check(name, err, sizeof(err)) < 0)
		return reply_error(rp, -EINVAL, "%s", err);
	return 0;
}

static const struct resil_rec *find_or_fail(struct resild *d, const char *name, struct reply *rp)
{
	const struct resil_rec *rec;

	if (check_name(name, rp) < 0)
		return NULL;
	rec = find(d, name, NULL);
	if (!rec)
		reply_error(rp, -ENOENT, "no policy named %s", name);
	return rec;
}

static int handle_hello(struct resild *d, const Resil__Hello *h, struct reply *rp,
			Resil__HelloReply *hr)
{
	uint32_t lo = h->min_version, hi = h->max_version, top = RESILD_PROTO_VERSION;

	if (hi == 0)
		hi = lo;
	if (lo > top || hi < RESILD_PROTO_MIN || lo > hi)
		return reply_error(
		    rp, -EPROTONOSUPPORT,
		    "protocol versions %u..%u not spoken here (resild speaks %d..%u)", lo, hi,
		    RESILD_PROTO_MIN, top);
	/* the highest both speak */
	hr->version = hi < top ? hi : top;
	hr->abi_major = d->seg.cfg->abi_major;
	hr->abi_minor = d->seg.cfg->abi_minor;
	hr->epoch = d->seg.cfg->epoch;
	hr->daemon = "resild " RESILD_VERSION;
	rp->resp.body_case = RESIL__RESPONSE__BODY_HELLO;
	rp->resp.hello = hr;
	return 0;
}

/* A read-only reopen of one of our memfds. */
static int reopen_ro(int fd)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, O_RDONLY | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

static int handle_segments(struct resild *d, const struct resild_peer *p,
			   const Resil__GetSegments *g, struct reply *rp,
			   Resil__GetSegmentsReply *sr, int *fds, int *nfds)
{
	int cfd, sfd, row = -1;

	cfd = reopen_ro(d->seg.cfg_fd);
	if (cfd < 0)
		return reply_error(rp, cfd, "cannot reopen the config segment: %s", strerror(-cfd));
	if (g->observer)
		sfd = reopen_ro(d->seg.st_fd);
	else if ((sfd = fcntl(d->seg.st_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		sfd = -errno;
	if (sfd < 0) {
		close(cfd);
		return reply_error(rp, sfd, "cannot pass the state segment: %s", strerror(-sfd));
	}
	if (g->bind && !g->observer) {
		bool exempt = resild_peer_exempt(d, p);
		uint32_t max = d->opts.max_clients_per_uid, have;

		/* a uid past its quota of client rows gets no segments: a
		 * member of the group cannot take the table from the others */
		if (max && !exempt && (have = resild_clients_of_uid(d, (uint32_t)p->uid)) >= max) {
			close(cfd);
			close(sfd);
			d->clients_over_quota++;
			return reply_error(rp, -EDQUOT,
					   "uid %u holds %u client rows, at most %u per uid "
					   "(--max-clients-per-uid)",
					   (unsigned)p->uid, have, max);
		}
		/* who the client is: the kernel's word for the connection, not
		 * the row's (clients.c); a peer we cannot see claims its own
		 * row and is judged as a connectionless one */
		row = resild_clients_bind(d, p->pid, p->uid, exempt);
		if (row < 0 && row != -ENOSPC)
			log_info("pid %d (uid %u): no client row bound: %s", (int)p->pid,
				 (unsigned)p->uid, strerror(-row));
	}
	fds[0] = cfd;
	fds[1] = sfd;
	*nfds = 2;
	sr->client_id = row >= 0 ? resil_client_id(row) : 0;
	sr->config_size = d->seg.cfg_size;
	sr->state_size = d->seg.st_size;
	sr->epoch = d->seg.cfg->epoch;
	rp->resp.body_case = RESIL__RESPONSE__BODY_SEGMENTS;
	rp->resp.segments = sr;
	return 0;
}

/* A PolicyInfo; config, origin and stats only when full (get), not in a
 * list. */
struct info_head {
	Resil__PolicyInfo pi;
};
struct info {
	struct info_head h;
	struct resild_origin_buf origin;
	char config[CONF_TEXT_MAX];
	Resil__Stat st[STATS_MAX];
	Resil__Stat *stp[STATS_MAX];
	char stname[STATS_MAX][32];
};

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
 * next sweep frees), "held_norow_pid_P" (a process without a row, by the
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
		uint32_t pid = row >= 0 ? resild_clients_pid_of(d, (uint32_t)row) : 0;

		if (row >= 0 && !pid)
			pid = (uint32_t)(ld_relaxed(
					     &resil_seg_client(&d->seg, (uint32_t)row)->owner) >>
					 32);
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

static void fill_info(struct resild *d, const struct resil_rec *rec, struct info *in)
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

static int handle_get(struct resild *d, const Resil__Get *g, struct reply *rp, struct info *in)
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

static int handle_list(struct resild *d, const Resil__List *l, struct reply *rp,
		       Resil__ListReply *lr, void **to_free)
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

static int parse_conf(struct resil_conf *c, const char *text, struct reply *rp)
{
	char err[512] = "";

	if (!text)
		text = "";
	if (strlen(text) > CONF_TEXT_MAX)
		return reply_error(rp, -E2BIG, "configuration longer than %d bytes", CONF_TEXT_MAX);
	if (resil_conf_text_empty(text))
		return reply_error(rp, -EINVAL,
				   "empty configuration: give at least one key (e.g. "
				   "breaker.failure_rate = 50, limit.rate = 100/s)");
	if (resil_conf_parse(c, text, 1, err, sizeof(err)) < 0)
		return reply_error(rp, -EINVAL, "%s", err[0] ? err : "invalid configuration");
	if (resil_conf_check(c, err, sizeof(err)) < 0)
		return reply_error(rp, -EINVAL, "%s", err[0] ? err : "invalid configuration");
	return 0;
}

static int define(struct resild *d, const char *name, const struct resil_conf *c, uint32_t uid,
		  uint32_t flags, struct reply *rp)
{
	char err[512] = "";
	int r;

	r = resil_seg_define(&d->seg, name, c, uid, flags, resil_clock_monotonic(NULL), err,
			     sizeof(err));
	if (r == -EAGAIN) {
		/* what it needs waits out its grace period: the request is
		 * answered when it comes free, as a reload waits for it
		 * (bounded by the loop: wait_until) */
		int64_t t = resil_seg_next_free_ns(&d->seg, true),
			a = resil_seg_next_free_ns(&d->seg, false);

		t = a < t ? a : t;
		if (rp->wait_until && t <= rp->wait_until) {
			rp->later_ns = t;
			return -EAGAIN;
		}
	}
	if (r < 0)
		return reply_error(rp, r, "policy %s: %s", name, err[0] ? err : strerror(-r));
	/* a global policy's fallback words before its first call, not at the
	 * next tick (cluster.c, "The fallback") */
	if (c->scope == RESIL_SCOPE_GLOBAL)
		resild_cluster_woken(d);
	return 0;
}

/* Define: create or re-define (exclusive: refuse a name that exists), or,
 * with update (merge), change an existing policy (keys given replace those
 * keys, the others keep their values). */
static int handle_define(struct resild *d, const struct resild_peer *p, const char *name,
			 const char *text, bool update, bool exclusive, struct reply *rp,
			 struct info *in)
{
	const struct resil_rec *rec;
	Resil__Outcome result;
	struct resil_conf c;
	int r;

	if (check_name(name, rp) < 0)
		return -EINVAL;
	rec = find(d, name, NULL);
	if (update && !rec)
		return reply_error(rp, -ENOENT, "no policy named %s", name);
	if (exclusive && rec)
		return reply_error(rp, -EEXIST,
				   "policy %s exists (resilctl update changes it, resilctl apply "
				   "creates or updates)",
				   name);
	if (update)
		c = rec->conf;
	else
		resil_conf_init(&c);
	r = parse_conf(&c, text, rp);
	if (r < 0)
		return r;
	/* identical: anyone who can connect; it makes the configuration the
	 * operator's (owners.c) only for who may change it */
	if (rec && resil_seg_conf_same(rec, &c) &&
	    ((rec->flags & RESIL_REC_RUNTIME) || !may_change_ok(d, p, rec))) {
		result = RESIL__OUTCOME__OUTCOME_UNCHANGED;
		goto done;
	}
	if (rec && resil_seg_conf_same(rec, &c))
		result = RESIL__OUTCOME__OUTCOME_UNCHANGED;
	else
		result = rec ? RESIL__OUTCOME__OUTCOME_CHANGED : RESIL__OUTCOME__OUTCOME_CREATED;
	/* a runtime change: it holds until resilctl revert (or a reload of
	 * the policy's file) */
	if (rec) {
		r = may_change(d, p, rec, "changing", rp);
		if (r == 0)
			r = may_take_state(d, p, rec->owner_uid, name, &c, rp);
		if (r < 0)
			return r;
		r = define(d, name, &c, rec->owner_uid, rec->flags | RESIL_REC_RUNTIME, rp);
	} else {
		r = may_create(d, p, name, rp);
		if (r == 0)
			r = may_take_state(d, p, (uint32_t)p->uid, name, &c, rp);
		if (r < 0)
			return r;
		r = define(d, name, &c, (uint32_t)p->uid, RESIL_REC_RUNTIME, rp);
	}
	if (r < 0)
		return r;
	resild_owners_runtime(d, p, name);
	log_info("policy %s: %s by uid %u (pid %d): a runtime change, until resilctl revert", name,
		 rec ? "changed" : "created", (unsigned)p->uid, (int)p->pid);
	rec = find(d, name, NULL);
	if (!rec)
		return reply_error(rp, -EIO, "policy %s vanished after its definition", name);
done:
	fill_info(d, rec, in);
	in->h.pi.result = result;
	rp->resp.body_case = RESIL__RESPONSE__BODY_POLICY;
	rp->resp.policy = &in->h.pi;
	return 0;
}

static int handle_delete(struct resild *d, const struct resild_peer *p, const char *name,
			 struct reply *rp)
{
	const struct resil_rec *rec = find_or_fail(d, name, rp);
	int r;

	if (!rec)
		return -ENOENT;
	r = may_change(d, p, rec, "deleting", rp);
	if (r < 0)
		return r;
	r = resil_seg_delete(&d->seg, name);
	if (r < 0)
		return reply_error(rp, r, "cannot delete policy %s: %s", name, strerror(-r));
	resild_owners_forget(d, name);
	log_info("policy %s: deleted by uid %u (pid %d)", name, (unsigned)p->uid, (int)p->pid);
	return 0;
}

/*
 * A declaration from code (resil_define): it defines the policy only when
 * no file and no runtime change holds it and no newer process declared it
 * (owners.c); otherwise it is kept beneath (or, from an older process,
 * changes nothing) and the reply says so (OUTCOME_KEPT). Either way the
 * declaring worker gets no error: that is what lets a worker start while
 * an operator's change holds.
 */
static int handle_declare(struct resild *d, const struct resild_peer *p, const Resil__Define *df,
			  struct reply *rp, struct info *in)
{
	const struct resil_rec *rec;
	Resil__Outcome result;
	struct resil_conf c;
	enum resild_decl v;
	uint64_t start;
	int r;

	if (check_name(df->name, rp) < 0)
		return -EINVAL;
	resil_conf_init(&c);
	r = parse_conf(&c, df->config, rp);
	if (r < 0)
		return r;
	rec = find(d, df->name, NULL);
	v = resild_owners_judge(d, p, df->name, rec, &start);
	if (v != RESILD_DECL_APPLY) {
		/* kept beneath a file or a runtime change, if p may change it
		 * (Revert may make it live); from an older process: nothing */
		if (v == RESILD_DECL_KEEP &&
		    (resil_seg_conf_same(rec, &c) || may_change_ok(d, p, rec)))
			resild_owners_declared(d, p, df->name, &c, start);
		result = resil_seg_conf_same(rec, &c) ? RESIL__OUTCOME__OUTCOME_UNCHANGED
						      : RESIL__OUTCOME__OUTCOME_KEPT;
		if (result == RESIL__OUTCOME__OUTCOME_KEPT)
			log_info("policy %s: the declaration of pid %d %s", df->name, (int)p->pid,
				 v == RESILD_DECL_KEEP
				     ? "is kept beneath the configuration in force (a file's "
				       "or a runtime change)"
				     : "changes nothing: a newer process declared it");
	} else if (rec && resil_seg_conf_same(rec, &c)) {
		result = RESIL__OUTCOME__OUTCOME_UNCHANGED;
		resild_owners_declared(d, p, df->name, &c, start);
	} else {
		if (rec)
			r = may_change(d, p, rec, "changing", rp);
		else
			r = may_create(d, p, df->name, rp);
		if (r == 0)
			r = may_take_state(d, p, rec ? rec->owner_uid : (uint32_t)p->uid, df->name,
					   &c, rp);
		if (r == 0)
			r = define(d, df->name, &c, rec ? rec->owner_uid : (uint32_t)p->uid, 0, rp);
		if (r < 0)
			return r;
		log_info("policy %s: %s by the declaration of pid %d (uid %u)", df->name,
			 rec ? "changed" : "created", (int)p->pid, (unsigned)p->uid);
		result = rec ? RESIL__OUTCOME__OUTCOME_CHANGED : RESIL__OUTCOME__OUTCOME_CREATED;
		resild_owners_declared(d, p, df->name, &c, start);
	}
	rec = find(d, df->name, NULL);
	if (!rec)
		return reply_error(rp, -EIO, "policy %s vanished after its definition", df->name);
	resild_owners_pending(d, df->name, df->pending_admitted, df->pending_rejected);
	fill_info(d, rec, in);
	in->h.pi.result = result;
	rp->resp.body_case = RESIL__RESPONSE__BODY_POLICY;
	rp->resp.policy = &in->h.pi;
	return 0;
}

/* Revert: the runtime change of NAME goes, the configuration beneath it
 * (its file's, else the newest declaration) comes back. */
static int handle_revert(struct resild *d, const struct resild_peer *p, const Resil__Revert *rv,
			 struct reply *rp, struct info *in)
{
	const struct resil_rec *rec = find_or_fail(d, rv->name, rp);
	struct resil_conf c;
	uint32_t flags;
	char why[512];
	int r;

	if (!rec)
		return -ENOENT;
	r = may_change(d, p, rec, "reverting", rp);
	if (r < 0)
		return r;
	if (!(rec->flags & RESIL_REC_RUNTIME))
		return reply_error(rp, -ENODATA,
				   "policy %s has no runtime change to revert (its configuration "
				   "comes from %s)",
				   rec->name,
				   (rec->flags & RESIL_REC_FROM_FILE) ? "a configuration file"
								      : "a declaration");
	r = resild_owners_beneath(d, rec, &c, &flags, why, sizeof(why));
	if (r < 0)
		return reply_error(rp, r, "%s", why);
	/* a declaration kept beneath was never weighed against the quota */
	if (!(flags & RESIL_REC_FROM_FILE))
		r = may_take_state(d, p, rec->owner_uid, rec->name, &c, rp);
	if (r == 0)
		r = define(d, rec->name, &c, rec->owner_uid, flags, rp);
	if (r < 0)
		return r;
	log_notice("policy %s: runtime change reverted by uid %u (pid %d): back to %s", rv->name,
		   (unsigned)p->uid, (int)p->pid,
		   flags & RESIL_REC_FROM_FILE ? "its file's configuration" : "its declaration");
	rec = find(d, rv->name, NULL);
	if (!rec)
		return reply_error(rp, -EIO, "policy %s vanished after its revert", rv->name);
	fill_info(d, rec, in);
	rp->resp.body_case = RESIL__RESPONSE__BODY_POLICY;
	rp->resp.policy = &in->h.pi;
	return 0;
}

static int force_state(struct resild *d, const struct resild_peer *p, const char *name, int state,
		       const char *verb, struct reply *rp, struct info *in)
{
	const struct resil_rec *rec = find_or_fail(d, name, rp);
	struct resil_ctx x = {.seg = &d->seg, .pid = (uint32_t)getpid()};
	int r;

	if (!rec)
		return -ENOENT;
	r = may_change(d, p, rec, verb, rp);
	if (r < 0)
		return r;
	x.rec = rec;
	if (state == RESIL_STATE_CLOSED && !strcmp(verb, "resetting")) {
		/* every claim no live row holds: a live rowless holder the
		 * tick leaves alone, an operator's reset may free (clients.c) */
		uint32_t n = resild_clients_free_unregistered(d, rec);

		if (n)
			log_notice("policy %s: %u permits and probes no live client row holds "
				   "freed by uid %u",
				   name, n, (unsigned)p->uid);
	}
	r = resil_policy_force(&x, rec, state);
	if (!strcmp(verb, "resetting") && resil_has(rec, RESIL_C_BUDGET)) {
		/* a retry budget of its own: full again */
		resil_budget_reset(resil_comp_state(&d->seg, rec, RESIL_C_BUDGET),
				   &rec->conf.retry);
		if (r == -ENODATA)
			r = 0;
	}
	if (r == -ENODATA && !strcmp(verb, "resetting") &&
	    (resil_has(rec, RESIL_C_BULKHEAD) || resil_has(rec, RESIL_C_ADAPTIVE)))
		r = 0; /* nothing to close: the reset was the permits' */
	if (r == -ENODATA)
		return reply_error(rp, -EINVAL, "policy %s has no circuit breaker%s", name,
				   !strcmp(verb, "resetting")
				       ? ", retry budget of its own, bulkhead or adaptive limit"
				       : "");
	if (r < 0)
		return reply_error(rp, r, "cannot force policy %s: %s", name, strerror(-r));
	log_notice("policy %s: %s (%s) by uid %u (pid %d)", name, verb,
		   resil_breaker_state_name(state), (unsigned)p->uid, (int)p->pid);
	fill_info(d, rec, in);
	rp->resp.body_case = RESIL__RESPONSE__BODY_POLICY;
	rp->resp.policy = &in->h.pi;
	return 0;
}

/* The target as an enum; reset: closed, and the unregistered permits freed. */
static int handle_force(struct resild *d, const struct resild_peer *p, const Resil__ForceState *f,
			struct reply *rp, struct info *in)
{
	switch (f->target) {
	case RESIL__BREAKER_STATE__BREAKER_NONE:
		if (f->reset)
			return force_state(d, p, f->name, RESIL_STATE_CLOSED, "resetting", rp, in);
		return reply_error(rp, -EINVAL,
				   "no target state (expected closed, open, "
				   "disabled or metrics-only, or reset)");
	case RESIL__BREAKER_STATE__BREAKER_CLOSED:
		return force_state(d, p, f->name, RESIL_STATE_CLOSED,
				   f->reset ? "resetting" : "forcing", rp, in);
	case RESIL__BREAKER_STATE__BREAKER_OPEN:
	case RESIL__BREAKER_STATE__BREAKER_FORCED_OPEN:
	case RESIL__BREAKER_STATE__BREAKER_DISABLED:
	case RESIL__BREAKER_STATE__BREAKER_METRICS_ONLY:
		if (f->reset)
			return reply_error(rp, -EINVAL,
					   "a reset closes the breaker: no other "
					   "target state with it");
		return force_state(d, p, f->name,
				   f->target == RESIL__BREAKER_STATE__BREAKER_DISABLED
				       ? RESIL_STATE_DISABLED
				   : f->target == RESIL__BREAKER_STATE__BREAKER_METRICS_ONLY
				       ? RESIL_STATE_METRICS_ONLY
				       : RESIL_STATE_FORCED_OPEN,
				   "forcing", rp, in);
	default:
		return reply_error(rp, -EINVAL,
				   "target state %d cannot be forced (expected closed, open, "
				   "disabled or metrics-only)",
				   (int)f->target);
	}
}

static int handle_subscribe(struct resild *d, struct resild_peer *p, const Resil__Subscribe *s,
			    struct reply *rp)
{
	if (s->n_names > RESILD_SUB_NAMES)
		return reply_error(rp, -E2BIG, "at most %d policy names per subscription",
				   RESILD_SUB_NAMES);
	for (size_t i = 0; i < s->n_names; i++)
		if (check_name(s->names[i], rp) < 0)
			return -EINVAL;
	if (!p->subscriber) {
		if (d->nsubscribers >= RESILD_SUBSCRIBERS_MAX)
			return reply_error(rp, -EUSERS, "too many subscribers (at most %d at once)",
					   RESILD_SUBSCRIBERS_MAX);
		d->nsubscribers++;
		p->subscriber = true;
	}
	p->nsub_names = (uint32_t)s->n_names;
	for (size_t i = 0; i < s->n_names; i++)
		snprintf(p->sub_names[i], RESIL_NAME_MAX, "%s", s->names[i]);
	return 0;
}

bool resild_peer_wants(const struct resild_peer *p, const char *policy)
{
	if (!p->subscriber)
		return false;
	if (p->nsub_names == 0)
		return true;
	for (uint32_t i = 0; i < p->nsub_names; i++)
		if (policy && strcmp(p->sub_names[i], policy) == 0)
			return true;
	return false;
}

void resild_peer_gone(struct resild *d, struct resild_peer *p)
{
	if (p->subscriber && d->nsubscribers)
		d->nsubscribers--;
	p->subscriber = false;
}

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
	   "Client rows naming a process resild cannot see (another pid namespace): kept, what "
	   "they hold stays held.",
	   RESIL_MT_GAUGE, resil_mv_uint(h->cs.unknown));
	m1(k, "resil_client_rows_refused_total",
	   "Client rows freed: claimed without a connection for no process tied to a client.",
	   RESIL_MT_COUNTER, resil_mv_uint(h->cs.refused));
	m1(k, "resil_permits_stray_freed_total",
	   "Permits freed: held by an id naming no live client row.", RESIL_MT_COUNTER,
	   resil_mv_uint(h->cs.stray_freed));
	m1(k, "resil_permits_unregistered",
	   "Permits held by processes without a client row (freed by an operator's reset only).",
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

/*
 * A Metrics reply's families of samples, built from the producers' calls (a
 * sink): everything lives in chunks of one list, strings copied, freed
 * together by psink_free(). A sample joins the family of its name (the
 * cluster's families give their HELP and TYPE first, their samples later,
 * per policy).
 */
struct pchunk {
	struct pchunk *next;
	size_t used, cap;
	alignas(16) char mem[];
};

struct pfam {
	Resil__MetricFamily f; /* first: a Resil__MetricFamily * is a struct pfam * */
	size_t cap;
};

struct psink {
	struct resil_msink sink;
	struct pchunk *chunks;
	struct pfam **fams;
	size_t nfam, famcap;
	bool oom;
};

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

static void psink_free(struct psink *p)
{
	while (p->chunks) {
		struct pchunk *c = p->chunks;

		p->chunks = c->next;
		free(c);
	}
}

/* Families of samples, the text rendered by the asker (as many families
 * as fit in a reply; truncated when some were left off). */
static int handle_metrics(struct resild *d, struct reply *rp, Resil__MetricsReply *mr,
			  struct psink *ps)
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

/* A reload asked through the socket: what SIGHUP does, with the result in
 * the answer (the first error with FILE:LINE) rather than in the log only.
 * The daemon's own uid (ExecReload= runs as it), root and the admin group
 * may ask: a reload is cheap, but not for anyone to repeat at will. */
static int handle_reload(struct resild *d, const struct resild_peer *peer, struct reply *rp,
			 Resil__ReloadReply *rr)
{
	if (!resild_peer_exempt(d, peer))
		return reply_error(
		    rp, -EPERM, "a reload takes root, the daemon's user%s%s (or SIGHUP to resild)",
		    d->has_admin_gid ? " or group " : "",
		    d->has_admin_gid ? d->opts.admin_group : "");
	log_info("reload asked by pid %d (uid %u)", (int)peer->pid, (unsigned)peer->uid);
	rr->applied = resild_reload(d) == 0;
	rr->message = d->reload_msg;
	if (d->reload_retry_until)
		rr->message = (char *)"not applied yet: the records it needs come free within "
				      "2 s, then it applies (resilctl status says when)";
	rr->policies = d->files ? (uint32_t)d->files->n : 0;
	rp->resp.body_case = RESIL__RESPONSE__BODY_RELOAD;
	rp->resp.reload = rr;
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

static int handle_status(struct resild *d, struct reply *rp, Resil__StatusReply *sr, void **to_free)
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

int resild_handle(struct resild *d, struct resild_peer *peer, const uint8_t *msg, size_t len,
		  uint8_t *out, size_t *outlen, int *fds, int *nfds)
{
	Resil__Request *req;
	struct reply rp = {.resp = RESIL__RESPONSE__INIT};
	Resil__HelloReply hr = RESIL__HELLO_REPLY__INIT;
	Resil__GetSegmentsReply sr = RESIL__GET_SEGMENTS_REPLY__INIT;
	Resil__ListReply lr = RESIL__LIST_REPLY__INIT;
	Resil__MetricsReply mr = RESIL__METRICS_REPLY__INIT;
	struct psink ps = {0};
	Resil__ReloadReply rr = RESIL__RELOAD_REPLY__INIT;
	Resil__StatusReply str = RESIL__STATUS_REPLY__INIT;
	struct info *in = NULL;
	void *to_free[4] = {NULL, NULL, NULL, NULL};
	size_t cap = *outlen;
	int r, ret = 0;

	*nfds = 0;
	if (len > RESILD_MSG_MAX) {
		r = resild_error_reply(0, -EMSGSIZE, "request larger than 64 KiB", out, outlen);
		return r < 0 ? r : RESILD_HANDLE_CLOSE;
	}
	req = resil__request__unpack(NULL, len, msg);
	if (!req) {
		r = resild_error_reply(0, -EBADMSG, "malformed request (not a resil.Request)", out,
				       outlen);
		return r < 0 ? r : RESILD_HANDLE_CLOSE;
	}
	rp.resp.id = req->id;
	rp.version = req->version ? req->version : 1;
	rp.wait_until = peer->wait_until;
	peer->later_ns = 0;
	if (rp.version > RESILD_PROTO_VERSION) {
		reply_error(&rp, -EPROTONOSUPPORT,
			    "protocol version %u not spoken here (resild speaks %d..%d)",
			    rp.version, RESILD_PROTO_MIN, RESILD_PROTO_VERSION);
		goto send;
	}
	d->requests[rp.version]++;
	in = malloc(sizeof(*in));
	if (!in) {
		reply_error(&rp, -ENOMEM, "out of memory");
		goto send;
	}

	switch (req->body_case) {
	case RESIL__REQUEST__BODY_HELLO:
		handle_hello(d, req->hello, &rp, &hr);
		break;
	case RESIL__REQUEST__BODY_GET_SEGMENTS:
		handle_segments(d, peer, req->get_segments, &rp, &sr, fds, nfds);
		break;
	case RESIL__REQUEST__BODY_LIST:
		handle_list(d, req->list, &rp, &lr, to_free);
		break;
	case RESIL__REQUEST__BODY_GET:
		handle_get(d, req->get, &rp, in);
		break;
	case RESIL__REQUEST__BODY_DEFINE:
		if (req->define->declare)
			handle_declare(d, peer, req->define, &rp, in);
		else
			handle_define(d, peer, req->define->name, req->define->config,
				      req->define->merge, req->define->must_not_exist, &rp, in);
		break;
	case RESIL__REQUEST__BODY_REVERT:
		handle_revert(d, peer, req->revert, &rp, in);
		break;
	case RESIL__REQUEST__BODY_DELETE:
		handle_delete(d, peer, req->delete_->name, &rp);
		break;
	case RESIL__REQUEST__BODY_FORCE:
		handle_force(d, peer, req->force, &rp, in);
		break;
	case RESIL__REQUEST__BODY_SUBSCRIBE:
		handle_subscribe(d, peer, req->subscribe, &rp);
		break;
	case RESIL__REQUEST__BODY_METRICS:
		handle_metrics(d, &rp, &mr, &ps);
		break;
	case RESIL__REQUEST__BODY_RELOAD:
		handle_reload(d, peer, &rp, &rr);
		break;
	case RESIL__REQUEST__BODY_STATUS:
		handle_status(d, &rp, &str, &to_free[0]);
		break;
	default:
		reply_error(&rp, -EOPNOTSUPP, "unknown request");
		break;
	}
	if (rp.later_ns) {
		/* answered later (a define waiting for space): nothing sent */
		peer->later_ns = rp.later_ns;
		*outlen = 0;
		ret = RESILD_HANDLE_LATER;
		goto out;
	}
send:
	r = pack(&rp.resp, out, outlen);
	if (r == -E2BIG) {
		*outlen = cap;
		r = resild_error_reply(req->id, -E2BIG, "reply larger than 64 KiB", out, outlen);
	}
	if (r < 0) {
		ret = r;
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
	}
out:
	resil__request__free_unpacked(req, NULL);
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(to_free); i++)
		free(to_free[i]);
	psink_free(&ps);
	free(in);
	return ret;
}

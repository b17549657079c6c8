/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - the control protocol: one Request in, one Response out.
 *
 * resild_handle unpacks the request, checks its version and calls the
 * handler of its body: hello, segments, subscribe and reload here; get and
 * list in ctl_info.c; define, declare, revert, delete and force in
 * ctl_policy.c; metrics and status in ctl_status.c. Here too what they
 * share (ctl_priv.h): the reply and its errors, the lookup (find_or_fail)
 * and the authorization checks (may_change, may_create, may_take_state).
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
 * Replies never exceed RESILD_MSG_MAX: a list page stops early (more =
 * true), metrics stop at a family (truncated = true), anything else that
 * would not fit becomes an E2BIG error.
 *
 * Protocol versions (proto/resil.proto): every Request names its version
 * (0: version 1); one past RESILD_PROTO_VERSION is refused. Requests are
 * counted by version (resil_control_requests_total).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "cluster.h"
#include "counts.h"
#include "ctl.h"
#include "log.h"
#include "owners.h"
#include "stats.h"
#include "seg_records.h"

#include "ctl_priv.h"

/* Every enum this file, ctl_*.c and events.c cast into the protocol is
 * its list's (names.h), and so are the daemon's own. */
RESIL_NAMES_PROTO_CHECK
RESIL_NAMES_DAEMON_CHECK

int reply_error(struct reply *rp, int err, const char *fmt, ...)
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

bool may_change_ok(struct resild *d, const struct resild_peer *p, const struct resil_rec *rec)
{
	return p->uid == 0 || p->uid == rec->owner_uid ||
	       (d->has_admin_gid && peer_in_group(p, d->admin_gid));
}

/* May this peer change or delete rec? 0 or -EPERM with the rule in words. */
int may_change(struct resild *d, const struct resild_peer *p, const struct resil_rec *rec,
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
int may_take_state(struct resild *d, const struct resild_peer *p, uint32_t uid, const char *name,
		   const struct resil_conf *c, struct reply *rp)
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
int may_create(struct resild *d, const struct resild_peer *p, const char *name, struct reply *rp)
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

const struct resil_rec *find(struct resild *d, const char *name, uint64_t *word)
{
	uint64_t w;
	uint32_t slot;

	if (!name || resil_seg_lookup(&d->seg, name, &slot, &w) < 0)
		return NULL;
	if (word)
		*word = w;
	return resil_seg_rec_of(&d->seg, w);
}

int check_name(const char *name, struct reply *rp)
{
	char err[256];

	if (resild_name_check(name, err, sizeof(err)) < 0)
		return reply_error(rp, -EINVAL, "%s", err);
	return 0;
}

const struct resil_rec *find_or_fail(struct resild *d, const char *name, struct reply *rp)
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

/* A process's count table for its row (counts.c); the descriptor is
 * ours to close either way (the mapping keeps what it needs). */
static int handle_count_table(struct resild *d, struct resild_peer *peer, struct reply *rp)
{
	char err[200] = "";
	int r = resild_counts_attach(d, peer, peer->rx_fd, err, sizeof(err));

	if (peer->rx_fd >= 0)
		close(peer->rx_fd);
	peer->rx_fd = -1;
	if (r < 0)
		return reply_error(rp, r, "count table not taken: %s", err);
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
	case RESIL__REQUEST__BODY_COUNT_TABLE:
		handle_count_table(d, peer, &rp);
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

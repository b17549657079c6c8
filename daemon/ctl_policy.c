/* SPDX-License-Identifier: MIT */
/*
 * ctl_policy.c - the control protocol's writes: define, declare, revert,
 * delete and force.
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
 * (breaker state, an atomic store clients read). Who may write is
 * decided by ctl.c's checks (may_change, may_create, may_take_state).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "cluster.h"
#include "log.h"
#include "owners.h"
#include "policy.h"
#include "seg_records.h"
#include "stats.h"
#include "budget.h"

#include "ctl_priv.h"

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
int handle_define(struct resild *d, const struct resild_peer *p, const char *name, const char *text,
		  bool update, bool exclusive, struct reply *rp, struct info *in)
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

int handle_delete(struct resild *d, const struct resild_peer *p, const char *name, struct reply *rp)
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
int handle_declare(struct resild *d, const struct resild_peer *p, const Resil__Define *df,
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
int handle_revert(struct resild *d, const struct resild_peer *p, const Resil__Revert *rv,
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
int handle_force(struct resild *d, const struct resild_peer *p, const Resil__ForceState *f,
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

/* SPDX-License-Identifier: MIT */
/*
 * pending.c - libresil before (or without) resild: the pair of segments a
 * pending handle decides on, and what goes in it.
 *
 * A handle opened with RESIL_OPEN_PENDING that finds no daemon maps a
 * pair of its own instead (r->local, created here as embedded mode
 * creates one, but private to the process: a forked child makes its own)
 * and makes it r->cur: every decision is then the ordinary one, on the
 * ordinary hot path, against that pair. So a pending handle costs the
 * attached path nothing, and the move to resild is the re-attach that a
 * daemon restart already does (attach.c): a new mapping published in
 * r->cur, handles re-resolving by name, permits released into the
 * mapping they came from (mappings stay until resil_close).
 *
 * What the local pair holds, per name:
 *   - a declared policy (resil_define), as its policy.fallback says:
 *     local, the declared policy itself (policy.scope = global decides as
 *     fleet: no lease to follow here; a retry.budget = @NAME nobody
 *     declared here is left out); admit, the counters alone; reject, the
 *     counters and a breaker forced open (RESIL_REJECT_OPEN);
 *   - a name asked for (resil_policy) but never declared while pending:
 *     the counters alone (admit), not remembered, so that a policy from
 *     resild's files does not stop a worker while resild is away. Once
 *     attached, such a name is what resild says (-ENOENT if unknown).
 * After attaching, the pair stays: a definition resild did not take
 * (unreachable, or refused) goes on deciding there (libresil.c, lookup),
 * and a pending process's counters stay readable there
 * (resil_policy_pending_stats) and are told to resild with the next
 * definition (attach.c, reattach).
 *
 * Shared-memory words: the local pair is this process's; its define lock
 * (st->define_lock, as embedded mode's) is taken by the one definer.
 * Crash window: none beyond the process (nobody else maps the pair; a
 * child forked while a definition runs rebuilds its own from r->defs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "internal.h"
#include "stats.h"
#include "seg_records.h"

/* A pending process's own pair: policies it declares (and placeholders),
 * its own row (a forked child makes its own pair), a small ring. State
 * pages cost nothing until a policy touches them. */
#define LOCAL_SLOTS   512
#define LOCAL_CLIENTS 4
#define LOCAL_EVENTS  256

/* Does s hold a live policy NAME? */
static bool has(const struct resil_seg *s, const char *name)
{
	uint64_t word;

	return resil_seg_lookup(s, name, NULL, &word) == 0 && resil_seg_rec_of(s, word);
}

struct resil_def *resil_priv_def_find(struct resil *r, const char *name)
{
	for (struct resil_def *d = r->defs; d; d = d->next)
		if (strcmp(d->name, name) == 0)
			return d;
	return NULL;
}

/* conf as the local pair decides it (see above). */
static void local_conf(const struct resil_seg *s, struct resil_conf *c)
{
	if (c->scope == RESIL_SCOPE_GLOBAL) {
		c->scope = RESIL_SCOPE_FLEET;
		c->limit.global = 0;
	}
	if (c->retry.budget_kind == RESIL_BUDGET_SHARED) {
		char bname[RESIL_NAME_MAX];

		snprintf(bname, sizeof(bname), "@%.*s", (int)sizeof(c->retry.budget_name),
			 c->retry.budget_name);
		if (!has(s, bname)) {
			c->retry.budget_kind = RESIL_BUDGET_NONE;
			memset(c->retry.budget_name, 0, sizeof(c->retry.budget_name));
		}
	}
	if (c->fallback == RESIL_FALLBACK_LOCAL && resil_conf_check(c, NULL, 0) == 0)
		return;
	/* admit, reject: the counters (and reject's breaker) alone; the
	 * retry rules stay (resil_call's attempts), not a budget */
	c->limit.on = 0;
	c->bulkhead.on = 0;
	c->adaptive.on = 0;
	c->shed.on = 0;
	c->histogram = 0;
	c->retry.budget_kind = RESIL_BUDGET_NONE;
	memset(c->retry.budget_name, 0, sizeof(c->retry.budget_name));
	if (c->fallback != RESIL_FALLBACK_REJECT) {
		c->breaker.on = 0;
	} else if (!c->breaker.on) {
		struct resil_conf d;

		resil_conf_init(&d);
		c->breaker = d.breaker;
		c->breaker.on = 1;
	}
}

static int local_put(struct resil *r, struct resil_map *m, const char *name,
		     const struct resil_conf *c, char *why, size_t len)
{
	int err = resil_priv_define_lock(m->seg);

	if (err < 0) {
		snprintf(why, len, "the define lock of the local segments is held");
		return err;
	}
	err = resil_seg_define(m->seg, name, c, r->uid, 0, resil_now(r), why, len);
	resil_priv_define_unlock(m->seg);
	if (err < 0)
		return err;
	if (c->fallback == RESIL_FALLBACK_REJECT) {
		const struct resil_rec *rec;
		struct resil_ctx x;
		uint64_t word;

		if (resil_seg_lookup(m->seg, name, NULL, &word) < 0 ||
		    !(rec = resil_seg_rec_of(m->seg, word)))
			return -ENOENT;
		resil_priv_fill_ctx(r, m, &x);
		x.rec = rec;
		err = resil_policy_force(&x, rec, RESIL_STATE_FORCED_OPEN);
	}
	return err < 0 ? err : 0;
}

static int define_in(struct resil *r, struct resil_map *m, const char *name, const char *config,
		     char *why, size_t len)
{
	struct resil_conf c;
	int err;

	resil_conf_init(&c);
	err = resil_conf_parse(&c, config, 1, why, len);
	if (err < 0)
		return err;
	local_conf(m->seg, &c);
	return local_put(r, m, name, &c, why, len);
}

static int placeholder_in(struct resil *r, struct resil_map *m, const char *name)
{
	struct resil_conf c;
	char why[256];

	resil_conf_init(&c);
	c.fallback = RESIL_FALLBACK_ADMIT;
	return local_put(r, m, name, &c, why, sizeof(why));
}

int resil_priv_local_define(struct resil *r, const char *name, const char *config, char *why,
			    size_t len)
{
	int err = r->local ? 0 : resil_priv_local_open(r);

	if (err < 0) {
		snprintf(why, len, "cannot create this process's own segments: %s",
			 strerror(-err));
		return err;
	}
	return define_in(r, r->local, name, config, why, len);
}

int resil_priv_local_placeholder(struct resil *r, const char *name)
{
	return r->local ? placeholder_in(r, r->local, name) : -ENOENT;
}

/*
 * A fresh pair for this process: at a pending open, when a definition
 * finds no daemon after the process attached, and in a forked child of a
 * process that has one (the parent's pair is the parent's: a child
 * deciding in it would share a "per process" policy, and its permits
 * would outlive it there with nobody to reclaim them). Every remembered
 * definition goes in (a definition that does not fit is left to the
 * daemon), and a placeholder for every handle of a name not declared.
 * While pending the new pair becomes r->cur (release: a decision that
 * sees it sees it whole); the pair it replaces stays mapped on r->locals
 * (permits taken there are released there).
 */
int resil_priv_local_open(struct resil *r)
{
	struct resil_seg_params sp = {
	    .slots = LOCAL_SLOTS,
	    .clients = LOCAL_CLIENTS,
	    .events = LOCAL_EVENTS,
	    .state_size = RESIL_STATE_SIZE_DEFAULT,
	};
	struct resil_map *m;
	bool pending = !r->mapped || resil_priv_pending(r);
	char why[256];
	int err;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->seg = &m->own;
	err = resil_seg_create(m->seg, &sp);
	if (err < 0) {
		free(m);
		return err;
	}
	m->local = true;
	m->tag = m->seg->cfg->epoch;
	m->seq = r->next_seq++;
	atomic_store_explicit(&m->row, -1, memory_order_relaxed);
	resil_priv_claim_row(r, m, 0);
	for (struct resil_def *d = r->defs; d; d = d->next)
		(void)define_in(r, m, d->name, d->text, why, sizeof(why));
	for (struct resil_policy *p = r->policies; p; p = p->next)
		if (!has(m->seg, p->name))
			(void)placeholder_in(r, m, p->name);
	m->next_local = ld_relaxed(&r->locals);
	st_release(&r->locals, m);
	r->local = m;
	r->mapped = true;
	if (pending) {
		/* every decision looks whether a look for resild is due (one
		 * that reads no clock too: a coarse reading) */
		st_relaxed(&r->clockless_mask, 0);
		st_release(&r->cur, m);
	}
	return 0;
}

RESIL_API int resil_attached(const resil_t *r)
{
	if (!r)
		return -EINVAL;
	if (r->embedded || !r->mapped)
		return 0;
	return !resil_priv_pending(r);
}

RESIL_API int resil_policy_pending_stats(const resil_policy_t *p, struct resil_pending_stats *st)
{
	struct resil *r;

	if (!p || !st)
		return -EINVAL;
	r = p->r;
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&r->lock);
	(void)resil_priv_local_counts(r, p->name, &st->admitted, &st->rejected);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

bool resil_priv_local_counts(struct resil *r, const char *name, uint64_t *admitted,
			     uint64_t *rejected)
{
	const struct resil_rec *rec;
	uint64_t v[RESIL_STAT__MAX], word;
	const void *st;

	if (!r->local || resil_seg_lookup(r->local->seg, name, NULL, &word) < 0)
		return false;
	rec = resil_seg_rec_of(r->local->seg, word);
	st = rec ? resil_stats_state_of(r->local->seg, rec) : NULL;
	if (!st)
		return false;
	resil_stats_read_all(st, v);
	*admitted = v[RESIL_STAT_SUCCESS] + v[RESIL_STAT_FAILURE] + v[RESIL_STAT_IGNORED];
	*rejected = v[RESIL_STAT_REJ_OPEN] + v[RESIL_STAT_REJ_FULL] + v[RESIL_STAT_REJ_LIMITED] +
		    v[RESIL_STAT_REJ_SHED] + v[RESIL_STAT_REJ_BUDGET];
	return true;
}

int resil_priv_attach_try(struct resil *r)
{
	(void)resil_priv_liveness(r, RESIL_PROBE_HOT_MS);
	return !resil_priv_pending(r);
}

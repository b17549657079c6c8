/* SPDX-License-Identifier: MIT */
/*
 * force.c - breaker control (resil_force_state, resil_reset: a request to
 * the daemon, or in embedded mode a write into the state block) and what
 * a handle says of its policy (its state, its keys, its outcome
 * mappings).
 *
 * Shared-memory words this file touches: the breaker's state word and a
 * retry budget's, through resil_policy_force and resil_budget_reset
 * (shm/), which say their orders and crash windows.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "budget.h"
#include "conf.h"
#include "binding.h"
#include "internal.h"
#include "bulkhead.h"
#include "stats.h"
#include "limit.h"
#include "resil.pb-c.h"

/* ---- outcomes ---- */

/* Without a policy (NULL, or deleted) the usual mapping is the breaker's
 * own without overrides: one mapping, wherever it is asked for. */

RESIL_API int resil_outcome_http(const resil_policy_t *p, int status)
{
	struct resil_ctx x;
	const struct resil_rec *rec;
	int err = 0;

	if (status < 100 || status > 999)
		return -EINVAL;
	if (!p)
		return resil_breaker_outcome_http(NULL, status);
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return resil_breaker_outcome_http(NULL, status);
	return resil_breaker_outcome_http(&rec->conf.breaker, status);
}

RESIL_API int resil_outcome_errno(const resil_policy_t *p, int e)
{
	struct resil_ctx x;
	const struct resil_rec *rec;
	int err = 0;

	if (!p)
		return resil_breaker_outcome_errno(NULL, e);
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return resil_breaker_outcome_errno(NULL, e);
	return resil_breaker_outcome_errno(&rec->conf.breaker, e < 0 ? -e : e);
}

/* ---- breaker control ---- */

static const char *force_word(int state)
{
	switch (state) {
	case RESIL_STATE_CLOSED:
		return "closed";
	case RESIL_STATE_OPEN:
	case RESIL_STATE_FORCED_OPEN:
		return "open";
	case RESIL_STATE_DISABLED:
		return "disabled";
	case RESIL_STATE_METRICS_ONLY:
		return "metrics-only";
	}
	return NULL;
}

/* Embedded: apply directly to the current state block (reset: a
 * resil_reset, which fills a retry budget again too). */
static int embedded_force(struct resil *r, const char *name, int state, bool reset)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	uint32_t slot;
	uint64_t word;
	int err;

	err = resil_seg_lookup(&r->seg, name, &slot, &word);
	if (err < 0)
		return err;
	rec = resil_seg_rec_of(&r->seg, word);
	if (!rec)
		return -ENOENT;
	/* a reset fills a retry budget of its own again, as resild's */
	if (reset && resil_has(rec, RESIL_C_BUDGET)) {
		resil_budget_reset(resil_comp_state(&r->seg, rec, RESIL_C_BUDGET),
				   &rec->conf.retry);
		if (!resil_has(rec, RESIL_C_BREAKER))
			return 0;
	}
	if (!resil_has(rec, RESIL_C_BREAKER)) {
		resil_priv_seterr("policy %s has no breaker", name);
		return -EOPNOTSUPP;
	}
	fill_ctx(r, &r->map0, &x);
	x.rec = rec;
	/* every process's copy too under policy.scope = process, as resild does */
	return resil_policy_force(&x, rec, state);
}

/* Force name's breaker to state, or reset it (state CLOSED, its window
 * and counters cleared): in the segment in embedded mode, else through
 * resild, whose answer the handle then follows. */
static int force(resil_t *r, const char *name, int state, bool reset)
{
	int err;

	fork_check(r);
	pthread_mutex_lock(&r->lock);
	if (r->embedded) {
		err = embedded_force(r, name, state, reset);
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__ForceState fs = RESIL__FORCE_STATE__INIT;

		fs.name = (char *)name;
		if (reset)
			fs.reset = true;
		else /* RESIL_STATE_* plus one: proto/resil.proto's BreakerState */
			fs.target = (Resil__BreakerState)(state + 1);
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &fs;
		err = resil_priv_simple_request(r, &req, NULL);
		if (err == 0)
			(void)resil_priv_follow(r);
	}
	pthread_mutex_unlock(&r->lock);
	return err < 0 ? err : 0;
}

RESIL_API int resil_force_state(resil_t *r, const char *name, int state)
{
	const char *word = force_word(state);

	resil_priv_clearerr();
	if (!r || !resil_priv_valid_name(name) || !word)
		return -EINVAL;
	if (state == RESIL_STATE_OPEN)
		state = RESIL_STATE_FORCED_OPEN;
	return force(r, name, state, false);
}

RESIL_API int resil_reset(resil_t *r, const char *name)
{
	resil_priv_clearerr();
	if (!r || !resil_priv_valid_name(name))
		return -EINVAL;
	return force(r, name, RESIL_STATE_CLOSED, true);
}

RESIL_API int resil_policy_state(const resil_policy_t *p)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	int err = -ENOENT;

	if (!p)
		return -EINVAL;
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return err;
	if (!resil_has(rec, RESIL_C_BREAKER))
		return RESIL_STATE_CLOSED;
	/* the breaker this process decides on: its own copy under
	 * policy.scope = process, the fleet's otherwise; as a decision would
	 * find it (a probe held past half_open_max_wait has sent it back to
	 * OPEN: embedded mode has no tick that would) */
	return resil_policy_breaker_settle(&x, rec);
}

RESIL_API int resil_policy_keyed(const resil_policy_t *p)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	int err = -ENOENT;

	if (!p)
		return -EINVAL;
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return err;
	return resil_has(rec, RESIL_C_LIMIT) && rec->conf.limit.keys != 0;
}

RESIL_API const char *resil_policy_name(const resil_policy_t *p)
{
	return p ? p->name : "";
}

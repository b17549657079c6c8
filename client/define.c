/* SPDX-License-Identifier: MIT */
/*
 * define.c - declaring policies: resil_define, resil_delete,
 * resil_config_check; in daemon mode a Define or Delete request (what
 * the daemon did not take is remembered, pending.c), in embedded mode a
 * write into the segments under the define lock.
 *
 * Shared-memory words this file touches:
 *   - st->define_lock (embedded): 0 free, else the holder's pid; taken by
 *     CAS acquire, released by a release store, so what the holder wrote
 *     into the directory and records is visible to the next holder. Its
 *     crash window and repair: resil_priv_define_lock below.
 *   - slot words and records: written by resil_seg_define (seg.c), which
 *     publishes a record by one slot-word store after it is whole.
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
#include "seg_records.h"

/* ---- embedded define lock ---- */

/*
 * st->define_lock: 0 free, else the pid of the process defining. Taken by
 * CAS (acquire), released by a store (release).
 * Crash window: the holder is killed between taking and releasing it. The
 * word then names a dead pid: a waiter that finds the holder gone
 * (kill(pid, 0) == ESRCH) takes the lock over by CAS from that pid. What
 * the dead holder left half-done in resil_seg_define is that function's
 * own crash window: a record is published by one slot-word store after it
 * is whole, so readers see the old or the new configuration, never a mix.
 */
int resil_priv_define_lock(struct resil_seg *s)
{
	ra32 *w = &s->st->define_lock;
	uint32_t me = (uint32_t)getpid();
	int64_t deadline = 0;

	for (unsigned spins = 0;; spins++) {
		uint32_t cur = 0;
		struct timespec ts;

		if (cas_acq_rel(w, &cur, me))
			return 0;
		if (cur == me)
			return -EDEADLK; /* cannot happen under r->lock; never spin on it */
		if (spins % 64 == 63) {
			if (kill((pid_t)cur, 0) < 0 && errno == ESRCH) {
				if (cas_acq_rel(w, &cur, me))
					return 0;
				continue;
			}
			clock_gettime(CLOCK_MONOTONIC, &ts);
			if (!deadline)
				deadline = ts.tv_sec + 10;
			else if (ts.tv_sec > deadline)
				return -ETIMEDOUT;
			ts.tv_sec = 0;
			ts.tv_nsec = 1000000;
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
	}
}

void resil_priv_define_unlock(struct resil_seg *s)
{
	st_release(&s->st->define_lock, 0);
}

static int define_lock(struct resil *r)
{
	return resil_priv_define_lock(&r->seg);
}

static void define_unlock(struct resil *r)
{
	resil_priv_define_unlock(&r->seg);
}

/* ---- control requests (daemon mode) ---- */

int resil_priv_simple_request(struct resil *r, Resil__Request *req, Resil__Response **keep)
{
	Resil__Response *resp = NULL;
	int err;

	err = resil_priv_request(r, req, &resp, NULL, NULL);
	if (err < 0)
		return err;
	if (keep)
		*keep = resp;
	else
		resil__response__free_unpacked(resp, NULL);
	return 0;
}

bool resil_priv_valid_name(const char *name)
{
	size_t n;

	if (!name)
		return false;
	n = strlen(name);
	return n > 0 && n < RESIL_NAME_MAX;
}

/* Declare NAME (create it, or re-define it when it exists with another
 * configuration: one Define, an upsert, one round trip; resild keeps it
 * beneath a file's configuration or an operator's change). d: what this
 * process remembers of it, whose pending decisions not yet told go with
 * it; NULL: none. */
int resil_priv_send_define(struct resil *r, const char *name, const char *config,
			   struct resil_def *d)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;
	uint64_t adm = 0, rej = 0;
	int err;

	df.name = (char *)name;
	df.config = (char *)config;
	df.declare = true;
	if (d && resil_priv_local_counts(r, name, &adm, &rej)) {
		df.pending_admitted = adm - d->reported_admitted;
		df.pending_rejected = rej - d->reported_rejected;
	}
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	err = resil_priv_simple_request(r, &req, NULL);
	if (d && err == 0) {
		d->reported_admitted = adm;
		d->reported_rejected = rej;
	}
	return err;
}

/* Remember (or forget, config NULL) what this process defined, for a
 * daemon that starts fresh, and whether a daemon took it (state). Under
 * r->lock. An allocation failure only means that one definition is not
 * replayed. */
static void remember(struct resil *r, const char *name, const char *config,
		     enum resil_def_state state)
{
	struct resil_def **pp, *d;
	size_t len = config ? strlen(config) + 1 : 0;

	for (pp = &r->defs; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->name, name) == 0)
			break;
	}
	if (*pp && (*pp)->state == RESIL_DEF_UNSENT)
		r->unsent--;
	if (!config || (*pp && strcmp((*pp)->text, config) != 0)) {
		/* forget, or replace in place (definition order is kept: a
		 * named budget is defined before the policies naming it) */
		if (!*pp || !config) {
			if (*pp) {
				d = *pp;
				*pp = d->next;
				free(d);
			}
			return;
		}
		d = malloc(sizeof(*d) + len);
		if (!d)
			return;
		*d = **pp;
		memcpy(d->text, config, len);
		free(*pp);
		*pp = d;
	} else if (*pp) {
		d = *pp; /* same text */
	} else {
		d = calloc(1, sizeof(*d) + len);
		if (!d)
			return;
		strcpy(d->name, name);
		memcpy(d->text, config, len);
		*pp = d;
	}
	d->state = state;
	if (state == RESIL_DEF_UNSENT)
		r->unsent++;
}

bool resil_priv_unreachable(const struct resil *r, int err)
{
	return err < 0 && !r->replied;
}

/* resil_define while no daemon takes it (pending_ok): decided here
 * (pending.c), remembered, sent when resild is found. */
static int define_local(struct resil *r, const char *name, const char *config)
{
	char why[512] = "";
	int err = resil_priv_local_define(r, name, config, why, sizeof(why));

	if (err < 0) {
		resil_priv_seterr("policy %s: %s", name, why[0] ? why : strerror(-err));
		return err;
	}
	remember(r, name, config, RESIL_DEF_UNSENT);
	return 0;
}

/* A policy of nothing is a mistake (a setting that was not set), not a
 * request for the counters alone. */
static int conf_not_empty(const char *name, const char *config)
{
	if (!resil_conf_text_empty(config))
		return 0;
	resil_priv_seterr("policy %s: empty configuration: give at least one key "
			  "(e.g. breaker.failure_rate = 50, limit.rate = 100/s)",
			  name);
	return -EINVAL;
}

/* config parsed and checked into c as resil_define takes it; the reason
 * in resil_last_error() when it is not. */
static int conf_of(struct resil_conf *c, const char *config)
{
	char why[256] = "";
	int err;

	resil_conf_init(c);
	err = resil_conf_parse(c, config, 1, why, sizeof(why));
	if (err == 0)
		err = resil_conf_check(c, why, sizeof(why));
	if (err < 0)
		resil_priv_seterr("%s", why);
	return err;
}

RESIL_API int resil_config_check(const char *name, const char *config, unsigned flags)
{
	struct resil_conf c;
	int err;

	resil_priv_clearerr();
	if (!resil_priv_valid_name(name)) {
		resil_priv_seterr("a policy name is 1 to %d bytes", RESIL_NAME_MAX - 1);
		return -EINVAL;
	}
	if (flags & ~RESIL_CHECK_NO_WAIT)
		return -EINVAL;
	if (!config)
		return 0; /* the name alone */
	err = conf_not_empty(name, config);
	if (err == 0)
		err = conf_of(&c, config);
	if (err < 0)
		return err;
	if ((flags & RESIL_CHECK_NO_WAIT) && c.bulkhead.on && c.bulkhead.wait_ns > 0) {
		resil_priv_seterr("policy %s: bulkhead.wait makes an acquire sleep, which this "
				  "caller never does: leave it 0 (a full bulkhead rejects at once)",
				  name);
		return -EINVAL;
	}
	if ((flags & RESIL_CHECK_NO_WAIT) && c.limit.on && c.limit.wait_ns > 0) {
		resil_priv_seterr("policy %s: limit.wait makes an acquire sleep, which this "
				  "caller never does: leave it 0 (a limited call is rejected at "
				  "once, with its Retry-After)",
				  name);
		return -EINVAL;
	}
	return 0;
}

RESIL_API int resil_define(resil_t *r, const char *name, const char *config)
{
	int err;

	resil_priv_clearerr();
	if (!r || !resil_priv_valid_name(name) || !config)
		return -EINVAL;
	err = conf_not_empty(name, config);
	if (err < 0)
		return err;
	if (r->embedded) {
		struct resil_conf c;
		char why[256] = "";

		err = conf_of(&c, config);
		if (err < 0)
			return err;
		pthread_mutex_lock(&r->lock);
		for (int64_t until = 0;;) {
			int64_t ready = INT64_MAX, mono;
			struct timespec ts;

			err = define_lock(r);
			if (err < 0) {
				resil_priv_seterr("the define lock is held by a live process");
				break;
			}
			err = resil_seg_define(&r->seg, name, &c, r->uid, 0, resil_now(r), why,
					       sizeof(why));
			if (err == -EAGAIN)
				ready = resil_seg_next_free_ns(&r->seg, true);
			define_unlock(r);
			/* the records it needs wait out their grace period after
			 * earlier changes: wait for them, bounded, as resild
			 * waits for a create (the lock is not held meanwhile) */
			mono = resil_clock_monotonic(NULL);
			if (!until)
				until = mono + RESIL_DEFINE_WAIT_NS;
			if (err != -EAGAIN || ready > until)
				break;
			ts.tv_sec = ready / RESIL_NS_PER_S;
			ts.tv_nsec = ready % RESIL_NS_PER_S;
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		if (err < 0 && err != -EDEADLK && err != -ETIMEDOUT)
			resil_priv_seterr("%s", why);
		pthread_mutex_unlock(&r->lock);
		return err < 0 ? err : 0;
	}

	fork_check(r);
	pthread_mutex_lock(&r->lock);
	/* pending: attach first if resild is there now, so that its answer
	 * (a refusal too) is the caller's */
	if (r->pending_ok && !resil_priv_attach_try(r)) {
		err = define_local(r, name, config);
		pthread_mutex_unlock(&r->lock);
		return err;
	}
	err = resil_priv_send_define(r, name, config, NULL);
	if (err == 0) {
		remember(r, name, config, RESIL_DEF_SENT);
		/* the request may have reached a daemon with other segments
		 * than ours (a restart without the fd store): follow it, so a
		 * resil_policy() after this finds the name */
		(void)resil_priv_follow(r);
	} else if (r->pending_ok && resil_priv_unreachable(r, err)) {
		/* attached, and resild is away now: as pending, for this name */
		err = define_local(r, name, config);
	}
	pthread_mutex_unlock(&r->lock);
	return err;
}

RESIL_API int resil_delete(resil_t *r, const char *name)
{
	int err;

	resil_priv_clearerr();
	if (!r || !resil_priv_valid_name(name))
		return -EINVAL;
	fork_check(r);
	pthread_mutex_lock(&r->lock);
	if (r->embedded) {
		err = define_lock(r);
		if (err == 0) {
			err = resil_seg_delete(&r->seg, name);
			define_unlock(r);
		}
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__Delete d = RESIL__DELETE__INIT;

		d.name = (char *)name;
		req.body_case = RESIL__REQUEST__BODY_DELETE;
		req.delete_ = &d;
		if (r->pending_ok && resil_priv_pending(r)) {
			err = -ENOENT;
		} else {
			err = resil_priv_simple_request(r, &req, NULL);
			if (err == 0)
				(void)resil_priv_follow(r);
		}
		/* a definition this process made without resild: forgotten
		 * and gone from its own pair */
		if (r->local && (err == 0 || err == -ENOENT || resil_priv_unreachable(r, err))) {
			struct resil_def *d = resil_priv_def_find(r, name);

			if (d && d->state != RESIL_DEF_SENT && err != 0 &&
			    resil_priv_define_lock(r->local->seg) == 0) {
				err = resil_seg_delete(r->local->seg, name);
				resil_priv_define_unlock(r->local->seg);
			}
		}
		if (err == 0 || err == -ENOENT)
			remember(r, name, NULL, RESIL_DEF_SENT);
	}
	pthread_mutex_unlock(&r->lock);
	return err < 0 ? err : 0;
}

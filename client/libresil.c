/* SPDX-License-Identifier: MIT */
/*
 * libresil.c - the library's core: open (daemon or embedded), define,
 * handles, the hot path, fork, breaker control (the row, the segments
 * and daemon restarts: attach.c).
 *
 * Above 900 lines on purpose: the hot path (resil_acquire*, resil_release,
 * the lean decisions) and the handle binding it reads share static inline
 * helpers that must stay in one translation unit to be inlined even
 * without LTO. Daemon mode maps the daemon's memfds; embedded mode creates
 * the segment pair itself; either way an acquire is resil_policy_acquire
 * on the same segments. The hot path is a few loads (fork generation,
 * mapping, slot word against the handle's cached word) and the composite
 * decision of shm/policy.c: no syscall, no lock, no allocation; a changed
 * slot word or mapping sends the caller through resolve() under r->lock.
 * The design (the modes, the hot path, fork, permits) is
 * docs/internals/libresil.md.
 *
 * Shared-memory words this file touches:
 *   - slot words (config segment): the daemon / the embedded definer
 *     writes them (release) after the record they point at is whole; we
 *     load them with acquire so the record's contents are visible.
 *   - client rows: claimed by CAS in resil_client_claim (seg.c); released
 *     by resil_close of the process that claimed them, never by a child.
 *     Crash window: a process killed after its claim (with or without
 *     permits) leaves its row claimed; in daemon mode resild sees the pid
 *     die (pidfd) and reclaims the row and what it held. Embedded mode has
 *     no daemon: the rows and permits of a killed child stay claimed until
 *     the segments go away.
 *   - st->clients_full: fetch_add relaxed per unregistered decision; a
 *     statistic, ordered with nothing.
 *   - st->define_lock (embedded): 0 free, else the holder's pid; taken by
 *     CAS acquire, released by a release store, so what the holder wrote
 *     into the directory and records is visible to the next holder.
 *
 * Fork: pthread_atfork takes every handle's lock before fork and the child
 * handler bumps resil_priv_fork_gen; the hot path compares it with
 * r->fork_gen (a plain load) and the first call in the child claims the
 * child's own row before any permit is taken.
 *
 * Permits name the record they were granted under and its tag (the low 16
 * bits of its gen), so a release after a re-resolve, a deletion or a
 * re-attach frees what it holds in the block it came from; a release that
 * finds its record with another gen (or 0: the daemon is rewriting it)
 * drops, it never writes into another policy's block. The record is read
 * as a seqlock (gen before and after a copy).
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
#include "internal.h"
#include "bulkhead.h"
#include "stats.h"
#include "limit.h"
#include "resil.pb-c.h"

RESIL_STATIC_ASSERT(sizeof(struct resil_permit_priv) == sizeof(resil_permit_t),
		    "permit fits resil_permit_t");
RESIL_STATIC_ASSERT(alignof(resil_permit_t) >= alignof(struct resil_permit_priv),
		    "permit alignment");

ra32 resil_priv_fork_gen;

/* every open handle, for the fork handlers */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct resil *open_list;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static _Thread_local char errmsg[512];

RESIL_API const char *resil_last_error(void)
{
	return errmsg;
}

void resil_priv_seterr(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
}

/* ---- random: the per-thread generator of common.c ---- */

/* resil_random_epoch (common.h): a thread whose seed epoch differs
 * reseeds from getrandom; bumped in a forked child so children do not
 * draw their parent's sequence. */

uint64_t resil_priv_random(void)
{
	return resil_random_thread();
}

static uint64_t random_thread_fn(void *ctx)
{
	(void)ctx;
	return resil_random_thread();
}

/* The pairs a handle starts with: CLOCK_MONOTONIC (fn NULL), and the
 * per-thread generator. */
static const struct resil_clock clock_default = {NULL, NULL};
static const struct resil_random random_default = {random_thread_fn, NULL};

static void atfork_prepare(void)
{
	pthread_mutex_lock(&open_lock);
	for (struct resil *r = open_list; r; r = r->next_open)
		pthread_mutex_lock(&r->lock);
}

static void atfork_parent(void)
{
	for (struct resil *r = open_list; r; r = r->next_open)
		pthread_mutex_unlock(&r->lock);
	pthread_mutex_unlock(&open_lock);
}

static void atfork_child(void)
{
	/* relaxed: read by this (single) thread of the child only */
	faa_relaxed(&resil_priv_fork_gen, 1);
	faa_relaxed(&resil_random_epoch, 1);
	for (struct resil *r = open_list; r; r = r->next_open)
		pthread_mutex_unlock(&r->lock);
	pthread_mutex_unlock(&open_lock);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

RESIL_COLD void resil_priv_after_fork(struct resil *r)
{
	uint32_t g;

	pthread_mutex_lock(&r->lock);
	g = ld_relaxed(&resil_priv_fork_gen);
	if (ld_relaxed(&r->fork_gen) != g) {
		/* the parent's row and connection stay the parent's */
		if (r->ctl_fd >= 0 && r->ctl_pid != getpid()) {
			close(r->ctl_fd);
			r->ctl_fd = -1;
			r->ctl_pid = 0;
		}
		if (r->mapped) {
			struct resil_map *cur = ld_acquire(&r->cur);

			/* rows in older mappings are the parent's: this process
			 * decides there unregistered (permits it still holds
			 * from the parent's grants are the parent's too) */
			for (struct resil_map *m = cur->older; m; m = m->older) {
				atomic_store_explicit(&m->row, -1, memory_order_relaxed);
				st_relaxed(&m->claim_id,
					   resil_client_claim_id(-1, (uint32_t)getpid()));
			}
			for (struct resil_map *m = ld_relaxed(&r->locals); m; m = m->next_local) {
				atomic_store_explicit(&m->row, -1, memory_order_relaxed);
				st_relaxed(&m->claim_id,
					   resil_client_claim_id(-1, (uint32_t)getpid()));
			}
			/* a local pair is the parent's own: the child makes its
			 * own (pending.c), which becomes r->cur while pending;
			 * without memory for it, it decides in the parent's,
			 * unregistered */
			if (r->local)
				(void)resil_priv_local_open(r);
			cur = ld_acquire(&r->cur);
			if (!cur->local)
				resil_priv_claim_row(
				    r, cur, 0); /* no connection of our own: judged as a child */
		}
		/* release: the hot path that sees the new gen sees the new row */
		st_release(&r->fork_gen, g);
	}
	pthread_mutex_unlock(&r->lock);
}

/* In a forked child, take this process's own identity first (r->lock must
 * not be held: resil_priv_after_fork takes it). Two loads and a compare
 * when nothing forked: no getpid on the hot path. */
static inline bool forked(struct resil *r)
{
	return RESIL_UNLIKELY(ld_acquire(&r->fork_gen) != ld_relaxed(&resil_priv_fork_gen));
}

static inline void fork_check(struct resil *r)
{
	if (forked(r))
		resil_priv_after_fork(r);
}

static struct resil *resil_alloc(void)
{
	struct resil *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	r->ctl_fd = -1;
	atomic_store_explicit(&r->clock, &clock_default, memory_order_relaxed);
	atomic_store_explicit(&r->random, &random_default, memory_order_relaxed);
	r->seg.cfg_fd = -1;
	r->seg.st_fd = -1;
	r->map0.seg = &r->seg;
	r->map0.own.cfg_fd = r->map0.own.st_fd = -1;
	atomic_store_explicit(&r->map0.row, -1, memory_order_relaxed);
	st_relaxed(&r->map0.claim_id, resil_client_claim_id(-1, (uint32_t)getpid()));
	atomic_store_explicit(&r->cur, &r->map0, memory_order_relaxed);
	atomic_store_explicit(&r->row, -1, memory_order_relaxed);
	r->next_seq = 1; /* map0's is 0 */
	st_relaxed(&r->clockless_mask, RESIL_CLOCKLESS_MASK);
	st_relaxed(&r->fork_gen, ld_relaxed(&resil_priv_fork_gen));
	r->pid = (uint32_t)getpid();
	r->uid = (uint32_t)getuid();
	return r;
}

static void resil_publish(struct resil *r)
{
	pthread_once(&atfork_once, atfork_register);
	pthread_mutex_lock(&open_lock);
	r->next_open = open_list;
	open_list = r;
	pthread_mutex_unlock(&open_lock);
}

/* ---- open / close ---- */

RESIL_API int resil_open_embedded(resil_t **ret, const struct resil_embedded_opts *opts)
{
	struct resil_seg_params sp = {0};
	struct resil *r;
	int err;

	errmsg[0] = 0;
	if (!ret)
		return -EINVAL;
	if (opts) {
		sp.slots = opts->slots;
		sp.clients = opts->clients;
		sp.state_size = opts->state_size;
	}
	if (!sp.slots)
		sp.slots = RESIL_SLOTS_DEFAULT;
	if (!sp.clients)
		sp.clients = RESIL_CLIENTS_DEFAULT;
	if (!sp.events)
		sp.events = RESIL_EVENTS_DEFAULT;
	if (!sp.state_size)
		sp.state_size = RESIL_STATE_SIZE_DEFAULT;
	if (sp.slots > RESIL_PERMIT_IDX_MAX / 8) {
		/* a permit names its record in RESIL_PERMIT_IDX_BITS bits (4
		 * records a slot); resild's --policies has the same bound */
		resil_priv_seterr("%u policy slots: at most %u", sp.slots,
				  RESIL_PERMIT_IDX_MAX / 8);
		return -EINVAL;
	}
	r = resil_alloc();
	if (!r)
		return -ENOMEM;
	r->embedded = true;
	err = resil_seg_create(&r->seg, &sp);
	if (err < 0) {
		resil_priv_seterr("cannot create the segments: %s", strerror(-err));
		pthread_mutex_destroy(&r->lock);
		free(r);
		return err;
	}
	r->mapped = true;
	r->map0.tag = r->seg.cfg->epoch;
	resil_priv_claim_row(r, &r->map0, 0);
	resil_publish(r);
	*ret = r;
	return 0;
}

/* What a pending open refuses at once: what waiting for resild cannot
 * mend. Anything else (not running, not answering, another ABI, a
 * refusal of rows) waits in the background of decisions. */
static bool open_fatal(int err)
{
	return err == -EACCES || err == -EPERM || err == -ENAMETOOLONG || err == -ENOMEM ||
	       err == -EINVAL;
}

/* A bound on a pending open's hello: a daemon that accepted the
 * connection (socket activation, a stalled one) is not waited for. */
#define PENDING_OPEN_MS 250

/* map: get the segments (a control-only handle, resilctl's, connects
 * with its first request); pending: RESIL_OPEN_PENDING. */
static int open_conn(struct resil **ret, const char *socket_path, bool map, bool pending)
{
	const char *path = resil_priv_socket_path(socket_path);
	uint32_t bound = 0;
	struct resil *r;
	int err = 0;

	errmsg[0] = 0;
	if (!ret)
		return -EINVAL;
	if (strlen(path) >= sizeof(r->socket_path)) {
		resil_priv_seterr("socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	r = resil_alloc();
	if (!r)
		return -ENOMEM;
	strcpy(r->socket_path, path);
	r->pending_ok = pending;
	if (pending) {
		int ms = resil_priv_timeout_ms();

		err = resil_priv_ctl_probe(r, ms < PENDING_OPEN_MS ? ms : PENDING_OPEN_MS);
	}
	if (err == 0 && map)
		err = resil_priv_get_segments(r, &r->seg, &bound);
	if (err < 0 && pending && !open_fatal(err)) {
		/* pending: a pair of our own (pending.c); the next look for
		 * resild in a second (resil_priv_liveness) */
		st_relaxed(&r->next_probe_ns,
			   (uint64_t)(resil_clock_monotonic(NULL) + RESIL_CHECK_NS));
		err = resil_priv_local_open(r);
		if (err < 0)
			resil_priv_seterr("cannot create this process's own segments: %s",
					  strerror(-err));
		else
			errmsg[0] = 0;
	} else if (err == 0 && map) {
		r->mapped = true;
		r->map0.tag = r->seg.cfg->epoch;
		resil_priv_claim_row(r, &r->map0, bound);
	}
	if (err < 0) {
		if (r->ctl_fd >= 0)
			close(r->ctl_fd);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return err;
	}
	resil_publish(r);
	*ret = r;
	return 0;
}

RESIL_API int resil_open(resil_t **ret, const char *socket_path)
{
	return open_conn(ret, socket_path, true, false);
}

int resil_priv_open_ctl(struct resil **ret, const char *socket_path)
{
	return open_conn(ret, socket_path, false, false);
}

RESIL_API int resil_open_ex(resil_t **ret, const struct resil_open_opts *opts)
{
	const char *path = NULL;
	unsigned flags = 0;

	if (!ret)
		return -EINVAL;
	if (opts) {
		/* fields the caller's struct has: size says which */
		if (opts->size < offsetof(struct resil_open_opts, socket_path) + sizeof(void *))
			return -EINVAL;
		path = opts->socket_path;
		if (opts->size >= offsetof(struct resil_open_opts, flags) + sizeof(unsigned))
			flags = opts->flags;
	}
	if (flags & ~RESIL_OPEN_PENDING)
		return -EINVAL;
	return open_conn(ret, path, true, flags & RESIL_OPEN_PENDING);
}

RESIL_API void resil_close(resil_t *r)
{
	struct resil **pp;
	struct resil_policy *p, *n;
	struct resil_map *m, *older;
	int row;

	if (!r)
		return;
	pthread_mutex_lock(&open_lock);
	for (pp = &open_list; *pp; pp = &(*pp)->next_open) {
		if (*pp == r) {
			*pp = r->next_open;
			break;
		}
	}
	pthread_mutex_unlock(&open_lock);

	/* every mapping this handle made, newest first: release our row in
	 * each (a child that never called in still holds its parent's row
	 * numbers: those rows are the parent's to release, not ours) */
	for (m = ld_acquire(&r->cur); r->mapped && m; m = older) {
		older = m->older;
		if (m->local)
			continue; /* on r->locals, below */
		row = atomic_load_explicit(&m->row, memory_order_relaxed);
		if (row >= 0 && ld_relaxed(&r->fork_gen) == ld_relaxed(&resil_priv_fork_gen))
			resil_client_release(m->seg, (uint32_t)row);
		resil_seg_unmap(m->seg);
		if (m != &r->map0)
			free(m);
	}
	/* local pairs: this process's own (a child's copy of its parent's
	 * is only unmapped) */
	for (m = ld_relaxed(&r->locals); m; m = older) {
		older = m->next_local;
		resil_seg_unmap(m->seg);
		free(m);
	}
	for (p = r->policies; p; p = n) {
		struct resil_binding *lists[] = {p->retired, p->spares};

		n = p->next;
		free(p->last);
		for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++)
			for (struct resil_binding *b = lists[k], *bn; b; b = bn) {
				bn = b->next;
				free(b);
			}
		free(p);
	}
	for (struct resil_def *d = r->defs, *dn; d; d = dn) {
		dn = d->next;
		free(d);
	}
	for (struct resil_retired *o = r->retired, *on; o; o = on) {
		on = o->older;
		free(o);
	}
	if (r->ctl_fd >= 0)
		close(r->ctl_fd);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

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

static int simple_request(struct resil *r, Resil__Request *req, Resil__Response **keep)
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

static bool valid_name(const char *name)
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
	err = simple_request(r, &req, NULL);
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

	errmsg[0] = 0;
	if (!valid_name(name)) {
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

	errmsg[0] = 0;
	if (!r || !valid_name(name) || !config)
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

	errmsg[0] = 0;
	if (!r || !valid_name(name))
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
			err = simple_request(r, &req, NULL);
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

/* The clock reading a decision made, for resil_priv_check: x->now, or a
 * coarse reading every 256th call of a thread that decides without one. */
/* initial-exec: no __tls_get_addr call in the shared library */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint32_t clockless;

static inline void after_reading(struct resil *r, const struct resil_clock *clk, int64_t now)
{
	if (r->embedded)
		return;
	if (!now) {
		if (RESIL_LIKELY(++clockless & ld_relaxed(&r->clockless_mask)))
			return;
		now = resil_clock_now_coarse(clk);
	}
	resil_priv_check(r, now);
}

static inline void after_decision(struct resil *r, const struct resil_ctx *x)
{
	after_reading(r, &x->clock, x->now);
}

/* after_decision of a decision that read no clock and has no context:
 * every 256th call of a thread reads the process's clock (coarse). */
static RESIL_COLD __attribute__((noinline)) void clockless_check(struct resil *r)
{
	resil_priv_check(r, resil_clock_now_coarse(ld_acquire(&r->clock)));
}

static inline __attribute__((always_inline)) void after_clockless(struct resil *r)
{
	if (RESIL_LIKELY(r->embedded || (++clockless & ld_relaxed(&r->clockless_mask))))
		return;
	clockless_check(r);
}

/* after_clockless's periodic check, then v. */
static RESIL_COLD __attribute__((noinline)) int clockless_then(struct resil *r, int v)
{
	clockless_check(r);
	return v;
}

/* after_clockless, then v, the check's call a tail call off the common
 * return (a hot function that returns this makes no call of its own). */
static inline __attribute__((always_inline)) int clockless_return(struct resil *r, int v)
{
	if (RESIL_LIKELY(r->embedded || (++clockless & ld_relaxed(&r->clockless_mask))))
		return v;
	return clockless_then(r, v);
}

/* ---- handles ---- */

/* Look NAME up in the current mapping, else in the newest older one that
 * has it, else, for a definition of this process that no daemon took, in
 * its own pair (pending.c). Under r->lock. */
static int lookup(struct resil *r, const char *name, struct resil_map **ret_m, uint32_t *slot,
		  uint64_t *word)
{
	struct resil_map *m = ld_acquire(&r->cur);
	int err = resil_seg_lookup(m->seg, name, slot, word);
	struct resil_def *d;

	for (struct resil_map *o = m->older; err == -ENOENT && o; o = o->older) {
		if (!o->local && resil_seg_lookup(o->seg, name, slot, word) == 0) {
			*ret_m = o;
			return 0;
		}
	}
	if (err == -ENOENT && r->local && r->local != m && (d = resil_priv_def_find(r, name)) &&
	    d->state != RESIL_DEF_SENT && resil_seg_lookup(r->local->seg, name, slot, word) == 0) {
		*ret_m = r->local;
		return 0;
	}
	*ret_m = m;
	return err;
}

/* rec_size is RESIL_REC_SIZE in every segment this build maps
 * (resil_seg_validate checks it): a shift, not a division. */
static uint32_t rec_index(const struct resil_seg *s, const struct resil_rec *rec)
{
	return (uint32_t)(((const char *)rec - (const char *)s->cfg - s->cfg->recs_off) /
			  RESIL_REC_SIZE);
}

/* A permit names the record it was granted under (index + 1) and the
 * mapping (seq % 32 in the top bits; always 0 in embedded mode): records
 * are never reused during a segment pair's life and mappings stay until
 * close. */
static inline uint32_t permit_where(const struct resil_map *m, uint32_t idx)
{
	return (m->seq % 32) << RESIL_PERMIT_IDX_BITS | (idx + 1);
}

/* A permit's flags once held: HELD and the tag of the record it was
 * granted under (the low 16 bits of rec->gen; the component flags use
 * the low 16 bits of flags). */
#define RESIL_PERMIT_TAG_SHIFT 16
static inline uint32_t permit_held(const struct resil_rec *rec)
{
	return RESIL_PERMIT_HELD | (rec->gen & 0xffffu) << RESIL_PERMIT_TAG_SHIFT;
}

/*
 * Lean decisions. A policy whose only component besides the counters is
 * a bulkhead (a waiting one, one with a critical share, or one of packed
 * slots, above 1024 permits, decides in acquire_lean_bulkhead_wait,
 * through resil_bulkhead_acquire, with the request's priority) or a
 * rate limiter without reservation (limit.wait = 0; keyed or not), with no
 * histogram and fleet scope, is decided without the general context and
 * dispatch: the binding carries the two state blocks; acquire is the
 * component's own acquire with a context holding what it reads (the
 * client id; the clock), release the component's release and the
 * outcome's count. An unkeyed GCRA of host scope needs no context at all:
 * resil_limit_acquire_gcra decides it from the clock; nor does a keyed
 * limiter's call whose key is in its first two buckets:
 * resil_limit_acquire_keyed decides it from the clock, the key and the
 * segment's hash seeds, which the binding copies (any other key, a new
 * one included, goes on in acquire_lean_limit, with a context). A
 * fail-fast bulkhead of host scope claims the thread's last slot in
 * resil_acquire_ex itself (resil_bulkhead_claim_last, with the slot count
 * the binding took from the configuration) and rejects there on the full
 * hint; a taken slot without the hint, the first claim and global scope
 * go on in acquire_lean_bulkhead, a bulkhead whose callers wait (or with
 * a critical share, or of packed slots) in acquire_lean_bulkhead_wait.
 * The same component functions as resil_policy_acquire/release, on the
 * same words, and a lean permit is a complete one: either path releases
 * what the other granted (a permit outlives a re-bind).
 * Two more kinds need no context at all on their common path: the
 * counters alone (an acquire only makes the permit; the release counts
 * the outcome) and a breaker without a slow-call rate: in CLOSED, acquire
 * loads the state word; in OPEN before its wait (or FORCED_OPEN) it
 * rejects with a coarse clock reading at most; on a count window a
 * success's release records without a clock (resil_breaker_*_lean,
 * breaker.h). Any other state or outcome (the end of OPEN's wait,
 * HALF_OPEN, a failure, another window's record) takes the general path
 * from the same binding; a record that may open the breaker gets its
 * context then. After such a decision, the periodic check counts the
 * call as a clockless one (after_clockless).
 * A stack of two or three of these, of host scope: a lean breaker, an
 * unkeyed GCRA without reservation, a fail-fast bulkhead (the common
 * "breaker + rate limit + bulkhead" of one dependency), is decided the
 * same way, in resil_policy_acquire's order and with its undo: the
 * breaker's CLOSED gen (any other state: acquire_open), the GCRA from the
 * clock, the bulkhead's scan (a rejection gives the limiter's permit
 * back); its release records the breaker's success lean (anything else:
 * the general release), frees the slot and counts. The binding carries
 * the three blocks (lean_st: the breaker's; lim_st, bh_st).
 */
#define RESIL_LEAN_NONE	    0u
#define RESIL_LEAN_BULKHEAD 1u
#define RESIL_LEAN_LIMIT    2u
#define RESIL_LEAN_STATS    3u /* the counters alone: nothing to decide */
#define RESIL_LEAN_BREAKER  4u /* resil_breaker_lean (breaker.h), partly; see above */
#define RESIL_LEAN_STACK    5u /* two or three of the above, host scope; see above */
/* The binding's lean word: the kind in the low half; in the high half the
 * breaker's resil_breaker_win_off (0: no breaker), or for a limiter its way
 * without a context: LEAN_GCRA when resil_limit_lean_gcra accepts it,
 * LEAN_KEYED when resil_limit_lean_keyed does (for a call with a key whose
 * entry is found at once), else 0. */
#define LEAN_KIND(l)	  ((uint32_t)(l))
#define LEAN_BK_OFF(l)	  ((uint32_t)((l) >> 32))
#define LEAN_LIMIT_WAY(l) ((uint32_t)((l) >> 32))
#define LEAN_GCRA	  1u
#define LEAN_KEYED	  2u
/* ... or for a fail-fast bulkhead of host scope its slot count (0: global
 * scope, callers that wait, a critical share or packed slots; the
 * configuration tells which) */
#define LEAN_BH_N(l) ((uint32_t)((l) >> 32))

/* A stack that is lean (see above): two or three of a lean breaker, an
 * unkeyed GCRA without reservation and a fail-fast bulkhead, the counters
 * and nothing else, host scope. */
static bool lean_stack(const struct resil_rec *rec)
{
	const struct resil_conf *c = &rec->conf;
	const uint32_t set = 1u << RESIL_C_BREAKER | 1u << RESIL_C_LIMIT | 1u << RESIL_C_BULKHEAD;
	uint32_t mine = rec->components & set;

	if ((rec->components & ~set) != 1u << RESIL_C_STATS || !(mine & (mine - 1)) ||
	    c->scope == RESIL_SCOPE_GLOBAL)
		return false;
	if (resil_has(rec, RESIL_C_BREAKER) && !resil_breaker_lean(&c->breaker))
		return false;
	if (resil_has(rec, RESIL_C_LIMIT) &&
	    (c->limit.wait_ns || !resil_limit_lean_gcra(&c->limit, c->scope)))
		return false;
	return !resil_has(rec, RESIL_C_BULKHEAD) || resil_bulkhead_fail_fast(&c->bulkhead);
}

static uint32_t lean_kind(const struct resil_rec *rec)
{
	const uint32_t stats = 1u << RESIL_C_STATS;

	if (!rec || rec->proc_stride || rec->conf.histogram)
		return RESIL_LEAN_NONE;
	if (rec->components == stats)
		return RESIL_LEAN_STATS;
	if (rec->components == (stats | 1u << RESIL_C_BREAKER) &&
	    resil_breaker_lean(&rec->conf.breaker))
		return RESIL_LEAN_BREAKER;
	/* a global bulkhead's lease takes spread slots (conf.c) */
	if (rec->components == (stats | 1u << RESIL_C_BULKHEAD) &&
	    (resil_bulkhead_spread(&rec->conf.bulkhead) || rec->conf.scope != RESIL_SCOPE_GLOBAL))
		return RESIL_LEAN_BULKHEAD;
	if (rec->components == (stats | 1u << RESIL_C_LIMIT) && rec->conf.limit.wait_ns == 0)
		return RESIL_LEAN_LIMIT;
	return lean_stack(rec) ? RESIL_LEAN_STACK : RESIL_LEAN_NONE;
}

static enum resil_comp lean_comp(uint32_t kind)
{
	switch (kind) {
	case RESIL_LEAN_LIMIT:
		return RESIL_C_LIMIT;
	case RESIL_LEAN_BULKHEAD:
		return RESIL_C_BULKHEAD;
	case RESIL_LEAN_BREAKER:
		return RESIL_C_BREAKER;
	default:
		return RESIL_C_STATS;
	}
}

const struct resil_binding resil_priv_unbound = {.held = RESIL_PERMIT_HELD};

/* A lean stack's block of comp, NULL when it has none. */
static void *stack_block(const struct resil_map *m, const struct resil_rec *rec,
			 enum resil_comp comp)
{
	return resil_has(rec, comp) ? resil_comp_state(m->seg, rec, comp) : NULL;
}

/* The handle's retired bindings whose grace is over become spares (a
 * FIFO: the one that rested longest is taken first); past
 * RESIL_BINDING_SPARES, spares that rested RESIL_BINDING_REST_NS are
 * freed. O(1) per binding aged or freed. Under r->lock. */
static void bindings_age(struct resil_policy *p, int64_t now)
{
	struct resil_binding *b;

	while ((b = p->retired) && now - b->retired_ns >= RESIL_BINDING_GRACE_NS) {
		p->retired = b->next;
		if (!p->retired)
			p->retired_tail = NULL;
		b->next = NULL;
		if (p->spares_tail)
			p->spares_tail->next = b;
		else
			p->spares = b;
		p->spares_tail = b;
		p->nspares++;
	}
	while ((b = p->spares) && p->nspares > RESIL_BINDING_SPARES &&
	       now - b->retired_ns >= RESIL_BINDING_REST_NS) {
		p->spares = b->next;
		if (!p->spares)
			p->spares_tail = NULL;
		p->nspares--;
		free(b);
	}
}

/* A binding's memory: the spare that rested longest, else a new one.
 * Under r->lock. */
static struct resil_binding *binding_take(struct resil_policy *p)
{
	struct resil_binding *b = p->spares;

	if (!b)
		return calloc(1, sizeof(*b));
	p->spares = b->next;
	if (!p->spares)
		p->spares_tail = NULL;
	p->nspares--;
	memset(b, 0, sizeof(*b));
	return b;
}

/* b, no longer published, waits out its grace. Under r->lock. */
static void binding_retire(struct resil_policy *p, struct resil_binding *b, int64_t now)
{
	b->retired_ns = now;
	b->next = NULL;
	if (p->retired_tail)
		p->retired_tail->next = b;
	else
		p->retired = b;
	p->retired_tail = b;
}

/* Bind handle p to what lookup found: (m, slot, word). Under r->lock.
 * Only a name found in the current mapping is bound (word != 0); one
 * found in an older mapping is looked up again on each call. Publishes
 * an immutable binding (internal.h): the handle's last one if it is for
 * (m, slot, word), else a new one, and the last one is retired; without
 * memory for it the handle stays unbound and decides through the slow
 * path. */
static void bind(struct resil *r, struct resil_policy *p, struct resil_map *m, uint32_t slot,
		 uint64_t word)
{
	const struct resil_rec *rec = word ? resil_seg_rec_of(m->seg, word) : NULL;
	ra64 *slotp = &resil_seg_slots(m->seg)[slot];
	struct resil_binding *b = p->last;
	int64_t now;
	uint32_t lean;

	if (m != ld_relaxed(&r->cur) || !rec) {
		st_release(&p->b, &resil_priv_unbound);
		return;
	}
	if (!b || b->m != m || b->slotp != slotp || b->word != word) {
		now = resil_clock_monotonic(NULL);
		bindings_age(p, now);
		b = binding_take(p);
		if (!b) {
			st_release(&p->b, &resil_priv_unbound);
			return;
		}
		b->m = m;
		b->slotp = slotp;
		b->flagsp = &m->seg->cfg->flags;
		b->rec = rec;
		lean = lean_kind(rec);
		/* the breaker window's offset, from the read-only
		 * configuration once per binding, beside the kind: the
		 * releases that record into the window read it with no load
		 * more */
		b->lean = lean | (resil_has(rec, RESIL_C_BREAKER)
				      ? (uint64_t)resil_breaker_win_off(&rec->conf.breaker) << 32
				      : 0);
		if (lean == RESIL_LEAN_LIMIT &&
		    resil_limit_lean_gcra(&rec->conf.limit, rec->conf.scope))
			b->lean |= (uint64_t)LEAN_GCRA << 32;
		else if (lean == RESIL_LEAN_LIMIT && resil_limit_lean_keyed(&rec->conf.limit))
			b->lean |= (uint64_t)LEAN_KEYED << 32;
		resil_limit_key_seeds(m->seg, b->key_seeds);
		if (lean == RESIL_LEAN_BULKHEAD && rec->conf.scope != RESIL_SCOPE_GLOBAL &&
		    resil_bulkhead_fail_fast(&rec->conf.bulkhead))
			b->lean |= (uint64_t)resil_bulkhead_max_of(&rec->conf.bulkhead) << 32;
		/* the lean OPEN rejection's wait, from the same words */
		if (lean == RESIL_LEAN_BREAKER ||
		    (lean == RESIL_LEAN_STACK && resil_has(rec, RESIL_C_BREAKER)))
			b->bk_wait = resil_breaker_lean_wait(&rec->conf.breaker, &b->bk_streaks);
		b->bk_cap = resil_breaker_wait_cap(&rec->conf.breaker);
		b->lean_st = lean ? resil_comp_state(m->seg, rec, lean_comp(lean)) : NULL;
		b->stats_st = lean ? resil_comp_state(m->seg, rec, RESIL_C_STATS) : NULL;
		if (lean == RESIL_LEAN_STACK) {
			b->lean_st = stack_block(m, rec, RESIL_C_BREAKER);
			b->lim_st = stack_block(m, rec, RESIL_C_LIMIT);
			b->bh_st = stack_block(m, rec, RESIL_C_BULKHEAD);
			b->bh_n = b->bh_st ? resil_bulkhead_max_of(&rec->conf.bulkhead) : 0;
		}
		b->where = permit_where(m, rec_index(m->seg, rec));
		b->held = permit_held(rec);
		b->word = word;
		/* release: a decision that loads b (acquire) sees it whole */
		st_release(&p->b, b);
		if (p->last)
			binding_retire(p, p->last, now);
		p->last = b;
		return;
	}
	st_release(&p->b, b);
}

RESIL_API int resil_policy(resil_t *r, const char *name, resil_policy_t **ret)
{
	struct resil_policy *p;
	struct resil_map *m;
	uint32_t slot;
	uint64_t word;
	int err;

	if (!r || !valid_name(name) || !ret)
		return -EINVAL;
	if (!r->mapped)
		return -ENOTCONN;
	errmsg[0] = 0;
	fork_check(r);
	pthread_mutex_lock(&r->lock);
	/* pending: a look at most once a second, briefly (never a wait) */
	(void)resil_priv_liveness(r, r->pending_ok ? RESIL_PROBE_HOT_MS : resil_priv_timeout_ms());
	err = lookup(r, name, &m, &slot, &word);
	if (err == -ENOENT && r->pending_ok && resil_priv_pending(r) &&
	    resil_priv_local_placeholder(r, name) == 0)
		err = lookup(r, name, &m, &slot, &word);
	if (err == -ENOENT && r->embedded)
		resil_priv_seterr("no policy named %s: resil_define declares it", name);
	else if (err == -ENOENT)
		resil_priv_seterr("no policy named %s in resild on %s: resil_define declares it, "
				  "resilctl list shows what exists",
				  name, r->socket_path);
	if (err < 0)
		goto out;
	for (p = r->policies; p; p = p->next) {
		if (strcmp(p->name, name) == 0)
			break;
	}
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			err = -ENOMEM;
			goto out;
		}
		p->r = r;
		atomic_init(&p->b, &resil_priv_unbound);
		strcpy(p->name, name);
		p->next = r->policies;
		r->policies = p;
	}
	bind(r, p, m, slot, word);
	*ret = p;
	err = 0;
out:
	pthread_mutex_unlock(&r->lock);
	return err;
}

/* The decision context of this process in mapping m; fork_check done by
 * the caller. */
static inline __attribute__((always_inline)) void fill_ctx(struct resil *r, struct resil_map *m,
							   struct resil_ctx *x)
{
	x->seg = m->seg;
	x->rec = NULL;
	x->key = NULL;
	x->key_len = 0;
	/* acquire: pairs with the release in resil_set_clock/_random, so
	 * the pair is whole; fn and ctx come from one pair */
	x->clock = *ld_acquire(&r->clock);
	x->random = *ld_acquire(&r->random); /* fn never NULL */
	x->client_id = ld_relaxed(&m->claim_id);
	x->pid = r->pid;
	x->now = 0;
	x->bk_conf = NULL;
}

void resil_priv_fill_ctx(struct resil *r, struct resil_map *m, struct resil_ctx *x)
{
	fill_ctx(r, m, x);
}

/* Slow path: the slot word changed, or the mapping did. Re-read the
 * directory by name. A handle to a deleted policy comes here on every
 * call (and answers -ENOENT) until the name is defined again. */
static RESIL_COLD const struct resil_rec *resolve(struct resil_policy *p, struct resil_ctx *x,
						  struct resil_map **ret_m, int *err)
{
	struct resil *r = p->r;
	const struct resil_rec *rec = NULL;
	struct resil_map *m;
	uint32_t slot;
	uint64_t word;
	int e;

	pthread_mutex_lock(&r->lock);
	e = lookup(r, p->name, &m, &slot, &word);
	if (e == 0) {
		rec = resil_seg_rec_of(m->seg, word);
		if (!rec)
			e = -ENOENT;
	}
	if (e == 0) {
		bind(r, p, m, slot, word);
		fill_ctx(r, m, x);
		*ret_m = m;
	} else {
		st_release(&p->b, &resil_priv_unbound);
		/* the context whole all the same: the callers that decide
		 * nothing on a deleted policy still make the periodic check
		 * (priv_ctx reads x->clock and x->now), and x->rec says gone */
		fill_ctx(r, ld_acquire(&r->cur), x);
		*err = e;
	}
	pthread_mutex_unlock(&r->lock);
	return rec;
}

/* ctx_map's slow path: the handle is not bound to the current mapping's
 * record (first use, a changed configuration, a re-attach), or the
 * mapping is retired. */
static RESIL_COLD const struct resil_rec *ctx_slow(resil_policy_t *p, struct resil_ctx *x,
						   struct resil_map **ret_m, uint32_t *where,
						   int *err)
{
	struct resil *r = p->r;
	struct resil_map *m = ld_acquire(&r->cur);
	const struct resil_rec *rec;

	/* relaxed: a hint; the slow path re-reads it with acquire under the lock */
	if (ld_relaxed(&m->seg->cfg->flags) & RESIL_SEG_RETIRED)
		resil_priv_retired_slow(r);
	rec = resolve(p, x, ret_m, err);
	x->rec = rec;
	if (rec)
		*where = permit_where(*ret_m, rec_index((*ret_m)->seg, rec));
	return rec;
}

/* Handle p's binding, if it is good for a decision now: the mapping is
 * the current one and not retired, and the slot word still names the
 * bound record. No syscall. The caller has made fork_check (or tested
 * forked()). */
static inline __attribute__((always_inline)) bool good_binding(resil_policy_t *p,
							       const struct resil_binding **bp)
{
	struct resil *r = p->r;
	const struct resil_binding *b;

	/* acquire: pairs with bind's release, so the binding is whole */
	b = ld_acquire(&p->b);
	*bp = b;
	/* acquire on the slot word: pairs with the release store that
	 * published the record, so the record is whole; cur: the binding
	 * is only good for the mapping decisions use now */
	return b->word != 0 && b->m == ld_acquire(&r->cur) &&
	       !(ld_relaxed(b->flagsp) & RESIL_SEG_RETIRED) && ld_acquire(b->slotp) == b->word;
}

/* The same after fork_check (the hot functions test forked() themselves
 * and take a function of their own after a fork: acquire_forked). */
static inline __attribute__((always_inline)) bool bound(resil_policy_t *p,
							const struct resil_binding **bp)
{
	fork_check(p->r);
	return good_binding(p, bp);
}

/* The record and mapping of a decision on handle p, and the permit's
 * where, from the binding b when it is good (ok), else the slow path.
 * rel: b carries the breaker's window offset (bind), which
 * the context then carries for a release. */
static inline __attribute__((always_inline)) const struct resil_rec *
ctx_bound(resil_policy_t *p, const struct resil_binding *b, bool ok, bool rel, struct resil_ctx *x,
	  struct resil_map **ret_m, uint32_t *where, int *err)
{
	if (RESIL_LIKELY(ok)) {
		fill_ctx(p->r, b->m, x);
		x->rec = b->rec;
		if (rel) {
			x->bk_conf = &b->rec->conf.breaker;
			x->bk_off = LEAN_BK_OFF(b->lean);
		}
		*ret_m = b->m;
		*where = b->where;
		return b->rec;
	}
	return ctx_slow(p, x, ret_m, where, err);
}

static inline __attribute__((always_inline)) const struct resil_rec *
ctx_map(resil_policy_t *p, struct resil_ctx *x, struct resil_map **ret_m, uint32_t *where, int *err,
	bool rel)
{
	const struct resil_binding *b;
	bool ok = bound(p, &b);

	return ctx_bound(p, b, ok, rel, x, ret_m, where, err);
}

static inline __attribute__((always_inline)) const struct resil_rec *
priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err, bool rel)
{
	const struct resil_rec *rec;
	struct resil_map *m;
	uint32_t where;

	rec = ctx_map(p, x, &m, &where, err, rel);
	/* resil_call and retries decide through here: they get the periodic
	 * check too (no clock read yet: the clockless count) */
	after_decision(p->r, x);
	return rec;
}

const struct resil_rec *resil_priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	return priv_ctx(p, x, err, false);
}

/* The same, for a caller that releases with x (resil_call): x carries
 * the binding's breaker window offset (resil_ctx bk_conf, bk_off). */
const struct resil_rec *resil_priv_ctx_rel(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	return priv_ctx(p, x, err, true);
}

/*
 * limit.wait: the limiter reserved a permit that becomes free wait_ns from
 * now; the caller sleeps until then (a syscall, on this path only). With a
 * clock of the application's (resil_set_clock: a simulation) nothing
 * sleeps: the caller reads resil_permit_wait_ns() and advances its own
 * time. A call that measures its duration starts after the sleep.
 */
static RESIL_COLD void reservation_sleep(struct resil *r, struct resil_permit_priv *pm)
{
	struct timespec ts;
	int64_t until;

	if (ld_acquire(&r->clock)->fn)
		return;
	until = resil_clock_monotonic(NULL) + pm->wait_ns;
	ts.tv_sec = until / RESIL_NS_PER_S;
	ts.tv_nsec = until % RESIL_NS_PER_S;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	if (pm->flags & RESIL_PERMIT_TIMED)
		pm->start_ns += pm->wait_ns;
}

/* ---- hot path ---- */

/* A lean acquire's end: the rejection counted as resil_policy_acquire
 * counts it, or the permit made whole. */
static inline __attribute__((always_inline)) int
lean_done(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	  int64_t now, struct resil_permit_priv *pm, int v)
{
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	after_reading(p->r, clk, now);
	return v;
}

/* A lean bulkhead's decision v made whole: a rejection counted, an
 * admission's permit tagged with the binding's record. */
static inline int lean_bulkhead_done(resil_policy_t *p, const struct resil_binding *b,
				     struct resil_permit_priv *pm, int v)
{
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	after_clockless(p->r);
	return v;
}

/* Lean acquires (see "Lean decisions"): the component's own acquire with
 * a context that holds what it reads, one function per kind so that each
 * context stays in registers, and out of line (see acquire_general below:
 * resil_acquire_ex reaches them by a tail call). The scan bulkhead reads
 * the client id. */
static __attribute__((noinline, flatten)) int acquire_lean_bulkhead(resil_policy_t *p,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    bool last_tried)
{
	struct resil_ctx x;
	int v;

	/* A fail-fast bulkhead reads the client id alone (resil_bulkhead_acquire:
	 * no wait, no clock), so only that is written; the rest of x stays
	 * unread, as the counters' rejection and the clockless check read
	 * no context. */
	x.client_id = ld_relaxed(&b->m->claim_id);
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = 1;
	if (RESIL_UNLIKELY(b->rec->conf.scope == RESIL_SCOPE_GLOBAL)) {
		/* a global bulkhead checks its lease (bulkhead.c, global_claim):
		 * the clock too, unless the slot is sure */
		x.clock = *ld_acquire(&p->r->clock);
		v = resil_bulkhead_acquire_scan_global(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	} else if (last_tried) {
		/* resil_bulkhead_claim_last found the last slot taken */
		v = resil_bulkhead_acquire_scan_rest(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	} else {
		v = resil_bulkhead_acquire_scan(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	}
	return lean_bulkhead_done(p, b, pm, v);
}

/* A lean bulkhead of host scope whose callers wait, with a critical share
 * or of packed slots: the bulkhead's acquire, which reads x->rec for the
 * scope, the permit's priority for the share and, when it waits, writes
 * x->now (the wait reads CLOCK_MONOTONIC), and the count. Its own
 * function: the fail-fast and global claims keep their frames. */
static __attribute__((noinline, flatten)) int
acquire_lean_bulkhead_wait(resil_policy_t *p, const struct resil_binding *b,
			   const struct resil_req *req, struct resil_permit_priv *pm)
{
	struct resil_ctx x;
	int v;

	x.client_id = ld_relaxed(&b->m->claim_id);
	x.rec = NULL;
	x.now = 0;
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = 1;
	if (req)
		pm->priority = (uint32_t)req->priority;
	v = resil_bulkhead_acquire(&x, &b->rec->conf.bulkhead, b->lean_st, pm);
	return lean_bulkhead_done(p, b, pm, v);
}

/* A lean limiter's permit before its acquire: zeroed, and the permits the
 * request takes (req->permits; 0 without a request: one). */
static inline void limit_permit_start(struct resil_permit_priv *pm, int permits)
{
	memset(pm, 0, sizeof(*pm));
	pm->limit_permits = permits > 1 ? (uint32_t)permits : 1;
}

/* The limiter reads the clock (and caches its reading in x); a keyed one
 * the key, and the segment and record (the table's hash seed, the
 * full-table event, the eviction count). */
static __attribute__((noinline, flatten)) int acquire_lean_limit(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	struct resil_ctx x = {.seg = b->m->seg, .rec = b->rec, .clock = *ld_acquire(&p->r->clock)};
	int v;

	limit_permit_start(pm, req ? req->permits : 0);
	if (req) {
		x.key = req->key;
		x.key_len = req->key_len;
	}
	v = resil_limit_acquire(&x, &b->rec->conf.limit, b->lean_st, pm);
	return lean_done(p, b, &x.clock, x.now, pm, v);
}

/* An unkeyed GCRA of host scope: no context, the clock's pair as
 * published (immutable: resil_set_clock), and the liveness check with the
 * precise reading when one was taken. A key in req is not this limiter's
 * business (the general path ignores it too). */
static __attribute__((noinline, flatten)) int acquire_lean_gcra(resil_policy_t *p,
								const struct resil_binding *b,
								const struct resil_req *req,
								struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&p->r->clock);
	int64_t now;
	int v;

	limit_permit_start(pm, req ? req->permits : 0);
	v = resil_limit_acquire_gcra(clk, &b->rec->conf.limit, b->lean_st, pm, &now);
	return lean_done(p, b, clk, now, pm, v);
}

/* A keyed limiter, a call with a key: no context while the key's entry is
 * found in its first two buckets; else (RESIL_LIMIT_ASK: nothing was
 * written) the context's path, which inserts it. */
static __attribute__((noinline, flatten)) int acquire_lean_keyed(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	/* acquire: pairs with the release in resil_set_clock */
	const struct resil_clock *clk = ld_acquire(&p->r->clock);
	int64_t now;
	int v;

	limit_permit_start(pm, req->permits);
	v = resil_limit_acquire_keyed(clk, &b->rec->conf.limit, b->lean_st, b->key_seeds, req->key,
				      req->key_len, pm, &now);
	if (RESIL_UNLIKELY(v == RESIL_LIMIT_ASK))
		return acquire_lean_limit(p, b, req, pm);
	return lean_done(p, b, clk, now, pm, v);
}

/*
 * The general path of an acquire: the decision context and
 * resil_policy_acquire, from the binding b that bound() returned (ok) or
 * through the slow path. Each path of an acquire is its own function, so
 * that each pays for its own frame only: the counters alone and a CLOSED
 * lean breaker (resil_acquire_ex itself) save no register and make no
 * call; the general path, a lean bulkhead's scan and a lean limiter's
 * clock reading are reached by a tail call.
 */
static __attribute__((noinline, flatten)) int
acquire_general(resil_policy_t *p, const struct resil_req *req, struct resil_permit_priv *pm,
		const struct resil_binding *b, bool ok)
{
	const void *key = req ? req->key : NULL;
	size_t key_len = req ? req->key_len : 0;
	const struct resil_rec *rec;
	struct resil_map *m;
	struct resil_ctx x;
	int err = -ENOENT, ret;
	uint32_t where = 0;

	memset(pm, 0, sizeof(*pm));
	rec = ctx_bound(p, b, ok, false, &x, &m, &where, &err);
	if (RESIL_UNLIKELY(!rec))
		return err;
	if (req) {
		if (RESIL_UNLIKELY(key && !rec->conf.limit.keys))
			return -EINVAL; /* see resil_acquire_ex */
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	} else {
		pm->limit_permits = 1;
	}
	x.key = key;
	x.key_len = key_len;
	ret = resil_policy_acquire(&x, rec, pm, key, key_len);
	if (ret == RESIL_ADMIT) {
		pm->where = where;
		pm->flags |= permit_held(rec);
		if (RESIL_UNLIKELY(resil_limit_reserved_wait(pm) > 0))
			reservation_sleep(p->r, pm);
	}
	after_decision(p->r, &x);
	return ret;
}

/* A lean rejection that makes no permit whole: what the API reads of a
 * rejected permit, its flags (resil_release: nothing held) and wait_ns
 * (resil_permit_wait_ns), and the count, as the general path counts it. */
static inline __attribute__((always_inline)) int lean_reject(struct resil *r,
							     const struct resil_binding *b,
							     struct resil_permit_priv *pm, int v,
							     int64_t wait_ns)
{
	pm->flags = 0;
	pm->wait_ns = wait_ns;
	resil_stats_rejected(NULL, b->stats_st, v);
	return clockless_return(r, v);
}

/* A lean breaker that is not CLOSED: OPEN before its wait, and
 * FORCED_OPEN, reject with a coarse clock reading at most, counted as the
 * general path counts them. Any other state (the first caller after the
 * wait, HALF_OPEN, a short wait that needs a precise reading): the
 * general path decides. The permit is as resil_acquire_ex left it (not
 * made whole): a rejection writes what the API reads of a rejected
 * permit, its flags (resil_release: nothing held) and wait_ns
 * (resil_permit_wait_ns); the general path makes it whole itself. The
 * breaker judges the word before the clock is read, so that what is kept
 * across the reading is the time it is compared with and what the
 * rejection or the general path need. */
static __attribute__((noinline, flatten)) int acquire_open(resil_policy_t *p,
							   const struct resil_req *req,
							   struct resil_permit_priv *pm,
							   const struct resil_binding *b)
{
	struct resil_bk_lean_open o =
	    resil_breaker_reject_lean(&b->rec->conf.breaker, b->lean_st, b->bk_wait, b->bk_streaks);

	int64_t now;

	if (RESIL_UNLIKELY(!o.verdict))
		return acquire_general(p, req, pm, b, true);
	if (o.verdict != RESIL_BK_LEAN_UNTIL)
		return lean_reject(p->r, b, pm, RESIL_REJECT_OPEN, 0); /* FORCED_OPEN */
	/* acquire: pairs with the release in resil_set_clock */
	now = resil_clock_now_coarse(ld_acquire(&p->r->clock));
	if (RESIL_UNLIKELY(now >= o.until))
		return acquire_general(p, req, pm, b, true);
	/* the Retry-After: until the next probe (bounded by the longest wait:
	 * the coarse reading may lag the one the breaker opened at) */
	return lean_reject(p->r, b, pm, RESIL_REJECT_OPEN, resil_min64(o.until - now, b->bk_cap));
}

/* An admission of the counters alone, or of a CLOSED lean breaker (gen:
 * its word's gen): no context and no clock; the permit made whole as the
 * general path makes it. */
static inline __attribute__((always_inline)) int
lean_admit(struct resil *r, const struct resil_req *req, struct resil_permit_priv *pm,
	   const struct resil_binding *b, uint32_t gen)
{
	memset(pm, 0, sizeof(*pm));
	pm->breaker_gen = gen;
	pm->limit_permits = 1;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	}
	pm->where = b->where;
	pm->flags = b->held;
	return clockless_return(r, RESIL_ADMIT);
}

/* A lean bulkhead's rejection on its full hint, out of line: a tail call
 * of resil_acquire_ex. */
static __attribute__((noinline)) int rejected_full(struct resil *r, const struct resil_binding *b,
						   struct resil_permit_priv *pm)
{
	return lean_reject(r, b, pm, RESIL_REJECT_FULL, 0);
}

/* A lean stack's end: lean_done after a clock reading (clk: the limiter's),
 * else the counting and the clockless check of a decision without one. */
static inline __attribute__((always_inline)) int
stack_done(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	   int64_t now, struct resil_permit_priv *pm, int v)
{
	if (clk)
		return lean_done(p, b, clk, now, pm, v);
	if (RESIL_UNLIKELY(v)) {
		resil_stats_rejected(NULL, b->stats_st, v);
	} else {
		pm->where = b->where;
		pm->flags |= b->held;
	}
	return clockless_return(p->r, v);
}

/* A lean stack's bulkhead rejected (v): the limiter's permit back, as
 * resil_policy_acquire's undo gives it (its crash window: a token simply
 * spent), then the count. Out of line: the limiter's undo wants a
 * context. */
static RESIL_COLD __attribute__((noinline)) int
stack_full(resil_policy_t *p, const struct resil_binding *b, const struct resil_clock *clk,
	   int64_t now, struct resil_permit_priv *pm, int v)
{
	if (b->lim_st) {
		struct resil_ctx x = {.seg = b->m->seg, .rec = b->rec, .clock = *clk, .now = now};

		resil_limit_undo(&x, &b->rec->conf.limit, b->lim_st, pm);
	}
	return stack_done(p, b, clk, now, pm, v);
}

/* A lean stack (see "Lean decisions"): each component's lean acquire in
 * resil_policy_acquire's order; a breaker that is not CLOSED goes to
 * acquire_open (which rejects, or hands the decision to the general
 * path), having spent nothing. */
static __attribute__((noinline, flatten)) int acquire_lean_stack(resil_policy_t *p,
								 const struct resil_binding *b,
								 const struct resil_req *req,
								 struct resil_permit_priv *pm)
{
	const struct resil_clock *clk = NULL;
	struct resil_ctx x;
	int64_t now = 0;
	uint32_t gen = 0;
	int v;

	if (b->lean_st) {
		if (RESIL_UNLIKELY(resil_breaker_acquire_lean(b->lean_st, pm)))
			return acquire_open(p, req, pm, b);
		gen = pm->breaker_gen;
	}
	memset(pm, 0, sizeof(*pm));
	pm->breaker_gen = gen;
	pm->limit_permits = 1;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	}
	if (b->lim_st) {
		/* acquire: pairs with the release in resil_set_clock */
		clk = ld_acquire(&p->r->clock);
		v = resil_limit_acquire_gcra(clk, &b->rec->conf.limit, b->lim_st, pm, &now);
		if (RESIL_UNLIKELY(v))
			return lean_done(p, b, clk, now, pm, v);
	}
	if (b->bh_st) {
		/* a fail-fast bulkhead reads the client id alone */
		x.client_id = ld_relaxed(&b->m->claim_id);
		v = resil_bulkhead_acquire_scan(&x, &b->rec->conf.bulkhead, b->bh_st, pm);
		if (RESIL_UNLIKELY(v))
			return stack_full(p, b, clk, now, pm, v);
	}
	return stack_done(p, b, clk, now, pm, 0);
}

/*
 * A call with a key: a keyed limiter decides it, lean when it can
 * (acquire_lean_keyed); a policy without one refuses it (-EINVAL): a key
 * given to a policy that would not look at it is a mistake, not a key to
 * ignore. So resil_acquire_ex's own paths never test for a key.
 */
static __attribute__((noinline, flatten)) int
acquire_keyed(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;

	fork_check(p->r);
	if (RESIL_UNLIKELY(!good_binding(p, &b)))
		return acquire_general(p, req, pm, b, false);
	/* the lean keyed limiter's word says keyed: one compare */
	if (RESIL_LIKELY(b->lean == ((uint64_t)LEAN_KEYED << 32 | RESIL_LEAN_LIMIT)))
		return acquire_lean_keyed(p, b, req, pm);
	if (RESIL_UNLIKELY(!b->rec->conf.limit.keys))
		return -EINVAL;
	if (LEAN_KIND(b->lean) == RESIL_LEAN_LIMIT)
		return acquire_lean_limit(p, b, req, pm);
	return acquire_general(p, req, pm, b, true);
}

/* The first decision of a forked child: its own identity first
 * (fork_check), then the decision. Out of line, as every call the hot
 * functions make: a call they made inline would cost each of their paths
 * the registers it keeps across it. */
static RESIL_COLD __attribute__((noinline)) int
acquire_forked(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	fork_check(p->r);
	return resil_acquire_ex(p, req, permit);
}

RESIL_API __attribute__((flatten)) int
resil_acquire_ex(resil_policy_t *p, const struct resil_req *req, resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_binding *b;
	struct resil *r;
	uint32_t kind;

	if (RESIL_UNLIKELY(!p || !permit))
		return -EINVAL;
	if (req) {
		if (req->key_len && !req->key)
			return -EINVAL;
		if (req->permits < 0 ||
		    (req->priority != RESIL_PRIO_NORMAL && req->priority != RESIL_PRIO_CRITICAL))
			return -EINVAL;
		/* a call with a key: the keyed limiter's own way */
		if (RESIL_LIKELY(req->key != NULL))
			return acquire_keyed(p, req, permit);
	}
	r = p->r;
	if (forked(r))
		return acquire_forked(p, req, permit);
	if (RESIL_UNLIKELY(!good_binding(p, &b)))
		return acquire_general(p, req, pm, b, false);
	/* the kinds tested one by one, in this order: each lean path pays
	 * for the tests before it only */
	kind = LEAN_KIND(b->lean);
	if (kind == RESIL_LEAN_BULKHEAD) {
		/* the thread's last slot, free again: no call, no frame; a
		 * slot taken (or the first claim) goes on in
		 * acquire_lean_bulkhead, a global bulkhead starts there, and a
		 * bulkhead whose callers wait, with a critical share or of
		 * packed slots in acquire_lean_bulkhead_wait */
		uint32_t n = LEAN_BH_N(b->lean), id, idx;

		if (RESIL_UNLIKELY(!n)) {
			/* no slot count: global scope (fail-fast, conf.c), or
			 * callers that wait, a critical share, packed slots */
			if (b->rec->conf.scope != RESIL_SCOPE_GLOBAL)
				return acquire_lean_bulkhead_wait(p, b, req, pm);
			return acquire_lean_bulkhead(p, b, pm, false);
		}
		id = ld_relaxed(&b->m->claim_id);
		idx = resil_bulkhead_claim_last(b->lean_st, n, id);
		if (RESIL_UNLIKELY(idx - 1 >= n)) {
			if (idx == 0)
				return acquire_lean_bulkhead(p, b, pm, true);
			return rejected_full(r, b, pm); /* full, by the hint */
		}
		memset(pm, 0, sizeof(*pm));
		pm->limit_permits = 1;
		pm->holder = id;
		pm->bulkhead_idx = idx;
		pm->where = b->where;
		pm->flags = RESIL_PERMIT_BULKHEAD | b->held;
		return clockless_return(r, RESIL_ADMIT);
	}
	if (kind == RESIL_LEAN_BREAKER) {
		/* CLOSED spends nothing: the word's gen is all it takes; a
		 * rejection does not make the permit whole (acquire_open) */
		if (RESIL_UNLIKELY(resil_breaker_acquire_lean(b->lean_st, pm)))
			return acquire_open(p, req, pm, b);
		return lean_admit(r, req, pm, b, pm->breaker_gen);
	}
	if (kind == RESIL_LEAN_STATS)
		return lean_admit(r, req, pm, b, 0);
	if (kind == RESIL_LEAN_LIMIT) {
		uint32_t way = LEAN_LIMIT_WAY(b->lean);

		/* a call with a key went to acquire_keyed */
		if (way == LEAN_GCRA)
			return acquire_lean_gcra(p, b, req, pm);
		return acquire_lean_limit(p, b, req, pm);
	}
	if (kind == RESIL_LEAN_STACK)
		return acquire_lean_stack(p, b, req, pm);
	return acquire_general(p, req, pm, b, true);
}

RESIL_API int resil_acquire(resil_policy_t *p, resil_permit_t *permit)
{
	return resil_acquire_ex(p, NULL, permit);
}

RESIL_API int resil_acquire_key(resil_policy_t *p, const void *key, size_t len,
				resil_permit_t *permit)
{
	struct resil_req req = {.key = key, .key_len = len};

	if (RESIL_UNLIKELY(!key && len))
		return -EINVAL;
	return resil_acquire_ex(p, &req, permit);
}

/* A release into a record the handle is no longer bound to: into a whole
 * copy of it if it still carries the permit's tag (seqlock reader: gen,
 * copy, gen; the daemon stores gen 0 before it rewrites a reused record
 * and the new gen last), else nowhere: the record was reused, and the
 * block the permit came from with it. */
static RESIL_COLD __attribute__((noinline)) void
release_old(struct resil *r, struct resil_map *m, const struct resil_rec *rec, uint32_t tag,
	    struct resil_permit_priv *pm, int outcome)
{
	uint32_t g1 = ld_acquire((ra32 *)&rec->gen), g2;
	struct resil_rec copy;
	struct resil_ctx x;

	if (g1 == 0 || (g1 & 0xffffu) != tag) {
		pm->flags = 0;
		return;
	}
	memcpy(&copy, rec, sizeof(copy));
	atomic_thread_fence(memory_order_acquire);
	g2 = ld_relaxed((ra32 *)&rec->gen);
	if (g2 != g1) {
		pm->flags = 0;
		return;
	}
	fill_ctx(r, m, &x);
	x.rec = &copy;
	resil_policy_release(&x, &copy, pm, outcome);
	pm->flags = 0;
}

/* For resil_call (libcall.c), which holds a record across the call: is
 * it still the one it granted the permit under? */
bool resil_priv_rec_current(const struct resil_rec *rec, uint32_t gen)
{
	return ld_acquire((ra32 *)&rec->gen) == gen;
}

/* A release of a permit granted under the record the handle is bound to
 * (rec, in mapping m), through the general path. Inline: a call, its
 * prologue and the binding's fields passed again cost the general path
 * more (bench shed.acq_rel, bench/untrusted.md) than the larger frame
 * costs the lean releases. */
static inline __attribute__((always_inline)) void
release_bound(struct resil *r, struct resil_map *m, const struct resil_rec *rec, uint32_t bk_off,
	      struct resil_permit_priv *pm, int outcome)
{
	struct resil_ctx x;

	fill_ctx(r, m, &x);
	x.rec = rec;
	x.bk_conf = &rec->conf.breaker;
	x.bk_off = bk_off;
	resil_policy_release(&x, rec, pm, outcome);
	pm->flags = 0;
}

/* A release of a permit of a record the handle is no longer bound to
 * (see release_old). */
static RESIL_COLD __attribute__((noinline)) void
release_unbound(struct resil *r, struct resil_permit_priv *pm, uint32_t tag, int outcome)
{
	uint32_t seq32 = pm->where >> RESIL_PERMIT_IDX_BITS;
	uint32_t idx = pm->where & (RESIL_PERMIT_IDX_MAX - 1);
	struct resil_map *m = ld_acquire(&r->cur);

	if (RESIL_UNLIKELY((m->seq % 32) != seq32))
		m = resil_priv_find_map(r, seq32);
	if (RESIL_UNLIKELY(!m || idx == 0 || idx > m->seg->cfg->rec_cap)) {
		pm->flags = 0;
		return;
	}
	release_old(r, m, resil_seg_rec(m->seg, idx - 1), tag, pm, outcome);
}

/* The end of a lean release off the hot function's own path: the count
 * (one call site for the lean releases out of line, so that the counters'
 * function stays inlined where the general path calls it). */
static __attribute__((noinline, flatten)) void
release_count(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean breaker's success recorded over a slot that held another
 * outcome (v: RESIL_BK_LEAN_AFTER | its code): the counters, and the
 * transition they may call for, with a context; then the count. */
static RESIL_COLD __attribute__((noinline)) void breaker_after(struct resil *r,
							       const struct resil_binding *b,
							       const struct resil_permit_priv *pm,
							       uint32_t v)
{
	struct resil_ctx x;

	fill_ctx(r, b->m, &x);
	x.rec = b->rec;
	resil_breaker_lean_after(&x, &b->rec->conf.breaker, b->lean_st, pm->breaker_gen, v);
}

static RESIL_COLD __attribute__((noinline)) void release_lean_after(struct resil *r,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    uint32_t v, int outcome)
{
	breaker_after(r, b, pm, v);
	release_count(b, pm, outcome);
}

/* A release in a forked child: see acquire_forked. */
static RESIL_COLD __attribute__((noinline)) void release_forked(resil_policy_t *p,
								resil_permit_t *permit, int outcome)
{
	fork_check(p->r);
	resil_release(p, permit, outcome);
}

/* The general path of a release, from the binding b (see acquire_general:
 * each path of a release is its own function too). */
static __attribute__((noinline, flatten)) void release_general(struct resil *r,
							       const struct resil_binding *b,
							       struct resil_permit_priv *pm,
							       int outcome)
{
	release_bound(r, b->m, b->rec, LEAN_BK_OFF(b->lean), pm, outcome);
}

/* release_lean_bulkhead for a bulkhead of global scope, whose callers
 * wait or of packed slots: the slot count, the stride and the wait from
 * the configuration (resil_bulkhead_release reads no context). Out of
 * line: its wake (a call) would give the fail-fast release a frame. */
static __attribute__((noinline, flatten)) void
release_lean_bulkhead_conf(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	resil_bulkhead_release(NULL, &b->rec->conf.bulkhead, b->lean_st, pm, outcome);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean bulkhead's release and the count, in one function: the scan's
 * CAS and the count's add with no call between them, and the permit's
 * flags stored once. */
static __attribute__((noinline, flatten)) void
release_lean_bulkhead(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	uint32_t n = LEAN_BH_N(b->lean);

	if (RESIL_UNLIKELY(!n))
		return release_lean_bulkhead_conf(b, pm, outcome);
	resil_bulkhead_release_scan_n(b->lean_st, n, pm);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean breaker's release (see "Lean decisions"): a success in CLOSED
 * recorded without a context, anything else by the general release. */
static __attribute__((noinline, flatten)) void release_lean_breaker(struct resil *r,
								    const struct resil_binding *b,
								    struct resil_permit_priv *pm,
								    int outcome)
{
	uint32_t v = resil_breaker_release_lean(&b->rec->conf.breaker, b->lean_st, pm, outcome,
						LEAN_BK_OFF(b->lean));

	if (RESIL_UNLIKELY(v == RESIL_BK_LEAN_NO)) {
		/* not a success in CLOSED */
		release_general(r, b, pm, outcome);
		return;
	}
	if (RESIL_UNLIKELY(v != RESIL_BK_LEAN_DONE)) {
		release_lean_after(r, b, pm, v, outcome);
		return;
	}
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean stack's release, in resil_policy_release's order: the breaker's
 * success recorded lean (any other record: the general release, of every
 * component, from the same binding), the bulkhead's slot (the limiter
 * has nothing to give back), the count. */
static __attribute__((noinline, flatten)) void release_lean_stack(struct resil *r,
								  const struct resil_binding *b,
								  struct resil_permit_priv *pm,
								  int outcome)
{
	uint32_t v;

	if (b->lean_st) {
		v = resil_breaker_release_lean(&b->rec->conf.breaker, b->lean_st, pm, outcome,
					       LEAN_BK_OFF(b->lean));
		if (RESIL_UNLIKELY(v == RESIL_BK_LEAN_NO)) {
			release_general(r, b, pm, outcome);
			return;
		}
		if (RESIL_UNLIKELY(v != RESIL_BK_LEAN_DONE))
			breaker_after(r, b, pm, v);
	}
	if (b->bh_st)
		resil_bulkhead_release_scan_n(b->bh_st, b->bh_n, pm);
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

/* A lean limiter's release (it reads no context here) and the count. */
static __attribute__((noinline, flatten)) void
release_lean_limit(const struct resil_binding *b, struct resil_permit_priv *pm, int outcome)
{
	struct resil_ctx lx = {.client_id = 0};

	resil_limit_release(&lx, &b->rec->conf.limit, b->lean_st, pm, outcome);
	release_count(b, pm, outcome);
}

RESIL_API __attribute__((flatten)) void resil_release(resil_policy_t *p, resil_permit_t *permit,
						      int outcome)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	struct resil *r;
	const struct resil_binding *b;
	uint32_t kind;

	if (RESIL_UNLIKELY(!p || !permit || !(pm->flags & RESIL_PERMIT_HELD)))
		return;
	if (outcome != RESIL_SUCCESS && outcome != RESIL_FAILURE && outcome != RESIL_IGNORED)
		outcome = RESIL_IGNORED;
	r = p->r;
	/*
	 * A release goes to the record (and so the state block) the permit
	 * was granted under, whatever happened to the name since: a changed
	 * configuration, a delete, a re-attach to a new daemon. Mappings stay
	 * until resil_close, so the permit's (mapping, record, tag) is all it
	 * takes: no directory on this path. The handle's binding serves while
	 * its slot word is unchanged (one load: a record still named by its
	 * slot is not retired, so not reused); else the record is read as a
	 * seqlock, and one reused since (another tag, or 0 while free) drops
	 * the release: the handle's cached block may be another policy's.
	 */
	if (forked(r)) {
		release_forked(p, permit, outcome);
		return;
	}
	/* acquire: pairs with bind's release, so the binding is whole */
	b = ld_acquire(&p->b);
	/* b->word != 0 implies b->rec (bind); where and the tag in one test */
	if (RESIL_UNLIKELY(!(
		((b->where ^ pm->where) | ((b->held ^ pm->flags) >> RESIL_PERMIT_TAG_SHIFT)) == 0 &&
		b->word && ld_acquire(b->slotp) == b->word))) {
		release_unbound(r, pm, pm->flags >> RESIL_PERMIT_TAG_SHIFT, outcome);
		return;
	}
	/* the record the handle is bound to, still its slot's (not retired,
	 * so not reused either): no walk */
	/* the kinds tested one by one, each path a tail call, so that none
	 * pays for the registers of another (a jump table would) */
	kind = LEAN_KIND(b->lean);
	if (kind == RESIL_LEAN_BREAKER) {
		release_lean_breaker(r, b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_BULKHEAD) {
		release_lean_bulkhead(b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_LIMIT) {
		release_lean_limit(b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_STACK) {
		release_lean_stack(r, b, pm, outcome);
		return;
	}
	if (kind == RESIL_LEAN_NONE) {
		release_general(r, b, pm, outcome);
		return;
	}
	/* the counters read no context (and, last, nothing is kept across
	 * their add) */
	pm->flags = 0;
	resil_stats_released(NULL, &b->rec->conf, b->stats_st, pm, outcome, -1);
}

RESIL_API int64_t resil_permit_wait_ns(const resil_permit_t *permit)
{
	const struct resil_permit_priv *pm = (const struct resil_permit_priv *)permit;

	if (!permit)
		return -EINVAL;
	return pm->wait_ns;
}

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

RESIL_API int resil_force_state(resil_t *r, const char *name, int state)
{
	const char *word = force_word(state);
	int err;

	errmsg[0] = 0;
	if (!r || !valid_name(name) || !word)
		return -EINVAL;
	if (state == RESIL_STATE_OPEN)
		state = RESIL_STATE_FORCED_OPEN;
	fork_check(r);
	pthread_mutex_lock(&r->lock);
	if (r->embedded) {
		err = embedded_force(r, name, state, false);
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__ForceState fs = RESIL__FORCE_STATE__INIT;

		fs.name = (char *)name;
		/* RESIL_STATE_* plus one: proto/resil.proto's BreakerState */
		fs.target = (Resil__BreakerState)(state + 1);
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &fs;
		err = simple_request(r, &req, NULL);
		if (err == 0)
			(void)resil_priv_follow(r);
	}
	pthread_mutex_unlock(&r->lock);
	return err < 0 ? err : 0;
}

RESIL_API int resil_reset(resil_t *r, const char *name)
{
	int err;

	errmsg[0] = 0;
	if (!r || !valid_name(name))
		return -EINVAL;
	fork_check(r);
	pthread_mutex_lock(&r->lock);
	if (r->embedded) {
		err = embedded_force(r, name, RESIL_STATE_CLOSED, true);
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__ForceState fs = RESIL__FORCE_STATE__INIT;

		fs.name = (char *)name;
		fs.reset = true;
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &fs;
		err = simple_request(r, &req, NULL);
		if (err == 0)
			(void)resil_priv_follow(r);
	}
	pthread_mutex_unlock(&r->lock);
	return err < 0 ? err : 0;
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

/*
 * Whether an acquire on p may sleep: a bulkhead or a limiter with a wait
 * (bulkhead.wait, limit.wait). Bindings ask it before each acquire to
 * give up their own lock (Python's GIL) only around a decision that can
 * block: giving it up costs more than a decision that cannot. A lean
 * binding answers from the handle alone (of the lean kinds only a
 * bulkhead with bulkhead.wait waits).
 */
RESIL_API int resil_policy_may_wait(const resil_policy_t *p)
{
	const struct resil_rec *rec;
	struct resil_ctx x;
	const struct resil_binding *b;
	int err = -ENOENT;

	if (!p)
		return -EINVAL;
	/* a lean decision waits only for a bulkhead whose callers wait */
	if (bound((resil_policy_t *)p, &b) && LEAN_KIND(b->lean))
		return LEAN_KIND(b->lean) == RESIL_LEAN_BULKHEAD &&
		       b->rec->conf.bulkhead.wait_ns > 0;
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return err;
	return (resil_has(rec, RESIL_C_BULKHEAD) && rec->conf.bulkhead.wait_ns > 0) ||
	       (resil_has(rec, RESIL_C_LIMIT) && rec->conf.limit.wait_ns > 0);
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

/* ---- clock, random, words ---- */

/*
 * A pair is published whole (release); the one it replaces stays on
 * r->retired, since a deciding thread may be copying it right now, and is
 * freed by resil_close. A pair published before is published again
 * rather than allocated twice (the last RETIRED_REUSE looked at), so a
 * simulation switching between a few clocks keeps a few pairs.
 * Allocation happens here, on the setter's path, never on a decision's.
 */
#define RETIRED_REUSE 16

static int pair_swap(struct resil *r, const struct resil_clock *clock,
		     const struct resil_random *random)
{
	struct resil_retired *n;
	int looked = 0;

	pthread_mutex_lock(&r->lock);
	for (n = r->retired; n && looked < RETIRED_REUSE; n = n->older, looked++) {
		if (clock && n->is_clock && n->clock.fn == clock->fn && n->clock.ctx == clock->ctx)
			break;
		if (!clock && !n->is_clock && n->random.fn == random->fn &&
		    n->random.ctx == random->ctx)
			break;
	}
	if (!n || looked == RETIRED_REUSE) {
		n = calloc(1, sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&r->lock);
			return -ENOMEM;
		}
		n->is_clock = clock != NULL;
		if (clock)
			n->clock = *clock;
		else
			n->random = *random;
		n->older = r->retired;
		r->retired = n;
	}
	if (clock)
		st_release(&r->clock, &n->clock);
	else
		st_release(&r->random, &n->random);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

RESIL_API int resil_set_clock(resil_t *r, resil_clock_fn fn, void *ctx)
{
	struct resil_clock c = {fn, fn ? ctx : NULL};

	if (!r)
		return -EINVAL;
	return pair_swap(r, &c, NULL);
}

RESIL_API int resil_set_random(resil_t *r, uint64_t (*fn)(void *ctx), void *ctx)
{
	struct resil_random g = {fn ? fn : random_thread_fn, fn ? ctx : NULL};

	if (!r)
		return -EINVAL;
	return pair_swap(r, NULL, &g);
}

RESIL_API int64_t resil_now(const resil_t *r)
{
	if (!r)
		return resil_clock_fast();
	return resil_clock_now(ld_acquire(&r->clock));
}

RESIL_API const char *resil_strverdict(int verdict)
{
	return resil_verdict_name(verdict);
}

RESIL_API const char *resil_strstate(int state)
{
	return resil_breaker_state_name(state);
}

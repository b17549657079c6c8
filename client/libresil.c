/* SPDX-License-Identifier: MIT */
/*
 * libresil.c - a library handle: open (daemon or embedded) and close,
 * fork, the thread's last error, the clock and random pairs. Definitions
 * are define.c, handles and their bindings bind.c, the decision path
 * acquire.c and release.c, breaker control force.c; the row, the
 * segments and daemon restarts attach.c. The design (the modes, the
 * decision path, fork, permits) is docs/internals/libresil.md.
 *
 * Shared-memory words this file touches:
 *   - client rows: claimed by CAS in resil_client_claim (seg.c, through
 *     attach.c); released by resil_close of the process that claimed them,
 *     never by a child. Crash window: a process killed after its claim
 *     (with or without permits) leaves its row claimed; in daemon mode
 *     resild sees the pid die (pidfd) and reclaims the row and what it
 *     held. Embedded mode has no daemon: the rows and permits of a killed
 *     child stay claimed until the segments go away.
 *
 * Fork: pthread_atfork takes every handle's lock before fork and the child
 * handler bumps resil_priv_fork_gen; the decision path compares it with
 * r->fork_gen (binding.h, forked()) and the first call in the child
 * claims the child's own row before any permit is taken.
 *
 * r->clock and r->random: a pair is published whole (release) and read
 * with acquire by every decision (fill_ctx); a replaced pair stays on
 * r->retired until resil_close (a decision may be copying it).
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

void resil_priv_clearerr(void)
{
	errmsg[0] = 0;
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
	resil_priv_counts_child();
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
			/* the tables are the parent's */
			for (struct resil_map *m = cur; m; m = m->older)
				resil_priv_counts_drop(m);
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

static struct resil *resil_alloc(void)
{
	struct resil *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	r->ctl_fd = -1;
	r->pass_fd = -1;
	r->map0.counts_fd = -1;
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
		resil_priv_counts_open(r, &r->map0);
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
		resil_priv_counts_close(m);
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

/* SPDX-License-Identifier: MIT */
/*
 * libresil.c - the library's core: open (daemon or embedded), define,
 * handles, the hot path, fork, breaker control.
 *
 * Two modes, one decision path:
 *   - daemon mode: resil_open connects to resild, receives the two memfds
 *     (config read-only, state read-write) and maps them; definitions and
 *     breaker control are requests to the daemon (libctl.c).
 *   - embedded mode: resil_open_embedded creates the segment pair itself;
 *     the process (and the children it forks afterwards, which inherit the
 *     MAP_SHARED mappings) writes definitions under st->define_lock.
 *   Either way an acquire is resil_policy_acquire on the same segments, so
 *   both modes make the same decisions.
 *
 * Hot path (resil_acquire*, resil_release): validate arguments, one load of
 * the global fork generation, one acquire load of the policy's slot word
 * compared with the word the handle cached, then the composite decision of
 * shm/policy.c. No syscall, no lock, no allocation. A slot word that
 * changed (new configuration, new state block, deletion) sends the caller
 * through resolve() under r->lock, which re-reads the directory by name.
 *
 * Shared-memory words this file touches:
 *   - slot words (config segment): the daemon / the embedded definer
 *     writes them (release) after the record they point at is whole; we
 *     load them with acquire so the record's contents are visible.
 *   - client rows: claimed by CAS in resil_client_claim (seg.c); released
 *     by resil_close of the process that claimed them, never by a child.
 *   - st->clients_full: fetch_add relaxed per unregistered decision; a
 *     statistic, ordered with nothing.
 *   - st->define_lock (embedded): 0 free, else the holder's pid; taken by
 *     CAS acquire, released by a release store, so what the holder wrote
 *     into the directory and records is visible to the next holder.
 *
 * Fork: pthread_atfork takes every handle's lock before fork (so a child
 * never inherits a lock held by a thread that does not exist in it) and
 * the child handler bumps resil_priv_fork_gen. The hot path compares that
 * global with r->fork_gen (a plain load, no getpid) and the first call in
 * the child claims the child's own row, reseeds, and forgets the parent's
 * control connection before any permit is taken.
 *
 * Permits: a permit records the slot generation and the record it was
 * granted under (reserved32 = record index + 1), so a release after the
 * handle re-resolved (or after a deletion) frees what it holds in the
 * state block it came from: records and arena blocks are never reused
 * during a segment's life, so that record is still readable.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "internal.h"
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

/* ---- identity ---- */

/* /proc/self/stat field 22: start time in clock ticks since boot. */
static uint64_t self_start_time(void)
{
	char buf[1024], *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd, field;

	fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (!p)
		return 0;
	p++;
	/* after ")" comes field 3 */
	for (field = 3; field < 22 && p; field++) {
		p = strchr(p + 1, ' ');
	}
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

/* Claim this process's row. Under r->lock (or before r is shared). */
static void claim_row(struct resil *r)
{
	int row;

	r->pid = (uint32_t)getpid();
	r->start_time = self_start_time();
	r->uid = (uint32_t)getuid();
	row = resil_client_claim(&r->seg, r->pid, r->start_time, r->uid);
	if (row < 0) {
		/* a full table does not stop a worker: it decides unregistered
		 * (client id 0, no crash reclaim); the claim counted it in
		 * st->clients_full */
		r->table_full = true;
		row = -1;
	} else {
		r->table_full = false;
	}
	atomic_store_explicit(&r->row, row, memory_order_relaxed);
}

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

void resil_priv_after_fork(struct resil *r)
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
		if (r->mapped)
			claim_row(r);
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
	r->seg.cfg_fd = -1;
	r->seg.st_fd = -1;
	atomic_store_explicit(&r->row, -1, memory_order_relaxed);
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
	claim_row(r);
	resil_publish(r);
	*ret = r;
	return 0;
}

static int get_segments(struct resil *r)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__GetSegments gs = RESIL__GET_SEGMENTS__INIT;
	Resil__Response *resp = NULL;
	int fds[2], nfds = 2, err;
	char why[256] = "";

	req.body_case = RESIL__REQUEST__BODY_GET_SEGMENTS;
	req.get_segments = &gs;
	err = resil_priv_request(r, &req, &resp, fds, &nfds);
	if (err < 0)
		return err;
	resil__response__free_unpacked(resp, NULL);
	if (nfds != 2) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		resil_priv_seterr("resild on %s sent %d segment descriptors, not 2", r->socket_path,
				  nfds);
		return -EPROTO;
	}
	err = resil_seg_map(&r->seg, fds[0], fds[1], false, true, why, sizeof(why));
	if (err < 0) {
		/* resil_seg_map takes the fds only on success */
		close(fds[0]);
		close(fds[1]);
		r->seg.cfg_fd = r->seg.st_fd = -1;
		if (err == -EPROTO)
			resil_priv_seterr("resild on %s: incompatible segments: %s", r->socket_path,
					  why);
		else
			resil_priv_seterr("resild on %s: cannot map the segments: %s",
					  r->socket_path, *why ? why : strerror(-err));
		return err;
	}
	r->mapped = true;
	return 0;
}

static int open_conn(struct resil **ret, const char *socket_path, bool map)
{
	const char *path = resil_priv_socket_path(socket_path);
	struct resil *r;
	int err;

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
	/* control only (resilctl): the connection opens with the first request */
	err = map ? get_segments(r) : 0;
	if (err < 0) {
		if (r->ctl_fd >= 0)
			close(r->ctl_fd);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return err;
	}
	if (map)
		claim_row(r);
	resil_publish(r);
	*ret = r;
	return 0;
}

RESIL_API int resil_open(resil_t **ret, const char *socket_path)
{
	return open_conn(ret, socket_path, true);
}

int resil_priv_open_ctl(struct resil **ret, const char *socket_path)
{
	return open_conn(ret, socket_path, false);
}

RESIL_API void resil_close(resil_t *r)
{
	struct resil **pp;
	struct resil_policy *p, *n;
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

	row = atomic_load_explicit(&r->row, memory_order_relaxed);
	/* a child that never called in still holds its parent's row number:
	 * the row is the parent's to release, not ours */
	if (r->mapped && row >= 0 && ld_relaxed(&r->fork_gen) == ld_relaxed(&resil_priv_fork_gen))
		resil_client_release(&r->seg, (uint32_t)row);
	for (p = r->policies; p; p = n) {
		n = p->next;
		free(p);
	}
	if (r->ctl_fd >= 0)
		close(r->ctl_fd);
	if (r->mapped)
		resil_seg_unmap(&r->seg);
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
static int define_lock(struct resil *r)
{
	ra32 *w = &r->seg.st->define_lock;
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

static void define_unlock(struct resil *r)
{
	st_release(&r->seg.st->define_lock, 0);
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

RESIL_API int resil_define(resil_t *r, const char *name, const char *config)
{
	int err;

	errmsg[0] = 0;
	if (!r || !valid_name(name) || !config)
		return -EINVAL;
	if (r->embedded) {
		struct resil_conf c;
		char why[256] = "";

		resil_conf_init(&c);
		err = resil_conf_parse(&c, config, 1, why, sizeof(why));
		if (err == 0)
			err = resil_conf_check(&c, why, sizeof(why));
		if (err < 0) {
			resil_priv_seterr("%s", why);
			return err;
		}
		pthread_mutex_lock(&r->lock);
		err = define_lock(r);
		if (err == 0) {
			err = resil_seg_define(&r->seg, name, &c, r->uid, 0, resil_now(r), why,
					       sizeof(why));
			define_unlock(r);
			if (err < 0)
				resil_priv_seterr("%s", why);
		} else {
			resil_priv_seterr("the define lock is held by a live process");
		}
		pthread_mutex_unlock(&r->lock);
		return err < 0 ? err : 0;
	}

	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Create cr = RESIL__CREATE__INIT;
	Resil__Update up = RESIL__UPDATE__INIT;

	cr.name = (char *)name;
	cr.config = (char *)config;
	req.body_case = RESIL__REQUEST__BODY_CREATE;
	req.create = &cr;
	pthread_mutex_lock(&r->lock);
	err = simple_request(r, &req, NULL);
	if (err == -EEXIST) {
		/* it exists with another configuration: update it */
		up.name = (char *)name;
		up.config = (char *)config;
		req.body_case = RESIL__REQUEST__BODY_UPDATE;
		req.update = &up;
		err = simple_request(r, &req, NULL);
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
		err = simple_request(r, &req, NULL);
	}
	pthread_mutex_unlock(&r->lock);
	return err < 0 ? err : 0;
}

/* ---- handles ---- */

/* A daemon of another ABI major replaced these segments and marked them
 * retired (acquire: pairs with the daemon's release store of the flag).
 * Slow paths say so; the process must resil_open again to follow it. */
static int retired(struct resil *r)
{
	if (!(ld_acquire(&r->seg.cfg->flags) & RESIL_SEG_RETIRED))
		return 0;
	resil_priv_seterr("the segments were retired by a newer resild on %s: "
			  "resil_open again",
			  r->embedded ? "(embedded)" : r->socket_path);
	return -ESTALE;
}

RESIL_API int resil_policy(resil_t *r, const char *name, resil_policy_t **ret)
{
	struct resil_policy *p;
	uint32_t slot;
	uint64_t word;
	int err;

	if (!r || !valid_name(name) || !ret)
		return -EINVAL;
	if (!r->mapped)
		return -ENOTCONN;
	pthread_mutex_lock(&r->lock);
	err = retired(r);
	if (err == 0)
		err = resil_seg_lookup(&r->seg, name, &slot, &word);
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
		strcpy(p->name, name);
		p->next = r->policies;
		r->policies = p;
	}
	st_relaxed(&p->slot, slot);
	st_release(&p->word, word);
	*ret = p;
	err = 0;
out:
	pthread_mutex_unlock(&r->lock);
	return err;
}

/* Slow path: the slot word changed. Re-read the directory by name. A
 * handle to a deleted policy comes here on every call (and answers
 * -ENOENT) until the name is defined again. */
static const struct resil_rec *resolve(struct resil_policy *p, int *err)
{
	struct resil *r = p->r;
	const struct resil_rec *rec = NULL;
	uint32_t slot;
	uint64_t word;
	int e;

	pthread_mutex_lock(&r->lock);
	e = retired(r);
	if (e == 0)
		e = resil_seg_lookup(&r->seg, p->name, &slot, &word);
	if (e == 0) {
		rec = resil_seg_rec_of(&r->seg, word);
		if (!rec)
			e = -ENOENT;
	}
	if (e == 0) {
		st_relaxed(&p->slot, slot);
		st_release(&p->word, word);
	} else {
		st_release(&p->word, 0);
		*err = e;
	}
	pthread_mutex_unlock(&r->lock);
	return rec;
}

/* In a forked child, take this process's own identity first (r->lock must
 * not be held: resil_priv_after_fork takes it). Two loads and a compare
 * when nothing forked: no getpid on the hot path. */
static inline void fork_check(struct resil *r)
{
	if (RESIL_UNLIKELY(ld_acquire(&r->fork_gen) != ld_relaxed(&resil_priv_fork_gen)))
		resil_priv_after_fork(r);
}

/* The decision context of this process; fork_check done by the caller. */
static void fill_ctx(struct resil *r, struct resil_ctx *x)
{
	int row;

	row = atomic_load_explicit(&r->row, memory_order_relaxed);
	x->seg = &r->seg;
	x->rec = NULL;
	x->key = NULL;
	x->key_len = 0;
	x->clock = r->clock;
	x->random = r->random;
	if (!x->random.fn)
		x->random.fn = random_thread_fn;
	x->client_id = resil_client_id(row);
	x->pid = r->pid;
	x->now = 0;
}

const struct resil_rec *resil_priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err)
{
	struct resil *r = p->r;
	const struct resil_rec *rec;
	uint32_t slot;
	uint64_t w, cached;

	fork_check(r);
	fill_ctx(r, x);
	slot = ld_relaxed(&p->slot);
	cached = ld_acquire(&p->word);
	/* acquire: pairs with the release store of the slot word that
	 * published the record, so the record below is whole */
	w = slot < r->seg.cfg->slot_cap ? ld_acquire(&resil_seg_slots(&r->seg)[slot]) : 0;
	if (RESIL_LIKELY(w == cached && w != 0)) {
		rec = resil_seg_rec_of(&r->seg, w);
		if (RESIL_LIKELY(rec != NULL)) {
			x->rec = rec;
			return rec;
		}
	}
	rec = resolve(p, err);
	x->rec = rec;
	return rec;
}

static uint32_t rec_index(const struct resil_seg *s, const struct resil_rec *rec)
{
	return (uint32_t)(((const char *)rec - (const char *)s->cfg - s->cfg->recs_off) /
			  s->cfg->rec_size);
}

/* ---- hot path ---- */

RESIL_API int resil_acquire_ex(resil_policy_t *p, const struct resil_req *req,
			       resil_permit_t *permit)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_rec *rec;
	struct resil_ctx x;
	const void *key = NULL;
	size_t key_len = 0;
	int err = -ENOENT, ret;

	if (RESIL_UNLIKELY(!p || !permit))
		return -EINVAL;
	if (req) {
		if (req->key_len && !req->key)
			return -EINVAL;
		if (req->permits < 0 ||
		    (req->priority != RESIL_PRIO_NORMAL && req->priority != RESIL_PRIO_CRITICAL))
			return -EINVAL;
		key = req->key;
		key_len = req->key_len;
	}
	memset(pm, 0, sizeof(*pm));
	rec = resil_priv_ctx(p, &x, &err);
	if (RESIL_UNLIKELY(!rec))
		return err;
	if (req) {
		pm->priority = (uint32_t)req->priority;
		pm->limit_permits = req->permits > 1 ? (uint32_t)req->permits : 1;
	} else {
		pm->limit_permits = 1;
	}
	x.key = key;
	x.key_len = key_len;
	ret = resil_policy_acquire(&x, rec, pm, key, key_len);
	if (ret == RESIL_ADMIT) {
		pm->slot_gen = rec->gen;
		pm->reserved32 = rec_index(&p->r->seg, rec) + 1;
		pm->flags |= RESIL_PERMIT_HELD;
	}
	return ret;
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

RESIL_API void resil_release(resil_policy_t *p, resil_permit_t *permit, int outcome)
{
	struct resil_permit_priv *pm = (struct resil_permit_priv *)permit;
	const struct resil_rec *rec;
	struct resil *r;
	struct resil_ctx x;
	uint32_t idx;
	int err = 0;

	if (RESIL_UNLIKELY(!p || !permit || !(pm->flags & RESIL_PERMIT_HELD)))
		return;
	if (outcome != RESIL_SUCCESS && outcome != RESIL_FAILURE && outcome != RESIL_IGNORED)
		outcome = RESIL_IGNORED;
	r = p->r;
	rec = resil_priv_ctx(p, &x, &err);
	if (RESIL_UNLIKELY(!rec || rec->gen != pm->slot_gen)) {
		/* re-resolved or deleted since the grant: release into the
		 * record (and state block) the permit came from */
		idx = pm->reserved32;
		if (idx == 0 || idx > r->seg.cfg->rec_cap) {
			pm->flags = 0;
			return;
		}
		rec = resil_seg_rec(&r->seg, idx - 1);
		x.rec = rec;
	}
	resil_policy_release(&x, rec, pm, outcome);
	pm->flags = 0;
}

RESIL_API int64_t resil_permit_wait_ns(const resil_permit_t *permit)
{
	const struct resil_permit_priv *pm = (const struct resil_permit_priv *)permit;

	if (!permit)
		return -EINVAL;
	return pm->wait_ns;
}

/* ---- outcomes ---- */

static int default_http(int status)
{
	if (status >= 500 || status == 408 || status == 429)
		return RESIL_FAILURE;
	return RESIL_SUCCESS;
}

static int default_errno(int err)
{
	if (err < 0)
		err = -err;
	return err == 0 ? RESIL_SUCCESS : RESIL_FAILURE;
}

RESIL_API int resil_outcome_http(const resil_policy_t *p, int status)
{
	struct resil_ctx x;
	const struct resil_rec *rec;
	int err = 0;

	if (status < 100 || status > 999)
		return -EINVAL;
	if (!p)
		return default_http(status);
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return default_http(status);
	return resil_breaker_outcome_http(&rec->conf.breaker, status);
}

RESIL_API int resil_outcome_errno(const resil_policy_t *p, int e)
{
	struct resil_ctx x;
	const struct resil_rec *rec;
	int err = 0;

	if (!p)
		return default_errno(e);
	rec = resil_priv_ctx((resil_policy_t *)p, &x, &err);
	if (!rec)
		return default_errno(e);
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

/* Embedded: apply directly to the current state block. */
static int embedded_force(struct resil *r, const char *name, int state)
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
	if (!resil_has(rec, RESIL_C_BREAKER)) {
		resil_priv_seterr("policy %s has no breaker", name);
		return -EOPNOTSUPP;
	}
	fill_ctx(r, &x);
	x.rec = rec;
	return resil_breaker_force(&x, &rec->conf.breaker,
				   resil_comp_state(&r->seg, rec, RESIL_C_BREAKER), state);
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
		err = embedded_force(r, name, state);
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__ForceState fs = RESIL__FORCE_STATE__INIT;

		fs.name = (char *)name;
		fs.state = (char *)word;
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &fs;
		err = simple_request(r, &req, NULL);
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
		err = embedded_force(r, name, RESIL_STATE_CLOSED);
	} else {
		Resil__Request req = RESIL__REQUEST__INIT;
		Resil__Reset rs = RESIL__RESET__INIT;

		rs.name = (char *)name;
		req.body_case = RESIL__REQUEST__BODY_RESET;
		req.reset = &rs;
		err = simple_request(r, &req, NULL);
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
	return resil_breaker_state(resil_comp_state(&p->r->seg, rec, RESIL_C_BREAKER));
}

RESIL_API const char *resil_policy_name(const resil_policy_t *p)
{
	return p ? p->name : "";
}

/* ---- clock, random, words ---- */

RESIL_API int resil_set_clock(resil_t *r, resil_clock_fn fn, void *ctx)
{
	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&r->lock);
	r->clock.fn = fn;
	r->clock.ctx = fn ? ctx : NULL;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

RESIL_API int resil_set_random(resil_t *r, uint64_t (*fn)(void *ctx), void *ctx)
{
	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&r->lock);
	r->random.fn = fn;
	r->random.ctx = fn ? ctx : NULL;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

RESIL_API int64_t resil_now(const resil_t *r)
{
	if (!r)
		return resil_clock_monotonic(NULL);
	return resil_clock_now(&r->clock);
}

RESIL_API const char *resil_strverdict(int verdict)
{
	switch (verdict) {
	case RESIL_ADMIT:
		return "admitted";
	case RESIL_REJECT_OPEN:
		return "rejected: circuit open";
	case RESIL_REJECT_FULL:
		return "rejected: full";
	case RESIL_REJECT_LIMITED:
		return "rejected: rate limited";
	case RESIL_REJECT_SHED:
		return "rejected: shed";
	case RESIL_REJECT_BUDGET:
		return "rejected: retry budget exhausted";
	}
	if (verdict < 0)
		return "error";
	return "unknown verdict";
}

RESIL_API const char *resil_strstate(int state)
{
	switch (state) {
	case RESIL_STATE_CLOSED:
		return "closed";
	case RESIL_STATE_OPEN:
		return "open";
	case RESIL_STATE_HALF_OPEN:
		return "half-open";
	case RESIL_STATE_DISABLED:
		return "disabled";
	case RESIL_STATE_FORCED_OPEN:
		return "forced-open";
	case RESIL_STATE_METRICS_ONLY:
		return "metrics-only";
	}
	return "unknown";
}

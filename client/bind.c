/* SPDX-License-Identifier: MIT */
/*
 * bind.c - handles (resil_policy) and their bindings: the name looked up
 * in the directory, the record it names and what the decision path reads
 * of it, copied once into an immutable binding published to the handle;
 * and the slow path (resolve) a decision takes when the binding is no
 * longer good. The design: docs/internals/libresil.md, "Bindings".
 *
 * Shared-memory words this file reads:
 *   - slot words (config segment): the daemon (or the embedded definer)
 *     writes them (release) after the record they point at is whole; they
 *     are loaded with acquire so the record's contents are visible. A
 *     binding caches the word; a decision compares it with the slot's.
 *   - records: read-only here; what a binding copies of one (offsets of
 *     state blocks, slot counts, the breaker's waits) is validated by
 *     resil_seg_validate and resil_comp_state before it is kept.
 *
 * Handles and bindings are process memory: p->b is published with a
 * release store under r->lock and loaded with acquire by decisions; a
 * replaced binding waits RESIL_BINDING_GRACE_NS before its memory is
 * reused, since a decision may still be reading it.
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

/* Whether the components' branches of the decision path decide rec
 * (binding.h): the counters and at most one of a breaker without a
 * slow-call rate, a limiter that does not reserve, a bulkhead (of global
 * scope only with spread slots: its lease takes them, conf.c); or two or
 * three of a breaker without a slow-call rate, an unkeyed GCRA that does
 * not reserve and a fail-fast bulkhead, of host scope. Never with a
 * histogram or process scope (the general path's). */
static bool by_branches(const struct resil_rec *rec)
{
	const struct resil_conf *c = &rec->conf;
	const uint32_t set = 1u << RESIL_C_BREAKER | 1u << RESIL_C_LIMIT | 1u << RESIL_C_BULKHEAD;
	uint32_t mine = rec->components & set;

	if (rec->proc_stride || c->histogram || (rec->components & ~set) != 1u << RESIL_C_STATS)
		return false;
	if (resil_has(rec, RESIL_C_BREAKER) && !resil_breaker_lean(&c->breaker))
		return false;
	if (resil_has(rec, RESIL_C_LIMIT) && c->limit.wait_ns)
		return false;
	if (!(mine & (mine - 1)))
		return !resil_has(rec, RESIL_C_BULKHEAD) || resil_bulkhead_spread(&c->bulkhead) ||
		       c->scope != RESIL_SCOPE_GLOBAL;
	if (c->scope == RESIL_SCOPE_GLOBAL)
		return false;
	if (resil_has(rec, RESIL_C_LIMIT) && !resil_limit_lean_gcra(&c->limit, c->scope))
		return false;
	return !resil_has(rec, RESIL_C_BULKHEAD) || resil_bulkhead_fail_fast(&c->bulkhead);
}

/* rec's block of comp in m, NULL when it has none. */
static void *block_of(const struct resil_map *m, const struct resil_rec *rec, enum resil_comp comp)
{
	return resil_has(rec, comp) ? resil_comp_state(m->seg, rec, comp) : NULL;
}

/* The decision path's branches for rec in m (internal.h, struct
 * resil_binding), from the read-only configuration, once per binding. */
static void branches_of(struct resil_binding *b, const struct resil_map *m,
			const struct resil_rec *rec)
{
	const struct resil_conf *c = &rec->conf;

	b->steps = by_branches(rec) ? 0 : RESIL_STEP_GENERAL;
	b->bk_off = resil_has(rec, RESIL_C_BREAKER) ? resil_breaker_win_off(&c->breaker) : 0;
	b->bk_cap = resil_breaker_wait_cap(&c->breaker);
	resil_limit_key_seeds(m->seg, b->key_seeds);
	b->keyed = resil_has(rec, RESIL_C_LIMIT) && c->limit.keys;
	if (b->steps)
		return;
	b->stats_st = resil_comp_state(m->seg, rec, RESIL_C_STATS);
	b->bk_st = block_of(m, rec, RESIL_C_BREAKER);
	b->lim_st = block_of(m, rec, RESIL_C_LIMIT);
	b->bh_st = block_of(m, rec, RESIL_C_BULKHEAD);
	if (b->bk_st)
		b->bk_wait = resil_breaker_lean_wait(&c->breaker, &b->bk_streaks);
	if (b->lim_st && resil_limit_lean_gcra(&c->limit, c->scope))
		b->lim_way = RESIL_LIM_GCRA;
	else if (b->lim_st && resil_limit_lean_keyed(&c->limit))
		b->lim_way = RESIL_LIM_KEYED;
	else
		b->lim_way = RESIL_LIM_CTX;
	if (b->bh_st && c->scope != RESIL_SCOPE_GLOBAL && resil_bulkhead_fail_fast(&c->bulkhead))
		b->bh_n = resil_bulkhead_max_of(&c->bulkhead);
	/* a block out of the segment's bounds (resil_comp_state): the
	 * general path decides, and finds it so */
	if (!b->stats_st || (resil_has(rec, RESIL_C_BREAKER) && !b->bk_st) ||
	    (resil_has(rec, RESIL_C_LIMIT) && !b->lim_st) ||
	    (resil_has(rec, RESIL_C_BULKHEAD) && !b->bh_st))
		b->steps = RESIL_STEP_GENERAL;
	else
		b->steps = (b->bk_st ? RESIL_STEP_BREAKER : 0) |
			   (b->lim_st ? RESIL_STEP_LIMIT : 0) |
			   (b->bh_st ? RESIL_STEP_BULKHEAD : 0);
}

const struct resil_binding resil_priv_unbound = {.held = RESIL_PERMIT_HELD,
						 .steps = RESIL_STEP_GENERAL};

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
		branches_of(b, m, rec);
		b->where = permit_where(m, rec_index(m->seg, rec));
		b->held = permit_held(rec);
		b->cnt = count_base(m, rec->slot);
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

	if (!r || !resil_priv_valid_name(name) || !ret)
		return -EINVAL;
	if (!r->mapped)
		return -ENOTCONN;
	resil_priv_clearerr();
	fork_check(r);
	/* the calling thread's stripe of the count tables: the general
	 * path's pools count in it (a thread that never takes one counts in
	 * stripe 0, with atomic adds) */
	resil_priv_stripe_first();
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
RESIL_COLD const struct resil_rec *resil_priv_ctx_slow(resil_policy_t *p, struct resil_ctx *x,
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
	if (rec) {
		*where = permit_where(*ret_m, rec_index((*ret_m)->seg, rec));
		x->counts = count_base(*ret_m, rec->slot);
	}
	return rec;
}

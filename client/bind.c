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

/* A lean stack's block of comp, NULL when it has none. */
static void *stack_block(const struct resil_map *m, const struct resil_rec *rec,
			 enum resil_comp comp)
{
	return resil_has(rec, comp) ? resil_comp_state(m->seg, rec, comp) : NULL;
}

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

	if (!r || !resil_priv_valid_name(name) || !ret)
		return -EINVAL;
	if (!r->mapped)
		return -ENOTCONN;
	resil_priv_clearerr();
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
	if (rec)
		*where = permit_where(*ret_m, rec_index((*ret_m)->seg, rec));
	return rec;
}

/* SPDX-License-Identifier: MIT */
/*
 * binding.h - private to the library's decision path (bind.c, acquire.c,
 * release.c, force.c): the permit's where and tag, the binding's kinds,
 * the decision context, fork detection.
 */
#ifndef RESIL_CLIENT_BINDING_H
#define RESIL_CLIENT_BINDING_H

#include "count_table.h"
#include "internal.h"

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

/* rec_size is RESIL_REC_SIZE in every segment this build maps
 * (resil_seg_validate checks it): a shift, not a division. */
static inline uint32_t rec_index(const struct resil_seg *s, const struct resil_rec *rec)
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
 * The decision path (acquire.c, release.c) is one acquire and one
 * release. Each reads the binding's named branches (internal.h, struct
 * resil_binding): a policy of other components (a shedder, an adaptive
 * limit, a retry budget, a histogram, process scope, a breaker with a
 * slow-call rate, a limiter that reserves) is decided by
 * resil_policy_acquire/release with a whole context (RESIL_STEP_GENERAL); any other
 * is decided by its breaker, its limiter and its bulkhead in that order,
 * each the component's own function, the cheapest way the binding names
 * (the way is in docs/internals/libresil.md, "The decision path").
 */

/* The limiter's way (lim_way): an unkeyed GCRA of host scope decides from
 * the clock alone (resil_limit_acquire_gcra); a keyed limiter first looks
 * for the key where most keys are (resil_limit_acquire_keyed); any other
 * limiter, and a key not found there, decides with a whole context
 * (resil_limit_acquire). */
#define RESIL_LIM_CTX	0u
#define RESIL_LIM_GCRA	1u
#define RESIL_LIM_KEYED 2u

/* define.c: a name a policy may have (1 to RESIL_NAME_MAX - 1 bytes); a
 * control request whose response only says done (keep: the response, for
 * the caller to free; NULL: freed). */
bool resil_priv_valid_name(const char *name);
int resil_priv_simple_request(struct resil *r, struct Resil__Request *req,
			      struct Resil__Response **keep);

/* bind.c: the slow path of a decision's context: the handle is not bound
 * to the current mapping's record (first use, a changed configuration, a
 * re-attach), or the mapping is retired. Resolves under r->lock. */
const struct resil_rec *resil_priv_ctx_slow(resil_policy_t *p, struct resil_ctx *x,
					    struct resil_map **ret_m, uint32_t *where, int *err);

/* The whole decision context of this process in mapping m (fork_check
 * done by the caller): every field a component may read is written, so
 * that none reads what an earlier decision left on the stack. */
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
	x->bk_off = 0;
	x->repairs = 0;
	x->repair_word = 0;
	x->resets = 0;
	x->counts = NULL;
}

/* The whole context of a decision on binding b: its mapping, its record
 * and the breaker window's offset the binding took from the record. */
static inline __attribute__((always_inline)) void
binding_ctx(struct resil *r, const struct resil_binding *b, struct resil_ctx *x)
{
	fill_ctx(r, b->m, x);
	x->rec = b->rec;
	x->bk_conf = &b->rec->conf.breaker;
	x->bk_off = b->bk_off;
	x->counts = b->cnt;
}

/*
 * The count table (counts.c; shm/count_table.h): acquired before a pooled
 * claim's CAS, released after a release's CAS (or its failure: resild
 * freed the slot), in the thread's own stripe, one add; the general
 * path counts in resil_policy_acquire and _release (x->counts). No call
 * on the inlined paths (a call there would make every decision of the
 * function save registers): a thread takes its stripe on a path of its
 * own, its first claim (count_acquired_out: a thread's first claim in a
 * pool is a walk). b->cnt: the policy's slot's block,
 * resil_priv_counts_none for a mapping without a table.
 */
extern struct resil_count resil_priv_counts_none[RESIL_COUNT_STRIPES];
void resil_priv_count_slow(struct resil_count *block, uint64_t n);
/* The calling thread's stripe, taken at its first call (none may be
 * free: it counts in stripe 0 then). */
void resil_priv_stripe_first(void);

/* resil_count_acquired where a call costs nothing more (a function of
 * its own): a thread without a stripe takes one here. */
static inline __attribute__((always_inline)) void count_acquired_out(struct resil_count *block,
								     uint64_t n)
{
	if (RESIL_UNLIKELY(!resil_count_stripe_off)) {
		resil_priv_count_slow(block, n);
		return;
	}
	resil_count_acquired(block, n);
}

/* The block of policy slot `slot` in m's table; resil_priv_counts_none
 * without a table. */
static inline struct resil_count *count_base(const struct resil_map *m, uint32_t slot)
{
	if (!m->counts || slot >= m->counts_cap)
		return resil_priv_counts_none;
	return resil_count_at(m->counts, m->counts_cap, 0, slot);
}

#endif

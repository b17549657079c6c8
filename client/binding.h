/* SPDX-License-Identifier: MIT */
/*
 * binding.h - private to the library's decision path (bind.c, acquire.c,
 * release.c, force.c): the permit's where and tag, the binding's kinds,
 * the decision context, fork detection.
 */
#ifndef RESIL_CLIENT_BINDING_H
#define RESIL_CLIENT_BINDING_H

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

#endif

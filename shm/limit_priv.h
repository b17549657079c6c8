/* SPDX-License-Identifier: MIT */
/*
 * limit_priv.h - what limit.c (the limiter's words, the decision),
 * limit_keyed.c (the keyed table) and limit_maint.c (layout, maintenance,
 * observers) share: the per-decision parameters, the state's views, the
 * probe chain of a key, and the functions each calls in another. Nothing
 * outside the three includes it. The shared words, their writers and
 * their memory orders are limit.c's top comment; the design is
 * docs/internals/limit.md.
 */
#ifndef RESIL_SHM_LIMIT_PRIV_H
#define RESIL_SHM_LIMIT_PRIV_H

#include "limit.h"

#define RING_BIAS    (1LL << 62)
#define AX_CMASK     ((1u << 20) - 1)
#define AX_WMASK     0xffffffULL
#define HEAL_SLACK   (10 * RESIL_NS_PER_S) /* a reading can be this stale */
#define SWEEP_SLACK  RESIL_NS_PER_S	   /* idle this long before maintenance frees a key */
#define INSERT_TRIES 8

/* fixed SipHash key for keyed limiters without a segment (tests, tools) */
#define FIXED_K0 0x0706050403020100ULL
#define FIXED_K1 0x0f0e0d0c0b0a0908ULL

#define cas_sc(p, e, v)                                                                            \
	atomic_compare_exchange_strong_explicit((p), (e), (v), memory_order_seq_cst,               \
						memory_order_seq_cst)
#define ld_sc(p) atomic_load_explicit((p), memory_order_seq_cst)

/* What one decision needs, computed once per call. */
struct lp {
	int64_t now;
	int64_t T;	  /* emission interval */
	int64_t tau;	  /* T * burst */
	int64_t max_wait; /* limit.wait (the bounds: what any writer can have set) */
	int64_t grant;	  /* longest reservation granted now: limit.wait, 0 under dry run */
	int64_t P;	  /* period */
	uint32_t L;	  /* count */
	uint32_t n;	  /* permits */
	int64_t slack;	  /* a GCRA TAT this far past tau + max_wait is healed */
	unsigned algo;
	ra64 *heals; /* the state's heal counter */
};

static inline struct resil_limit_state *lstate(void *st)
{
	return st;
}

static inline rai64 *ring_of(struct resil_limit_state *s)
{
	return (rai64 *)(void *)s->data;
}

static inline struct resil_limit_entry *table_of(struct resil_limit_state *s)
{
	return (struct resil_limit_entry *)(void *)s->data;
}

static inline uint32_t nbuckets(const struct resil_limit_conf *c)
{
	return c->keys / 2 ? c->keys / 2 : 1;
}

/* The parameters of a decision at now for n permits of c. */
static inline void lp_init(struct lp *p, const struct resil_limit_conf *c, int64_t now, uint32_t n)
{
	p->now = now;
	p->T = c->interval_ns;
	p->tau = c->interval_ns * (int64_t)(c->burst ? c->burst : 1);
	p->max_wait = c->wait_ns;
	p->grant = c->dry_run ? 0 : c->wait_ns; /* dry run reserves nothing */
	p->P = c->period_ns;
	p->L = c->count;
	p->n = n ? n : 1;
	p->slack = HEAL_SLACK;
	p->algo = resil_limit_algo(c);
	p->heals = NULL;
}

/* When a ring slot's admission leaves the window: raw - RING_BIAS + P,
 * saturated. A slot is any client's to write; a value near either end
 * of int64 reads as far ahead (and is healed), never overflows. */
static inline int64_t ring_end(int64_t raw, const struct lp *p)
{
	int64_t v;

	if (__builtin_sub_overflow(raw, RING_BIAS, &v) || __builtin_add_overflow(v, p->P, &v))
		return raw < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
	return v;
}

/* ---- limit.c: one word of a limiter, by algorithm ---- */
int resil_limit_priv_word_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp);
bool resil_limit_priv_word_idle(uint64_t v, const struct lp *p);
int64_t resil_limit_priv_word_wait1(uint64_t v, const struct lp *p);
int64_t resil_limit_priv_word_age(uint64_t v, const struct lp *p);
uint64_t resil_limit_priv_word_merge(uint64_t x, uint64_t y, const struct lp *p);

/* ---- limit_keyed.c: the keyed table ---- */

/*
 * The probe chain of a key: bucket b1, bucket b2, then, while the bucket
 * just visited (from b2 on) carries FP_OVF, the next buckets in order. A
 * new key goes to b1 or b2; only when both are full and the table holds
 * fewer than limit.keys keys does it go further, to the first bucket after
 * b2 with an EMPTY entry, after marking every bucket it passed (b2
 * included) with FP_OVF, so a lookup that follows the chain reaches it
 * before anyone can see it. Marks are never cleared during a table's life
 * (they only make some lookups read one more line). At <= 50% load the
 * chance that both buckets of a key are full is small (0.4% of keys at
 * 50%, docs/internals/limit.md) but not nil, and the chain is what makes "no key is
 * lost while the table is not full" a guarantee.
 */
#define FP_OVF (1ULL << 63) /* in entry 0's fingerprint word: the chain goes on */

static inline uint64_t fp_key(uint64_t f)
{
	return f & ~FP_OVF;
}

struct chain {
	uint32_t b1, b2, nb;
};

/* b1: bits 31..62 of fp (< 2^63: bit 63 is FP_OVF's) scaled to the
 * buckets, so every bucket is some key's first. b2 != b1 (when nb > 1):
 * b1 + 1 + [0, nb - 2] wraps at most once, so a subtraction replaces the
 * modulo (the one division left is fp's). */
static inline void chain_init_nb(struct chain *ch, uint64_t fp, uint32_t nb)
{
	uint32_t b2;

	ch->nb = nb;
	ch->b1 = (uint32_t)((((fp >> 31) & 0xffffffffu) * (uint64_t)nb) >> 32);
	b2 = nb > 1 ? ch->b1 + 1 + (uint32_t)fp % (nb - 1) : ch->b1;
	/* the wrap by a mask: taken for half the keys, a branch would miss
	 * at every other lookup */
	ch->b2 = b2 - (nb & -(uint32_t)(b2 >= nb));
}

/* A key's chain in the table of c. */
static inline void chain_init(struct chain *ch, uint64_t fp, const struct resil_limit_conf *c)
{
	chain_init_nb(ch, fp, nbuckets(c));
}

/* The k-th bucket of the chain, k <= nb: b2 + k - 1 < 2 nb wraps at most
 * once. */
static inline uint32_t chain_bucket(const struct chain *ch, uint32_t k)
{
	uint32_t b = ch->b2 + k - 1;

	return k == 0 ? ch->b1 : b >= ch->nb ? b - ch->nb : b;
}

uint64_t resil_limit_priv_key_fp(const struct resil_ctx *x, const void *key, size_t len);
int64_t resil_limit_priv_key_find(struct resil_limit_entry *t, const struct chain *ch, uint64_t fp,
				  memory_order mo);
/* resil_limit_priv_key_find's common case, acquire loads: the key in b1 or
 * b2, or -1 (it may still be further along its chain). */
int64_t resil_limit_priv_key_find_pair(struct resil_limit_entry *t, const struct chain *ch,
				       uint64_t fp);
int64_t resil_limit_priv_key_find_bounded(struct resil_limit_entry *t, const struct chain *ch,
					  uint64_t fp);
int64_t resil_limit_priv_overflow_slot(struct resil_limit_entry *t, const struct chain *ch,
				       uint64_t *seen);
int64_t resil_limit_priv_key_get(struct resil_ctx *x, struct resil_limit_state *s,
				 const struct resil_limit_conf *c, const struct lp *p, uint64_t fp,
				 const struct chain *ch, int64_t *full_wait);
void resil_limit_priv_keys_full_event(struct resil_ctx *x, struct resil_limit_state *s,
				      const struct resil_limit_conf *c, int64_t now);
/* The key's fingerprint and chain, its two buckets prefetched for
 * writing. */
uint64_t resil_limit_priv_key_ask(const uint64_t k[2], struct resil_limit_state *s,
				  const struct resil_limit_conf *c, const void *key, size_t len,
				  struct chain *ch);
int resil_limit_priv_keyed_take(struct resil_ctx *x, struct resil_limit_state *s,
				const struct resil_limit_conf *c, const struct lp *p, uint64_t fp,
				const struct chain *ch, struct resil_permit_priv *pm);
/* The take on entry idx of the table (found or inserted): the key's word,
 * the permit's fields, the global count. */
int resil_limit_priv_keyed_at(struct resil_limit_state *s, const struct resil_limit_conf *c,
			      const struct lp *p, int64_t idx, struct resil_permit_priv *pm);

#endif

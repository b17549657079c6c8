/* SPDX-License-Identifier: MIT */
/*
 * limit_keyed.c - the rate limiter's keyed table: a key's fingerprint,
 * its probe chain (two buckets, then the FP_OVF chain), lookup, insert,
 * eviction and the table-full event, and the keyed take that runs a
 * key's word through limit.c's algorithms. The design (layout, the
 * two-bucket rule, eviction order, who writes which word with which
 * memory order, the crash windows) is docs/internals/limit.md,
 * "Keyed limiters"; this file holds the code it describes.
 *
 * Nothing here allocates, locks, logs or makes a syscall on the hot path.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "limit.h"
#include "limit_priv.h"
#include "resil.h"
#include "stats.h"

/* ---------------------------------------------------------- keyed table */

void resil_limit_key_seeds(const struct resil_seg *seg, uint64_t k[2])
{
	k[0] = seg && seg->cfg ? seg->cfg->hash_k0 : FIXED_K0;
	k[1] = seg && seg->cfg ? seg->cfg->hash_k1 : FIXED_K1;
}

static inline uint64_t key_fp(const uint64_t k[2], const void *key, size_t len)
{
	uint64_t fp = fp_key(resil_hash64(key, len, k[0], k[1]));

	return fp < 2 ? fp + 2 : fp;
}

uint64_t resil_limit_priv_key_fp(const struct resil_ctx *x, const void *key, size_t len)
{
	uint64_t k[2];

	resil_limit_key_seeds(x ? x->seg : NULL, k);
	return key_fp(k, key, len);
}

/* Does the chain go on after its k-th bucket? */
static bool chain_next(struct resil_limit_entry *t, const struct chain *ch, uint32_t k,
		       memory_order mo)
{
	if (ch->nb == 1)
		return false;
	if (k == 0)
		return true;
	if (k >= ch->nb)
		return false; /* every bucket visited */
	return atomic_load_explicit(&t[chain_bucket(ch, k) * RESIL_LIMIT_BUCKET].fp, mo) & FP_OVF;
}

/* The entry holding fp, or -1. */
int64_t resil_limit_priv_key_find(struct resil_limit_entry *t, const struct chain *ch, uint64_t fp,
				  memory_order mo)
{
	uint32_t k, j, i;

	for (k = 0;; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET; j++) {
			i = chain_bucket(ch, k) * RESIL_LIMIT_BUCKET + j;
			if (fp_key(atomic_load_explicit(&t[i].fp, mo)) == fp)
				return i;
		}
		if (!chain_next(t, ch, k, mo))
			return -1;
	}
}

/* Which entries of a bucket hold fp: a mask, without a branch per entry
 * (which one matches is as random as the keys). */
static inline uint32_t bucket_match(const struct resil_limit_entry *e, uint64_t fp)
{
	uint32_t m = 0, j;

#pragma GCC unroll 4
	for (j = 0; j < RESIL_LIMIT_BUCKET; j++)
		m |= (uint32_t)(fp_key(ld_acquire(&e[j].fp)) == fp) << j;
	return m;
}

/*
 * resil_limit_priv_key_find's common case: the key is in b1 or b2, the
 * chain's first two buckets (both prefetched by resil_limit_priv_key_ask),
 * b1 first, so the index is the loop's. Most keys are in b1 (an insert
 * prefers it), so "in b1" is predicted right and a lookup does not wait
 * for b2's line. -1: in neither (the loop then follows the chain).
 */
int64_t resil_limit_priv_key_find_pair(struct resil_limit_entry *t, const struct chain *ch,
				       uint64_t fp)
{
	uint32_t m = bucket_match(&t[(size_t)ch->b1 * RESIL_LIMIT_BUCKET], fp);

	if (RESIL_LIKELY(m))
		return (int64_t)ch->b1 * RESIL_LIMIT_BUCKET + __builtin_ctz(m);
	m = bucket_match(&t[(size_t)ch->b2 * RESIL_LIMIT_BUCKET], fp);
	if (RESIL_LIKELY(m))
		return (int64_t)ch->b2 * RESIL_LIMIT_BUCKET + __builtin_ctz(m);
	return -1;
}

/* resil_limit_priv_key_find for the daemon's tick: at most TWIN_WALK buckets of the chain,
 * -2 when the chain goes on past them. Every bucket's FP_OVF mark is any
 * client's to set, and the full walk of one key is then the whole table:
 * for every entry of the table, that would make one tick cost the table's
 * square. A chain that long exists only at a table that full in a run of
 * bad luck (or by a client's hand); its entries are then judged at a later
 * tick, once the chain is shorter, or never (kept, counted live). */
#define TWIN_WALK 16
int64_t resil_limit_priv_key_find_bounded(struct resil_limit_entry *t, const struct chain *ch,
					  uint64_t fp)
{
	uint32_t k, j, i;

	for (k = 0; k < TWIN_WALK; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET; j++) {
			i = chain_bucket(ch, k) * RESIL_LIMIT_BUCKET + j;
			if (fp_key(ld_sc(&t[i].fp)) == fp)
				return i;
		}
		if (!chain_next(t, ch, k, memory_order_seq_cst))
			return -1;
	}
	return -2;
}

static void mark_ovf(struct resil_limit_entry *t, uint32_t bucket)
{
	ra64 *w = &t[bucket * RESIL_LIMIT_BUCKET].fp;
	uint64_t f = ld_sc(w);

	while (!(f & FP_OVF) && !cas_sc(w, &f, f | FP_OVF))
		;
}

/* An EMPTY entry past b2 (the chain marked up to it), or -1. */
int64_t resil_limit_priv_overflow_slot(struct resil_limit_entry *t, const struct chain *ch,
				       uint64_t *seen)
{
	uint32_t k, j, m, i;
	uint64_t f;

	if (ch->nb == 1)
		return -1;
	for (k = 2; k <= ch->nb; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET; j++) {
			i = chain_bucket(ch, k) * RESIL_LIMIT_BUCKET + j;
			f = ld_sc(&t[i].fp);
			if (fp_key(f) != RESIL_LIMIT_FP_EMPTY)
				continue;
			for (m = 1; m < k; m++)
				mark_ovf(t, chain_bucket(ch, m));
			/* read again (a mark may have set this word's OVF bit), and
			 * only an entry still EMPTY: another inserter may have
			 * claimed it since, and the claim's CAS expects *seen, so
			 * a key read here would be overwritten, its `used` count
			 * left behind */
			f = ld_sc(&t[i].fp);
			if (fp_key(f) != RESIL_LIMIT_FP_EMPTY)
				continue;
			*seen = f;
			return i;
		}
	}
	return -1;
}

/* Reset a claimed entry's state from what the previous owner left. */
static void entry_reset(struct resil_limit_entry *e, uint64_t seen)
{
	if (seen)
		cas_relaxed(&e->st, &seen, 0); /* lost: someone already built on it */
}

/*
 * After a claim: one entry per key. The first holder of fp in chain order
 * stays; every later one is folded into it and becomes a TOMB. Processes
 * racing on one key all compute the same order, and the claims and these
 * loads are seq_cst, so at least one of two racers sees the other's claim.
 */
static int64_t key_dedup(struct resil_limit_state *s, struct resil_limit_entry *t,
			 const struct chain *ch, uint64_t fp, int64_t mine, const struct lp *p)
{
	int64_t first = -1;
	uint32_t k, j, i;

	for (k = 0;; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET; j++) {
			uint64_t f, v, m;

			i = chain_bucket(ch, k) * RESIL_LIMIT_BUCKET + j;
			f = ld_sc(&t[i].fp);
			if (fp_key(f) != fp || (int64_t)i == first)
				continue;
			if (first < 0) {
				first = i;
				continue;
			}
			v = ld_relaxed(&t[i].st);
			m = ld_relaxed(&t[first].st);
			while (!cas_relaxed(&t[first].st, &m, resil_limit_priv_word_merge(m, v, p)))
				;
			if (cas_sc(&t[i].fp, &f, (f & FP_OVF) | RESIL_LIMIT_FP_TOMB)) {
				faa_relaxed(&s->used, (uint64_t)-1);
				faa_relaxed(&s->merges, 1);
			}
		}
		if (!chain_next(t, ch, k, memory_order_seq_cst))
			break;
	}
	return first >= 0 ? first : mine;
}

/*
 * Find or insert. Returns the entry index, or -1 when there is no room;
 * then *full_wait says when the first candidate stops being limited.
 */
int64_t resil_limit_priv_key_get(struct resil_ctx *x, struct resil_limit_state *s,
				 const struct resil_limit_conf *c, const struct lp *p, uint64_t fp,
				 const struct chain *chp, int64_t *full_wait)
{
	struct resil_limit_entry *t = table_of(s);
	struct chain ch = *chp;
	int64_t idx;
	int tries;

	idx = resil_limit_priv_key_find_pair(t, &ch, fp);
	if (RESIL_LIKELY(idx >= 0))
		return idx;
	idx = resil_limit_priv_key_find(t, &ch, fp, memory_order_acquire);
	if (idx >= 0)
		return idx;

	*full_wait = INT64_MAX;
	for (tries = 0; tries < INSERT_TRIES; tries++) {
		int64_t empty[2] = {-1, -1}, tomb = -1, idle = -1, cold = -1, pick;
		int64_t cold_age = INT64_MAX, w, age;
		uint64_t fps[2 * RESIL_LIMIT_BUCKET], sts[2 * RESIL_LIMIT_BUCKET] = {0};
		uint64_t expect, seen = 0;
		uint32_t k, j, nbk = ch.nb > 1 ? 2 : 1;
		bool grow, evict;
		int pos, ppos = -1;

		/* the chain may have grown a holder of fp meanwhile */
		idx = resil_limit_priv_key_find(t, &ch, fp, memory_order_seq_cst);
		if (idx >= 0)
			return idx;
		for (k = 0; k < nbk; k++) {
			for (j = 0; j < RESIL_LIMIT_BUCKET; j++) {
				uint64_t f;

				pos = (int)(k * RESIL_LIMIT_BUCKET + j);
				f = ld_sc(&t[chain_bucket(&ch, k) * RESIL_LIMIT_BUCKET + j].fp);
				fps[pos] = f;
				if (fp_key(f) == RESIL_LIMIT_FP_EMPTY) {
					if (empty[k] < 0)
						empty[k] = pos;
					continue;
				}
				sts[pos] = ld_relaxed(
				    &t[chain_bucket(&ch, k) * RESIL_LIMIT_BUCKET + j].st);
				if (fp_key(f) == RESIL_LIMIT_FP_TOMB) {
					if (tomb < 0)
						tomb = pos;
					continue;
				}
				/* state 0 under a key: claimed by an inserter that has
				 * not taken its first permit yet. Never a victim: its
				 * take would land on the evicting key's state. (One
				 * whose inserter died is freed by the sweep.) */
				if (sts[pos] == 0)
					continue;
				if (resil_limit_priv_word_idle(sts[pos], p)) {
					if (idle < 0)
						idle = pos;
					continue;
				}
				w = resil_limit_priv_word_wait1(sts[pos], p);
				if (w > 0) {
					/* being limited: never evicted */
					*full_wait = resil_min64(*full_wait, w);
					continue;
				}
				age = resil_limit_priv_word_age(sts[pos], p);
				if (age < cold_age) {
					cold_age = age;
					cold = pos;
				}
			}
		}
		/*
		 * Preference: an EMPTY entry, of b1 first, a TOMB,
		 * an idle key (nothing lost), the chain past b2, the least
		 * recently used key that is not being limited; else the table is
		 * full for this key. EMPTY, TOMB and the chain add a key: they
		 * take capacity first (fetch_add on `used`, given back if over),
		 * so concurrent inserters never exceed limit.keys. Crash window:
		 * a writer killed between taking capacity and its claim leaves
		 * `used` one high (one key less fits) until the daemon recounts.
		 */
		pick = -1;
		grow = (tomb >= 0 || empty[0] >= 0 || empty[1] >= 0 || idle < 0) &&
		       ld_relaxed(&s->used) < c->keys;
		if (grow && faa_relaxed(&s->used, 1) >= c->keys) {
			faa_relaxed(&s->used, (uint64_t)-1);
			grow = false;
		}
		if (grow && (empty[0] >= 0 || empty[1] >= 0)) {
			ppos = (int)(empty[0] >= 0 ? empty[0] : empty[1]);
		} else if (grow && tomb >= 0) {
			ppos = (int)tomb;
		} else if (idle >= 0) {
			ppos = (int)idle;
		} else if (grow && (pick = resil_limit_priv_overflow_slot(t, &ch, &seen)) >= 0) {
			ppos = -1;
		} else if (cold >= 0) {
			ppos = (int)cold;
		} else {
			if (grow)
				faa_relaxed(&s->used, (uint64_t)-1);
			return -1;
		}
		evict = ppos >= 0 && (ppos == idle || ppos == cold);
		if (grow && evict) {
			faa_relaxed(&s->used, (uint64_t)-1); /* a replacement adds no key */
			grow = false;
		}
		if (ppos >= 0) {
			pick = chain_bucket(&ch, (uint32_t)ppos / RESIL_LIMIT_BUCKET) *
				   RESIL_LIMIT_BUCKET +
			       (uint32_t)ppos % RESIL_LIMIT_BUCKET;
			seen = fps[ppos];
		}
		expect = seen;
		if (!cas_sc(&t[pick].fp, &expect, (seen & FP_OVF) | fp)) {
			if (grow)
				faa_relaxed(&s->used, (uint64_t)-1);
			if (fp_key(expect) == fp)
				return pick;
			continue; /* the entry changed under us: look again */
		}
		/* crash window: a writer killed here leaves the victim's state in
		 * place (conservative; entry_reset is one CAS) */
		if (ppos >= 0)
			entry_reset(&t[pick], sts[ppos]);
		if (evict) {
			faa_relaxed(&s->evictions, 1);
			/* the policy's counter too (metrics); a crash between the
			 * two leaves them one apart, both are statistics */
			if (x->seg && x->rec && resil_has(x->rec, RESIL_C_STATS))
				resil_stats_add(x, resil_comp_state(x->seg, x->rec, RESIL_C_STATS),
						RESIL_STAT_EVICTIONS, 1);
		}
		return key_dedup(s, t, &ch, fp, pick, p);
	}
	return -1;
}

/*
 * A new key found no room (limit.when_full decides): RESIL_EV_KEYS_FULL, at
 * most once a second per policy. full_event_ns (line 1, clients, relaxed:
 * it publishes nothing, the CAS only elects the one process that pushes)
 * holds the limiter's reading at the last push; a value more than
 * HEAL_SLACK ahead of ours (corruption, or a reading from a clock that ran
 * ahead) does not silence the event for ever: it is replaced. Crash window:
 * a process killed between its CAS and its push loses that second's event;
 * the next refusal a second later pushes one (nothing to repair).
 */
void resil_limit_priv_keys_full_event(struct resil_ctx *x, struct resil_limit_state *s,
				      const struct resil_limit_conf *c, int64_t now)
{
	uint64_t last;
	int64_t d;

	if (!x->seg || !x->rec)
		return;
	last = ld_relaxed(&s->full_event_ns);
	/* wrapping difference: last is any client-written value */
	d = (int64_t)((uint64_t)now - last);
	if (last && d < RESIL_NS_PER_S && d > -HEAL_SLACK)
		return;
	if (!cas_relaxed(&s->full_event_ns, &last, (uint64_t)(now > 0 ? now : 1)))
		return; /* another process pushes this one */
	resil_event_push_by(x->seg, x->client_id, x->pid, RESIL_EV_KEYS_FULL, x->rec->slot,
			    x->rec->gen, c->when_full_admit ? 1u : 0u, 0, 0, c->keys, now);
}

/* A lookup's lines, asked for before anything else of the decision: at
 * 1M keys the table is 32 MB and each lookup waits for one line from
 * memory (two when the key sits in b2, or the chain goes on). A prefetch
 * (for writing: the take CASes the entry) lets the clock read and the
 * lease check run meanwhile; a prefetch never faults and changes no
 * word, so a hostile fp or a table being resized costs a wasted line. */
uint64_t resil_limit_priv_key_ask(const uint64_t k[2], struct resil_limit_state *s,
				  const struct resil_limit_conf *c, const void *key, size_t len,
				  struct chain *ch)
{
	struct resil_limit_entry *t = table_of(s);
	uint64_t fp = key_fp(k, key, len);

	chain_init(ch, fp, c);
	__builtin_prefetch(&t[(size_t)ch->b1 * RESIL_LIMIT_BUCKET], 1, 3);
	__builtin_prefetch(&t[(size_t)ch->b2 * RESIL_LIMIT_BUCKET], 1, 3);
	return fp;
}

int resil_limit_priv_keyed_take(struct resil_ctx *x, struct resil_limit_state *s,
				const struct resil_limit_conf *c, const struct lp *p, uint64_t fp,
				const struct chain *ch, struct resil_permit_priv *pm)
{
	int64_t idx, full_wait = INT64_MAX;

	idx = resil_limit_priv_key_get(x, s, c, p, fp, ch, &full_wait);
	if (idx < 0) {
		resil_limit_priv_keys_full_event(x, s, c, p->now);
		if (c->when_full_admit) {
			faa_relaxed(&s->full_admits, 1);
			pm->key_idx = 0;
			pm->wait_ns = 0;
			return 0;
		}
		faa_relaxed(&s->full_rejects, 1);
		if (full_wait == INT64_MAX || full_wait <= 0)
			full_wait = p->algo == RESIL_LIMIT_GCRA ? p->T : p->P;
		pm->wait_ns = full_wait;
		return RESIL_REJECT_LIMITED;
	}
	return resil_limit_priv_keyed_at(s, c, p, idx, pm);
}

int resil_limit_priv_keyed_at(struct resil_limit_state *s, const struct resil_limit_conf *c,
			      const struct lp *p, int64_t idx, struct resil_permit_priv *pm)
{
	int64_t wait = 0, stamp = 0;
	int v;

	v = resil_limit_priv_word_take(&table_of(s)[idx].st, p, &wait, &stamp);
	pm->wait_ns = wait;
	if (v)
		return v;
	pm->key_idx = (uint32_t)idx + 1;
	pm->limit_tat = (uint64_t)stamp;
	/* policy.scope = global: the key's admissions for the next exchange
	 * (limit_global.c) */
	if (RESIL_UNLIKELY(c->global))
		faa_relaxed(&resil_limit_global_counts(c, s)[idx], p->n);
	return 0;
}

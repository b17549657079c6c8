/* SPDX-License-Identifier: MIT */
/*
 * limit_maint.c - the rate limiter's block outside the decision: its
 * size, init and carry into a new block, the daemon's tick on a keyed
 * table (twins folded, idle keys swept, `used` recounted), and the
 * observers' reads (info, a key's state, what is available now). The
 * design is docs/internals/limit.md; the shared words, their writers and
 * memory orders are limit.c's top comment.
 *
 * The daemon writes line 2 (swept, repairs, ticks) here, and the table's
 * entries and `used` only as a client would (the same CASes, seq_cst on
 * fingerprints); init and carry write a block no one sees yet.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "limit.h"
#include "limit_priv.h"
#include "resil.h"
#include "stats.h"

/* ----------------------------------------------------- layout and carry */

uint64_t resil_limit_state_size(const struct resil_limit_conf *c)
{
	uint64_t size = sizeof(struct resil_limit_state);

	if (c->keys)
		size +=
		    (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET * sizeof(struct resil_limit_entry) +
		    resil_limit_global_counts_size(c);
	else if (c->algorithm == RESIL_LIMIT_SLIDING)
		size += resil_align_up((uint64_t)c->count * sizeof(int64_t), RESIL_HOT_ALIGN);
	return size;
}

void resil_limit_state_init(void *st, const struct resil_limit_conf *c, int64_t now)
{
	struct resil_limit_state *s = lstate(st);
	uint64_t i, n;

	resil_limit_state_init_zeroed(st, c, now);
	if (c->keys) {
		struct resil_limit_entry *t = table_of(s);

		n = (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET;
		for (i = 0; i < n; i++) {
			st_relaxed(&t[i].fp, RESIL_LIMIT_FP_EMPTY);
			st_relaxed(&t[i].st, 0);
		}
		if (c->global)
			for (i = 0; i < n; i++)
				st_relaxed(&resil_limit_global_counts(c, s)[i], 0);
	} else if (c->algorithm == RESIL_LIMIT_SLIDING) {
		for (i = 0; i < c->count; i++)
			st_relaxed(&ring_of(s)[i], 0); /* biased: "never" */
	}
}

/* resil_limit_state_init's header words; the table, its global counts
 * and the sliding ring are what a zeroed block holds already (an empty
 * entry is RESIL_LIMIT_FP_EMPTY, 0; the ring is biased: 0 is "never") */
void resil_limit_state_init_zeroed(void *st, const struct resil_limit_conf *c, int64_t now)
{
	struct resil_limit_state *s = lstate(st);

	(void)now;
	(void)c;
	RESIL_STATIC_ASSERT(RESIL_LIMIT_FP_EMPTY == 0, "an empty entry is a zero one");
	st_relaxed(&s->word, 0);
	st_relaxed(&s->used, 0);
	st_relaxed(&s->evictions, 0);
	st_relaxed(&s->full_rejects, 0);
	st_relaxed(&s->full_admits, 0);
	st_relaxed(&s->merges, 0);
	st_relaxed(&s->heals, 0);
	st_relaxed(&s->full_event_ns, 0);
	st_relaxed(&s->dry_run_rejects, 0);
	st_relaxed(&s->empty_keys, 0);
	st_relaxed(&s->swept, 0);
	st_relaxed(&s->repairs, 0);
	st_relaxed(&s->ticks, 0);
	/* no lease: a global policy runs at the configured rate until its
	 * daemon's first exchange writes one */
	resil_limit_lease_set(st, 0, 0, 0);
	resil_limit_fallback_end_set(st, 0, 0);
	st_relaxed(&s->fleet_hosts, 0);
}

bool resil_limit_same_shape(const struct resil_limit_conf *a, const struct resil_limit_conf *b)
{
	if (a->keys != b->keys || a->algorithm != b->algorithm ||
	    (a->keys && a->global != b->global))
		return false;
	/* the exact ring has one slot per admission of the period */
	if (!a->keys && a->algorithm == RESIL_LIMIT_SLIDING && a->count != b->count)
		return false;
	/* sliding-approx words count fixed windows of one period */
	if (resil_limit_algo(a) == RESIL_LIMIT_SLIDING_APPROX && a->period_ns != b->period_ns)
		return false;
	return true;
}

/* Single-threaded (the new block is not published yet): put an old key
 * into the new table with its state. */
static void carry_key(struct resil_limit_state *ns, const struct resil_limit_conf *nc, uint64_t fp,
		      uint64_t v)
{
	struct resil_limit_entry *t = table_of(ns);
	struct chain ch;
	int64_t pick = -1;
	uint32_t k, j, nbk;
	uint64_t seen;

	if (ld_relaxed(&ns->used) >= nc->keys)
		return;
	chain_init(&ch, fp, nc);
	nbk = ch.nb > 1 ? 2 : 1;
	/* the first EMPTY entry of b1, then of b2 (as resil_limit_priv_key_get fills) */
	for (k = 0; k < nbk && pick < 0; k++) {
		for (j = 0; j < RESIL_LIMIT_BUCKET && pick < 0; j++) {
			int64_t e = chain_bucket(&ch, k) * RESIL_LIMIT_BUCKET + j;

			if (fp_key(ld_relaxed(&t[e].fp)) == RESIL_LIMIT_FP_EMPTY)
				pick = e;
		}
	}
	if (pick < 0)
		pick = resil_limit_priv_overflow_slot(t, &ch, &seen);
	if (pick < 0)
		return;
	st_relaxed(&t[pick].fp, (ld_relaxed(&t[pick].fp) & FP_OVF) | fp);
	st_relaxed(&t[pick].st, v);
	faa_relaxed(&ns->used, 1);
}

void resil_limit_carry(void *nst, const struct resil_limit_conf *nc, const void *ost,
		       const struct resil_limit_conf *oc, int64_t now)
{
	struct resil_limit_state *ns = lstate(nst);
	struct resil_limit_state *os = lstate((void *)(uintptr_t)ost);
	struct lp p;
	uint64_t i, n;

	/* another algorithm: its state means nothing here (fresh) */
	if (resil_limit_algo(nc) != resil_limit_algo(oc))
		return;
	if (resil_limit_algo(nc) == RESIL_LIMIT_SLIDING_APPROX && nc->period_ns != oc->period_ns)
		return;
	lp_init(&p, oc, now, 1);
	if (nc->keys && oc->keys) {
		/* a new capacity: keys that hold information move over (the
		 * admissions made on the old block until the swap are lost) */
		struct resil_limit_entry *t = table_of(os);

		n = (uint64_t)nbuckets(oc) * RESIL_LIMIT_BUCKET;
		for (i = 0; i < n; i++) {
			uint64_t f = fp_key(ld_relaxed(&t[i].fp)), v = ld_relaxed(&t[i].st);

			if (f > RESIL_LIMIT_FP_TOMB && !resil_limit_priv_word_idle(v, &p))
				carry_key(ns, nc, f, v);
		}
	} else if (!nc->keys && !oc->keys && nc->algorithm == RESIL_LIMIT_SLIDING) {
		/* another count: the newest admissions keep their times, so the
		 * bound holds across the change */
		rai64 *ro = ring_of(os), *rn = ring_of(ns);
		uint64_t seq = ld_relaxed(&os->word);
		uint32_t m = oc->count < nc->count ? oc->count : nc->count, k;

		for (k = 1; k <= m; k++)
			st_relaxed(&rn[m - k], ld_relaxed(&ro[(seq + oc->count - k) % oc->count]));
		st_relaxed(&ns->word, m);
	} else if (!nc->keys && !oc->keys) {
		st_relaxed(&ns->word, ld_relaxed(&os->word));
	}
}

/* ---------------------------------------------------------- maintenance */

/* The sweep's mark on an entry it found claimed with no permit taken:
 * GCRA reads it as a TAT far in the past, sliding-approx as a window long
 * gone with no counts, so any take starts fresh from it. */
#define SWEEP_MARK (1ULL << 63)

/* Idle, and last written at least SWEEP_SLACK ago. */
static bool word_swept(uint64_t v, const struct lp *p)
{
	uint64_t win, sw;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)v <= p->now - SWEEP_SLACK;
	if (!resil_limit_priv_word_idle(v, p))
		return false;
	/* the window written last ended at least SWEEP_SLACK ago */
	win = (uint64_t)(p->now < 0 ? 0 : p->now) / (uint64_t)p->P;
	sw = v >> 40;
	if (v == 0)
		return true; /* never written, or reset */
	return (uint64_t)p->P * (((win & AX_WMASK) - sw) & AX_WMASK) >=
	       (uint64_t)(p->P + SWEEP_SLACK);
}

/*
 * Daemon tick, keyed tables only: folds twins (crash window of an insert:
 * a writer killed between its claim and its re-read can leave the same key
 * in two entries if the other inserter missed its claim), frees keys idle
 * for SWEEP_SLACK (TOMB: the race with a client that found the key and has
 * not CASed its state yet needs that client to stall for SWEEP_SLACK) and
 * recounts `used`.
 * Idleness is judged on the daemon's clock: a key whose state lies in that
 * clock's future (clients on a manual clock that runs ahead) is kept.
 * Nothing is healed here (docs/internals/limit.md, "The clock").
 */
/*
 * Pages of the table that were never written (a new block's are holes of
 * the memfd: resil_seg_zero) hold only empty entries, and reading one
 * would give it memory: the sweep asks the kernel which pages hold
 * something (mincore, RES_PAGES at a time) and skips the others. A page
 * it skipped may hold entries after all (swapped out): when the entries
 * counted disagree with `used`, all pages are counted before `used` is
 * repaired (count_keys).
 */
#define RES_PAGES 1024
struct resident {
	const struct resil_limit_entry *t;
	uintptr_t from; /* the first page of vec */
	size_t page;
	bool ok; /* mincore answered for [from, from + RES_PAGES pages) */
	unsigned char vec[RES_PAGES];
};

/* Entry i's page holds something (or the kernel cannot say); asked at
 * the first entry of each page only (else true). */
static bool entry_resident(struct resident *r, uint64_t i, uint64_t n)
{
	uintptr_t e = (uintptr_t)&r->t[i], a = e & ~(uintptr_t)(r->page - 1);
	uintptr_t end = ((uintptr_t)&r->t[n] + r->page - 1) & ~(uintptr_t)(r->page - 1);

	if (i && e - a >= sizeof(r->t[0]))
		return true;
	if (!r->from || a < r->from || a >= r->from + RES_PAGES * r->page) {
		size_t len = end - a < RES_PAGES * r->page ? end - a : RES_PAGES * r->page;

		r->from = a;
		r->ok = mincore((void *)a, len, r->vec) == 0;
	}
	return !r->ok || (r->vec[(a - r->from) / r->page] & 1);
}

static void resident_init(struct resident *r, const struct resil_limit_entry *t)
{
	r->t = t;
	r->from = 0;
	r->page = (size_t)sysconf(_SC_PAGESIZE);
}

/* The last entry on entry i's page (the loop goes on with the next). */
static uint64_t page_last(const struct resident *r, uint64_t i)
{
	return i + r->page / sizeof(r->t[0]) - 1 -
	       ((uintptr_t)&r->t[i] & (r->page - 1)) / sizeof(r->t[0]);
}

/* The entries holding a key: on the pages that hold something, or on
 * every page (a repair's count: this reads them all). */
static uint64_t count_keys(const struct resil_limit_entry *t, uint64_t n, bool every_page)
{
	struct resident res;
	uint64_t live = 0;

	resident_init(&res, t);
	for (uint64_t i = 0; i < n; i++) {
		if (!every_page && !entry_resident(&res, i, n)) {
			i = page_last(&res, i);
			continue;
		}
		live += fp_key(ld_relaxed(&t[i].fp)) > RESIL_LIMIT_FP_TOMB;
	}
	return live;
}

void resil_limit_maintain(struct resil_ctx *x, const struct resil_limit_conf *c, void *st)
{
	struct resil_limit_state *s = lstate(st);
	uint64_t i, n, live = 0, u1, u2;
	struct resident res;
	bool skipped = false;
	struct chain ch;
	int64_t first;
	struct lp p;

	if (c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0)
		return;
	faa_relaxed(&s->ticks, 1);
	if (!c->keys)
		return;
	lp_init(&p, c, resil_clock_now(&x->clock), 1);
	n = (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET;
	u1 = ld_relaxed(&s->used);
	resident_init(&res, table_of(s));
	for (i = 0; i < n; i++) {
		struct resil_limit_entry *e = &table_of(s)[i];
		uint64_t f, v;

		if (!entry_resident(&res, i, n)) {
			/* a page never written: on to the next one */
			skipped = true;
			i = page_last(&res, i);
			continue;
		}
		f = ld_sc(&e->fp);
		if (fp_key(f) <= RESIL_LIMIT_FP_TOMB)
			continue;
		v = ld_relaxed(&e->st);
		/* a twin left by an inserter killed before its re-read (or a key
		 * no lookup can reach): fold it into the entry lookups find */
		chain_init(&ch, fp_key(f), c);
		first = resil_limit_priv_key_find_bounded(table_of(s), &ch, fp_key(f));
		if (first != (int64_t)i && first != -2) {
			if (first >= 0) {
				uint64_t m = ld_relaxed(&table_of(s)[first].st);

				while (!cas_relaxed(&table_of(s)[first].st, &m,
						    resil_limit_priv_word_merge(m, v, &p)))
					;
			}
			if (cas_sc(&e->fp, &f, (f & FP_OVF) | RESIL_LIMIT_FP_TOMB)) {
				faa_relaxed(&s->used, (uint64_t)-1);
				faa_relaxed(&s->merges, 1);
				u1--;
			}
			continue;
		}
		if (v == 0) {
			/* claimed, no permit taken yet: an inserter in flight, or
			 * one killed in that window. Mark it (a state any take
			 * reads as fresh); a later sweep that still finds the mark
			 * frees it, an inserter's take replaces it. */
			cas_relaxed(&e->st, &v, SWEEP_MARK);
			live++;
			continue;
		}
		if (word_swept(v, &p) && cas_sc(&e->fp, &f, (f & FP_OVF) | RESIL_LIMIT_FP_TOMB)) {
			faa_relaxed(&s->used, (uint64_t)-1);
			faa_relaxed(&s->swept, 1);
			u1--;
			continue;
		}
		live++;
	}
	/* repair only when no insert ran during the count (used unchanged
	 * except by our own sweeping). A count above limit.keys is out of
	 * range (inserters give back what they take over it; a client wrote
	 * it): a state repair too, for the daemon's count and event. */
	u2 = ld_relaxed(&s->used);
	if (u1 == u2 && live < u2 && skipped)
		live = count_keys(table_of(s), n, true);
	if (u1 == u2 && live != u2 && cas_relaxed(&s->used, &u2, live)) {
		faa_relaxed(&s->repairs, 1);
		if (u2 > c->keys)
			resil_repaired(x, RESIL_W_LIMIT_USED);
	}
}

/* A dead client holds nothing here: what it took was spent. */
void resil_limit_reclaim(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	(void)x;
	(void)c;
	(void)st;
	(void)dead_client;
	(void)counts;
}

/* ---------------------------------------------------------- inspection */

void resil_limit_info(const struct resil_limit_conf *c, const void *st,
		      struct resil_limit_info *out)
{
	struct resil_limit_state *s = lstate((void *)(uintptr_t)st);

	memset(out, 0, sizeof(*out));
	out->algorithm = resil_limit_algo(c);
	out->keyed = c->keys != 0;
	out->capacity = c->keys;
	out->evictions = ld_relaxed(&s->evictions);
	out->full_rejects = ld_relaxed(&s->full_rejects);
	out->full_admits = ld_relaxed(&s->full_admits);
	out->merges = ld_relaxed(&s->merges);
	out->dry_run_rejects = ld_relaxed(&s->dry_run_rejects);
	out->empty_keys = ld_relaxed(&s->empty_keys);
	out->word = (int64_t)ld_relaxed(&s->word);
	if (!c->keys)
		return;
	/* the pages that hold something (a page swapped out is not counted) */
	out->size = count_keys(table_of(s), (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET, false);
}

uint64_t resil_limit_dry_run_rejects(const void *st)
{
	return ld_relaxed(&lstate((void *)(uintptr_t)st)->dry_run_rejects);
}

int resil_limit_key_info(struct resil_ctx *x, const struct resil_limit_conf *c, const void *st,
			 const void *key, size_t len, int64_t *tat_or_count, int64_t *wait_ns)
{
	struct resil_limit_state *s = lstate((void *)(uintptr_t)st);
	uint64_t v;
	struct lp p;
	int64_t w;

	if (c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0)
		return -EINVAL;
	lp_init(&p, c, resil_clock_now(&x->clock), 1);
	if (c->keys && key) {
		struct resil_limit_entry *t = table_of(s);
		uint64_t fp = resil_limit_priv_key_fp(x, key, len);
		struct chain ch;
		int64_t i;

		chain_init(&ch, fp, c);
		i = resil_limit_priv_key_find(t, &ch, fp, memory_order_acquire);
		if (i < 0)
			return -ENOENT;
		v = ld_relaxed(&t[i].st);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		rai64 *ring = ring_of(s);
		int64_t cnt = 0, oldest = INT64_MAX, ti;
		uint32_t i;

		for (i = 0; i < c->count; i++) {
			ti = ring_end(ld_relaxed(&ring[i]), &p) - p.P;
			if (ti + p.P > p.now)
				cnt++;
			oldest = resil_min64(oldest, ti);
		}
		*tat_or_count = cnt;
		*wait_ns = cnt < c->count ? 0 : resil_max64(0, oldest + p.P - p.now);
		return 0;
	} else {
		v = ld_relaxed(&s->word);
	}
	/* GCRA: the TAT; sliding-approx: the weighted count */
	*tat_or_count = resil_limit_priv_word_age(v, &p);
	w = resil_limit_priv_word_wait1(v, &p);
	*wait_ns = w > 0 ? w : 0;
	return 0;
}

int64_t resil_limit_available(struct resil_ctx *x, const struct resil_limit_conf *c, const void *st)
{
	int64_t v, wait, now = resil_clock_now(&x->clock);
	struct lp p;
	int r = resil_limit_key_info(x, c, st, NULL, 0, &v, &wait);

	if (r < 0)
		return r;
	lp_init(&p, c, now, 1);
	if (p.algo == RESIL_LIMIT_GCRA) {
		/* v is the TAT; the debt ahead of now, in emission intervals */
		int64_t debt = v > now ? v - now : 0;

		return debt >= p.tau ? 0 : (p.tau - debt) / p.T;
	}
	return v >= (int64_t)c->count ? 0 : (int64_t)c->count - v;
}

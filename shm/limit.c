/* SPDX-License-Identifier: MIT */
/*
 * limit.c - the rate limiter's decision: GCRA in one word, the exact
 * sliding window (a ring of admission times), the sliding-approx word,
 * the global lease's words, and acquire, the lean paths, undo and release.
 *
 * GCRA keeps the theoretical arrival time of the next permit in one word
 * and admits by one CAS; sliding never admits more than count in any
 * span of one period; sliding-approx counts two fixed windows in one
 * word. The design (the algorithms and their bounds, the keyed table, the
 * clock and the heal of impossible values, undo, dry run, the global
 * lease, every crash window) is docs/internals/limit.md.
 *
 * The limiter's files: limit_priv.h (the per-decision parameters, the
 * state's views, a key's probe chain, the functions each file calls in
 * another); limit_keyed.c (the keyed table: lookup, insert, eviction,
 * the keyed take); limit_maint.c (the block's layout, init and carry, the
 * daemon's maintenance, the observers' reads); limit_global.c (a global
 * keyed limiter's admission counts); limit_conf.c (keys: nothing there
 * touches the shared state).
 *
 * Words (struct resil_limit_state, limit.h), writers, readers, orders:
 *   line 0    word (GCRA: the TAT; sliding: the admission sequence, a
 *             hint; sliding-approx: the window word), the sliding ring and
 *             the keyed table: CAS by every client, relaxed (each word is
 *             self-contained: it publishes no other data), except the
 *             table's claims, FP_OVF marks and the re-reads after them
 *             (seq_cst) and lookups' fingerprint loads (acquire, pairs
 *             with the claims and marks).
 *   line 1    used, evictions, full_rejects, full_admits, merges, heals,
 *             full_event_ns, dry_run_rejects, empty_keys: clients, on rare
 *             events (and every would-be rejection under dry run), relaxed
 *             RMWs. used gates inserts and the daemon's maintenance
 *             repairs it; full_event_ns elects the process that pushes
 *             RESIL_EV_KEYS_FULL; the others are statistics, read relaxed.
 *   line 2    the daemon only. swept, repairs, ticks: maintenance
 *             (limit_maint.c). The lease: lease_ns and fallback_ns, then
 *             lease_expiry_ns (release), after_ns then fallback_until_ns
 *             (release): a decision loads an end (acquire) before what it
 *             covers, so it reads them at least as new.
 * Any client can write any word: a value no writer sets (a TAT or a ring
 * time further ahead than any writer can set) is clamped or healed by the
 * client that meets it, and counted in heals; the daemon heals nothing.
 *
 * Nothing here allocates, locks, logs or makes a syscall on the hot path
 * (the first coarse-clock decision of a process queries clock_getres
 * once).
 */
#include <errno.h>

#include "limit.h"
#include "limit_priv.h"
#include "resil.h"
#include "stats.h"

/* ---------------------------------------------------------------- math */

/* a * b <= c * d, exactly, for unsigned 64-bit operands. */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
	uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
	uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
	uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;

	*lo = (mid << 32) | (uint32_t)ll;
	*hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

static bool mul_le(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	uint64_t h1, l1, h2, l2;

	mul64(a, b, &h1, &l1);
	mul64(c, d, &h2, &l2);
	return h1 < h2 || (h1 == h2 && l1 <= l2);
}

/* floor(a * b / c), c > 0, the result known to fit in 64 bits. */
static uint64_t muldiv(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t hi, lo, q;

	mul64(a, b, &hi, &lo);
	if (hi == 0)
		return lo / c;
	q = (uint64_t)((long double)a * (long double)b / (long double)c);
	/* correct the float estimate to the exact floor */
	while (q > 0 && !mul_le(q, c, a, b))
		q--;
	while (mul_le(q + 1, c, a, b))
		q++;
	return q;
}

/* ---------------------------------------------------------------- GCRA */

static inline int gcra_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	int64_t inc = p->T * (int64_t)p->n;
	uint64_t cur;

	/* two processes on one limiter: one transfer of the word per decision
	 * (bench case mp/limit.admit) */
	resil_prefetch_write(w);
	cur = ld_relaxed(w);

	for (;;) {
		int64_t tat = (int64_t)cur;
		int64_t from = tat > p->now ? tat : p->now;

		/* The heal check first, unsigned (exact: from >= now): a TAT
		 * further ahead than any writer can set it (corruption, or a
		 * client's write: it may hold INT64_MAX) is healed before any
		 * arithmetic with it could overflow (docs/internals/limit.md,
		 * "The clock"). Same
		 * condition as d > max_wait + inc + HEAL_SLACK below. */
		if (RESIL_UNLIKELY((uint64_t)from - (uint64_t)p->now >
				   (uint64_t)(p->max_wait + p->tau + p->slack))) {
			if (cas_relaxed(w, &cur, (uint64_t)(p->now + p->tau)))
				faa_relaxed(p->heals, 1);
			*wait = p->max_wait + p->tau + inc;
			return RESIL_REJECT_LIMITED;
		}

		int64_t ntat = from + inc;
		int64_t d = ntat - p->tau - p->now;

		if (d > p->grant) {
			*wait = resil_min64(d, p->max_wait + p->tau + inc);
			return RESIL_REJECT_LIMITED;
		}
		if (cas_relaxed(w, &cur, (uint64_t)ntat)) {
			*wait = d > 0 ? d : 0;
			*stamp = ntat;
			return 0;
		}
	}
}

static void gcra_give(ra64 *w, const struct lp *p)
{
	int64_t inc = p->T * (int64_t)p->n;
	uint64_t cur = ld_relaxed(w);

	for (;;) {
		int64_t tat = (int64_t)cur;

		if (tat <= p->now)
			return; /* idle already: nothing to give back */
		if (cas_relaxed(w, &cur, (uint64_t)resil_max64(tat - inc, p->now)))
			return;
	}
}

static bool gcra_idle(uint64_t v, const struct lp *p)
{
	return (int64_t)v <= p->now;
}

/* time until one permit passes (<= 0: now) */
static int64_t gcra_wait1(uint64_t v, const struct lp *p)
{
	int64_t tat = (int64_t)v;
	uint64_t ahead = tat > p->now ? (uint64_t)tat - (uint64_t)p->now : 0;

	/* unsigned, capped: a TAT any client may have written overflows nothing */
	if (ahead > (uint64_t)(p->max_wait + p->tau + HEAL_SLACK))
		ahead = (uint64_t)(p->max_wait + p->tau + HEAL_SLACK);
	return (int64_t)ahead + p->T - p->tau;
}

/* ------------------------------------------------- sliding-approx word */

struct ax {
	uint64_t win; /* the window the decision is made in */
	int64_t e;    /* ns into it */
	uint32_t cur, prev;
};

static inline uint64_t ax_pack(uint64_t win, uint32_t cur, uint32_t prev)
{
	return (win & AX_WMASK) << 40 | (uint64_t)cur << 20 | prev;
}

static void ax_view(uint64_t v, const struct lp *p, struct ax *a)
{
	int64_t now = p->now < 0 ? 0 : p->now;
	uint64_t win = (uint64_t)now / (uint64_t)p->P;
	uint64_t sw = v >> 40;
	uint32_t c = (uint32_t)(v >> 20) & AX_CMASK, pv = (uint32_t)v & AX_CMASK;

	a->win = win;
	a->e = now - (int64_t)(win * (uint64_t)p->P);
	if (sw == (win & AX_WMASK)) {
		a->cur = c;
		a->prev = pv;
	} else if (sw == ((win - 1) & AX_WMASK)) {
		a->cur = 0;
		a->prev = c;
	} else if (sw == ((win + 1) & AX_WMASK)) {
		/* our reading lags a window behind a writer's: decide at the
		 * start of that window (clamped, conservative) */
		a->win = win + 1;
		a->e = 0;
		a->cur = c;
		a->prev = pv;
	} else {
		a->cur = 0;
		a->prev = 0;
	}
}

static bool ax_fits(const struct ax *a, const struct lp *p, uint32_t n)
{
	uint64_t P = (uint64_t)p->P;

	if ((uint64_t)a->cur + n > p->L)
		return false;
	return mul_le(a->prev, P - (uint64_t)a->e, p->L - a->cur - n, P);
}

/* time until n permits fit, for a view where they do not */
static int64_t ax_wait(const struct ax *a, const struct lp *p, uint32_t n)
{
	uint64_t P = (uint64_t)p->P, q;
	int64_t d;

	if ((uint64_t)a->cur + n <= p->L) {
		q = a->prev ? muldiv(p->L - a->cur - n, P, a->prev) : P;
		if (q > P - (uint64_t)a->e)
			q = P - (uint64_t)a->e;
		return (int64_t)(P - (uint64_t)a->e - q);
	}
	d = (int64_t)(P - (uint64_t)a->e);
	if (a->cur) {
		q = muldiv(p->L - n, P, a->cur);
		if (q < P)
			d += (int64_t)(P - q);
	}
	return d;
}

static int ax_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	uint64_t cur = ld_relaxed(w);
	struct ax a;

	for (;;) {
		ax_view(cur, p, &a);
		if (!ax_fits(&a, p, p->n)) {
			*wait = resil_min64(ax_wait(&a, p, p->n), 2 * p->P);
			return RESIL_REJECT_LIMITED;
		}
		if (cas_relaxed(w, &cur, ax_pack(a.win, a.cur + p->n, a.prev))) {
			*wait = 0;
			*stamp = (int64_t)a.win;
			return 0;
		}
	}
}

static void ax_give(ra64 *w, uint64_t win, uint32_t n)
{
	uint64_t cur = ld_relaxed(w), nv;

	for (;;) {
		uint64_t sw = cur >> 40;
		uint32_t c = (uint32_t)(cur >> 20) & AX_CMASK, pv = (uint32_t)cur & AX_CMASK;

		if (sw == (win & AX_WMASK))
			c -= c < n ? c : n;
		else if (sw == ((win + 1) & AX_WMASK))
			pv -= pv < n ? pv : n;
		else
			return;
		nv = sw << 40 | (uint64_t)c << 20 | pv;
		if (cas_relaxed(w, &cur, nv))
			return;
	}
}

/* ------------------------------------------------ per-word dispatching */

inline int resil_limit_priv_word_take(ra64 *w, const struct lp *p, int64_t *wait, int64_t *stamp)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_take(w, p, wait, stamp);
	return ax_take(w, p, wait, stamp);
}

static void word_give(ra64 *w, const struct lp *p, int64_t stamp)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		gcra_give(w, p);
	else
		ax_give(w, (uint64_t)stamp, p->n);
}

/* The state equals a fresh one: evicting it loses nothing. */
bool resil_limit_priv_word_idle(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_idle(v, p);
	ax_view(v, p, &a);
	return a.cur == 0 && a.prev == 0;
}

/* Time until one permit passes: <= 0 means the key is not being limited. */
int64_t resil_limit_priv_word_wait1(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return gcra_wait1(v, p);
	ax_view(v, p, &a);
	return ax_fits(&a, p, 1) ? 0 : ax_wait(&a, p, 1);
}

/* Eviction order among keys not being limited: least recently used first. */
int64_t resil_limit_priv_word_age(uint64_t v, const struct lp *p)
{
	struct ax a;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)v;
	ax_view(v, p, &a);
	return (int64_t)a.cur + (int64_t)muldiv(a.prev, (uint64_t)(p->P - a.e), (uint64_t)p->P);
}

/* Two states of one key, folded (max: never more permissive than either). */
uint64_t resil_limit_priv_word_merge(uint64_t x, uint64_t y, const struct lp *p)
{
	struct ax a, b;

	if (p->algo == RESIL_LIMIT_GCRA)
		return (int64_t)x > (int64_t)y ? x : y;
	ax_view(x, p, &a);
	ax_view(y, p, &b);
	if (a.win != b.win)
		return a.win > b.win ? x : y;
	return ax_pack(a.win, a.cur > b.cur ? a.cur : b.cur, a.prev > b.prev ? a.prev : b.prev);
}

/* ---------------------------------------------------------- the clock */

/* A reading of clk for c: coarse when c's interval allows it, else precise
 * (and then also in *precise). */
static inline int64_t limit_read(const struct resil_clock *clk, const struct resil_limit_conf *c,
				 int64_t *precise)
{
	if (c->interval_ns >= RESIL_LIMIT_COARSE_FACTOR * resil_clock_coarse_resolution_ns())
		return resil_clock_now_coarse(clk);
	return *precise = resil_clock_now(clk);
}

static inline int64_t limit_now(struct resil_ctx *x, const struct resil_limit_conf *c)
{
	if (x->now)
		return x->now;
	return limit_read(&x->clock, c, &x->now);
}

/* n permits can never be granted by this configuration */
static bool too_many(const struct lp *p)
{
	if (p->algo == RESIL_LIMIT_GCRA)
		return (uint64_t)p->n > (uint64_t)(p->tau + p->max_wait) / (uint64_t)p->T;
	return p->n > p->L;
}

/* ------------------------------------------------------- sliding ring */

static int slide_take(struct resil_limit_state *s, const struct lp *p, struct resil_permit_priv *pm)
{
	rai64 *ring = ring_of(s);
	uint32_t N = p->L, n = p->n, k, i;
	int help = 0;
	uint64_t seq;
	int64_t t, v, vi;

again:
	seq = ld_relaxed(&s->word);
	i = (uint32_t)(seq % N);
	t = p->now;
	for (k = 0; k < n; k++) {
		v = ring_end(ld_relaxed(&ring[(i + k) % N]), p);
		if (v > t)
			t = v;
	}
	if (t - p->now > p->grant) {
		if (RESIL_UNLIKELY(t - p->now > p->P + p->max_wait + HEAL_SLACK)) {
			/* a time further ahead than any writer sets: heal it */
			for (k = 0; k < n; k++) {
				rai64 *slot = &ring[(i + k) % N];
				int64_t old = ld_relaxed(slot);

				if (ring_end(old, p) - p->P > p->now + p->max_wait + HEAL_SLACK &&
				    cas_relaxed(slot, &old, p->now + p->max_wait + RING_BIAS))
					faa_relaxed(&s->heals, 1);
			}
		}
		/* S one behind (its advance lost to a race or a crash): the slot
		 * it names is then newer than the next one */
		if (N > n && help < 4) {
			vi = ld_relaxed(&ring[i]);
			if (ld_relaxed(&ring[(i + 1) % N]) < vi) {
				help++;
				cas_relaxed(&s->word, &seq, seq + 1);
				goto again;
			}
		}
		pm->wait_ns = resil_min64(t - p->now, p->P + p->max_wait);
		return RESIL_REJECT_LIMITED;
	}
	/* the claims: each slot by CAS from a time <= t - period to t */
	for (k = 0; k < n; k++) {
		rai64 *slot = &ring[(i + k) % N];
		int64_t old = ld_relaxed(slot);

		if (ring_end(old, p) > t || !cas_relaxed(slot, &old, t + RING_BIAS)) {
			/* lost a slot to another process: free ours (as undo does) */
			while (k-- > 0) {
				int64_t mine = t + RING_BIAS;

				cas_relaxed(&ring[(i + k) % N], &mine, t - p->P + RING_BIAS);
			}
			goto again;
		}
	}
	/* a crash here leaves S behind: the next caller repairs it (above) */
	cas_relaxed(&s->word, &seq, seq + n);
	pm->key_idx = i + 1;
	pm->limit_tat = (uint64_t)t;
	pm->wait_ns = t - p->now;
	return 0;
}

static void slide_give(struct resil_limit_state *s, const struct lp *p,
		       const struct resil_permit_priv *pm)
{
	rai64 *ring = ring_of(s);
	int64_t t = (int64_t)pm->limit_tat;
	uint32_t k, i = pm->key_idx - 1;

	if (!pm->key_idx || i >= p->L)
		return;
	for (k = 0; k < p->n; k++) {
		int64_t mine = t + RING_BIAS;

		cas_relaxed(&ring[(i + k) % p->L], &mine, t - p->P + RING_BIAS);
	}
}

int64_t resil_limit_key_entry(const struct resil_limit_conf *c, void *st, uint64_t fp, int64_t now,
			      bool insert)
{
	struct resil_limit_state *s = lstate(st);
	struct resil_ctx x = {0};
	struct chain ch;
	struct lp p;
	int64_t idx, full_wait;

	if (!c->keys || fp < 2 || (fp & FP_OVF))
		return -1;
	chain_init(&ch, fp, c);
	idx = resil_limit_priv_key_find_bounded(table_of(s), &ch, fp);
	if (idx >= 0 || idx == -2 || !insert)
		return idx >= 0 ? idx : -1;
	lp_init(&p, c, now, 1);
	p.heals = &s->heals;
	return resil_limit_priv_key_get(&x, s, c, &p, fp, &ch, &full_wait);
}

/* ------------------------------------------------------ the component */

/*
 * limit.dry_run: the call just rejected goes (docs/internals/limit.md). The state is as
 * the rejection left it; the permit holds nothing of the limiter.
 * dry_run_rejects: line 1, clients, relaxed (a statistic: it orders nothing).
 */
static int dry_run_admit(struct resil_limit_state *s, struct resil_permit_priv *pm)
{
	faa_relaxed(&s->dry_run_rejects, 1);
	pm->key_idx = 0;
	pm->limit_tat = 0;
	pm->wait_ns = 0;
	return 0;
}

/*
 * A keyed limiter's call with an empty key (a key of length 0: an nginx
 * variable with no value): no entry of the table is the key of everyone
 * without one, so limit.empty_key decides. admit: the permit holds
 * nothing of the limiter; reject: RESIL_REJECT_LIMITED without a wait
 * (time gives an empty key no permit), which a dry run admits. The lean
 * keyed path (resil_limit_acquire_keyed) pays nothing for it: no entry is
 * ever made for the empty key, so its lookup misses and asks this path.
 * empty_keys: line 1, clients, relaxed (a statistic: it orders nothing).
 */
static int empty_key(struct resil_limit_state *s, const struct resil_limit_conf *c,
		     struct resil_permit_priv *pm)
{
	faa_relaxed(&s->empty_keys, 1);
	pm->key_idx = 0;
	pm->limit_tat = 0;
	pm->wait_ns = 0;
	if (!c->empty_key_reject)
		return 0;
	if (c->dry_run)
		return dry_run_admit(s, pm);
	return RESIL_REJECT_LIMITED;
}

/* ------------------------------------------------------ global lease */

void resil_limit_lease_set(void *st, int64_t lease_ns, int64_t expiry_ns, int64_t fallback_ns)
{
	struct resil_limit_state *s = lstate(st);

	/* interval and fallback before the expiry (release): a client that
	 * loads this expiry (acquire) reads them at least as new (see top) */
	st_relaxed(&s->lease_ns, (uint64_t)lease_ns);
	st_relaxed(&s->fallback_ns, (uint64_t)fallback_ns);
	atomic_store_explicit(&s->lease_expiry_ns, (uint64_t)expiry_ns, memory_order_release);
}

void resil_limit_fallback_end_set(void *st, int64_t until_ns, int64_t after_ns)
{
	struct resil_limit_state *s = lstate(st);

	/* after first, the end last (release): a client that loads this end
	 * (acquire) reads an after_ns at least as new */
	st_relaxed(&s->after_ns, (uint64_t)after_ns);
	atomic_store_explicit(&s->fallback_until_ns, (uint64_t)until_ns, memory_order_release);
}

/* Past the lease: the fallback's interval, or after its end the after
 * tier's (0: the configured rate, RESIL_LIMIT_FALLBACK_REJECT: none). A
 * fallback of the configured rate (--cluster-fallback local, or no daemon
 * has leased: embedded mode, no cluster) has no end: its words are read
 * no further. The end is loaded before what it covers (acquire, pairs
 * with resil_limit_fallback_end_set): a fallback_ns read after it is at
 * least as new; one read before a daemon's switch of tier is the older
 * tier's, which holds until the older end. */
static inline int64_t fallback_T(const struct resil_limit_state *s, int64_t now)
{
	int64_t fb = (int64_t)ld_relaxed((ra64 *)&s->fallback_ns), until;

	if (fb == 0)
		return 0;
	until = (int64_t)atomic_load_explicit((ra64 *)&s->fallback_until_ns, memory_order_acquire);
	if (until && now >= until) {
		int64_t a = (int64_t)ld_relaxed((ra64 *)&s->after_ns);

		return a ? a : RESIL_LIMIT_FALLBACK_REJECT;
	}
	return fb;
}

int64_t resil_limit_lease_T(const struct resil_limit_conf *c, const void *st, int64_t now,
			    bool *leased)
{
	const struct resil_limit_state *s = (const struct resil_limit_state *)st;
	int64_t exp =
	    (int64_t)atomic_load_explicit((ra64 *)&s->lease_expiry_ns, memory_order_acquire);
	int64_t T;

	*leased = now < exp;
	if (*leased)
		T = (int64_t)ld_relaxed((ra64 *)&s->lease_ns);
	else if ((T = fallback_T(s, now)) == 0)
		T = c->interval_ns;
	/* any client can write line 2: a value no daemon writes reads as "no
	 * share"; an interval above a day would overflow tau (one unsigned
	 * comparison: T <= 0 wraps above the day) */
	if ((uint64_t)T - 1 >= (uint64_t)86400 * RESIL_NS_PER_S)
		return 0;
	return T < c->interval_ns ? c->interval_ns : T;
}

/* The lease's interval into p (global scope); false: no share now. */
static inline bool lease_apply(struct resil_ctx *x, const struct resil_limit_conf *c,
			       struct resil_limit_state *s, struct lp *p)
{
	int64_t T;

	/* keyed: no lease, the whole per-key rate on every host (limit_global.c) */
	if (!x->rec || x->rec->conf.scope != RESIL_SCOPE_GLOBAL || c->keys)
		return true;
	/* resil_limit_lease_T inline, the common cases first: a live lease
	 * (its T range-checked: any client can write line 2), or past the
	 * expiry with fallback 0, the configuration's own interval (trusted:
	 * lp_init's T and tau stand) */
	if (p->now < (int64_t)atomic_load_explicit(&s->lease_expiry_ns, memory_order_acquire))
		T = (int64_t)ld_relaxed(&s->lease_ns);
	else if ((T = fallback_T(s, p->now)) == 0)
		return true;
	if ((uint64_t)T - 1 >= (uint64_t)86400 * RESIL_NS_PER_S)
		return false;
	T = T < c->interval_ns ? c->interval_ns : T;
	/* limit.burst is the fleet's: tau stays lp_init's (burst x the
	 * configured interval), so a share s of the rate bursts s / rate of
	 * it, and the hosts together the configured burst (each at least
	 * one permit: tau never below the share's T) */
	if (T != p->T) {
		p->T = T;
		if (p->tau < T)
			p->tau = T;
	}
	/* a TAT run ahead under a smaller share (a longer T) is a debt in the
	 * old T's units: past tau + wait it is cut to now + tau (full now,
	 * the next permit one new T later) instead of holding the host back
	 * for seconds after its share grew; what it admits stays within the
	 * share it holds now */
	p->slack = 0;
	return true;
}

/* An acquire's end: a rejection (that a dry run admits instead), or the
 * permit marked as the limiter's. */
static inline int take_end(struct resil_limit_state *s, const struct resil_limit_conf *c,
			   struct resil_permit_priv *pm, int v)
{
	if (v) {
		if (c->dry_run && v == RESIL_REJECT_LIMITED)
			return dry_run_admit(s, pm);
		return v;
	}
	pm->flags |= RESIL_PERMIT_LIMIT;
	if (pm->wait_ns > 0)
		pm->flags |= RESIL_PERMIT_LIMIT_WAIT;
	return 0;
}

int resil_limit_acquire(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			struct resil_permit_priv *pm)
{
	struct resil_limit_state *s = lstate(st);
	int64_t wait = 0, stamp = 0;
	uint64_t fp = 0;
	struct chain ch;
	struct lp p;
	int v;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	if (c->keys && x->key && !x->key_len)
		return empty_key(s, c, pm);
	/* keyed: the key's buckets are asked of memory before the clock is
	 * read, so that the two waits overlap (bench case limit.keyed_1m) */
keyed:
	if (c->keys && x->key) {
		uint64_t k[2];

		resil_limit_key_seeds(x->seg, k);
		fp = resil_limit_priv_key_ask(k, s, c, x->key, x->key_len, &ch);
	} else if (RESIL_UNLIKELY(c->keys)) {
		/* a call without a key: the configured one (limit.default_key),
		 * else a mistake: pooling every such caller in one bucket would
		 * limit them all together */
		if (!c->default_key_len)
			return -EINVAL;
		x->key = c->default_key;
		x->key_len = c->default_key_len;
		goto keyed;
	}
	lp_init(&p, c, limit_now(x, c), pm->limit_permits);
	p.heals = &s->heals;
	if (!lease_apply(x, c, s, &p)) {
		/* no share of the fleet's rate for this host now */
		pm->wait_ns = c->interval_ns;
		if (c->dry_run)
			return dry_run_admit(s, pm);
		return RESIL_REJECT_LIMITED;
	}
	/* one permit always fits (burst >= 1, count >= 1): no division then */
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	pm->key_idx = 0;
	if (c->keys && x->key) {
		v = resil_limit_priv_keyed_take(x, s, c, &p, fp, &ch, pm);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		v = slide_take(s, &p, pm);
	} else {
		v = resil_limit_priv_word_take(&s->word, &p, &wait, &stamp);
		pm->wait_ns = wait;
		pm->limit_tat = (uint64_t)stamp;
	}
	return take_end(s, c, pm, v);
}

bool resil_limit_lean_gcra(const struct resil_limit_conf *c, uint32_t scope)
{
	return !c->keys && resil_limit_algo(c) == RESIL_LIMIT_GCRA && scope != RESIL_SCOPE_GLOBAL;
}

/*
 * resil_limit_acquire for a configuration resil_limit_lean_gcra accepts,
 * from the clock alone: what the general acquire does for it (the same
 * checks, the same clock choice, the same word operation, the same permit
 * fields), without the decision context that it would read only to find
 * out that there is no key and no lease. *now: the precise reading taken
 * (the caller's liveness check reuses it, as it reuses a context's), 0
 * after a coarse one.
 */
int resil_limit_acquire_gcra(const struct resil_clock *clk, const struct resil_limit_conf *c,
			     void *st, struct resil_permit_priv *pm, int64_t *now)
{
	struct resil_limit_state *s = lstate(st);
	int64_t wait = 0, stamp = 0;
	struct lp p;
	int v;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	*now = 0;
	lp_init(&p, c, limit_read(clk, c, now), pm->limit_permits);
	p.heals = &s->heals;
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	pm->key_idx = 0;
	v = gcra_take(&s->word, &p, &wait, &stamp);
	pm->wait_ns = wait;
	pm->limit_tat = (uint64_t)stamp;
	return take_end(s, c, pm, v);
}

bool resil_limit_lean_keyed(const struct resil_limit_conf *c)
{
	return c->keys != 0;
}

/*
 * resil_limit_acquire for a keyed limiter and a key already in its
 * chain's first two buckets (nearly every call once a key has been seen),
 * from the clock, the segment (the table's hash seeds) and the key: the
 * same checks, fingerprint, prefetch, clock choice, entry, word operation
 * and permit fields, without the decision context. A keyed limiter holds
 * no lease (lease_apply admits it as it is). RESIL_LIMIT_ASK: the key is
 * in neither bucket (new, further along its chain, or no room for it);
 * nothing was written, and resil_limit_acquire decides (an insert,
 * eviction or full-table event reads the context).
 */
int resil_limit_acquire_keyed(const struct resil_clock *clk, const struct resil_limit_conf *c,
			      void *st, const uint64_t k[2], const void *key, size_t len,
			      struct resil_permit_priv *pm, int64_t *now)
{
	struct resil_limit_state *s = lstate(st);
	struct chain ch;
	uint64_t fp;
	int64_t idx;
	struct lp p;

	if (RESIL_UNLIKELY(c->interval_ns <= 0 || c->period_ns <= 0 || c->count == 0))
		return -EINVAL;
	fp = resil_limit_priv_key_ask(k, s, c, key, len, &ch);
	*now = 0;
	lp_init(&p, c, limit_read(clk, c, now), pm->limit_permits);
	p.heals = &s->heals;
	if (p.n > 1 && RESIL_UNLIKELY(too_many(&p)))
		return -E2BIG;
	idx = resil_limit_priv_key_find_pair(table_of(s), &ch, fp);
	if (RESIL_UNLIKELY(idx < 0))
		return RESIL_LIMIT_ASK;
	pm->key_idx = 0;
	return take_end(s, c, pm, resil_limit_priv_keyed_at(s, c, &p, idx, pm));
}

void resil_limit_undo(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
		      struct resil_permit_priv *pm)
{
	struct resil_limit_state *s = lstate(st);
	struct lp p;

	if (!(pm->flags & RESIL_PERMIT_LIMIT))
		return;
	pm->flags &= ~(RESIL_PERMIT_LIMIT | RESIL_PERMIT_LIMIT_WAIT);
	lp_init(&p, c, limit_now(x, c), pm->limit_permits);
	if (!lease_apply(x, c, s, &p))
		return; /* the share went away: nothing to give it back to */
	if (c->keys && x->key) {
		struct resil_limit_entry *e;
		uint64_t idx = pm->key_idx;

		/* admitted by limit.when_full = admit: nothing was taken */
		if (!idx || idx > (uint64_t)nbuckets(c) * RESIL_LIMIT_BUCKET)
			return;
		e = &table_of(s)[idx - 1];
		if (fp_key(ld_acquire(&e->fp)) != resil_limit_priv_key_fp(x, x->key, x->key_len))
			return; /* the entry changed hands meanwhile */
		word_give(&e->st, &p, (int64_t)pm->limit_tat);
	} else if (p.algo == RESIL_LIMIT_SLIDING) {
		slide_give(s, &p, pm);
	} else {
		word_give(&s->word, &p, (int64_t)pm->limit_tat);
	}
	pm->key_idx = 0;
	pm->wait_ns = 0;
}

/* A spent permit is spent: nothing to return on completion. */
void resil_limit_release(struct resil_ctx *x, const struct resil_limit_conf *c, void *st,
			 struct resil_permit_priv *pm, int outcome)
{
	(void)x;
	(void)c;
	(void)st;
	(void)outcome;
	pm->flags &= ~(RESIL_PERMIT_LIMIT | RESIL_PERMIT_LIMIT_WAIT);
}

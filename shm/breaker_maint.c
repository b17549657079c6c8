/* SPDX-License-Identifier: MIT */
/*
 * breaker_maint.c - the circuit breaker outside the decision: the block's
 * size, layout, init and carry to a new shape; the daemon's maintenance
 * (repair of the words any client may write, OPEN's end without a caller,
 * HALF_OPEN's repair), reclaim and sweep of a dead client's probes, the
 * count window's repair; the fleet's moves (scope = global: trip, hold,
 * probe_now, fleet_close) and force; the observers.
 *
 * It writes the shared words only through the operations a client uses
 * (transitions by CAS of the word, probe slots by CAS of their owner,
 * counters by fetch_add of a delta), plus the plain layout words and
 * base_ns that state_init, carry and the daemon's repair write. Who
 * writes which word, and with which order, is breaker.c's top comment;
 * the design is docs/internals/breaker.md.
 */
#include <errno.h>
#include <string.h>

#include "breaker_priv.h"

/* ---- the component interface -------------------------------------------- */

uint64_t resil_breaker_state_size(const struct resil_breaker_conf *c)
{
	uint64_t sz = sizeof(bk_t);

	sz += resil_align_up((uint64_t)nprobe_of(c) * sizeof(struct resil_breaker_probe),
			     RESIL_HOT_ALIGN);
	if (c->window_kind == RESIL_WINDOW_COUNT)
		sz += resil_align_up((uint64_t)wsize_of(c) * sizeof(ra32), RESIL_HOT_ALIGN);
	else if (c->window_kind == RESIL_WINDOW_TIME)
		sz += resil_align_up((uint64_t)wsize_of(c) * sizeof(struct resil_breaker_bucket),
				     RESIL_HOT_ALIGN);
	return sz;
}

/*
 * The layout words of line 0 (kind, size, bucket_ns, nprobe and the
 * offsets) are all derived from the configuration, which lives in the
 * read-only config segment. Written at init for observers; nothing
 * addresses memory through them (win_off_of, PROBE_OFF): the state
 * segment is writable by every client. The daemon rewrites them from the
 * configuration in its tick and counts what it had to repair. Plain
 * stores: the values are the ones every reader already expects.
 */
static uint32_t layout_repair(bk_t *b, const struct resil_breaker_conf *c)
{
	uint32_t np = nprobe_of(c), n = 0;
	uint32_t size = c->window_kind == RESIL_WINDOW_CONSECUTIVE ? c->window_size : wsize_of(c);
	int64_t bucket_ns = c->window_kind == RESIL_WINDOW_TIME ? bucket_ns_of(c) : 0;

#define FIX(field, val)                                                                            \
	do {                                                                                       \
		if (b->field != (val)) {                                                           \
			b->field = (val);                                                          \
			n++;                                                                       \
		}                                                                                  \
	} while (0)
	FIX(kind, c->window_kind);
	FIX(size, size);
	FIX(bucket_ns, bucket_ns);
	FIX(nprobe, np);
	FIX(probe_off, PROBE_OFF);
	FIX(win_off, win_off_of(c));
#undef FIX
	return n;
}

bool resil_breaker_layout_ok(const struct resil_breaker_conf *c, const void *st)
{
	bk_t copy;

	/* on a copy of the plain words of line 0 (after the state word, up to
	 * the end of win_off): layout_repair counts what differs and writes
	 * only the copy */
	memcpy(&copy.base_ns, &((const bk_t *)st)->base_ns,
	       offsetof(bk_t, win_off) + sizeof(copy.win_off) - offsetof(bk_t, base_ns));
	return layout_repair(&copy, c) == 0;
}

void resil_breaker_state_init(void *st, const struct resil_breaker_conf *c, int64_t now)
{
	bk_t *b = st;
	uint32_t np = nprobe_of(c);

	memset(st, 0, resil_breaker_state_size(c));
	b->base_ns = now;
	(void)layout_repair(b, c);
	for (uint32_t i = 0; i < np; i++)
		st_relaxed(&probes(b)[i].claimed_at, INT64_MAX);
	/* published by the record's slot word (release) in seg_records.c */
	st_release(&b->word, w_make(RESIL_STATE_CLOSED, 0, 0, 0));
}

bool resil_breaker_same_shape(const struct resil_breaker_conf *a,
			      const struct resil_breaker_conf *b)
{
	if (a->window_kind != b->window_kind || nprobe_of(a) != nprobe_of(b))
		return false;
	switch (a->window_kind) {
	case RESIL_WINDOW_COUNT:
		return wsize_of(a) == wsize_of(b);
	case RESIL_WINDOW_TIME:
		return wsize_of(a) == wsize_of(b) && bucket_ns_of(a) == bucket_ns_of(b);
	default:
		/* consecutive:N: a new N starts a fresh count (carry keeps
		 * OPEN and forced states) */
		return a->window_size == b->window_size;
	}
}

/* A new block for a new shape: OPEN keeps its opened time and streak,
 * forced states stay; HALF_OPEN starts its probes over (from now) in the
 * new block; CLOSED starts with a fresh window. The gen continues, so
 * permits of the old block (probes included) never match the new. */
void resil_breaker_carry(void *nst, const struct resil_breaker_conf *nc, const void *ost,
			 const struct resil_breaker_conf *oc, int64_t now)
{
	bk_t *nb = nst;
	const bk_t *ob = ost;
	uint64_t ow = ld_acquire(&((bk_t *)ob)->word);
	int s = w_state(ow);
	uint32_t gen = w_gen(ow) + 1;
	int64_t since = now - elapsed_ns(ob, ow, now);
	uint64_t nw;

	if (s == RESIL_STATE_CLOSED || s == RESIL_STATE_HALF_OPEN)
		since = now;
	/* the new base may be after the old since: move the base back */
	if (since < nb->base_ns)
		nb->base_ns = since;
	nw = w_make(s, w_streak(ow), gen, since_of(nb, since));
	/* the transition counters go on (before the word's release publishes
	 * them with the rest of the block) */
	for (unsigned i = 0; i < RESIL_BK_MOVES; i++)
		st_relaxed(&nb->moves[i], ld_relaxed(&((bk_t *)ob)->moves[i]));
	st_release(&nb->word, nw);
}

/*
 * The daemon's checks of the words it acts on (any client may write any
 * value into them); each bad one is repaired and counted (resil_repaired):
 *   - layout copies in line 0: rewritten from the configuration;
 *   - base_ns: the time origin of since_ms; one from the future
 *     would make every state look brand new, so
 *     it is moved to now and the state word re-stamped from now;
 *   - the state code: one outside the enum (6, 7) would reject forever;
 *     it becomes a fresh CLOSED breaker, as after a reset.
 * A client of the same fleet can still make decisions wrong (a state
 * word naming OPEN); it cannot make the daemon or a caller stick.
 */
static void state_repair(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c)
{
	int64_t now = resil_ctx_now(x);
	uint64_t w;

	if (layout_repair(b, c))
		resil_repaired(x, RESIL_W_BREAKER_LAYOUT);
	if (b->base_ns > now) {
		b->base_ns = now;
		w = ld_acquire(&b->word);
		cas_acq_rel(&b->word, &w, w_make(w_state(w), w_streak(w), w_gen(w), 0));
		resil_repaired(x, RESIL_W_BREAKER_BASE);
	}
	w = ld_acquire(&b->word);
	if (w_state(w) > RESIL_STATE_METRICS_ONLY) {
		resil_breaker_priv_window_reset(b, c);
		while (
		    w_state(w) > RESIL_STATE_METRICS_ONLY &&
		    !resil_breaker_priv_move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_RESET, 0))
			;
		resil_repaired(x, RESIL_W_BREAKER_STATE);
	}
}

void resil_breaker_maintain(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w;

	state_repair(x, b, c);
	w = ld_acquire(&b->word);

	if (w_state(w) == RESIL_STATE_OPEN) {
		int64_t wait = open_wait(c, w_streak(w));

		if (elapsed_ns(b, w, resil_ctx_now(x)) < wait)
			return;
		if (!resil_breaker_priv_move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w),
					     RESIL_WHY_WAIT_OVER, (uint64_t)wait))
			return;
	}
	if (w_state(w) == RESIL_STATE_HALF_OPEN)
		resil_breaker_priv_half_open_repair(x, b, c, w, true);
}

/* Counters from the slots' histogram, from a snapshot where neither seq nor
 * the counters moved during the scan; a few tries, then give up (the next
 * reclaim or fresh window repairs). */
static bool count_repair(bk_t *b, const struct resil_breaker_conf *c)
{
	uint32_t n = wsize_of(c);
	ra32 *s = cslots(b, c);

	for (int tries = 0; tries < 8; tries++) {
		uint64_t s1 = ld_acquire(&b->seq), c1 = ld_acquire(&b->counters), hist = 0;
		uint64_t c2, s2;

		for (uint32_t i = 0; i < n; i++)
			hist += cnt_delta(RESIL_BK_EMPTY, ld_relaxed(&s[i]) & 7);
		c2 = ld_acquire(&b->counters);
		s2 = ld_acquire(&b->seq);
		if (s1 != s2 || c1 != c2)
			continue;
		if (hist == c1)
			return false;
		/* a delta, so a record that starts now composes with it */
		faa_relaxed(&b->counters, hist - c1);
		return true;
	}
	return false;
}

void resil_breaker_reclaim(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			   uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	bk_t *b = st;
	struct resil_breaker_probe *p;
	uint32_t np = nprobe_of(c);

	p = probes(b);
	if (dead_client != 0) {
		for (uint32_t i = 0; i < np; i++) {
			uint64_t v = ld_acquire(&p[i].owner);

			if (!v || probe_client(v) != dead_client)
				continue;
			st_relaxed(&p[i].claimed_at, INT64_MAX);
			if (cas_acq_rel(&p[i].owner, &v, 0) && counts)
				counts->probes++;
		}
	}
	if (c->window_kind == RESIL_WINDOW_COUNT && count_repair(b, c) && counts)
		counts->repaired++;
}

uint32_t resil_breaker_sweep(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			     resil_stray_fn stray, void *ctx)
{
	bk_t *b = st;
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), n = 0;

	(void)x;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		/* a probe of no live client (stray(), as the permits'
		 * sweep: a free row, an id past the table): freed as a dead
		 * client's is (reclaim); a slot claimed again since the load
		 * is left alone by the CAS. Id 0 (unregistered) is never
		 * guessed about: half_open_max_wait ends it */
		if (!v || probe_client(v) == 0 || !stray(probe_client(v), ctx))
			continue;
		st_relaxed(&p[i].claimed_at, INT64_MAX);
		if (cas_acq_rel(&p[i].owner, &v, 0))
			n++;
	}
	return n;
}

int resil_breaker_state(const void *st)
{
	return w_state(ld_acquire(&((bk_t *)st)->word));
}

int resil_breaker_settle(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	/* what a decision in HALF_OPEN would find first (check_slow): a
	 * probe held past half_open_max_wait, or a decision whose maker
	 * died; a read that comes before any decision says what it would
	 * say (embedded mode has no tick to do it) */
	if (w_state(w) == RESIL_STATE_HALF_OPEN)
		resil_breaker_priv_half_open_repair(x, b, c, w, false);
	return w_state(ld_acquire(&b->word));
}

int64_t resil_breaker_moves(const void *st, int from, int to)
{
	int idx = resil_breaker_priv_move_idx(from, to);

	return idx < 0 ? -1 : (int64_t)ld_relaxed(&((bk_t *)st)->moves[idx]);
}

int resil_breaker_window(const struct resil_breaker_conf *c, const void *st, int64_t now,
			 struct resil_breaker_counts *out)
{
	bk_t *b = (bk_t *)st;

	switch (c->window_kind) {
	case RESIL_WINDOW_COUNT:
		resil_breaker_unpack(ld_relaxed(&b->counters), out);
		return 0;
	case RESIL_WINDOW_TIME: {
		/* the span a record made now would be judged in (record) */
		int64_t t = rel_ns(b, now) + b->base_ns;

		resil_breaker_priv_time_sum(
		    b, c, (uint64_t)(t < 0 ? 0 : t) / (uint64_t)bucket_ns_of(c) + 1, out);
		return 0;
	}
	default:
		return -ENODATA;
	}
}

void resil_breaker_host_window(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			       struct resil_breaker_counts *k)
{
	bk_t *b = st;
	int64_t now;

	memset(k, 0, sizeof(*k));
	if (c->window_kind != RESIL_WINDOW_TIME)
		return;
	now = rel_ns(b, resil_ctx_now(x)) + b->base_ns;
	resil_breaker_priv_time_sum(
	    b, c, (uint64_t)(now < 0 ? 0 : now) / (uint64_t)bucket_ns_of(c) + 1, k);
	/* what leaves the host is what its window can hold: any client can
	 * write the buckets, and a count past that would break the fleet's
	 * sums (every host's, in Redis). A bucket's calls to 32 bits, like
	 * its failures and slow calls; failures and slow calls no more than
	 * calls. The window's own decisions read the words as they are. */
	k->calls = resil_min64(k->calls, (int64_t)wsize_of(c) * UINT32_MAX);
	k->failures = resil_min64(k->failures, k->calls);
	k->slow = resil_min64(k->slow, k->calls);
}

/* The fleet's evidence opens the host's breaker as its own would (the same
 * CAS and event as closed_open); the host then runs its own OPEN wait and
 * half-open probes. */
bool resil_breaker_trip(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			uint32_t why, uint64_t value)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	(void)c;
	while (w_state(w) == RESIL_STATE_CLOSED)
		if (resil_breaker_priv_move(x, b, &w, RESIL_STATE_OPEN, 0, why, value))
			return true;
	return false;
}

/* Push OPEN's end to `until`: since = until - wait, in one CAS of the
 * word that keeps its state, streak and gen (a permit of this gen is a
 * rejection either way). A client that read the old word and found the
 * wait over fails its CAS to HALF_OPEN, reloads and is rejected
 * (resil_breaker_acquire re-checks the wait). */
bool resil_breaker_hold(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int64_t until)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word), want;

	(void)x;
	while (w_state(w) == RESIL_STATE_OPEN) {
		int64_t wait = open_wait(c, w_streak(w));

		want = since_of(b, until > INT64_MIN + wait ? until - wait : until);
		if (want <= w_since(w))
			return false;
		if (cas_acq_rel(&b->word, &w,
				w_make(RESIL_STATE_OPEN, w_streak(w), w_gen(w), want)))
			return true;
	}
	return false;
}

bool resil_breaker_probe_now(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	while (w_state(w) == RESIL_STATE_OPEN)
		if (resil_breaker_priv_move(x, b, &w, RESIL_STATE_HALF_OPEN, w_streak(w),
					    RESIL_WHY_WAIT_OVER,
					    (uint64_t)open_wait(c, w_streak(w))))
			return true;
	return false;
}

/* As the decision of passed probes: the window reset before the CAS that
 * publishes it (a caller of the old OPEN gen records nothing into it). */
bool resil_breaker_fleet_close(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st)
{
	bk_t *b = st;
	uint64_t w = ld_acquire(&b->word);

	if (w_state(w) != RESIL_STATE_OPEN)
		return false;
	resil_breaker_priv_window_reset(b, c);
	while (w_state(w) == RESIL_STATE_OPEN)
		if (resil_breaker_priv_move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_FLEET_CLOSED,
					    0))
			return true;
	return false;
}

int resil_breaker_force(struct resil_ctx *x, const struct resil_breaker_conf *c, void *st,
			int state)
{
	bk_t *b = st;
	uint64_t w;

	if (state != RESIL_STATE_CLOSED && state != RESIL_STATE_DISABLED &&
	    state != RESIL_STATE_FORCED_OPEN && state != RESIL_STATE_METRICS_ONLY)
		return -EINVAL;
	if (state == RESIL_STATE_CLOSED)
		resil_breaker_priv_window_reset(b, c);
	w = ld_acquire(&b->word);
	while (!resil_breaker_priv_move(
	    x, b, &w, state, 0, state == RESIL_STATE_CLOSED ? RESIL_WHY_RESET : RESIL_WHY_FORCED,
	    0))
		;
	return 0;
}

/* ---- observers ------------------------------------------------------- */

/*
 * A snapshot for `resilctl show`: plain loads of words written by anyone,
 * not atomic across them (a record racing the read can be counted in the
 * window but not yet in the rates' denominator, or the reverse: off by the
 * records in flight). Reads only; every index comes from the configuration.
 */
void resil_breaker_info(const struct resil_breaker_conf *c, const void *st, int64_t now,
			struct resil_breaker_info *out)
{
	bk_t *b = (bk_t *)(uintptr_t)st;
	uint64_t w = ld_acquire(&b->word);
	uint32_t gen = w_gen(w);

	memset(out, 0, sizeof(*out));
	out->state = w_state(w);
	out->streak = w_streak(w);
	out->since_ns = now - elapsed_ns(b, w, now);
	out->min_calls = (uint32_t)min_calls_of(c);
	out->probes_max = ho_calls(c);
	if (out->state == RESIL_STATE_OPEN)
		out->wait_ns = open_wait(c, out->streak);
	if (out->state == RESIL_STATE_HALF_OPEN) {
		uint64_t h = ld_acquire(&b->ho);

		out->probes_held = resil_breaker_priv_probes_held(b, nprobe_of(c), gen);
		if (ho_gen(h) == gen) {
			out->calls = ho_done(h);
			out->failures = ho_fail(h);
			out->slow = ho_slow(h);
		}
		return;
	}
	switch (c->window_kind) {
	case RESIL_WINDOW_CONSECUTIVE: {
		uint64_t v = ld_acquire(&b->consec);

		out->failures = cw_gen(v) == gen ? cw_cnt(v) : 0;
		out->calls = out->failures;
		break;
	}
	case RESIL_WINDOW_TIME: {
		int64_t t = rel_ns(b, now) + b->base_ns;
		uint64_t tick1 = (uint64_t)(t < 0 ? 0 : t) / (uint64_t)bucket_ns_of(c) + 1;
		struct resil_breaker_counts k;

		resil_breaker_priv_time_sum(b, c, tick1, &k);
		out->calls = k.calls;
		out->failures = k.failures;
		out->slow = k.slow;
		break;
	}
	default: {
		struct resil_breaker_counts k;

		resil_breaker_unpack(ld_relaxed(&b->counters), &k);
		out->calls = k.calls;
		out->failures = k.failures;
		out->slow = k.slow;
		break;
	}
	}
}

/* SPDX-License-Identifier: MIT */
/*
 * breaker_probe.c - the circuit breaker's HALF_OPEN: the probe slots
 * (claim, free, count), the probes' answers (ho) and the decision they
 * make between OPEN again and a fresh CLOSED.
 *
 * Words (breaker.h), writers, orders: probes[].owner is CASed (acq_rel)
 * by a prober (claim, free) and by reclaim or sweep (breaker_maint.c) for
 * a dead client; probes[].claimed_at is stored by the owner after its
 * claim and is INT64_MAX while free; ho is CASed (acq_rel) by probers
 * adding an answer, tagged with gen so entering HALF_OPEN resets it. A
 * claimer scans the slots (after a seq_cst fence) before loading ho, and
 * an answer adds to ho before freeing its slot: a probe is always counted
 * at least once, so no more than half_open_calls go per HALF_OPEN. The
 * rules, half_open_max_wait and the crash windows of a claim and an answer
 * are docs/internals/breaker.md; the state word is breaker.c's.
 */
#include "breaker_priv.h"

/* ---- probes ------------------------------------------------------------- */

void resil_breaker_priv_probe_free(bk_t *b, uint32_t i, uint64_t tag)
{
	struct resil_breaker_probe *p = &probes(b)[i];
	uint64_t v = ld_acquire(&p->owner);

	if (v != tag)
		return; /* taken over by a newer gen, or reclaimed */
	/* INT64_MAX first: if a newer gen takes the slot over in between, it
	 * reads "not timed" (never a false timeout); maintain stamps it. */
	st_relaxed(&p->claimed_at, INT64_MAX);
	cas_acq_rel(&p->owner, &v, 0);
}

/* Held probes of gen (slots scanned before ho is loaded: see top). */
uint32_t resil_breaker_priv_probes_held(bk_t *b, uint32_t np, uint32_t gen)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t held = 0;

	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		if (v && probe_gen(v) == gen)
			held++;
	}
	return held;
}

/* probes_held, and the oldest claimed_at among them (INT64_MAX: none
 * stamped) for the half_open_max_wait check of a caller. */
uint32_t resil_breaker_priv_probes_held_since(bk_t *b, uint32_t np, uint32_t gen, int64_t *oldest)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t held = 0;

	*oldest = INT64_MAX;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);
		int64_t t;

		if (!v || probe_gen(v) != gen)
			continue;
		held++;
		t = ld_relaxed(&p[i].claimed_at);
		if (t < *oldest)
			*oldest = t;
	}
	return held;
}

/* Claim a probe slot for gen; its index or -1 when none may go. */
int resil_breaker_priv_probe_claim(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				   uint64_t w)
{
	uint32_t gen = w_gen(w);
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), calls = ho_calls(c);
	uint64_t tag = probe_tag(gen, probe_id(x));

	if (answered(b, gen) >= calls)
		return -1;
	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);

		if (v && !gen_newer(gen, probe_gen(v)))
			continue; /* held in this gen */
		if (!cas_acq_rel(&p[i].owner, &v, tag))
			continue;
		/* Two claimers each store their slot and load the other's:
		 * without a total order both could miss each other. */
		atomic_thread_fence(memory_order_seq_cst);
		/* CRASH WINDOW: killed here, the slot is owned but not timed:
		 * reclaim frees it, maintain stamps it. */
		st_relaxed(&p[i].claimed_at, resil_ctx_now(x));
		/* Over the total, or the state moved on since the caller
		 * read it (a claim for a gen that is over would admit a call
		 * in OPEN, and its gen's answers are no longer in ho): give
		 * the slot back. Loaded after ho, so a ho of this gen was
		 * read if the word still says this gen. */
		if (resil_breaker_priv_probes_held(b, np, gen) + answered(b, gen) > calls ||
		    ld_acquire(&b->word) != w) {
			resil_breaker_priv_probe_free(b, i, tag);
			return -1;
		}
		return (int)i;
	}
	return -1;
}

/* ---- decisions on probes ------------------------------------------------ */

void resil_breaker_priv_probes_decide(struct resil_ctx *x, bk_t *b,
				      const struct resil_breaker_conf *c, uint64_t w, uint64_t h)
{
	uint32_t done = ho_done(h), calls = ho_calls(c);
	struct resil_breaker_counts k = {done, ho_fail(h), ho_slow(h)};
	uint32_t why;
	uint64_t value;

	if (w_state(w) != RESIL_STATE_HALF_OPEN || w_gen(w) != ho_gen(h))
		return;
	if (c->window_kind == RESIL_WINDOW_CONSECUTIVE && k.failures > 0) {
		resil_breaker_priv_move(x, b, &w, RESIL_STATE_OPEN, streak_up(w),
					RESIL_WHY_PROBE_FAILED, (uint64_t)k.failures);
		return;
	}
	if (done < calls)
		return;
	if (c->window_kind != RESIL_WINDOW_CONSECUTIVE &&
	    resil_breaker_priv_over_threshold(c, &k, 1, &why, &value)) {
		resil_breaker_priv_move(x, b, &w, RESIL_STATE_OPEN, streak_up(w), why, value);
		return;
	}
	/* Fresh window first, then the CAS publishes it (release). The word
	 * is loaded again just before: a late repairer holding an old copy
	 * must not wipe the records of the CLOSED that followed. */
	if (ld_acquire(&b->word) != w)
		return;
	resil_breaker_priv_window_reset(b, c);
	resil_breaker_priv_move(x, b, &w, RESIL_STATE_CLOSED, 0, RESIL_WHY_PROBES_PASSED, done);
}

void resil_breaker_priv_half_open_repair(struct resil_ctx *x, bk_t *b,
					 const struct resil_breaker_conf *c, uint64_t w,
					 bool daemon)
{
	struct resil_breaker_probe *p = probes(b);
	uint32_t np = nprobe_of(c), gen = w_gen(w);
	int64_t now = resil_ctx_now(x), floor = since_abs_floor(b, w, now), oldest = INT64_MAX;
	uint64_t h;
	uint32_t held = 0;

	for (uint32_t i = 0; i < np; i++) {
		uint64_t v = ld_acquire(&p[i].owner);
		int64_t t;

		if (!v || probe_gen(v) != gen)
			continue;
		held++;
		t = ld_relaxed(&p[i].claimed_at);
		if (t == INT64_MAX || t < floor) {
			/* not stamped (claimer in its crash window, or a slot
			 * taken over from an older gen not stamped yet) */
			if (daemon)
				atomic_compare_exchange_strong_explicit(&p[i].claimed_at, &t, now,
									memory_order_relaxed,
									memory_order_relaxed);
			continue;
		}
		if (t < oldest)
			oldest = t;
	}
	if (c->half_open_max_wait_ns > 0 && oldest != INT64_MAX &&
	    now - oldest >= c->half_open_max_wait_ns) {
		resil_breaker_priv_move(x, b, &w, RESIL_STATE_OPEN, streak_up(w),
					RESIL_WHY_PROBE_TIMEOUT, (uint64_t)(now - oldest));
		return;
	}
	/* Every answer in, nobody holding a probe, and still HALF_OPEN: the
	 * decider died between its answer and its CAS. The daemon redoes
	 * the decision at once; a client only once HALF_OPEN is older than
	 * half_open_max_wait (60 s when off), so callers do not pile onto
	 * the decision a live decider is making right now. */
	if (held != 0)
		return;
	if (!daemon &&
	    elapsed_ns(b, w, now) <
		(c->half_open_max_wait_ns > 0 ? c->half_open_max_wait_ns : 60 * RESIL_NS_PER_S))
		return;
	h = ld_acquire(&b->ho);
	if (ho_gen(h) == gen && (ho_done(h) >= ho_calls(c) ||
				 (c->window_kind == RESIL_WINDOW_CONSECUTIVE && ho_fail(h) > 0)))
		resil_breaker_priv_probes_decide(x, b, c, w, h);
}

/* Add a probe's answer; returns the new ho word, 0 when it did not count
 * (stale gen, or every answer already in). */
uint64_t resil_breaker_priv_ho_add(bk_t *b, const struct resil_breaker_conf *c, uint32_t gen,
				   bool fail, bool slow)
{
	uint64_t h = ld_acquire(&b->ho), nh;

	for (;;) {
		uint64_t base;

		if (ho_gen(h) == gen)
			base = h;
		else if (gen_newer(gen, ho_gen(h)))
			base = ho_make(gen, 0, 0, 0);
		else
			return 0;
		if (ho_done(base) >= ho_calls(c))
			return 0;
		nh = ho_make(gen, ho_done(base) + 1, ho_fail(base) + fail, ho_slow(base) + slow);
		if (cas_acq_rel(&b->ho, &h, nh))
			return nh;
	}
}

/* SPDX-License-Identifier: MIT */
/*
 * breaker_priv.h - what breaker.c (the state word, transitions, windows,
 * the decision), breaker_probe.c (half-open's probes) and breaker_maint.c
 * (layout, maintenance, reclaim, the fleet's moves, observers) share: the
 * packed words' accessors, the values derived from the configuration,
 * the block's layout, the time helpers, and the functions each calls in
 * another. Nothing outside the three includes it. The shared words, their
 * writers and their memory orders are breaker.c's top comment; the design
 * is docs/internals/breaker.md.
 */
#ifndef RESIL_SHM_BREAKER_PRIV_H
#define RESIL_SHM_BREAKER_PRIV_H

#include "breaker.h"
#include "resil.h"

/* ---- packed words ---------------------------------------------------- */

#define GEN_BITS	 20
#define GEN_MASK	 ((1u << GEN_BITS) - 1)
#define SINCE_BITS	 36
#define SINCE_MASK	 ((1ULL << SINCE_BITS) - 1)
#define STREAK_MAX	 31u
#define ELAPSED_PLAIN_NS ((int64_t)SINCE_MASK * RESIL_NS_PER_MS - 3600 * RESIL_NS_PER_S)

static inline int w_state(uint64_t w)
{
	return (int)(w & 7);
}
static inline uint32_t w_streak(uint64_t w)
{
	return (uint32_t)(w >> 3) & 31;
}
static inline uint32_t w_gen(uint64_t w)
{
	return (uint32_t)(w >> 8) & GEN_MASK;
}
static inline uint64_t w_since(uint64_t w)
{
	return w >> 28;
}
static inline uint64_t w_make(int state, uint32_t streak, uint32_t gen, uint64_t since_ms)
{
	return (uint64_t)(state & 7) | (uint64_t)(streak & 31) << 3 |
	       (uint64_t)(gen & GEN_MASK) << 8 | (since_ms & SINCE_MASK) << 28;
}

/* gen a is newer than b (modulo 2^20). */
static inline bool gen_newer(uint32_t a, uint32_t b)
{
	uint32_t d = (a - b) & GEN_MASK;

	return d != 0 && d < (1u << (GEN_BITS - 1));
}

#define F21 21
#define M21 ((1ULL << 21) - 1)

/* Packed delta from one slot outcome to another. */
static inline uint64_t cnt_delta(uint32_t old, uint32_t nw)
{
	int64_t dc = (int64_t)(nw & 1) - (int64_t)(old & 1);
	int64_t df = (int64_t)((nw >> 1) & 1) - (int64_t)((old >> 1) & 1);
	int64_t ds = (int64_t)((nw >> 2) & 1) - (int64_t)((old >> 2) & 1);

	return (uint64_t)dc + (uint64_t)df * (1ULL << F21) + (uint64_t)ds * (1ULL << (2 * F21));
}

static inline int64_t sext(uint64_t v, int bits)
{
	uint64_t m = 1ULL << (bits - 1);

	v &= (1ULL << bits) - 1;
	return (int64_t)(v ^ m) - (int64_t)m;
}

/* consec: gen << 32 | count */
static inline uint32_t cw_gen(uint64_t v)
{
	return (uint32_t)(v >> 32) & GEN_MASK;
}
static inline uint32_t cw_cnt(uint64_t v)
{
	return (uint32_t)v;
}

/* ho: gen:20 << 44 | answered:14 << 28 | failed:14 << 14 | slow:14 */
#define HO_M14 0x3fffu
static inline uint32_t ho_gen(uint64_t v)
{
	return (uint32_t)(v >> 44) & GEN_MASK;
}
static inline uint32_t ho_done(uint64_t v)
{
	return (uint32_t)(v >> 28) & HO_M14;
}
static inline uint32_t ho_fail(uint64_t v)
{
	return (uint32_t)(v >> 14) & HO_M14;
}
static inline uint32_t ho_slow(uint64_t v)
{
	return (uint32_t)v & HO_M14;
}
static inline uint64_t ho_make(uint32_t gen, uint32_t done, uint32_t fail, uint32_t slow)
{
	return (uint64_t)(gen & GEN_MASK) << 44 | (uint64_t)(done & HO_M14) << 28 |
	       (uint64_t)(fail & HO_M14) << 14 | (slow & HO_M14);
}

/* probe owner: (gen | 1 << 31) << 32 | client id */
static inline uint64_t probe_tag(uint32_t gen, uint32_t client)
{
	return (uint64_t)((gen & GEN_MASK) | 0x80000000u) << 32 | client;
}
static inline uint32_t probe_gen(uint64_t v)
{
	return (uint32_t)(v >> 32) & GEN_MASK;
}
static inline uint32_t probe_client(uint64_t v)
{
	return (uint32_t)v;
}
/* The client id a probe carries: the caller's row + 1, or 0 without a
 * row (a pid-tagged claim id, seg.h, does not fit a permit's probe index;
 * such a probe ends by half_open_max_wait, as before) */
static inline uint32_t probe_id(const struct resil_ctx *x)
{
	return x->client_id < (1u << 21) ? x->client_id : 0;
}

/* ---- configuration-derived values ------------------------------------ */

typedef struct resil_breaker_state bk_t;

static inline bool slow_on(const struct resil_breaker_conf *c)
{
	return c->slow_rate_bp < 10000 && c->window_kind != RESIL_WINDOW_CONSECUTIVE;
}

static inline uint32_t ho_calls(const struct resil_breaker_conf *c)
{
	uint32_t n = c->half_open_calls;

	if (n == 0)
		n = 1;
	return n > RESIL_BK_HALF_OPEN_MAX ? RESIL_BK_HALF_OPEN_MAX : n;
}

static inline uint32_t nprobe_of(const struct resil_breaker_conf *c)
{
	uint32_t n = c->half_open_concurrent ? c->half_open_concurrent : c->half_open_calls;

	if (n > ho_calls(c))
		n = ho_calls(c);
	if (n == 0)
		n = 1;
	return n > RESIL_BK_PROBES_MAX ? RESIL_BK_PROBES_MAX : n;
}

static inline uint32_t wsize_of(const struct resil_breaker_conf *c)
{
	uint32_t n;

	switch (c->window_kind) {
	case RESIL_WINDOW_TIME:
		n = c->buckets ? c->buckets : 1;
		return n > RESIL_BK_BUCKETS_MAX ? RESIL_BK_BUCKETS_MAX : n;
	case RESIL_WINDOW_CONSECUTIVE:
		return 0;
	default:
		n = c->window_size ? c->window_size : 1;
		return n > RESIL_BK_WINDOW_MAX ? RESIL_BK_WINDOW_MAX : n;
	}
}

static inline int64_t bucket_ns_of(const struct resil_breaker_conf *c)
{
	int64_t b = c->window_ns / (int64_t)wsize_of(c);

	return b > 0 ? b : 1;
}

/* Count windows judge from min(min_calls, N) like Resilience4j; a time
 * window from min_calls. */
static inline int64_t min_calls_of(const struct resil_breaker_conf *c)
{
	int64_t m = c->min_calls ? c->min_calls : 1;

	if (c->window_kind == RESIL_WINDOW_COUNT && m > (int64_t)wsize_of(c))
		m = wsize_of(c);
	return m;
}

/* The OPEN wait after `streak` repeated opens: wait * multiplier^streak,
 * capped at wait_max (0: wait). */
static inline int64_t open_wait(const struct resil_breaker_conf *c, uint32_t streak)
{
	int64_t w = c->wait_ns < 0 ? 0 : c->wait_ns;
	int64_t cap = c->wait_max_ns > 0 ? c->wait_max_ns : w;
	uint32_t m = c->wait_multiplier_milli;

	if (m > 1000) {
		for (uint32_t i = 0; i < streak && w < cap; i++) {
			if (w > INT64_MAX / m) {
				w = cap;
				break;
			}
			w = w * m / 1000;
		}
	}
	return w > cap ? cap : w;
}

/* open_wait(c, 0) without a loop */
static inline int64_t first_wait(const struct resil_breaker_conf *c)
{
	int64_t w = c->wait_ns < 0 ? 0 : c->wait_ns;

	return c->wait_max_ns > 0 && c->wait_max_ns < w ? c->wait_max_ns : w;
}

/* The block's layout, from the configuration only (the read-only config
 * segment): the one place offsets are computed. The copies in line 0
 * (probe_off, win_off, ...) are for dumps of the segment; no access is
 * ever addressed through them, since any client can write them. The
 * words read here share the conf's first line with those every call
 * reads. */
#define PROBE_OFF ((uint32_t)sizeof(bk_t))
static inline uint32_t win_off_of(const struct resil_breaker_conf *c)
{
	return (uint32_t)(sizeof(bk_t) + resil_align_up((uint64_t)nprobe_of(c) *
							    sizeof(struct resil_breaker_probe),
							RESIL_HOT_ALIGN));
}
static inline ra32 *cslots(bk_t *b, const struct resil_breaker_conf *c)
{
	return (ra32 *)((char *)b + win_off_of(c));
}
static inline struct resil_breaker_bucket *buckets(bk_t *b, const struct resil_breaker_conf *c)
{
	return (struct resil_breaker_bucket *)((char *)b + win_off_of(c));
}
static inline struct resil_breaker_probe *probes(bk_t *b)
{
	return (struct resil_breaker_probe *)((char *)b + PROBE_OFF);
}

/* ---- time --------------------------------------------------------------- */

static inline int64_t rel_ns(const bk_t *b, int64_t now)
{
	int64_t base = b->base_ns;
	uint64_t r;

	/* time appearing to go backwards clamps; unsigned, so no value of
	 * base_ns (a client may write any) overflows */
	if (now <= base)
		return 0;
	r = (uint64_t)now - (uint64_t)base;
	return r > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r;
}

static inline uint64_t since_of(const bk_t *b, int64_t now)
{
	return ((uint64_t)rel_ns(b, now) + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS;
}

/* ns since the word's since (0 if not yet or if the clock went back). The
 * 36-bit ms difference is taken modulo and sign-extended: exact for
 * states younger than 397 days. */
static inline int64_t elapsed_ns(const bk_t *b, uint64_t w, int64_t now)
{
	int64_t rel = rel_ns(b, now), e;

	if (RESIL_LIKELY(rel < ELAPSED_PLAIN_NS)) {
		/* the first 795 days of the block, less an hour: no wrap */
		e = rel - (int64_t)w_since(w) * RESIL_NS_PER_MS;
	} else {
		uint64_t now_ms = (uint64_t)rel / RESIL_NS_PER_MS;
		int64_t d = sext((now_ms - w_since(w)) & SINCE_MASK, SINCE_BITS);

		e = d * RESIL_NS_PER_MS + (rel - (int64_t)now_ms * RESIL_NS_PER_MS);
	}
	return e < 0 ? 0 : e;
}

/* The floor of the word's since, as an absolute time. */
static inline int64_t since_abs_floor(const bk_t *b, uint64_t w, int64_t now)
{
	return now - elapsed_ns(b, w, now) - RESIL_NS_PER_MS;
}

/* ---- transitions and probes --------------------------------------------- */

static inline uint32_t streak_up(uint64_t w)
{
	uint32_t s = w_streak(w);

	return s < STREAK_MAX ? s + 1 : s;
}

static inline uint32_t answered(bk_t *b, uint32_t gen)
{
	uint64_t h = ld_acquire(&b->ho);

	return ho_gen(h) == gen ? ho_done(h) : 0;
}

/* breaker.c: transitions and windows */
int resil_breaker_priv_move_idx(int from, int to);
bool resil_breaker_priv_move(struct resil_ctx *x, bk_t *b, uint64_t *w, int to, uint32_t streak,
			     uint32_t why, uint64_t value);
void resil_breaker_priv_window_reset(bk_t *b, const struct resil_breaker_conf *c);
bool resil_breaker_priv_over_threshold(const struct resil_breaker_conf *c,
				       const struct resil_breaker_counts *k, int64_t min,
				       uint32_t *why, uint64_t *value);
void resil_breaker_priv_time_sum(bk_t *b, const struct resil_breaker_conf *c, uint64_t tick1,
				 struct resil_breaker_counts *k);

/* breaker_probe.c: probe slots, answers, the probes' decision */
void resil_breaker_priv_probe_free(bk_t *b, uint32_t i, uint64_t tag);
uint32_t resil_breaker_priv_probes_held(bk_t *b, uint32_t np, uint32_t gen);
uint32_t resil_breaker_priv_probes_held_since(bk_t *b, uint32_t np, uint32_t gen, int64_t *oldest);
int resil_breaker_priv_probe_claim(struct resil_ctx *x, bk_t *b, const struct resil_breaker_conf *c,
				   uint64_t w);
/* HALF_OPEN of word w: a probe of its gen held longer than max_wait sends
 * it back to OPEN; with every probe answered but no decision (the decider
 * died), decide again. */
void resil_breaker_priv_half_open_repair(struct resil_ctx *x, bk_t *b,
					 const struct resil_breaker_conf *c, uint64_t w,
					 bool daemon);
void resil_breaker_priv_probes_decide(struct resil_ctx *x, bk_t *b,
				      const struct resil_breaker_conf *c, uint64_t w, uint64_t h);
uint64_t resil_breaker_priv_ho_add(bk_t *b, const struct resil_breaker_conf *c, uint32_t gen,
				   bool fail, bool slow);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * shed.c - load shedding by client-side adaptive throttling (Google SRE
 * book, "Handling Overload"): reject locally with probability
 *
 *     p = max(0, (requests - K * accepts) / (requests + 1))
 *
 * over the last shed.window, so that a fleet whose dependency refuses work
 * sends it about K times what it accepts instead of everything.
 *
 * Counting (decided here, documented in docs/configuration.md):
 *   requests  every call that reaches the shedder, including the ones it
 *             rejects itself (as in the SRE book); a call that a later
 *             component of the policy rejects (undo) or that is released
 *             IGNORED is taken back out: the dependency never judged it;
 *   accepts   calls released SUCCESS. FAILURE means the dependency
 *             refused or failed the call: a request without an accept.
 *
 * The window is a ring of RESIL_SHED_SLOTS time buckets of width
 * window / RESIL_SHED_BUCKETS; `epoch` is the current bucket number.
 * Whoever first sees a time past the current bucket rotates: it zeroes
 * the slots the buckets ahead will use (zero-ahead: the slot after the
 * current one is always clean before anybody writes to it), CASes the
 * epoch forward, sums the window and publishes p as a 32-bit fixed-point
 * word. The hot path loads p32 and, when it is not 0, compares 32 bits of
 * the caller's random number with it: P(reject) = p32 / 2^32 exactly.
 *
 * Shared words:
 *   p32, epoch   writer: the rotator (release store / CAS acq_rel);
 *                readers: every acquire (relaxed p32: a stale p for a few
 *                ns is as good as the new one; acquire epoch).
 *   b[i]         fetch_add (relaxed) by every acquire and release; zeroed
 *                (relaxed stores) by rotators for slots not in use.
 *   width_ns     a copy of window / RESIL_SHED_BUCKETS; writers: init,
 *                the daemon's repair (relaxed stores); readers: every
 *                acquire and release (relaxed: the hot test's multiplier,
 *                see current(); rotation divides by the configuration's).
 *   statistics   relaxed counters.
 * Counters are signed: an undo that lands after its bucket was zeroed can
 * take one below zero; sums are clamped at 0.
 *
 * The clock: the coarse clock (same time base, a kernel tick's
 * resolution) unless the call already read the precise one: buckets are
 * seconds wide.
 *
 * Crash windows: a rotator killed after zeroing and before its CAS leaves
 * the epoch where it was (the next caller rotates again, zeroing the same
 * future slots); killed after the CAS and before publishing p, p stays one
 * bucket old until the next boundary. Two rotators with different clock
 * readings after an idle gap can zero a slot someone just counted into: a
 * few counts lost, once, after idleness. Nothing here is held by a client,
 * so reclaim has nothing to do.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "resil.h"
#include "parse.h"
#include "shed.h"

#define SHED_MASK (RESIL_SHED_SLOTS - 1)
RESIL_STATIC_ASSERT((RESIL_SHED_SLOTS & SHED_MASK) == 0, "ring is a power of two");
RESIL_STATIC_ASSERT(RESIL_SHED_SLOTS == RESIL_SHED_BUCKETS + 1, "one slot ahead");

/* ---- configuration ---- */

void resil_shed_conf_defaults(struct resil_shed_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->k_milli = 2000;
	c->window_ns = 120 * RESIL_NS_PER_S;
}

int resil_shed_conf_set(struct resil_shed_conf *c, const char *key, const char *value, char *err,
			size_t errlen)
{
	if (strcmp(key, "shed.k") == 0) {
		uint32_t k;

		if (resil_parse_milli(value, &k) < 0 || k < 1000 || k > 1000000) {
			snprintf(err, errlen,
				 "shed.k: '%s' is not a multiplier in 1..1000 (e.g. 2)", value);
			return -EINVAL;
		}
		c->k_milli = k;
	} else if (strcmp(key, "shed.window") == 0) {
		int64_t ns;

		if (resil_parse_duration(value, &ns) < 0 || ns < 15 * RESIL_NS_PER_MS) {
			snprintf(err, errlen,
				 "shed.window: '%s' is not a duration of at least 15ms (e.g. 2m)",
				 value);
			return -EINVAL;
		}
		c->window_ns = ns;
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

size_t resil_shed_conf_format(const struct resil_shed_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	if (c->k_milli % 1000 == 0)
		resil_priv_put(buf, len, &off, "shed.k = %u\n", c->k_milli / 1000);
	else
		resil_priv_put(buf, len, &off, "shed.k = %u.%03u\n", c->k_milli / 1000,
			       c->k_milli % 1000);
	resil_format_duration(c->window_ns, d, sizeof(d));
	resil_priv_put(buf, len, &off, "shed.window = %s\n", d);
	return off;
}

/* ---- state ---- */

static int64_t width_of(const struct resil_shed_conf *c)
{
	int64_t w = c->window_ns / RESIL_SHED_BUCKETS;

	return w > 0 ? w : 1;
}

bool resil_shed_layout_ok(const struct resil_shed_conf *c, const void *st)
{
	return ld_relaxed(&((struct resil_shed_state *)st)->width_ns) == width_of(c);
}

uint64_t resil_shed_state_size(const struct resil_shed_conf *c)
{
	return sizeof(struct resil_shed_state);
}

void resil_shed_state_init(void *st, const struct resil_shed_conf *c, int64_t now)
{
	struct resil_shed_state *s = st;

	memset(s, 0, sizeof(*s));
	/* nobody divides by it: the hot test's multiplier (current) */
	st_relaxed(&s->width_ns, width_of(c));
	st_relaxed(&s->epoch, (uint64_t)(now > 0 ? now : 0) / (uint64_t)width_of(c));
}

bool resil_shed_same_shape(const struct resil_shed_conf *a, const struct resil_shed_conf *b)
{
	/* the bucket width is part of the state; K changes in place */
	return width_of(a) == width_of(b);
}

void resil_shed_carry(void *nst, const struct resil_shed_conf *nc, const void *ost,
		      const struct resil_shed_conf *oc, int64_t now)
{
	const struct resil_shed_state *o = ost;
	struct resil_shed_state *s = nst;

	/* Counts of buckets of another width mean nothing; start a fresh
	 * window but keep publishing the last probability until the first
	 * boundary of the new one. */
	st_relaxed(&s->p32, ld_relaxed(&o->p32));
	st_relaxed(&s->shed, ld_relaxed(&o->shed));
}

double resil_shed_probability(const void *st)
{
	const struct resil_shed_state *s = st;

	return (double)ld_relaxed(&((struct resil_shed_state *)s)->p32) / 4294967296.0;
}

static uint32_t compute_p32(int64_t req, int64_t acc, uint32_t k_milli)
{
	double num, p;

	if (req < 0)
		req = 0;
	if (acc < 0)
		acc = 0;
	num = (double)req - (double)k_milli / 1000.0 * (double)acc;
	if (num <= 0)
		return 0;
	p = num / ((double)req + 1.0);
	if (p >= 1.0)
		return UINT32_MAX;
	return (uint32_t)(p * 4294967296.0);
}

/* Move the epoch to bucket nb (> e): zero ahead, CAS, publish p. */
static void rotate(const struct resil_shed_conf *c, struct resil_shed_state *s, uint64_t e,
		   uint64_t nb)
{
	uint64_t j, last = nb + 1, first = e + 2;
	int64_t req = 0, acc = 0;
	int i;

	/* Slots of buckets e+2 .. nb+1 hold buckets that left the window (or
	 * are about to): nobody writes them while the epoch is e. */
	if (last - first + 1 > RESIL_SHED_SLOTS)
		first = last + 1 - RESIL_SHED_SLOTS;
	for (j = first; j <= last; j++) {
		st_relaxed(&s->b[j & SHED_MASK].requests, 0);
		st_relaxed(&s->b[j & SHED_MASK].accepts, 0);
	}
	/* crash window: zeroed, epoch not moved; the next caller redoes it */
	if (!cas_acq_rel(&s->epoch, &e, nb))
		return; /* someone else rotated; they publish */
	/* crash window: epoch moved, p one bucket old until the next one */
	/* saturating: the counts are any client's to write */
	for (i = 0; i < RESIL_SHED_SLOTS; i++) {
		if (__builtin_add_overflow(req, ld_relaxed(&s->b[i].requests), &req))
			req = INT64_MAX;
		if (__builtin_add_overflow(acc, ld_relaxed(&s->b[i].accepts), &acc))
			acc = INT64_MAX;
	}
	st_relaxed(&s->window_requests, (uint64_t)(req > 0 ? req : 0));
	st_relaxed(&s->window_accepts, (uint64_t)(acc > 0 ? acc : 0));
	st_release(&s->p32, compute_p32(req, acc, c->k_milli));
	faa_relaxed(&s->rotations, 1);
}

/* current()'s slow path: t is past the bucket's end by the block's
 * width. Whether to rotate, and where to, is decided with the
 * configuration's width (width_of), never the block's copy: any client
 * can write that one, and 0 would be a SIGFPE in every process that
 * rotates. */
static __attribute__((noinline)) uint64_t
current_slow(const struct resil_shed_conf *c, struct resil_shed_state *s, uint64_t e, uint64_t ut)
{
	uint64_t w = (uint64_t)width_of(c);

	if (ut < (e + 1) * w)
		return e; /* a wrong copy of the width: the daemon repairs it */
	rotate(c, s, e, ut / w);
	return ld_acquire(&s->epoch);
}

/* The current bucket at time t, rotating when t is past it. The hot test
 * multiplies by the block's copy of the width (one load on the epoch's
 * line, no division): whatever a client writes there, a multiplication
 * cannot fault, and unsigned arithmetic cannot overflow; a wrong copy
 * only sends callers to current_slow (0, small) or keeps the window from
 * rotating until the daemon's tick repairs it (large: the fleet's own
 * decisions, which any client may spoil anyway). An epoch a client
 * writes wraps harmlessly too (one whose end wraps rotates back to t's
 * bucket; one merely far ahead is healed by the daemon's maintain). */
static inline uint64_t current(const struct resil_shed_conf *c, struct resil_shed_state *s,
			       int64_t t)
{
	uint64_t e = ld_acquire(&s->epoch);
	uint64_t ut = t > 0 ? (uint64_t)t : 0;

	if (RESIL_LIKELY(ut < (e + 1) * (uint64_t)ld_relaxed(&s->width_ns)))
		return e; /* also when time appears to go backwards */
	return current_slow(c, s, e, ut);
}

static inline int64_t shed_now(struct resil_ctx *x)
{
	return x->now ? x->now : resil_clock_now_coarse(&x->clock);
}

int resil_shed_acquire(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
		       struct resil_permit_priv *pm)
{
	struct resil_shed_state *s = st;
	uint64_t e = current(c, s, shed_now(x));
	uint32_t p = ld_relaxed(&s->p32);

	faa_relaxed(&s->b[e & SHED_MASK].requests, 1);
	if (RESIL_UNLIKELY(p != 0) && (uint32_t)(resil_random_next(&x->random) >> 32) < p) {
		faa_relaxed(&s->shed, 1);
		return RESIL_REJECT_SHED;
	}
	pm->flags |= RESIL_PERMIT_SHED;
	return 0;
}

/* Take a request back out (undo, IGNORED): from the current bucket, which
 * is the one it was counted in unless a boundary passed in between. */
static void uncount(struct resil_shed_state *s)
{
	uint64_t e = ld_acquire(&s->epoch);

	faa_relaxed(&s->b[e & SHED_MASK].requests, -1);
}

void resil_shed_undo(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
		     struct resil_permit_priv *pm)
{
	if (!(pm->flags & RESIL_PERMIT_SHED))
		return;
	pm->flags &= ~RESIL_PERMIT_SHED;
	uncount(st);
}

void resil_shed_release(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
			struct resil_permit_priv *pm, int outcome)
{
	struct resil_shed_state *s = st;
	uint64_t e;

	if (!(pm->flags & RESIL_PERMIT_SHED))
		return;
	pm->flags &= ~RESIL_PERMIT_SHED;
	switch (outcome) {
	case RESIL_SUCCESS:
		e = current(c, s, shed_now(x));
		faa_relaxed(&s->b[e & SHED_MASK].accepts, 1);
		break;
	case RESIL_IGNORED:
		uncount(s);
		break;
	default: /* FAILURE: a request the dependency did not accept */
		break;
	}
}

void resil_shed_maintain(struct resil_ctx *x, const struct resil_shed_conf *c, void *st)
{
	struct resil_shed_state *s = st;
	int64_t now = resil_ctx_now(x);
	uint64_t e = ld_acquire(&s->epoch);

	/* the daemon's checks: the observers' copy of the width; an epoch
	 * more than a whole ring ahead of the daemon's clock (the fleet
	 * shares that clock: no honest process is this far ahead) would
	 * freeze the window: rotate back to now's bucket */
	uint64_t nb = (uint64_t)(now > 0 ? now : 0) / (uint64_t)width_of(c);

	if (ld_relaxed(&s->width_ns) != width_of(c)) {
		st_relaxed(&s->width_ns, width_of(c));
		resil_repaired(x, RESIL_W_SHED_WIDTH);
	}
	if (e > nb + RESIL_SHED_SLOTS) {
		rotate(c, s, e, nb);
		resil_repaired(x, RESIL_W_SHED_EPOCH);
	}
	/* idle policies: rotate so observers (and the next caller) see the
	 * probability of the window as it is now */
	current(c, st, now);
}

void resil_shed_reclaim(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
			uint32_t dead_client, struct resil_reclaim_counts *counts)
{
	/* nothing is held per client */
}

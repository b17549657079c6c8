/* SPDX-License-Identifier: MIT */
/*
 * shed.h - load shedder: SRE client-side adaptive throttling.
 *
 * The component interface is described in decision.h.
 */
#ifndef RESIL_SHM_SHED_H
#define RESIL_SHM_SHED_H

#include "decision.h"

/* Ring of time buckets: the window is RESIL_SHED_BUCKETS buckets, plus one
 * slot that is zeroed ahead of use. */
#define RESIL_SHED_BUCKETS 15
#define RESIL_SHED_SLOTS   16 /* RESIL_SHED_BUCKETS + 1, a power of two */

struct resil_shed_bucket {
	RESIL_A8 rai64 requests; /* every call that reached the shedder, rejected or not */
	RESIL_A8 rai64 accepts;	 /* calls the dependency accepted (outcome SUCCESS) */
};

/*
 * State block. Lines:
 *   0  published, read by every acquire, written once per bucket by the
 *      process that crosses the boundary: p32 and epoch; width_ns is
 *      written at init and by the daemon's repair (relaxed: a copy of
 *      the configuration's, read as a multiplier, never a divisor);
 *   1-2  the bucket ring, fetch_add by every acquire and release;
 *   3  statistics.
 */
struct resil_shed_state {
	alignas(RESIL_HOT_ALIGN) ra32 p32; /* reject probability x 2^32 (fixed point) */
	uint32_t reserved32;
	RESIL_A8 ra64 epoch;	   /* current bucket number: floor(time / width_ns) */
	RESIL_A8 rai64 width_ns;   /* shed.window / RESIL_SHED_BUCKETS */

	alignas(RESIL_HOT_ALIGN) struct resil_shed_bucket b[RESIL_SHED_SLOTS];

	alignas(RESIL_HOT_ALIGN) RESIL_A8 ra64 shed; /* calls rejected here */
	RESIL_A8 ra64 rotations;		     /* bucket boundaries crossed */
	RESIL_A8 ra64 window_requests;		     /* the sums p was computed from (observers) */
	RESIL_A8 ra64 window_accepts;
};
RESIL_STATIC_ASSERT(offsetof(struct resil_shed_state, epoch) == 8, "shed epoch");
RESIL_STATIC_ASSERT(offsetof(struct resil_shed_state, width_ns) == 16, "shed width");
RESIL_STATIC_ASSERT(offsetof(struct resil_shed_state, b) == 128, "shed ring");
RESIL_STATIC_ASSERT(offsetof(struct resil_shed_state, shed) == 384, "shed stats");
RESIL_STATIC_ASSERT(sizeof(struct resil_shed_state) == 512, "shed state size");

/* The published reject probability, 0..1. */
double resil_shed_probability(const void *st);

void resil_shed_conf_defaults(struct resil_shed_conf *c);
/* Its keys (conf.c dispatches shed.*): 0, -ENOENT for a key that is not
 * one of them, -EINVAL with a message in err. */
int resil_shed_conf_set(struct resil_shed_conf *c, const char *key, const char *value, char *err,
			size_t errlen);
size_t resil_shed_conf_format(const struct resil_shed_conf *c, char *buf, size_t len);

uint64_t resil_shed_state_size(const struct resil_shed_conf *c);
void resil_shed_state_init(void *st, const struct resil_shed_conf *c, int64_t now);
bool resil_shed_same_shape(const struct resil_shed_conf *a, const struct resil_shed_conf *b);
void resil_shed_carry(void *nst, const struct resil_shed_conf *nc, const void *ost,
		      const struct resil_shed_conf *oc, int64_t now);
int resil_shed_acquire(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
		       struct resil_permit_priv *pm);
void resil_shed_undo(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
		     struct resil_permit_priv *pm);
void resil_shed_release(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
			struct resil_permit_priv *pm, int outcome);
void resil_shed_maintain(struct resil_ctx *x, const struct resil_shed_conf *c, void *st);
/* The block's copy of the bucket width is the configuration's (adoption:
 * a block whose is not is reset, see policy.c). */
bool resil_shed_layout_ok(const struct resil_shed_conf *c, const void *st);
void resil_shed_reclaim(struct resil_ctx *x, const struct resil_shed_conf *c, void *st,
			uint32_t dead_client, struct resil_reclaim_counts *counts);

#endif

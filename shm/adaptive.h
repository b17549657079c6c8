/* SPDX-License-Identifier: MIT */
/*
 * adaptive.h - adaptive concurrency limit: Vegas, Gradient2, AIMD over crash-exact permits.
 *
 * The component interface is described in decision.h.
 */
#ifndef RESIL_SHM_ADAPTIVE_H
#define RESIL_SHM_ADAPTIVE_H

#include "decision.h"
#include "bulkhead.h" /* the permit pool */

/* A window with fewer RTT samples carries no decision (as Netflix's
 * WindowedLimit: windowSize 10). */
#define RESIL_ADAPTIVE_MIN_SAMPLES 10
/* Concurrency while the min RTT is re-measured (Envoy min_concurrency). */
#define RESIL_ADAPTIVE_PROBE_LIMIT 3

enum resil_adaptive_phase {
	RESIL_ADAPTIVE_NORMAL = 0,
	RESIL_ADAPTIVE_PROBE_DRAIN = 1,	  /* limit lowered; calls from before drain */
	RESIL_ADAPTIVE_PROBE_MEASURE = 2, /* this window's RTTs are the no-load RTT */
};

/*
 * State block. Lines:
 *   0  inflight: the pool's hint, every acquirer and releaser;
 *   1  the window's samples, every releaser (fetch_add, CAS-min) and
 *      acquirers that see a new in-flight maximum (CAS-max);
 *   2  published per window: limit (read relaxed by every acquirer), epoch
 *      (window start; low bit = a recomputation is running) read by every
 *      releaser; written by the recomputer;
 *   3  the algorithm's memory, read and written by the recomputer only
 *      (one at a time: the epoch's low bit), geometry, daemon words;
 *   4+ the permit slots.
 */
struct resil_adaptive_state {
	alignas(RESIL_HOT_ALIGN) ra32 inflight;

	alignas(RESIL_HOT_ALIGN) RESIL_A8 ra64 rtt_sum; /* ns */
	RESIL_A8 ra64 rtt_min;				/* ns; UINT64_MAX: none */
	ra32 rtt_count;
	ra32 drops;	   /* FAILURE outcomes in the window */
	ra32 max_inflight; /* most in flight seen by an acquirer */

	alignas(RESIL_HOT_ALIGN) ra32 limit;
	ra32 phase; /* enum resil_adaptive_phase */
	RESIL_A8 ra64 epoch;

	alignas(RESIL_HOT_ALIGN) RESIL_A8 ra64 limit_milli; /* the estimate, fixed point /1000 */
	RESIL_A8 ra64 noload_ns;			    /* no-load RTT (Vegas), 0: unknown */
	RESIL_A8 ra64 long_rtt_x1k; /* long-term RTT EWMA x 1024 (Gradient2) */
	RESIL_A8 ra64 saved_milli;  /* the estimate while a probe runs */
	RESIL_A8 ra64 probe_at;	    /* next probe (ns), 0: not scheduled */
	RESIL_A8 ra64 windows;	    /* windows decided (statistics) */
	RESIL_A8 ra64 last_rtt_ns;  /* last window's average RTT (observers) */
	ra32 long_n;		    /* samples in the EWMA, up to its warmup */
	ra32 probe_windows;	    /* windows spent measuring */
	ra32 probes;		    /* probes completed (statistics) */
	uint32_t nslots;	    /* = the effective adaptive.max at init */
	uint32_t shift;
	uint32_t slots_off;
	int32_t prev_excess; /* daemon only */
	uint32_t reserved32;
	RESIL_A8 ra64 reclaimed; /* permits taken back (daemon) */
};
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_state, rtt_sum) == 128, "adaptive line 1");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_state, limit) == 256, "adaptive line 2");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_state, epoch) == 264, "adaptive epoch");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_state, limit_milli) == 384, "adaptive line 3");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_state, reclaimed) == 472, "adaptive stats");
RESIL_STATIC_ASSERT(sizeof(struct resil_adaptive_state) == 512, "adaptive state size");

uint32_t resil_adaptive_max(const struct resil_adaptive_conf *c);

/* The pool, from the configuration: never from the block's geometry words,
 * which clients can write (the daemon walks these slots). */
static inline struct resil_pool resil_adaptive_pool(struct resil_adaptive_state *s,
						    const struct resil_adaptive_conf *c)
{
	uint32_t n = resil_adaptive_max(c);
	struct resil_pool p = {
	    .count = &s->inflight,
	    .slots = (ra32 *)(s + 1),
	    .n = n,
	    .shift = resil_pool_shift(n),
	};
	return p;
}

/* Effective bounds: 0 in the configuration means the algorithm's default
 * (Netflix concurrency-limits: Vegas initial 20 max 1000; Gradient2
 * initial 20 min 20 max 200; AIMD initial 20 min 20 max 200). */
uint32_t resil_adaptive_min(const struct resil_adaptive_conf *c);
uint32_t resil_adaptive_initial(const struct resil_adaptive_conf *c);
/* Gradient2's RTT tolerance in thousandths: adaptive.tolerance, 1500 when
 * not given (Netflix's rttTolerance), within 1000..10000. */
uint32_t resil_adaptive_tolerance_milli(const struct resil_adaptive_conf *c);
/* The published limit and the permits held right now (a scan). */
uint32_t resil_adaptive_limit(const void *st);
uint32_t resil_adaptive_held(const struct resil_adaptive_conf *c, const void *st);

void resil_adaptive_conf_defaults(struct resil_adaptive_conf *c);
/* Its keys (conf.c dispatches adaptive.*): 0, -ENOENT for a key that is not
 * one of them, -EINVAL with a message in err. */
int resil_adaptive_conf_set(struct resil_adaptive_conf *c, const char *key, const char *value,
			    char *err, size_t errlen);
size_t resil_adaptive_conf_format(const struct resil_adaptive_conf *c, char *buf, size_t len);

uint64_t resil_adaptive_state_size(const struct resil_adaptive_conf *c);
void resil_adaptive_state_init(void *st, const struct resil_adaptive_conf *c, int64_t now);
bool resil_adaptive_same_shape(const struct resil_adaptive_conf *a,
			       const struct resil_adaptive_conf *b);
void resil_adaptive_carry(void *nst, const struct resil_adaptive_conf *nc, const void *ost,
			  const struct resil_adaptive_conf *oc, int64_t now);
int resil_adaptive_acquire(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			   struct resil_permit_priv *pm);
void resil_adaptive_undo(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			 struct resil_permit_priv *pm);
void resil_adaptive_release(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			    struct resil_permit_priv *pm, int outcome);
void resil_adaptive_maintain(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st);
/* The block's geometry copies are the configuration's (adoption:
 * a block that is not is reset, see policy.c). */
bool resil_adaptive_layout_ok(const struct resil_adaptive_conf *c, const void *st);
uint32_t resil_adaptive_sweep(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			      resil_stray_fn stray, void *ctx);
void resil_adaptive_holders(const struct resil_adaptive_conf *c, const void *st, resil_holder_fn fn,
			    void *ctx);
void resil_adaptive_reclaim(struct resil_ctx *x, const struct resil_adaptive_conf *c, void *st,
			    uint32_t dead_client, struct resil_reclaim_counts *counts);

#endif

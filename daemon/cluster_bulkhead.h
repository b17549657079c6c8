/* SPDX-License-Identifier: MIT */
/*
 * cluster_bulkhead.h - policy.scope = global for bulkheads: the fleet's
 * bulkhead.max leased to hosts as slots (cluster_bulkhead.c opens with
 * the design).
 *
 * cluster.c owns the exchange; this module says what to send for a
 * policy, parses what comes back and applies it to the segment. The loop
 * calls resild_cbh_tick; the exchange thread resild_cbh_command and
 * resild_cbh_parse.
 */
#ifndef RESILD_CLUSTER_BULKHEAD_H
#define RESILD_CLUSTER_BULKHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster_budget.h"

struct resil_seg;
struct resil_rec;
struct redisReply;

/* The script, loaded by cluster.c on every connection. */
extern const char resild_cbh_lua[];

/* One policy's request (loop -> thread). */
struct resild_cbh_req {
	bool on;	  /* a global bulkhead: one BULKHEAD call */
	uint32_t max;	  /* bulkhead.max, the fleet's */
	uint32_t demand;  /* calls in flight (the peak since the last post) + rejected */
	uint32_t used;	  /* slots this host's clients may hold now (not parked) */
	uint32_t fb;	  /* the slots its clients fall back on, for Redis to hold */
	uint32_t base;	  /* ... and past the hold (max / N), for Redis to keep */
	bool keeps;	  /* --cluster-fallback share: Redis holds the share it grants */
	uint64_t applied; /* the lease id in the segment */
};

/* The answer (thread -> loop). */
struct resild_cbh_ans {
	bool fresh;
	uint32_t share; /* slots */
	uint64_t id;
	uint32_t hosts;
	int64_t expiry_ns; /* local CLOCK_MONOTONIC */
	int64_t sent_ns;   /* when its request left */
	uint32_t base;	   /* the max / N that request carried */
};

/* What the loop keeps per policy. */
struct resild_cbh_slot {
	uint64_t applied; /* lease id applied (0: none yet) */
	uint32_t share;
	int64_t expiry_ns;
	uint32_t hosts;
	uint32_t parked; /* slots parked at the last tick */
	uint32_t busy;	 /* slots held by calls at the last tick (held included) */
	uint32_t held;	 /* of which in segments a restart moved away from */
	uint32_t peak;	 /* the most held since the last post */
	uint32_t demand; /* the last demand sent */
	uint64_t rej;	 /* RESIL_STAT_REJ_FULL at the last post */
	bool in_lease;
	uint64_t fallbacks;
	uint64_t lease_changes;
	int64_t ok_ns;	   /* the last answered request's send (0: none this run) */
	int fb_tier;	   /* cluster_priv.h FB_* */
	uint32_t fb_slots; /* the slots the fallback allows */
	uint32_t base;	   /* the max / N of the last request filled */
	uint32_t kept;	   /* the max / N Redis keeps for this host past the hold
			    * (as cl_slot.kept) */
};

/* True when rec has a bulkhead the cluster leases. */
bool resild_cbh_wants(const struct resil_rec *rec);

/* The loop, for a global bulkhead at each tick: apply the answer in a
 * (park the slots the host may not use, publish the lease's end and the
 * fallback), then (post) fill q. *fleet_seen: raised to the fleet size
 * the policy's state holds. held: the permits the host's calls still hold
 * in segments a restart moved away from (resild_seg_move_held). */
struct resild_cluster;
void resild_cbh_tick(struct resild_cluster *c, const struct resil_seg *s,
		     const struct resil_rec *rec, struct resild_cbh_slot *cs,
		     const struct resild_cbh_ans *a, struct resild_cbh_req *q, int64_t now,
		     uint32_t *fleet_seen, uint32_t held, bool post);

/* The thread: q's BULKHEAD call for policy name into cmd (argv in its
 * bufs). lease_ms: the lease's length; hold_ms: --cluster-fallback-for;
 * hosts: --cluster-hosts (0: none); keep_ms: how long the fleet keeps a
 * silent host's max / N. */
void resild_cbh_command(const struct resild_cbh_req *q, const char *name, const char *prefix,
			const char *host, const char *sha, int64_t lease_ms, int64_t hold_ms,
			uint32_t hosts, int64_t keep_ms, struct resild_cb_cmd *cmd);
/* The thread: a reply into a; false: garbage. */
bool resild_cbh_parse(const struct redisReply *r, struct resild_cbh_ans *a);

/* resil_cluster_bulkhead_* samples of one policy into k, and their
 * families. */
void resild_cbh_metrics(const struct resild_cbh_slot *cs, const char *name, int64_t now,
			struct resil_msink *k);
void resild_cbh_metrics_help(struct resil_msink *k);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * cluster_budget.h - policy.scope = global for retry budgets, and the
 * check that every host sharing a policy through Redis runs the same
 * configuration of it (design: docs/internals/cluster.md).
 *
 * cluster.c owns the exchange (its thread, the connection, the pipeline);
 * this module says what to send for a policy, parses what comes back and
 * applies it to the segment. The loop calls resild_cb_tick; the exchange
 * thread calls resild_cb_append and the parsers.
 */
#ifndef RESILD_CLUSTER_BUDGET_H
#define RESILD_CLUSTER_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "metrics.h"

struct resil_seg;
struct resil_rec;

#define RESILD_CB_HOST_MAX 128

/* The scripts, loaded by cluster.c on every connection. */
extern const char resild_cb_budget_lua[];
extern const char resild_cb_conf_lua[];

/* One policy's request (loop -> thread), beside cluster.c's. */
struct resild_cb_req {
	bool budget; /* a global grpc, aws or ratio budget: one BUDGET call */
	bool tokens; /* grpc or aws (else ratio) */
	bool conf;   /* this round checks the configuration: one CONF call */
	uint64_t seq;
	int64_t max_milli;
	int64_t sum_milli;   /* this host's net token change since its run began */
	int64_t acked_milli; /* the sum Redis last answered for */
	int64_t seen_milli;  /* the local tokens when sum_milli was taken */
	uint64_t req, rty;   /* ratio: this host's window */
	int64_t live_ms;     /* reports younger than this count */
	int64_t hold_ms;     /* tokens: how long the fleet keeps this host's slice */
	int64_t thr_milli;   /* tokens: the level no retry passes below */
	int64_t one_milli;   /* tokens: a retry's cost */
	uint32_t known;	     /* tokens: the fleet's size this host knows (0: none) */
	int64_t conf_live_ms;
	char run[40]; /* this daemon's run and the policy's generation */
	char fp[20];  /* the configuration's fingerprint, hex */
};

/* The answer (thread -> loop). */
struct resild_cb_ans {
	bool fresh;	 /* a BUDGET answer */
	bool conf_fresh; /* a CONF answer */
	uint64_t seq;	 /* echoed from the request */
	int64_t seen_milli, sum_milli;
	int64_t tokens_milli;
	uint32_t hosts;	     /* tokens: hosts live or holding a slice */
	int64_t slice_milli; /* tokens: what this host may spend */
	uint64_t others_req, others_rty;
	uint32_t conflicts; /* live hosts with another configuration */
	char other_host[RESILD_CB_HOST_MAX];
};

/* What the loop keeps per policy. */
struct resild_cb_slot {
	bool started;  /* base holds a reading */
	bool inflight; /* a token report is out, not yet answered */
	bool detached; /* on a slice of a full bucket: no answer, or past the last one's end */
	int64_t until_ns; /* the end of the slice in the segment (0: none) */
	uint64_t seq;
	int64_t posted_ns;
	int64_t base_milli; /* local tokens already counted in sum_milli */
	int64_t sum_milli;
	int64_t acked_milli;
	int64_t fleet_milli; /* the last fleet value mirrored */
	int64_t slice_milli; /* what this host may spend of it */
	uint32_t hosts;	     /* among which it was sliced */
	uint64_t others_req, others_rty;
	uint64_t syncs; /* answers mirrored */
	uint64_t fp;
	uint32_t conf_round;
	uint32_t conflicts;
	char other_host[RESILD_CB_HOST_MAX];
};

/* What the exchange tells a tick (cluster.c). */
struct resild_cb_env {
	int64_t now;
	int64_t interval_ns; /* --cluster-interval */
	int64_t lease_ns;    /* a lease's length now */
	int64_t hold_ns;     /* a heartbeat's reach: a tick moves it, a dead daemon's stops */
	int64_t fallback_for_ns;
	int fallback;	/* RESILD_FALLBACK_* */
	uint32_t hosts; /* the fleet's size this host knows (0: none) */
	bool strict;	/* it is --cluster-hosts: the fleet keeps a part for every host */
	bool post;	/* fill the request */
};

/* The loop, for a global policy at each tick: apply the answers in a,
 * then (post) fill q. */
void resild_cb_tick(const struct resil_seg *s, const struct resil_rec *rec,
		    struct resild_cb_slot *cs, const struct resild_cb_ans *a,
		    struct resild_cb_req *q, const struct resild_cb_env *e);

/* True when rec has a retry budget of its own to share. */
bool resild_cb_wants_budget(const struct resil_rec *rec);

/*
 * The thread: the commands of q for policy name, as argv arrays (each at
 * most RESILD_CB_ARGC words, in bufs the caller keeps until the commands
 * are sent). Returns how many (0..2): [0] the BUDGET call if q->budget,
 * then the CONF call if q->conf.
 */
#define RESILD_CB_ARGC	 16
#define RESILD_CB_ARGLEN 160
struct resild_cb_cmd {
	int argc;
	const char *argv[RESILD_CB_ARGC];
	char buf[RESILD_CB_ARGC][RESILD_CB_ARGLEN];
};
int resild_cb_commands(const struct resild_cb_req *q, const char *name, const char *prefix,
		       const char *host, const char *budget_sha, const char *conf_sha,
		       struct resild_cb_cmd cmd[2]);

/* The thread: a reply into a; false: garbage. */
struct redisReply;
bool resild_cb_parse_budget(const struct redisReply *r, const struct resild_cb_req *q,
			    struct resild_cb_ans *a);
bool resild_cb_parse_conf(const struct redisReply *r, struct resild_cb_ans *a);

/* resil_cluster_* samples of one policy (its name as it is) into k. */
void resild_cb_metrics(const struct resil_rec *rec, const struct resild_cb_slot *cs,
		       const char *name, struct resil_msink *k);
/* Their families. */
void resild_cb_metrics_help(struct resil_msink *k);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * cluster.h - policy.scope = global: the daemons of a fleet of hosts share
 * limits through Redis (cluster.c opens with the design).
 *
 * Every call is made from the loop's thread. None of them waits on Redis:
 * the exchange runs in a thread of its own, and the loop only swaps
 * requests and answers with it under a mutex held for a copy.
 */
#ifndef RESILD_CLUSTER_H
#define RESILD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct resild;

enum resild_cluster_fallback {
	RESILD_FALLBACK_SHARE = 0, /* the global rate divided by the hosts last seen */
	RESILD_FALLBACK_LOCAL = 1, /* the global rate on this host alone */
	RESILD_FALLBACK_REJECT = 2,
};

#define RESILD_CLUSTER_INTERVAL_NS     (100 * RESIL_NS_PER_MS)
#define RESILD_CLUSTER_FALLBACK_FOR_NS (60 * RESIL_NS_PER_S)
#define RESILD_CLUSTER_HOSTS_MAX       4096

/* Parse "share", "local", "reject": 0 or -EINVAL. */
int resild_cluster_parse_fallback(const char *s, int *ret);
/* Check the URL, read the password file and the host id, start the
 * exchange thread (nothing when no --cluster-redis). -EINVAL: a
 * configuration error, logged. */
int resild_cluster_init(struct resild *d);
/* The loop's tick: apply the answers of the last exchange to the
 * segments, then hand the thread this tick's demands. */
void resild_cluster_tick(struct resild *d);
/* An eventfd the exchange thread writes after each exchange (-1: no
 * cluster); the loop reads it and calls resild_cluster_woken, which
 * applies the answers without waiting for the next tick (and posts
 * nothing). */
int resild_cluster_wake_fd(const struct resild *d);
void resild_cluster_woken(struct resild *d);
void resild_cluster_fini(struct resild *d);
/* resil_cluster_* samples into k. */
struct resil_msink;
void resild_cluster_metrics(struct resild *d, struct resil_msink *k);

/* The lease script's text (bench/cluster_bench.c loads it to measure
 * what one Redis core serves). */
const char *resild_cluster_lease_lua(void);

/* What `resilctl status` says of the exchange. */
struct resild_cluster_info {
	const char *redis, *name, *host, *fallback;
	char reached[280]; /* Redis Cluster: the node reached, the seed out of reach ("": the seed)
			    */
	int64_t interval_ns;
	bool connected;
	char last_error[256];	  /* "" while connected */
	int64_t last_exchange_ns; /* since the last exchange that answered every policy; -1 never */
	uint64_t exchanges, script_calls, errors;
	uint32_t hosts_seen; /* the most hosts a lease counted */
	const char *run;     /* this run (the segments' epoch, hex) */
	uint32_t dup_runs;   /* other daemons running under this host id now */
	uint32_t hosts_live; /* runs that reported within three intervals */
	uint32_t hosts_expected; /* --cluster-hosts (0: none) */
	int64_t fallback_for_ns;
	int64_t rtt_ns;		    /* the longest round trip of the last rounds */
	int64_t lease_ns;	    /* a lease's length now */
	bool rtt_too_long;	    /* leases cannot cover it */
	uint64_t expired_connected; /* leases that ran out while connected */
};
/* What `resilctl show` and status say of one global policy. */
struct resild_cluster_policy {
	bool limit;
	double share;	  /* per second leased here (0: none yet) */
	int64_t lease_ns; /* until the lease expires (<= 0: expired) */
	double demand;
	uint32_t hosts;
	bool breaker;
	int fleet; /* RESIL_FLEET_*: closed, open, this host probes for the fleet */
	uint64_t fleet_open;
	int64_t fleet_calls;
	uint32_t conflicts;	 /* live hosts with another configuration */
	char conflict_host[128]; /* one of them (RESILD_CB_HOST_MAX) */
	bool bulkhead;		 /* a global bulkhead (cluster_bulkhead.c) */
	uint32_t slots;		 /* of the fleet's bulkhead.max leased here */
	uint32_t max;		 /* bulkhead.max */
	uint32_t parked;	 /* slots parked here (not this host's to use) */
	int64_t slots_lease_ns;	 /* until that lease expires (<= 0: expired) */
	uint32_t slots_hosts;
	char error[160]; /* its scripts' last error ("": they answered) */
	uint64_t errors; /* its scripts' errors so far */
	bool keyed;	 /* a global keyed limiter (cluster_keyed.c) */
	uint64_t keyed_published, keyed_charged, keyed_owing;
	int fallback;		 /* FB_* of cluster_priv.h: what its clients fall back on */
	double fallback_share;	 /* per second (limit) */
	uint32_t fallback_slots; /* (bulkhead) */
};
/* What a global policy's clients fall back on, in words ("held share
 * 100.0/s until ...", "REJECT: no fleet size known", ...). */
void resild_cluster_fallback_text(const struct resild_cluster_policy *p, char *buf, size_t len);
/* 0, or -ENOENT when the daemon runs without --cluster-redis. */
int resild_cluster_info(struct resild *d, struct resild_cluster_info *out);
/* 0, or -ENOENT when the policy in slot (of that generation) is not a
 * global policy the exchange follows. */
int resild_cluster_policy_info(struct resild *d, uint32_t slot, uint32_t gen,
			       struct resild_cluster_policy *out);

#endif

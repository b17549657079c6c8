/* SPDX-License-Identifier: MIT */
/*
 * cluster_priv.h - what cluster.c (the design, the connection, the
 * exchange's scripts, the loop's side) and cluster_rc.c (Redis Cluster:
 * the slot map, the redirections, the exchange round and the thread)
 * share: the request and answer words, the daemon's cluster state and
 * the helpers both halves call. Private to the cluster's files
 * (cluster_bulkhead.c takes the fallback's tiers from here too).
 */
#ifndef RESILD_CLUSTER_PRIV_H
#define RESILD_CLUSTER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "resil.h"

#define LEASE_INTERVALS		3
#define SAMPLES			4 /* demand samples per interval (early calls) */
#define EARLY_ASKS		4 /* early calls while waiting for a share, per rise */
#define BACKOFF_MAX_NS		RESIL_NS_PER_S /* a Redis back is used within a second */
#define RTT_WINDOW		16 /* rounds whose longest round trip sizes the leases */
#define HOST_MAX		128
#define URL_MAX			512
#define NODES_MAX		32    /* Redis Cluster primaries this host talks to */
#define SLOTS			16384 /* Redis Cluster hash slots */
#define PEND_MAX		4     /* commands per policy in one round */
#define REDIRECTS_MAX		3
#define SENTINELS_MAX		8
#define SENTINEL_BACKOFF_MAX_NS RESIL_NS_PER_S /* a failover is a few seconds */
#define SENTINEL_RECHECK_NS	RESIL_NS_PER_S /* the sentinels asked again while connected */

/* One policy's request (loop -> thread) and answer (thread -> loop). */
struct xreq {
	bool active;
	uint32_t gen;
	char name[RESIL_NAME_MAX];
	bool limit, breaker;
	double rate;	  /* per second */
	double demand;	  /* per second */
	uint64_t applied; /* the lease id in the segment */
	bool ack;	  /* only acknowledge `applied` (an early call) */
	double fb;	  /* the share its clients fall back on, for Redis to hold */
	double base;	  /* ... and past the hold (rate / N), for Redis to keep */
	/* breaker: this host's time window, the thresholds */
	int64_t calls, failures, slow;
	int64_t window_ms, wait_ms;
	uint32_t min_calls, failure_bp, slow_bp;
	/* the fleet's half-open */
	uint64_t sync;	    /* the last fleet open seen closed here */
	bool want;	    /* callers rejected by the open since the last post */
	uint64_t res_gen;   /* this host's round: gen, number, */
	uint64_t res_round; /* and outcome (1 closed, 2 failed, 0 none yet) */
	int res;
	struct resild_cb_req cb;  /* retry budget, configuration check */
	struct resild_cbh_req bh; /* bulkhead */
	struct resild_ck_req ck;  /* keyed limiter: this host's admissions */
};
struct xans {
	bool fresh; /* not yet taken by the loop */
	uint32_t gen;
	uint64_t id;
	double share;
	int64_t expiry_ns; /* local CLOCK_MONOTONIC */
	int64_t sent_ns;   /* when its request left (local CLOCK_MONOTONIC) */
	double base;	   /* the rate / N that request carried (xreq.base) */
	uint32_t hosts;
	int tell;      /* LEASE_LUA's: 2 ask again soon, 1 acknowledge at once */
	bool bk_fresh; /* a breaker answer */
	bool bk_open;  /* the fleet's breaker is in an open it decided */
	uint64_t bk_gen;
	int64_t bk_calls;
	uint32_t bk_rate_bp;
	bool bk_probe; /* this host probes for the fleet in round bk_round */
	uint64_t bk_round;
	int64_t bk_until_ns; /* the answer holds until (local CLOCK_MONOTONIC) */
	struct resild_cb_ans cb;
	struct resild_cbh_ans bh;
	struct resild_ck_ans ck;
};

/* A Redis Cluster node learned from a redirection (the thread only). */
struct cl_node {
	char addr[256];
	int port;
	redisContext *rc; /* NULL: not connected yet */
};

/* A policy's script that failed (cluster_rc.c, parsed_for): the thread
 * writes it under the lock, status reads it. */
struct cl_perr {
	char text[160]; /* "": its scripts answered at the last round */
	uint64_t count;
};

/* A command sent in this round, kept formatted until its reply is read:
 * a redirection sends it again to the node Redis names. */
struct cl_pend {
	char *cmd;
	size_t len;
	redisContext *rc;
};

/* What the loop keeps per slot (its thread only). */
struct cl_slot {
	uint32_t gen;
	bool active;
	uint64_t calls;	  /* the policy's calls at the last tick */
	int64_t calls_ns; /* when they were read */
	double demand;
	uint64_t applied; /* lease id written into the segment */
	double share;
	int64_t expiry_ns;
	uint32_t hosts;
	int64_t ok_ns;	 /* the last answered request's send (0: none this run):
			  * Redis holds this host's share until ok_ns + fallback_for */
	int fb_tier;	 /* what the fallback is: FB_HELD, FB_BASE, FB_NONE */
	double fb_share; /* its rate per second */
	double base;	 /* the rate / N of the last request filled */
	double kept;	 /* the rate / N Redis keeps for this host past the hold,
			  * without --cluster-hosts: what its last answered
			  * request carried, or less if a later one carried less */
	bool in_lease;	 /* the last tick saw a live lease */
	bool ranout_said; /* a lease's running out said, not every lease live since */
	/* demand changes between posts (sampled every interval / SAMPLES) */
	uint64_t s_calls, s_rej; /* at the last sample */
	int64_t s_ns;
	double reported; /* the demand the last call sent */
	bool rise;	 /* the last sample saw calls rise and rejections start */
	bool ack_due;	 /* an early acknowledgement of a smaller share */
	bool waiting;	 /* the last answer: less than the fair share (tell 2) */
	int asks;	 /* early calls left while this host waits for its share */
	uint64_t early;	 /* early calls posted (demand rises, acknowledgements) */
	uint64_t fallbacks;
	uint64_t lease_changes;
	uint64_t bk_gen;    /* the fleet's last open mirrored here */
	uint64_t bk_trips;  /* fleet opens that opened this host's breaker */
	int64_t bk_calls;   /* the fleet's window at the last exchange */
	bool bk_open;	    /* the fleet is in open bk_gen */
	bool bk_probing;    /* this host probes for the fleet (round bk_round) */
	uint64_t bk_round;  /* the last round granted here */
	int bk_result;	    /* its outcome: 1 closed, 2 failed, 0 none yet */
	uint64_t bk_sync;   /* the last fleet open seen closed */
	int64_t bk_hold_ns; /* hold the host's OPEN until then (the last answer's validity) */
	uint64_t bk_rej;    /* callers rejected by the open, at the last post */
	uint64_t bk_rounds; /* rounds probed here for the fleet */
	uint64_t bk_closes; /* fleet closes that closed this host's breaker */
	struct resild_cb_slot cb;
	struct resild_cbh_slot bh;
	struct resild_ck_slot ck;
};

struct resild_cluster {
	/* settings (read-only once the thread runs) */
	char url[URL_MAX];
	char host[HOST_MAX];
	char run[17];		   /* the segments' run, hex: this run (cluster_host.c) */
	char ident[HOST_MAX + 18]; /* "<host>#<run>": this host to the scripts */
	char prefix[RESIL_NAME_MAX];
	char password[256];
	bool have_password;
	bool unix_sock;
	char addr[URL_MAX]; /* host name or socket path (sentinel: the primary
			     * found last, the thread only) */
	int port;
	int db;
	bool tls;		     /* rediss:// or --cluster-tls-ca */
	char tls_name[256];	     /* --cluster-tls-server-name ("": each node's host) */
	SSL_CTX *ssl;		     /* NULL: plain TCP */
	bool sentinel;		     /* sentinel:// */
	char master[RESIL_NAME_MAX]; /* the name the sentinels know the primary by */
	struct cl_node sentinels[SENTINELS_MAX];
	uint32_t nsentinels;
	int64_t sentinel_at; /* when the sentinels are asked again (the thread's) */
	int64_t interval_ns;
	int fallback;
	int64_t fallback_for_ns; /* --cluster-fallback-for */
	uint32_t hosts_expected; /* --cluster-hosts (0: learned) */
	uint32_t cap;		 /* slots */

	/* loop only */
	struct cl_slot *slots;
	int64_t last_post_ns;
	bool loop_connected;	    /* c->connected at this tick */
	uint64_t expired_connected; /* leases that ran out while connected */
	uint32_t fleet_known; /* the largest fleet size a policy's state holds */

	/* shared, under lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool kick;	 /* a new round of requests */
	bool kick_early; /* early requests in ereq */
	bool sampling;	 /* the loop wants a wake every interval / SAMPLES */
	int efd;	 /* eventfd: the thread's "answers ready", read by the loop */
	struct xreq *req;
	struct xreq *ereq; /* early lease calls: a demand rise, an acknowledgement */
	struct xans *ans;
	bool connected;
	char last_error[256];
	char reached[280];  /* Redis Cluster: the node connected to, the seed out of reach ("": the
			       seed) */
	int64_t last_ok_ns; /* the last exchange that answered every policy */
	uint64_t exchanges;
	uint64_t script_calls;
	uint64_t errors;
	uint32_t dup_runs;   /* other daemons running under this host id (cluster_host.c) */
	uint32_t hosts_live; /* runs that reported within three intervals */
	struct cl_perr *perr; /* per slot: its scripts' last error */
	char hosts_err[160];  /* the HOSTS call's last error ("": none) */
	uint64_t script_errors;
	int64_t rtt_ns;	     /* the longest round trip of the last RTT_WINDOW rounds */
	bool rtt_too_long;   /* leases cannot cover it within --cluster-fallback-for */
	_Atomic int64_t lease_len_ns; /* a lease's length now (the thread sets it) */

	/* thread only */
	pthread_t thread;
	bool started;
	redisContext *rc;
	char sha[48];
	char bk_sha[48];
	char cb_sha[48]; /* cluster_budget.c's scripts */
	char cf_sha[48];
	char bh_sha[48]; /* cluster_bulkhead.c's script */
	char ck_sha[48]; /* cluster_keyed.c's script */
	char hs_sha[48]; /* cluster_host.c's script */
	struct resild_ck_thr *ck_thr;
	struct xreq *work;
	uint64_t rnd;
	int64_t rtts[RTT_WINDOW]; /* the last rounds' round trips */
	uint32_t nrtt;
	/* Redis Cluster (the thread only): the nodes learned from MOVED and
	 * ASK, the slot map (node index + 1, 0: the seed connection), this
	 * round's commands in the order of their replies */
	struct cl_node nodes[NODES_MAX];
	uint32_t nnodes;
	uint8_t slot_node[SLOTS];
	redisContext *cur; /* where this policy's commands go */
	struct cl_pend *pend;
	uint32_t npend, rpend, pend_cap;
	uint64_t redirects;
};

/* What a host's fallback is (cl_slot.fb_tier, cluster.c "The fallback"). */
enum {
	FB_NONE = 0, /* reject: no fleet size known, nothing kept by the fleet
		      * for this host, --cluster-fallback reject */
	FB_HELD,     /* its last share, which Redis holds for it */
	FB_BASE,     /* rate / the fleet's size */
	FB_LOCAL,    /* --cluster-fallback local */
};

/* The fallback's words for one global limiter or bulkhead (cluster.c). */
struct cl_fallback {
	int tier;	  /* FB_* */
	uint32_t hosts;	  /* the fleet's size it divides by (0: none known) */
	int64_t until_ns; /* the tier's end (0: none) */
	bool after_base;  /* past it: rate / N (--cluster-hosts), else nothing */
};
void cl_fallback_of(struct resild_cluster *c, int64_t ok_ns, uint32_t policy_hosts, bool kept,
		    int64_t now, struct cl_fallback *f);
/* How long past its last report the fleet keeps rate / N for a silent
 * host that reported one (REMEMBER_HOLDS x --cluster-fallback-for). */
#define REMEMBER_HOLDS 5
int64_t remember_ns(const struct resild_cluster *c);
/* Log f's tier when it is not *said (then *said = it). */
void cl_fallback_said(struct resild_cluster *c, const char *name, const char *what, int *said,
		      int64_t ok_ns, const struct cl_fallback *f);

/* The scripts (cluster_lease.c, cluster_breaker.c, cluster_host.c). */
extern const char LEASE_LUA[];
extern const char BREAKER_LUA[];
extern const char HOSTS_LUA[];

/* cluster_host.c: this run's ident; the round's HOSTS call and its
 * answer (false: garbage). */
void cl_ident_init(struct resild_cluster *c, uint64_t run);
struct cl_hosts_cmd {
	const char *argv[7];
	char key[RESIL_NAME_MAX + 16];
	char live[24];
};
bool cl_hosts_append(struct resild_cluster *c, struct cl_hosts_cmd *cmd);
bool cl_hosts_parse(struct resild_cluster *c, const redisReply *r);

/* cluster_conn.c: the clock, the jitter, errors, connections; the
 * answers' parsers: cluster_lease.c, cluster_breaker.c. */
int64_t mono_ns(void);
uint64_t rnd_next(struct resild_cluster *c);
void set_error(struct resild_cluster *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void disconnect(struct resild_cluster *c);
/* What failed on a connection, in words (a socket timeout says it). */
const char *io_error(const redisContext *rc, char *buf, size_t len);
const char *where(const struct resild_cluster *c, char *buf, size_t len);
redisContext *tcp_connect(struct resild_cluster *c, const char *host, int port, struct timeval tv,
			  char *err, size_t elen);
void sentinel_recheck(struct resild_cluster *c);
bool connect_redis(struct resild_cluster *c);
bool parse_answer(redisReply *r, struct xans *a);
bool parse_breaker(redisReply *r, struct xans *a);
int64_t hold_ns(const struct resild_cluster *c);
/* A lease's length, as granted and as believed here (from its request's
 * send). */
int64_t lease_ns(const struct resild_cluster *c);
void cl_rtt_note(struct resild_cluster *c, int64_t rtt);
/* The loop: a lease of policy name ran out unrenewed (logged, counted). */
void cl_lease_ran_out(struct resild_cluster *c, const struct resil_seg *s,
		      const struct resil_rec *rec, int64_t now);

/* What the loop's tick carries from one policy to the next (cluster.c). */
struct tick_ctx {
	struct resild *d;
	struct resild_cluster *c;
	int64_t now;
	bool post;
	bool early;	      /* this policy posts an early lease call (tick_limit says) */
	bool grant;	      /* and it asks for a lease (else: an acknowledgement only) */
	bool limiters;	      /* a global limiter was seen: sample its demand */
	uint32_t fleet_seen;  /* the largest fleet size a policy's state holds */
	uint32_t hosts_known; /* the fleet's size: --cluster-hosts, else the most of what
			       * the states hold and the daemons live now */
};

/* cluster_conn.c: the URL, the TLS settings, a file's first line (init);
 * 0 or -errno, logged. */
struct resild_opts;
int cl_parse_url(struct resild_cluster *c, const char *url);
int cl_tls_init(struct resild_cluster *c, const struct resild_opts *o);
int cl_read_line_file(const char *path, char *buf, size_t len, const char *what);

/* cluster_lease.c, cluster_breaker.c: a global limiter's and breaker's
 * tick (the last answer applied, the next request filled). */
struct resil_seg;
struct resil_rec;
void cl_tick_limit(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
		   struct cl_slot *cs, const struct xans *a, struct xreq *q);
void cl_tick_breaker(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
		     struct cl_slot *cs, const struct xans *a, struct xreq *q);

/* cluster_rc.c: the exchange thread's body (pthread_create's start). */
void *cluster_main(void *arg);

#endif

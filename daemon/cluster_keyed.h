/* SPDX-License-Identifier: MIT */
/*
 * cluster_keyed.h - policy.scope = global for keyed limiters (per IP, per
 * API key across hosts): what the daemon publishes and charges each
 * cluster interval (cluster_keyed.c opens with the design).
 *
 * cluster.c owns the exchange (its thread, the connection, the pipeline);
 * this module collects a policy's admitted keys, says what to send, parses
 * the other hosts' admissions and charges them to the segment. The loop
 * calls resild_ck_tick; the exchange thread calls resild_ck_command and
 * resild_ck_parse.
 */
#ifndef RESILD_CLUSTER_KEYED_H
#define RESILD_CLUSTER_KEYED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct resil_limit_conf;
struct resil_seg;
struct resil_msink;
struct resil_rec;
struct resild;
struct redisReply;

/* The script, loaded by cluster.c on every connection. */
extern const char resild_ck_lua[];

/* One record of the exchange: a key's fingerprint and its admissions,
 * little-endian, 12 bytes. */
#define RESILD_CK_REC 12

/* The request (loop -> thread): this host's admissions since the last
 * post, owned by whoever holds the request (the thread frees it). */
struct resild_ck_req {
	bool on;
	uint8_t *blob;
	size_t len;
	int64_t keep_ms; /* how long Redis keeps a host's report */
};

/* The answer (thread -> loop): the other hosts' admissions. */
struct resild_ck_ans {
	bool fresh;
	uint8_t *blob;
	size_t len;
};

/* A key's debt: TAT the charges could not move yet (cluster_keyed.c). */
struct resild_ck_debt {
	uint64_t fp; /* 0: a free entry */
	int64_t ns;
};

/* What the loop keeps per policy. */
struct resild_ck_slot {
	int64_t collect_ns; /* the last collect (0: none yet) */
	uint64_t published; /* key counts sent */
	uint64_t admitted;  /* admissions in them */
	uint64_t charged;   /* other hosts' admissions charged here */
	uint64_t dropped;   /* charges without room for their key (or for its debt) */
	uint64_t bad;	    /* records from Redis that are no key's */
	/* the keys' debts (open addressing, linear probing; NULL: none yet) */
	struct resild_ck_debt *debt;
	uint32_t debt_cap, debt_n;
	uint64_t owed; /* keys that owed at the last tick */
};

/* What the thread keeps per policy: where its reading of the other
 * hosts' reports stands. */
struct resild_ck_thr {
	uint32_t gen;
	char last[48]; /* the last stream id read ("": none yet) */
};

/* True when rec is a keyed gcra limiter with policy.scope = global. */
bool resild_ck_wants(const struct resil_rec *rec);

/* The loop, at each tick: charge the keys' debts again, then the answer's
 * admissions (a->blob freed), then (post) collect this host's into q.
 * lease_ns: a lease's length now (the reports are kept two of them at
 * least: the round trip to Redis counts in it). */
void resild_ck_tick(const struct resil_seg *s, const struct resil_rec *rec,
		    struct resild_ck_slot *cs, struct resild_ck_ans *a, struct resild_ck_req *q,
		    int64_t now, int64_t interval_ns, int64_t lease_ns, bool post);

/* Charge n admissions of another host to the key fp of a keyed global
 * limiter's state st (what resild_ck_tick does with each record, the debt
 * kept in cs), and charge cs's debts again (each tick). bench/ and the
 * tests drive a fleet of state blocks through these. */
void resild_ck_charge(struct resild_ck_slot *cs, const struct resil_limit_conf *lc, void *st,
		      uint64_t fp, uint32_t n, int64_t now);
void resild_ck_recharge(struct resild_ck_slot *cs, const struct resil_limit_conf *lc, void *st,
			int64_t now);
/* Free what cs holds (a policy gone or redefined); cs is zeroed. */
void resild_ck_slot_fini(struct resild_ck_slot *cs);

/* Under cluster.c's lock, as a new request or answer replaces one that was
 * never taken: keep the older one's records (appended to the new one's;
 * the older is emptied). */
void resild_ck_keep_req(struct resild_ck_req *q, struct resild_ck_req *old);
void resild_ck_keep_ans(struct resild_ck_ans *a, struct resild_ck_ans *old);
void resild_ck_free_req(struct resild_ck_req *q);
void resild_ck_free_ans(struct resild_ck_ans *a);

/* The thread: the command of q for policy name (argv with lengths: the
 * records are binary). bufs hold the numbers until it is sent. */
#define RESILD_CK_ARGC 8
struct resild_ck_cmd {
	int argc;
	const char *argv[RESILD_CK_ARGC];
	size_t argvlen[RESILD_CK_ARGC];
	char key[300];
	char keep[24];
};
void resild_ck_command(const struct resild_ck_req *q, struct resild_ck_thr *th, uint32_t gen,
		       const char *name, const char *prefix, const char *host, const char *sha,
		       struct resild_ck_cmd *cmd);
/* The thread: the reply into a (the records allocated), th's reading moved
 * on; false: garbage. */
bool resild_ck_parse(const struct redisReply *r, struct resild_ck_thr *th, struct resild_ck_ans *a);

/* The cluster's hash key for names and keyed tables: one key has one
 * fingerprint on every host of the cluster. Set into new segments
 * (adopted: checked, a warning when it differs). 0 or -errno (logged). */
int resild_ck_seg_key(struct resild *d, bool adopted);

/* resil_cluster_keyed_* samples of one policy into k, and their
 * families. */
void resild_ck_metrics(const struct resild_ck_slot *cs, const char *name, struct resil_msink *k);
void resild_ck_metrics_help(struct resil_msink *k);

#endif

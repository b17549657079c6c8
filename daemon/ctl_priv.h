/* SPDX-License-Identifier: MIT */
/*
 * ctl_priv.h - what the control protocol's files share: ctl.c (the
 * dispatch, the replies, the lookup, the authorization checks),
 * ctl_info.c (get, list), ctl_policy.c (define, revert, delete, force)
 * and ctl_status.c (metrics, status). Private to them.
 */
#ifndef RESILD_CTL_PRIV_H
#define RESILD_CTL_PRIV_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resil.pb-c.h"

#include "cfgfile.h"
#include "metrics.h"
#include "resild.h"

#define CONF_TEXT_MAX 16384
/* counters, percentiles, keyed limiter and one key (16), up to 64 processes side by side,
 * held permits (2 + up to HOLDERS_MAX holders + 1) */
#define HOLDERS_MAX 16
#define STATS_MAX   (RESIL_STAT__MAX + 8 + 16 + 8 + 64 + 3 + HOLDERS_MAX + WHY_MAX + CLUSTER_MAX)
/* the why_* stats of add_why_stats */
#define WHY_MAX 24
/* the cluster_* stats of add_cluster_stats */
#define CLUSTER_MAX 20

/* A reply under construction: the error (if any) and the body. */
struct reply {
	Resil__Response resp;
	Resil__Error error;
	uint32_t version;   /* the request's protocol version */
	int64_t wait_until; /* the peer's: a define may wait for space until */
	int64_t later_ns;   /* != 0: no reply yet, try again then */
	char errmsg[512];
};

int reply_error(struct reply *rp, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A PolicyInfo; config, origin and stats only when full (get), not in a
 * list. */
struct info_head {
	Resil__PolicyInfo pi;
};
struct info {
	struct info_head h;
	struct resild_origin_buf origin;
	char config[CONF_TEXT_MAX];
	Resil__Stat st[STATS_MAX];
	Resil__Stat *stp[STATS_MAX];
	char stname[STATS_MAX][32];
};

/*
 * A Metrics reply's families of samples, built from the producers' calls (a
 * sink): everything lives in chunks of one list, strings copied, freed
 * together by psink_free(). A sample joins the family of its name (the
 * cluster's families give their HELP and TYPE first, their samples later,
 * per policy).
 */
struct pchunk {
	struct pchunk *next;
	size_t used, cap;
	alignas(16) char mem[];
};

struct pfam {
	Resil__MetricFamily f; /* first: a Resil__MetricFamily * is a struct pfam * */
	size_t cap;
};

struct psink {
	struct resil_msink sink;
	struct pchunk *chunks;
	struct pfam **fams;
	size_t nfam, famcap;
	bool oom;
};

/* ctl.c: the lookup and the authorization checks (0 or -errno, the
 * reply holding the error) */
bool may_change_ok(struct resild *d, const struct resild_peer *p, const struct resil_rec *rec);
int may_change(struct resild *d, const struct resild_peer *p, const struct resil_rec *rec,
	       const char *verb, struct reply *rp);
int may_take_state(struct resild *d, const struct resild_peer *p, uint32_t uid, const char *name,
		   const struct resil_conf *c, struct reply *rp);
int may_create(struct resild *d, const struct resild_peer *p, const char *name, struct reply *rp);
const struct resil_rec *find(struct resild *d, const char *name, uint64_t *word);
int check_name(const char *name, struct reply *rp);
const struct resil_rec *find_or_fail(struct resild *d, const char *name, struct reply *rp);

/* ctl_info.c */
void fill_info(struct resild *d, const struct resil_rec *rec, struct info *in);
int handle_get(struct resild *d, const Resil__Get *g, struct reply *rp, struct info *in);
int handle_list(struct resild *d, const Resil__List *l, struct reply *rp, Resil__ListReply *lr,
		void **to_free);

/* ctl_policy.c */
int handle_define(struct resild *d, const struct resild_peer *p, const char *name, const char *text,
		  bool update, bool exclusive, struct reply *rp, struct info *in);
int handle_delete(struct resild *d, const struct resild_peer *p, const char *name,
		  struct reply *rp);
int handle_declare(struct resild *d, const struct resild_peer *p, const Resil__Define *df,
		   struct reply *rp, struct info *in);
int handle_revert(struct resild *d, const struct resild_peer *p, const Resil__Revert *rv,
		  struct reply *rp, struct info *in);
int handle_force(struct resild *d, const struct resild_peer *p, const Resil__ForceState *f,
		 struct reply *rp, struct info *in);

/* ctl_status.c */
void psink_free(struct psink *p);
int handle_metrics(struct resild *d, struct reply *rp, Resil__MetricsReply *mr, struct psink *ps);
int handle_status(struct resild *d, struct reply *rp, Resil__StatusReply *sr, void **to_free);

#endif

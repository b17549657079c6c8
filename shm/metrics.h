/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - Prometheus text exposition (format 0.0.4) of a mapped
 * segment pair: what `resilctl metrics`, the daemon's Metrics request and
 * `resild --metrics-listen` serve.
 *
 * Reads the segments only (a read-only observer mapping is enough); never
 * writes, never allocates, never makes a syscall but clock_gettime (for
 * the budget's lazy refill).
 */
#ifndef RESIL_SHM_METRICS_H
#define RESIL_SHM_METRICS_H

#include "seg.h"

/*
 * Write the exposition of every policy of s into buf (resil_metrics_emit
 * into a text sink). snprintf semantics:
 * returns the length of the whole text (without the NUL); when that is >=
 * len the text was cut, and the caller retries with a buffer of at least
 * the returned length + 1. buf may be NULL when len is 0.
 *
 * Families (every sample labelled policy="NAME"):
 *   resil_calls_total{outcome=success|failure|ignored|rejected_open|
 *     rejected_full|rejected_limited|rejected_shed|rejected_budget} counter
 *   resil_slow_calls_total, resil_retries_total, resil_giveups_total,
 *   resil_limit_evictions_total,
 *   resil_limit_dry_run_rejects_total (every limiter)              counters
 *   resil_breaker_transitions_total{from=STATE,to=STATE}           counter
 *     (the cycle closed/open/half_open always, forced states once seen)
 *   resil_breaker_state{state=closed|open|half_open|disabled|forced_open|
 *     metrics_only}: 1 for the current state, 0 for the others   gauge
 *   resil_breaker_failure_rate, resil_breaker_slow_call_rate (0..1),
 *   resil_breaker_window_calls (count and time windows)           gauges
 *   resil_limit_available_permits (the unkeyed word)              gauge
 *   resil_bulkhead_max (config), resil_bulkhead_in_use,
 *   resil_adaptive_limit, resil_adaptive_in_use,
 *   resil_shed_probability                                         gauges
 *   resil_retry_budget_tokens                                      gauge
 *   resil_call_duration_seconds (histogram = on)                   histogram
 *   resil_policies, resil_events_dropped_total, resil_clients_full_total,
 *   resil_state_repairs_total, resil_build_info{version=...} (no policy)
 * Under policy.scope = process the breaker's families, the limiter's, the
 * in-use gauges, the adaptive limit and the shed probability are per
 * process: one sample per live client row, labelled pid="N" too; the
 * other counters and histograms stay fleet-wide.
 */
size_t resil_metrics_text(const struct resil_seg *s, char *buf, size_t len);

/*
 * Metrics as samples. A producer emits, in the exposition's order, a
 * family (name, help, type) and samples (the family's name, a suffix:
 * "", "_bucket", "_sum" or "_count", labels, a value) into a sink; what
 * receives them decides the shape: the text sink below renders the
 * exposition (GET /metrics), the daemon's control socket builds the
 * protocol's families of samples from the same calls (daemon/ctl.c), a
 * recording keeps them for later. Label
 * values and help are given raw; the text sink escapes them.
 */
/* enum resil_mtype (RESIL_MT_*): names.h, tied to proto's MetricType. */

/* A value with the form the exposition writes it in. */
enum resil_mvkind {
	RESIL_MV_UINT = 0, /* u, in decimal */
	RESIL_MV_INT,	   /* i, in decimal */
	RESIL_MV_FIXED,	   /* u / 10^dec with dec decimals, "-" first when neg */
	RESIL_MV_REAL,	   /* d with dec decimals (printf's %.*f) */
};

struct resil_mvalue {
	uint8_t kind; /* enum resil_mvkind */
	uint8_t dec;
	bool neg;
	union {
		uint64_t u;
		int64_t i;
		double d;
	};
};

static inline struct resil_mvalue resil_mv_uint(uint64_t u)
{
	return (struct resil_mvalue){.kind = RESIL_MV_UINT, .u = u};
}

static inline struct resil_mvalue resil_mv_int(int64_t i)
{
	return (struct resil_mvalue){.kind = RESIL_MV_INT, .i = i};
}

static inline struct resil_mvalue resil_mv_fixed(bool neg, uint64_t mag, unsigned dec)
{
	return (struct resil_mvalue){
	    .kind = RESIL_MV_FIXED, .dec = (uint8_t)dec, .neg = neg, .u = mag};
}

static inline struct resil_mvalue resil_mv_real(double d, unsigned dec)
{
	return (struct resil_mvalue){.kind = RESIL_MV_REAL, .dec = (uint8_t)dec, .d = d};
}

/* The value as a double (protocol v2 carries doubles), and the number of
 * decimals the exposition writes it with (0: an integer). */
double resil_mvalue_double(struct resil_mvalue v);
unsigned resil_mvalue_decimals(struct resil_mvalue v);

/* The value as the exposition writes it, snprintf semantics. */
size_t resil_mvalue_format(struct resil_mvalue v, char *buf, size_t len);

struct resil_mlabel {
	const char *name;
	const char *value;
};

struct resil_msink {
	void (*family)(struct resil_msink *k, const char *name, const char *help,
		       enum resil_mtype type);
	void (*sample)(struct resil_msink *k, const char *family, const char *suffix,
		       const struct resil_mlabel *labels, size_t nlabels, struct resil_mvalue v);
};

/* Every policy's samples (the families above) into k. Reads only. */
void resil_metrics_emit(const struct resil_seg *s, struct resil_msink *k);

/* The text sink: the exposition into buf, snprintf semantics (pos is the
 * length of the whole text; buf may be NULL when len is 0). */
struct resil_mtext {
	struct resil_msink sink;
	char *buf;
	size_t len, pos;
};
void resil_mtext_init(struct resil_mtext *t, char *buf, size_t len);

/* A recording: the calls made into its sink, kept by value in its own
 * bytes (strings copied), so it can be copied as a whole (to another
 * thread) and replayed into another sink later. A recording that ran out
 * of room replays nothing (full). */
#define RESIL_MREC_BYTES 8192
struct resil_mrec {
	struct resil_msink sink;
	size_t used;
	bool full;
	char buf[RESIL_MREC_BYTES];
};
void resil_mrec_init(struct resil_mrec *r);
void resil_mrec_replay(const struct resil_mrec *r, struct resil_msink *k);

/* Label value escaping of the text format (\\, \", \n) into buf, snprintf
 * semantics; src is read up to srclen bytes or its NUL. */
size_t resil_metrics_escape(const char *src, size_t srclen, char *buf, size_t len);

#endif

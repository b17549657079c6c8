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
 * Write the exposition of every policy of s into buf. snprintf semantics:
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

/* Label value escaping of the text format (\\, \", \n) into buf, snprintf
 * semantics; src is read up to srclen bytes or its NUL. */
size_t resil_metrics_escape(const char *src, size_t srclen, char *buf, size_t len);

#endif

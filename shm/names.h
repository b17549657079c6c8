/* SPDX-License-Identifier: MIT */
/*
 * names.h - one list per enum that people read: the daemon's log,
 * journald's fields, the metrics' labels, resilctl and the control
 * protocol all take their words from these lists, and nothing else
 * spells them.
 *
 * Each list is an X-macro: X(ID, VALUE, WORD, ...) per member. The enums
 * of the segment (event types, transition reasons, configuration changes,
 * repaired words, what a define did, metric types, the fleet's breaker)
 * are defined here from their lists; the public ones
 * (breaker states, verdicts: resil.h) and the daemon's (metrics listener,
 * cluster fallback) are defined where they belong and tied to their list
 * by _Static_asserts (names.c, RESIL_NAMES_DAEMON_CHECK). A list whose
 * values travel in the control protocol names the proto enum each member
 * is cast to (its member is PREFIX_ID of proto/resil.proto's enum):
 * RESIL_NAMES_PROTO_CHECK, expanded where resil.pb-c.h is included (the
 * daemon's ctl.c, resilctl), asserts that every cast is the identity (or
 * the stated offset). A member added to a list gets its word, and a
 * protocol enum that lacks it fails to compile.
 */
#ifndef RESIL_SHM_NAMES_H
#define RESIL_SHM_NAMES_H

#include <stdint.h>

/* Breaker states (resil.h RESIL_STATE_ID): X(ID, VALUE, WORD, SHORT,
 * LABEL): WORD for logs, events and resilctl; SHORT for resilctl top's
 * column; LABEL for the metrics' state label. The protocol's BreakerState
 * is the state plus one (BREAKER_NONE = 0: no breaker). */
#define RESIL_STATE_LIST(X)                                                                        \
	X(CLOSED, 0, "closed", "closed", "closed")                                                 \
	X(OPEN, 1, "open", "open", "open")                                                         \
	X(HALF_OPEN, 2, "half-open", "half-open", "half_open")                                     \
	X(DISABLED, 3, "disabled", "disabled", "disabled")                                         \
	X(FORCED_OPEN, 4, "forced-open", "forced", "forced_open")                                  \
	X(METRICS_ONLY, 5, "metrics-only", "metrics", "metrics_only")

/* Verdicts of an acquire (resil.h RESIL_ID): X(ID, VALUE, WORD). */
#define RESIL_VERDICT_LIST(X)                                                                      \
	X(ADMIT, 0, "admitted")                                                                    \
	X(REJECT_OPEN, 1, "rejected: circuit open")                                                \
	X(REJECT_FULL, 2, "rejected: full")                                                        \
	X(REJECT_LIMITED, 3, "rejected: rate limited")                                             \
	X(REJECT_SHED, 4, "rejected: shed")                                                        \
	X(REJECT_BUDGET, 5, "rejected: retry budget exhausted")

/* Event types of the ring (RESIL_EV_ID): X(ID, VALUE, WORD); protocol
 * EventKind EVENT_ID. a, b and value mean (seg.h, struct resil_event):
 * TRANSITION a = from, b = to; KEYS_FULL a = 1 admitted (limit.when_full),
 * value = keys; RECLAIMED a = permits, b = probes taken back from a dead
 * client; CONFIG a = enum resil_config_change; REPAIRED a = enum
 * resil_word of the last word, b = words repaired; CLUSTER (scope =
 * global) a = enum resil_cluster_event. */
#define RESIL_EVENT_LIST(X)                                                                        \
	X(TRANSITION, 1, "transition")                                                             \
	X(BUDGET_EXHAUSTED, 2, "budget-exhausted")                                                 \
	X(KEYS_FULL, 3, "keys-full")                                                               \
	X(RECLAIMED, 4, "reclaimed")                                                               \
	X(CLIENTS_FULL, 5, "clients-full")                                                         \
	X(CONFIG, 6, "config")                                                                     \
	X(REPAIRED, 7, "repaired")                                                                 \
	X(CLUSTER, 8, "cluster")

/* Why a breaker moved (RESIL_WHY_ID, an event's reason): X(ID, VALUE,
 * WORD); protocol BreakerWhy WHY_ID. The value an event carries with it:
 * FAILURE_RATE, SLOW_RATE and FLEET basis points, CONSECUTIVE failures,
 * WAIT_OVER and PROBE_TIMEOUT nanoseconds. */
#define RESIL_WHY_LIST(X)                                                                          \
	X(NONE, 0, "none")                                                                         \
	X(FAILURE_RATE, 1, "failure rate")                                                         \
	X(SLOW_RATE, 2, "slow-call rate")                                                          \
	X(CONSECUTIVE, 3, "consecutive failures")                                                  \
	X(WAIT_OVER, 4, "wait over")                                                               \
	X(PROBES_PASSED, 5, "probes passed")                                                       \
	X(PROBE_FAILED, 6, "probe failed")                                                         \
	X(PROBE_TIMEOUT, 7, "probe timed out")                                                     \
	X(FORCED, 8, "forced")                                                                     \
	X(RESET, 9, "reset")                                                                       \
	X(FLEET, 10, "the fleet's window")                                                         \
	X(FLEET_CLOSED, 11, "the fleet's probes passed")

/* A configuration event's change (RESIL_CHANGE_ID): X(ID, VALUE, WORD);
 * protocol ConfigChange CONFIG_ID. */
#define RESIL_CHANGE_LIST(X)                                                                       \
	X(CREATED, 0, "created")                                                                   \
	X(CHANGED, 1, "changed")                                                                   \
	X(DELETED, 2, "deleted")                                                                   \
	X(REDEFINED, 3, "redefined")

/* State words the daemon checks and repairs (RESIL_W_ID, event
 * REPAIRED's a): X(ID, VALUE, WORD); the protocol carries the value
 * (Event.word). */
#define RESIL_WORD_LIST(X)                                                                         \
	X(NONE, 0, "none")                                                                         \
	X(HEADER, 1, "state header")                                                               \
	X(EVENTS, 2, "event ring position")                                                        \
	X(BREAKER_LAYOUT, 3, "breaker layout")                                                     \
	X(BREAKER_BASE, 4, "breaker.base_ns")                                                      \
	X(BREAKER_STATE, 5, "breaker state")                                                       \
	X(SHED_WIDTH, 6, "shed.width_ns")                                                          \
	X(SHED_EPOCH, 7, "shed.epoch")                                                             \
	X(LIMIT_TAT, 8, "limit tat")                                                               \
	X(BLOCK_RESET, 9, "state block (reset)")                                                   \
	X(ADAPTIVE_LAYOUT, 10, "adaptive layout")                                                  \
	X(ADAPTIVE_PHASE, 11, "adaptive.phase")                                                    \
	X(ADAPTIVE_EPOCH, 12, "adaptive.epoch")                                                    \
	X(ADAPTIVE_PROBE, 13, "adaptive.probe_at")                                                 \
	X(ADAPTIVE_LIMIT, 14, "adaptive limit")                                                    \
	X(BUDGET_TOKENS, 15, "budget.tokens_milli")                                                \
	X(BUDGET_FLAG, 16, "budget.exhausted")                                                     \
	X(STATS_P95, 17, "stats p95 cache")                                                        \
	X(LIMIT_USED, 18, "limit.used")                                                            \
	X(BUDGET_MIRROR, 19, "budget.g_req/g_rty")

/* What a define did (seg_records.h, RESIL_DEFINE_ID): X(ID, VALUE, WORD); the
 * protocol's Outcome OUTCOME_ID is the value plus one (OUTCOME_NONE = 0:
 * not a define). */
#define RESIL_DEFINE_LIST(X)                                                                       \
	X(CREATED, 0, "created")                                                                   \
	X(CHANGED, 1, "changed")                                                                   \
	X(UNCHANGED, 2, "unchanged")                                                               \
	X(KEPT, 3, "kept") /* a declaration kept beneath (daemon/owners.c), not a define's */

/* Metric types (metrics.h RESIL_MT_ID): X(ID, VALUE, WORD); protocol
 * MetricType METRIC_ID; WORD is the exposition's # TYPE. */
#define RESIL_MTYPE_LIST(X)                                                                        \
	X(UNTYPED, 0, "untyped")                                                                   \
	X(COUNTER, 1, "counter")                                                                   \
	X(GAUGE, 2, "gauge")                                                                       \
	X(HISTOGRAM, 3, "histogram")                                                               \
	X(SUMMARY, 4, "summary")

/* The daemon's HTTP metrics listener (resild.h RESILD_METRICS_ID):
 * X(ID, VALUE, WORD); protocol MetricsState METRICS_ID. */
#define RESIL_LISTENER_LIST(X)                                                                     \
	X(OFF, 0, "off")                                                                           \
	X(LISTENING, 1, "listening")                                                               \
	X(FAILED, 2, "failed")

/* --cluster-fallback (daemon/cluster.h RESILD_FALLBACK_ID): X(ID, VALUE,
 * WORD); protocol ClusterFallback FALLBACK_ID; WORD is the option's value. */
#define RESIL_FALLBACK_LIST(X)                                                                     \
	X(SHARE, 0, "share")                                                                       \
	X(LOCAL, 1, "local")                                                                       \
	X(REJECT, 2, "reject")

/* The fleet's breaker as a host last exchanged it (scope = global):
 * X(ID, VALUE, WORD); protocol FleetState FLEET_ID. */
#define RESIL_FLEET_LIST(X)                                                                        \
	X(CLOSED, 0, "closed")                                                                     \
	X(OPEN, 1, "open")                                                                         \
	X(PROBING, 2, "probing")

#define RESIL_NAMES_ENUM_(prefix, id, v, ...) prefix##id = v,
#define RESIL_NAMES_EV_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_EV_, id, v)
#define RESIL_NAMES_WHY_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_WHY_, id, v)
#define RESIL_NAMES_CHANGE_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_CHANGE_, id, v)
#define RESIL_NAMES_W_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_W_, id, v)
#define RESIL_NAMES_FLEET_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_FLEET_, id, v)
#define RESIL_NAMES_DEFINE_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_DEFINE_, id, v)
#define RESIL_NAMES_MT_(id, v, w)	      RESIL_NAMES_ENUM_(RESIL_MT_, id, v)

enum resil_event_type { RESIL_EVENT_LIST(RESIL_NAMES_EV_) };
enum resil_breaker_why { RESIL_WHY_LIST(RESIL_NAMES_WHY_) RESIL_WHY_MAX };
enum resil_config_change { RESIL_CHANGE_LIST(RESIL_NAMES_CHANGE_) };
enum resil_word { RESIL_WORD_LIST(RESIL_NAMES_W_) RESIL_W_MAX };
enum resil_fleet_state { RESIL_FLEET_LIST(RESIL_NAMES_FLEET_) };
enum resil_define_outcome { RESIL_DEFINE_LIST(RESIL_NAMES_DEFINE_) };
enum resil_mtype { RESIL_MTYPE_LIST(RESIL_NAMES_MT_) };
#define RESIL_NAMES_ONE_(...) +1
/* how many breaker states there are (RESIL_STATE_* run 0..this - 1) */
enum { RESIL_STATE_COUNT = 0 RESIL_STATE_LIST(RESIL_NAMES_ONE_) };

/* The word of each member; a value outside its list: "unknown" (never
 * NULL). */
const char *resil_breaker_state_name(int state);
const char *resil_breaker_state_short(int state);
const char *resil_breaker_state_label(int state);
const char *resil_verdict_name(int verdict);
const char *resil_event_name(uint32_t type);
const char *resil_breaker_why(uint32_t reason);
const char *resil_config_change_name(uint32_t change);
const char *resil_word_name(uint32_t word);
const char *resil_define_name(uint32_t outcome);
const char *resil_mtype_name(uint32_t type);
const char *resil_listener_name(uint32_t state);
const char *resil_fallback_name(uint32_t fallback);
const char *resil_fleet_name(uint32_t state);
/* A --cluster-fallback word: its value, or -EINVAL. */
int resil_fallback_parse(const char *word);

/* Each value sent in the protocol is the proto enum's member of the same
 * ID (plus one where a list says so). Expand where resil.pb-c.h is
 * included. */
#define RESIL_NAMES_TIE_(penum, pprefix, id, v, off)                                               \
	_Static_assert(RESIL__##penum##__##pprefix##id == (v) + (off), #pprefix #id);
#define RESIL_NAMES_TIE_STATE_(id, v, w, s, l) RESIL_NAMES_TIE_(BREAKER_STATE, BREAKER_, id, v, 1)
#define RESIL_NAMES_TIE_EV_(id, v, w)	       RESIL_NAMES_TIE_(EVENT_KIND, EVENT_, id, v, 0)
#define RESIL_NAMES_TIE_WHY_(id, v, w)	       RESIL_NAMES_TIE_(BREAKER_WHY, WHY_, id, v, 0)
#define RESIL_NAMES_TIE_CHANGE_(id, v, w)      RESIL_NAMES_TIE_(CONFIG_CHANGE, CONFIG_, id, v, 0)
#define RESIL_NAMES_TIE_DEFINE_(id, v, w)      RESIL_NAMES_TIE_(OUTCOME, OUTCOME_, id, v, 1)
#define RESIL_NAMES_TIE_MTYPE_(id, v, w)       RESIL_NAMES_TIE_(METRIC_TYPE, METRIC_, id, v, 0)
#define RESIL_NAMES_TIE_LISTENER_(id, v, w)    RESIL_NAMES_TIE_(METRICS_STATE, METRICS_, id, v, 0)
#define RESIL_NAMES_TIE_FALLBACK_(id, v, w)    RESIL_NAMES_TIE_(CLUSTER_FALLBACK, FALLBACK_, id, v, 0)
#define RESIL_NAMES_TIE_FLEET_(id, v, w)       RESIL_NAMES_TIE_(FLEET_STATE, FLEET_, id, v, 0)
#define RESIL_NAMES_PROTO_CHECK                                                                    \
	RESIL_STATE_LIST(RESIL_NAMES_TIE_STATE_)                                                   \
	RESIL_EVENT_LIST(RESIL_NAMES_TIE_EV_)                                                      \
	RESIL_WHY_LIST(RESIL_NAMES_TIE_WHY_)                                                       \
	RESIL_CHANGE_LIST(RESIL_NAMES_TIE_CHANGE_)                                                 \
	RESIL_DEFINE_LIST(RESIL_NAMES_TIE_DEFINE_)                                                 \
	RESIL_MTYPE_LIST(RESIL_NAMES_TIE_MTYPE_)                                                   \
	RESIL_LISTENER_LIST(RESIL_NAMES_TIE_LISTENER_)                                             \
	RESIL_FALLBACK_LIST(RESIL_NAMES_TIE_FALLBACK_)                                             \
	RESIL_FLEET_LIST(RESIL_NAMES_TIE_FLEET_)                                                   \
	_Static_assert(RESIL__BREAKER_STATE__BREAKER_NONE == 0, "BREAKER_NONE");                   \
	_Static_assert(RESIL__OUTCOME__OUTCOME_NONE == 0, "OUTCOME_NONE");

/* The daemon's own enums, tied to their lists (expand in the daemon). */
#define RESIL_NAMES_DTIE_(prefix, id, v)     _Static_assert(prefix##id == (v), #prefix #id);
#define RESIL_NAMES_DTIE_LISTENER_(id, v, w) RESIL_NAMES_DTIE_(RESILD_METRICS_, id, v)
#define RESIL_NAMES_DTIE_FALLBACK_(id, v, w) RESIL_NAMES_DTIE_(RESILD_FALLBACK_, id, v)
#define RESIL_NAMES_DAEMON_CHECK                                                                   \
	RESIL_LISTENER_LIST(RESIL_NAMES_DTIE_LISTENER_)                                            \
	RESIL_FALLBACK_LIST(RESIL_NAMES_DTIE_FALLBACK_)

#endif

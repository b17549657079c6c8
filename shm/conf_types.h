/* SPDX-License-Identifier: MIT */
/*
 * conf_types.h - a policy's configuration as it lives in the segment:
 * struct resil_conf and each component's part of it.
 *
 * struct resil_conf lives inside a config record in the segment, so it is
 * part of the ABI: fixed-width fields, no pointers, zero-filled before
 * parsing so two equal configurations compare equal with memcmp. These
 * are types only, below every module that reads a configuration (the
 * segment, the components, the dispatcher of conf.c that fills them).
 *
 * Units: durations in nanoseconds (_ns), rates as an emission interval in
 * nanoseconds, percents in hundredths of a percent (_bp, 5000 = 50%),
 * multipliers in thousandths (_milli).
 */
#ifndef RESIL_SHM_CONF_TYPES_H
#define RESIL_SHM_CONF_TYPES_H

#include "common.h"

/* RESIL_SCOPE_GLOBAL: shared by the host's processes like FLEET, and across
 * hosts through the daemons' cluster exchange (daemon/cluster.c): a GCRA
 * limiter runs at the host's leased share, a time-window breaker mirrors
 * the fleet's state. */
enum resil_scope { RESIL_SCOPE_FLEET = 0, RESIL_SCOPE_PROCESS = 1, RESIL_SCOPE_GLOBAL = 2 };

/* policy.fallback: how a process that has not reached resild yet decides
 * (libresil's pending handles): on its own copy of the declared policy,
 * admitting everything, or rejecting everything. Nothing else reads it. */
enum resil_fallback {
	RESIL_FALLBACK_LOCAL = 0,
	RESIL_FALLBACK_ADMIT = 1,
	RESIL_FALLBACK_REJECT = 2,
};

enum resil_window_kind {
	RESIL_WINDOW_COUNT = 0,
	RESIL_WINDOW_TIME = 1,
	RESIL_WINDOW_CONSECUTIVE = 2,
};

#define RESIL_RECORD_RULES 16
/* breaker.record: HTTP statuses or errno values lo..hi map to an outcome
 * (RESIL_SUCCESS, RESIL_FAILURE, RESIL_IGNORED of resil.h). */
struct resil_record_rule {
	uint16_t lo;
	uint16_t hi;
	uint8_t outcome;
	uint8_t kind; /* 0: HTTP statuses lo..hi; 1: errno values lo..hi */
	uint8_t pad[2];
};

struct resil_breaker_conf {
	uint8_t on;
	uint8_t window_kind;	    /* enum resil_window_kind */
	uint16_t buckets;	    /* time window: number of buckets */
	uint32_t window_size;	    /* count: last N calls; consecutive: N failures */
	RESIL_A8 int64_t window_ns; /* time window span */
	uint32_t failure_rate_bp;
	uint32_t slow_rate_bp;
	RESIL_A8 int64_t slow_call_ns;
	uint32_t min_calls;
	uint32_t half_open_calls;
	uint32_t half_open_concurrent;
	uint32_t wait_multiplier_milli;
	RESIL_A8 int64_t wait_ns;
	RESIL_A8 int64_t wait_max_ns;
	RESIL_A8 int64_t half_open_max_wait_ns;
	uint32_t nrecord;
	uint32_t reserved32;
	struct resil_record_rule record[RESIL_RECORD_RULES];
	RESIL_A8 uint64_t reserved[8];
};

enum resil_limit_algo {
	RESIL_LIMIT_GCRA = 0,
	RESIL_LIMIT_SLIDING = 1,
	RESIL_LIMIT_SLIDING_APPROX = 2,
};

struct resil_limit_conf {
	uint8_t on;
	uint8_t algorithm; /* enum resil_limit_algo */
	uint8_t when_full_admit;
	uint8_t dry_run; /* limit.dry_run: count what would be rejected, admit it */
	uint32_t burst;
	uint32_t count;		      /* limit.rate = count / period */
	uint32_t keys;		      /* keyed table capacity, 0 = unkeyed */
	RESIL_A8 int64_t period_ns;   /* limit.rate = count / period */
	RESIL_A8 int64_t interval_ns; /* emission interval: period / count */
	RESIL_A8 int64_t wait_ns;     /* reservation: longest wait */
	/* 1 when policy.scope = global (conf.c sets it with the scope): a
	 * keyed table then counts each key's admissions for the cluster
	 * exchange (limit_global.c) */
	uint32_t global;
	/* limit.default_key: the key of a call that gives none (keyed
	 * limiters only; length 0: none, such a call is -EINVAL) */
	uint8_t default_key_len;
	/* limit.empty_key = reject: a keyed call with an empty key (a key
	 * of length 0) is refused; 0 (admit): admitted, holding nothing of
	 * the limiter (nginx's limit_req skips an empty key) */
	uint8_t empty_key_reject;
	uint8_t reserved8[2];
	char default_key[48];
	RESIL_A8 uint64_t reserved[1];
};
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, dry_run) == 3, "limit dry_run");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, burst) == 4, "limit burst");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, global) == 40, "limit global");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, default_key_len) == 44,
		    "limit default_key_len");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, empty_key_reject) == 45, "limit empty key");
RESIL_STATIC_ASSERT(offsetof(struct resil_limit_conf, default_key) == 48, "limit default_key");
RESIL_STATIC_ASSERT(sizeof(struct resil_limit_conf) == 104, "limit conf size");

struct resil_bulkhead_conf {
	uint8_t on;
	uint8_t pad[3];
	uint32_t max;
	uint32_t critical_bp; /* share reserved for critical callers */
	uint32_t reserved32;
	RESIL_A8 int64_t wait_ns;
	RESIL_A8 uint64_t reserved[8];
};

enum resil_adaptive_algo {
	RESIL_ADAPTIVE_VEGAS = 0,
	RESIL_ADAPTIVE_GRADIENT2 = 1,
	RESIL_ADAPTIVE_AIMD = 2,
};

struct resil_adaptive_conf {
	uint8_t on;
	uint8_t algorithm;
	uint8_t pad[2];
	uint32_t min;
	uint32_t max;
	uint32_t initial;
	RESIL_A8 int64_t window_ns;
	RESIL_A8 int64_t probe_ns; /* min-RTT re-probe interval, 0 = never */
	uint32_t tolerance_milli;  /* Gradient2's RTT tolerance x1000, 0 = 1.5 */
	uint32_t reserved32;
	RESIL_A8 uint64_t reserved[10];
};
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_conf, probe_ns) == 24, "adaptive probe_ns");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_conf, tolerance_milli) == 32,
		    "adaptive tolerance_milli");
RESIL_STATIC_ASSERT(offsetof(struct resil_adaptive_conf, reserved) == 40, "adaptive reserved");
RESIL_STATIC_ASSERT(sizeof(struct resil_adaptive_conf) == 120, "adaptive conf size");

struct resil_shed_conf {
	uint8_t on;
	uint8_t pad[3];
	uint32_t k_milli; /* SRE multiplier K, in thousandths (2000) */
	RESIL_A8 int64_t window_ns;
	RESIL_A8 uint64_t reserved[6];
};

enum resil_jitter {
	RESIL_JITTER_FULL = 0,
	RESIL_JITTER_EQUAL,
	RESIL_JITTER_DECORRELATED,
	RESIL_JITTER_NONE
};

#define RESIL_RETRY_RULES 8
struct resil_retry_rule {
	uint32_t error_class; /* RESIL_ERR_* or a user code from 100 */
	uint32_t max_attempts;
	RESIL_A8 int64_t base_ns;
	RESIL_A8 int64_t max_delay_ns;
	uint32_t multiplier_milli;
	uint8_t jitter;
	uint8_t retry; /* 0: never retried */
	uint8_t pad[2];
};

enum resil_budget_kind {
	RESIL_BUDGET_NONE = 0,
	RESIL_BUDGET_GRPC,
	RESIL_BUDGET_AWS,
	RESIL_BUDGET_RATIO,
	RESIL_BUDGET_SHARED
};

struct resil_retry_conf {
	uint8_t on;
	uint8_t jitter;
	uint8_t budget_kind; /* enum resil_budget_kind */
	uint8_t idempotent;
	uint32_t max_attempts;
	uint32_t multiplier_milli;
	uint32_t nrules;
	RESIL_A8 int64_t base_ns;
	RESIL_A8 int64_t max_delay_ns;
	struct resil_retry_rule rules[RESIL_RETRY_RULES];
	uint32_t budget_max;	     /* grpc: MAX_TOKENS; aws: tokens */
	uint32_t budget_ratio_milli; /* grpc: RATIO; ratio: PERCENT*10 */
	char budget_name[32];	     /* @NAME */
	RESIL_A8 int64_t timeout_ns;
	int32_t interrupt_signal; /* 0: none */
	uint32_t hedge_max;
	RESIL_A8 int64_t hedge_delay_ns; /* 0: off; -1: p95 */
	RESIL_A8 uint64_t reserved[8];
};

/* Words of struct resil_conf's extension area (ext[]). */
#define RESIL_CONF_EXT_WORDS 8

struct resil_conf {
	uint8_t scope;	   /* enum resil_scope */
	uint8_t histogram; /* keep a latency histogram */
	uint8_t fallback;  /* enum resil_fallback */
	uint8_t pad[5];
	struct resil_breaker_conf breaker;
	struct resil_limit_conf limit;
	struct resil_bulkhead_conf bulkhead;
	struct resil_adaptive_conf adaptive;
	struct resil_shed_conf shed;
	struct resil_retry_conf retry;
	/* The extension area: words for components outside the product's
	 * own list (a build's own rows of the component table, comp.h, such
	 * as the test-only counter). Each such row declares its part
	 * (conf_ext_off, conf_ext_words; comp.c checks that the parts fit
	 * and do not overlap) and reaches it with RESIL_COMP_CONF_EXT(). The
	 * product's components never use it: a component of the product
	 * gets a named part above (in the reserved words below, ABI minor).
	 * In a build without such rows the words stay zero, and a record
	 * whose words are not zero is refused (its configuration does not
	 * survive the format and parse round trip, seg_records.c). */
	RESIL_A8 uint64_t ext[RESIL_CONF_EXT_WORDS];
	RESIL_A8 uint64_t reserved[16 - RESIL_CONF_EXT_WORDS];
};

/* The record's configuration is ABI: its size and the extension area's
 * place are fixed (it took the first half of what were 16 reserved
 * words). */
RESIL_STATIC_ASSERT(sizeof(struct resil_conf) == 1200, "conf size");
RESIL_STATIC_ASSERT(offsetof(struct resil_conf, ext) == 1072, "conf ext offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_conf, reserved) == 1072 + 8 * RESIL_CONF_EXT_WORDS,
		    "conf reserved offset");

/*
 * The stated maxima of what a configuration may say (conf.c refuses more,
 * naming the key and the maximum), so that no time arithmetic on them can
 * overflow and no client can make a space wait long for everyone:
 *   - every wait and duration: RESIL_WAIT_MAX_NS, a week (a breaker's
 *     time window: a day, RESIL_BK_TIME_MAX_NS; a rate's period: a year,
 *     RESIL_RATE_PERIOD_MAX_NS, for quotas per day, week or month);
 *   - counts: breaker.window count and consecutive, breaker.min_calls:
 *     RESIL_COUNT_MAX; multipliers (breaker.wait_multiplier,
 *     retry.multiplier, a rule's multiplier): RESIL_MULTIPLIER_MAX;
 *     every other count has its own bound where it is parsed.
 */
#define RESIL_WAIT_MAX_NS	 (7LL * 24 * 3600 * 1000 * 1000 * 1000)
#define RESIL_RATE_PERIOD_MAX_NS (366LL * 24 * 3600 * 1000 * 1000 * 1000)
#define RESIL_COUNT_MAX		 1000000u
#define RESIL_MULTIPLIER_MAX	 100u

#endif

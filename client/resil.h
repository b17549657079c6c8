/* SPDX-License-Identifier: MIT */
/*
 * resil.h - libresil, shared-memory resilience policies for process fleets.
 *
 * One daemon per host (resild) owns every circuit breaker, rate limiter,
 * bulkhead, retry budget, adaptive limit and load shedder in shared memory;
 * processes that link libresil map it and decide each request with a few
 * atomic instructions: no syscall, no lock, no allocation, no round trip.
 *
 * Conventions: calls that can fail return 0 (or a positive count) or a
 * negative errno; out-parameters are written only on success; resil_close
 * and friends accept NULL. Hot-path verdicts are not errors: resil_acquire
 * returns 0 (admitted) or a positive RESIL_REJECT_*.
 *
 * Every call is thread-safe. Handles stay valid until resil_close.
 */
#ifndef RESIL_H
#define RESIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(RESIL_BUILDING) && defined(__GNUC__)
#define RESIL_API __attribute__((visibility("default")))
#else
#define RESIL_API
#endif

/* The library's version: the one place it is written (CMakeLists.txt
 * reads it from here for the project, the soname libresil.so.MAJOR, the
 * symbol node RESIL_MAJOR.MINOR, resil.pc and the packages;
 * tests/sh_version.sh checks that they agree). */
#define RESIL_VERSION_MAJOR 1
#define RESIL_VERSION_MINOR 0
#define RESIL_VERSION_PATCH 0
#define RESIL_PRIV_XSTR(x)  #x
#define RESIL_PRIV_STR(x)   RESIL_PRIV_XSTR(x)
#define RESIL_VERSION_STRING                                                                       \
	RESIL_PRIV_STR(RESIL_VERSION_MAJOR)                                                        \
	"." RESIL_PRIV_STR(RESIL_VERSION_MINOR) "." RESIL_PRIV_STR(RESIL_VERSION_PATCH)

typedef struct resil resil_t;
typedef struct resil_policy resil_policy_t;
typedef struct resil_attempt resil_attempt_t;
typedef int64_t (*resil_clock_fn)(void *ctx); /* monotonic nanoseconds */

/* A permit lives on the caller's stack between acquire and release. Fixed
 * size with reserved room: its layout may grow inside, never its size. */
typedef struct resil_permit {
	uint64_t opaque[8];
} resil_permit_t;

/* Retry state on the caller's stack. */
typedef struct resil_retry {
	uint64_t opaque[16];
} resil_retry_t;

/* Verdicts of resil_acquire*: 0 admitted, or a positive rejection. */
enum resil_verdict {
	RESIL_ADMIT = 0,
	RESIL_REJECT_OPEN = 1,	  /* circuit breaker open (or its probes taken) */
	RESIL_REJECT_FULL = 2,	  /* bulkhead or adaptive limit full */
	RESIL_REJECT_LIMITED = 3, /* rate limited: resil_permit_wait_ns() says for how long */
	RESIL_REJECT_SHED = 4,	  /* load shedder */
	RESIL_REJECT_BUDGET = 5,  /* retry budget exhausted */
};

/* Outcomes for resil_release. */
enum resil_outcome {
	RESIL_SUCCESS = 0,
	RESIL_FAILURE = 1,
	RESIL_IGNORED = 2, /* neither: frees what the call held, counts nothing */
};

/* Error classes for retries (resil_retry_next, resil_call). */
enum resil_err_class {
	RESIL_ERR_NONE = 0,
	RESIL_ERR_TRANSIENT = 1,
	RESIL_ERR_THROTTLED = 2,
	RESIL_ERR_TIMEOUT = 3,
	RESIL_ERR_PERMANENT = 4,
	RESIL_ERR_USER = 100, /* user classes from here up */
};

/* Breaker states, as reported by resil_policy_state(). */
enum resil_state {
	RESIL_STATE_CLOSED = 0,
	RESIL_STATE_OPEN = 1,
	RESIL_STATE_HALF_OPEN = 2,
	RESIL_STATE_DISABLED = 3,
	RESIL_STATE_FORCED_OPEN = 4,
	RESIL_STATE_METRICS_ONLY = 5,
};

/* Priorities for resil_acquire_ex. */
enum resil_prio { RESIL_PRIO_NORMAL = 0, RESIL_PRIO_CRITICAL = 1 };

struct resil_req {
	const void *key; /* keyed limiter: an IP, an API key; NULL: unkeyed */
	size_t key_len;
	int priority;    /* RESIL_PRIO_* */
	int permits;     /* rate-limit permits to take at once (0 or 1: one) */
	uint64_t reserved[4];
};

struct resil_embedded_opts {
	uint32_t slots;      /* policies (0: 4096) */
	uint32_t clients;    /* client rows (0: 1024) */
	uint64_t state_size; /* bytes (0: 256 MiB, sparse) */
	uint64_t reserved[4];
};

/* Connect to resild and map its segments. NULL path: $RESIL_SOCKET, then
 * /run/resild/control.sock. Answers within a bounded time: -ETIMEDOUT when
 * the daemon never answers, -ECONNREFUSED / -ENOENT when it is not running,
 * -EPROTO when the daemon speaks another ABI major. */
RESIL_API int resil_open(resil_t **ret, const char *socket_path);
/* Options of resil_open_ex. size: sizeof(struct resil_open_opts) as the
 * caller knows it, so that fields added later are read only from callers
 * that set them. */
struct resil_open_opts {
	size_t size;		 /* sizeof(struct resil_open_opts) */
	const char *socket_path; /* NULL: $RESIL_SOCKET, then /run/resild/control.sock */
	unsigned flags;		 /* RESIL_OPEN_PENDING, ... */
};

/* Succeed at once whether resild runs or not: a handle that does not
 * reach resild is "pending". resil_define on it is remembered, and each
 * policy decides by its policy.fallback (local: the process's own copy of
 * the declared policy; admit; reject) until the library finds resild, in
 * the background of a decision (a connect attempt at most once a second,
 * never one per decision); it then defines what was remembered, and every
 * handle moves to the shared policy by itself. A permit taken pending is
 * released where it was taken. Refused at once only for what waiting
 * cannot mend: -EACCES (the socket's group), -ENAMETOOLONG, -EINVAL. */
#define RESIL_OPEN_PENDING (1u << 0)

/* resil_open with options (NULL opts: resil_open(ret, NULL)). */
RESIL_API int resil_open_ex(resil_t **ret, const struct resil_open_opts *opts);
/* 1: decisions are made in resild's segments; 0: pending (or embedded,
 * or a handle without segments); -EINVAL for NULL. Reads one pointer. */
RESIL_API int resil_attached(const resil_t *r);

/* What this process decided on policy p while it was pending: calls
 * admitted (counted when released) and rejected by the fallback. Kept
 * after the process attached (resild shows them too: resilctl show). */
struct resil_pending_stats {
	uint64_t admitted;
	uint64_t rejected;
	uint64_t reserved[6];
};
RESIL_API int resil_policy_pending_stats(const resil_policy_t *p, struct resil_pending_stats *st);

/* No daemon: a private segment pair, shared with children forked later.
 * Decides exactly like daemon mode. */
RESIL_API int resil_open_embedded(resil_t **ret, const struct resil_embedded_opts *opts);
RESIL_API void resil_close(resil_t *r);

/* Declare a policy: "key = value; ..." (docs/configuration.md); -EINVAL for a
 * configuration without a key. resild creates it or re-defines it; a
 * pending handle remembers it (and decides it by its policy.fallback). */
RESIL_API int resil_define(resil_t *r, const char *name, const char *config);
/* Check a declaration as resil_define takes it, without a handle or a
 * daemon (a server's configuration test): 0, or -EINVAL with
 * resil_last_error() saying why (a bad name, "line 2: ..."); a NULL
 * config checks the name alone (as resil_policy takes it). A caller
 * that must never sleep (an event loop) passes RESIL_CHECK_NO_WAIT: a
 * configuration whose acquire may sleep (bulkhead.wait, limit.wait) is
 * then refused too. */
#define RESIL_CHECK_NO_WAIT (1u << 0)
RESIL_API int resil_config_check(const char *name, const char *config, unsigned flags);
/* Delete a policy: handles to it give -ENOENT / RESIL_REJECT_OPEN after. */
RESIL_API int resil_delete(resil_t *r, const char *name);
/* A handle to NAME, valid until resil_close; -ENOENT if unknown. A
 * pending handle gives a handle to a name it did not declare too: it
 * admits until the process attaches, then is what resild says. */
RESIL_API int resil_policy(resil_t *r, const char *name, resil_policy_t **ret);

/* Replace the clock (and the random source) of this process and of the
 * children it forks afterwards: for tests and simulations (embedded mode,
 * or daemon mode with a clock every process shares). */
RESIL_API int resil_set_clock(resil_t *r, resil_clock_fn fn, void *ctx);
RESIL_API int resil_set_random(resil_t *r, uint64_t (*fn)(void *ctx), void *ctx);

/* The hot path: no syscall, no lock, no allocation. Returns RESIL_ADMIT
 * (0: the call may go ahead; release the permit after it), a positive
 * enum resil_verdict (rejected: nothing to release), or a negative errno,
 * a bug of the caller's or a policy that is gone, never a verdict:
 *   -EINVAL  p or permit NULL; resil_acquire_key with len but no key;
 *            resil_acquire_ex with key_len but no key, permits < 0, or a
 *            priority that is not a RESIL_PRIO_*; a key on a policy
 *            without a keyed limiter (limit.keys), or no key on one
 *            without limit.default_key (resil_policy_keyed says which);
 *   -ENOENT  the policy was deleted since the handle was taken (the
 *            handle decides again once the name is defined again). */
RESIL_API int resil_acquire(resil_policy_t *p, resil_permit_t *permit);
RESIL_API int resil_acquire_key(resil_policy_t *p, const void *key, size_t len,
				resil_permit_t *permit);
RESIL_API int resil_acquire_ex(resil_policy_t *p, const struct resil_req *req,
			       resil_permit_t *permit);
RESIL_API void resil_release(resil_policy_t *p, resil_permit_t *permit, int outcome);
/* After a rejection, its Retry-After where the policy knows one, else 0:
 * RESIL_REJECT_LIMITED, until a permit frees; RESIL_REJECT_OPEN, until
 * the breaker lets its next probe through (0 when forced open or while
 * its probes are out); RESIL_REJECT_FULL and the others, 0. */
RESIL_API int64_t resil_permit_wait_ns(const resil_permit_t *permit);

/* Map an errno (negative or positive) or an HTTP status to an outcome, the
 * usual way, with the policy's breaker.record overrides. */
RESIL_API int resil_outcome_http(const resil_policy_t *p, int status);
RESIL_API int resil_outcome_errno(const resil_policy_t *p, int err);

/* Breaker control (root, the admin group or the policy's creator). */
RESIL_API int resil_force_state(resil_t *r, const char *name, int state); /* RESIL_STATE_* */
RESIL_API int resil_reset(resil_t *r, const char *name);
RESIL_API int resil_policy_state(const resil_policy_t *p); /* RESIL_STATE_* or -errno */
RESIL_API const char *resil_policy_name(const resil_policy_t *p);
/* 1 if an acquire on p may sleep (bulkhead.wait or limit.wait), 0 if it
 * never does, or -errno: bindings give up their own lock around it. */
RESIL_API int resil_policy_may_wait(const resil_policy_t *p);
/* 1 when p has a keyed limiter (limit.keys: a call gives a key, or
 * counts against limit.default_key), 0 when a key would be -EINVAL; or
 * -errno (-ENOENT: deleted). For bindings that hand a request's key (a
 * client's address) to whatever policy they are given. */
RESIL_API int resil_policy_keyed(const resil_policy_t *p);

/* Retries: state on the caller's stack. begin: deadline_ns absolute on the
 * policy clock, 0 none (inside a resil_call attempt, never later than that
 * attempt's deadline). next: report each attempt's class, RESIL_ERR_NONE
 * for a success too (it refunds the retry budget); returns the delay
 * before the next attempt (>= 0) or < 0 to stop. reason: why it stopped,
 * in words (a per-thread buffer, valid until the next call). */
RESIL_API void resil_retry_begin(resil_policy_t *p, resil_retry_t *rt, int64_t deadline_ns);
RESIL_API int64_t resil_retry_next(resil_retry_t *rt, int error_class, int64_t retry_after_ns);
RESIL_API const char *resil_retry_reason(const resil_retry_t *rt);

/* Run fn under the whole policy: acquire, deadline, classify, release,
 * retry, hedge. fn returns 0 or a RESIL_ERR_* class. resil_call returns 0
 * on success, a RESIL_REJECT_* verdict when the policy refused the
 * attempt, RESIL_CALL_ERR + the last class when fn's errors ended the
 * retries, or -errno. A retry the budget refused returns
 * RESIL_REJECT_BUDGET. The breaker counts TRANSIENT, THROTTLED, TIMEOUT
 * and user classes as failures and ignores PERMANENT. */
#define RESIL_CALL_ERR 1000
RESIL_API int resil_call(resil_policy_t *p, int (*fn)(void *arg, resil_attempt_t *a), void *arg);
RESIL_API int64_t resil_attempt_deadline(const resil_attempt_t *a);
RESIL_API int resil_attempt_number(const resil_attempt_t *a);
RESIL_API bool resil_attempt_cancelled(const resil_attempt_t *a);
RESIL_API void resil_attempt_retry_after(resil_attempt_t *a, int64_t ns);

/* The time base every decision uses (CLOCK_MONOTONIC, or the clock set). */
RESIL_API int64_t resil_now(const resil_t *r);

/* Why the last failing call of this thread failed, in words (the daemon's
 * message, "line 2: ..." of a configuration, the limit to raise). Never
 * NULL; "" when there is nothing to say. */
RESIL_API const char *resil_last_error(void);

/* Words for a verdict, an outcome, a state. Never NULL. */
RESIL_API const char *resil_strverdict(int verdict);
RESIL_API const char *resil_strstate(int state);

#ifdef __cplusplus
}
#endif

#endif

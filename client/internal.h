/* SPDX-License-Identifier: MIT */
/*
 * internal.h - libresil's private structures, shared by its .c files.
 *
 * struct resil is one per process (or per resil_open call); handles
 * (struct resil_policy) are allocated once per name and live until
 * resil_close, so a pointer a caller keeps never dangles.
 *
 * Thread safety: the hot path reads handles and the segments only; every
 * slow path (define, lookup, re-resolve, fork repair, control requests,
 * liveness checks and re-attach) takes r->lock (the ones a decision
 * starts only with trylock).
 *
 * Mappings: r->cur is the segment pair decisions use; a daemon restart
 * without the fd store (or a retired pair) makes attach.c map the new
 * daemon's pair and swap r->cur; older pairs stay mapped until
 * resil_close (struct resil_map).
 */
#ifndef RESIL_CLIENT_INTERNAL_H
#define RESIL_CLIENT_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>

#include "resil.h"
#include "policy.h"

struct resil_count; /* shm/count_table.h */

/* the generated protobuf-c messages (resil.pb-c.h) */
struct Resil__Request;
struct Resil__Response;

#define RESIL_XSTR(x) #x
#define RESIL_STR(x)  RESIL_XSTR(x)

/*
 * A handle's binding: what one resolve of the name found. The mapping,
 * the slot word, the record and, for a lean policy (libresil.c), its
 * state blocks, so that a decision reads them from the handle instead of
 * walking resil -> mapping -> segment -> directory -> record. Immutable
 * once published: bind() fills a new one under r->lock and publishes it
 * in the handle (release); a decision loads the pointer once (acquire)
 * and reads its fields plainly, so it never pairs a record with another
 * mapping and copies nothing. A rebind to the mapping and slot word of
 * the handle's last binding takes it again (calls never allocate); any
 * other publishes a new one, and the one it replaces is retired: a
 * thread may be deciding with it at that moment, so it is kept
 * RESIL_BINDING_GRACE_NS (a decision lasts microseconds; the grace is
 * the segments' reuse grace, docs/internals/seg.md "Reuse", for the same reason),
 * then goes to the handle's spares, which the next binds take before
 * they allocate (the one that rested longest first). A spare keeps a
 * binding's memory: a thread stopped inside a decision for longer than
 * the grace (SIGSTOP, a debugger; the crash window docs/internals/seg.md's "Reuse"
 * accepts for records) reads a mix of two bindings' pointers into
 * mappings that stay mapped, not freed memory; only spares beyond
 * RESIL_BINDING_SPARES that rested RESIL_BINDING_REST_NS are freed. So
 * a handle holds the bindings of the last grace period's changes and the
 * spares of the last minute's, a bind walks nothing (it costs the same
 * after 16,000 redefinitions as after one), and a burst of changes is
 * paid back. The binding is only a cache: every decision still compares
 * the slot word (acquire) with `word`, and m with r->cur.
 */
struct resil_binding {
	struct resil_binding *next; /* the handle's retired or spare list, under r->lock */
	int64_t retired_ns;	    /* CLOCK_MONOTONIC when it was replaced (or spared) */
	struct resil_map *m;
	ra64 *slotp;		     /* the slot word's address in m */
	ra32 *flagsp;		     /* m's cfg->flags (RESIL_SEG_RETIRED) */
	const struct resil_rec *rec; /* NULL: unbound */
	uint64_t word;		     /* the slot word bound; 0: resolve first */
	uint32_t where;		     /* the permit's where for rec (permit_where) */
	uint32_t held;		     /* the permit's flags for rec: HELD | tag (permit_held) */
	/*
	 * The decision path's branches (acquire.c, release.c), chosen from
	 * rec once, here (bind.c, branches_of). steps: RESIL_STEP_GENERAL,
	 * resil_policy_acquire and _release decide, with a whole context;
	 * else a bit per component the branches decide (below), each of
	 * whose blocks is NULL when the policy has none (the counters always
	 * have a block).
	 */
	uint8_t steps;
	bool keyed;	 /* a keyed limiter (limit.keys): a call may give a key */
	uint8_t lim_way; /* the limiter's way: RESIL_LIM_* (binding.h) */
	void *stats_st;	 /* the counters' block */
	void *bk_st;	 /* a breaker without a slow-call rate (resil_breaker_lean) */
	void *lim_st;	 /* a limiter without reservation (limit.wait = 0) */
	void *bh_st;	 /* a bulkhead */
	uint32_t bh_n;	 /* a fail-fast bulkhead of spread slots and host scope: its
			  * slot count (the thread's last slot first); 0: the
			  * bulkhead's own acquire and release decide */
	/* the count table's block of rec's slot (count_base, binding.h):
	 * nobody's when the mapping has none */
	struct resil_count *cnt;
	uint32_t bk_off; /* the breaker's window offset (resil_breaker_win_off), any path */
	/* the breaker's OPEN wait and streak bits (resil_breaker_lean_wait),
	 * and its longest wait: the bound of a Retry-After (resil_breaker_wait_cap) */
	int64_t bk_wait;
	uint64_t bk_streaks;
	int64_t bk_cap;
	/* the segment's hash seeds (fixed for its life), so that a key's hash
	 * waits for no load but this line's */
	uint64_t key_seeds[2];
};

#define RESIL_STEP_GENERAL  1u
#define RESIL_STEP_BREAKER  2u /* bk_st */
#define RESIL_STEP_LIMIT    4u /* lim_st */
#define RESIL_STEP_BULKHEAD 8u /* bh_st */

/* A handle: a name and its binding. */
struct resil_policy {
	struct resil *r;
	struct resil_policy *next; /* r->policies list, under r->lock */
	/* never NULL: resil_priv_unbound until the first bind */
	const struct resil_binding *_Atomic b;
	/* under r->lock: the binding published last (NULL: none yet), the
	 * ones it replaced, oldest first, and the spares */
	struct resil_binding *last;
	struct resil_binding *retired, *retired_tail;
	struct resil_binding *spares, *spares_tail;
	uint32_t nspares;
	char name[RESIL_NAME_MAX];
};
#define RESIL_BINDING_GRACE_NS (1000LL * RESIL_NS_PER_MS)
#define RESIL_BINDING_SPARES   8
#define RESIL_BINDING_REST_NS  (60000LL * RESIL_NS_PER_MS)

/* The binding of a handle that must resolve first (word 0). */
extern const struct resil_binding resil_priv_unbound;

/*
 * One mapping of a daemon's segment pair. The first is r->map0 (its seg
 * is r->seg); each re-attach to a daemon with other segments adds one,
 * and none is unmapped before resil_close: another thread may still be
 * deciding on it, and permits granted in it are released into it.
 * Fields are written before the mapping is published in r->cur (release)
 * and never change after, except row (after fork, under r->lock).
 */
struct resil_map {
	struct resil_seg *seg; /* &r->seg for map0, &own for later ones */
	struct resil_seg own;
	uint64_t tag;		 /* the segments' epoch: random per pair */
	uint32_t seq;		 /* 0, 1, 2... in attach order; permits carry seq % 32 */
	_Atomic int row;	 /* this process's row in these segments, -1 none */
	/* what decisions claim with here: resil_client_claim_id(row, pid);
	 * stored relaxed with row (under r->lock, or in a child before it
	 * holds anything), loaded relaxed by every decision */
	ra32 claim_id;
	uint64_t row_owner;	 /* row's owner word as we took it (under r->lock) */
	struct resil_map *older; /* the mapping it replaced, NULL for map0 */
	/* a pair of this process's own, no daemon's: what a pending handle
	 * decides on (pending.c); on r->locals, never on another's chain */
	bool local;
	struct resil_map *next_local; /* r->locals, under r->lock */
	/* this process's count table for these segments (counts.c): mapped
	 * read-write, counts_cap policy slots, its memfd kept to hand it
	 * again; NULL and -1: none. Made before the mapping is published and
	 * fixed for its life (a forked child maps private memory at the same
	 * address). counts_*: for the connection (r->conn_gen), the row and
	 * the daemon pid it was last handed, under r->lock */
	void *counts;
	uint32_t counts_cap;
	int counts_fd;
	uint64_t counts_conn;
	int counts_row;
	uint32_t counts_daemon;
};

/* A {fn, ctx} pair published by resil_set_clock/_random, kept until
 * resil_close; never changed once published. */
struct resil_retired {
	struct resil_retired *older;
	bool is_clock;
	union {
		struct resil_clock clock;
		struct resil_random random;
	};
};

/* Where a definition stands with the daemon the process maps. */
enum resil_def_state {
	RESIL_DEF_UNSENT = 0, /* no daemon answered it yet: decided on r->local */
	RESIL_DEF_SENT,	      /* the daemon took it */
	RESIL_DEF_REFUSED,    /* the daemon refused it: decided on r->local */
};

/* A policy this process defined (name + text), re-defined on a daemon
 * that starts with fresh segments. In definition order, under r->lock.
 * reported_*: the pending decisions already told to resild. */
struct resil_def {
	struct resil_def *next;
	enum resil_def_state state;
	uint64_t reported_admitted, reported_rejected;
	char name[RESIL_NAME_MAX];
	char text[];
};

struct resil {
	struct resil_seg seg; /* the segments resil_open mapped (map0's) */
	struct resil_map map0;
	struct resil_map *_Atomic cur; /* in use; swapped (release) by a re-attach */
	bool embedded;
	/* resil_open_ex with RESIL_OPEN_PENDING: decide without resild until
	 * it is found (pending.c); fixed at open */
	bool pending_ok;
	char socket_path[108];

	pthread_mutex_t lock; /* slow paths */
	int ctl_fd;	      /* control connection, -1 until needed */
	pid_t ctl_pid;	      /* the process that opened ctl_fd: a child never uses it */

	/* The clock and the random source, each an immutable {fn, ctx} pair
	 * published as one pointer, so a decision never calls a new fn with
	 * an old ctx. Written (release) by resil_set_clock/_random under
	 * lock, after the new pair is whole; loaded (acquire) by every
	 * decision (fill_ctx), which copies the pair. Never NULL. Every pair
	 * published stays on `retired` until resil_close: a thread may be
	 * copying a replaced one at that moment. */
	const struct resil_clock *_Atomic clock;
	const struct resil_random *_Atomic random;
	struct resil_retired *retired; /* under lock */

	/* identity: rewritten in a forked child before it holds anything */
	_Atomic int row; /* client row, -1 unregistered */
	ra32 fork_gen;	 /* resil_fork_gen when row/pid were last set */
	uint32_t pid;
	uint64_t start_time;
	uint32_t uid;

	struct resil_policy *policies;
	struct resil_def *defs; /* what resil_define sent, for a fresh daemon */
	uint32_t unsent;	/* defs in RESIL_DEF_UNSENT, under lock */
	/* this process's own pair (pending_ok): r->cur while pending, and
	 * where a definition no daemon took is decided; NULL until needed.
	 * Under lock; never unmapped before resil_close. */
	struct resil_map *local;
	/* every local pair made, newest first: pushed (release) under lock,
	 * read (acquire) without it by a release (resil_priv_find_map) */
	struct resil_map *_Atomic locals;
	uint32_t next_seq; /* the seq of the next mapping, under lock */

	/* daemon liveness (daemon mode): the periodic check (resil_priv_check)
	 * runs when a decision's clock reading passes next_check_ns */
	ra64 next_check_ns;    /* policy clock; relaxed: a hint, re-checked under lock */
	ra64 next_probe_ns;    /* CLOCK_MONOTONIC: earliest next socket probe; written
				* under lock, read relaxed before trylock (a hint) */
	uint64_t daemon_epoch; /* epoch in the last hello, under lock */
	ra32 reattaches;       /* re-attaches done (statistics, tests); relaxed */
	/* a decision that read no clock checks every (mask + 1)th call of
	 * its thread: RESIL_CLOCKLESS_MASK; 0 while pending (pending.c), so
	 * that every decision looks whether a check is due. Written under
	 * lock, read relaxed by decisions (a hint: either value is safe) */
	ra32 clockless_mask;
	ra32 row_claims; /* rows claimed again after one was lost (tests); relaxed */

	/* control connection state, under lock */
	uint64_t req_id;    /* last request id sent */
	uint64_t conn_gen;  /* connections opened (hello answered) */
	int pass_fd;	    /* the descriptor the next request carries, -1: none */
	uint32_t version;   /* protocol version the daemon chose */
	uint32_t abi_major; /* what the daemon's hello said */
	uint32_t abi_minor;
	bool replied;		 /* the last request got an answer (an error too), or not */
	bool mapped;		 /* seg holds a mapping (false for a control-only handle) */
	bool table_full;	 /* no client row could be claimed: decisions are counted */
	struct resil *next_open; /* every open handle of the process, for pthread_atfork */
};

/* Control-only handle (resilctl): a connection, no segments. */
int resil_priv_open_ctl(struct resil **ret, const char *socket_path);

/* The socket path to use: path, else $RESIL_SOCKET, else the default. */
#define RESIL_DEFAULT_SOCKET "/run/resild/control.sock"
const char *resil_priv_socket_path(const char *path);
/* The bound on every control wait, in ms ($RESIL_CONNECT_TIMEOUT_MS, 5000). */
int resil_priv_timeout_ms(void);

/* Open the control connection now if this process has none (hello
 * included): 0, or -ECONNREFUSED / -ENOENT (not running), -ETIMEDOUT,
 * -EPROTO. Under r->lock. */
int resil_priv_ctl_ensure(struct resil *r);

/* Receive the next message from the connection, whatever its id (events of
 * a subscription): timeout_ms < 0 waits forever. Under r->lock. */
int resil_priv_recv_any(struct resil *r, struct Resil__Response **resp, int timeout_ms);

/* The message of the last failing call in this thread (resil_last_error). */
void resil_priv_clearerr(void);
void resil_priv_seterr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Bumped by the pthread_atfork child handler: a hot path compares it with
 * r->fork_gen (one load of a global) to notice it runs in a new child. */
extern ra32 resil_priv_fork_gen;

/* Slow path after fork: claim this process's own row, reseed, forget the
 * parent's connection. Called when r->fork_gen != resil_priv_fork_gen. */
void resil_priv_after_fork(struct resil *r);

/* Fill a decision context for handle p; returns the current record, or
 * NULL with *err = -ENOENT when the policy is gone. No syscall. */
const struct resil_rec *resil_priv_ctx(resil_policy_t *p, struct resil_ctx *x, int *err);
/* Does rec still carry gen (it was not reused since: docs/internals/seg.md "Reuse")?
 * For whoever holds a record across a call of the application's. */
bool resil_priv_rec_current(const struct resil_rec *rec, uint32_t gen);

/* Control requests (libctl.c): one request, one response, over r->ctl_fd,
 * opened lazily by the current process. Called under r->lock. fds: room
 * for *nfds descriptors received by SCM_RIGHTS (NULL: none expected, any
 * received are closed); *nfds is set to how many arrived. A Response that
 * carries an Error gives -errno_value, its message in resil_last_error()
 * and *resp NULL. */
int resil_priv_request(struct resil *r, struct Resil__Request *req, struct Resil__Response **resp,
		       int *fds, int *nfds);

/* Open the control connection if this process has none, or if the one it
 * has was closed by the daemon, within timeout_ms; r->daemon_epoch is the
 * answering daemon's. 0 or -errno as resil_priv_ctl_ensure. Under r->lock. */
int resil_priv_ctl_probe(struct resil *r, int timeout_ms);

/* Daemon liveness and re-attach, from a decision that read the clock (now,
 * policy clock): at most once per RESIL_CHECK_NS, never waiting for
 * r->lock, and without a syscall while the daemon's heartbeat is fresh. */
#define RESIL_CHECK_NS	    (1000 * RESIL_NS_PER_MS)
#define RESIL_BEAT_STALE_NS (2000 * RESIL_NS_PER_MS) /* 20 daemon ticks */
/* bound on a probe made from a decision, ms */
#define RESIL_PROBE_HOT_MS 20
void resil_priv_check_slow(struct resil *r, int64_t now);
#define RESIL_CLOCKLESS_MASK 255u
static inline void resil_priv_check(struct resil *r, int64_t now)
{
	int64_t next;

	if (r->embedded)
		return;
	next = (int64_t)ld_relaxed(&r->next_check_ns);
	/* a clock that went backwards (a manual one) checks too */
	if (RESIL_UNLIKELY(now >= next || now < next - 2 * RESIL_CHECK_NS))
		resil_priv_check_slow(r, now);
}

/* How long an embedded define waits for configuration records earlier
 * changes left in their grace period (docs/internals/seg.md, "Reuse"): as resild
 * waits for a create (RESILD_SPACE_WAIT_NS). */
#define RESIL_DEFINE_WAIT_NS (2 * RESIL_REUSE_GRACE_NS + 100 * RESIL_NS_PER_MS)

/* permit->where: mapping seq % 32 << 27 | record + 1 */
#define RESIL_PERMIT_IDX_BITS 27
#define RESIL_PERMIT_IDX_MAX  (1u << RESIL_PERMIT_IDX_BITS)

/* Attachment (attach.c). Each under r->lock (or before r is shared). */
/* Claim this process's row in mapping m (bound_id: the client id resild
 * bound to our connection, 0 none). */
void resil_priv_claim_row(struct resil *r, struct resil_map *m, uint32_t bound_id);
/* Ask resild for its segment pair and map it into s; *bound_id as above. */
int resil_priv_get_segments(struct resil *r, struct resil_seg *s, uint32_t *bound_id);
/* The mapping whose seq % 32 is seq32, NULL if none. */
struct resil_map *resil_priv_find_map(struct resil *r, uint32_t seq32);
/* Is the daemon we map still the one serving the socket? 0 yes (or we
 * cannot tell now), 1 re-attached, <0 the probe failed. */
int resil_priv_liveness(struct resil *r, int timeout_ms);
/* After a control request: re-attach if it reached a daemon with other
 * segments. */
int resil_priv_follow(struct resil *r);
/* Claim a row again if ours was freed or taken, or we have none (at the
 * periodic check). */
void resil_priv_row_check(struct resil *r);
/* A decision found its mapping retired: look now (trylock, no wait). */
void resil_priv_retired_slow(struct resil *r);
/* Create NAME, or update it when it exists with another configuration
 * (libresil.c; a re-attach sends every definition again). */
int resil_priv_send_define(struct resil *r, const char *name, const char *config,
			   struct resil_def *d);
/* Did the last request fail for want of a daemon (rather than by its
 * refusal)? Under r->lock, right after it. */
bool resil_priv_unreachable(const struct resil *r, int err);

/* Pending handles (pending.c). Each under r->lock. */
/* Make r->local (and, pending, r->cur) a fresh pair of this process's own
 * with every remembered definition in it. */
int resil_priv_local_open(struct resil *r);
/* Define NAME in r->local as its policy.fallback says (why: the reason,
 * when refused). */
int resil_priv_local_define(struct resil *r, const char *name, const char *config, char *why,
			    size_t len);
/* A name nobody declared, asked for while pending: an admitting copy in
 * r->local, not remembered. */
int resil_priv_local_placeholder(struct resil *r, const char *name);
/* Deciding on r->local (no daemon's segments yet)? */
static inline bool resil_priv_pending(const struct resil *r)
{
	return atomic_load_explicit(&r->cur, memory_order_acquire)->local;
}
/* NAME's counters in r->local (calls released, rejections): false when
 * it is not there. */
bool resil_priv_local_counts(struct resil *r, const char *name, uint64_t *admitted,
			     uint64_t *rejected);
/* The decision context of this process in mapping m (libresil.c). */
void resil_priv_fill_ctx(struct resil *r, struct resil_map *m, struct resil_ctx *x);
/* The define lock of a pair this process writes (embedded, local). */
int resil_priv_define_lock(struct resil_seg *s);
void resil_priv_define_unlock(struct resil_seg *s);

/* Look for the daemon now if the last look is more than RESIL_CHECK_NS
 * ago: attach when pending, send what no daemon took yet. 1 when r now
 * maps a daemon's segments. */
int resil_priv_attach_try(struct resil *r);
/* The definition of NAME this process remembers, NULL if none. */
struct resil_def *resil_priv_def_find(struct resil *r, const char *name);

/* Count tables (counts.c). Each under r->lock. */
/* Make m's table (not in embedded mode, nor for a pair of our own) and
 * hand it to resild, before m is published; a table not made or not
 * taken leaves the process the rule of rows without one. */
void resil_priv_counts_open(struct resil *r, struct resil_map *m);
/* At the periodic check: hand the current mapping's table again if the
 * connection, the row or the daemon's pid changed since it was handed. */
void resil_priv_counts_check(struct resil *r);
/* In a forked child: m's table is the parent's; count nowhere. */
void resil_priv_counts_drop(struct resil_map *m);
/* resil_close: unmap m's table. */
void resil_priv_counts_close(struct resil_map *m);
/* pthread_atfork child handler: the stripes of threads not in the child. */
void resil_priv_counts_child(void);

/* Per-thread generator state, reseeded in a forked child. */
uint64_t resil_priv_random(void);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * internal.h - libresil's private structures, shared by its .c files.
 *
 * struct resil is one per process (or per resil_open call); handles
 * (struct resil_policy) are allocated once per name and live until
 * resil_close, so a pointer a caller keeps never dangles.
 *
 * Thread safety: the hot path reads handles and the segments only; every
 * slow path (define, lookup, re-resolve, fork repair, control requests)
 * takes r->lock.
 */
#ifndef RESIL_CLIENT_INTERNAL_H
#define RESIL_CLIENT_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>

#include "resil.h"
#include "policy.h"

/* the generated protobuf-c messages (resil.pb-c.h) */
struct Resil__Request;
struct Resil__Response;

#define RESIL_XSTR(x) #x
#define RESIL_STR(x)  RESIL_XSTR(x)

struct resil_policy {
	struct resil *r;
	struct resil_policy *next; /* r->policies list, under r->lock */
	ra32 slot; /* written under r->lock on a re-resolve, read relaxed by the hot path */
	ra64 word; /* the slot word last validated for this handle; 0: deleted */
	char name[RESIL_NAME_MAX];
};

struct resil {
	struct resil_seg seg;
	bool embedded;
	char socket_path[108];

	pthread_mutex_t lock; /* slow paths */
	int ctl_fd;	      /* control connection, -1 until needed */
	pid_t ctl_pid;	      /* the process that opened ctl_fd: a child never uses it */

	struct resil_clock clock;
	struct resil_random random;

	/* identity: rewritten in a forked child before it holds anything */
	_Atomic int row; /* client row, -1 unregistered */
	ra32 fork_gen;	 /* resil_fork_gen when row/pid were last set */
	uint32_t pid;
	uint64_t start_time;
	uint32_t uid;

	struct resil_policy *policies;

	/* control connection state, under lock */
	uint64_t req_id;    /* last request id sent */
	uint32_t version;   /* protocol version the daemon chose */
	uint32_t abi_major; /* what the daemon's hello said */
	uint32_t abi_minor;
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

/* Control requests (libctl.c): one request, one response, over r->ctl_fd,
 * opened lazily by the current process. Called under r->lock. fds: room
 * for *nfds descriptors received by SCM_RIGHTS (NULL: none expected, any
 * received are closed); *nfds is set to how many arrived. A Response that
 * carries an Error gives -errno_value, its message in resil_last_error()
 * and *resp NULL. */
int resil_priv_request(struct resil *r, struct Resil__Request *req, struct Resil__Response **resp,
		       int *fds, int *nfds);

/* Per-thread generator state, reseeded in a forked child. */
uint64_t resil_priv_random(void);

#endif

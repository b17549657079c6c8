/* SPDX-License-Identifier: MIT */
/*
 * loop_priv.h - what loop.c (the ring, the tick, the signals, the
 * watches) and loop_conn.c (the control socket's connections) share: the
 * user_data packing, the connection and the loop's state. Private to
 * them; the loop thread alone touches any of it.
 */
#ifndef RESILD_LOOP_PRIV_H
#define RESILD_LOOP_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include <liburing.h>

#include "ctl.h"
#include "resild.h"

#define RING_ENTRIES 512
#define OQ_MAX	     64	 /* queued replies before we stop reading a connection */
#define SUB_OQ_MAX   256 /* queued events per subscriber */
#define GROUPS_MAX   1024
/* Descriptors kept free for the control path (a request's reopened
 * segments, a client's pidfd, a reload's files, the journal): a
 * connection accepted into them closes the longest idle connection of
 * the uid that holds the most. */
#define FD_RESERVE 32

enum op {
	OP_ACCEPT = 1,
	OP_RECV,
	OP_SEND,
	OP_SIGNAL,
	OP_TICK,
	OP_PIDFD,
	OP_WAKE,
	OP_IGNORE, /* cancellations, poll removals */
};

static inline uint64_t ud(enum op op, uint32_t idx, uint32_t cookie)
{
	return (uint64_t)op << 56 | (uint64_t)(idx & 0xffffffu) << 32 | cookie;
}
static inline enum op ud_op(uint64_t u)
{
	return (enum op)(u >> 56);
}
static inline uint32_t ud_idx(uint64_t u)
{
	return (uint32_t)(u >> 32) & 0xffffffu;
}
static inline uint32_t ud_cookie(uint64_t u)
{
	return (uint32_t)u;
}

struct out_msg {
	struct out_msg *next;
	struct msghdr mh;
	struct iovec iov;
	union {
		char buf[CMSG_SPACE(sizeof(int) * RESILD_HANDLE_FDS)];
		struct cmsghdr align;
	} cmsg;
	int fds[RESILD_HANDLE_FDS];
	int nfds;
	size_t len;
	uint8_t data[];
};

struct conn {
	int fd; /* -1: free slot */
	uint32_t gen;
	struct resild_peer peer;
	gid_t *groups;
	uint8_t *rbuf;
	struct msghdr rmh;
	struct iovec riov;
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} rcmsg;
	bool recv_armed;
	bool send_armed;
	bool close_after_send; /* an error reply to a malformed request */
	bool closing;
	bool held;	    /* cut off, kept until the peer reads what pins descriptors */
	size_t later_len;   /* a request kept in rbuf to be answered later, 0: none */
	unsigned fd_unread; /* replies with descriptors since the peer last read all */
	int64_t active_ns;  /* last request received or reply taken */
	struct out_msg *oq_head, *oq_tail;
	unsigned oq_len;
	uint64_t dropped; /* events a slow subscriber missed */
};

struct resild_loop {
	struct io_uring ring;
	int sigfd;
	struct signalfd_siginfo sig;
	struct __kernel_timespec tick;
	int wakefd; /* the cluster thread's eventfd, -1: none */
	uint64_t wake;
	bool multishot;
	bool accept_armed;
	bool signal_armed; /* a read on sigfd is in flight */
	bool tick_armed;   /* the tick's timeout is in flight */
	bool wake_armed;   /* a read on wakefd is in flight */
	/* RESILD_TEST_ARM_FAIL=KIND:FROM:N (KIND tick, signal or accept): the
	 * FROM-th arm of KIND and the N - 1 after it fail as a full ring would
	 * (tests/int_loop_rearm.c), read once at init */
	char fail_kind[8];
	unsigned fail_from, fail_n, arms[3];
	struct conn *conns;
	uint32_t cap;
	uint32_t nconns;
	uint8_t *obuf; /* scratch for one packed reply */
	uint64_t watchdog_ns;
	int64_t last_watchdog;
	int fd_max; /* RLIMIT_NOFILE's soft limit, raised to the hard one at init */
	char status[128];
};

/* loop.c */
struct io_uring_sqe *get_sqe(struct resild_loop *l);
int arm_accept(struct resild *d);

/* loop_conn.c: the completions of a connection's operations, its end,
 * and the tick's passes over the connections */
void on_accept(struct resild *d, int res, unsigned flags);
void on_recv(struct resild *d, struct conn *c, int res);
void on_send(struct resild *d, struct conn *c, int res);
void conn_free(struct resild *d, struct conn *c);
void scan_conns(struct resild *d, int64_t now);
void answer_later(struct resild *d, int64_t now);

#endif

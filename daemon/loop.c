/* SPDX-License-Identifier: MIT */
/*
 * loop.c - resild's single-threaded io_uring event loop.
 *
 * Size: above 900 lines on purpose: one io_uring loop. Every completion
 * handler (accept, recv, send, signal, tick, wake, pidfd) shares the ring,
 * the connection table and the user_data packing (ud, ud_op, ud_idx,
 * ud_cookie); apart, each would export them.
 *
 * Everything the daemon waits for is one io_uring operation:
 *   accept    multishot accept on the listening socket (plain accept,
 *             re-armed each time, on kernels without multishot);
 *   recvmsg   one outstanding per connection, into a buffer of
 *             RESILD_MSG_MAX + 1 bytes; MSG_TRUNC or a longer datagram
 *             marks an oversized request;
 *   sendmsg   one outstanding per connection, from its queue of packed
 *             Responses, with SCM_RIGHTS when the reply carries fds;
 *   read      on a signalfd for SIGTERM, SIGINT (stop) and SIGHUP (reload);
 *   timeout   the maintenance tick (RESILD_TICK_NS);
 *   read      on the cluster thread's eventfd (its answers are ready);
 *   poll      POLLIN on the pidfd of each client row (the process exited).
 * user_data packs the operation, a connection or row index and a cookie
 * (a connection's generation, a watch's cookie), so a completion that
 * arrives for a connection or watch that was closed and reused meanwhile
 * is recognised and dropped.
 *
 * A connection is freed only when none of its operations is in flight:
 * closing one shuts the socket down and cancels its operations, and the
 * last completion frees it. Memory a peer can make us hold is bounded:
 * RESILD_MSG_MAX per receive buffer, at most OQ_MAX queued replies per
 * connection (we stop reading from a peer that does not read its
 * replies), SUB_OQ_MAX queued events per subscriber (more are dropped and
 * counted), opts.max_conns connections (a newcomer past it gets an error
 * Response and is closed; nobody else notices).
 *
 * Nothing one peer can exhaust for the others:
 *   - opts.max_conns_per_uid connections per uid (root, the daemon's uid
 *     and the admin group exempt), below max_conns, so one uid cannot take
 *     every slot; a newcomer past it is refused with the limit named;
 *   - a connection that is not a subscriber and has neither sent a request
 *     nor taken a reply for opts.idle_timeout_ns is closed at a tick (the
 *     library reconnects on its next request without the caller noticing);
 *   - descriptors in flight: a reply carrying descriptors (GetSegments)
 *     pins them in the kernel until the peer reads it, and they count
 *     against our uid's cap on descriptors in flight (ETOOMANYREFS for a
 *     non-root daemon) and, while queued here, against our RLIMIT_NOFILE.
 *     A connection may leave at most RESILD_FD_REPLIES_UNREAD_MAX such
 *     replies unread (SIOCOUTQ tells whether the peer read what we sent);
 *     past that it gets an error and is cut off. Closing our end would not
 *     free what the peer has not read, and a peer that reconnects could
 *     pile up more, so a cut-off connection whose replies are still unread
 *     is held: it is served no more, keeps its slot (and counts against
 *     its uid) until the peer reads them or hangs up. So a uid pins at
 *     most max_conns_per_uid * RESILD_FD_REPLIES_UNREAD_MAX * 2 descriptors.
 *
 * Nothing here touches shared memory except through the modules the tick
 * calls (policy maintenance, the client registry, the event drain).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include "clients.h"
#include "cluster.h"
#include "ctl.h"
#include "events.h"
#include "log.h"
#include "loop.h"
#include "notify.h"
#include "policy.h"
#include "resild.h"
#include "segmove.h"

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

static struct io_uring_sqe *get_sqe(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* A test's injected failure of the arm of kind k (0 accept, 1 signal,
 * 2 tick): see fail_kind. */
static bool arm_fails(struct resild_loop *l, unsigned k)
{
	static const char *const kinds[] = {"accept", "signal", "tick"};
	unsigned n = ++l->arms[k];

	return l->fail_n && strcmp(l->fail_kind, kinds[k]) == 0 && n >= l->fail_from &&
	       n < l->fail_from + l->fail_n;
}

/*
 * Re-arming. Every operation that completes once (the tick's timeout, the
 * signalfd and eventfd reads, a plain accept) is queued again by its
 * handler; a queue that fails (no submission entry: the ring is full of
 * replies and pidfd polls even after a submit) would stop maintenance,
 * shutdown or accepting for good. So each keeps an armed flag, and a
 * failed arm is tried again at the next tick (on_tick) and, for the tick
 * itself, before each wait of the loop, which then waits at most a tick
 * and runs on_tick itself when nothing else wakes it.
 */
static int arm_accept(struct resild *d)
{
	struct resild_loop *l = d->loop;
	struct io_uring_sqe *sqe = arm_fails(l, 0) ? NULL : get_sqe(l);

	if (!sqe)
		return -EBUSY;
	if (l->multishot)
		io_uring_prep_multishot_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	else
		io_uring_prep_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, ud(OP_ACCEPT, 0, 0));
	l->accept_armed = true;
	return 0;
}

static int arm_signal(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = arm_fails(l, 1) ? NULL : get_sqe(l);

	if (!sqe) {
		log_warning(
		    "cannot queue the signal read (ring full): tried again at the next tick");
		return -EBUSY;
	}
	io_uring_prep_read(sqe, l->sigfd, &l->sig, sizeof(l->sig), 0);
	io_uring_sqe_set_data64(sqe, ud(OP_SIGNAL, 0, 0));
	l->signal_armed = true;
	return 0;
}

static int arm_tick(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = arm_fails(l, 2) ? NULL : get_sqe(l);

	if (!sqe) {
		log_warning("cannot queue the tick (ring full): the loop ticks by its own wait");
		return -EBUSY;
	}
	l->tick.tv_sec = RESILD_TICK_NS / RESIL_NS_PER_S;
	l->tick.tv_nsec = RESILD_TICK_NS % RESIL_NS_PER_S;
	io_uring_prep_timeout(sqe, &l->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, ud(OP_TICK, 0, 0));
	l->tick_armed = true;
	return 0;
}

static int arm_wake(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, l->wakefd, &l->wake, sizeof(l->wake), 0);
	io_uring_sqe_set_data64(sqe, ud(OP_WAKE, 0, 0));
	l->wake_armed = true;
	return 0;
}

int resild_loop_watch_wake(struct resild *d, int fd)
{
	d->loop->wakefd = fd;
	return fd >= 0 ? arm_wake(d->loop) : 0;
}

/* The cluster thread's answers are ready: apply them now. A read that
 * fails leaves them to the tick (logged once). */
static void on_wake(struct resild *d, int res)
{
	d->loop->wake_armed = false;
	if (res == -EINTR || res == -EAGAIN || res > 0) {
		if (res > 0)
			resild_cluster_woken(d);
		if (!d->stopping)
			arm_wake(d->loop);
		return;
	}
	log_error_errno(res, "cluster eventfd: %m; answers wait for the tick");
}

static int arm_recv(struct resild *d, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(d->loop);

	if (!sqe)
		return -EBUSY;
	c->riov.iov_base = c->rbuf;
	c->riov.iov_len = RESILD_MSG_MAX + 1;
	memset(&c->rmh, 0, sizeof(c->rmh));
	c->rmh.msg_iov = &c->riov;
	c->rmh.msg_iovlen = 1;
	c->rmh.msg_control = c->rcmsg.buf;
	c->rmh.msg_controllen = sizeof(c->rcmsg.buf);
	io_uring_prep_recvmsg(sqe, c->fd, &c->rmh, MSG_CMSG_CLOEXEC);
	io_uring_sqe_set_data64(sqe, ud(OP_RECV, (uint32_t)(c - d->loop->conns), c->gen));
	c->recv_armed = true;
	return 0;
}

static int arm_send(struct resild *d, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(d->loop);
	struct out_msg *m = c->oq_head;

	if (!sqe)
		return -EBUSY;
	io_uring_prep_sendmsg(sqe, c->fd, &m->mh, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, ud(OP_SEND, (uint32_t)(c - d->loop->conns), c->gen));
	c->send_armed = true;
	return 0;
}

static void out_free(struct out_msg *m)
{
	for (int i = 0; i < m->nfds; i++)
		close(m->fds[i]);
	free(m);
}

static void conn_free(struct resild *d, struct conn *c)
{
	struct out_msg *m, *n;

	for (m = c->oq_head; m; m = n) {
		n = m->next;
		out_free(m);
	}
	c->oq_head = c->oq_tail = NULL;
	c->oq_len = 0;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->rbuf);
	c->rbuf = NULL;
	free(c->groups);
	c->groups = NULL;
	c->gen++;
	d->loop->nconns--;
	d->nconns = d->loop->nconns;
	/* a descriptor came free: an accept that stopped on EMFILE goes on */
	if (!d->loop->accept_armed && !d->stopping)
		(void)arm_accept(d);
}

static void conn_close(struct resild *d, struct conn *c)
{
	if (!c->closing) {
		c->closing = true;
		resild_peer_gone(d, &c->peer);
		if (c->recv_armed || c->send_armed) {
			struct io_uring_sqe *sqe = get_sqe(d->loop);

			shutdown(c->fd, SHUT_RDWR);
			if (sqe) {
				io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
				io_uring_sqe_set_data64(sqe, ud(OP_IGNORE, 0, 0));
			}
		}
	}
	if (!c->recv_armed && !c->send_armed)
		conn_free(d, c);
}

/* Queue a copy of msg (and take ownership of fds). 0, or -ENOBUFS. */
static int conn_queue(struct resild *d, struct conn *c, const uint8_t *msg, size_t len,
		      const int *fds, int nfds)
{
	struct out_msg *m = malloc(sizeof(*m) + len);

	if (!m) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return -ENOMEM;
	}
	memset(m, 0, sizeof(*m));
	memcpy(m->data, msg, len);
	m->len = len;
	m->iov.iov_base = m->data;
	m->iov.iov_len = len;
	m->mh.msg_iov = &m->iov;
	m->mh.msg_iovlen = 1;
	m->nfds = nfds;
	if (nfds > 0) {
		struct cmsghdr *cm;

		memcpy(m->fds, fds, sizeof(int) * (size_t)nfds);
		m->mh.msg_control = m->cmsg.buf;
		m->mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&m->mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	if (c->oq_tail)
		c->oq_tail->next = m;
	else
		c->oq_head = m;
	c->oq_tail = m;
	c->oq_len++;
	if (!c->send_armed)
		return arm_send(d, c);
	return 0;
}

static void maybe_recv(struct resild *d, struct conn *c)
{
	if (c->closing || c->recv_armed || c->later_len)
		return;
	if (!c->held && (c->close_after_send || c->oq_len >= OQ_MAX))
		return;
	if (arm_recv(d, c) < 0)
		conn_close(d, c);
}

/* A newcomer past a limit: one error reply (id 0: about the connection,
 * not a request), sent without waiting, then closed. What the peer sent
 * already is read and dropped first: closing a socket with unread data
 * makes the peer's next recv fail with ECONNRESET before it sees our
 * reply. */
static void refuse(int fd, const char *msg)
{
	uint8_t buf[512];
	size_t len = sizeof(buf);
	char junk[256];

	for (int i = 0; i < 8 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
		;
	if (resild_error_reply(0, -EUSERS, msg, buf, &len) == 0)
		(void)send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(fd);
}

/* Bytes we sent on c that its peer has not read yet (0 on error). */
static int outq(const struct conn *c)
{
	int n = 0;

	if (ioctl(c->fd, SIOCOUTQ, &n) < 0)
		return 0;
	return n;
}

static uint32_t conns_of_uid(const struct resild_loop *l, uid_t uid)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < l->cap; i++)
		if (l->conns[i].fd >= 0 && l->conns[i].peer.uid == uid)
			n++;
	return n;
}

/* Stop serving c. When the peer still has replies with descriptors
 * unread, hold it (see the top of this file); else close it. */
static void conn_cut(struct resild *d, struct conn *c)
{
	if (c->closing || c->held)
		return;
	if (c->fd_unread > 0 && (c->oq_len > 0 || outq(c) > 0)) {
		c->held = true;
		resild_peer_gone(d, &c->peer);
		if (!c->recv_armed && arm_recv(d, c) < 0)
			conn_close(d, c);
		return;
	}
	conn_close(d, c);
}

/* The peer's supplementary groups (SO_PEERGROUPS), at most GROUPS_MAX:
 * their number, 0 when unknown (then only the primary group counts). */
static int peer_groups(int fd, gid_t **ret)
{
	socklen_t len = sizeof(gid_t) * 64;
	gid_t *g = malloc(len);

	*ret = NULL;
	if (!g)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
		gid_t *n;

		if (errno != ERANGE || len > sizeof(gid_t) * GROUPS_MAX || !(n = realloc(g, len))) {
			free(g);
			return 0;
		}
		g = n;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
			free(g);
			return 0;
		}
	}
	*ret = g;
	return (int)(len / sizeof(gid_t));
}

/* Make room in the descriptor table: close the longest idle connection
 * (not a subscriber, nothing in flight but its read, no request kept for
 * later) of the uid that holds the most connections, except keep. true
 * when one was closed. */
static bool evict_idle(struct resild *d, const struct conn *keep)
{
	struct resild_loop *l = d->loop;
	struct conn *victim = NULL;
	uint32_t vn = 0;

	for (uint32_t i = 0; i < l->cap; i++) {
		struct conn *c = &l->conns[i];
		uint32_t n;

		if (c->fd < 0 || c == keep || c->closing || c->held || c->peer.subscriber ||
		    c->send_armed || c->oq_len || c->later_len)
			continue;
		n = conns_of_uid(l, c->peer.uid);
		if (!victim || n > vn || (n == vn && c->active_ns < victim->active_ns)) {
			victim = c;
			vn = n;
		}
	}
	if (!victim)
		return false;
	log_info("descriptors near the limit (%d): closed the idle connection of pid %d uid %u "
		 "(uid holds %u)",
		 l->fd_max, (int)victim->peer.pid, (unsigned)victim->peer.uid, vn);
	d->conns_idle++;
	conn_cut(d, victim);
	return true;
}

static void on_accept(struct resild *d, int res, unsigned flags)
{
	struct resild_loop *l = d->loop;
	struct ucred cred;
	socklen_t sl = sizeof(cred);
	struct conn *c = NULL;
	char why[160];

	if (!(flags & IORING_CQE_F_MORE))
		l->accept_armed = false;
	if (res == -EINVAL && l->multishot) {
		log_info("no multishot accept on this kernel: plain accept");
		l->multishot = false;
	} else if (res < 0) {
		if (res != -ECANCELED)
			log_warning_errno(res, "accept: %m");
		/* out of descriptors: an idle connection makes room, and the
		 * accept is queued again once its descriptor is closed
		 * (conn_free); else (and for other errors, which would fail
		 * again at once) at the next tick */
		if (res == -EMFILE || res == -ENFILE)
			(void)evict_idle(d, NULL);
		if (!l->accept_armed)
			return;
	} else {
		for (uint32_t i = 0; i < l->cap; i++)
			if (l->conns[i].fd < 0) {
				c = &l->conns[i];
				break;
			}
		if (!c) {
			snprintf(why, sizeof(why),
				 "too many connections to resild (at most %u, --max-connections)",
				 d->opts.max_conns);
			refuse(res, why);
		} else if (l->fd_max > 0 && res >= l->fd_max - FD_RESERVE && !evict_idle(d, NULL)) {
			snprintf(why, sizeof(why),
				 "resild is at its descriptor limit (%d, RLIMIT_NOFILE) and every "
				 "connection is busy: try again",
				 l->fd_max);
			d->conns_refused++;
			refuse(res, why);
		} else if (getsockopt(res, SOL_SOCKET, SO_PEERCRED, &cred, &sl) < 0) {
			log_warning_errno(-errno, "SO_PEERCRED: %m");
			close(res);
		} else {
			uint32_t gen = c->gen;

			memset(c, 0, sizeof(*c));
			c->gen = gen;
			c->fd = res;
			c->peer.pid = cred.pid;
			c->peer.uid = cred.uid;
			c->peer.gid = cred.gid;
			c->rbuf = malloc(RESILD_MSG_MAX + 1);
			c->peer.ngroups = peer_groups(res, &c->groups);
			c->peer.groups = c->groups;
			c->active_ns = resil_clock_monotonic(NULL);
			l->nconns++;
			d->nconns = l->nconns;
			if (d->opts.max_conns_per_uid && !resild_peer_exempt(d, &c->peer) &&
			    conns_of_uid(l, cred.uid) > d->opts.max_conns_per_uid) {
				snprintf(why, sizeof(why),
					 "too many connections from uid %u to resild (at most %u "
					 "per uid, --max-connections-per-uid)",
					 (unsigned)cred.uid, d->opts.max_conns_per_uid);
				log_info("refused a connection of pid %d uid %u: more than %u "
					 "from that uid",
					 (int)cred.pid, (unsigned)cred.uid,
					 d->opts.max_conns_per_uid);
				d->conns_refused++;
				c->fd = -1; /* refuse closes it */
				conn_free(d, c);
				refuse(res, why);
			} else if (!c->rbuf || arm_recv(d, c) < 0) {
				conn_close(d, c);
			}
		}
	}
	if (!l->accept_armed && !d->stopping)
		arm_accept(d);
}

static void conn_answer(struct resild *d, struct conn *c, int r, int *fds, int nfds, size_t outlen);

static void on_recv(struct resild *d, struct conn *c, int res)
{
	struct resild_loop *l = d->loop;
	int fds[RESILD_HANDLE_FDS], nfds = 0, r;
	size_t outlen = RESILD_MSG_MAX;

	c->recv_armed = false;
	/* fds a peer sent us: never wanted */
	if (res >= 0 && c->rmh.msg_controllen > 0) {
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&c->rmh); cm; cm = CMSG_NXTHDR(&c->rmh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				int *p = (int *)CMSG_DATA(cm);
				size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < n; i++)
					close(p[i]);
			}
	}
	if (c->closing || res <= 0) {
		conn_close(d, c);
		return;
	}
	if (c->held) {
		/* served no more: what it sends is dropped, its hang-up awaited */
		maybe_recv(d, c);
		return;
	}
	c->active_ns = resil_clock_monotonic(NULL);
	if ((c->rmh.msg_flags & MSG_TRUNC) || (size_t)res > RESILD_MSG_MAX) {
		r = resild_error_reply(0, -EMSGSIZE, "request larger than 64 KiB", l->obuf,
				       &outlen);
		r = r < 0 ? r : RESILD_HANDLE_CLOSE;
		log_info("peer pid %d uid %u sent a request over 64 KiB: closed", (int)c->peer.pid,
			 (unsigned)c->peer.uid);
	} else {
		c->peer.wait_until = c->active_ns + RESILD_SPACE_WAIT_NS;
		r = resild_handle(d, &c->peer, c->rbuf, (size_t)res, l->obuf, &outlen, fds, &nfds);
		if (r == RESILD_HANDLE_CLOSE)
			log_info("peer pid %d uid %u sent a malformed request: closed",
				 (int)c->peer.pid, (unsigned)c->peer.uid);
		if (r == RESILD_HANDLE_LATER) {
			/* kept in rbuf; nothing more is read from the peer
			 * until it is answered (answer_later, each tick) */
			c->later_len = (size_t)res;
			return;
		}
	}
	conn_answer(d, c, r, fds, nfds, outlen);
}

/* The reply of c's request (resild_handle returned r, out in l->obuf):
 * queue it with its descriptors, and read on. */
static void conn_answer(struct resild *d, struct conn *c, int r, int *fds, int nfds, size_t outlen)
{
	struct resild_loop *l = d->loop;

	if (r < 0) {
		conn_close(d, c);
		return;
	}
	if (nfds > 0 && c->fd_unread > 0 && c->oq_len == 0 && outq(c) == 0)
		c->fd_unread = 0; /* the peer read everything we sent */
	if (nfds > 0 && c->fd_unread >= RESILD_FD_REPLIES_UNREAD_MAX) {
		char why[200];

		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		nfds = 0;
		snprintf(why, sizeof(why),
			 "more than %d replies carrying descriptors left unread on one "
			 "connection: cut off",
			 RESILD_FD_REPLIES_UNREAD_MAX);
		outlen = RESILD_MSG_MAX;
		if (resild_error_reply(0, -ETOOMANYREFS, why, l->obuf, &outlen) < 0) {
			conn_close(d, c);
			return;
		}
		log_info("peer pid %d uid %u leaves its replies with descriptors unread: "
			 "cut off",
			 (int)c->peer.pid, (unsigned)c->peer.uid);
		d->conns_cut++;
		if (conn_queue(d, c, l->obuf, outlen, NULL, 0) < 0)
			conn_close(d, c);
		else
			conn_cut(d, c);
		return;
	}
	if (nfds > 0)
		c->fd_unread++;
	if (r == RESILD_HANDLE_CLOSE)
		c->close_after_send = true;
	if (conn_queue(d, c, l->obuf, outlen, fds, nfds) < 0) {
		conn_close(d, c);
		return;
	}
	maybe_recv(d, c);
}

static void on_send(struct resild *d, struct conn *c, int res)
{
	struct out_msg *m = c->oq_head;

	c->send_armed = false;
	if (m) {
		c->oq_head = m->next;
		if (!c->oq_head)
			c->oq_tail = NULL;
		c->oq_len--;
		out_free(m);
	}
	if (c->closing || res < 0) {
		conn_close(d, c);
		return;
	}
	if (!c->held)
		c->active_ns = resil_clock_monotonic(NULL);
	if (c->oq_head) {
		if (arm_send(d, c) < 0)
			conn_close(d, c);
		return;
	}
	if (c->close_after_send) {
		conn_close(d, c);
		return;
	}
	maybe_recv(d, c);
}

void resild_loop_broadcast(struct resild *d, const uint8_t *msg, size_t len, const char *policy)
{
	struct resild_loop *l = d->loop;

	if (!l || !d->nsubscribers)
		return;
	for (uint32_t i = 0; i < l->cap; i++) {
		struct conn *c = &l->conns[i];

		if (c->fd < 0 || c->closing || c->held || !resild_peer_wants(&c->peer, policy))
			continue;
		if (c->oq_len >= SUB_OQ_MAX) {
			c->dropped++;
			continue;
		}
		if (conn_queue(d, c, msg, len, NULL, 0) < 0)
			conn_close(d, c);
	}
}

int resild_loop_watch_pid(struct resild *d, int fd, uint32_t row, uint32_t cookie)
{
	struct io_uring_sqe *sqe;

	/* no loop (the modules driven in-process, as fuzz_live does): nothing
	 * polls, an exit is only learnt through resild_clients_exited */
	if (!d->loop)
		return 0;
	sqe = get_sqe(d->loop);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	io_uring_sqe_set_data64(sqe, ud(OP_PIDFD, row, cookie));
	return 0;
}

void resild_loop_unwatch_pid(struct resild *d, uint32_t row, uint32_t cookie)
{
	struct io_uring_sqe *sqe;

	if (!d->loop)
		return;
	sqe = get_sqe(d->loop);
	if (!sqe)
		return;
	io_uring_prep_poll_remove(sqe, ud(OP_PIDFD, row, cookie));
	io_uring_sqe_set_data64(sqe, ud(OP_IGNORE, 0, 0));
}

uint32_t resild_loop_conns(const struct resild *d)
{
	return d->loop ? d->loop->nconns : 0;
}

/* A state word found out of range and repaired: counted (the daemon's
 * private count, which the metrics show from seg.repairs; st->state_repairs
 * is a copy for observers) and an event naming the policy and the word. */
void resild_state_repaired(struct resild *d, uint32_t slot, uint32_t gen, uint32_t word, uint32_t n)
{
	d->state_repairs += n;
	st_relaxed(&d->seg.repairs, d->state_repairs);
	st_relaxed(&d->seg.st->state_repairs, d->state_repairs);
	resil_event_push(&d->seg, RESIL_EV_REPAIRED, slot, gen, word, n, 0, n,
			 resil_clock_monotonic(NULL));
}

static int maintain_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			void *ctx)
{
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};

	resil_policy_maintain(&x, rec);
	if (x.repairs)
		resild_state_repaired(ctx, slot, rec->gen, x.repair_word, x.repairs);
	return 0;
}

/* Slot words are written by this daemon only (it is the configuration's
 * one writer), so a relaxed load sees our own stores. */
static uint32_t count_policies(struct resild *d)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < d->seg.cfg->slot_cap; i++)
		if (ld_relaxed(&resil_seg_slots(&d->seg)[i]))
			n++;
	return n;
}

static void update_status(struct resild *d)
{
	char s[128];

	snprintf(s, sizeof(s), "%u policies, %u clients", count_policies(d),
		 resild_clients_live(d));
	if (strcmp(s, d->loop->status)) {
		snprintf(d->loop->status, sizeof(d->loop->status), "%s", s);
		resild_notify_status(s);
	}
}

/* Held connections whose peer read everything are closed; silent ones
 * are cut (subscribers wait for events: never silent by choice). */
static void scan_conns(struct resild *d, int64_t now)
{
	struct resild_loop *l = d->loop;

	for (uint32_t i = 0; i < l->cap; i++) {
		struct conn *c = &l->conns[i];

		if (c->fd < 0 || c->closing)
			continue;
		if (c->held) {
			if (c->oq_len == 0 && outq(c) == 0)
				conn_close(d, c);
			continue;
		}
		if (c->peer.subscriber || d->opts.idle_timeout_ns <= 0 ||
		    now - c->active_ns < d->opts.idle_timeout_ns)
			continue;
		log_debug("connection of pid %d uid %u idle: closed", (int)c->peer.pid,
			  (unsigned)c->peer.uid);
		d->conns_idle++;
		conn_cut(d, c);
	}
}

/* Requests kept to be answered later (a define waiting for space in its
 * grace period): handled again once their time came, for the last time
 * (an answer whatever it finds) past their bound. */
static void answer_later(struct resild *d, int64_t now)
{
	struct resild_loop *l = d->loop;

	for (uint32_t i = 0; i < l->cap; i++) {
		struct conn *c = &l->conns[i];
		int fds[RESILD_HANDLE_FDS], nfds = 0, r;
		size_t outlen = RESILD_MSG_MAX, len = c->later_len;

		if (c->fd < 0 || !len || (now < c->peer.later_ns && now < c->peer.wait_until))
			continue;
		if (c->closing) {
			c->later_len = 0;
			continue;
		}
		if (now >= c->peer.wait_until)
			c->peer.wait_until = 0; /* the bound: answer now */
		r = resild_handle(d, &c->peer, c->rbuf, len, l->obuf, &outlen, fds, &nfds);
		if (r == RESILD_HANDLE_LATER)
			continue;
		c->later_len = 0;
		c->active_ns = now;
		conn_answer(d, c, r, fds, nfds, outlen);
	}
}

static int reload(struct resild *d, bool retry);

static void on_tick(struct resild *d)
{
	struct resild_loop *l = d->loop;
	int64_t now;

	l->tick_armed = false;
	/* what failed to re-arm since the last tick (see "Re-arming") */
	if (!l->accept_armed && !d->stopping)
		arm_accept(d);
	if (!l->signal_armed && !d->stopping)
		arm_signal(l);
	/* the heartbeat clients read on their periodic check (seg.h): a
	 * relaxed store, it orders nothing; stale means "daemon gone" */
	st_relaxed(&d->seg.st->daemon_beat_ns, (uint64_t)resil_clock_monotonic(NULL));
	/* the state header's copy of the geometry, for dumps (nothing
	 * addresses memory through it) */
	uint32_t fixed = resil_seg_repair_header(&d->seg);

	if (fixed)
		resild_state_repaired(d, UINT32_MAX, 0, RESIL_W_HEADER, fixed);
	st_relaxed(&d->seg.st->state_repairs, d->state_repairs);
	resil_seg_foreach(&d->seg, maintain_one, d);
	resil_seg_reclaim(&d->seg, resil_clock_monotonic(NULL));
	resild_seg_move_tick(d);
	if (d->reload_retry_until)
		(void)reload(d, true);
	answer_later(d, resil_clock_monotonic(NULL));
	resild_cluster_tick(d);
	resild_clients_scan(d);
	resild_events_drain(d);
	scan_conns(d, resil_clock_monotonic(NULL));
	update_status(d);
	resild_metrics_publish(d);
	if (l->watchdog_ns) {
		now = resil_clock_monotonic(NULL);
		if ((uint64_t)(now - l->last_watchdog) >= l->watchdog_ns / 2) {
			resild_notify_watchdog();
			l->last_watchdog = now;
		}
	}
	if (!d->stopping && !l->tick_armed)
		arm_tick(l);
}

/* A reload, or (retry) its next try while it waits for configuration
 * records to come free: counted once, when it applied or failed; -EAGAIN
 * while it waits (the next tick tries again). */
static int reload(struct resild *d, bool retry)
{
	int64_t now = resil_clock_monotonic(NULL);
	int r = resild_config_load(d, false);

	if (r == -EAGAIN) {
		if (!retry || d->reload_retry_until == 0)
			d->reload_retry_until = now + RESILD_SPACE_WAIT_NS;
		if (now < d->reload_retry_until)
			return -EAGAIN; /* the next tick tries again */
		log_error("configuration not reloaded: the records it needs did not come free");
	}
	d->reload_retry_until = 0;
	if (r < 0)
		d->reload_errors++;
	else
		d->reloads++;
	if (d->loop) {
		update_status(d);
		resild_notify_ready(d->loop->status); /* ends RELOADING=1 */
	}
	return r;
}

int resild_reload(struct resild *d)
{
	resild_notify_reloading();
	return reload(d, false);
}

static void on_signal(struct resild *d, int res)
{
	d->loop->signal_armed = false;
	if (res == (int)sizeof(d->loop->sig)) {
		switch (d->loop->sig.ssi_signo) {
		case SIGHUP:
			log_info("SIGHUP: reloading %s", d->opts.config_dir);
			resild_reload(d);
			break;
		case SIGTERM:
		case SIGINT:
			log_info("%s: stopping", strsignal((int)d->loop->sig.ssi_signo));
			d->stopping = true;
			break;
		default:
			break;
		}
	} else if (res < 0 && res != -EINTR && res != -EAGAIN) {
		log_error_errno(res, "signalfd: %m");
		d->stopping = true;
	}
	if (!d->stopping)
		arm_signal(d->loop);
}

int resild_loop_init(struct resild *d)
{
	struct resild_loop *l;
	sigset_t mask;
	int r;

	l = calloc(1, sizeof(*l));
	if (!l)
		return log_error_errno(-ENOMEM, "cannot start the loop: %m");
	d->loop = l;
	l->sigfd = -1;
	l->wakefd = -1;
	l->cap = d->opts.max_conns ? d->opts.max_conns : RESILD_CONNS_DEFAULT;
	{
		/* as many descriptors as we may have: connections, pidfds and
		 * replies in flight all take some */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			if (rl.rlim_cur < rl.rlim_max) {
				rlim_t was = rl.rlim_cur;

				rl.rlim_cur = rl.rlim_max;
				if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
					log_debug("RLIMIT_NOFILE raised from %llu to %llu",
						  (unsigned long long)was,
						  (unsigned long long)rl.rlim_max);
				else
					rl.rlim_cur = was;
			}
			l->fd_max = rl.rlim_cur > INT32_MAX ? INT32_MAX : (int)rl.rlim_cur;
		}
	}
	l->conns = calloc(l->cap, sizeof(*l->conns));
	l->obuf = malloc(RESILD_MSG_MAX);
	if (!l->conns || !l->obuf)
		return log_error_errno(-ENOMEM, "cannot start the loop: %m");
	for (uint32_t i = 0; i < l->cap; i++)
		l->conns[i].fd = -1;

	r = io_uring_queue_init(RING_ENTRIES, &l->ring, 0);
	if (r < 0)
		return log_error_errno(r, "io_uring_queue_init: %m");

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return log_error_errno(-errno, "sigprocmask: %m");
	l->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (l->sigfd < 0)
		return log_error_errno(-errno, "signalfd: %m");
	signal(SIGPIPE, SIG_IGN);

	l->multishot = true;
	{
		const char *e = getenv("RESILD_TEST_ARM_FAIL");

		if (e && sscanf(e, "%7[a-z]:%u:%u", l->fail_kind, &l->fail_from, &l->fail_n) != 3)
			l->fail_n = 0;
	}
	l->watchdog_ns = resild_notify_watchdog_ns();
	l->last_watchdog = resil_clock_monotonic(NULL);
	if (arm_accept(d) < 0 || arm_signal(l) < 0 || arm_tick(l) < 0)
		return log_error_errno(-EBUSY, "cannot queue the first operations: %m");
	r = io_uring_submit(&l->ring);
	if (r < 0)
		return log_error_errno(r, "io_uring_submit: %m");
	return 0;
}

int resild_loop_run(struct resild *d)
{
	struct resild_loop *l = d->loop;

	/* listening since resild_loop_init: READY=1 with the first status */
	update_status(d);
	resild_notify_ready(l->status);
	while (!d->stopping) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		int r;

		if (!l->tick_armed)
			(void)arm_tick(l);
		if (l->tick_armed) {
			r = io_uring_submit_and_wait(&l->ring, 1);
		} else {
			/* no tick queued: wait a tick at most, and tick */
			struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = RESILD_TICK_NS};

			r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
			if (r == -ETIME) {
				on_tick(d);
				continue;
			}
		}
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME)
			return log_error_errno(r, "io_uring_submit_and_wait: %m");
		io_uring_for_each_cqe(&l->ring, head, cqe)
		{
			uint64_t u = io_uring_cqe_get_data64(cqe);
			uint32_t idx = ud_idx(u);
			struct conn *c = NULL;

			n++;
			switch (ud_op(u)) {
			case OP_ACCEPT:
				on_accept(d, cqe->res, cqe->flags);
				break;
			case OP_RECV:
			case OP_SEND:
				if (idx < l->cap && l->conns[idx].gen == ud_cookie(u) &&
				    l->conns[idx].fd >= 0)
					c = &l->conns[idx];
				if (!c)
					break;
				if (ud_op(u) == OP_RECV)
					on_recv(d, c, cqe->res);
				else
					on_send(d, c, cqe->res);
				break;
			case OP_SIGNAL:
				on_signal(d, cqe->res);
				break;
			case OP_TICK:
				on_tick(d);
				break;
			case OP_WAKE:
				on_wake(d, cqe->res);
				break;
			case OP_PIDFD:
				if (cqe->res > 0)
					resild_clients_exited(d, idx, ud_cookie(u));
				break;
			default:
				break;
			}
		}
		io_uring_cq_advance(&l->ring, n);
	}
	return 0;
}

void resild_loop_fini(struct resild *d)
{
	struct resild_loop *l = d->loop;

	if (!l)
		return;
	d->stopping = true; /* conn_free queues nothing more */
	if (l->ring.ring_fd > 0)
		io_uring_queue_exit(&l->ring);
	if (l->conns)
		for (uint32_t i = 0; i < l->cap; i++)
			if (l->conns[i].fd >= 0) {
				l->conns[i].recv_armed = l->conns[i].send_armed = false;
				resild_peer_gone(d, &l->conns[i].peer);
				conn_free(d, &l->conns[i]);
			}
	if (l->sigfd >= 0)
		close(l->sigfd);
	free(l->conns);
	free(l->obuf);
	free(l);
	d->loop = NULL;
}

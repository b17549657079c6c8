/* SPDX-License-Identifier: MIT */
/*
 * loop_conn.c - the control socket's connections, on the loop's ring
 * (loop.c): accept, one recvmsg and one sendmsg in flight per connection,
 * the queue of replies, the events broadcast to subscribers, and what the
 * tick does for them (idle and held connections, requests answered
 * later).
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
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl.h"
#include "log.h"
#include "loop.h"

#include "loop_priv.h"

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

void conn_free(struct resild *d, struct conn *c)
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

void on_accept(struct resild *d, int res, unsigned flags)
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

void on_recv(struct resild *d, struct conn *c, int res)
{
	struct resild_loop *l = d->loop;
	int fds[RESILD_HANDLE_FDS], nfds = 0, r;
	size_t outlen = RESILD_MSG_MAX;

	c->recv_armed = false;
	/* fds a peer sent us: the first is the request's (a CountTable's
	 * table), the others never wanted */
	c->peer.rx_fd = -1;
	if (res >= 0 && c->rmh.msg_controllen > 0) {
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&c->rmh); cm; cm = CMSG_NXTHDR(&c->rmh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				int *p = (int *)CMSG_DATA(cm);
				size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < n; i++) {
					if (c->peer.rx_fd < 0)
						c->peer.rx_fd = p[i];
					else
						close(p[i]);
				}
			}
	}
	if (c->closing || res <= 0 || c->held) {
		if (c->peer.rx_fd >= 0)
			close(c->peer.rx_fd);
		c->peer.rx_fd = -1;
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
		if (c->peer.rx_fd >= 0)
			close(c->peer.rx_fd);
		c->peer.rx_fd = -1;
	} else {
		c->peer.wait_until = c->active_ns + RESILD_SPACE_WAIT_NS;
		r = resild_handle(d, &c->peer, c->rbuf, (size_t)res, l->obuf, &outlen, fds, &nfds);
		if (c->peer.rx_fd >= 0)
			close(c->peer.rx_fd); /* not taken */
		c->peer.rx_fd = -1;
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

void on_send(struct resild *d, struct conn *c, int res)
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

/* Held connections whose peer read everything are closed; silent ones
 * are cut (subscribers wait for events: never silent by choice). */
void scan_conns(struct resild *d, int64_t now)
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
void answer_later(struct resild *d, int64_t now)
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

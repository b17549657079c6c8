/* SPDX-License-Identifier: MIT */
/*
 * libctl.c - libresil's control connection to resild.
 *
 * One protobuf Request per SOCK_SEQPACKET datagram, one Response with the
 * same id back (a subscription also streams Responses with id 0, which a
 * request skips). The segments arrive as SCM_RIGHTS with GetSegments.
 *
 * Bounded time: the socket is non-blocking and every wait is a poll with
 * a deadline (resil_priv_timeout_ms, 5 s unless $RESIL_CONNECT_TIMEOUT_MS
 * says otherwise), so a daemon that accepted the connection through socket
 * activation but never starts gives -ETIMEDOUT, not a hang. A socket
 * nobody listens on answers -ECONNREFUSED or -ENOENT at once.
 *
 * Every hello records the answering daemon's segment epoch
 * (r->daemon_epoch): attach.c compares it with the segments it maps to
 * know whether the daemon behind the socket still serves them (a restart
 * that adopted them from the fd store) or started fresh (re-attach).
 *
 * Ownership: the connection belongs to the process that opened it
 * (r->ctl_pid). A forked child never sends on its parent's connection (the
 * two would read each other's replies): it closes its copy and connects
 * anew when it first needs the daemon. A connection the daemon closed (it
 * died or restarted) is dropped and the request is sent once more on a
 * new one, so a later control call works once the daemon is back.
 *
 * Everything here runs under r->lock: one request in flight per handle.
 * Nothing here touches the segments or the hot path.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"

#define CTL_MSG_MAX 65536 /* proto/resil.proto: at most 64 KiB a message */
#define CTL_FDS_MAX 4
#define CTL_VERSION 1 /* the control protocol version spoken (proto/resil.proto) */

const char *resil_priv_socket_path(const char *path)
{
	const char *env;

	if (path && *path)
		return path;
	env = getenv("RESIL_SOCKET");
	if (env && *env)
		return env;
	return RESIL_DEFAULT_SOCKET;
}

int resil_priv_timeout_ms(void)
{
	const char *env = getenv("RESIL_CONNECT_TIMEOUT_MS");
	char *end;
	long v;

	if (!env || !*env)
		return 5000;
	errno = 0;
	v = strtol(env, &end, 10);
	if (errno || *end || v <= 0 || v > 600000)
		return 5000;
	return (int)v;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for events on fd until deadline (ms, CLOCK_MONOTONIC; < 0: none). */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	int left, n;

	for (;;) {
		left = -1;
		if (deadline >= 0) {
			int64_t d = deadline - mono_ms();

			if (d <= 0)
				return -ETIMEDOUT;
			left = d > 60000 ? 60000 : (int)d;
		}
		n = poll(&pfd, 1, left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Say which group the socket wants (connect needs write permission). */
static void denied(const char *path)
{
	struct stat st;
	struct group gr, *g = NULL;
	char buf[1024];

	if (stat(path, &st) == 0 && getgrgid_r(st.st_gid, &gr, buf, sizeof(buf), &g) == 0 && g)
		resil_priv_seterr("no permission to connect to resild on %s: the socket belongs "
				  "to group %s (mode %03o): join that group or run as root",
				  path, g->gr_name, (unsigned)(st.st_mode & 0777));
	else
		resil_priv_seterr("no permission to connect to resild on %s", path);
}

static int ctl_connect(const char *path, int64_t deadline)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t len = sizeof(int);
	int fd, err = 0, r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		resil_priv_seterr("socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		if (errno == EINTR)
			continue;
		if (errno == EINPROGRESS)
			break;
		if (errno != EAGAIN) {
			err = -errno;
			if (err == -EACCES || err == -EPERM)
				denied(path);
			else
				resil_priv_seterr("resild is not running on %s: %s", path,
						  strerror(errno));
			close(fd);
			return err;
		}
		/* the listen backlog is full: try again until the deadline */
		if (mono_ms() >= deadline) {
			close(fd);
			resil_priv_seterr("resild on %s does not accept connections", path);
			return -ETIMEDOUT;
		}
		usleep(10000);
	}
	r = wait_fd(fd, POLLOUT, deadline);
	if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
		r = -err;
	if (r < 0) {
		close(fd);
		resil_priv_seterr("cannot connect to resild on %s: %s", path, strerror(-r));
		return r;
	}
	return fd;
}

/* pass_fd: a descriptor the request carries (SCM_RIGHTS), -1: none. */
static int ctl_send(int fd, const Resil__Request *req, int pass_fd, int64_t deadline)
{
	uint8_t buf[CTL_MSG_MAX];
	size_t n = resil__request__get_packed_size(req);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t w;
	int r;

	if (pass_fd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}

	if (n > sizeof(buf)) {
		resil_priv_seterr("request too large (%zu bytes, at most %d)", n, CTL_MSG_MAX);
		return -EMSGSIZE;
	}
	resil__request__pack(req, buf);
	for (;;) {
		w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (w == (ssize_t)n)
			return 0;
		if (w >= 0)
			return -EIO;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		r = wait_fd(fd, POLLOUT, deadline);
		if (r < 0)
			return r;
	}
}

/* One datagram: *resp unpacked, fds received into fds[0..*nfds) (the rest
 * closed). Returns -ECONNRESET when the daemon closed the connection. */
static int ctl_recv(int fd, Resil__Response **resp, int *fds, int *nfds, int64_t deadline)
{
	uint8_t buf[CTL_MSG_MAX];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * CTL_FDS_MAX)];
	} cb;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof(cb.b)};
	int room = nfds ? *nfds : 0, got = 0, r;
	struct cmsghdr *c;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	for (;;) {
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		/* a daemon that closed with our request unread reports
		 * ECONNRESET once, ahead of what it sent before closing (such
		 * as why it refused us): read that, if anything is there */
		if (errno == ECONNRESET) {
			n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
			if (n > 0)
				break;
			return -ECONNRESET;
		}
		if (errno != EAGAIN)
			return -errno;
		r = wait_fd(fd, POLLIN, deadline);
		if (r < 0)
			return r;
	}
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		int *p = (int *)CMSG_DATA(c);
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < k; i++) {
			int one;

			memcpy(&one, p + i, sizeof(one));
			if (got < room && fds)
				fds[got++] = one;
			else
				close(one);
		}
	}
	if (n == 0) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		return -ECONNRESET;
	}
	*resp = resil__response__unpack(NULL, (size_t)n, buf);
	if (!*resp || (mh.msg_flags & MSG_TRUNC)) {
		if (*resp)
			resil__response__free_unpacked(*resp, NULL);
		*resp = NULL;
		for (int i = 0; i < got; i++)
			close(fds[i]);
		resil_priv_seterr("malformed response from resild");
		return -EBADMSG;
	}
	if (nfds)
		*nfds = got;
	return 0;
}

/* Send req and wait for the Response with its id, skipping others. */
static int ctl_roundtrip(int fd, Resil__Request *req, int pass_fd, Resil__Response **resp, int *fds,
			 int *nfds, int64_t deadline)
{
	int room = nfds ? *nfds : 0, r;

	r = ctl_send(fd, req, pass_fd, deadline);
	if (r == -EPIPE || r == -ECONNRESET) {
		/* closed before our request arrived: it may have said why */
		Resil__Response *m = NULL;

		if (ctl_recv(fd, &m, NULL, NULL, mono_ms()) == 0 && m->id == 0 && m->error) {
			*resp = m;
			return 0;
		}
		if (m)
			resil__response__free_unpacked(m, NULL);
		return r;
	}
	if (r < 0)
		return r;
	for (;;) {
		Resil__Response *m = NULL;
		int n = room;

		r = ctl_recv(fd, &m, fds, nfds ? &n : NULL, deadline);
		if (r < 0)
			return r;
		/* id 0 with an error: about the connection itself (a limit
		 * refused it, or cut it off), the answer to whatever we asked */
		if (m->id == req->id || (m->id == 0 && m->error)) {
			if (nfds)
				*nfds = n;
			*resp = m;
			return 0;
		}
		for (int i = 0; i < n; i++)
			close(fds[i]);
		resil__response__free_unpacked(m, NULL);
	}
}

static void ctl_drop(struct resil *r)
{
	if (r->ctl_fd >= 0)
		close(r->ctl_fd);
	r->ctl_fd = -1;
	r->ctl_pid = 0;
}

/* Connect and say hello: the daemon answers the version both speak, and
 * every request after it says so (resil_priv_request stamps
 * Request.version). */
static int ctl_open(struct resil *r, int64_t deadline)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello hello = RESIL__HELLO__INIT;
	Resil__Response *resp = NULL;
	int fd, ret, tries = 0;

again:
	fd = ctl_connect(r->socket_path, deadline);
	if (fd < 0)
		return fd;
	hello.min_version = CTL_VERSION;
	hello.max_version = CTL_VERSION;
	hello.client = "libresil " RESIL_VERSION_STRING;
	req.id = ++r->req_id;
	req.version = CTL_VERSION;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &hello;
	ret = ctl_roundtrip(fd, &req, -1, &resp, NULL, NULL, deadline);
	if (ret < 0) {
		close(fd);
		/* closed unanswered: a daemon that accepted us and stopped
		 * (systemctl stop or restart); the socket stays systemd's and
		 * the next daemon answers a new connection. Once: a daemon
		 * that refuses us closes that one too */
		if ((ret == -ECONNRESET || ret == -EPIPE || ret == -ENOTCONN) && tries++ == 0)
			goto again;
		if (ret == -ETIMEDOUT)
			resil_priv_seterr("resild on %s did not answer within %d ms",
					  r->socket_path, resil_priv_timeout_ms());
		else if (ret == -ECONNRESET || ret == -EPIPE)
			resil_priv_seterr("resild on %s closed the connection", r->socket_path);
		return ret;
	}
	if (resp->error) {
		ret = -(resp->error->errno_value > 0 ? resp->error->errno_value : EPROTO);
		resil_priv_seterr("%s", resp->error->message);
		goto fail;
	}
	if (resp->body_case != RESIL__RESPONSE__BODY_HELLO || resp->hello->version != CTL_VERSION) {
		ret = -EPROTO;
		resil_priv_seterr("resild on %s speaks another protocol version", r->socket_path);
		goto fail;
	}
	if (resp->hello->abi_major != RESIL_ABI_MAJOR) {
		ret = -EPROTO;
		resil_priv_seterr("resild on %s uses segment ABI %u, this library needs %u",
				  r->socket_path, resp->hello->abi_major, RESIL_ABI_MAJOR);
		goto fail;
	}
	r->version = resp->hello->version;
	r->abi_major = resp->hello->abi_major;
	r->abi_minor = resp->hello->abi_minor;
	r->daemon_epoch = resp->hello->epoch;
	resil__response__free_unpacked(resp, NULL);
	r->ctl_fd = fd;
	r->ctl_pid = getpid();
	r->conn_gen++;
	return 0;
fail:
	resil__response__free_unpacked(resp, NULL);
	close(fd);
	return ret;
}

int resil_priv_request(struct resil *r, struct Resil__Request *req, struct Resil__Response **resp,
		       int *fds, int *nfds)
{
	int64_t deadline = mono_ms() + resil_priv_timeout_ms();
	int room = nfds ? *nfds : 0;
	Resil__Response *m = NULL;
	bool fresh = false, refused = false;
	int ret, n;

	if (nfds)
		*nfds = 0;
	r->replied = false;
	/* a forked child's copy of the parent's connection is never used */
	if (r->ctl_fd >= 0 && r->ctl_pid != getpid())
		ctl_drop(r);
	for (int attempt = 0; attempt < 3; attempt++) {
		if (r->ctl_fd < 0) {
			ret = ctl_open(r, deadline);
			if (ret < 0)
				return ret;
			fresh = true;
		}
		req->id = ++r->req_id;
		req->version = r->version;
		n = room;
		ret =
		    ctl_roundtrip(r->ctl_fd, req, r->pass_fd, &m, fds, nfds ? &n : NULL, deadline);
		if (ret == 0)
			break;
		ctl_drop(r);
		/* the daemon went away since the last request: once more, anew.
		 * A fresh connection closed unanswered: a daemon that accepted
		 * it and then stopped (systemctl stop or restart); the socket
		 * stays systemd's, so one more connection reaches the next
		 * daemon (once: a daemon that refuses us closes it again) */
		bool gone =
		    ret == -EPIPE || ret == -ECONNRESET || ret == -ENOTCONN || ret == -ECONNREFUSED;
		bool again = gone && (!fresh || (!refused && ret != -ECONNREFUSED));

		if (fresh && gone)
			refused = true;
		if (!again || attempt == 2) {
			if (ret == -ETIMEDOUT)
				resil_priv_seterr("resild on %s did not answer within %d ms",
						  r->socket_path, resil_priv_timeout_ms());
			else if (ret == -ECONNRESET || ret == -EPIPE)
				resil_priv_seterr("resild on %s closed the connection",
						  r->socket_path);
			return ret;
		}
	}
	r->replied = true;
	if (m->error) {
		int e = m->error->errno_value > 0 ? m->error->errno_value : EIO;

		resil_priv_seterr("%s", m->error->message && *m->error->message ? m->error->message
										: strerror(e));
		for (int i = 0; i < n; i++)
			close(fds[i]);
		resil__response__free_unpacked(m, NULL);
		return -e;
	}
	if (nfds)
		*nfds = n;
	*resp = m;
	return 0;
}

int resil_priv_ctl_ensure(struct resil *r)
{
	if (r->ctl_fd >= 0 && r->ctl_pid != getpid())
		ctl_drop(r);
	if (r->ctl_fd >= 0)
		return 0;
	return ctl_open(r, mono_ms() + resil_priv_timeout_ms());
}

/* Did the daemon close our connection? A peer that closed a SOCK_SEQPACKET
 * connection makes it report POLLHUP (or a read of 0 bytes). */
static bool ctl_dead(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	char b;

	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
		return true;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int resil_priv_ctl_probe(struct resil *r, int timeout_ms)
{
	if (r->ctl_fd >= 0 && (r->ctl_pid != getpid() || ctl_dead(r->ctl_fd)))
		ctl_drop(r);
	if (r->ctl_fd >= 0)
		return 0;
	return ctl_open(r, mono_ms() + timeout_ms);
}

int resil_priv_recv_any(struct resil *r, struct Resil__Response **resp, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
	Resil__Response *m = NULL;
	int ret;

	if (r->ctl_fd < 0 || r->ctl_pid != getpid())
		return -ENOTCONN;
	ret = ctl_recv(r->ctl_fd, &m, NULL, NULL, deadline);
	if (ret < 0) {
		if (ret != -ETIMEDOUT)
			ctl_drop(r);
		return ret;
	}
	if (m->error) {
		int e = m->error->errno_value > 0 ? m->error->errno_value : EIO;

		resil_priv_seterr("%s", m->error->message);
		resil__response__free_unpacked(m, NULL);
		return -e;
	}
	*resp = m;
	return 0;
}

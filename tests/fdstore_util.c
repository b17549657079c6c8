/* SPDX-License-Identifier: MIT */
/*
 * fdstore_util.c - systemd 252's notify socket and fd store for one unit
 * (fdstore_util.h), for the restart tests.
 */
#include "fdstore_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static bool same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

static void store_remove(struct test_unit *u, const char *name)
{
	for (int i = 0; i < u->n;) {
		if (strcmp(u->names[i], name) == 0) {
			close(u->fds[i]);
			memmove(&u->fds[i], &u->fds[i + 1], sizeof(u->fds[0]) * (u->n - i - 1));
			memmove(u->names[i], u->names[i + 1], sizeof(u->names[0]) * (u->n - i - 1));
			u->n--;
		} else {
			i++;
		}
	}
}

static void store_add(struct test_unit *u, int fd, const char *name)
{
	for (int i = 0; i < u->n; i++) {
		if (same_file(u->fds[i], fd)) {
			close(fd); /* a duplicate: systemd keeps the first */
			return;
		}
	}
	if (u->n == TEST_STORE_MAX) {
		close(fd);
		return;
	}
	u->fds[u->n] = fd;
	snprintf(u->names[u->n], sizeof(u->names[0]), "%s", name);
	u->n++;
}

/* The value of KEY= in a notify message (a line of it), into out. */
static bool field(const char *msg, const char *key, char *out, size_t len)
{
	size_t kl = strlen(key);

	for (const char *p = msg; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
			const char *v = p + kl + 1, *e = strchr(v, '\n');
			size_t n = e ? (size_t)(e - v) : strlen(v);

			if (n >= len)
				n = len - 1;
			memcpy(out, v, n);
			out[n] = '\0';
			return true;
		}
	}
	return false;
}

/* Read every message that arrived on the notify socket. */
void test_unit_poll(struct test_unit *u)
{
	for (;;) {
		char buf[4096], v[64], name[64];
		union {
			char b[CMSG_SPACE(sizeof(int) * TEST_STORE_MAX) +
			       CMSG_SPACE(sizeof(struct ucred))];
			struct cmsghdr align;
		} cm;
		struct iovec iov = {buf, sizeof(buf) - 1};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.b,
				    .msg_controllen = sizeof(cm.b)};
		ssize_t len = recvmsg(u->nfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		int got[TEST_STORE_MAX], ngot = 0;

		if (len < 0)
			return;
		buf[len] = '\0';
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (ngot < TEST_STORE_MAX)
					got[ngot++] = fd;
				else
					close(fd);
			}
		}
		if (!field(buf, "FDNAME", name, sizeof(name)))
			strcpy(name, "stored");
		if (field(buf, "FDSTOREREMOVE", v, sizeof(v)) && strcmp(v, "1") == 0)
			store_remove(u, name);
		for (int i = 0; i < ngot; i++) {
			if (field(buf, "FDSTORE", v, sizeof(v)) && strcmp(v, "1") == 0)
				store_add(u, got[i], name);
			else
				close(got[i]); /* fds without FDSTORE=1 are refused */
		}
		if (field(buf, "READY", v, sizeof(v)) && strcmp(v, "1") == 0)
			u->ready++;
		field(buf, "STATUS", u->status, sizeof(u->status));
	}
}

bool test_unit_stored(struct test_unit *u, int n)
{
	test_unit_poll(u);
	return u->n == n;
}

/* The daemon's STATUS= says "N policies, M clients". */
bool test_unit_status_has(struct test_unit *u, const char *what)
{
	test_unit_poll(u);
	return strstr(u->status, what) != NULL;
}

int test_unit_store_fd(struct test_unit *u, const char *name)
{
	test_unit_poll(u);
	for (int i = 0; i < u->n; i++) {
		if (strcmp(u->names[i], name) == 0)
			return u->fds[i];
	}
	return -1;
}

int test_unit_init(struct test_unit *u)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int one = 1, v;

	memset(u, 0, sizeof(*u));
	u->nfd = -1;
	v = test_daemon_init(&u->d);
	if (v < 0)
		return v;
	if (strlen(u->d.dir) + 8 >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	snprintf(u->notify, sizeof(u->notify), "%.*s/notify", (int)sizeof(u->notify) - 8, u->d.dir);
	strcpy(sa.sun_path, u->notify);
	u->nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (u->nfd < 0 || bind(u->nfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	setsockopt(u->nfd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	return 0;
}

/* Start (or restart) the unit's daemon, passing the store when with_store. */
int test_unit_start(struct test_unit *u, bool with_store)
{
	pid_t pid;

	test_unit_poll(u);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int logfd = open(u->d.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int n = with_store ? u->n : 0, high[TEST_STORE_MAX];
		char names[TEST_STORE_MAX * 65] = "", num[32];

		dup2(logfd, 1);
		dup2(logfd, 2);
		/* out of the way of 3..3+n first, then into place */
		for (int i = 0; i < n; i++)
			high[i] = fcntl(u->fds[i], F_DUPFD_CLOEXEC, 100);
		for (int i = 0; i < n; i++) {
			if (high[i] < 100 || dup2(high[i], 3 + i) != 3 + i)
				_exit(126);
			close(high[i]);
			if (i)
				strcat(names, ":");
			strcat(names, u->names[i]);
		}
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		setenv("NOTIFY_SOCKET", u->notify, 1);
		if (n) {
			snprintf(num, sizeof(num), "%d", (int)getpid());
			setenv("LISTEN_PID", num, 1);
			snprintf(num, sizeof(num), "%d", n);
			setenv("LISTEN_FDS", num, 1);
			setenv("LISTEN_FDNAMES", names, 1);
		}
		execl(RESILD_PATH, RESILD_PATH, "--foreground", "--socket", u->d.sock, "--config",
		      u->d.confdir, (char *)NULL);
		_exit(127);
	}
	u->d.pid = pid;
	return TEST_EVENTUALLY(test_daemon_answers(&u->d)) ? 0 : -ETIMEDOUT;
}

/* A crash (Restart=always brings it back with the store). */
void test_unit_crash(struct test_unit *u)
{
	test_daemon_kill(&u->d);
	test_unit_poll(u);
}

/* systemctl stop on systemd 252: the daemon stops, the store is emptied. */
int test_unit_stop(struct test_unit *u)
{
	int st = test_daemon_stop(&u->d);

	test_unit_poll(u);
	for (int i = 0; i < u->n; i++)
		close(u->fds[i]);
	u->n = 0;
	return st;
}

void test_unit_fini(struct test_unit *u)
{
	test_daemon_fini(&u->d);
	for (int i = 0; i < u->n; i++)
		close(u->fds[i]);
	u->n = 0;
	if (u->nfd >= 0)
		close(u->nfd);
	u->nfd = -1;
}

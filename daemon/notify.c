/* SPDX-License-Identifier: MIT */
/*
 * notify.c - sd_notify and friends, through libsystemd.
 *
 * libsystemd's sd_notify returns 0 and sends nothing when NOTIFY_SOCKET
 * is unset, and sd_listen_fds returns 0 when LISTEN_PID is not ours, so
 * the same code runs under systemd, under systemd-socket-activate, and by
 * hand. unset_environment is 0 for sd_listen_fds so the variables stay
 * for a re-exec; the fds are taken with O_CLOEXEC set here.
 *
 * The fd store keeps both memfds across a restart or a crash
 * (Restart=always): a new daemon finds them as "config" and "state" and
 * adopts them once resil_seg_map validated them (main.c). systemd 252
 * empties the store when the unit is stopped, so a stop loses the state;
 * only restarts and crashes keep it.
 *
 * What the loop tells systemd (readiness, status, reloading, stopping,
 * watchdog) never blocks it: sd_notify sends on a blocking socket, and a
 * datagram socket blocks its sender once the reader's queue is full
 * (net.unix.max_dgram_qlen), which a busy systemd or a supervisor that
 * stops reading lets happen; the loop would stop serving. So those go out
 * on our own non-blocking socket to NOTIFY_SOCKET (a path or an abstract
 * "@" name; another kind of address goes through sd_notify). A message
 * that would block is kept, merged (the newest status, the newest of
 * READY/RELOADING, STOPPING) and sent again at the next tick
 * (resild_notify_flush). The fd store's messages carry descriptors and go
 * through libsystemd (at start and at a segment move).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "notify.h"

void resild_notify_listen_fds(struct resild_passed *p)
{
	char **names = NULL;
	int n;

	p->listen_fd = -1;
	p->cfg_fd = -1;
	p->st_fd = -1;
	p->metrics_fd = -1;
	n = sd_listen_fds_with_names(0, &names);
	if (n <= 0)
		return;
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *name = names && names[i] ? names[i] : "";

		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (strcmp(name, "config") == 0 && p->cfg_fd < 0) {
			p->cfg_fd = fd;
		} else if (strcmp(name, "state") == 0 && p->st_fd < 0) {
			p->st_fd = fd;
		} else if (p->listen_fd < 0 &&
			   sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) > 0) {
			p->listen_fd = fd;
		} else if (p->metrics_fd < 0 && sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) > 0) {
			p->metrics_fd = fd;
		} else {
			log_warning("ignoring passed file descriptor %d (%s)", fd,
				    name[0] ? name : "unnamed");
			close(fd);
		}
	}
	if (names) {
		for (int i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
}

enum {
	N_READY = 1,
	N_RELOADING = 2,
	N_STOPPING = 4,
	N_WATCHDOG = 8,
	N_STATUS = 16,
};

static struct {
	int fd;	 /* our non-blocking datagram socket; -1: not open */
	int how; /* 0: not looked at yet, 1: our socket, 2: sd_notify, 3: none */
	struct sockaddr_un sa;
	socklen_t salen;
	unsigned pending; /* N_*: what is still to be sent */
	char status[256]; /* N_STATUS: the newest status */
} nt = {.fd = -1};

/* Where NOTIFY_SOCKET points (nt.how). */
static void notify_addr(void)
{
	const char *e = getenv("NOTIFY_SOCKET");
	size_t n = e ? strlen(e) : 0;

	nt.how = 3;
	if (!n)
		return;
	nt.how = 2;
	if ((e[0] != '/' && e[0] != '@') || n >= sizeof(nt.sa.sun_path))
		return;
	nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (nt.fd < 0)
		return;
	nt.sa.sun_family = AF_UNIX;
	memcpy(nt.sa.sun_path, e, n);
	if (e[0] == '@')
		nt.sa.sun_path[0] = '\0'; /* abstract: the name's length counts */
	nt.salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/' ? 1 : 0));
	nt.how = 1;
}

int resild_notify_flush(void)
{
	char msg[sizeof(nt.status) + 64];
	int n;

	if (!nt.how)
		notify_addr();
	if (!nt.pending)
		return 0;
	n = snprintf(msg, sizeof(msg), "%s%s%s%s", nt.pending & N_READY ? "READY=1\n" : "",
		     nt.pending & N_RELOADING ? "RELOADING=1\n" : "",
		     nt.pending & N_STOPPING ? "STOPPING=1\n" : "",
		     nt.pending & N_WATCHDOG ? "WATCHDOG=1\n" : "");
	if (nt.pending & N_STATUS)
		snprintf(msg + n, sizeof(msg) - (size_t)n, "STATUS=%s", nt.status);
	if (nt.how == 1) {
		if (sendto(nt.fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL,
			   (struct sockaddr *)&nt.sa, nt.salen) < 0 &&
		    (errno == EAGAIN || errno == ENOBUFS))
			return -EAGAIN; /* kept: the next tick sends it */
	} else if (nt.how == 2) {
		(void)sd_notify(0, msg);
	}
	nt.pending = 0;
	return 0;
}

void resild_notify_ready(const char *status)
{
	nt.pending = (nt.pending & ~N_RELOADING) | N_READY;
	resild_notify_status(status);
}

void resild_notify_status(const char *status)
{
	snprintf(nt.status, sizeof(nt.status), "%s", status);
	nt.pending |= N_STATUS;
	(void)resild_notify_flush();
}

void resild_notify_stopping(void)
{
	nt.pending |= N_STOPPING;
	(void)resild_notify_flush();
}

void resild_notify_reloading(void)
{
	nt.pending = (nt.pending & ~N_READY) | N_RELOADING;
	(void)resild_notify_flush();
}

uint64_t resild_notify_watchdog_ns(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return usec * 1000;
}

void resild_notify_watchdog(void)
{
	nt.pending |= N_WATCHDOG;
	(void)resild_notify_flush();
}

int resild_notify_store_fds(int cfg_fd, int st_fd)
{
	int r;

	if (!getenv("NOTIFY_SOCKET"))
		return 0;
	r = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=config", &cfg_fd, 1);
	if (r < 0)
		return log_warning_errno(r, "cannot store the config segment in systemd: %m");
	r = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=state", &st_fd, 1);
	if (r < 0)
		return log_warning_errno(r, "cannot store the state segment in systemd: %m");
	return 0;
}

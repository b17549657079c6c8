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
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

void resild_notify_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void resild_notify_status(const char *status)
{
	sd_notifyf(0, "STATUS=%s", status);
}

void resild_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void resild_notify_reloading(void)
{
	sd_notify(0, "RELOADING=1");
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
	sd_notify(0, "WATCHDOG=1");
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

/* SPDX-License-Identifier: MIT */
/*
 * notify.h - systemd integration: readiness, status, watchdog, socket
 * activation and the file-descriptor store. Every call quietly does
 * nothing when the daemon does not run under systemd.
 */
#ifndef RESILD_NOTIFY_H
#define RESILD_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* What systemd passed at start (sd_listen_fds_with_names): a listening
 * SOCK_SEQPACKET unix socket, memfds stored earlier under the names
 * "config" and "state", and a listening TCP socket for the HTTP metrics
 * (resild-metrics.socket, FileDescriptorName=metrics). -1 when absent.
 * Fds that are none of these are closed. */
struct resild_passed {
	int listen_fd;
	int cfg_fd;
	int st_fd;
	int metrics_fd;
};
void resild_notify_listen_fds(struct resild_passed *p);

/* These never block (notify.c): what would is kept and sent again by
 * resild_notify_flush, which the loop calls at every tick (0, or -EAGAIN
 * while it is still kept). */
void resild_notify_ready(const char *status);
void resild_notify_status(const char *status);
void resild_notify_stopping(void);
void resild_notify_reloading(void);
/* The watchdog interval in ns, 0 when systemd does not want pings. */
uint64_t resild_notify_watchdog_ns(void);
void resild_notify_watchdog(void);
int resild_notify_flush(void);
/* Put both memfds in the fd store (FDSTORE=1, FDNAME=config / state). */
int resild_notify_store_fds(int cfg_fd, int st_fd);

#endif

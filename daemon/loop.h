/* SPDX-License-Identifier: MIT */
/*
 * loop.h - the daemon's io_uring event loop: the control socket
 * (accept, recvmsg, sendmsg with SCM_RIGHTS), signals through a signalfd,
 * the maintenance tick and the pidfds of clients. Single-threaded.
 */
#ifndef RESILD_LOOP_H
#define RESILD_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct resild;

int resild_loop_init(struct resild *d);
/* Serve until SIGTERM or SIGINT; 0 on a clean stop. */
int resild_loop_run(struct resild *d);
void resild_loop_fini(struct resild *d);

/* Watch fd for POLLIN (a pidfd): resild_clients_exited(d, row, cookie) is
 * called when it fires. The caller keeps the fd open until cancelled. */
int resild_loop_watch_pid(struct resild *d, int fd, uint32_t row, uint32_t cookie);
void resild_loop_unwatch_pid(struct resild *d, uint32_t row, uint32_t cookie);

/* Read fd (an eventfd, -1: none) and call resild_cluster_woken when it
 * counts: the cluster thread's answers applied as they come. */
int resild_loop_watch_wake(struct resild *d, int fd);

/* Queue an already packed Response (id 0, an event) to every subscriber
 * that wants events of policy; a subscriber whose queue is full misses it
 * (counted). */
void resild_loop_broadcast(struct resild *d, const uint8_t *msg, size_t len, const char *policy);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * clients.h - the client registry: which processes hold rows of the
 * client table, watched through pidfds, and reclaim when one dies.
 */
#ifndef RESILD_CLIENTS_H
#define RESILD_CLIENTS_H

#include <stdint.h>

struct resild;

int resild_clients_init(struct resild *d);
void resild_clients_fini(struct resild *d);
/* Each tick: notice new rows (pidfd_open, start time check), rows freed
 * by their clients, and rows of processes that died meanwhile. */
void resild_clients_scan(struct resild *d);
/* The loop saw the pidfd of row become readable: that process exited. */
void resild_clients_exited(struct resild *d, uint32_t row, uint32_t cookie);
/* Rows held by live processes. */
uint32_t resild_clients_live(const struct resild *d);

/* /proc/PID/stat field 22 (start time in clock ticks since boot);
 * 0 or -errno (-ESRCH: no such process). */
int resild_proc_start_time(uint32_t pid, uint64_t *ret);

#endif

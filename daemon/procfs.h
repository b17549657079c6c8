/* SPDX-License-Identifier: MIT */
/*
 * procfs.h - what /proc says about a process, for the client registry
 * (clients.c): its pid namespace, its credentials, whether it maps a
 * given file, and which process of a pid namespace a namespace-local pid
 * names (its start time and parent: resil_proc_stat, common.c).
 */
#ifndef RESILD_PROCFS_H
#define RESILD_PROCFS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The inode of a process's pid namespace ("self" or a pid in decimal), 0
 * when it cannot be read. */
ino_t resild_proc_pidns(const char *proc);

/* Effective uid and gid and the supplementary groups (at most *ngroups,
 * set to how many) of /proc/PID/status. 0 or -errno. */
int resild_proc_creds(uint32_t pid, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups);

/* Does process pid map the file (dev, ino) (/proc/PID/maps)? 1 yes, 0 no,
 * -errno when its maps cannot be read (EACCES: not ours to read). */
int resild_proc_maps(uint32_t pid, dev_t dev, ino_t ino);

/*
 * Namespace-local pids: a process of another pid namespace writes the pid
 * it has there. The index maps (pid namespace, pid there) to our pid for
 * the namespaces asked about (NSpid of /proc/PID/status, whose last field
 * is the pid in the process's own namespace), built by one walk of /proc
 * and rebuilt at most every RESILD_NSPID_REBUILD_NS. resild_nspid_find:
 * our pid for (ns, nspid), 0 when none.
 */
struct resild_nspid;
struct resild_nspid *resild_nspid_new(void);
void resild_nspid_free(struct resild_nspid *x);
/* Build the index for the namespaces ns[0..n) unless it was built for
 * them less than RESILD_NSPID_REBUILD_NS ago (now: CLOCK_MONOTONIC). */
void resild_nspid_index(struct resild_nspid *x, const ino_t *ns, uint32_t n, int64_t now);
uint32_t resild_nspid_find(const struct resild_nspid *x, ino_t ns, uint32_t nspid);
#define RESILD_NSPID_REBUILD_NS (1000LL * 1000 * 1000)

#endif

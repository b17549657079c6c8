/* SPDX-License-Identifier: MIT */
/*
 * clients.c - the client registry: rows of the client table, the
 * processes behind them, and reclaim when one dies.
 *
 * Clients claim their own row with one CAS on row->owner (pid << 32 |
 * low 32 bits of their start time), with no daemon round trip, so the
 * daemon learns of rows by scanning the table each tick (owner loaded
 * with acquire: pairs with the client's claim, so start_time and uid are
 * visible once owner is). For each new row it opens a pidfd and then
 * checks /proc/PID/stat's start time against the owner word: a pidfd
 * opened for a pid that was reused by another process is told apart that
 * way (the check comes after pidfd_open, so the pidfd is known to refer
 * to the row's process when it passes). The pidfd is watched with
 * POLL_ADD in the loop; it becomes readable when the process exits.
 *
 * The start time is compared through the owner word, not row->start_time:
 * a client killed between its CAS and its store of start_time leaves only
 * the owner word, and that is enough to judge it.
 *
 * Reclaim of a dead client (row i, client id i + 1):
 *   1. row->flags = DEAD (release): observers, and a daemon that restarts
 *      in the middle, know the row is being reclaimed;
 *   2. resil_policy_reclaim(id) for every policy: permits, probes,
 *      waiter counts, counters repaired from window contents;
 *   3. RESIL_EV_RECLAIMED per policy that got something back;
 *   4. resil_client_release: flags 0, owner 0 (release): the row is free.
 * Crash window: the daemon killed between 1 and 4 leaves the row claimed
 * and DEAD; the next daemon adopting the segments finds the process gone
 * (no pidfd or another start time) and reclaims again. Reclaim is by
 * client id, so doing it twice gives back nothing the second time.
 *
 * A row freed by its own client (resil_close) or re-claimed by another
 * process between two scans shows a different owner word: the old watch
 * is cancelled and the new owner, if any, watched.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clients.h"
#include "log.h"
#include "loop.h"
#include "policy.h"
#include "resild.h"

struct watch {
	uint64_t owner; /* the owner word watched, 0: none */
	int pidfd;
	uint32_t cookie;
};

struct resild_clients {
	uint32_t cap;
	uint32_t live;
	uint32_t next_cookie;
	struct watch w[];
};

int resild_proc_start_time(uint32_t pid, uint64_t *ret)
{
	char path[64], buf[1024];
	unsigned long long v;
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	/* comm (field 2) may hold spaces and parentheses: start after the last ')' */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	p++;
	/* fields 3..21, then 22 */
	for (int f = 3; f <= 22; f++) {
		while (*p == ' ')
			p++;
		if (f == 22)
			break;
		while (*p && *p != ' ')
			p++;
	}
	if (sscanf(p, "%llu", &v) != 1)
		return -EIO;
	*ret = v;
	return 0;
}

int resild_clients_init(struct resild *d)
{
	uint32_t cap = d->seg.geo.client_cap;
	struct resild_clients *c = calloc(1, sizeof(*c) + (size_t)cap * sizeof(struct watch));

	if (!c)
		return -ENOMEM;
	c->cap = cap;
	c->next_cookie = 1;
	for (uint32_t i = 0; i < cap; i++)
		c->w[i].pidfd = -1;
	d->clients = c;
	return 0;
}

static void unwatch(struct resild *d, uint32_t i)
{
	struct watch *w = &d->clients->w[i];

	if (w->pidfd >= 0) {
		resild_loop_unwatch_pid(d, i, w->cookie);
		close(w->pidfd);
		d->clients->live--;
	}
	w->pidfd = -1;
	w->owner = 0;
}

void resild_clients_fini(struct resild *d)
{
	if (!d->clients)
		return;
	for (uint32_t i = 0; i < d->clients->cap; i++)
		if (d->clients->w[i].pidfd >= 0) {
			close(d->clients->w[i].pidfd);
			d->clients->w[i].pidfd = -1;
		}
	free(d->clients);
	d->clients = NULL;
}

struct reclaim_ctx {
	struct resild *d;
	uint32_t row;
	uint32_t pid;
	struct resil_reclaim_counts total;
};

static int reclaim_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		       void *ctx)
{
	struct reclaim_ctx *rc = ctx;
	struct resil_reclaim_counts c = {0};
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};
	int64_t now = resil_clock_monotonic(NULL);

	resil_policy_reclaim(&x, rec, resil_client_id((int)rc->row), &c);
	if (c.permits || c.probes || c.waiters || c.repaired)
		resil_event_push(s, RESIL_EV_RECLAIMED, slot, rec->gen, c.permits, c.probes, 0,
				 rc->pid, now);
	rc->total.permits += c.permits;
	rc->total.probes += c.probes;
	rc->total.waiters += c.waiters;
	rc->total.repaired += c.repaired;
	return 0;
}

/* The process of row i (owner word owner) is gone: give back what it held
 * and free the row. */
static void reclaim(struct resild *d, uint32_t i, uint64_t owner)
{
	struct resil_client_row *row = resil_seg_client(&d->seg, i);
	struct reclaim_ctx rc = {.d = d, .row = i, .pid = (uint32_t)(owner >> 32)};

	st_release(&row->flags, RESIL_ROW_DEAD);
	resil_seg_foreach(&d->seg, reclaim_one, &rc);
	d->reclaims++;
	if (rc.total.permits || rc.total.probes || rc.total.waiters || rc.total.repaired)
		log_notice("client %u (row %u) died: reclaimed %u permits, %u probes, %u waiters, "
			   "%u counters repaired",
			   rc.pid, i, rc.total.permits, rc.total.probes, rc.total.waiters,
			   rc.total.repaired);
	else
		log_info("client %u (row %u) died holding nothing", rc.pid, i);
	/* only if nobody else took the row meanwhile (nobody can: it is not free) */
	if (ld_acquire(&row->owner) == owner)
		resil_client_release(&d->seg, i);
}

static int pidfd_open_(uint32_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);

	return fd < 0 ? -errno : fd;
}

void resild_clients_scan(struct resild *d)
{
	struct resild_clients *c = d->clients;

	for (uint32_t i = 0; i < c->cap; i++) {
		struct resil_client_row *row = resil_seg_client(&d->seg, i);
		uint64_t owner = ld_acquire(&row->owner), st = 0;
		uint32_t pid = (uint32_t)(owner >> 32);
		int fd, r;

		if (owner == c->w[i].owner)
			continue;
		if (c->w[i].owner)
			unwatch(d, i); /* freed by its client, or claimed anew */
		if (!owner)
			continue;
		if (pid == 0 || pid > (1u << 22)) {
			/* not a pid: a corrupt row; free it */
			log_warning("client row %u has an impossible owner %#llx: freed", i,
				    (unsigned long long)owner);
			resil_client_release(&d->seg, i);
			continue;
		}
		fd = pidfd_open_(pid);
		if (fd < 0 && fd != -ESRCH) {
			log_warning_errno(fd, "client row %u: pidfd_open(%u): %m", i, pid);
			continue; /* try again next tick */
		}
		r = fd >= 0 ? resild_proc_start_time(pid, &st) : -ESRCH;
		if (r == -ESRCH || (r == 0 && (st & 0xffffffffULL) != (owner & 0xffffffffULL))) {
			/* gone before we looked, or the pid now belongs to another process */
			if (fd >= 0)
				close(fd);
			reclaim(d, i, owner);
			continue;
		}
		if (r < 0) {
			close(fd);
			continue;
		}
		c->w[i].owner = owner;
		c->w[i].pidfd = fd;
		c->w[i].cookie = c->next_cookie++;
		c->live++;
		r = resild_loop_watch_pid(d, fd, i, c->w[i].cookie);
		if (r < 0) {
			/* not watched: forget it, the next scan tries again */
			log_warning_errno(r, "client row %u: cannot watch pid %u: %m", i, pid);
			close(fd);
			c->w[i].pidfd = -1;
			c->w[i].owner = 0;
			c->live--;
		}
	}
}

void resild_clients_exited(struct resild *d, uint32_t row, uint32_t cookie)
{
	struct resild_clients *c = d->clients;
	uint64_t owner;

	if (!c || row >= c->cap || c->w[row].pidfd < 0 || c->w[row].cookie != cookie)
		return; /* a watch cancelled meanwhile */
	owner = c->w[row].owner;
	close(c->w[row].pidfd);
	c->w[row].pidfd = -1;
	c->w[row].owner = 0;
	c->live--;
	if (ld_acquire(&resil_seg_client(&d->seg, row)->owner) == owner)
		reclaim(d, row, owner);
}

uint32_t resild_clients_live(const struct resild *d)
{
	return d->clients ? d->clients->live : 0;
}

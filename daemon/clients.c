/* SPDX-License-Identifier: MIT */
/*
 * clients.c - the client registry: rows of the client table, the
 * processes behind them, and reclaim when one dies. The design (the
 * judgements, eviction, stray claims, the work bound per tick, reclaim's
 * order) is docs/internals/clients.md; the guarantee, DESIGN.md's "Who a
 * client is".
 *
 * Who a client is is the daemon's to decide, not the row's to claim: the
 * owner word is client-writable, so the daemon keeps its own judgement of
 * each row in private memory (struct watch): BOUND (claimed by the daemon
 * for a connection, pid from SO_PEERCRED, pidfd ours), CHILD (claimed by
 * a forked client itself; its process found, its start time matching, our
 * segment mapped, or else a descendant of a known client), ADOPTED (found
 * live at the first scan of adopted segments) or UNKNOWN (a client of a
 * pid namespace we cannot see vouches for its uid's rows: never reclaimed
 * on a guess). Any other row is refused and freed within a tick, without
 * walking the policies.
 *
 * Shared words, their writers and memory orders:
 *   - a row's owner word (pid << 32 | low 32 bits of the start time):
 *     claimed by a client's CAS (resil_client_claim, seg.c) or by ours
 *     for a connection (resild_clients_bind), taken over from a planted
 *     owner by one CAS (evict); freed by a CAS from the owner judged to 0
 *     (release; refusal: a row claimed anew since the load stays its new
 *     claimer's) or a release store (resil_client_release after reclaim).
 *     Loaded with acquire by the scan: a watch whose owner word changed
 *     is cancelled and the new owner judged.
 *   - a row's flags: DEAD stored with release before the reclaim starts,
 *     so observers and a daemon restarting in the middle know it.
 *   - permit slots and probes naming a client id: freed by the stray
 *     sweep with a CAS of that id -> 0 (a slot claimed again since the
 *     load is left alone); the slot is loaded before the row, since a
 *     live client claims its row before any permit.
 * Everything here is read from the state segment, so it is untrusted:
 * ids are bounded by the private client_cap, pids by RESILD_PID_MAX, and
 * the work of a tick by the budgets below (judged, reclaimed, swept and
 * looked-up counts per tick), whatever clients plant.
 *
 * Reclaim of row i (client id i + 1): 1. flags = DEAD (release); 2.
 * resil_policy_reclaim(id) for every policy; 3. RESIL_EV_RECLAIMED per
 * policy that got something back; 4. resil_client_release. Crash window:
 * a daemon killed between 1 and 4 leaves the row claimed and DEAD; the
 * next daemon finds the process gone and reclaims again, by client id,
 * so the second time gives back nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bulkhead.h"
#include "clients.h"
#include "counts.h"
#include "ctl.h"
#include "log.h"
#include "loop.h"
#include "policy.h"
#include "procfs.h"
#include "resild.h"
#include "segmove.h"

#define RESILD_JUDGE_PER_TICK	256	   /* new rows judged per tick */
#define RESILD_EVICT_LOOKS	64	   /* rows a bind judges to make room */
#define RESILD_SWEEP_SLOTS	65536	   /* permit slots swept per tick */
#define RESILD_ANCESTRY		16	   /* parents looked up for a forked child */
#define RESILD_UNKNOWN_RECHECK	50	   /* ticks between looks at an UNKNOWN row */
#define RESILD_VOUCH_TICKS	600	   /* an unseen connection vouches this long */
#define RESILD_VOUCHERS		16	   /* uids vouching at once */
#define RESILD_PID_MAX		(1u << 22) /* PID_MAX_LIMIT */
#define RESILD_PID_CHECKS	1024	   /* rowless holders' pids looked up per tick */

enum watch_kind {
	W_NONE = 0,
	W_BOUND,
	W_CHILD,
	W_ADOPTED,
	W_UNKNOWN,
	W_EXITED, /* its pidfd fired: waiting for the reclaim budget */
};

struct watch {
	uint64_t owner; /* the owner word judged, 0: none */
	int pidfd;	/* -1: none */
	uint32_t cookie;
	uint32_t pid;	  /* the process, in our pid namespace */
	uint8_t kind;	  /* enum watch_kind */
	bool foreign;	  /* lives in another pid namespace than ours */
	bool exempt;	  /* root, our uid or the admin group: no row quota */
	uint32_t uid;	  /* the kernel's word: SO_PEERCRED, or /proc/PID/status */
	ino_t ns;	  /* its pid namespace (0: unknown) */
	uint64_t recheck; /* W_UNKNOWN: the tick to look again */
};

struct resild_clients {
	uint32_t cap;
	uint32_t next_cookie;
	uint32_t scan_from;  /* where the next scan starts judging */
	uint32_t sweep_slot; /* the policy slot the next sweep starts at */
	uint32_t evict_from; /* where the next eviction looks first */
	uint64_t ticks;
	uint32_t reclaimed_early; /* exits reclaimed by the loop since the last scan */
	bool scanned;		  /* the first scan (adoption) is done */
	ino_t pidns;		  /* our pid namespace */
	dev_t st_dev;		  /* the state segment's memfd, as /proc/PID/maps names it */
	ino_t st_ino;
	struct resild_nspid *nsx; /* other namespaces' pids (procfs.c) */
	/* uids whose connections came from a pid namespace we cannot see
	 * (SO_PEERCRED gave no pid), until the tick given: the rows we
	 * cannot identify count against them */
	uint32_t vouch_uid[RESILD_VOUCHERS];
	uint64_t vouch_until[RESILD_VOUCHERS];
	struct resild_clients_stats stats;
	struct watch w[];
};

int resild_clients_init(struct resild *d)
{
	uint32_t cap = d->seg.geo.client_cap;
	struct resild_clients *c = calloc(1, sizeof(*c) + (size_t)cap * sizeof(struct watch));
	struct stat st;

	if (!c)
		return -ENOMEM;
	c->cap = cap;
	c->next_cookie = 1;
	c->pidns = resild_proc_pidns("self");
	if (d->seg.st_fd >= 0 && fstat(d->seg.st_fd, &st) == 0) {
		c->st_dev = st.st_dev;
		c->st_ino = st.st_ino;
	}
	c->nsx = resild_nspid_new();
	for (uint32_t i = 0; i < cap; i++)
		c->w[i].pidfd = -1;
	d->clients = c;
	return 0;
}

static void forget(struct resild *d, uint32_t i)
{
	struct watch *w = &d->clients->w[i];

	if (w->pidfd >= 0) {
		if (w->kind != W_EXITED)
			resild_loop_unwatch_pid(d, i, w->cookie);
		close(w->pidfd);
	}
	resild_counts_forget(d, i);
	memset(w, 0, sizeof(*w));
	w->pidfd = -1;
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
	resild_counts_fini(d);
	resild_nspid_free(d->clients->nsx);
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

/* The process of row i (owner word owner, our pid for it pid) is gone:
 * give back what it held and free the row. */
static void reclaim(struct resild *d, uint32_t i, uint64_t owner, uint32_t pid)
{
	struct resil_client_row *row = resil_seg_client(&d->seg, i);
	struct reclaim_ctx rc = {.d = d, .row = i, .pid = pid};

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

/* Free a row nobody can be identified behind, without walking the
 * policies: its holdings become stray claims for the sweep. */
static void refuse(struct resild *d, uint32_t i, uint64_t owner)
{
	struct resil_client_row *row = resil_seg_client(&d->seg, i);
	uint64_t exp = owner;

	d->clients->stats.refused++;
	st_relaxed(&row->flags, 0);
	/* a CAS, not a store: a row freed and claimed anew since the load
	 * belongs to its new claimer */
	atomic_compare_exchange_strong_explicit(&row->owner, &exp, 0, memory_order_release,
						memory_order_relaxed);
}

static int pidfd_open_(uint32_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);

	return fd < 0 ? -errno : fd;
}

/* Who process pid is, as the kernel says (/proc/PID/status: effective
 * uid and gid, supplementary groups), for the row quota. 0 or -errno. */
static int proc_who(const struct resild *d, uint32_t pid, uint32_t *uid, bool *exempt)
{
	gid_t groups[256];
	struct resild_peer p = {.pid = (pid_t)pid, .groups = groups};
	int r;

	p.ngroups = (int)(sizeof(groups) / sizeof(groups[0]));
	r = resild_proc_creds(pid, &p.uid, &p.gid, groups, &p.ngroups);
	if (r < 0)
		return r;
	*uid = (uint32_t)p.uid;
	*exempt = resild_peer_exempt(d, &p);
	return 0;
}

uint32_t resild_clients_of_uid(const struct resild *d, uint32_t uid)
{
	const struct resild_clients *c = d->clients;
	uint32_t n = 0;

	for (uint32_t j = 0; c && j < c->cap; j++) {
		const struct watch *w = &c->w[j];

		n += w->owner && w->pidfd >= 0 && w->uid == uid &&
		     (w->kind == W_BOUND || w->kind == W_CHILD || w->kind == W_ADOPTED);
	}
	return n;
}

/* Watch row i's process through fd (taken), of uid (exempt from the row
 * quota or not). 0, or -errno (fd closed). */
static int watch(struct resild *d, uint32_t i, uint64_t owner, int fd, uint32_t pid, uint8_t kind,
		 uint32_t uid, bool exempt)
{
	struct resild_clients *c = d->clients;
	struct watch *w = &c->w[i];
	char proc[16];
	int r;

	w->uid = uid;
	w->exempt = exempt;
	w->owner = owner;
	w->pidfd = fd;
	w->pid = pid;
	w->kind = kind;
	w->cookie = c->next_cookie++;
	snprintf(proc, sizeof(proc), "%u", pid);
	w->ns = resild_proc_pidns(proc);
	w->foreign = c->pidns && w->ns != c->pidns;
	r = resild_loop_watch_pid(d, fd, i, w->cookie);
	if (r < 0) {
		/* not watched: forget it, the next scan judges it again */
		log_warning_errno(r, "client row %u: cannot watch pid %u: %m", i, pid);
		close(fd);
		memset(w, 0, sizeof(*w));
		w->pidfd = -1;
	}
	return r;
}

/* Is pid (ours) the process of a row we trust? */
static bool known_pid(const struct resild_clients *c, uint32_t pid)
{
	for (uint32_t j = 0; j < c->cap; j++) {
		const struct watch *w = &c->w[j];

		if (w->pid == pid && w->pidfd >= 0 &&
		    (w->kind == W_BOUND || w->kind == W_CHILD || w->kind == W_ADOPTED))
			return true;
	}
	return false;
}

static bool any_foreign(const struct resild_clients *c)
{
	for (uint32_t j = 0; j < c->cap; j++)
		if (c->w[j].pidfd >= 0 && c->w[j].foreign && c->w[j].kind != W_EXITED)
			return true;
	return false;
}

/* The uids vouching for rows we cannot identify now (see vouch_uid). */
static uint32_t vouchers(const struct resild_clients *c)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < RESILD_VOUCHERS; k++)
		n += c->vouch_until[k] > c->ticks;
	return n;
}

static uint32_t unknown_rows(const struct resild_clients *c)
{
	uint32_t n = 0;

	for (uint32_t j = 0; j < c->cap; j++)
		n += c->w[j].kind == W_UNKNOWN;
	return n;
}

/* What a look at a row finds (examine). */
enum verdict {
	V_RETRY = 0, /* cannot tell now: the next scan looks again */
	V_WATCH,     /* a live process that maps our segments: watched */
	V_UNKNOWN,   /* unidentifiable, and someone we cannot see vouches */
	V_REFUSE,    /* nobody's: freed */
	V_GONE,	     /* adoption: the previous daemon's client, gone: reclaimed */
};

struct judged {
	enum verdict v;
	int fd;	      /* V_WATCH: the process's pidfd (then watch() takes it) */
	uint32_t pid; /* the process, in our pid namespace (V_WATCH, V_GONE) */
	uint32_t uid; /* V_WATCH: its uid (UINT32_MAX: unknown) */
	bool exempt;
	const char *why; /* V_REFUSE: for the log */
};

/* pid's pidfd when that process is the one whose start time owner names:
 * fd, -ESRCH when not (no such process, or another), or -errno when
 * /proc cannot say (then: no guess). */
static int open_owner(uint32_t pid, uint64_t owner, uint32_t *ppid)
{
	uint64_t st = 0;
	int fd = pidfd_open_(pid), r;

	if (fd < 0)
		return fd;
	/* after pidfd_open: the start time read is that of the pidfd's process */
	r = resil_proc_stat(pid, &st, ppid);
	if (r < 0 || (st & 0xffffffffULL) != (owner & 0xffffffffULL)) {
		close(fd);
		return r < 0 ? r : -ESRCH;
	}
	return fd;
}

/* A pid written in another pid namespace: our pid for the process of a
 * namespace where a client we watch lives that has that pid there and
 * the owner's start time; 0 when none. */
static uint32_t find_foreign(struct resild *d, uint32_t nspid, uint64_t owner, int *fd,
			     uint32_t *ppid)
{
	struct resild_clients *c = d->clients;
	ino_t ns[64];
	uint32_t n = 0;

	for (uint32_t j = 0; j < c->cap && n < 64; j++) {
		const struct watch *w = &c->w[j];
		bool seen = false;

		if (w->pidfd < 0 || !w->foreign || !w->ns || w->kind == W_EXITED)
			continue;
		for (uint32_t k = 0; k < n && !seen; k++)
			seen = ns[k] == w->ns;
		if (!seen)
			ns[n++] = w->ns;
	}
	resild_nspid_index(c->nsx, ns, n, resil_clock_monotonic(NULL));
	for (uint32_t k = 0; k < n; k++) {
		uint32_t pid = resild_nspid_find(c->nsx, ns[k], nspid);

		if (pid && (*fd = open_owner(pid, owner, ppid)) >= 0)
			return pid;
	}
	return 0;
}

/*
 * Look at a row claimed without us (owner word owner): whose is it?
 *   - the pid the row names, or, when no process here has it and some
 *     client lives in another pid namespace, the process of one of those
 *     namespaces that has that pid there (procfs.c's index): its start
 *     time must be the owner's;
 *   - such a process is a client only if it maps our state segment
 *     (/proc/PID/maps): a forked child does, re-parented or not (the
 *     identity is the process, not its ancestry), and a process that
 *     exec'd since does not. Where maps cannot be read (resild not root,
 *     hidepid), the older rule: a child (or a descendant) of a known
 *     client;
 *   - it counts against its uid's rows (--max-clients-per-uid);
 *   - found nowhere: unidentifiable only if a client we cannot see at all
 *     (a connection without a pid) vouches, within their uids' quota;
 *     else nobody's (adopting: the previous daemon's client, gone).
 */
static void examine(struct resild *d, uint64_t owner, bool adopting, struct judged *j)
{
	struct resild_clients *c = d->clients;
	uint32_t pid = (uint32_t)(owner >> 32), ppid = 0, max = d->opts.max_clients_per_uid;
	int fd, m;

	memset(j, 0, sizeof(*j));
	j->fd = -1;
	j->uid = UINT32_MAX;
	if (pid == 0 || pid >= RESILD_PID_MAX) {
		j->v = V_REFUSE;
		j->why = "an impossible owner";
		return;
	}
	fd = open_owner(pid, owner, &ppid);
	if (fd == -ESRCH && any_foreign(c)) {
		uint32_t p = find_foreign(d, pid, owner, &fd, &ppid);

		if (p)
			pid = p;
		else
			fd = -ESRCH;
	}
	if (fd < 0 && fd != -ESRCH) {
		j->v = V_RETRY;
		return;
	}
	if (fd < 0) {
		uint32_t v = vouchers(c);

		if (v && (!max || unknown_rows(c) < max * v)) {
			j->v = V_UNKNOWN;
			return;
		}
		j->v = adopting ? V_GONE : V_REFUSE;
		j->pid = pid;
		j->why = v ? "no process we can see, and the unseen uids' rows are at their quota"
			   : "no process of ours or of a client's pid namespace";
		return;
	}
	j->pid = pid;
	if (proc_who(d, pid, &j->uid, &j->exempt) < 0)
		j->uid = UINT32_MAX; /* counted for nobody's quota, judged as any row */
	m = c->st_ino ? resild_proc_maps(pid, c->st_dev, c->st_ino) : -ENOENT;
	if (m == 0) {
		/* a live process without our segments (it exec'd, or the row
		 * names a process that never had them): nothing it could hold */
		close(fd);
		j->v = adopting ? V_GONE : V_REFUSE;
		j->why = "a process that does not map the segments";
		return;
	}
	if (m < 0 && !adopting) {
		bool child = false;

		for (int n = 0; n < RESILD_ANCESTRY && ppid > 1 && !child; n++) {
			uint64_t pst;

			child = known_pid(c, ppid);
			if (!child && resil_proc_stat(ppid, &pst, &ppid) < 0)
				break;
		}
		if (!child) {
			close(fd);
			j->v = V_REFUSE;
			j->why = "no child of a known client";
			return;
		}
	}
	if (!adopting && max && !j->exempt && j->uid != UINT32_MAX &&
	    resild_clients_of_uid(d, j->uid) >= max) {
		close(fd);
		c->stats.over_quota++;
		j->v = V_REFUSE;
		j->why = "its uid is at its quota of rows (--max-clients-per-uid)";
		return;
	}
	j->fd = fd;
	j->v = V_WATCH;
}

/* Judge a row claimed without us (owner word owner) and act: watch, keep
 * as UNKNOWN, refuse, or (adoption) reclaim. 1 when it cost a reclaim. */
static int judge(struct resild *d, uint32_t i, uint64_t owner, bool adopting)
{
	struct resild_clients *c = d->clients;
	struct judged j;

	examine(d, owner, adopting, &j);
	switch (j.v) {
	case V_RETRY:
		/* /proc cannot say now (hidepid, EACCES): no guess */
		c->w[i].owner = owner;
		c->w[i].kind = W_UNKNOWN;
		c->w[i].recheck = c->ticks + RESILD_UNKNOWN_RECHECK;
		return 0;
	case V_UNKNOWN:
		if (c->w[i].kind != W_UNKNOWN)
			log_notice("client row %u names pid %u, not a process we can see, while "
				   "clients connect from a pid namespace we cannot see: kept, "
				   "counted against their uids",
				   i, (unsigned)(owner >> 32));
		c->w[i].owner = owner;
		c->w[i].kind = W_UNKNOWN;
		c->w[i].recheck = c->ticks + RESILD_UNKNOWN_RECHECK;
		return 0;
	case V_WATCH:
		watch(d, i, owner, j.fd, j.pid, adopting ? W_ADOPTED : W_CHILD, j.uid, j.exempt);
		return 0;
	case V_GONE:
		/* the previous daemon's client, dead (or exec'd) meanwhile */
		reclaim(d, i, owner, j.pid);
		return 1;
	case V_REFUSE:
		if (c->stats.refused < 16 || c->stats.refused % 1024 == 0)
			log_notice("client row %u claimed for pid %u: %s: freed", i,
				   (unsigned)(owner >> 32), j.why);
		refuse(d, i, owner);
		return 0;
	}
	return 0;
}

/* The table is full and a connection needs a row (now): take one that is
 * nobody's, or that no one we can see holds. Rows the scan has not judged
 * yet are judged now (at most RESILD_EVICT_LOOKS, from where the last
 * eviction stopped), and the first refused one is taken over by one CAS
 * from its owner word to newowner, so a client planting rows as fast as
 * they are freed cannot slip in between; else an UNKNOWN row (what it
 * held becomes a stray claim). The row index, or -ENOSPC. */
static int evict(struct resild *d, uint64_t newowner)
{
	struct resild_clients *c = d->clients;
	uint32_t looks = 0;

	for (int pass = 0; pass < 2; pass++)
		for (uint32_t k = 0; k < c->cap; k++) {
			uint32_t i = (c->evict_from + k) % c->cap;
			struct watch *w = &c->w[i];
			ra64 *ow = &resil_seg_client(&d->seg, i)->owner;
			uint64_t owner = ld_acquire(ow);
			struct judged j;

			if (!owner)
				continue;
			if (pass == 0) {
				if (owner == w->owner || looks >= RESILD_EVICT_LOOKS)
					continue;
				looks++;
				examine(d, owner, false, &j);
				if (j.v == V_WATCH) {
					if (w->owner || w->kind)
						forget(d, i);
					watch(d, i, owner, j.fd, j.pid, W_CHILD, j.uid, j.exempt);
					continue;
				}
				if (j.v != V_REFUSE)
					continue;
			} else if (w->kind != W_UNKNOWN || owner != w->owner) {
				continue;
			}
			if (!atomic_compare_exchange_strong_explicit(
				ow, &owner, newowner, memory_order_acq_rel, memory_order_relaxed))
				continue;
			if (w->owner || w->kind)
				forget(d, i);
			c->stats.evicted++;
			c->evict_from = i + 1;
			if (c->stats.evicted < 16 || c->stats.evicted % 1024 == 0)
				log_notice("client table full: row %u (pid %u, %s) given to a "
					   "connecting client",
					   i, (unsigned)(owner >> 32),
					   pass ? "unidentified" : "nobody's");
			return (int)i;
		}
	return -ENOSPC;
}

int resild_clients_bind(struct resild *d, pid_t peer_pid, uid_t uid, bool exempt)
{
	struct resild_clients *c = d->clients;
	uint64_t st, owner;
	int fd, r, row;

	if (!c)
		return -ESRCH;
	if (peer_pid <= 0) {
		/* a peer of a pid namespace we cannot see: its rows will be
		 * ones we cannot identify; they count against its uid */
		uint32_t k, free_k = RESILD_VOUCHERS;

		for (k = 0; k < RESILD_VOUCHERS && c->vouch_uid[k] != (uint32_t)uid; k++)
			if (free_k == RESILD_VOUCHERS && c->vouch_until[k] <= c->ticks)
				free_k = k;
		if (k == RESILD_VOUCHERS)
			k = free_k;
		if (k < RESILD_VOUCHERS) {
			c->vouch_uid[k] = (uint32_t)uid;
			c->vouch_until[k] = c->ticks + RESILD_VOUCH_TICKS;
		}
		return -ESRCH; /* the peer's pid is not visible from here */
	}
	fd = pidfd_open_((uint32_t)peer_pid);
	if (fd < 0)
		return fd;
	/* after pidfd_open: the start time is that of the process the pidfd
	 * refers to (a pid reused since the connection was made would be
	 * another process: the connection's peer is then gone anyway) */
	r = resil_proc_stat((uint32_t)peer_pid, &st, NULL);
	if (r < 0) {
		close(fd);
		return r;
	}
	owner = (uint64_t)(uint32_t)peer_pid << 32 | (st & 0xffffffffULL);
	row = resil_client_claim(&d->seg, (uint32_t)peer_pid, st, (uint32_t)uid);
	if (row == -ENOSPC) {
		/* planted rows never keep a connecting client out */
		row = evict(d, owner);
		if (row >= 0)
			resil_client_init_row(&d->seg, (uint32_t)row, st, (uint32_t)uid);
	}
	if (row < 0) {
		close(fd);
		return row;
	}
	if ((uint32_t)row >= c->cap) {
		close(fd);
		return -EIO;
	}
	if (c->w[row].owner || c->w[row].pidfd >= 0)
		forget(d, (uint32_t)row); /* an earlier owner freed it since our scan */
	r = watch(d, (uint32_t)row, owner, fd, (uint32_t)peer_pid, W_BOUND, (uint32_t)uid, exempt);
	if (r < 0) {
		resil_client_release(&d->seg, (uint32_t)row);
		return r;
	}
	c->stats.bound++;
	return row;
}

struct sweep_ctx {
	struct resild *d;
	uint32_t budget;
	uint32_t last; /* the slot visited last */
	uint32_t freed;
	bool stopped;
	bool global;  /* the policy swept is policy.scope = global */
	bool foreign; /* some client lives in another pid namespace */
	uint32_t pid_checks;
	/* this pass's answers for rowless holders' pids (a holder of many
	 * permits is looked up once): pid << 1 | gone */
	uint32_t seen[64];
};

/* Is the rowless holder pid gone? (see "Stray claims") */
static bool pid_gone(struct sweep_ctx *sc, uint32_t pid)
{
	uint32_t *e = &sc->seen[(pid * 0x9e3779b1u) >> 26];
	bool gone;

	if (*e >> 1 == pid)
		return *e & 1;
	if (sc->foreign || sc->pid_checks >= RESILD_PID_CHECKS)
		return false; /* cannot tell, or not this tick */
	sc->pid_checks++;
	gone = kill((pid_t)pid, 0) < 0 && errno == ESRCH;
	*e = pid << 1 | gone;
	return gone;
}

/* Frees a stray claim? (resil_stray_fn; ctx: the sweep_ctx) */
static bool stray_id(uint32_t id, void *ctx)
{
	struct sweep_ctx *sc = ctx;
	struct resild *d = sc->d;

	/* a slot the cluster parked (a global bulkhead's share): kept while
	 * the policy is global, given back once it is not */
	if (id == RESIL_BULKHEAD_PARKED)
		return !sc->global;
	if (id >= RESIL_CLIENT_PID_TAG) {
		uint32_t pid = id - RESIL_CLIENT_PID_TAG;

		if (pid == 0 || pid >= RESIL_CLIENT_PID_MAX)
			return true; /* names nobody */
		if (pid_gone(sc, pid))
			return true;
		d->clients->stats.unregistered_held++;
		return false;
	}
	/* the slot was loaded before this row: see "Stray claims" */
	return id > d->clients->cap || ld_acquire(&resil_seg_client(&d->seg, id - 1)->owner) == 0;
}

static int sweep_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		     void *ctx)
{
	struct sweep_ctx *sc = ctx;
	struct resil_ctx x = {.seg = s, .pid = (uint32_t)getpid()};
	uint32_t cost = resil_policy_pool_slots(rec), n;

	if (slot < sc->d->clients->sweep_slot)
		return 0;
	if (cost > sc->budget && sc->budget < RESILD_SWEEP_SLOTS) {
		sc->stopped = true;
		return 1; /* the rest next tick */
	}
	sc->budget = cost > sc->budget ? 0 : sc->budget - cost;
	sc->last = slot;
	/* parked slots stay parked under a global policy (the cluster's)
	 * and while a move honours permits of the old memory (segmove.c) */
	sc->global = rec->conf.scope == RESIL_SCOPE_GLOBAL || resild_seg_move_parks(sc->d, rec);
	n = resil_policy_sweep(&x, rec, stray_id, sc) + resild_counts_sweep(sc->d, rec);
	if (n) {
		resil_event_push(s, RESIL_EV_RECLAIMED, slot, rec->gen, n, 0, 0, 0,
				 resil_clock_monotonic(NULL));
		if (sc->freed == 0)
			log_notice("policy %s: %u permits held by no live client freed", rec->name,
				   n);
		sc->freed += n;
	}
	return 0;
}

static void sweep(struct resild *d)
{
	struct resild_clients *c = d->clients;
	struct sweep_ctx sc = {.d = d, .budget = RESILD_SWEEP_SLOTS, .foreign = any_foreign(c)};

	if (c->sweep_slot == 0)
		c->stats.unregistered_held = 0; /* counted again over this pass */
	resil_seg_foreach(&d->seg, sweep_one, &sc);
	c->sweep_slot = sc.stopped ? sc.last + 1 : 0;
	c->stats.stray_freed += sc.freed;
	if (!sc.stopped)
		c->stats.unregistered_last = c->stats.unregistered_held;
}

/* Row i's watch fired (its process exited) and the row's owner word now
 * reads owner: forget the watch and reclaim the row, unless the owner
 * changed since it was judged (freed by its client, or claimed anew: the
 * scan judges the new owner). 1 when it reclaimed. */
static uint32_t reclaim_exited(struct resild *d, uint32_t i, uint64_t owner)
{
	struct watch *w = &d->clients->w[i];
	uint64_t wo = w->owner;
	uint32_t pid = w->pid;

	forget(d, i);
	if (owner != wo)
		return 0;
	reclaim(d, i, wo, pid);
	return 1;
}

void resild_clients_scan(struct resild *d)
{
	struct resild_clients *c = d->clients;
	uint32_t judged = 0, unknown = 0, from = c->scan_from, stop = UINT32_MAX;
	/* the exits the loop reclaimed since the last scan spent this tick's
	 * budget; the next tick's starts now */
	uint32_t reclaimed = c->reclaimed_early;
	bool adopting = !c->scanned && d->adopted;

	c->reclaimed_early = 0;
	c->ticks++;
	for (uint32_t k = 0; k < c->cap; k++) {
		uint32_t i = (from + k) % c->cap;
		struct watch *w = &c->w[i];
		uint64_t owner = ld_acquire(&resil_seg_client(&d->seg, i)->owner);

		if (w->kind == W_EXITED) {
			/* its process exited: reclaim under the budget */
			if (reclaimed >= RESILD_RECLAIM_PER_TICK) {
				if (stop == UINT32_MAX)
					stop = i;
				continue;
			}
			reclaimed += reclaim_exited(d, i, owner);
			continue;
		}
		if (owner == w->owner) {
			if (w->kind == W_UNKNOWN) {
				unknown++;
				if (c->ticks >= w->recheck && judged < RESILD_JUDGE_PER_TICK) {
					judged++;
					judge(d, i, owner, false);
				}
			}
			continue;
		}
		if (w->owner || w->kind)
			forget(d, i); /* freed by its client, or claimed anew */
		if (!owner)
			continue;
		if (judged >= RESILD_JUDGE_PER_TICK ||
		    (adopting && reclaimed >= RESILD_RECLAIM_PER_TICK)) {
			/* over budget: judged next tick, from here */
			if (stop == UINT32_MAX)
				stop = i;
			continue;
		}
		judged++;
		reclaimed += judge(d, i, owner, adopting);
	}
	c->scan_from = stop == UINT32_MAX ? 0 : stop;
	if (!adopting || stop == UINT32_MAX)
		c->scanned = true;
	c->stats.unknown = unknown;
	sweep(d);
}

void resild_clients_exited(struct resild *d, uint32_t row, uint32_t cookie)
{
	struct resild_clients *c = d->clients;
	struct watch *w;

	if (!c || row >= c->cap || c->w[row].pidfd < 0 || c->w[row].cookie != cookie)
		return; /* a watch cancelled meanwhile */
	w = &c->w[row];
	if (w->kind == W_EXITED)
		return;
	/* the loop's watch is over (it fired) */
	w->kind = W_EXITED;
	if (c->reclaimed_early < RESILD_RECLAIM_PER_TICK)
		c->reclaimed_early +=
		    reclaim_exited(d, row, ld_acquire(&resil_seg_client(&d->seg, row)->owner));
	/* else the next tick reclaims it, under its budget */
}

uint32_t resild_clients_live(const struct resild *d)
{
	const struct resild_clients *c = d->clients;
	uint32_t n = 0;

	if (!c)
		return 0;
	for (uint32_t i = 0; i < c->cap; i++)
		n += c->w[i].pidfd >= 0 && c->w[i].kind != W_EXITED;
	return n;
}

void resild_clients_stats(const struct resild *d, struct resild_clients_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (d->clients)
		*out = d->clients->stats;
}

bool resild_clients_who(const struct resild *d, uint32_t row, uint32_t *pid, uint32_t *uid)
{
	const struct resild_clients *c = d->clients;
	const struct watch *w;

	if (!c || row >= c->cap)
		return false;
	w = &c->w[row];
	if (w->pidfd < 0 || !(w->kind == W_BOUND || w->kind == W_CHILD || w->kind == W_ADOPTED))
		return false;
	*pid = w->pid;
	*uid = w->uid;
	return w->uid != UINT32_MAX;
}

uint32_t resild_clients_pid_of(const struct resild *d, uint32_t row)
{
	const struct resild_clients *c = d->clients;

	if (!c || row >= c->cap || c->w[row].pidfd < 0)
		return 0;
	return c->w[row].pid;
}

/* An operator's reset: every claim no live row holds is freed (rowless
 * holders, live or not, and whatever names nobody); a parked slot stays
 * while the policy is global. */
static bool unaccounted_id(uint32_t id, void *ctx)
{
	struct sweep_ctx *sc = ctx;

	if (id == RESIL_BULKHEAD_PARKED)
		return !sc->global;
	return id > sc->d->clients->cap ||
	       ld_acquire(&resil_seg_client(&sc->d->seg, id - 1)->owner) == 0;
}

uint32_t resild_clients_free_unregistered(struct resild *d, const struct resil_rec *rec)
{
	struct resil_ctx x = {.seg = &d->seg, .pid = (uint32_t)getpid()};
	struct sweep_ctx sc = {.d = d, .global = rec->conf.scope == RESIL_SCOPE_GLOBAL};

	return resil_policy_sweep(&x, rec, unaccounted_id, &sc) + resild_counts_sweep(d, rec);
}

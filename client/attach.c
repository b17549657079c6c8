/* SPDX-License-Identifier: MIT */
/*
 * attach.c - libresil's attachment to a daemon's segments: the client row
 * a process claims in a mapping, asking resild for the segment pair, and
 * the daemon-restart machinery (liveness checks from decisions and slow
 * paths, re-attach to a daemon with fresh segments, the older mappings a
 * permit may still name). The hot path (libresil.c) reaches it only
 * through resil_priv_check (internal.h) and, for a retired mapping,
 * resil_priv_retired_slow; both out of line and cold.
 *
 * Shared-memory words this file touches: the client rows (claimed by CAS
 * in resil_client_claim, seg.c), RESIL_SEG_RETIRED in both headers (set
 * with a release fetch_or by a re-attach, read with acquire by the
 * liveness check), st->daemon_beat_ns (stored by the daemon each tick,
 * read relaxed: a stale or fresh reading only decides whether to look at
 * the socket). Each is described where it is used, below.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"
#include "resil.pb-c.h"

/* ---- identity ---- */

/* policy.scope = process: our copy of each policy starts fresh on a row
 * we just got (a previous process on the row may have left its breaker
 * OPEN; resil_policy_reset_copy). A walk over the directory: cold. */
static int reset_copy(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		      void *ctx)
{
	(void)slot;
	resil_policy_reset_copy(s, rec, *(uint32_t *)ctx, resil_clock_monotonic(NULL));
	return 0;
}

/* Claim this process's row in mapping m (the current one, or the one
 * about to become current): the row resild bound to our connection
 * (bound_id, client id; 0: none), else one we claim by CAS (a forked
 * child, embedded mode, a daemon that cannot see our pid). Under r->lock
 * (or before r is shared). */
void resil_priv_claim_row(struct resil *r, struct resil_map *m, uint32_t bound_id)
{
	uint32_t pid = (uint32_t)getpid(), id;
	int row;

	/* r->pid is read by every decision (fill_ctx): written only when it
	 * changes, that is in a forked child, before any other thread exists */
	if (r->pid != pid || !r->start_time) {
		r->pid = pid;
		if (resil_proc_stat(0, &r->start_time, NULL) < 0)
			r->start_time = 0;
		r->uid = (uint32_t)getuid();
	}
	if (bound_id && bound_id <= m->seg->geo.client_cap &&
	    ld_relaxed(&resil_seg_client(m->seg, bound_id - 1)->owner))
		row = (int)bound_id - 1; /* resild claimed it for us (clients.c) */
	else
		row = resil_client_claim(m->seg, r->pid, r->start_time, r->uid);
	if (row < 0) {
		/* a full table does not stop a worker: it decides unregistered
		 * (client id 0, no crash reclaim); the claim counted it in
		 * st->clients_full */
		r->table_full = true;
		row = -1;
	} else {
		r->table_full = false;
		id = resil_client_id(row);
		(void)resil_seg_foreach(m->seg, reset_copy, &id);
	}
	/* the owner word as we took it: resil_priv_row_check compares */
	m->row_owner = row >= 0 ? ld_relaxed(&resil_seg_client(m->seg, (uint32_t)row)->owner) : 0;
	atomic_store_explicit(&m->row, row, memory_order_relaxed);
	st_relaxed(&m->claim_id, resil_client_claim_id(row, r->pid));
	atomic_store_explicit(&r->row, row, memory_order_relaxed);
}

/*
 * Is our row in the current mapping still ours? resild frees a row it
 * refused (a uid past its quota, a process it could not tie to a client
 * when it looked) and gives an unidentifiable one to a connecting client
 * when the table is full (daemon/clients.c); and a process that found the
 * table full has none. Either way decisions go on (a rowless process
 * claims with its pid, seg.h), and here, at the periodic check (at most
 * once per RESIL_CHECK_NS, off the hot path), it claims a row again: one
 * walk of the table, no wait, no round trip. What it claimed under the
 * lost row's id the sweep freed; its releases of those are CASes from
 * that id, which free nothing of another's unless the row's new owner
 * claimed the very same slots meanwhile. Under r->lock.
 */
void resil_priv_row_check(struct resil *r)
{
	struct resil_map *m = ld_acquire(&r->cur);
	int row = atomic_load_explicit(&m->row, memory_order_relaxed);

	if (!r->mapped || m->local)
		return;
	if (row >= 0 && (uint32_t)row < m->seg->geo.client_cap &&
	    ld_relaxed(&resil_seg_client(m->seg, (uint32_t)row)->owner) == m->row_owner)
		return;
	resil_priv_claim_row(r, m, 0);
	faa_relaxed(&r->row_claims, 1);
}

/* Ask for the segments and map them into s. Under r->lock (or before r
 * is shared). */
int resil_priv_get_segments(struct resil *r, struct resil_seg *s, uint32_t *bound_id)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__GetSegments gs = RESIL__GET_SEGMENTS__INIT;
	Resil__Response *resp = NULL;
	int fds[2], nfds = 2, err;
	char why[256] = "";

	gs.bind = true; /* resild claims our row: who we are is its word */
	req.body_case = RESIL__REQUEST__BODY_GET_SEGMENTS;
	req.get_segments = &gs;
	err = resil_priv_request(r, &req, &resp, fds, &nfds);
	if (err < 0)
		return err;
	*bound_id = resp->body_case == RESIL__RESPONSE__BODY_SEGMENTS && resp->segments
			? resp->segments->client_id
			: 0;
	resil__response__free_unpacked(resp, NULL);
	if (nfds != 2) {
		struct rlimit rl;
		int probe;

		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		/* the kernel drops descriptors it cannot install (MSG_CTRUNC):
		 * at the descriptor limit, say so, not that the daemon erred */
		probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (probe >= 0) {
			close(probe);
		} else if (errno == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			resil_priv_seterr("cannot receive the segment descriptors from resild on "
					  "%s: this process is at its descriptor limit "
					  "(RLIMIT_NOFILE, ulimit -n %llu)",
					  r->socket_path, (unsigned long long)rl.rlim_cur);
			return -EMFILE;
		}
		resil_priv_seterr("resild on %s sent %d segment descriptors, not 2", r->socket_path,
				  nfds);
		return -EPROTO;
	}
	err = resil_seg_map(s, fds[0], fds[1], false, true, why, sizeof(why));
	if (err == 0 && s->cfg->rec_cap >= RESIL_PERMIT_IDX_MAX) {
		/* a permit names its record in RESIL_PERMIT_IDX_BITS bits */
		resil_seg_unmap(s);
		resil_priv_seterr("resild on %s: %u records, more than this library "
				  "addresses",
				  r->socket_path, s->cfg->rec_cap);
		return -EPROTO;
	}
	if (err < 0) {
		/* resil_seg_map takes the fds only on success */
		close(fds[0]);
		close(fds[1]);
		s->cfg_fd = s->st_fd = -1;
		if (err == -EPROTO)
			resil_priv_seterr("resild on %s: incompatible segments: %s", r->socket_path,
					  why);
		else
			resil_priv_seterr("resild on %s: cannot map the segments: %s",
					  r->socket_path, *why ? why : strerror(-err));
		return err;
	}
	return 0;
}

/* ---- daemon restarts: liveness and re-attach ---- */

/*
 * When the daemon goes away, nothing stops: every decision is made in the
 * segments this process mapped, and a forked child claims its own row in
 * them without the daemon. What a restart changes is whether the next
 * daemon serves the same segments:
 *   - it adopted them from systemd's fd store (same epoch): nothing to do;
 *     our row is still ours (the new daemon finds it in the table and
 *     watches our pid), our handles still point at the right records;
 *   - it started fresh (no store, `systemctl stop`, a store it could not
 *     adopt): the fleet must move to its segments, or workers would go on
 *     sharing state the daemon no longer sees while new workers share
 *     another;
 *   - it retired ours (another ABI major; RESIL_SEG_RETIRED in the
 *     headers): the same move.
 *
 * When we look (no syscall while the daemon lives):
 *   1. every decision loads cfg->flags of the mapping it decides on
 *      (relaxed, on the header line it reads slot_cap from anyway) and
 *      takes the slow path below when RETIRED is set: a daemon of another
 *      ABI major retired it. A retired mapping stays usable meanwhile;
 *   2. an acquire whose clock reading (the one the policy made anyway, or
 *      a coarse one every 256th clockless acquire of a thread, every one
 *      while pending: r->clockless_mask; resil_call and retries count as
 *      clockless) is past
 *      r->next_check_ns runs resil_priv_check_slow: at most once per
 *      RESIL_CHECK_NS per process, with trylock (a thread never waits for
 *      another's slow path: it decides on the mapping it has). That check
 *      looks at RETIRED in both headers (a client that re-attached marks
 *      the old state header) and compares the daemon's heartbeat
 *      (st->daemon_beat_ns, stored each 100 ms tick) with CLOCK_MONOTONIC
 *      (vDSO): fresh means alive, done;
 *   3. slow paths (resil_policy, resil_define, resil_delete, breaker
 *      control) run the same check.
 * Only when the heartbeat is stale (or 0: a clean stop) or the mapping is
 * retired do we touch the socket, at most once per RESIL_CHECK_NS: is our
 * control connection still open (poll, no wait)? If the daemon closed it,
 * connect and say hello, bounded by RESIL_PROBE_HOT_MS from a decision
 * (the full bound from an API slow path). Nobody answering: keep deciding
 * where we are, look again in a second. An answer with our epoch: done.
 * Another epoch: re-attach. So a process notices a fresh daemon at most
 * RESIL_CHECK_NS after a clean stop, RESIL_BEAT_STALE_NS + RESIL_CHECK_NS
 * after a crash, at once when its segments are retired.
 * Cost: the mapping pointer, the tagged compare, the flag test and the
 * acquire's check add a few percent of a decision's instructions and
 * nothing measurable in time (resil/breaker.count100.acq_rel and
 * resil/bulkhead.acq_rel in daemon mode, callgrind and ns; BENCHMARKS.md,
 * "Figures behind the design comments").
 *
 * Re-attach (under r->lock): get the new segments and map them; send
 * again every definition this process made (r->defs, in order), so the
 * fleet's workers keep their policies without restarting; claim a row in
 * the new segments; set RETIRED in the old state header (release; the
 * state segment is writable for clients) so every process still deciding
 * there sees it at its next check without waiting for the heartbeat;
 * publish the new mapping in r->cur (release: pairs with the hot path's
 * acquire, so whoever sees it sees its fields and row). Handles follow by
 * themselves: a handle caches its slot word XOR the mapping's tag (the
 * epoch, random per pair), which matches in no other mapping, so the next
 * call on any handle re-resolves its name in the new mapping. A name the
 * new daemon does not know (yet: the process that defines it has not
 * re-attached) is decided in the newest older mapping that has it,
 * uncached (a lock per call), until it appears.
 * Crash window: a process killed anywhere in here leaves at most a row
 * claimed in the new segments (the new daemon reclaims it: pidfd) and a
 * definition sent (kept, as any definition). Setting RETIRED in the old
 * segments is one fetch_or: idempotent, and only ever set on segments
 * whose daemon closed our connection and whose socket now answers with
 * another epoch.
 * Old mappings stay mapped until resil_close (their descriptors are
 * closed at once): threads may still be deciding there, permits granted
 * there are released there (a permit carries its mapping's seq % 32 and
 * its record index). Each restart without the store thus keeps one old
 * segment pair's touched pages alive per process until resil_close.
 */

RESIL_COLD struct resil_map *resil_priv_find_map(struct resil *r, uint32_t seq32)
{
	for (struct resil_map *m = ld_acquire(&r->cur); m; m = m->older) {
		if (m->seq % 32 == seq32)
			return m;
	}
	/* this process's own pairs (pending.c); acquire: pairs with the
	 * release that published each, whole */
	for (struct resil_map *m = ld_acquire(&r->locals); m; m = m->next_local) {
		if (m->seq % 32 == seq32)
			return m;
	}
	return NULL;
}

/* Send d again (a daemon with fresh segments, or one that was away when
 * it was made): its state says how it went. */
static void send_def(struct resil *r, struct resil_def *d)
{
	int err = resil_priv_send_define(r, d->name, d->text, d);

	if (d->state == RESIL_DEF_UNSENT && !resil_priv_unreachable(r, err))
		r->unsent--;
	if (err == 0)
		d->state = RESIL_DEF_SENT;
	else if (!resil_priv_unreachable(r, err))
		d->state = RESIL_DEF_REFUSED; /* that daemon's call: decided here */
}

/* The definitions no daemon answered yet, to the one we reach now. */
static void send_unsent(struct resil *r)
{
	for (struct resil_def *d = r->defs; d && r->unsent; d = d->next)
		if (d->state == RESIL_DEF_UNSENT)
			send_def(r, d);
}

static int reattach(struct resil *r)
{
	struct resil_map *old = ld_acquire(&r->cur), *n;
	uint32_t bound = 0;
	int err;

	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->seg = &n->own;
	n->own.cfg_fd = n->own.st_fd = -1;
	err = resil_priv_get_segments(r, n->seg, &bound);
	if (err < 0) {
		free(n);
		return err;
	}
	n->tag = n->seg->cfg->epoch;
	n->seq = r->next_seq++;
	n->older = old;
	atomic_store_explicit(&n->row, -1, memory_order_relaxed);
	st_relaxed(&n->claim_id, resil_client_claim_id(-1, r->pid));
	n->counts_fd = -1;
	/* our definitions first, so the handles re-resolve into them; one
	 * that fails (the new daemon refuses) is that daemon's call: it is
	 * decided in this process's own pair, if it has one */
	for (struct resil_def *d = r->defs; d; d = d->next)
		send_def(r, d);
	resil_priv_claim_row(r, n, bound);
	/* the new daemon's table, before a decision may claim there */
	resil_priv_counts_open(r, n);
	/* a test's way into this crash window (tests/int_pending.c): stop
	 * here, to be killed */
	if (RESIL_UNLIKELY(getenv("RESIL_TEST_STOP_IN_ATTACH") != NULL))
		raise(SIGSTOP);
	/* our own pair (pending) stays ours, unretired: what resild did not
	 * take is decided there */
	if (!old->local) {
		/* release: a process that sees the flag sees nothing else
		 * from us; it only tells it to look at the socket */
		atomic_fetch_or_explicit(&old->seg->st->flags, RESIL_SEG_RETIRED,
					 memory_order_release);
		/* the descriptors of the old pair are not needed for its
		 * mapping */
		if (old->seg->cfg_fd >= 0)
			close(old->seg->cfg_fd);
		if (old->seg->st_fd >= 0)
			close(old->seg->st_fd);
		old->seg->cfg_fd = old->seg->st_fd = -1;
	}
	st_release(&r->cur, n);
	/* attached: decisions without a clock check every 256th call again */
	st_relaxed(&r->clockless_mask, RESIL_CLOCKLESS_MASK);
	faa_relaxed(&r->reattaches, 1);
	return 1;
}

/* Is the daemon we map still the one serving the socket? 0 yes (or we
 * cannot tell now: keep deciding), 1 re-attached, <0 the probe failed
 * (daemon down: keep deciding). Under r->lock. */
int resil_priv_liveness(struct resil *r, int timeout_ms)
{
	struct resil_map *m = ld_acquire(&r->cur);
	int64_t mono = resil_clock_monotonic(NULL);
	uint64_t beat;
	bool retired;
	int err;

	if (r->embedded || !r->mapped)
		return 0;
	/* acquire: pairs with the release fetch_or of whoever retired it */
	retired =
	    (ld_acquire(&m->seg->cfg->flags) | ld_acquire(&m->seg->st->flags)) & RESIL_SEG_RETIRED;
	/* a local pair's beat is 0: a pending handle always looks */
	if (!retired && !r->unsent) {
		/* any client's to write: compared without arithmetic that can
		 * overflow, and a beat from the future is not fresh (a dead
		 * daemon's word set ahead would say fresh for ever) */
		beat = ld_relaxed(&m->seg->st->daemon_beat_ns);
		if (beat && mono > 0 && beat <= (uint64_t)mono &&
		    (uint64_t)mono - beat < (uint64_t)RESIL_BEAT_STALE_NS)
			return 0;
	}
	if (mono < (int64_t)ld_relaxed(&r->next_probe_ns))
		return 0;
	st_relaxed(&r->next_probe_ns, (uint64_t)(mono + RESIL_CHECK_NS));
	err = resil_priv_ctl_probe(r, timeout_ms);
	if (err < 0)
		return err;
	if (r->daemon_epoch == m->tag) {
		/* our daemon (retired or not, nothing better): what it did
		 * not hear of while it was away */
		send_unsent(r);
		return 0;
	}
	return reattach(r);
}

/* After a control request: did it reach a daemon with other segments? */
int resil_priv_follow(struct resil *r)
{
	struct resil_map *m = ld_acquire(&r->cur);

	if (r->embedded || !r->mapped || r->ctl_fd < 0 || r->daemon_epoch == m->tag)
		return 0;
	return reattach(r);
}

RESIL_COLD void resil_priv_check_slow(struct resil *r, int64_t now)
{
	int64_t next = (int64_t)ld_relaxed(&r->next_check_ns);

	if (now < next && now >= next - 2 * RESIL_CHECK_NS)
		return;
	if (pthread_mutex_trylock(&r->lock) != 0)
		return;
	st_relaxed(&r->next_check_ns, (uint64_t)(now + RESIL_CHECK_NS));
	(void)resil_priv_liveness(r, RESIL_PROBE_HOT_MS);
	resil_priv_row_check(r);
	resil_priv_counts_check(r);
	pthread_mutex_unlock(&r->lock);
}

/* The mapping a decision is about to use is retired: look now, unless a
 * look failed less than RESIL_CHECK_NS ago (then decide where we are). */
void __attribute__((noinline)) resil_priv_retired_slow(struct resil *r)
{
	if (resil_clock_monotonic(NULL) < (int64_t)ld_relaxed(&r->next_probe_ns))
		return;
	if (pthread_mutex_trylock(&r->lock) != 0)
		return;
	(void)resil_priv_liveness(r, RESIL_PROBE_HOT_MS);
	pthread_mutex_unlock(&r->lock);
}

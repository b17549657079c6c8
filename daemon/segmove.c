/* SPDX-License-Identifier: MIT */
/*
 * segmove.c - a restart with new sizes: the adopted policies move into
 * segments of the sizes the options ask for.
 *
 * A restarted resild adopts the segments systemd kept (main.c). When
 * --policies, --clients or --state-size (or the settings file) ask for
 * other sizes than the adopted pair has, resild_seg_move creates a pair
 * of the new sizes, defines every live policy there (budgets first, so a
 * retry.budget = @NAME finds its budget) with its owner and origin, and
 * carries each one's state over as a change of shape carries it
 * (resil_policy_carry_from: breaker states, limiter times, keyed tables,
 * budgets, counters; the pair keeps the old one's hash keys, so keys
 * keep their fingerprints). Then the old pair is marked retired: every worker
 * re-attaches at its next decision, as after any restart that started
 * fresh (client/attach.c), and systemd's fd store gets the new pair. A
 * size too small for the live policies moves nothing: the adopted pair
 * keeps running and the error says what fits.
 *
 * Permits held in the old memory. A call admitted there releases there
 * (its permit names the old block). So that no bulkhead is over its
 * bound meanwhile, the new pool keeps as many of its slots parked
 * (RESIL_BULKHEAD_PARKED: no client claims or frees them) as the old
 * pool has holders alive, and the old pool's free slots are parked too:
 * a worker that still decides there before re-attaching is refused
 * (RESIL_REJECT_FULL) rather than admitted twice. Each tick
 * (resild_seg_move_tick) counts the old pool's live holders (a holder
 * whose process is gone holds nothing) and parks that many in the new
 * pool; the count only falls (every slot freed in the old pool is parked
 * again at the next tick, and a claim there in between takes a slot
 * freed since the previous count), so old plus new never exceed
 * bulkhead.max. Once no old holder is left, the old pair is unmapped.
 *
 * A policy.scope = global bulkhead under a cluster is bridged through
 * the fleet's accounting instead (the cluster parks its new slots): the
 * old pool is closed (a live lease of no slot, no fallback, every free
 * slot parked: no claim there succeeds), and each tick's count of its
 * live holders (resild_seg_move_held) is what the host holds besides its
 * new pool: cluster_bulkhead.c reports it to the fleet and leaves the new
 * pool's clients the share less it. A claim that read the old pool's
 * words before they were closed can still land (one per thread caught
 * between its loads and its CAS): the next tick counts it. Without a
 * cluster a global bulkhead is a host bulkhead, bridged as the others.
 *
 * Crash windows: killed before the new pair is in the fd store, the next
 * start finds the old pair retired and starts fresh (the state is lost,
 * as after a stop); killed after, it adopts the new pair and no move is
 * under way: the stray sweep (clients.c) frees the parked slots, and a
 * bulkhead may then admit beside permits still held in the old memory
 * until those are released (at most its max more, once).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "bulkhead.h"
#include "log.h"
#include "notify.h"
#include "policy.h"
#include "resild.h"
#include "segmove.h"
#include "seg_records.h"

/* How the old pool's holders are honoured. */
enum bridge_kind {
	BR_NONE,  /* no bulkhead */
	BR_LOCAL, /* slots parked in the new pool */
	BR_FLEET, /* a global bulkhead's: counted in the host's holding */
};

/* A bulkhead whose old pool still has holders. */
struct bridge {
	char name[RESIL_NAME_MAX];
	const struct resil_rec *orec; /* in the old pair */
	enum bridge_kind kind;
	uint32_t parked; /* BR_LOCAL: slots parked in the new pool */
	uint32_t held;	 /* live holders in the old pool at the last count */
};

struct resild_moved {
	struct resil_seg old;
	struct bridge *b;
	size_t n;
};

struct move_ctx {
	struct resild *d;
	struct resil_seg *ns;
	int64_t now;
	bool budgets; /* this pass defines the @budgets, the next the others */
	int failed;
	char err[512];
	struct resil_define_cost need;
	uint32_t policies;
};

static int cost_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *ctx)
{
	struct move_ctx *m = ctx;
	struct resil_define_cost c;

	if (resil_seg_define_cost(m->ns, rec->name, &rec->conf, rec->flags, &c) == 0) {
		m->need.records += c.records;
		m->need.slots += c.slots;
		m->need.arena += c.arena;
	}
	m->policies++;
	return 0;
}

static int move_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *ctx)
{
	struct move_ctx *m = ctx;
	struct resil_rec *nrec;
	uint32_t nslot;
	uint64_t w;
	int r;

	if ((rec->name[0] == '@') != m->budgets || m->failed)
		return 0;
	r = resil_seg_define(m->ns, rec->name, &rec->conf, rec->owner_uid, rec->flags, m->now,
			     m->err, sizeof(m->err));
	if (r < 0 || resil_seg_lookup(m->ns, rec->name, &nslot, &w) < 0 ||
	    !(nrec = resil_seg_rec_of(m->ns, w))) {
		if (!m->err[0])
			snprintf(m->err, sizeof(m->err), "%s", strerror(r < 0 ? -r : ENOENT));
		log_error("policy %s: cannot move into the new segments: %s", rec->name, m->err);
		m->failed = r < 0 ? r : -ENOENT;
		return 0;
	}
	/* nobody maps the new pair yet: the carry writes a block no client
	 * reads until the pair is served */
	resil_policy_carry_from(m->ns, nrec, s, rec, m->now);
	return 0;
}

/* A global bulkhead's slots are the cluster's to park when there is a
 * cluster (the options: the cluster starts after the move) */
static enum bridge_kind bridge_kind(const struct resild *d, const struct resil_rec *rec)
{
	if (!rec->conf.bulkhead.on)
		return BR_NONE;
	return rec->conf.scope == RESIL_SCOPE_GLOBAL && d->opts.cluster_redis ? BR_FLEET : BR_LOCAL;
}

/* holders whose process lives (resil_holder_fn) */
struct live {
	const struct resil_seg *s;
	uint32_t n;
};

static void count_live(uint32_t id, void *ctx)
{
	struct live *l = ctx;
	struct resil_client_row *row;
	uint32_t pid;

	if (id == 0 || id == RESIL_BULKHEAD_PARKED || id > l->s->geo.client_cap)
		return;
	row = resil_seg_client(l->s, id - 1);
	pid = (uint32_t)(ld_acquire(&row->owner) >> 32);
	if (pid && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
		l->n++;
}

static uint32_t old_holders(const struct resil_seg *os, const struct resil_rec *orec)
{
	struct live l = {.s = os};

	resil_bulkhead_holders(&orec->conf.bulkhead, resil_comp_state(os, orec, RESIL_C_BULKHEAD),
			       count_live, &l);
	return l.n;
}

/* Park in the new pool what the old one holds (BR_LOCAL; BR_FLEET: count
 * it for the cluster), and close the old pool; false once nothing is held
 * there (the bridge is done). */
static bool bridge_step(const struct resild *d, struct resil_seg *ns, const struct resil_seg *os,
			struct bridge *b)
{
	const struct resil_rec *orec = b->orec;
	void *ost = resil_comp_state(os, orec, RESIL_C_BULKHEAD);
	uint32_t busy, slot;
	struct resil_rec *nrec;
	uint64_t w;

	if (b->kind == BR_FLEET) {
		/* the words first (a claim that reads them now claims nothing:
		 * a live lease of no slot), then the slots (a claim that read
		 * the words before finds no free slot, but a parked one past
		 * the old lease: counted below or at the next tick). Rewritten
		 * each tick: the state segment is the clients' too */
		resil_bulkhead_fallback_end_set(ost, 0, 0);
		resil_bulkhead_lease_set(ost, INT64_MAX, 0, 0);
	}
	(void)resil_bulkhead_park(&orec->conf.bulkhead, ost, UINT32_MAX - 1, &busy);
	b->held = old_holders(os, orec);
	if (resil_seg_lookup(ns, b->name, &slot, &w) < 0 || !(nrec = resil_seg_rec_of(ns, w)) ||
	    bridge_kind(d, nrec) != b->kind)
		return false; /* deleted or reshaped since: its new block is not ours */
	if (b->kind == BR_FLEET)
		return b->held > 0; /* the cluster parks the new pool */
	b->parked = resil_bulkhead_park(
	    &nrec->conf.bulkhead, resil_comp_state(ns, nrec, RESIL_C_BULKHEAD), b->held, &busy);
	return b->held > 0;
}

struct collect_ctx {
	const struct resild *d;
	struct resild_moved *mv;
};

static int collect_bridges(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			   void *ctx)
{
	struct collect_ctx *cc = ctx;
	struct resild_moved *mv = cc->mv;
	enum bridge_kind k = bridge_kind(cc->d, rec);

	if (k == BR_NONE || old_holders(s, rec) == 0)
		return 0;
	snprintf(mv->b[mv->n].name, sizeof(mv->b[mv->n].name), "%s", rec->name);
	mv->b[mv->n].orec = rec;
	mv->b[mv->n].kind = k;
	mv->n++;
	return 0;
}

bool resild_seg_sizes_differ(const struct resild *d)
{
	const struct resil_seg *s = &d->seg;

	return s->cfg->slot_cap != d->opts.policies || s->geo.client_cap != d->opts.clients ||
	       s->st_size != resil_align_up(d->opts.state_size, 4096);
}

int resild_seg_move(struct resild *d)
{
	struct resil_seg_params sp = {
	    .slots = d->opts.policies,
	    .clients = d->opts.clients,
	    .state_size = d->opts.state_size,
	};
	struct move_ctx m = {.d = d, .now = resil_clock_monotonic(NULL)};
	struct resil_seg ns = {.cfg_fd = -1, .st_fd = -1};
	struct resil_define_cost room;
	struct resild_moved *mv;
	char was[160], msg[1024];
	int r;

	snprintf(was, sizeof(was), "--policies %u, --clients %u, --state-size %zu",
		 d->seg.cfg->slot_cap, d->seg.geo.client_cap, d->seg.st_size);
	r = resil_seg_create(&ns, &sp);
	if (r < 0) {
		snprintf(msg, sizeof(msg),
			 "cannot create segments of --policies %u, --clients %u, --state-size "
			 "%llu (%s): the adopted segments (%s) keep running",
			 sp.slots, sp.clients, (unsigned long long)sp.state_size, strerror(-r),
			 was);
		log_error("%s", msg);
		return 0;
	}
	/* the names' and the keyed tables' hash keys: a carried key keeps
	 * its fingerprint (nothing is defined in the new pair yet) */
	ns.cfg->hash_k0 = d->seg.cfg->hash_k0;
	ns.cfg->hash_k1 = d->seg.cfg->hash_k1;
	/* and the cluster's name for this host's state: the same run, as
	 * after any restart that adopts (otherwise the fleet would hold the
	 * old run's share beside the new one's) */
	ns.cfg->run = d->seg.cfg->run ? d->seg.cfg->run : d->seg.cfg->epoch;
	resil_seg_own_arena(&ns);
	m.ns = &ns;
	resil_seg_foreach(&d->seg, cost_one, &m);
	resil_seg_room(&ns, &room);
	if (m.need.slots > room.slots || m.need.records > room.records ||
	    m.need.arena > room.arena) {
		/* what fits: the live policies' slots and state, plus what the
		 * pair takes besides the arena at these sizes */
		uint64_t st_min = ns.st_size - ns.geo.arena_size + m.need.arena;

		snprintf(msg, sizeof(msg),
			 "the %u live policies do not fit --policies %u, --state-size %llu: they "
			 "need --policies %u or more and --state-size %lluK or more; the adopted "
			 "segments (%s) keep running",
			 m.policies, sp.slots, (unsigned long long)sp.state_size, m.need.slots,
			 (unsigned long long)((st_min + 1023) / 1024), was);
		log_error("%s", msg);
		resil_seg_unmap(&ns);
		return 0;
	}
	m.budgets = true;
	resil_seg_foreach(&d->seg, move_one, &m);
	m.budgets = false;
	resil_seg_foreach(&d->seg, move_one, &m);
	if (m.failed) {
		snprintf(msg, sizeof(msg),
			 "the live policies could not move into segments of the new sizes (%s): "
			 "the adopted segments (%s) keep running",
			 m.err, was);
		log_error("%s", msg);
		resil_seg_unmap(&ns);
		return 0;
	}

	mv = calloc(1, sizeof(*mv));
	if (mv)
		mv->b = calloc(d->seg.cfg->slot_cap ? d->seg.cfg->slot_cap : 1, sizeof(*mv->b));
	if (!mv || !mv->b) {
		free(mv);
		resil_seg_unmap(&ns);
		return log_error_errno(-ENOMEM, "cannot move the policies: %m");
	}
	mv->old = d->seg;
	resil_seg_foreach(&mv->old, collect_bridges, &(struct collect_ctx){.d = d, .mv = mv});
	for (size_t i = 0; i < mv->n; i++)
		(void)bridge_step(d, &ns, &mv->old, &mv->b[i]);
	d->seg = ns;
	/* workers re-attach at their next decision (client/attach.c) */
	atomic_fetch_or_explicit(&mv->old.cfg->flags, RESIL_SEG_RETIRED, memory_order_release);
	atomic_fetch_or_explicit(&mv->old.st->flags, RESIL_SEG_RETIRED, memory_order_release);
	sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=config");
	sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=state");
	close(mv->old.cfg_fd);
	close(mv->old.st_fd);
	mv->old.cfg_fd = mv->old.st_fd = -1;
	d->moved = mv;
	snprintf(msg, sizeof(msg),
		 "moved %u policies and their state from segments of %s into new ones; %zu "
		 "bulkheads honour permits held in the old memory",
		 m.policies, was, mv->n);
	log_notice("%s", msg);
	return 1;
}

void resild_seg_move_tick(struct resild *d)
{
	struct resild_moved *mv = d->moved;
	size_t k = 0;

	if (!mv)
		return;
	for (size_t i = 0; i < mv->n; i++)
		if (bridge_step(d, &d->seg, &mv->old, &mv->b[i]))
			mv->b[k++] = mv->b[i];
		else
			log_info("policy %s: no permit held in the old segments any more",
				 mv->b[i].name);
	mv->n = k;
	if (k == 0)
		resild_seg_move_fini(d);
}

static const struct bridge *bridge_of(const struct resild *d, const struct resil_rec *rec)
{
	const struct resild_moved *mv = d->moved;

	for (size_t i = 0; mv && i < mv->n; i++)
		if (!strcmp(mv->b[i].name, rec->name))
			return &mv->b[i];
	return NULL;
}

bool resild_seg_move_parks(const struct resild *d, const struct resil_rec *rec)
{
	const struct bridge *b = bridge_of(d, rec);

	return b && b->kind == BR_LOCAL;
}

uint32_t resild_seg_move_held(const struct resild *d, const struct resil_rec *rec)
{
	const struct bridge *b = bridge_of(d, rec);

	return b && b->kind == BR_FLEET ? b->held : 0;
}

void resild_seg_move_fini(struct resild *d)
{
	struct resild_moved *mv = d->moved;

	if (!mv)
		return;
	resil_seg_unmap(&mv->old);
	free(mv->b);
	free(mv);
	d->moved = NULL;
}

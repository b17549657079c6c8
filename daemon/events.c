/* SPDX-License-Identifier: MIT */
/*
 * events.c - the consumer side of the event ring.
 *
 * Any process appends to the ring (resil_event_push: fetch_add on
 * st->event_head, fill the entry, publish seq = index + 1 with release);
 * the daemon is the only consumer. Its position is private (rd below);
 * st->events_read is a copy written by the daemon only (relaxed: observers read it for display,
 * nothing is published through it).
 *
 * Entries are read with resil_event_read (acquire on seq, copy, re-check
 * seq): a torn copy is never used.
 *   - -EAGAIN: the writer claimed the index and has not published yet. It
 *     may have been SIGKILLed in that window (its crash window); we wait
 *     EVENT_GRACE ticks for it and every entry claimed before we saw it,
 *     then skip those still unpublished at once and count them in
 *     st->events_dropped: dead writers never stall the ring, however
 *     many.
 *   - -ESTALE: writers lapped us and overwrote the entry: skipped, counted.
 *   - more than event_cap entries behind: the oldest are gone, counted.
 *
 * The daemon's own events never pass through the ring: seg_event.c queues what
 * this process pushes in private memory (resil_seg_own_events), and the
 * drain takes that queue first. So an event of the ring is always a
 * client's report (a breaker a worker moved, a keyed table a worker found
 * full), shown as such with the pid and uid resild knows for the pusher's
 * row when it identified it (its connection or its pidfd), else with the
 * pid the pusher wrote and no uid; one a client forges ("config deleted",
 * "reclaimed") is shown as that client's report, never as resild's.
 *
 * Each event is logged through journal.c (a structured entry under
 * journald, a "<N>" line otherwise) and packed once as a Response with
 * id 0 for every subscriber that wants it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "resil.pb-c.h"

#include "breaker.h"
#include "bulkhead.h"
#include "clients.h"
#include "events.h"
#include "journal.h"
#include "log.h"
#include "parse.h"
#include "loop.h"
#include "policy.h"
#include "resil.h"
#include "resild.h"

#define EVENT_GRACE	2    /* ticks a claimed, unpublished entry is waited for */
#define EVENTS_PER_TICK 4096 /* bound on one drain */

/*
 * The daemon's position is its own (rd below, private memory): the
 * header's events_read is a copy for observers, and event_head is any
 * client's to write. Holes (an index taken by fetch_add and never
 * published: a writer killed in its crash window, or a head advanced by
 * hand) are skipped as a group: the first time the drain stops at an
 * unpublished entry it notes the head it saw (hole_mark); once the grace
 * is over, every entry below that mark still unpublished is skipped at
 * once. A live writer had EVENT_GRACE ticks to finish a few stores; a
 * hundred holes cost the same grace as one.
 */
static uint64_t rd;
static uint64_t hole_mark;  /* entries below this were claimed at hole_tick */
static unsigned hole_ticks; /* ticks since the first stop at a hole, 0: none */

void resild_events_init(struct resild *d)
{
	struct resil_state_hdr *st = d->seg.st;

	/* adopted: go on from where the last daemon was; the word is any
	 * client's to write, so the drain bounds it by the ring's size.
	 * Moved to new sizes: the ring holds only what the move defined
	 * there (no client mapped it yet), not news */
	rd = d->adopted && !d->moved ? ld_relaxed(&st->events_read) : ld_acquire(&st->event_head);
	st_relaxed(&st->events_read, rd);
	hole_mark = 0;
	hole_ticks = 0;
}

/* The policy an event names, if its slot still holds that policy. */
static const char *policy_of(struct resild *d, const struct resil_event *e, char *buf, size_t len)
{
	const struct resil_rec *rec;
	uint64_t w;

	if (e->slot >= d->seg.cfg->slot_cap)
		return NULL;
	w = ld_acquire(&resil_seg_slots(&d->seg)[e->slot]);
	rec = resil_seg_rec_of(&d->seg, w);
	if (!rec)
		return NULL;
	snprintf(buf, len, "%s", rec->name);
	return buf;
}

static void fmt_pct(uint64_t bp, char *buf, size_t len)
{
	if (bp % 100 == 0)
		snprintf(buf, len, "%llu%%", (unsigned long long)(bp / 100));
	else
		snprintf(buf, len, "%llu.%02llu%%", (unsigned long long)(bp / 100),
			 (unsigned long long)(bp % 100));
}

/* " (failure rate 60% >= 50%)": why a breaker moved, in words. */
static int why_text(struct resild *d, const struct resil_event *e, char *buf, size_t len)
{
	const struct resil_rec *rec = NULL;
	char v[32], t[32];
	uint64_t w;

	if (e->slot < d->seg.cfg->slot_cap) {
		w = ld_acquire(&resil_seg_slots(&d->seg)[e->slot]);
		rec = resil_seg_rec_of(&d->seg, w);
	}
	switch (e->reason) {
	case RESIL_WHY_FAILURE_RATE:
	case RESIL_WHY_SLOW_RATE:
		fmt_pct(e->value, v, sizeof(v));
		t[0] = '\0';
		if (rec)
			fmt_pct(e->reason == RESIL_WHY_FAILURE_RATE
				    ? rec->conf.breaker.failure_rate_bp
				    : rec->conf.breaker.slow_rate_bp,
				t, sizeof(t));
		return snprintf(buf, len, " (%s %s%s%s)", resil_breaker_why(e->reason), v,
				t[0] ? " >= " : "", t);
	case RESIL_WHY_CONSECUTIVE:
		return snprintf(buf, len, " (%llu consecutive failures)",
				(unsigned long long)e->value);
	case RESIL_WHY_WAIT_OVER:
	case RESIL_WHY_PROBE_TIMEOUT:
		resil_format_duration((int64_t)e->value, v, sizeof(v));
		return snprintf(buf, len,
				e->reason == RESIL_WHY_WAIT_OVER ? " (wait of %s over)"
								 : " (a probe held over %s)",
				v);
	case RESIL_WHY_FLEET:
		fmt_pct(e->value, v, sizeof(v));
		return snprintf(buf, len, " (the fleet's window across hosts: %s bad)", v);
	default:
		return snprintf(buf, len, " (%s)", resil_breaker_why(e->reason));
	}
}

size_t resild_event_format(struct resild *d, const struct resil_event *e, char *buf, size_t len)
{
	char name[RESIL_NAME_MAX + 16];
	const char *pol = policy_of(d, e, name, sizeof(name));
	int n;

	if (!pol) {
		snprintf(name, sizeof(name), "#%u", e->slot);
		pol = name;
	}
	switch (e->type) {
	case RESIL_EV_TRANSITION:
		n = snprintf(buf, len, "policy %s: %s -> %s", pol,
			     resil_breaker_state_name((int)e->a),
			     resil_breaker_state_name((int)e->b));
		break;
	case RESIL_EV_RECLAIMED:
		n = snprintf(buf, len,
			     "policy %s: reclaimed %u permits and %u probes from dead process %u",
			     pol, e->a, e->b, e->pid ? e->pid : (uint32_t)e->value);
		break;
	case RESIL_EV_BUDGET_EXHAUSTED:
		n = snprintf(buf, len, "policy %s: retry budget exhausted", pol);
		break;
	case RESIL_EV_KEYS_FULL:
		n = snprintf(buf, len, "policy %s: keyed table full (limit.keys)", pol);
		break;
	case RESIL_EV_CLIENTS_FULL:
		n = snprintf(buf, len,
			     "client table full: a process decides unregistered "
			     "(raise --clients)");
		break;
	case RESIL_EV_CONFIG:
		n = snprintf(buf, len, "policy %s: %s", pol, resil_config_change_name(e->a));
		break;
	case RESIL_EV_REPAIRED:
		if (e->a == RESIL_W_BLOCK_RESET)
			n = snprintf(buf, len,
				     "policy %s: %u state blocks beyond repair (layout not the "
				     "configuration's) reset",
				     pol, e->b);
		else if (e->slot == UINT32_MAX)
			n = snprintf(buf, len,
				     "state segment: %u words out of range repaired (last: %s)",
				     e->b, resil_word_name(e->a));
		else
			n = snprintf(buf, len,
				     "policy %s: %u state words out of range repaired (last: %s)",
				     pol, e->b, resil_word_name(e->a));
		break;
	case RESIL_EV_CLUSTER:
		if (e->a == RESIL_CL_SHARE)
			n = snprintf(buf, len, "policy %s: leased share now %.1f/s", pol,
				     (double)e->value / 1000.0);
		else if (e->a == RESIL_CL_CONFLICT)
			n = snprintf(buf, len,
				     "policy %s: %llu host(s) under the same cluster name run "
				     "another configuration of it",
				     pol, (unsigned long long)e->value);
		else
			n = snprintf(buf, len,
				     "policy %s: lease expired unrenewed, clients fall back "
				     "(--cluster-fallback)",
				     pol);
		break;
	default:
		n = snprintf(buf, len, "policy %s: event %u", pol, e->type);
		break;
	}
	if (n > 0 && (size_t)n < len && e->reason && e->type == RESIL_EV_TRANSITION)
		n += why_text(d, e, buf + n, len - (size_t)n);
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

/* Who an event comes from (see the top): the daemon, or a client of the
 * ring, identified or not. */
struct source {
	bool own;
	bool identified;
	uint32_t pid, uid;
};

/*
 * The process an event names: ours, a reclaim's dead process (in its
 * value); for a client's report, the pid we know for its row if we
 * identified it (SO_PEERCRED, a pidfd), in our pid namespace, else the
 * pid the pusher wrote, which nothing checks (display only).
 */
static struct source source_of(struct resild *d, const struct resil_event *e, bool own)
{
	struct source src = {.own = own, .pid = e->pid};
	int row = resil_client_row_of(e->client_id, d->seg.geo.client_cap);

	if (own) {
		if (e->type == RESIL_EV_RECLAIMED)
			src.pid = e->pid ? e->pid : (uint32_t)e->value;
		return src;
	}
	if (row >= 0)
		src.identified = resild_clients_who(d, (uint32_t)row, &src.pid, &src.uid);
	if (!src.identified)
		src.pid = e->pid;
	return src;
}

static void deliver(struct resild *d, const struct resil_event *e, bool own)
{
	Resil__Response resp = RESIL__RESPONSE__INIT;
	Resil__Event ev = RESIL__EVENT__INIT;
	char name[RESIL_NAME_MAX + 16], text[512];
	const char *pol = policy_of(d, e, name, sizeof(name));
	struct source src = source_of(d, e, own);
	uint8_t buf[1024];
	size_t n = 0;

	if (!own) {
		/* a report: said as one in every line that shows it */
		if (src.identified)
			n = (size_t)snprintf(text, sizeof(text),
					     "client-reported by pid %u uid %u: ", src.pid,
					     src.uid);
		else
			n = (size_t)snprintf(
			    text, sizeof(text),
			    "client-reported (unidentified, says pid %u): ", src.pid);
	}
	resild_event_format(d, e, text + n, sizeof(text) - n);
	/* journald entry with fields, or a "<N>" line; a configuration change
	 * and a cluster lease running out were logged where the daemon made
	 * them (with more to say), so only with --verbose */
	if ((e->type != RESIL_EV_CONFIG &&
	     (e->type != RESIL_EV_CLUSTER || e->a != RESIL_CL_FALLBACK)) ||
	    !own || log_get_max_level() >= LOG_DEBUG)
		resild_journal_event_from(&d->seg, e, pol, text, own,
					  src.identified ? (int64_t)src.uid : -1, src.pid);

	/* one sequence for everything delivered, ours and the ring's */
	ev.seq = ++d->events_delivered;
	ev.time_ns = e->time_ns;
	ev.policy = (char *)(pol ? pol : "");
	ev.pid = src.pid;
	ev.value = e->value;
	ev.source = own ? RESIL__EVENT_SOURCE__SOURCE_DAEMON : RESIL__EVENT_SOURCE__SOURCE_CLIENT;
	ev.identified = src.identified;
	ev.uid = src.identified ? src.uid : 0;
	/* one datagram for every subscriber; the words are the reader's
	 * (resilctl watch) */
	ev.kind = e->type <= RESIL_EV_CLUSTER ? (Resil__EventKind)e->type
					      : RESIL__EVENT_KIND__EVENT_UNKNOWN;
	if (e->type == RESIL_EV_TRANSITION) {
		ev.from_state = (Resil__BreakerState)(e->a + 1);
		ev.to_state = (Resil__BreakerState)(e->b + 1);
		ev.why = (Resil__BreakerWhy)e->reason;
	} else {
		ev.code = e->reason;
	}
	if (e->type == RESIL_EV_CONFIG)
		ev.change =
		    (Resil__ConfigChange)(e->a < RESIL_CHANGE_REDEFINED ? e->a
									: RESIL_CHANGE_REDEFINED);
	else if (e->type == RESIL_EV_REPAIRED)
		ev.word = e->a;
	resp.id = 0;
	resp.body_case = RESIL__RESPONSE__BODY_EVENT;
	resp.event = &ev;
	n = resil__response__get_packed_size(&resp);
	if (n > sizeof(buf))
		return;
	n = resil__response__pack(&resp, buf);
	resild_loop_broadcast(d, buf, n, pol);
}

void resild_events_drain(struct resild *d)
{
	struct resil_state_hdr *st = d->seg.st;
	uint64_t head = ld_acquire(&st->event_head);
	uint64_t cap = d->seg.geo.event_cap, dropped;
	unsigned budget = EVENTS_PER_TICK;

	/* more than a ring behind (writers lapped us), or a head behind our
	 * position (a client moved it back): nothing older than one ring
	 * can still be read; go on from there */
	if (head - rd > cap) {
		if (head > rd) {
			uint64_t lost = head - rd - cap;

			faa_relaxed(&st->events_dropped, lost);
			log_warning("event ring overrun: %llu events lost",
				    (unsigned long long)lost);
			rd = head - cap;
			/* holes noted before stay noted: writers that keep
			 * the head a ring ahead of unwritten entries (a head
			 * moved far ahead) would otherwise restart their grace
			 * at every tick, and nothing would ever be read */
			if (rd >= hole_mark)
				hole_ticks = 0;
		} else {
			resild_state_repaired(d, UINT32_MAX, 0, RESIL_W_EVENTS, 1);
			rd = head;
			hole_ticks = 0;
		}
	}
	/* ours first: what we did, then what clients report */
	for (struct resil_event e; budget && resil_seg_own_event_take(&d->seg, &e, &dropped) == 0;
	     budget--) {
		if (dropped)
			log_warning("%llu events of resild's own dropped (queue full)",
				    (unsigned long long)dropped);
		d->events_seen++;
		deliver(d, &e, true);
	}
	if (hole_ticks && ++hole_ticks <= EVENT_GRACE + 1 && rd < hole_mark)
		goto out; /* holes noted, grace not over */
	while (rd != head && budget--) {
		struct resil_event e;
		int r = resil_event_read(&d->seg, rd, &e);

		if (r == -EAGAIN) {
			if (hole_ticks && rd < hole_mark) {
				/* claimed before the mark, grace over: its
				 * writer died (or nobody wrote it): skip */
				faa_relaxed(&st->events_dropped, 1);
				rd++;
				continue;
			}
			/* a writer may still be filling it: note the head,
			 * wait the grace once for everything claimed so far */
			hole_mark = head;
			hole_ticks = 1;
			break;
		}
		if (r < 0) {
			faa_relaxed(&st->events_dropped, 1);
			rd++;
			continue;
		}
		d->events_seen++;
		deliver(d, &e, false);
		rd++;
	}
	if (rd >= hole_mark)
		hole_ticks = 0;
out:
	st_relaxed(&st->events_read, rd);
}

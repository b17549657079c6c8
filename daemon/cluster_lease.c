/* SPDX-License-Identifier: MIT */
/*
 * cluster_lease.c - policy.scope = global for limiters (unkeyed GCRA):
 * leases of the fleet's rate, their length, and what a host's clients fall
 * back on past them (cluster.c lists the parts). The lease script runs on
 * Redis; the loop's side (cl_tick_limit) applies its answers to the
 * limiter's lease words and measures the demand; the thread's side is the
 * answer's parser and the round trip's note. The design (the lease, its
 * invariant, time, the fallback's tiers and what the fleet keeps for a
 * silent host) is docs/internals/cluster.md, "Limiter leases".
 *
 * Who writes what. The limiter's lease and fallback words: the loop only
 * (resil_limit_lease_set's order, then resil_limit_fallback_end_set's).
 * struct cl_slot: the loop only. The round trips and the lease's length:
 * the thread (lease_len_ns relaxed: a lease's length, read whole).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "cluster_priv.h"
#include "limit.h"
#include "log.h"
#include "policy.h"
#include "resil.h"
#include "resild.h"
#include "stats.h"

/*
 * KEYS[1] the policy's lease hash. ARGV: host, demand per second, rate per
 * second, lease length (ms), the id of the lease the host has applied,
 * "1" for an acknowledgement only (the host applied a smaller share: its
 * larger leases go, no new one is granted, the answer is not a lease) or
 * "0", the share its clients fall back on (its last one; 0: none the fleet
 * need hold), how long a silent host's fallback is held (ms), the fleet's
 * size (--cluster-hosts; 0: not given), what its clients fall back on
 * past the hold (rate / N; 0: nothing), how long past its last report
 * that is kept (ms, at least the hold), and "1" when its clients fall
 * back on the last share they applied (--cluster-fallback share: the
 * share granted now is held as its fallback too). Returns {share per second
 * (string), lease id, hosts present, tell}: tell 2, this host got less
 * than its fair share (others still hold it: ask again soon); 1, a host
 * waits for what this host gives back (acknowledge the smaller share at
 * once); 0, nothing to hurry.
 *
 * A host holds the largest of its live leases and, until it has been
 * silent for the hold, the fallback it reported; then, until silent for
 * the keep, the rate / N it reported, unless another run of its host id
 * has reported since (a restart without its state: that run speaks for
 * the host). An applied id above any
 * this hash granted (Redis restarted empty) is not believed: otherwise
 * the leases granted since, with lower ids, would count as replaced and
 * the host as holding nothing until the ids caught up. Hosts that reported
 * within a lease length share what the silent hosts and, with a fleet's
 * size, the hosts not seen (rate / N each) leave.
 */
const char LEASE_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me, demand, rate = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local L, applied = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
    "local ack = ARGV[6] == '1'\n"
    "local fb, F, N = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "local base, W, keeps = tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12] == '1'\n"
    "if not demand or not rate or not L or not applied or not fb or not F or not N or\n"
    "   not base or not W or demand < 0 or rate <= 0 or L <= 0 or fb < 0 or F < L or\n"
    "   N < 0 or base < 0 or W < F then\n"
    "  return redis.error_reply('ERR resil lease: bad arguments')\n"
    "end\n"
    "if fb > rate then fb = rate end\n"
    "if base > rate then base = rate end\n"
    "local raw = redis.call('HGETALL', KEYS[1])\n"
    "local hosts, dirty = {}, {}\n"
    "for i = 1, #raw, 2 do\n"
    "  local ok, r = pcall(cjson.decode, raw[i + 1])\n"
    "  if ok and type(r) == 'table' and type(r.l) == 'table' and tonumber(r.d) and\n"
    "     tonumber(r.s) and tonumber(r.a) and tonumber(r.id) then\n"
    "    hosts[raw[i]] = r\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[1], raw[i])\n"
    "  end\n"
    "end\n"
    "local r = hosts[me] or {d = 0, s = now, a = 0, id = 0, l = {}}\n"
    "r.d, r.s, r.f, r.b = demand, now, fb, base\n"
    "local myid = string.match(me, '^(.*)#') or me\n"
    "if applied > r.a and applied <= r.id then r.a = applied end\n"
    "hosts[me] = r\n"
    "local live, other, held, wanted, silent, present = {}, 0, 0, false, 0, 0\n"
    "for h, x in pairs(hosts) do\n"
    "  local keep, c = {}, 0\n"
    "  if h ~= me and tonumber(x.w) and tonumber(x.w) > now then wanted = true end\n"
    "  for _, e in ipairs(x.l) do\n"
    "    local s, ex, id = tonumber(e[1]), tonumber(e[2]), tonumber(e[3])\n"
    "    if s and ex and id and ex > now and id >= x.a then\n"
    "      keep[#keep + 1] = {s, ex, id}\n"
    "      if s > c then c = s end\n"
    "    end\n"
    "  end\n"
    "  if #keep ~= #x.l then dirty[h] = true end\n"
    "  x.l = keep\n"
    "  local age = now - x.s\n"
    "  if age <= F and tonumber(x.f) and tonumber(x.f) > c then\n"
    "    c = math.min(tonumber(x.f), rate)\n"
    "  end\n"
    "  local b = tonumber(x.b) or 0\n"
    "  -- a later run of this host id speaks for it now\n"
    "  if h ~= me and (string.match(h, '^(.*)#') or h) == myid then b = 0 end\n"
    "  if age > F and age <= W and b > c then c = math.min(b, rate) end\n"
    "  if #keep == 0 and age > (b > 0 and W or F) and h ~= me then\n"
    "    hosts[h] = nil\n"
    "    redis.call('HDEL', KEYS[1], h)\n"
    "  else\n"
    "    present = present + 1\n"
    "    if h ~= me then other = other + c else held = c end\n"
    "    if h == me or age <= L then live[#live + 1] = h else silent = silent + c end\n"
    "  end\n"
    "end\n"
    "local unseen = 0\n"
    "if N > present then unseen = (N - present) * rate / N end\n"
    "if ack then\n"
    "  for h, _ in pairs(dirty) do\n"
    "    if hosts[h] then redis.call('HSET', KEYS[1], h, cjson.encode(hosts[h])) end\n"
    "  end\n"
    "  redis.call('HSET', KEYS[1], me, cjson.encode(r))\n"
    "  return {'0', math.max(r.id, 1), present, 0}\n"
    "end\n"
    "table.sort(live, function(a, b) return hosts[a].d < hosts[b].d end)\n"
    "local left, n, mine = math.max(rate - silent - unseen, 0), #live, 0\n"
    "for i, h in ipairs(live) do\n"
    "  local g = math.min(hosts[h].d, left / (n - i + 1))\n"
    "  if h == me then mine = g end\n"
    "  left = left - g\n"
    "end\n"
    "if left > 0 then mine = mine + left / n end\n"
    "local share = math.min(mine, rate - other - unseen)\n"
    "if share < 0 then share = 0 end\n"
    "local slack = rate / 20 + 0.5\n"
    "local tell = 0\n"
    "if share < mine - slack then r.w, tell = now + L, 2 else r.w = nil end\n"
    "if tell == 0 and wanted and share < held - slack then tell = 1 end\n"
    "r.id = r.id + 1\n"
    "r.l[#r.l + 1] = {share, now + L + 1, r.id}\n"
    "-- the host falls back on the share it applies last: this one, or the\n"
    "-- one it has if the answer is lost\n"
    "if keeps and share > r.f then r.f = share end\n"
    "dirty[me] = true\n"
    "for h, _ in pairs(dirty) do\n"
    "  if hosts[h] then redis.call('HSET', KEYS[1], h, cjson.encode(hosts[h])) end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], 10 * L + W + 1000)\n"
    "return {string.format('%.6f', share), r.id, present, tell}\n";

/* The reply of one lease script call into a; false: garbage (the caller
 * says so: cluster_rc.c, parsed_for). */
bool parse_answer(redisReply *r, struct xans *a)
{
	char *end;
	double share;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_INTEGER ||
	    r->element[2]->type != REDIS_REPLY_INTEGER ||
	    r->element[3]->type != REDIS_REPLY_INTEGER)
		return false;
	share = strtod(r->element[0]->str, &end);
	if (end == r->element[0]->str || *end || !isfinite(share) || share < 0 ||
	    r->element[1]->integer < 1 || r->element[2]->integer < 1)
		return false;
	a->share = share;
	a->id = (uint64_t)r->element[1]->integer;
	a->hosts = (uint32_t)resil_min64(r->element[2]->integer, UINT32_MAX);
	a->tell = (int)resil_min64(resil_max64(r->element[3]->integer, 0), 2);
	return true;
}

/* How long an answer of the fleet's breaker holds the host's OPEN (and a
 * prober's claim lasts in Redis without renewal): a lease's length, at
 * least a second, so a loop late by a few ticks does not let the host's
 * own wait end between two answers. Redis away longer: the host's breaker
 * runs its own wait and probes (its local logic). */
int64_t hold_ns(const struct resild_cluster *c)
{
	return resil_max64(lease_ns(c), RESIL_NS_PER_S);
}

/*
 * Leases that fit the round trip. A lease counts from its request's send
 * and is applied when its answer is back, a round trip later; the next
 * one leaves at the next post, or when this round is over if the round
 * trip is longer than an interval (one round at a time), and lands a
 * round trip after that. So answers come max(interval, rtt) apart and a
 * lease must cover that twice (one round lost) plus its own round trip,
 * and a round trip that grows meanwhile (a loaded host, a slow moment of
 * Redis) by as much again:
 *     L = max(3 x interval, 3 x max(interval, rtt) + 2 x rtt)
 * with rtt the longest of the last RTT_WINDOW rounds (cl_rtt_note). The
 * fleet holds a silent host's fallback for --cluster-fallback-for, which
 * must outlast two leases: L stops at half of it, and a round trip that
 * needs more is an error (logged once, in status and
 * resil_cluster_round_trip_too_long), never a silent fallback.
 */
int64_t lease_ns(const struct resild_cluster *c)
{
	int64_t l =
	    atomic_load_explicit(&((struct resild_cluster *)c)->lease_len_ns, memory_order_relaxed);

	return l ? l : LEASE_INTERVALS * c->interval_ns;
}

/* The thread, after a round that took rtt: the leases' length. */
void cl_rtt_note(struct resild_cluster *c, int64_t rtt)
{
	int64_t most = 0, l, cap = c->fallback_for_ns / 2, iv = c->interval_ns;
	bool too;

	c->rtts[c->nrtt++ % RTT_WINDOW] = rtt;
	for (uint32_t i = 0; i < RTT_WINDOW && i < c->nrtt; i++)
		most = resil_max64(most, c->rtts[i]);
	l = resil_max64(LEASE_INTERVALS * iv, 3 * resil_max64(iv, most) + 2 * most);
	too = l > cap;
	if (too)
		l = cap;
	atomic_store_explicit(&c->lease_len_ns, l, memory_order_relaxed);
	pthread_mutex_lock(&c->lock);
	c->rtt_ns = most;
	if (too != c->rtt_too_long) {
		c->rtt_too_long = too;
		pthread_mutex_unlock(&c->lock);
		if (too)
			log_error(
			    "cluster: the round trip to Redis takes %lld ms: a lease that covers "
			    "it would outlast half of --cluster-fallback-for (%lld s); leases "
			    "stop at %lld ms and run out between exchanges: raise "
			    "--cluster-fallback-for, or bring Redis closer",
			    (long long)(most / RESIL_NS_PER_MS),
			    (long long)(c->fallback_for_ns / RESIL_NS_PER_S),
			    (long long)(cap / RESIL_NS_PER_MS));
		else
			log_notice(
			    "cluster: the round trip to Redis (%lld ms) fits the leases again",
			    (long long)(most / RESIL_NS_PER_MS));
		return;
	}
	pthread_mutex_unlock(&c->lock);
}

/*
 * The fallback. What a host's clients apply past its lease, for a policy
 * whose last answered request left at ok_ns (0: none in this run):
 *   - FB_HELD: its last share, while Redis holds it (ok_ns + fallback_for:
 *     the script keeps a silent host's reported fallback that long after
 *     its last report, which came after ok_ns); the fallback's end is that
 *     instant, so a daemon that dies leaves its clients on it no longer
 *     than the fleet keeps room for it;
 *   - FB_BASE: rate / N, N the fleet's size (--cluster-hosts, else the
 *     hosts the policy's last answer counted, kept in its state so a
 *     restarted daemon still knows it, else the largest any policy
 *     knows), for a host Redis holds nothing for (no exchange yet, or out
 *     of touch longer than fallback_for); the end is a heartbeat (one
 *     hold_ns ahead, moved every tick): the clients of a daemon that died
 *     stop; without --cluster-hosts, never past ok_ns + remember_ns, as
 *     long as the script keeps the rate / N this host reported;
 *     without --cluster-hosts only while the fleet keeps something for
 *     this host (kept: an answered request of this run carried its
 *     rate / N; the callers give no more than that);
 *   - FB_NONE: reject (no fleet size known, nothing kept, or
 *     --cluster-fallback reject);
 *   - FB_LOCAL: the whole rate (--cluster-fallback local).
 * Past the end the clients apply rate / N with --cluster-hosts (the
 * fleet holds that for every host it does not see), else nothing.
 */
void cl_fallback_of(struct resild_cluster *c, int64_t ok_ns, uint32_t policy_hosts, bool kept,
		    int64_t now, struct cl_fallback *f)
{
	memset(f, 0, sizeof(*f));
	f->hosts = c->hosts_expected ? c->hosts_expected
		   : policy_hosts    ? policy_hosts
				     : c->fleet_known;
	f->after_base = c->hosts_expected > 0;
	if (c->fallback == RESILD_FALLBACK_LOCAL) {
		f->tier = FB_LOCAL;
		return;
	}
	if (c->fallback == RESILD_FALLBACK_REJECT) {
		f->tier = FB_NONE;
		return;
	}
	if (ok_ns && now < ok_ns + c->fallback_for_ns) {
		f->tier = FB_HELD;
		f->until_ns = ok_ns + c->fallback_for_ns;
		return;
	}
	f->tier = f->hosts && (c->hosts_expected || kept) ? FB_BASE : FB_NONE;
	f->until_ns = now + hold_ns(c);
	/* without --cluster-hosts the fleet keeps rate / N for this host
	 * only so long after its last report: no longer here either */
	if (ok_ns && !c->hosts_expected && f->until_ns > ok_ns + remember_ns(c))
		f->until_ns = ok_ns + remember_ns(c);
}

int64_t remember_ns(const struct resild_cluster *c)
{
	return REMEMBER_HOLDS * c->fallback_for_ns;
}

/* The emission interval of a rate per second, for the lease words. */
static int64_t interval_of(double per_s)
{
	if (per_s <= 0)
		return 0;
	double t = ceil(1e9 / per_s);

	return t > 86400e9 ? 0 : (int64_t)t;
}

/* The same for a fallback word, where 0 would mean the configured rate. */
static int64_t interval_or_reject(double per_s)
{
	int64_t T = interval_of(per_s);

	return T ? T : RESIL_LIMIT_FALLBACK_REJECT;
}

/* Say when a policy's fallback changes tier: loudly when it has nothing
 * to fall back on. */
void cl_fallback_said(struct resild_cluster *c, const char *name, const char *what, int *said,
		      int64_t ok_ns, const struct cl_fallback *f)
{
	if (f->tier == *said)
		return;
	if (f->tier == FB_NONE && c->fallback == RESILD_FALLBACK_SHARE)
		log_error("cluster: policy %s: %s: no exchange with Redis %s and %s: its clients "
			  "reject past their lease (give --cluster-hosts N for a share of the "
			  "fleet's meanwhile)",
			  name, what, ok_ns ? "for --cluster-fallback-for" : "yet",
			  f->hosts ? "the fleet keeps nothing for this host (no answered report "
				     "carried its share yet)"
				   : "no fleet size known");
	else if (f->tier == FB_BASE && *said == FB_HELD)
		log_warning("cluster: policy %s: %s: out of touch with Redis for "
			    "--cluster-fallback-for (%lld s): the fleet no longer holds this "
			    "host's share; its clients fall back on the fleet's / %u",
			    name, what, (long long)(c->fallback_for_ns / RESIL_NS_PER_S), f->hosts);
	*said = f->tier;
}

/* A lease that ran out unrenewed: while connected, a round trip longer
 * than the lease or a script failing (counted, said with the figures);
 * else the outage already said. A policy's limiter and bulkhead leases
 * come from one exchange and run out about together (the bulkhead's an
 * interval earlier): one line and one event for the policy, until every
 * lease it has is live again (tick_one clears ranout_said). */
void cl_lease_ran_out(struct resild_cluster *c, const struct resil_seg *s,
		      const struct resil_rec *rec, int64_t now)
{
	struct cl_slot *cs = &c->slots[rec->slot];
	const char *name = rec->name;
	int64_t rtt;

	if (cs->ranout_said)
		return;
	cs->ranout_said = true;
	resil_event_push(s, RESIL_EV_CLUSTER, rec->slot, rec->gen, RESIL_CL_FALLBACK, 0, 0, 0, now);
	if (!c->loop_connected) {
		log_warning("cluster: policy %s: lease ran out unrenewed (Redis out of reach): its "
			    "clients fall back",
			    name);
		return;
	}
	c->expired_connected++;
	pthread_mutex_lock(&c->lock);
	rtt = c->rtt_ns;
	pthread_mutex_unlock(&c->lock);
	log_warning("cluster: policy %s: lease ran out while connected to Redis (round trip "
		    "%lld ms, leases %lld ms; a script failing says so above): its clients fall "
		    "back until the next answer",
		    name, (long long)(rtt / RESIL_NS_PER_MS),
		    (long long)(lease_ns(c) / RESIL_NS_PER_MS));
}

/*
 * Early calls. A host whose demand appears between two posts would wait
 * for the next post to report it (with a rate diluted by the part of the
 * interval before it began), the hosts holding the rate for their next
 * posts to be granted less, and once more for them to say they applied
 * it before Redis can grant it elsewhere. So the loop samples each global
 * limiter every interval / SAMPLES (the exchange thread wakes it): calls
 * that rose by half over the demand last reported, with rejections, seen
 * on two samples in a row (the second one measures a whole sample of the
 * new rate) post an early lease call with that rate; a host granted less
 * than its fair share (tell 2) asks again at each sample, at most
 * EARLY_ASKS times per rise; a host told that another waits for its share
 * (tell 1) acknowledges its smaller lease at once (ARGV[6]: no new lease,
 * so no lease is ever applied twice). In steady state none of these fire
 * (demand moves by less than half, nobody is granted less than its fair
 * share by more than rate / 20): one call per interval; a rise costs the
 * rising host at most 1 + EARLY_ASKS calls and each host it takes from one.
 */
static void tick_early(struct tick_ctx *t, struct cl_slot *cs, const struct xans *a, uint64_t calls,
		       uint64_t rej)
{
	int64_t dt = t->now - cs->s_ns;

	if (a->fresh && a->gen == cs->gen) {
		cs->ack_due = a->tell == 1 && !t->post; /* a post acknowledges too */
		cs->waiting = a->tell == 2;
		if (!cs->waiting)
			cs->asks = 0;
	}
	if (!cs->s_ns || t->post) {
		cs->s_calls = calls;
		cs->s_rej = rej;
		cs->s_ns = t->now;
		cs->rise = false;
		return;
	}
	if (dt >= t->c->interval_ns / (2 * SAMPLES)) {
		double sub = (double)(calls - cs->s_calls) * 1e9 / (double)dt;
		bool up = rej != cs->s_rej && sub > 1.5 * cs->reported + 1.0;

		cs->s_calls = calls;
		cs->s_rej = rej;
		cs->s_ns = t->now;
		if (up && cs->rise) {
			/* the second sample: a whole one at the new rate */
			cs->demand = sub;
			cs->asks = EARLY_ASKS;
			cs->waiting = false;
			t->early = t->grant = true;
			up = false;
		}
		cs->rise = up;
	}
	if (!t->early && cs->waiting && cs->asks > 0) {
		cs->asks--;
		cs->waiting = false; /* until the answer says so again */
		t->early = t->grant = true;
	}
	if (cs->ack_due)
		t->early = true;
}

/* A global limiter: apply the last lease (and the fallback), measure the
 * demand for the next exchange. */
void cl_tick_limit(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
		   struct cl_slot *cs, const struct xans *a, struct xreq *q)
{
	struct resild_cluster *c = t->c;
	const struct resil_limit_conf *lc = &rec->conf.limit;
	struct resil_limit_state *lst = resil_comp_state(s, rec, RESIL_C_LIMIT);
	double rate = (double)lc->count * 1e9 / (double)lc->period_ns;
	uint64_t v[RESIL_STAT__MAX], calls, known;
	struct cl_fallback f;
	int64_t fb, base;
	double base_per_s;

	/* every fresh answer is newer than the last (one exchange at a time);
	 * its id may be lower after Redis lost its data */
	if (a->fresh && a->gen == rec->gen) {
		/* an event when the share moves by more than a tenth */
		if (!cs->applied || fabs(a->share - cs->share) > 0.1 * cs->share + 0.5) {
			cs->lease_changes++;
			resil_event_push(s, RESIL_EV_CLUSTER, rec->slot, rec->gen, RESIL_CL_SHARE,
					 0, 0, (uint64_t)(a->share * 1000.0), t->now);
		}
		cs->applied = a->id;
		cs->share = a->share;
		cs->expiry_ns = a->expiry_ns;
		cs->hosts = a->hosts;
		cs->ok_ns = a->sent_ns;
		/* what the fleet keeps now: that request's rate / N, or a
		 * later one's if less (it may have run already) */
		cs->kept = a->base < cs->base ? a->base : cs->base;
		st_relaxed(&lst->fleet_hosts, resil_min64(a->hosts, RESILD_CLUSTER_HOSTS_MAX));
	}
	known = ld_relaxed(&lst->fleet_hosts); /* any client's word: clamped */
	if (known > RESILD_CLUSTER_HOSTS_MAX)
		known = 0;
	if (known > t->fleet_seen)
		t->fleet_seen = (uint32_t)known;
	cl_fallback_of(c, cs->ok_ns, (uint32_t)known, cs->kept > 0, t->now, &f);
	base_per_s = f.hosts ? rate / f.hosts : 0.0;
	/* without --cluster-hosts, never more than the fleet keeps */
	if (!c->hosts_expected && base_per_s > cs->kept)
		base_per_s = cs->kept;
	base = interval_or_reject(base_per_s);
	switch (f.tier) {
	case FB_LOCAL:
		fb = 0;
		break;
	case FB_HELD:
		fb = interval_or_reject(cs->share);
		break;
	case FB_BASE:
		fb = base;
		break;
	default:
		fb = RESIL_LIMIT_FALLBACK_REJECT;
		break;
	}
	cl_fallback_said(c, rec->name, "limit", &cs->fb_tier, cs->ok_ns, &f);
	cs->fb_share = f.tier == FB_LOCAL ? rate : fb > 0 ? 1e9 / (double)fb : 0.0;
	if (cs->applied) {
		resil_limit_lease_set(lst, interval_of(cs->share), cs->expiry_ns, fb);
	} else {
		/* no answer in this run yet: a lease an adopted state still
		 * holds stays (this run speaks for the same segments) */
		const struct resil_limit_state *ls = lst;

		resil_limit_lease_set(lst, (int64_t)ld_relaxed(&ls->lease_ns),
				      (int64_t)ld_acquire(&ls->lease_expiry_ns), fb);
	}
	resil_limit_fallback_end_set(lst, f.until_ns,
				     f.after_base ? base : RESIL_LIMIT_FALLBACK_REJECT);
	if (cs->in_lease && t->now >= cs->expiry_ns) {
		cs->fallbacks++;
		cl_lease_ran_out(c, s, rec, t->now);
	}
	cs->in_lease = t->now < cs->expiry_ns;

	/* demand: calls that reached the limiter per second */
	resil_stats_read_all(resil_comp_state(s, rec, RESIL_C_STATS), v);
	calls = v[RESIL_STAT_SUCCESS] + v[RESIL_STAT_FAILURE] + v[RESIL_STAT_IGNORED] +
		v[RESIL_STAT_REJ_LIMITED];
	if (cs->calls_ns && t->now > cs->calls_ns)
		cs->demand = (double)(calls - cs->calls) * 1e9 / (double)(t->now - cs->calls_ns);
	tick_early(t, cs, a, calls, v[RESIL_STAT_REJ_LIMITED]);
	q->limit = true;
	q->rate = rate;
	/* what the fleet gets from this host is bounded by what its
	 * configuration allows: a demand past the rate asks no more (the
	 * counters it comes from are any client's to write) */
	q->demand = cs->demand < 0 ? 0 : cs->demand > rate ? rate : cs->demand;
	q->applied = cs->applied;
	/* what the fleet holds for this host while it is silent: the share
	 * its clients fall back on (share only: local gives up the bound,
	 * reject needs nothing) */
	q->fb = c->fallback == RESILD_FALLBACK_SHARE && cs->applied ? cs->share : 0.0;
	/* and what they fall back on past the hold, while this daemon lives
	 * (FB_BASE): rate / N, N this host's own fleet size, never
	 * --cluster-hosts' (the script reserves that for every host anyway) */
	q->base = c->fallback == RESILD_FALLBACK_SHARE && cs->applied && !c->hosts_expected && known
		      ? rate / (double)known
		      : 0.0;
	/* sent, it may run before the answer in hand is taken */
	cs->base = q->base;
	if (cs->kept > q->base)
		cs->kept = q->base;
	/* an acknowledgement alone when it is the only reason to call */
	q->ack = t->early && !t->grant;
	if (t->early) {
		cs->ack_due = false;
		cs->early++;
	}
	if (t->post || !cs->calls_ns || (t->early && !q->ack)) {
		cs->calls = calls;
		cs->calls_ns = t->now;
	}
	if (t->post || (t->early && !q->ack))
		cs->reported = q->demand;
	t->limiters = true;
}

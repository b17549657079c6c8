/* SPDX-License-Identifier: MIT */
/*
 * cluster_bulkhead.c - policy.scope = global for bulkheads (fail-fast
 * only): a fleet-wide maximum of calls in flight, leased to hosts as
 * slots (cluster.c lists the parts). BULKHEAD_LUA grants each host a
 * share; the loop's side (resild_cbh_tick) parks the slots above it and
 * sets the lease and fallback words its clients read. The design (the
 * invariant, expiry, the fallback, segments a restart moved) is
 * docs/internals/cluster.md, "Bulkheads".
 *
 * Who writes what. struct resild_cbh_slot: the loop only. The requests
 * and answers: cluster.c's struct xchg, under its lock. The state block's
 * lease words and the parking: the loop only (bulkhead.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bulkhead.h"
#include "cluster.h"
#include "cluster_bulkhead.h"
#include "cluster_priv.h"
#include "log.h"
#include "policy.h"
#include "seg.h"
#include "stats.h"

/*
 * KEYS[1] "<cluster>:{<policy>}:bulkhead", one field per host: its demand,
 * when it last reported (Redis TIME, ms), the slots it used then, the
 * slots its clients fall back on, the lease it has applied and its live
 * leases {slots, expiry, id}. ARGV: host, demand, max, lease length (ms),
 * the id of the lease the host has applied, the slots its clients may
 * hold now, the slots they fall back on, how long a silent host's are
 * held (ms), the fleet's size (0: not given), the slots they fall back
 * on past the hold (max / N) and how long past its last report those
 * are kept (ms; a later run of the host id ends that), "1" when its
 * clients fall back on the last share they applied (the share granted
 * now is held as its fallback too). Returns {slots,
 * lease id, hosts present}.
 */
const char resild_cbh_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me, demand, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local L, applied, used = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local fb, F, N = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "local base, W, keeps = tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12] == '1'\n"
    "if not demand or not max or not L or not applied or not used or not fb or not F or\n"
    "   not N or not base or not W or demand < 0 or max < 1 or L <= 0 or used < 0 or\n"
    "   fb < 0 or F < L or N < 0 or base < 0 or W < F\n"
    "then\n"
    "  return redis.error_reply('ERR resil bulkhead: bad arguments')\n"
    "end\n"
    "local raw = redis.call('HGETALL', KEYS[1])\n"
    "local hosts, dirty = {}, {}\n"
    "for i = 1, #raw, 2 do\n"
    "  local ok, r = pcall(cjson.decode, raw[i + 1])\n"
    "  if ok and type(r) == 'table' and type(r.l) == 'table' and tonumber(r.d) and\n"
    "     tonumber(r.s) and tonumber(r.a) and tonumber(r.id) and tonumber(r.u) then\n"
    "    hosts[raw[i]] = r\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[1], raw[i])\n"
    "  end\n"
    "end\n"
    "local r = hosts[me] or {d = 0, s = now, a = 0, id = 0, u = 0, l = {}}\n"
    "r.d, r.s, r.u, r.f = demand, now, math.min(used, max), math.min(fb, max)\n"
    "r.b = math.min(base, max)\n"
    "local myid = string.match(me, '^(.*)#') or me\n"
    "if applied > r.a and applied <= r.id then r.a = applied end\n"
    "hosts[me] = r\n"
    "local live, other, silent, present = {}, 0, 0, 0\n"
    "for h, x in pairs(hosts) do\n"
    "  local keep, c = {}, 0\n"
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
    "  if age <= L and x.u > c then c = x.u end\n"
    "  if age <= F and tonumber(x.f) and tonumber(x.f) > c then\n"
    "    c = math.min(tonumber(x.f), max)\n"
    "  end\n"
    "  local b = tonumber(x.b) or 0\n"
    "  -- a later run of this host id speaks for it now\n"
    "  if h ~= me and (string.match(h, '^(.*)#') or h) == myid then b = 0 end\n"
    "  if age > F and age <= W and b > c then c = math.min(b, max) end\n"
    "  if #keep == 0 and age > (b > 0 and W or F) and h ~= me then\n"
    "    hosts[h] = nil\n"
    "    redis.call('HDEL', KEYS[1], h)\n"
    "  else\n"
    "    present = present + 1\n"
    "    if h ~= me then other = other + c end\n"
    "    if h == me or age <= L then live[#live + 1] = h else silent = silent + c end\n"
    "  end\n"
    "end\n"
    "local unseen = 0\n"
    "if N > present then unseen = (N - present) * math.floor(max / N) end\n"
    "table.sort(live, function(a, b)\n"
    "  if hosts[a].d ~= hosts[b].d then return hosts[a].d < hosts[b].d end\n"
    "  return a < b\n"
    "end)\n"
    "local left, n, mine = math.max(max - silent - unseen, 0), #live, 0\n"
    "for i, h in ipairs(live) do\n"
    "  local g = math.min(hosts[h].d, math.floor(left / (n - i + 1)))\n"
    "  if h == me then mine = g end\n"
    "  left = left - g\n"
    "end\n"
    "if left > 0 then mine = mine + math.floor(left / n) end\n"
    "local share = math.min(mine, max - other - unseen)\n"
    "if share < 0 then share = 0 end\n"
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
    "return {share, r.id, present}\n";

bool resild_cbh_wants(const struct resil_rec *rec)
{
	return resil_has(rec, RESIL_C_BULKHEAD) && resil_bulkhead_fail_fast(&rec->conf.bulkhead);
}

void resild_cbh_tick(struct resild_cluster *c, const struct resil_seg *s,
		     const struct resil_rec *rec, struct resild_cbh_slot *cs,
		     const struct resild_cbh_ans *a, struct resild_cbh_req *q, int64_t now,
		     uint32_t *fleet_seen, uint32_t held, bool post)
{
	const struct resil_bulkhead_conf *bc = &rec->conf.bulkhead;
	struct resil_bulkhead_state *st = resil_comp_state(s, rec, RESIL_C_BULKHEAD);
	uint32_t max = resil_bulkhead_max_of(bc), fb, after, base, busy = 0, parked, known, share;
	uint64_t v[RESIL_STAT__MAX], rej;
	struct cl_fallback f;

	if (a->fresh) {
		if (!cs->applied || a->share != cs->share) {
			cs->lease_changes++;
			resil_event_push(s, RESIL_EV_CLUSTER, rec->slot, rec->gen, RESIL_CL_SHARE,
					 0, 0, (uint64_t)a->share * 1000, now);
		}
		cs->applied = a->id;
		cs->share = a->share < max ? a->share : max;
		cs->expiry_ns = a->expiry_ns;
		cs->hosts = a->hosts;
		cs->ok_ns = a->sent_ns;
		/* what the fleet keeps now (cluster_priv.h, cl_slot.kept) */
		cs->kept = a->base < cs->base ? a->base : cs->base;
		st_relaxed(&st->fleet_hosts, a->hosts < RESILD_CLUSTER_HOSTS_MAX
						 ? a->hosts
						 : RESILD_CLUSTER_HOSTS_MAX);
	}
	/* the fallback (cluster.c, "The fallback"), in slots */
	known = ld_relaxed(&st->fleet_hosts); /* any client's word: clamped */
	if (known > RESILD_CLUSTER_HOSTS_MAX)
		known = 0;
	if (known > *fleet_seen)
		*fleet_seen = known;
	cl_fallback_of(c, cs->ok_ns, known, cs->kept > 0, now, &f);
	/* an interval before the fleet lets the share go, as the lease's
	 * end: a call shorter than an interval, admitted before it, is over
	 * before the slots are granted elsewhere */
	if (f.tier == FB_HELD)
		f.until_ns -= c->interval_ns;
	/* and max / N no later than an interval before the fleet forgets it */
	if (f.tier == FB_BASE && cs->ok_ns && !c->hosts_expected &&
	    f.until_ns > cs->ok_ns + remember_ns(c) - c->interval_ns)
		f.until_ns = cs->ok_ns + remember_ns(c) - c->interval_ns;
	base = f.hosts ? max / f.hosts : 0;
	/* without --cluster-hosts, never more than the fleet keeps */
	if (!c->hosts_expected && base > cs->kept)
		base = cs->kept;
	switch (f.tier) {
	case FB_LOCAL:
		fb = max;
		break;
	case FB_HELD:
		fb = cs->share;
		break;
	case FB_BASE:
		fb = base;
		break;
	default:
		fb = 0;
		break;
	}
	after = f.after_base ? base : 0;
	cl_fallback_said(c, rec->name, "bulkhead", &cs->fb_tier, cs->ok_ns, &f);
	/* permits still held in segments a restart moved away from
	 * (segmove.c): the host holds them besides this pool, so its clients
	 * get the share, the fallback and its after tier less them */
	if (held > max)
		held = max;
	share = cs->share > held ? cs->share - held : 0;
	fb = fb > held ? fb - held : 0;
	after = after > held ? after - held : 0;
	cs->fb_slots = fb;
	cs->held = held;
	/* under a live lease: park what the share leaves; past it, the
	 * parking stays as it was (clients decide on the fallback) */
	if (cs->applied && now < cs->expiry_ns)
		parked = resil_bulkhead_park(bc, st, max - share, &busy);
	else
		parked = resil_bulkhead_park(bc, st, UINT32_MAX, &busy);
	busy += held;
	/* 1 until the first lease: past, so the fallback (0 would mean no
	 * cluster at all: a host bulkhead) */
	/* the end first: the slots claimed without a clock are only those
	 * its after tier allows too (bulkhead.c, "Global scope") */
	resil_bulkhead_fallback_end_set(st, f.until_ns, after);
	resil_bulkhead_lease_set(st, cs->applied ? cs->expiry_ns : 1, share, fb);
	if (cs->in_lease && now >= cs->expiry_ns) {
		cs->fallbacks++;
		cl_lease_ran_out(c, s, rec, now);
	}
	cs->in_lease = now < cs->expiry_ns;
	cs->parked = parked;
	cs->busy = busy;
	if (busy > cs->peak)
		cs->peak = busy;
	if (!post)
		return;
	resil_stats_read_all(resil_comp_state(s, rec, RESIL_C_STATS), v);
	rej = v[RESIL_STAT_REJ_FULL] - cs->rej;
	cs->rej = v[RESIL_STAT_REJ_FULL];
	q->on = true;
	q->max = max;
	q->demand = cs->peak + (rej < max ? (uint32_t)rej : max);
	if (q->demand > max)
		q->demand = max;
	q->used = max - parked + held < max ? max - parked + held : max;
	q->applied = cs->applied;
	/* what the fleet holds for this host while it is silent (share only) */
	q->fb = c->fallback == RESILD_FALLBACK_SHARE && cs->applied ? cs->share : 0;
	q->keeps = c->fallback == RESILD_FALLBACK_SHARE;
	/* and past the hold, while this daemon lives: max / N of its own N */
	q->base = c->fallback == RESILD_FALLBACK_SHARE && cs->applied && !c->hosts_expected && known
		      ? max / known
		      : 0;
	/* sent, it may run before the answer in hand is taken */
	cs->base = q->base;
	if (cs->kept > q->base)
		cs->kept = q->base;
	cs->demand = q->demand;
	cs->peak = busy;
}

static void put(struct resild_cb_cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(struct resild_cb_cmd *c, const char *fmt, ...)
{
	va_list ap;
	char *b = c->buf[c->argc];

	va_start(ap, fmt);
	vsnprintf(b, RESILD_CB_ARGLEN, fmt, ap);
	va_end(ap);
	c->argv[c->argc++] = b;
}

void resild_cbh_command(const struct resild_cbh_req *q, const char *name, const char *prefix,
			const char *host, const char *sha, int64_t lease_ms, int64_t hold_ms,
			uint32_t hosts, int64_t keep_ms, struct resild_cb_cmd *cmd)
{
	cmd->argc = 0;
	put(cmd, "EVALSHA");
	put(cmd, "%s", sha);
	put(cmd, "1");
	put(cmd, "%s:{%s}:bulkhead", prefix, name);
	cmd->argv[cmd->argc++] = host;
	put(cmd, "%u", q->demand);
	put(cmd, "%u", q->max);
	put(cmd, "%" PRId64, lease_ms);
	put(cmd, "%" PRIu64, q->applied);
	put(cmd, "%u", q->used);
	put(cmd, "%u", q->fb);
	put(cmd, "%" PRId64, hold_ms);
	put(cmd, "%u", hosts);
	put(cmd, "%u", q->base);
	put(cmd, "%" PRId64, keep_ms);
	put(cmd, "%s", q->keeps ? "1" : "0");
}

bool resild_cbh_parse(const struct redisReply *r, struct resild_cbh_ans *a)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		return false;
	for (size_t i = 0; i < 3; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
	if (r->element[0]->integer < 0 || r->element[0]->integer > RESIL_POOL_MAX ||
	    r->element[1]->integer < 1 || r->element[2]->integer < 1)
		return false;
	a->share = (uint32_t)r->element[0]->integer;
	a->id = (uint64_t)r->element[1]->integer;
	a->hosts =
	    (uint32_t)(r->element[2]->integer > UINT32_MAX ? UINT32_MAX : r->element[2]->integer);
	return true;
}

void resild_cbh_metrics_help(struct resil_msink *k)
{
	k->family(k, "resil_cluster_bulkhead_share",
		  "Slots of the fleet's bulkhead leased to this host.", RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_bulkhead_parked",
		  "Slots parked by the daemon (not this host's to use).", RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_bulkhead_lease_seconds",
		  "Until the bulkhead's lease expires (<= 0: expired, clients fall back).",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_bulkhead_fallbacks_total",
		  "Bulkhead leases that expired unrenewed.", RESIL_MT_COUNTER);
}

void resild_cbh_metrics(const struct resild_cbh_slot *cs, const char *name, int64_t now,
			struct resil_msink *k)
{
	struct resil_mlabel l = {"policy", name};

	k->sample(k, "resil_cluster_bulkhead_share", "", &l, 1,
		  resil_mv_uint(cs->applied ? cs->share : 0));
	k->sample(k, "resil_cluster_bulkhead_parked", "", &l, 1, resil_mv_uint(cs->parked));
	k->sample(k, "resil_cluster_bulkhead_lease_seconds", "", &l, 1,
		  resil_mv_real(cs->expiry_ns ? (double)(cs->expiry_ns - now) / 1e9 : 0.0, 3));
	k->sample(k, "resil_cluster_bulkhead_fallbacks_total", "", &l, 1,
		  resil_mv_uint(cs->fallbacks));
}

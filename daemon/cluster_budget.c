/* SPDX-License-Identifier: MIT */
/*
 * cluster_budget.c - policy.scope = global for retry budgets, and one
 * configuration per policy across a cluster name. A global budget runs
 * its token arithmetic (shm/budget.c) on the fleet's totals: clients
 * decide on the budget words in their segment as ever; every interval
 * the daemon reports this host's part to Redis (BUDGET_LUA, in
 * cluster.c's pipelined exchange) and mirrors its slice of the fleet's
 * tokens back, with the slice's end. The design (tokens, slices and what
 * the fleet keeps for a silent host, ratio, the configuration check) is
 * docs/internals/cluster.md, "Retry budgets".
 *
 * Who writes what. struct resild_cb_slot: the loop only. The requests and
 * answers: cluster.c's struct xchg, under its lock. The budget words: see
 * budget.h (tokens_milli by clients and this mirror, g_req, g_rty and
 * until_ns by this mirror only).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "budget.h"
#include "cluster.h"
#include "cluster_budget.h"
#include "conf.h"
#include "log.h"
#include "policy.h"
#include "seg.h"

#define CB_MILLI	  1000
#define CB_LOST_INTERVALS 10 /* a token report unanswered this long is given up */
#define CB_CONF_EVERY	  10 /* intervals between configuration checks */

/*
 * KEYS[1] "<cluster>:{<policy>}:budget". ARGV: host, run, kind, then
 *   tokens: max, sum, acked (milli), live, hold (ms), the level no retry
 *           passes below and a retry's cost (milli), the fleet's size the
 *           host knows;
 *   ratio:  requests, retries, live (ms).
 * Fields: "t" the fleet's tokens (milli), "h:<host>" = "run sum now part
 * until" (tokens: part the slice above the level, until its end, 0 once
 * charged) or "requests retries now" (ratio).
 * Returns tokens: {fleet tokens, hosts holding a slice, this host's slice};
 * ratio: {others' requests, retries}.
 */
const char resild_cb_budget_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me, run, kind = ARGV[1], ARGV[2], ARGV[3]\n"
    "local a, b, c = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local hk = 'h:' .. me\n"
    "if not (a and b and c) or string.find(run, ' ', 1, true) then\n"
    "  return redis.error_reply('ERR resil budget: bad arguments')\n"
    "end\n"
    "if kind == 'tokens' then\n"
    "  local live, hold, thr = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "  local one, known = tonumber(ARGV[10]), tonumber(ARGV[11])\n"
    "  if a <= 0 or not (live and hold and thr and one and known) or hold <= 0 or\n"
    "     thr < 0 or thr > a or one <= 0 then\n"
    "    return redis.error_reply('ERR resil budget: bad arguments')\n"
    "  end\n"
    "  local tok = tonumber(redis.call('HGET', KEYS[1], 't')) or a\n"
    "  local held, n, prev = 0, 1, c\n"
    "  local raw = redis.call('HGETALL', KEYS[1])\n"
    "  for i = 1, #raw, 2 do\n"
    "    local k = raw[i]\n"
    "    if string.sub(k, 1, 2) == 'h:' then\n"
    "      local r, s, w, p, u = string.match(raw[i + 1], '^(%S+) (%S+) (%d+) (%d+) (%d+)$')\n"
    "      s, w, p, u = tonumber(s), tonumber(w), tonumber(p), tonumber(u)\n"
    "      if not (r and s and w and p and u) then\n"
    "        redis.call('HDEL', KEYS[1], k)\n"
    "      else\n"
    "        if p > 0 and u <= now then\n"
    "          -- its host silent past the slice's end: spent, as far as the\n"
    "          -- fleet knows; a later report of the same run gets back what\n"
    "          -- it did not spend (its sum is counted from here)\n"
    "          tok, s, p = math.max(tok - p, 0), s - p, 0\n"
    "          redis.call('HSET', KEYS[1], k, string.format('%s %d %d 0 0', r, s, w))\n"
    "        end\n"
    "        if k == hk then\n"
    "          if r == run then prev = s end\n"
    "        elseif p > 0 or w > now - live then\n"
    "          held, n = held + p, n + 1\n"
    "        elseif w <= now - 10 * hold then\n"
    "          redis.call('HDEL', KEYS[1], k)\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  tok = math.floor(math.min(math.max(tok + b - prev, 0), a))\n"
    "  local part = 0\n"
    "  if tok > thr then\n"
    "    local free = tok - thr - held\n"
    "    part = math.max(math.floor((tok - thr) / math.max(n, known)), one)\n"
    "    part = math.min(part, math.max(free, 0))\n"
    "    if part < one and free > 0 then part = math.min(one, tok - thr) end\n"
    "  end\n"
    "  redis.call('HSET', KEYS[1], 't', string.format('%d', tok), hk,\n"
    "             string.format('%s %s %d %d %d', run, ARGV[5], now, part,\n"
    "                           part > 0 and now + hold or 0))\n"
    "  redis.call('PEXPIRE', KEYS[1], 86400000)\n"
    "  return {tok, n, math.min(tok, thr) + part}\n"
    "elseif kind == 'ratio' then\n"
    "  if a < 0 or b < 0 or c <= 0 then\n"
    "    return redis.error_reply('ERR resil budget: bad arguments')\n"
    "  end\n"
    "  redis.call('HSET', KEYS[1], hk, string.format('%d %d %d', a, b, now))\n"
    "  local raw = redis.call('HGETALL', KEYS[1])\n"
    "  local R, T = 0, 0\n"
    "  for i = 1, #raw, 2 do\n"
    "    local k = raw[i]\n"
    "    if k ~= hk and string.sub(k, 1, 2) == 'h:' then\n"
    "      local q, y, w = string.match(raw[i + 1], '^(%d+) (%d+) (%d+)$')\n"
    "      if q and tonumber(w) > now - c then\n"
    "        R, T = R + tonumber(q), T + tonumber(y)\n"
    "      elseif not q or tonumber(w) <= now - 10 * c then\n"
    "        redis.call('HDEL', KEYS[1], k)\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  redis.call('PEXPIRE', KEYS[1], 10 * c + 60000)\n"
    "  return {R, T}\n"
    "end\n"
    "return redis.error_reply('ERR resil budget: bad kind')\n";

/*
 * KEYS[1] "<cluster>:{<policy>}:conf", one field per host: "fingerprint
 * when". ARGV: host, fingerprint, live (ms). Returns {live hosts with
 * another fingerprint, the first of them or ""}.
 */
const char resild_cb_conf_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me, fp, live = ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "if not live or live <= 0 or string.find(fp, ' ', 1, true) then\n"
    "  return redis.error_reply('ERR resil conf: bad arguments')\n"
    "end\n"
    "redis.call('HSET', KEYS[1], me, fp .. ' ' .. string.format('%d', now))\n"
    "local raw = redis.call('HGETALL', KEYS[1])\n"
    "local n, other = 0, ''\n"
    "for i = 1, #raw, 2 do\n"
    "  local h = raw[i]\n"
    "  if h ~= me then\n"
    "    local f, w = string.match(raw[i + 1], '^(%S+) (%d+)$')\n"
    "    if f and tonumber(w) > now - live then\n"
    "      if f ~= fp then\n"
    "        n = n + 1\n"
    "        if other == '' then other = h end\n"
    "      end\n"
    "    elseif not f or tonumber(w) <= now - 10 * live then\n"
    "      redis.call('HDEL', KEYS[1], h)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], 10 * live + 60000)\n"
    "return {n, other}\n";

bool resild_cb_wants_budget(const struct resil_rec *rec)
{
	return resil_has(rec, RESIL_C_BUDGET) && resil_budget_has_state(&rec->conf.retry);
}

static bool tokens_kind(const struct resil_retry_conf *bc)
{
	return bc->budget_kind == RESIL_BUDGET_GRPC || bc->budget_kind == RESIL_BUDGET_AWS;
}

/* FNV-1a 64 over the configuration's text: the same text, the same
 * configuration (every key is written, defaults included). */
static uint64_t fingerprint(const struct resil_rec *rec)
{
	char text[8192];
	size_t n = resil_conf_format(&rec->conf, text, sizeof(text));
	uint64_t h = 0xcbf29ce484222325ULL;

	if (n >= sizeof(text))
		n = sizeof(text) - 1;
	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)text[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* A run of this daemon: its words in Redis are told apart from those of
 * the run before it on the same host. */
static uint64_t run_id(void)
{
	static uint64_t id;

	if (!id) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		id = ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) ^
		     ((uint64_t)getpid() << 40);
		if (!id)
			id = 1;
	}
	return id;
}

static void conf_answer(const struct resil_seg *s, const struct resil_rec *rec,
			struct resild_cb_slot *cs, const struct resild_cb_ans *a, int64_t now)
{
	if (a->conflicts && !cs->conflicts) {
		log_error("cluster: policy %s: host %s%s runs another configuration of it under "
			  "the same cluster name; the fleet-wide state would mix both: give each "
			  "fleet its own --cluster-name, or one configuration",
			  rec->name, a->other_host, a->conflicts > 1 ? " (and more)" : "");
		resil_event_push(s, RESIL_EV_CLUSTER, rec->slot, rec->gen, RESIL_CL_CONFLICT,
				 a->conflicts, 0, a->conflicts, now);
	} else if (!a->conflicts && cs->conflicts) {
		log_notice("cluster: policy %s: every host runs one configuration again",
			   rec->name);
	}
	cs->conflicts = a->conflicts;
	snprintf(cs->other_host, sizeof(cs->other_host), "%s", a->conflicts ? a->other_host : "");
}

/* The level below which no retry passes (grpc: half the bucket; aws:
 * none), and a retry's cost (grpc: a failure's, one more failure passes). */
static int64_t level_of(const struct resil_retry_conf *bc)
{
	return bc->budget_kind == RESIL_BUDGET_GRPC ? (int64_t)bc->budget_max * CB_MILLI / 2 : 0;
}

static int64_t one_of(const struct resil_retry_conf *bc)
{
	return bc->budget_kind == RESIL_BUDGET_GRPC ? CB_MILLI
						    : (int64_t)RESIL_AWS_COST_TRANSIENT * CB_MILLI;
}

/*
 * The slice of a full bucket a host spends before its first answer: the
 * level plus the rest over the fleet's size, at least one retry's worth,
 * with --cluster-hosts (the fleet keeps that part for every host it does
 * not see); only the level (no retry) without it: a size remembered from
 * the state is one the fleet keeps nothing for.
 */
static int64_t detached_slice(const struct resil_retry_conf *bc, uint32_t hosts)
{
	int64_t max = (int64_t)bc->budget_max * CB_MILLI, thr = level_of(bc);

	if (!hosts)
		return thr;
	if (hosts <= 1)
		return max;
	return resil_min64(max, thr + resil_max64((max - thr) / hosts, one_of(bc)));
}

/* The end of a slice answered to a report posted at posted_ns: the fleet
 * keeps it that long after the script ran, which was later. */
static int64_t slice_end(const struct resild_cb_env *e, int64_t posted_ns)
{
	switch (e->fallback) {
	case RESILD_FALLBACK_LOCAL:
		return 0; /* the local bucket, without end */
	case RESILD_FALLBACK_REJECT:
		return posted_ns + e->lease_ns;
	default:
		return posted_ns + e->fallback_for_ns;
	}
}

static int64_t hold_of(const struct resild_cb_env *e)
{
	return e->fallback == RESILD_FALLBACK_SHARE ? e->fallback_for_ns : e->lease_ns;
}

static void budget_answer(const struct resil_rec *rec, void *st, struct resild_cb_slot *cs,
			  const struct resild_cb_ans *a, const struct resild_cb_env *e)
{
	const struct resil_retry_conf *bc = &rec->conf.retry;
	int64_t was, n;

	if (!tokens_kind(bc)) {
		resil_budget_mirror_ratio(st, a->others_req, a->others_rty);
		cs->others_req = a->others_req;
		cs->others_rty = a->others_rty;
		cs->syncs++;
		return;
	}
	/* only the answer to the report out (a late one was given up) */
	if (!cs->inflight || a->seq != cs->seq)
		return;
	cs->hosts = a->hosts > e->hosts ? a->hosts : e->hosts;
	n = resil_budget_mirror_tokens(st, bc, a->slice_milli, a->seen_milli, &was);
	/* the slice first, its end after: a client that reads the new end
	 * beside the old tokens spends what the old slice allowed */
	cs->until_ns = slice_end(e, cs->posted_ns);
	resil_budget_lease_set(st, cs->until_ns);
	/* what clients changed since the report stays unreported */
	cs->base_milli = n - (was - a->seen_milli);
	cs->acked_milli = a->sum_milli;
	cs->fleet_milli = a->tokens_milli;
	cs->slice_milli = a->slice_milli;
	cs->inflight = false;
	cs->detached = false;
	cs->syncs++;
}

/*
 * No answer to go by. Before the first: the slice of a full bucket over
 * the fleet's size (detached_slice), what clients did meanwhile reported on top (the
 * report out, if any, is given up: its answer would mirror over this
 * slice). Past the last slice's end with this daemon alive (share): the
 * clients go on with what is left of that slice and what successes
 * refunded into it since, never a fresh one (the fleet counted the slice
 * spent at its end; a report of what was not gets it back). Either way
 * the end is one heartbeat ahead, moved every tick, so the clients of a
 * daemon that dies stop.
 */
static void detach(const struct resil_retry_conf *bc, void *st, struct resild_cb_slot *cs,
		   const struct resild_cb_env *e)
{
	int64_t was, n, v;

	cs->detached = true;
	if (cs->started)
		return;
	v = resil_budget_tokens_milli(st, bc, e->now);
	cs->slice_milli = detached_slice(bc, e->strict ? e->hosts : 0);
	n = resil_budget_mirror_tokens(st, bc, cs->slice_milli, v, &was);
	cs->base_milli = n - (was - v);
	cs->started = true;
	cs->inflight = false;
}

void resild_cb_tick(const struct resil_seg *s, const struct resil_rec *rec,
		    struct resild_cb_slot *cs, const struct resild_cb_ans *a,
		    struct resild_cb_req *q, const struct resild_cb_env *e)
{
	bool bud = resild_cb_wants_budget(rec);
	const struct resil_retry_conf *bc = &rec->conf.retry;
	void *st = bud ? resil_comp_state(s, rec, RESIL_C_BUDGET) : NULL;
	int64_t iv_ms = e->interval_ns / RESIL_NS_PER_MS, now = e->now;

	if (iv_ms < 1)
		iv_ms = 1;
	if (a->conf_fresh)
		conf_answer(s, rec, cs, a, now);
	if (bud && a->fresh)
		budget_answer(rec, st, cs, a, e);
	if (bud && tokens_kind(bc)) {
		/* from the policy's first tick (its definition's); past the
		 * last slice's end only with share (reject: none; local: no end) */
		if (!cs->started || (!cs->detached && e->fallback == RESILD_FALLBACK_SHARE &&
				     cs->until_ns && now >= cs->until_ns))
			detach(bc, st, cs, e);
		if (cs->detached) {
			cs->until_ns = e->fallback == RESILD_FALLBACK_LOCAL ? 0 : now + e->hold_ns;
			resil_budget_lease_set(st, cs->until_ns);
		}
	}
	if (!e->post)
		return;

	if (cs->conf_round++ % CB_CONF_EVERY == 0) {
		if (!cs->fp)
			cs->fp = fingerprint(rec);
		q->conf = true;
		q->conf_live_ms = 3 * CB_CONF_EVERY * iv_ms;
		snprintf(q->fp, sizeof(q->fp), "%016" PRIx64, cs->fp);
	}
	if (!bud)
		return;
	snprintf(q->run, sizeof(q->run), "%" PRIx64 ".%" PRIu32, run_id(), rec->gen);
	if (!tokens_kind(bc)) {
		q->budget = true;
		resil_budget_window(st, now, &q->req, &q->rty);
		/* counters any client can write: no host reports more than
		 * 2^40 (a trillion calls in a window) */
		q->req = q->req > (1ULL << 40) ? 1ULL << 40 : q->req;
		q->rty = q->rty > (1ULL << 40) ? 1ULL << 40 : q->rty;
		q->live_ms = 3 * iv_ms;
		return;
	}
	if (cs->inflight && now - cs->posted_ns < CB_LOST_INTERVALS * e->interval_ns)
		return; /* one report out at a time */
	int64_t v = resil_budget_tokens_milli(st, bc, now);

	cs->sum_milli += v - cs->base_milli;
	cs->base_milli = v;
	cs->seq++;
	cs->inflight = true;
	cs->posted_ns = now;
	q->budget = true;
	q->tokens = true;
	q->live_ms = 3 * iv_ms;
	q->hold_ms = resil_max64(hold_of(e) / RESIL_NS_PER_MS, 1);
	q->thr_milli = level_of(bc);
	q->one_milli = one_of(bc);
	q->known = e->hosts;
	q->seq = cs->seq;
	q->max_milli = (int64_t)bc->budget_max * CB_MILLI;
	q->sum_milli = cs->sum_milli;
	q->acked_milli = cs->acked_milli;
	q->seen_milli = v;
}

static const char *put(struct resild_cb_cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *put(struct resild_cb_cmd *c, const char *fmt, ...)
{
	va_list ap;
	char *b = c->buf[c->argc];

	va_start(ap, fmt);
	vsnprintf(b, RESILD_CB_ARGLEN, fmt, ap);
	va_end(ap);
	c->argv[c->argc++] = b;
	return b;
}

int resild_cb_commands(const struct resild_cb_req *q, const char *name, const char *prefix,
		       const char *host, const char *budget_sha, const char *conf_sha,
		       struct resild_cb_cmd cmd[2])
{
	int n = 0;

	if (q->budget) {
		struct resild_cb_cmd *c = &cmd[n++];

		c->argc = 0;
		put(c, "EVALSHA");
		put(c, "%s", budget_sha);
		put(c, "1");
		put(c, "%s:{%s}:budget", prefix, name);
		c->argv[c->argc++] = host;
		put(c, "%s", q->run);
		if (q->tokens) {
			put(c, "tokens");
			put(c, "%" PRId64, q->max_milli);
			put(c, "%" PRId64, q->sum_milli);
			put(c, "%" PRId64, q->acked_milli);
			put(c, "%" PRId64, q->live_ms);
			put(c, "%" PRId64, q->hold_ms);
			put(c, "%" PRId64, q->thr_milli);
			put(c, "%" PRId64, q->one_milli);
			put(c, "%" PRIu32, q->known);
		} else {
			put(c, "ratio");
			put(c, "%" PRIu64, q->req);
			put(c, "%" PRIu64, q->rty);
			put(c, "%" PRId64, q->live_ms);
		}
	}
	if (q->conf) {
		struct resild_cb_cmd *c = &cmd[n++];

		c->argc = 0;
		put(c, "EVALSHA");
		put(c, "%s", conf_sha);
		put(c, "1");
		put(c, "%s:{%s}:conf", prefix, name);
		c->argv[c->argc++] = host;
		put(c, "%s", q->fp);
		put(c, "%" PRId64, q->conf_live_ms);
	}
	return n;
}

bool resild_cb_parse_budget(const struct redisReply *r, const struct resild_cb_req *q,
			    struct resild_cb_ans *a)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != (q->tokens ? 3 : 2) ||
	    r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 ||
	    r->element[1]->integer < 0)
		return false;
	if (q->tokens) {
		if (r->element[0]->integer > q->max_milli ||
		    r->element[2]->type != REDIS_REPLY_INTEGER || r->element[2]->integer < 0 ||
		    r->element[2]->integer > r->element[0]->integer)
			return false;
		a->tokens_milli = r->element[0]->integer;
		a->slice_milli = r->element[2]->integer;
		a->hosts =
		    (uint32_t)resil_min64(resil_max64(r->element[1]->integer, 1), UINT32_MAX);
		a->seq = q->seq;
		a->seen_milli = q->seen_milli;
		a->sum_milli = q->sum_milli;
	} else {
		a->others_req = (uint64_t)r->element[0]->integer;
		a->others_rty = (uint64_t)r->element[1]->integer;
	}
	a->fresh = true;
	return true;
}

bool resild_cb_parse_conf(const struct redisReply *r, struct resild_cb_ans *a)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 ||
	    (r->element[1]->type != REDIS_REPLY_STRING && r->element[1]->type != REDIS_REPLY_NIL))
		return false;
	a->conflicts =
	    (uint32_t)(r->element[0]->integer > UINT32_MAX ? UINT32_MAX : r->element[0]->integer);
	snprintf(a->other_host, sizeof(a->other_host), "%.*s",
		 r->element[1]->type == REDIS_REPLY_STRING ? (int)r->element[1]->len : 0,
		 r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "");
	/* "<host>#<run>" (cluster_host.c): the host is what an operator knows */
	a->other_host[strcspn(a->other_host, "#")] = '\0';
	if (a->conflicts && !a->other_host[0])
		snprintf(a->other_host, sizeof(a->other_host), "?");
	a->conf_fresh = true;
	return true;
}

void resild_cb_metrics_help(struct resil_msink *k)
{
	k->family(k, "resil_cluster_budget_tokens",
		  "The fleet's retry budget tokens (grpc, aws) at the last exchange.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_budget_others",
		  "Requests (kind=requests) and retries (kind=retries) of the other hosts in the "
		  "ratio window.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_budget_syncs_total",
		  "Fleet budget answers mirrored into the segment.", RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_conf_conflicts",
		  "Live hosts under this cluster name with another configuration of the policy.",
		  RESIL_MT_GAUGE);
}

void resild_cb_metrics(const struct resil_rec *rec, const struct resild_cb_slot *cs,
		       const char *name, struct resil_msink *k)
{
	struct resil_mlabel l[2] = {{"policy", name}, {"kind", "requests"}};

	k->sample(k, "resil_cluster_conf_conflicts", "", l, 1, resil_mv_uint(cs->conflicts));
	if (resild_cb_wants_budget(rec)) {
		if (tokens_kind(&rec->conf.retry)) {
			k->sample(k, "resil_cluster_budget_tokens", "", l, 1,
				  resil_mv_real((double)cs->fleet_milli / CB_MILLI, 3));
		} else {
			k->sample(k, "resil_cluster_budget_others", "", l, 2,
				  resil_mv_uint(cs->others_req));
			l[1].value = "retries";
			k->sample(k, "resil_cluster_budget_others", "", l, 2,
				  resil_mv_uint(cs->others_rty));
		}
		k->sample(k, "resil_cluster_budget_syncs_total", "", l, 1,
			  resil_mv_uint(cs->syncs));
	}
}

/* SPDX-License-Identifier: MIT */
/*
 * cluster_budget.c - policy.scope = global for retry budgets, and one
 * configuration per policy across a cluster name.
 *
 * What. A global retry budget runs its token arithmetic (gRPC A6, AWS
 * quota, ratio; shm/budget.c) on the fleet's totals: a failure on one
 * host spends the tokens every host retries with, a success on another
 * refills them. The hot path is unchanged: clients still decide on the
 * budget words in their segment; every cluster interval the daemon
 * reports this host's part to Redis (BUDGET_LUA, one call per policy,
 * in cluster.c's pipelined exchange) and mirrors the fleet's result back.
 *
 * Tokens (grpc, aws). Clients move the local word as they always do. The
 * daemon keeps base, the local value already reported; at each report it
 * adds the clients' change (local - base) to sum, this host's net change
 * since its run began, and sends sum. Redis keeps per host the last sum
 * it applied ("run sum") and adds sum - that to the fleet's tokens,
 * clamped to [0, max] like a local update: so a report whose answer was
 * lost, sent again with a larger sum, is never counted twice. A new run
 * (the daemon restarted, the policy redefined) counts from the sum Redis
 * last answered it (acked), which also covers a key that expired. The
 * answer, fleet tokens F for a report taken when the local word read
 * seen, is mirrored as local = F + (local now - seen) (one CAS,
 * resil_budget_mirror_tokens): what clients did meanwhile stays on top
 * and is reported next time. One report is out at a time (a lost answer
 * is given up after ten intervals). Clamping makes the fleet's arithmetic
 * differ from one bucket's only within an interval: two hosts that each
 * spend the last tokens locally in the same interval both report it, and
 * the fleet's bucket stops at 0.
 *
 * Ratio. Each host reports its window's requests and retries (its own
 * buckets); Redis sums the other hosts' reports younger than three
 * intervals and the daemon stores them in g_req, g_rty, which the ratio
 * test adds to the local window: retries at most PERCENT of the fleet's
 * requests, each host seeing the others' counts an interval or two late.
 *
 * Mirror latency. A failure on host A is in A's next report (at most an
 * interval later); host B's next exchange reads it and B's loop applies
 * it when the exchange thread wakes it: within about an interval of the
 * report, two if a wake is lost and the tick applies it.
 *
 * One configuration per policy (CONF_LUA). Two fleets given the same
 * --cluster-name on one Redis, or one host left on an old configuration,
 * would otherwise merge different limits, windows or budgets into one
 * fleet-wide state without a word. Every ten intervals each host writes
 * a fingerprint of the policy's configuration (FNV-1a over its text,
 * resil_conf_format) under "<cluster>:{<policy>}:conf" and learns how
 * many live hosts (reported within thirty intervals) have another one. A
 * conflict is an error in the log (once, and a notice when it ends), a
 * RESIL_EV_CLUSTER event (RESIL_CL_CONFLICT) and the metric
 * resil_cluster_conf_conflicts; the policy keeps running (a rolling change
 * of configuration passes through a conflict on purpose).
 *
 * Who writes what. struct resild_cb_slot: the loop only. The requests and
 * answers: cluster.c's struct xchg, under its lock. The budget words: see
 * budget.h (tokens_milli by clients and this mirror, g_req and g_rty by
 * this mirror only).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "budget.h"
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
 *   tokens: max (milli), sum (milli), acked (milli), live (ms);
 *   ratio:  requests, retries, live (ms).
 * Fields: "t" the fleet's tokens (milli), "h:<host>" = "run sum now"
 * (tokens) or "requests retries now" (ratio).
 * Returns tokens: {fleet tokens, hosts that reported within live};
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
    "  if a <= 0 then return redis.error_reply('ERR resil budget: bad arguments') end\n"
    "  local tok = tonumber(redis.call('HGET', KEYS[1], 't')) or a\n"
    "  local prev = c\n"
    "  local v = redis.call('HGET', KEYS[1], hk)\n"
    "  if v then\n"
    "    local r, s = string.match(v, '^(%S+) (%S+)')\n"
    "    if r == run and tonumber(s) then prev = tonumber(s) end\n"
    "  end\n"
    "  tok = tok + b - prev\n"
    "  if tok < 0 then tok = 0 end\n"
    "  if tok > a then tok = a end\n"
    "  tok = math.floor(tok)\n"
    "  redis.call('HSET', KEYS[1], 't', string.format('%d', tok), hk,\n"
    "             run .. ' ' .. ARGV[5] .. ' ' .. string.format('%d', now))\n"
    "  redis.call('PEXPIRE', KEYS[1], 86400000)\n"
    "  local live, n = tonumber(ARGV[7]) or 0, 0\n"
    "  local raw = redis.call('HGETALL', KEYS[1])\n"
    "  for i = 1, #raw, 2 do\n"
    "    if string.sub(raw[i], 1, 2) == 'h:' then\n"
    "      local w = tonumber(string.match(raw[i + 1], ' (%d+)$'))\n"
    "      if w and w > now - live then\n"
    "        n = n + 1\n"
    "      elseif not w or w <= now - 100 * live then\n"
    "        redis.call('HDEL', KEYS[1], raw[i])\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return {tok, math.max(n, 1)}\n"
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

/*
 * What a host's workers may spend of the fleet's tokens before its next
 * report: the level below which no retry passes (grpc: half the bucket;
 * aws: none), plus the rest shared by the hosts the fleet counts, and at
 * least one retry's worth (so a fleet with a retry left is never stuck
 * between slices too thin to pay it). The hosts together spend at most
 * the fleet's tokens plus one retry each per exchange.
 */
static int64_t slice_of(const struct resil_retry_conf *bc, int64_t fleet, uint32_t hosts)
{
	int64_t thr, one, part;

	if (bc->budget_kind == RESIL_BUDGET_GRPC) {
		thr = (int64_t)bc->budget_max * CB_MILLI / 2;
		one = CB_MILLI; /* a failure's cost: one more failure passes */
	} else {
		thr = 0;
		one = (int64_t)RESIL_AWS_COST_TRANSIENT * CB_MILLI;
	}
	if (fleet <= thr || hosts <= 1)
		return fleet;
	part = (fleet - thr) / hosts;
	if (part < one)
		part = one;
	return resil_min64(fleet, thr + part);
}

static void budget_answer(const struct resil_rec *rec, void *st, struct resild_cb_slot *cs,
			  const struct resild_cb_ans *a, uint32_t known)
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
	/* the hosts Redis counts, or the fleet's size this host knows when
	 * more (hosts that have not reported yet spend their slice too) */
	cs->hosts = a->hosts > known ? a->hosts : known;
	n = resil_budget_mirror_tokens(st, bc, slice_of(bc, a->tokens_milli, cs->hosts),
				       a->seen_milli, &was);
	/* what clients changed since the report stays unreported */
	cs->base_milli = n - (was - a->seen_milli);
	cs->acked_milli = a->sum_milli;
	cs->fleet_milli = a->tokens_milli;
	cs->inflight = false;
	cs->syncs++;
}

void resild_cb_tick(const struct resil_seg *s, const struct resil_rec *rec,
		    struct resild_cb_slot *cs, const struct resild_cb_ans *a,
		    struct resild_cb_req *q, int64_t now, int64_t interval_ns, uint32_t hosts,
		    bool post)
{
	bool bud = resild_cb_wants_budget(rec);
	const struct resil_retry_conf *bc = &rec->conf.retry;
	void *st = bud ? resil_comp_state(s, rec, RESIL_C_BUDGET) : NULL;
	int64_t iv_ms = interval_ns / RESIL_NS_PER_MS;

	if (iv_ms < 1)
		iv_ms = 1;
	if (a->conf_fresh)
		conf_answer(s, rec, cs, a, now);
	if (bud && a->fresh)
		budget_answer(rec, st, cs, a, hosts);
	if (bud && tokens_kind(bc) && !cs->started) {
		/* no answer yet: the slice of a full bucket over the fleet's
		 * size this host knows (none known: nothing past the level no
		 * retry passes), what clients did meanwhile kept on top; from
		 * the policy's first tick (its definition's) */
		int64_t was, n, v = resil_budget_tokens_milli(st, bc, now),
				max = (int64_t)bc->budget_max * CB_MILLI;

		n = resil_budget_mirror_tokens(st, bc,
					       hosts ? slice_of(bc, max, hosts)
					       : bc->budget_kind == RESIL_BUDGET_GRPC ? max / 2
										      : 0,
					       v, &was);
		cs->started = true;
		cs->base_milli = n - (was - v);
	}
	if (!post)
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
	if (cs->inflight && now - cs->posted_ns < CB_LOST_INTERVALS * interval_ns)
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
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 ||
	    r->element[1]->integer < 0)
		return false;
	if (q->tokens) {
		if (r->element[0]->integer > q->max_milli)
			return false;
		a->tokens_milli = r->element[0]->integer;
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

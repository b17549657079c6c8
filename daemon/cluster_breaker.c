/* SPDX-License-Identifier: MIT */
/*
 * cluster_breaker.c - policy.scope = global for breakers (time windows
 * only: conf.c refuses the others): one open per outage fleet-wide, and
 * the fleet's half-open (cluster.c lists the parts). The script runs on
 * Redis; the loop's side (cl_tick_breaker) mirrors its answers into the
 * host's breaker; the thread's is the answer's parser. The design (the
 * fleet's open, its half-open, the probes' bound) is
 * docs/internals/cluster.md, "Breakers".
 *
 * Who writes what. The breaker's words: the loop, through the CASes a
 * client makes (resil_breaker_trip, _probe_now, _hold, _fleet_close).
 * struct cl_slot's bk_* words: the loop only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "breaker.h"
#include "cluster.h"
#include "cluster_priv.h"
#include "log.h"
#include "policy.h"
#include "resil.h"
#include "stats.h"

/*
 * KEYS[1] the policy's breaker hash: "h:<host>" = this host's time window
 * {calls, failures, slow, when, sync}; "gen" = opens so far, "opened" =
 * when the last one happened (ms), "st" = "o" while the fleet is open;
 * the half-open: "round" = probe rounds granted in this open, "ready" =
 * when the next may start, "prober" and "pexp" = the host that holds the
 * round's probes and when its claim lapses; "rounds" = rounds ever granted.
 * ARGV: host, calls, failures, slow, window (ms), min_calls, failure rate
 * and slow rate thresholds (basis points, slow 0: off), OPEN wait (ms),
 * sync (the last open this host has seen closed: its window holds nothing
 * of it), want (1: it has callers rejected by the fleet's open), the
 * result of its round (gen, round, 1 closed / 2 failed / 0 none), the
 * prober's claim (ms).
 *
 * Counts are clamped where they enter: a host's at 2^48 calls, failures
 * and slow calls at most its calls, so no sum of any number of hosts
 * leaves the integers a reply can carry (another client of Redis can
 * write an entry too).
 *
 * One open per outage: no new open while the fleet is open, and after a
 * close only the windows of hosts that have seen that close count (a host
 * that has not applied it yet still reports the outage's failures). The
 * fleet leaves OPEN through one prober at a time: once `ready`, the first
 * host with rejected callers gets the round (all of half_open_calls: its
 * own breaker's half-open spends them); the others hold. Its probes
 * passed: the fleet closes and every host closes on its next answer; they
 * failed, or it went silent past its claim: the next round after another
 * wait. Returns {open (0/1), gen, fleet calls, while open the rate that
 * opened it (bp, kept as "orate": the window's own rate leaves out what
 * came before the open), else the window's, role (1: this host probes for
 * the fleet), round}.
 */
const char BREAKER_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me = ARGV[1]\n"
    "local c, f, sl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local win, minc = tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local fbp, sbp, wait = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "local sync, want = tonumber(ARGV[10]), tonumber(ARGV[11])\n"
    "local rg, rr, res, plen = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), "
    "tonumber(ARGV[15])\n"
    "if not (c and f and sl and win and minc and fbp and sbp and wait and sync and want and "
    "rg and rr and res and plen) or win <= 0 then\n"
    "  return redis.error_reply('ERR resil breaker: bad arguments')\n"
    "end\n"
    "local most = 2 ^ 48\n"
    "if c < 0 or f < 0 or sl < 0 then\n"
    "  return redis.error_reply('ERR resil breaker: bad arguments')\n"
    "end\n"
    "c = math.min(c, most)\n"
    "f, sl = math.min(f, c), math.min(sl, c)\n"
    "redis.call('HSET', KEYS[1], 'h:' .. me, cjson.encode({c, f, sl, now, sync}))\n"
    "local raw = redis.call('HGETALL', KEYS[1])\n"
    "local m = {}\n"
    "for i = 1, #raw, 2 do m[raw[i]] = raw[i + 1] end\n"
    "local gen, open = tonumber(m.gen) or 0, m.st == 'o'\n"
    "local round, ready = tonumber(m.round) or 0, tonumber(m.ready) or 0\n"
    "local prober, pexp = m.prober, tonumber(m.pexp) or 0\n"
    "local C, F, S, N = 0, 0, 0, 0\n"
    "for k, v in pairs(m) do\n"
    "  if string.sub(k, 1, 2) == 'h:' then\n"
    "    local ok, x = pcall(cjson.decode, v)\n"
    "    if ok and type(x) == 'table' and tonumber(x[1]) and tonumber(x[2]) and\n"
    "       tonumber(x[3]) and tonumber(x[4]) then\n"
    "      local xc = math.max(math.min(tonumber(x[1]), most), 0)\n"
    "      local xf = math.max(math.min(tonumber(x[2]), xc), 0)\n"
    "      local xs = math.max(math.min(tonumber(x[3]), xc), 0)\n"
    "      if tonumber(x[4]) > now - win then\n"
    "        N = N + xc\n"
    "        if (tonumber(x[5]) or 0) >= gen then C, F, S = C + xc, F + xf, S + xs end\n"
    "      elseif tonumber(x[4]) <= now - 2 * win then\n"
    "        redis.call('HDEL', KEYS[1], k)\n"
    "      end\n"
    "    else\n"
    "      redis.call('HDEL', KEYS[1], k)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local rate, was = 0, open\n"
    "if C > 0 then rate = math.floor(math.max(F, sbp > 0 and S or 0) * 10000 / C) end\n"
    "if open and prober then\n"
    "  if prober == me and rg == gen and rr == round and res > 0 then\n"
    "    if res == 1 then\n"
    "      open = false\n"
    "      redis.call('HSET', KEYS[1], 'st', 'c', 'closed', now)\n"
    "    else\n"
    "      redis.call('HSET', KEYS[1], 'ready', now + wait)\n"
    "      ready = now + wait\n"
    "    end\n"
    "    prober = nil\n"
    "  elseif pexp <= now then\n"
    "    redis.call('HSET', KEYS[1], 'ready', now + wait)\n"
    "    ready, prober = now + wait, nil\n"
    "  end\n"
    "  if not prober then redis.call('HDEL', KEYS[1], 'prober', 'pexp') end\n"
    "end\n"
    "if open and not prober and want == 1 and now >= ready then\n"
    "  prober, round = me, round + 1\n"
    "  redis.call('HSET', KEYS[1], 'prober', me, 'round', round)\n"
    "  redis.call('HINCRBY', KEYS[1], 'rounds', 1)\n"
    "end\n"
    "if open and prober == me then redis.call('HSET', KEYS[1], 'pexp', now + plen) end\n"
    "if not was and C >= minc and C > 0 and\n"
    "   (F * 10000 >= fbp * C or (sbp > 0 and S * 10000 >= sbp * C)) then\n"
    "  gen, open, round = gen + 1, true, 0\n"
    "  redis.call('HSET', KEYS[1], 'gen', gen, 'opened', now, 'st', 'o', 'round', 0,\n"
    "             'ready', now + wait, 'orate', rate)\n"
    "  m.orate = rate\n"
    "  redis.call('HDEL', KEYS[1], 'prober', 'pexp')\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], 2 * win + wait + 60000)\n"
    "if open then rate = tonumber(m.orate) or rate end\n"
    "return {open and 1 or 0, gen, math.min(N, 2 ^ 53), rate, (open and prober == me) and 1 or 0,\n"
    "        round}\n";

bool parse_breaker(redisReply *r, struct xans *a)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6)
		return false;
	for (size_t i = 0; i < 6; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER || r->element[i]->integer < 0)
			return false;
	a->bk_fresh = true;
	a->bk_open = r->element[0]->integer != 0;
	a->bk_gen = (uint64_t)r->element[1]->integer;
	a->bk_calls = r->element[2]->integer;
	a->bk_rate_bp = (uint32_t)resil_min64(r->element[3]->integer, 10000);
	a->bk_probe = r->element[4]->integer == 1;
	a->bk_round = (uint64_t)r->element[5]->integer;
	return true;
}

/* A global time-window breaker: mirror a fleet open and its close, hold
 * the host's OPEN while another host probes for the fleet, probe when the
 * fleet's round is granted here, report the window and the round's
 * outcome. */
void cl_tick_breaker(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
		     struct cl_slot *cs, const struct xans *a, struct xreq *q)
{
	const struct resil_breaker_conf *bc = &rec->conf.breaker;
	void *bst = resil_comp_state(s, rec, RESIL_C_BREAKER);
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};
	struct resil_breaker_counts k;
	uint64_t v[RESIL_STAT__MAX];
	int state;

	if (a->bk_fresh && a->gen == rec->gen) {
		cs->bk_calls = a->bk_calls;
		if (a->bk_open) {
			/* one open per outage: a generation not seen here yet */
			if (a->bk_gen != cs->bk_gen || !cs->bk_open) {
				cs->bk_gen = a->bk_gen;
				cs->bk_open = true;
				cs->bk_probing = false;
				cs->bk_result = 0;
				cs->bk_round = 0;
				if (resil_breaker_trip(&x, bc, bst, RESIL_WHY_FLEET,
						       a->bk_rate_bp)) {
					cs->bk_trips++;
					log_notice("cluster: policy %s: the fleet's breaker opened "
						   "(open %llu, %lld calls in the fleet's window, "
						   "%.1f%% bad): opened here",
						   rec->name, (unsigned long long)a->bk_gen,
						   (long long)a->bk_calls, a->bk_rate_bp / 100.0);
				}
			}
			cs->bk_hold_ns = a->bk_until_ns;
			/* the fleet's probes are this host's for a new round */
			if (a->bk_probe && a->bk_round != cs->bk_round) {
				cs->bk_round = a->bk_round;
				cs->bk_result = 0;
				cs->bk_probing = true;
				cs->bk_rounds++;
				resil_breaker_probe_now(&x, bc, bst);
				log_info("cluster: policy %s: probes for the fleet (open %llu, "
					 "round %llu)",
					 rec->name, (unsigned long long)a->bk_gen,
					 (unsigned long long)a->bk_round);
			}
		} else {
			if (cs->bk_open && a->bk_gen == cs->bk_gen &&
			    resil_breaker_fleet_close(&x, bc, bst)) {
				cs->bk_closes++;
				log_notice("cluster: policy %s: the fleet's probes passed on "
					   "another host: closed here",
					   rec->name);
			}
			cs->bk_open = false;
			cs->bk_probing = false;
			cs->bk_gen = a->bk_gen;
			cs->bk_sync = a->bk_gen;
		}
	}
	state = resil_breaker_state(bst);
	/* this host's round ends as its own half-open does */
	if (cs->bk_probing && state != RESIL_STATE_HALF_OPEN) {
		cs->bk_probing = false;
		cs->bk_result = state == RESIL_STATE_CLOSED ? 1 : 2;
	}
	/* another host probes (or the next round is not due): the host's own
	 * wait must not end while the last answer holds */
	if (cs->bk_open && !cs->bk_probing && t->now < cs->bk_hold_ns)
		resil_breaker_hold(&x, bc, bst, cs->bk_hold_ns);

	resil_breaker_host_window(&x, bc, bst, &k);
	resil_stats_read_all(resil_comp_state(s, rec, RESIL_C_STATS), v);
	q->breaker = true;
	q->calls = k.calls;
	q->failures = k.failures;
	q->slow = bc->slow_rate_bp < 10000 ? k.slow : 0;
	q->window_ms = bc->window_ns / RESIL_NS_PER_MS;
	q->wait_ms = bc->wait_ns / RESIL_NS_PER_MS;
	q->min_calls = bc->min_calls;
	q->failure_bp = bc->failure_rate_bp;
	q->slow_bp = bc->slow_rate_bp < 10000 ? bc->slow_rate_bp : 0;
	q->sync = cs->bk_sync;
	q->want = cs->bk_open && state == RESIL_STATE_OPEN && v[RESIL_STAT_REJ_OPEN] != cs->bk_rej;
	q->res_gen = cs->bk_gen;
	q->res_round = cs->bk_round;
	q->res = cs->bk_result;
	if (t->post)
		cs->bk_rej = v[RESIL_STAT_REJ_OPEN];
}

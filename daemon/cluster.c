/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - policy.scope = global across hosts, through Redis.
 *
 * Size: above 900 lines on purpose: the lease and breaker scripts, the
 * connection (URL, TLS relay, Sentinel, AUTH, the scripts loaded) and the
 * loop's side of the exchange share struct resild_cluster and its helpers
 * (cluster_priv.h); the Redis Cluster section, the exchange round and the
 * thread are cluster_rc.c, the budgets', bulkheads' and keyed limiters'
 * scripts cluster_budget.c, cluster_bulkhead.c and cluster_keyed.c.
 *
 * What. A global GCRA limiter allows `limit.rate` to the whole fleet of
 * hosts. Each daemon leases its host a share of it: every cluster
 * interval it reports the host's demand (calls that reached the limiter,
 * admitted or rejected, per second over the last interval) and receives a
 * share from one atomic Lua script per policy (LEASE_LUA below), which it
 * writes into the limiter's lease words (shm/limit.c: the hot path reads
 * them; nothing else changes for a decision).
 *
 * Why a thread of its own. hiredis speaks blocking or through an event
 * library; the loop is io_uring, and an adapter for it (poll SQEs, partial
 * replies, reconnects in the loop's state machine) would put the slowest
 * and least trusted peer of the daemon inside the loop that serves
 * clients and reclaims their holdings. The thread talks to Redis with the
 * plain blocking API under socket timeouts; the loop never waits on it.
 * They meet in `struct xchg` under a mutex held only to copy a few words
 * per policy: each tick the loop (1) applies the answers the thread left,
 * then (2) leaves its requests (name, generation, rate, demand, the lease
 * it has applied) and signals the thread, which runs one exchange: one
 * pipelined round trip with one script call per global policy, then
 * writes an eventfd the loop reads: the loop applies the answers at once
 * (a tick that posts nothing), not a whole tick later. The thread
 * never touches the segments (a policy deleted meanwhile could have its
 * space reused); the loop checks the slot's generation before it writes an
 * answer into a state block.
 *
 * The lease (LEASE_LUA). Per policy one hash, "<cluster>:{<policy>}:lease",
 * one field per host: its last demand, when it last reported (Redis TIME,
 * milliseconds: cjson keeps 14 digits) and its live leases {share, expiry,
 * id}, the expiry stored as now + L + 1 ms (past the host's own end of
 * it). A call drops the leases that expired and those the host has
 * replaced in its segment (ids below the one it says it applied), forgets
 * hosts with no live lease that have not reported for a lease length,
 * computes the max-min fair allocation of the rate by demand over the
 * hosts present (what is left once every demand is met is split evenly,
 * as headroom), and grants the caller min(its fair share, rate - sum over
 * the other hosts of the largest share each still holds under a live
 * lease). Invariant: at any Redis time, the sum over hosts of the largest
 * live share each holds is at most the rate. Each grant keeps it (it fits
 * next to what the others hold), and nothing else raises a holding. A share
 * freed by a host becomes grantable only once the larger lease it
 * replaces has expired or the host has said it no longer uses it (it
 * applied a newer one: the loop writes a lease over the older one in the
 * segment). So the fleet admits at most rate x T + the hosts' bursts in
 * any span T while every host runs on a live lease.
 *
 * Time. Leases are timed by Redis TIME, so daemons' clocks need not agree.
 * A lease granted for L (3 intervals) to a request sent at local time t0
 * ends on this host at t0 + L: Redis ran the script after t0, so the host
 * stops using it no later than Redis believes it ends (clock rates being
 * equal). The loop applies a lease as soon as the thread wakes it after
 * the exchange that got it (or at the next tick, if the wake is lost):
 * with the tick at the cluster interval a host renews every interval and
 * a lease covers the two ticks a renewal can take. A client past the expiry falls back on
 * its own (limit.c): --cluster-fallback share (its host's last share,
 * which the fleet keeps for it a while; "The fallback" below), local (the
 * whole rate on this host) or reject.
 *
 * Breakers (BREAKER_LUA; time windows only, conf.c refuses the others).
 * Each exchange reports the host's window (calls, failures, slow calls:
 * resil_breaker_host_window) under "h:<host>"; the script adds up the reports
 * younger than the window, and when the fleet's window holds
 * breaker.min_calls and a rate at or over a threshold it opens once: a
 * generation and the time in the hash; no new open while the fleet is
 * open, and after its close only the windows of hosts that have seen the
 * close count, so one outage's failures open it once. A daemon that sees
 * a generation it has not mirrored opens its host's breaker
 * (resil_breaker_trip: the CAS a local open makes, with RESIL_WHY_FLEET).
 * The host's breaker still opens at once on its own window.
 *
 * The fleet's half-open. Probes are a fleet-wide budget of
 * breaker.half_open_calls: once the fleet's wait is over, the first host
 * whose callers the open rejected is granted the round (all of it) and
 * moves its breaker to HALF_OPEN (resil_breaker_probe_now), where its own
 * probe accounting spends at most half_open_calls; every other host holds
 * its OPEN (resil_breaker_hold pushes the end of its wait to the last
 * answer's validity, hold_ns from the request: a daemon or a Redis gone
 * longer than that leaves the host to its own wait and probes). The
 * prober reports how its half-open ended: passed, the fleet closes and
 * every daemon closes its host's breaker (resil_breaker_fleet_close, a
 * fresh window) at the tick after its next exchange: within 2 intervals of
 * the report, 3 of the probes' end; failed (or the prober silent past its
 * claim), the next round comes a wait later. Bound: while the daemons
 * answer, at most half_open_calls probes reach the dependency per round
 * fleet-wide; a host already in its own half-open when the fleet opens
 * finishes it. Reporting the whole window each time keeps the counts of
 * an outage of Redis: they are sent when it is back, bounded by the
 * window.
 *
 * The interval. Requests are posted at the loop's tick (100 ms) once
 * --cluster-interval has passed since the last post: an interval below the
 * tick runs at the tick. Between posts, early lease calls ("Early calls"
 * below) bring a host's new demand to Redis, and the smaller share that
 * makes room for it back, within a fraction of an interval: the thread
 * wakes the loop every interval / SAMPLES to sample global limiters.
 *
 * Bulkheads (cluster_bulkhead.c: its script, its tick, its design): the
 * fleet's bulkhead.max leased as slots, in the same round as the rest.
 *
 * Redis down, slow or garbage. The exchange has socket timeouts (ten
 * intervals, at least 2 s); any I/O error, a refused AUTH, a script error or a reply of
 * the wrong shape closes the connection, is logged once per distinct
 * error (and the return to service once) and the thread reconnects after
 * a jittered exponential backoff (interval .. 5 s, full jitter between
 * half and all of it). Leases run out into the fallback meanwhile; no
 * lease is believed past its expiry. Demand is a rate over the last
 * interval, so nothing piles up while Redis is away.
 *
 * Where Redis is. --cluster-redis names one Redis, one node of a Redis
 * Cluster (the others learned from its redirections, and again after a
 * failover), or the sentinels of a primary (asked at each connection, so
 * a failover is followed at the reconnection it causes); any of them over
 * TLS (OpenSSL beside hiredis, through a relay thread per connection).
 * Each is described where it is done, below (Redis Cluster in
 * cluster_rc.c, with the exchange round and the thread).
 *
 * Keyed limiters (cluster_keyed.c). A global keyed gcra limiter has no
 * lease: every host runs the whole per-key limit, publishes the keys its
 * clients admitted since the last exchange (one script call per policy in
 * the same round) and charges the other hosts' admissions to those keys.
 * Its records ride in the request and the answer; whoever holds one owns
 * them, and a request or answer replaced before it was taken hands its
 * records on to the new one.
 *
 * The fallback (cl_fallback_of below, with its tiers). A host out of
 * touch with Redis keeps its last share: the script holds a silent host's
 * fallback (reported with every call) for --cluster-fallback-for after
 * its last report, out of what the others are granted, and the host's
 * clients stop using it at that same instant (the limiter's
 * fallback_until_ns), daemon alive or dead: a host killed never sums with
 * the others over the rate. Then rate / N, N the fleet's size: with
 * --cluster-hosts the script reserves rate / N for every host it does not
 * see, so that tier is in the bound too; without it, N is the fleet the
 * host last learned (kept in the state segment), and a host that knows
 * none rejects.
 *
 * Who writes what. struct xchg (req, ereq, ans, the kicks): both
 * threads, under x->lock. The
 * limiter's lease words: the loop only (resil_limit_lease_set's order).
 * struct cl_slot: the loop only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "breaker.h"
#include "bulkhead.h"
#include "cluster.h"
#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "cluster_priv.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
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
 * size (--cluster-hosts; 0: not given). Returns {share per second
 * (string), lease id, hosts present, tell}: tell 2, this host got less
 * than its fair share (others still hold it: ask again soon); 1, a host
 * waits for what this host gives back (acknowledge the smaller share at
 * once); 0, nothing to hurry.
 *
 * A host holds the largest of its live leases and, until it has been
 * silent for the hold, the fallback it reported. An applied id above any
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
    "if not demand or not rate or not L or not applied or not fb or not F or not N or\n"
    "   demand < 0 or rate <= 0 or L <= 0 or fb < 0 or F < L or N < 0 then\n"
    "  return redis.error_reply('ERR resil lease: bad arguments')\n"
    "end\n"
    "if fb > rate then fb = rate end\n"
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
    "r.d, r.s, r.f = demand, now, fb\n"
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
    "  if #keep == 0 and age > F and h ~= me then\n"
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
    "dirty[me] = true\n"
    "for h, _ in pairs(dirty) do\n"
    "  if hosts[h] then redis.call('HSET', KEYS[1], h, cjson.encode(hosts[h])) end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], 10 * L + F + 1000)\n"
    "return {string.format('%.6f', share), r.id, present, tell}\n";

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

int resild_cluster_parse_fallback(const char *s, int *ret)
{
	if (strcmp(s, "share") == 0)
		*ret = RESILD_FALLBACK_SHARE;
	else if (strcmp(s, "local") == 0)
		*ret = RESILD_FALLBACK_LOCAL;
	else if (strcmp(s, "reject") == 0)
		*ret = RESILD_FALLBACK_REJECT;
	else
		return -EINVAL;
	return 0;
}

/* "host[:port]" of n bytes at p into host and *port (defport when none);
 * false: not one. IPv6 in brackets: [::1]:6379. */
static bool parse_hostport(const char *p, size_t n, char *host, size_t hlen, int *port, int defport)
{
	const char *colon = NULL, *h = p;
	size_t hn;
	char num[8], *end;
	long v;

	if (n && *p == '[') {
		const char *rb = memchr(p, ']', n);

		if (!rb)
			return false;
		h = p + 1;
		hn = (size_t)(rb - h);
		if (rb + 1 < p + n) {
			if (rb[1] != ':')
				return false;
			colon = rb + 1;
		}
	} else {
		colon = memchr(p, ':', n);
		hn = colon ? (size_t)(colon - p) : n;
	}
	if (hn == 0 || hn >= hlen)
		return false;
	memcpy(host, h, hn);
	host[hn] = '\0';
	*port = defport;
	if (colon) {
		size_t pn = (size_t)(p + n - colon - 1);

		if (pn == 0 || pn >= sizeof(num))
			return false;
		memcpy(num, colon + 1, pn);
		num[pn] = '\0';
		v = strtol(num, &end, 10);
		if (*end || v < 1 || v > 65535)
			return false;
		*port = (int)v;
	}
	return true;
}

/* "/DB" (or nothing) at p into c->db; false: not a number. */
static bool parse_db(struct resild_cluster *c, const char *p)
{
	char *end;
	long v;

	if (!*p || (*p == '/' && !p[1]))
		return true;
	if (*p != '/')
		return false;
	v = strtol(p + 1, &end, 10);
	if (end == p + 1 || *end || v < 0 || v > 1000000)
		return false;
	c->db = (int)v;
	return true;
}

/* sentinel://h:p[,h:p...]/MASTER[/DB]: the sentinels and the master's name */
static int parse_sentinel(struct resild_cluster *c, const char *url)
{
	const char *p = url + 11, *slash = strchr(p, '/'), *name, *e;

	if (!slash || slash == p)
		goto bad;
	while (p < slash) {
		const char *comma = memchr(p, ',', (size_t)(slash - p));
		size_t n = comma ? (size_t)(comma - p) : (size_t)(slash - p);
		struct cl_node *s = &c->sentinels[c->nsentinels];

		if (c->nsentinels == SENTINELS_MAX)
			return log_error_errno(-EINVAL, "--cluster-redis %s: at most %d sentinels",
					       url, SENTINELS_MAX);
		if (!parse_hostport(p, n, s->addr, sizeof(s->addr), &s->port, 26379))
			goto bad;
		c->nsentinels++;
		p += n + (comma ? 1 : 0);
	}
	name = slash + 1;
	e = strchr(name, '/');
	if (e == name || !*name || (size_t)(e ? e - name : (long)strlen(name)) >= sizeof(c->master))
		goto bad;
	snprintf(c->master, sizeof(c->master), "%.*s", (int)(e ? e - name : (long)strlen(name)),
		 name);
	if (e && !parse_db(c, e))
		return log_error_errno(-EINVAL, "--cluster-redis %s: the database is not a number",
				       url);
	c->sentinel = true;
	return 0;
bad:
	return log_error_errno(-EINVAL,
			       "--cluster-redis %s: expected "
			       "sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]",
			       url);
}

/* redis://host[:port][/db], rediss:// (TLS), unix:/path (unix:///path too)
 * or sentinel://host:port[,host:port...]/master[/db] */
static int parse_url(struct resild_cluster *c, const char *url)
{
	const char *p, *rb;
	size_t n;

	if (strlen(url) >= sizeof(c->addr))
		return log_error_errno(-EINVAL, "--cluster-redis: the URL is too long");
	if (strchr(url, '@'))
		return log_error_errno(-EINVAL,
				       "--cluster-redis: no credentials in the URL (the command "
				       "line is visible to every user); use "
				       "--cluster-password-file");
	if (strncmp(url, "unix:", 5) == 0) {
		p = url + 5;
		if (strncmp(p, "//", 2) == 0)
			p += 2;
		if (*p != '/')
			return log_error_errno(
			    -EINVAL, "--cluster-redis %s: expected unix:/absolute/path", url);
		c->unix_sock = true;
		snprintf(c->addr, sizeof(c->addr), "%s", p);
		return 0;
	}
	if (strncmp(url, "sentinel://", 11) == 0)
		return parse_sentinel(c, url);
	if (strncmp(url, "rediss://", 9) == 0) {
		c->tls = true;
		p = url + 9;
	} else if (strncmp(url, "redis://", 8) == 0) {
		p = url + 8;
	} else {
		return log_error_errno(-EINVAL,
				       "--cluster-redis %s: expected redis://HOST[:PORT][/DB], "
				       "rediss://..., unix:/PATH or "
				       "sentinel://HOST[:PORT][,...]/MASTER[/DB]",
				       url);
	}
	/* [v6]:port: its colons are not the port's */
	rb = *p == '[' ? strchr(p, ']') : NULL;
	n = rb ? (size_t)(rb - p) + strcspn(rb, "/") : strcspn(p, "/");
	if (!parse_hostport(p, n, c->addr, sizeof(c->addr), &c->port, 6379))
		return log_error_errno(-EINVAL,
				       "--cluster-redis %s: expected a host name and a port "
				       "1..65535",
				       url);
	if (!parse_db(c, p + n))
		return log_error_errno(-EINVAL, "--cluster-redis %s: the database is not a number",
				       url);
	return 0;
}

static int read_line_file(const char *path, char *buf, size_t len, const char *what)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return log_error_errno(-errno, "%s %s: cannot read: %m", what, path);
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return log_error_errno(-EINVAL, "%s %s: empty", what, path);
	}
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	if (n == 0)
		return log_error_errno(-EINVAL, "%s %s: empty first line", what, path);
	return 0;
}

/* ------------------------------------------------------------ thread */

int64_t mono_ns(void)
{
	return resil_clock_monotonic(NULL);
}

uint64_t rnd_next(struct resild_cluster *c)
{
	/* xorshift64*: jitter only, seeded from the clock and the pid */
	c->rnd ^= c->rnd >> 12;
	c->rnd ^= c->rnd << 25;
	c->rnd ^= c->rnd >> 27;
	return c->rnd * 0x2545F4914F6CDD1DULL;
}

const char *io_error(const redisContext *rc, char *buf, size_t len)
{
	if (rc->err == REDIS_ERR_IO &&
	    (rc->errstr[0] == '\0' || strstr(rc->errstr, "temporarily unavailable"))) {
		snprintf(buf, len, "no answer within the timeout (Redis stalled or too slow)");
		return buf;
	}
	return rc->errstr[0] ? rc->errstr : "connection lost";
}

/* Log an error once per distinct text (a Redis that stays away would
 * otherwise fill the journal at every backoff). */
void set_error(struct resild_cluster *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	bool same;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&c->lock);
	same = strcmp(msg, c->last_error) == 0 && !c->connected;
	snprintf(c->last_error, sizeof(c->last_error), "%s", msg);
	c->connected = false;
	c->errors++;
	pthread_mutex_unlock(&c->lock);
	if (!same)
		log_error("cluster: %s; leases run out into --cluster-fallback %s", msg,
			  c->fallback == RESILD_FALLBACK_SHARE	 ? "share"
			  : c->fallback == RESILD_FALLBACK_LOCAL ? "local"
								 : "reject");
}

static void drop_pending(struct resild_cluster *c)
{
	for (uint32_t i = c->rpend; i < c->npend; i++)
		redisFreeCommand(c->pend[i].cmd);
	c->npend = c->rpend = 0;
}

void disconnect(struct resild_cluster *c)
{
	drop_pending(c);
	/* the nodes' connections go with the seed's: the slot map is learned
	 * again from the seed's redirections (the addresses stay, a seed to
	 * fall back on when the first one is gone) */
	for (uint32_t i = 0; i < c->nnodes; i++) {
		if (c->nodes[i].rc)
			redisFree(c->nodes[i].rc);
		c->nodes[i].rc = NULL;
	}
	memset(c->slot_node, 0, sizeof(c->slot_node));
	if (c->rc)
		redisFree(c->rc);
	c->rc = NULL;
	c->cur = NULL;
	c->sha[0] = '\0';
	c->bk_sha[0] = '\0';
	c->cb_sha[0] = '\0';
	c->cf_sha[0] = '\0';
	c->bh_sha[0] = '\0';
	c->ck_sha[0] = '\0';
	c->hs_sha[0] = '\0';
}

const char *where(const struct resild_cluster *c, char *buf, size_t len)
{
	if (c->unix_sock)
		snprintf(buf, len, "unix:%s", c->addr);
	else if (c->sentinel && !c->addr[0])
		snprintf(buf, len, "%s", c->url);
	else
		snprintf(buf, len, "%s:%d%s", c->addr, c->port, c->sentinel ? " (sentinel)" : "");
	return buf;
}

/*
 * TLS. Debian's hiredis (0.14) has no TLS of its own, so OpenSSL does the
 * session and hiredis speaks plain RESP through a socketpair: the
 * handshake (the server's certificate checked against --cluster-tls-ca,
 * and its name or address against the node's host or
 * --cluster-tls-server-name) runs in the exchange thread under the socket
 * timeouts, so a refused certificate is an error of that connection like
 * any other; then a relay thread per connection owns the SSL session and
 * the TCP socket and copies bytes both ways until either side closes:
 * redisFree closing hiredis' end ends the relay, Redis closing the TCP
 * connection closes hiredis' end (an I/O error there). The relay never
 * blocks on one direction while the other waits: it reads only what poll
 * says is there (SSL_MODE_AUTO_RETRY off: a TLS record that is not data,
 * a session ticket, returns to the poll), and the TCP socket keeps the
 * exchange's timeouts, so a peer that stops reading ends it.
 */
struct relay {
	SSL *ssl;
	int tcp, sp;
};

/* all of p to the socket fd; false: its reader is gone (no SIGPIPE) */
static bool send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	char buf[16384];

	for (;;) {
		struct pollfd pf[2] = {{.fd = r->sp, .events = POLLIN},
				       {.fd = r->tcp, .events = POLLIN}};
		int n;

		if (SSL_pending(r->ssl) > 0)
			pf[1].revents = POLLIN;
		else if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents) {
			ssize_t k = read(r->sp, buf, sizeof(buf));

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			n = SSL_write(r->ssl, buf, (int)k);
			if (n <= 0)
				break;
		}
		if (pf[1].revents) {
			n = SSL_read(r->ssl, buf, sizeof(buf));
			if (n > 0) {
				if (!send_all(r->sp, buf, (size_t)n))
					break;
			} else {
				int e = SSL_get_error(r->ssl, n);

				if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
					break;
			}
		}
	}
	SSL_free(r->ssl);
	close(r->tcp);
	close(r->sp);
	free(r);
	return NULL;
}

/* Why OpenSSL refused the last call: its reason, else errno's. */
static const char *ssl_why(void)
{
	int e = errno;
	unsigned long f = ERR_peek_error(), l = ERR_peek_last_error();
	const char *r = ERR_reason_error_string(l);

	ERR_clear_error();
	if (f && ERR_GET_LIB(f) == ERR_LIB_SYS) /* "system lib": its reason is an errno */
		return strerror(ERR_GET_REASON(f));
	return r ? r : e ? strerror(e) : "unknown reason";
}

static int tls_init(struct resild_cluster *c, const struct resild_opts *o)
{
	const char *const files[][2] = {{"--cluster-tls-ca", o->cluster_tls_ca},
					{"--cluster-tls-cert", o->cluster_tls_cert},
					{"--cluster-tls-key", o->cluster_tls_key}};

	if (!o->cluster_tls_cert != !o->cluster_tls_key)
		return log_error_errno(-EINVAL,
				       "--cluster-tls-cert and --cluster-tls-key go together");
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (files[i][1] && access(files[i][1], R_OK) < 0)
			return log_error_errno(-errno, "%s %s: cannot read: %m", files[i][0],
					       files[i][1]);
	c->ssl = SSL_CTX_new(TLS_client_method());
	if (!c->ssl)
		return log_error_errno(-ENOMEM, "cluster: TLS: out of memory");
	SSL_CTX_set_min_proto_version(c->ssl, TLS1_2_VERSION);
	SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
	errno = 0;
	if (o->cluster_tls_ca ? SSL_CTX_load_verify_locations(c->ssl, o->cluster_tls_ca, NULL) != 1
			      : SSL_CTX_set_default_verify_paths(c->ssl) != 1)
		return log_error_errno(-EINVAL, "--cluster-tls-ca %s: cannot load: %s",
				       o->cluster_tls_ca ? o->cluster_tls_ca : "(system default)",
				       ssl_why());
	if (o->cluster_tls_cert &&
	    SSL_CTX_use_certificate_chain_file(c->ssl, o->cluster_tls_cert) != 1)
		return log_error_errno(-EINVAL, "--cluster-tls-cert %s: cannot load: %s",
				       o->cluster_tls_cert, ssl_why());
	if (o->cluster_tls_key &&
	    (SSL_CTX_use_PrivateKey_file(c->ssl, o->cluster_tls_key, SSL_FILETYPE_PEM) != 1 ||
	     SSL_CTX_check_private_key(c->ssl) != 1))
		return log_error_errno(-EINVAL, "--cluster-tls-key %s: cannot load: %s",
				       o->cluster_tls_key, ssl_why());
	if (o->cluster_tls_server_name) {
		if (!*o->cluster_tls_server_name ||
		    strlen(o->cluster_tls_server_name) >= sizeof(c->tls_name))
			return log_error_errno(-EINVAL, "--cluster-tls-server-name: 1 to %zu bytes",
					       sizeof(c->tls_name) - 1);
		snprintf(c->tls_name, sizeof(c->tls_name), "%s", o->cluster_tls_server_name);
	}
	return 0;
}

/* A TCP connection to host:port under the timeouts; -1 (err set). */
static int tcp_open(const char *host, int port, struct timeval tv, char *err, size_t elen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai, *a;
	char ps[8];
	int fd = -1, e, one = 1;

	snprintf(ps, sizeof(ps), "%d", port);
	e = getaddrinfo(host, ps, &hints, &ai);
	if (e) {
		snprintf(err, elen, "%s", gai_strerror(e));
		return -1;
	}
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		/* connect() honours SO_SNDTIMEO */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		snprintf(err, elen, "%s", strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* hiredis over a TLS session with host:port; NULL (err set). */
static redisContext *tls_connect(struct resild_cluster *c, const char *host, int port,
				 struct timeval tv, char *err, size_t elen)
{
	const char *name = c->tls_name[0] ? c->tls_name : host;
	struct in6_addr ip;
	struct relay *r = NULL;
	redisContext *rc;
	pthread_t t;
	SSL *ssl;
	int fd, sp[2] = {-1, -1};
	long v;

	fd = tcp_open(host, port, tv, err, elen);
	if (fd < 0)
		return NULL;
	ssl = SSL_new(c->ssl);
	if (!ssl) {
		snprintf(err, elen, "TLS: out of memory");
		close(fd);
		return NULL;
	}
	SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
	SSL_set_fd(ssl, fd);
	if (inet_pton(AF_INET, name, &ip) == 1 || inet_pton(AF_INET6, name, &ip) == 1) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
	} else {
		SSL_set_tlsext_host_name(ssl, name);
		SSL_set1_host(ssl, name);
	}
	ERR_clear_error();
	errno = 0;
	if (SSL_connect(ssl) != 1) {
		v = SSL_get_verify_result(ssl);
		if (v != X509_V_OK)
			snprintf(err, elen, "TLS: the server's certificate is refused: %s (%s)",
				 X509_verify_cert_error_string(v),
				 v == X509_V_ERR_HOSTNAME_MISMATCH ||
					 v == X509_V_ERR_IP_ADDRESS_MISMATCH
				     ? "--cluster-tls-server-name"
				     : "--cluster-tls-ca");
		else if (ERR_peek_error()) {
			const char *why = ssl_why();

			/* a plain Redis answers a ClientHello with RESP */
			snprintf(err, elen, "TLS handshake: %s%s", why,
				 strstr(why, "wrong version number") || strstr(why, "packet length")
				     ? " (a plain port? redis:// without --cluster-tls-*)"
				     : "");
		} else
			snprintf(err, elen, "TLS handshake: %s",
				 errno ? strerror(errno) : "the server closed the connection");
		goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 ||
	    !(r = malloc(sizeof(*r)))) {
		snprintf(err, elen, "TLS: socketpair: %s", strerror(errno ? errno : ENOMEM));
		goto fail;
	}
	*r = (struct relay){.ssl = ssl, .tcp = fd, .sp = sp[1]};
	/* the relay inherits this thread's mask: every signal blocked */
	if (pthread_create(&t, NULL, relay_main, r) != 0) {
		snprintf(err, elen, "TLS: cannot start a relay thread");
		free(r);
		close(sp[1]);
		sp[1] = -1;
		goto fail;
	}
	pthread_detach(t);
	rc = redisConnectFd(sp[0]);
	if (!rc || rc->err) {
		snprintf(err, elen, "%s", rc ? rc->errstr : "out of memory");
		if (rc)
			redisFree(rc); /* closes sp[0]: the relay ends */
		else
			close(sp[0]);
		return NULL;
	}
	return rc;
fail:
	if (sp[0] >= 0)
		close(sp[0]);
	if (sp[1] >= 0)
		close(sp[1]);
	SSL_free(ssl);
	close(fd);
	return NULL;
}

/* A connection to host:port, TLS when configured; NULL (err set). */
redisContext *tcp_connect(struct resild_cluster *c, const char *host, int port, struct timeval tv,
			  char *err, size_t elen)
{
	redisContext *rc;

	if (c->tls)
		rc = tls_connect(c, host, port, tv, err, elen);
	else {
		rc = redisConnectWithTimeout(host, port, tv);
		if (!rc || rc->err) {
			snprintf(err, elen, "%s", rc ? rc->errstr : "out of memory");
			if (rc)
				redisFree(rc);
			rc = NULL;
		}
	}
	if (rc)
		redisSetTimeout(rc, tv);
	return rc;
}

/*
 * Sentinel. The primary is whatever the sentinels name for the master:
 * asked (SENTINEL get-master-addr-by-name, the first sentinel that
 * answers) at each connection; the node it names must say it is a
 * primary (ROLE). After a failover the old primary's connection fails, or
 * it answers -READONLY once it is back as a replica: both close the
 * connection (next_reply), and the reconnection asks the sentinels again.
 * The backoff is capped at SENTINEL_BACKOFF_MAX_NS there: a failover takes
 * seconds, and asking a sentinel is cheap.
 * A failover by hand (SENTINEL FAILOVER) leaves the old primary up and
 * taking writes until the sentinels reconfigure it, 10 s later: its
 * connection never fails. So while connected the thread asks the
 * sentinels again every SENTINEL_RECHECK_NS (sentinel_recheck) and moves
 * to the primary they name. What it wrote meanwhile on the old one is
 * lost with that node's resync; the reports are totals since the host
 * started (cluster_budget.c), so the next report to the new primary puts
 * it back.
 */
static bool sentinel_discover(struct resild_cluster *c, struct timeval tv, char *err, size_t elen)
{
	snprintf(err, elen, "no sentinel answered");
	for (uint32_t i = 0; i < c->nsentinels; i++) {
		const struct cl_node *s = &c->sentinels[i];
		char e[200];
		redisContext *rc = tcp_connect(c, s->addr, s->port, tv, e, sizeof(e));
		redisReply *r;
		long port;

		if (!rc) {
			snprintf(err, elen, "sentinel %s:%d: %s", s->addr, s->port, e);
			continue;
		}
		r = redisCommand(rc, "SENTINEL get-master-addr-by-name %s", c->master);
		if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING &&
		    r->element[0]->len < (int)sizeof(c->addr) &&
		    (port = strtol(r->element[1]->str, NULL, 10)) >= 1 && port <= 65535) {
			snprintf(c->addr, sizeof(c->addr), "%s", r->element[0]->str);
			c->port = (int)port;
			freeReplyObject(r);
			redisFree(rc);
			return true;
		}
		snprintf(err, elen, "sentinel %s:%d: %s", s->addr, s->port,
			 !r				? rc->errstr
			 : r->type == REDIS_REPLY_ERROR ? r->str
			 : r->type == REDIS_REPLY_NIL	? "no such master"
							: "an answer that cannot be read");
		if (r)
			freeReplyObject(r);
		redisFree(rc);
	}
	return false;
}

/* While connected: do the sentinels name another primary now? Then close,
 * and the reconnection goes there. Sentinels out of reach keep the
 * connection as it is. */
void sentinel_recheck(struct resild_cluster *c)
{
	char addr[sizeof(c->addr)], err[256], w[URL_MAX + 16];
	struct timeval tv = {.tv_sec = 0, .tv_usec = 200 * 1000};
	int port = c->port;

	memcpy(addr, c->addr, sizeof(addr));
	if (!sentinel_discover(c, tv, err, sizeof(err))) {
		memcpy(c->addr, addr, sizeof(addr));
		c->port = port;
		return;
	}
	if (c->port == port && strcmp(c->addr, addr) == 0)
		return;
	log_notice("cluster: the sentinels name %s for %s now (was %s:%d): reconnecting",
		   where(c, w, sizeof(w)), c->master, addr, port);
	disconnect(c);
}

/* Is the node c->rc is connected to a primary? false: logged, closed. */
static bool sentinel_check_role(struct resild_cluster *c)
{
	redisReply *r = redisCommand(c->rc, "ROLE");
	char w[URL_MAX + 16];
	bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		  r->element[0]->type == REDIS_REPLY_STRING &&
		  strcmp(r->element[0]->str, "master") == 0;

	if (!ok) {
		set_error(c, "Redis at %s, named by the sentinels for %s, is not a primary (%s)",
			  where(c, w, sizeof(w)), c->master,
			  !r				 ? c->rc->errstr
			  : r->type == REDIS_REPLY_ERROR ? r->str
			  : r->type == REDIS_REPLY_ARRAY && r->elements &&
				  r->element[0]->type == REDIS_REPLY_STRING
			      ? r->element[0]->str
			      : "an answer that cannot be read");
		disconnect(c);
	}
	if (r)
		freeReplyObject(r);
	return ok;
}

/* A command whose reply must not be an error; false: logged, closed. */
static bool simple(struct resild_cluster *c, const char *what, redisReply **out, int argc,
		   const char **argv)
{
	redisReply *r = redisCommandArgv(c->rc, argc, argv, NULL);
	char w[URL_MAX + 16], e[96];

	if (!r) {
		/* a connection that fails at its first words: a TLS port
		 * spoken to in plain drops it */
		set_error(c, "Redis at %s: %s: %s%s", where(c, w, sizeof(w)), what,
			  io_error(c->rc, e, sizeof(e)),
			  c->tls || c->unix_sock ? ""
						 : " (a TLS port? rediss:// or --cluster-tls-ca)");
		disconnect(c);
		return false;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		set_error(c, "Redis at %s refused %s: %s", where(c, w, sizeof(w)), what, r->str);
		freeReplyObject(r);
		disconnect(c);
		return false;
	}
	if (out)
		*out = r;
	else
		freeReplyObject(r);
	return true;
}

static bool load_script(struct resild_cluster *c, const char *lua, char *sha)
{
	const char *argv[] = {"SCRIPT", "LOAD", lua};
	redisReply *r;
	char w[URL_MAX + 16];

	if (!simple(c, "SCRIPT LOAD", &r, 3, argv))
		return false;
	if (r->type != REDIS_REPLY_STRING || r->len >= (long)sizeof(c->sha)) {
		set_error(c, "Redis at %s answered SCRIPT LOAD with garbage (type %d)",
			  where(c, w, sizeof(w)), r->type);
		freeReplyObject(r);
		disconnect(c);
		return false;
	}
	memcpy(sha, r->str, (size_t)r->len);
	sha[r->len] = '\0';
	freeReplyObject(r);
	return true;
}

bool connect_redis(struct resild_cluster *c)
{
	/* Generous: only this thread waits, and a late answer is still worth
	 * applying (its expiry counts from the request). Closing on a short
	 * timeout would turn a slow moment into a reconnect and a backoff,
	 * and leases into fallbacks for seconds. */
	int64_t to = resil_max64(10 * c->interval_ns, 2 * RESIL_NS_PER_S);
	struct timeval tv = {.tv_sec = to / RESIL_NS_PER_S,
			     .tv_usec = (to % RESIL_NS_PER_S) / 1000};
	char w[URL_MAX + 16], db[16], err[256], e2[256];
	const struct cl_node *via = NULL; /* the node reached when the seed is not */
	int64_t t0;

	if (c->sentinel && !sentinel_discover(c, tv, err, sizeof(err))) {
		set_error(c, "no primary for %s from the sentinels: %s", c->master, err);
		return false;
	}
	if (c->unix_sock) {
		c->rc = redisConnectUnixWithTimeout(c->addr, tv);
		if (c->rc && c->rc->err) {
			snprintf(err, sizeof(err), "%s", c->rc->errstr);
			redisFree(c->rc);
			c->rc = NULL;
		} else if (!c->rc) {
			snprintf(err, sizeof(err), "out of memory");
		} else {
			redisSetTimeout(c->rc, tv);
		}
	} else {
		c->rc = tcp_connect(c, c->addr, c->port, tv, err, sizeof(err));
	}
	/* a Redis Cluster whose seed node is gone: the nodes it named */
	for (uint32_t i = 0; !c->rc && i < c->nnodes; i++)
		if ((c->rc =
			 tcp_connect(c, c->nodes[i].addr, c->nodes[i].port, tv, e2, sizeof(e2))))
			via = &c->nodes[i];
	if (!c->rc) {
		set_error(c, "cannot connect to Redis at %s: %s", where(c, w, sizeof(w)), err);
		disconnect(c);
		return false;
	}
	if (c->sentinel && !sentinel_check_role(c))
		return false;
	if (c->have_password) {
		const char *argv[] = {"AUTH", c->password};

		if (!simple(c, "AUTH (--cluster-password-file)", NULL, 2, argv))
			return false;
	}
	if (c->db) {
		const char *argv[] = {"SELECT", db};

		snprintf(db, sizeof(db), "%d", c->db);
		if (!simple(c, "SELECT", NULL, 2, argv))
			return false;
	}
	if (!load_script(c, LEASE_LUA, c->sha) || !load_script(c, BREAKER_LUA, c->bk_sha) ||
	    !load_script(c, resild_cb_budget_lua, c->cb_sha) ||
	    !load_script(c, resild_cb_conf_lua, c->cf_sha) ||
	    !load_script(c, resild_cbh_lua, c->bh_sha) || !load_script(c, resild_ck_lua, c->ck_sha))
		return false;
	/* one round trip timed: the first leases fit it already */
	t0 = mono_ns();
	if (!load_script(c, HOSTS_LUA, c->hs_sha))
		return false;
	cl_rtt_note(c, mono_ns() - t0);
	pthread_mutex_lock(&c->lock);
	bool was = c->last_error[0] != '\0';

	c->connected = true;
	c->last_error[0] = '\0';
	pthread_mutex_unlock(&c->lock);
	if (via)
		log_notice("cluster: connected to Redis Cluster node %s:%d (the seed %s is out of "
			   "reach: %s)",
			   via->addr, via->port, where(c, w, sizeof(w)), err);
	else if (was)
		log_notice("cluster: connected to Redis at %s again", where(c, w, sizeof(w)));
	else
		log_info("cluster: connected to Redis at %s as host %s (run %s)",
			 where(c, w, sizeof(w)), c->host, c->run);
	return true;
}

/* The reply of one lease script call into a; false: garbage (the caller
 * reports it and disconnects: cluster_rc.c, parsed). The same for a breaker
 * script call below. */
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
 *     stop;
 *   - FB_NONE: reject (no fleet size known, or --cluster-fallback reject);
 *   - FB_LOCAL: the whole rate (--cluster-fallback local).
 * Past the end the clients apply rate / N with --cluster-hosts (the
 * fleet holds that for every host it does not see), else nothing.
 */
void cl_fallback_of(struct resild_cluster *c, int64_t ok_ns, uint32_t policy_hosts, int64_t now,
		    struct cl_fallback *f)
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
	f->tier = f->hosts ? FB_BASE : FB_NONE;
	f->until_ns = now + hold_ns(c);
}

/* -------------------------------------------------------------- loop */

int resild_cluster_init(struct resild *d)
{
	struct resild_cluster *c;
	const struct resild_opts *o = &d->opts;
	char mid[HOST_MAX];
	pthread_condattr_t ca;
	int r;

	if (!o->cluster_redis)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return log_error_errno(-ENOMEM, "cluster: out of memory");
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->cluster = c;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0)
		return log_error_errno(-errno, "cluster: eventfd: %m");
	snprintf(c->url, sizeof(c->url), "%s", o->cluster_redis);
	r = parse_url(c, o->cluster_redis);
	if (r < 0)
		return r;
	c->interval_ns =
	    o->cluster_interval_ns ? o->cluster_interval_ns : RESILD_CLUSTER_INTERVAL_NS;
	c->fallback = o->cluster_fallback;
	c->hosts_expected = o->cluster_hosts;
	c->fallback_for_ns = o->cluster_fallback_for_ns ? o->cluster_fallback_for_ns
							: RESILD_CLUSTER_FALLBACK_FOR_NS;
	if (c->fallback_for_ns < 2 * lease_ns(c)) {
		log_notice("cluster: --cluster-fallback-for raised to %lld ms: two leases of "
			   "--cluster-interval %lld ms",
			   (long long)(2 * lease_ns(c) / RESIL_NS_PER_MS),
			   (long long)(c->interval_ns / RESIL_NS_PER_MS));
		c->fallback_for_ns = 2 * lease_ns(c);
	}
	if (strlen(o->cluster_name ? o->cluster_name : "resil") >= sizeof(c->prefix))
		return log_error_errno(-EINVAL, "--cluster-name: at most %d bytes",
				       RESIL_NAME_MAX - 1);
	snprintf(c->prefix, sizeof(c->prefix), "%s", o->cluster_name ? o->cluster_name : "resil");
	if (o->cluster_host) {
		if (!*o->cluster_host || strlen(o->cluster_host) >= sizeof(c->host))
			return log_error_errno(-EINVAL, "--cluster-host: 1 to %d bytes",
					       HOST_MAX - 1);
		snprintf(c->host, sizeof(c->host), "%s", o->cluster_host);
	} else {
		r = read_line_file("/etc/machine-id", mid, sizeof(mid),
				   "cluster host id (--cluster-host):");
		if (r < 0)
			return r;
		snprintf(c->host, sizeof(c->host), "%s", mid);
	}
	cl_ident_init(c, d->seg.cfg->epoch);
	if (o->cluster_tls_ca || o->cluster_tls_cert || o->cluster_tls_server_name)
		c->tls = true;
	if (c->tls && c->unix_sock)
		return log_error_errno(-EINVAL, "--cluster-tls-*: not over a unix socket");
	if (c->tls && (r = tls_init(c, o)) < 0)
		return r;
	if (o->cluster_password_file) {
		r = read_line_file(o->cluster_password_file, c->password, sizeof(c->password),
				   "--cluster-password-file");
		if (r < 0)
			return r;
		c->have_password = true;
	}
	c->cap = d->seg.cfg->slot_cap;
	c->slots = calloc(c->cap, sizeof(*c->slots));
	c->req = calloc(c->cap, sizeof(*c->req));
	c->ereq = calloc(c->cap, sizeof(*c->ereq));
	c->ans = calloc(c->cap, sizeof(*c->ans));
	c->work = calloc(c->cap, sizeof(*c->work));
	c->ck_thr = calloc(c->cap, sizeof(*c->ck_thr));
	c->perr = calloc(c->cap, sizeof(*c->perr));
	if (!c->slots || !c->req || !c->ereq || !c->ans || !c->work || !c->ck_thr || !c->perr)
		return log_error_errno(-ENOMEM, "cluster: out of memory");
	r = -pthread_create(&c->thread, NULL, cluster_main, c);
	if (r < 0)
		return log_error_errno(r, "cluster: cannot start the exchange thread: %m");
	c->started = true;
	/* the fallback's words of the policies the files define, before the
	 * loop serves their first client */
	resild_cluster_woken(d);
	return 0;
}

void resild_cluster_fini(struct resild *d)
{
	struct resild_cluster *c = d->cluster;

	if (!c)
		return;
	if (c->started) {
		pthread_mutex_lock(&c->lock);
		c->stop = true;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	if (c->efd >= 0)
		close(c->efd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	for (uint32_t i = 0; c->slots && i < c->cap; i++)
		resild_ck_slot_fini(&c->slots[i].ck);
	for (uint32_t i = 0; c->req && c->ans && c->work && i < c->cap; i++) {
		resild_ck_free_req(&c->req[i].ck);
		resild_ck_free_req(&c->work[i].ck);
		resild_ck_free_ans(&c->ans[i].ck);
	}
	free(c->slots);
	free(c->req);
	free(c->ereq);
	free(c->ans);
	free(c->work);
	free(c->ck_thr);
	free(c->perr);
	free(c->pend);
	explicit_bzero(c->password, sizeof(c->password));
	if (c->ssl)
		SSL_CTX_free(c->ssl); /* the sessions of relays still closing hold a reference */
	free(c);
	d->cluster = NULL;
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
		log_error("cluster: policy %s: %s: no exchange with Redis %s and no fleet size "
			  "known: its clients reject past their lease (give --cluster-hosts N "
			  "for a share of the fleet's meanwhile)",
			  name, what, ok_ns ? "for --cluster-fallback-for" : "yet");
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
 * come from one exchange and run out together: one line. */
void cl_lease_ran_out(struct resild_cluster *c, const char *name, const char *what)
{
	int64_t rtt, now = mono_ns();

	(void)what;
	if (now - c->ranout_ns < c->interval_ns && !strcmp(c->ranout_name, name))
		return;
	c->ranout_ns = now;
	snprintf(c->ranout_name, sizeof(c->ranout_name), "%s", name);
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

struct tick_ctx {
	struct resild *d;
	struct resild_cluster *c;
	int64_t now;
	bool post;
	bool early;    /* this policy posts an early lease call (tick_limit says) */
	bool grant;    /* and it asks for a lease (else: an acknowledgement only) */
	bool limiters; /* a global limiter was seen: sample its demand */
	uint32_t fleet_seen; /* the largest fleet size a policy's state holds */
	uint32_t hosts_known; /* the fleet's size: --cluster-hosts, else the most of what
			       * the states hold and the daemons live now */
};

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
static void tick_limit(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
		       struct cl_slot *cs, const struct xans *a, struct xreq *q)
{
	struct resild_cluster *c = t->c;
	const struct resil_limit_conf *lc = &rec->conf.limit;
	struct resil_limit_state *lst = resil_comp_state(s, rec, RESIL_C_LIMIT);
	double rate = (double)lc->count * 1e9 / (double)lc->period_ns;
	uint64_t v[RESIL_STAT__MAX], calls, known;
	struct cl_fallback f;
	int64_t fb, base;

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
		st_relaxed(&lst->fleet_hosts, resil_min64(a->hosts, RESILD_CLUSTER_HOSTS_MAX));
	}
	known = ld_relaxed(&lst->fleet_hosts); /* any client's word: clamped */
	if (known > RESILD_CLUSTER_HOSTS_MAX)
		known = 0;
	if (known > t->fleet_seen)
		t->fleet_seen = (uint32_t)known;
	cl_fallback_of(c, cs->ok_ns, (uint32_t)known, t->now, &f);
	base = f.hosts ? interval_or_reject(rate / f.hosts) : RESIL_LIMIT_FALLBACK_REJECT;
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
		resil_event_push(s, RESIL_EV_CLUSTER, rec->slot, rec->gen, RESIL_CL_FALLBACK, 0, 0,
				 0, t->now);
		cl_lease_ran_out(c, rec->name, "limit");
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

/* A global time-window breaker: mirror a fleet open and its close, hold
 * the host's OPEN while another host probes for the fleet, probe when the
 * fleet's round is granted here, report the window and the round's
 * outcome. */
static void tick_breaker(struct tick_ctx *t, const struct resil_seg *s, const struct resil_rec *rec,
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

static int tick_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *arg)
{
	struct tick_ctx *t = arg;
	struct resild_cluster *c = t->c;
	struct cl_slot *cs = &c->slots[slot];
	struct xreq q = {.active = true, .gen = rec->gen};
	bool lim, bk, bud, bh, keyed;
	struct xans a;

	if (slot >= c->cap || rec->conf.scope != RESIL_SCOPE_GLOBAL)
		return 0;
	keyed = resild_ck_wants(rec);
	lim = resil_has(rec, RESIL_C_LIMIT) && !rec->conf.limit.keys;
	bk = resil_has(rec, RESIL_C_BREAKER) && rec->conf.breaker.window_kind == RESIL_WINDOW_TIME;
	bud = resild_cb_wants_budget(rec);
	bh = resild_cbh_wants(rec);
	if (!lim && !bk && !bud && !bh && !keyed)
		return 0;
	if (!cs->active || cs->gen != rec->gen) {
		resild_ck_slot_fini(&cs->ck);
		memset(cs, 0, sizeof(*cs));
		cs->active = true;
		cs->gen = rec->gen;
		cs->fb_tier = -1; /* none said yet */
		cs->bh.fb_tier = -1;
		pthread_mutex_lock(&c->lock);
		memset(&c->perr[slot], 0, sizeof(c->perr[slot]));
		pthread_mutex_unlock(&c->lock);
	}
	/* the answer of the last exchange, if it is for this policy */
	pthread_mutex_lock(&c->lock);
	a = c->ans[slot];
	c->ans[slot].fresh = false;
	c->ans[slot].bk_fresh = false;
	c->ans[slot].cb.fresh = false;
	c->ans[slot].cb.conf_fresh = false;
	c->ans[slot].bh.fresh = false;
	c->ans[slot].ck.fresh = false;
	c->ans[slot].ck.blob = NULL; /* the loop's now */
	c->ans[slot].ck.len = 0;
	pthread_mutex_unlock(&c->lock);
	t->early = t->grant = false;
	if (lim)
		tick_limit(t, s, rec, cs, &a, &q);
	if (bk)
		tick_breaker(t, s, rec, cs, &a, &q);
	if (a.gen != rec->gen) {
		memset(&a.cb, 0, sizeof(a.cb));
		memset(&a.bh, 0, sizeof(a.bh));
	}
	if (bh)
		resild_cbh_tick(c, s, rec, &cs->bh, &a.bh, &q.bh, t->now, &t->fleet_seen, t->post);
	resild_cb_tick(s, rec, &cs->cb, &a.cb, &q.cb, t->now, c->interval_ns, t->hosts_known,
		       t->post);
	if (a.gen != rec->gen)
		resild_ck_free_ans(&a.ck);
	if (keyed)
		resild_ck_tick(s, rec, &cs->ck, &a.ck, &q.ck, t->now, c->interval_ns, lease_ns(c),
			       t->post);
	resild_ck_free_ans(&a.ck);
	if (t->early && !t->post) {
		snprintf(q.name, sizeof(q.name), "%s", rec->name);
		pthread_mutex_lock(&c->lock);
		c->ereq[slot] = q;
		/* an early call is a lease only: the keys' records stay with
		 * the regular request */
		memset(&c->ereq[slot].ck, 0, sizeof(c->ereq[slot].ck));
		c->kick_early = true;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	if (!t->post)
		return 0;
	snprintf(q.name, sizeof(q.name), "%s", rec->name);
	pthread_mutex_lock(&c->lock);
	/* admissions of a request the thread has not taken yet go with this one */
	if (c->req[slot].gen == q.gen)
		resild_ck_keep_req(&q.ck, &c->req[slot].ck);
	resild_ck_free_req(&c->req[slot].ck);
	c->req[slot] = q;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void cluster_tick(struct resild *d, bool may_post)
{
	struct resild_cluster *c = d->cluster;
	struct tick_ctx t = {.d = d, .c = c, .now = mono_ns()};

	if (!c)
		return;
	t.post = may_post && t.now - c->last_post_ns >= c->interval_ns - c->interval_ns / 4;
	pthread_mutex_lock(&c->lock);
	c->loop_connected = c->connected;
	t.hosts_known = c->hosts_expected		 ? c->hosts_expected
			: c->hosts_live > c->fleet_known ? c->hosts_live
							 : c->fleet_known;
	if (t.post) {
		c->last_post_ns = t.now;
		for (uint32_t i = 0; i < c->cap; i++)
			c->req[i].active = false;
	}
	pthread_mutex_unlock(&c->lock);
	resil_seg_foreach(&d->seg, tick_one, &t);
	c->fleet_known = t.fleet_seen;
	for (uint32_t i = 0; i < c->cap; i++) {
		if (!c->slots[i].active)
			continue;
		uint64_t w = ld_relaxed(&resil_seg_slots(&d->seg)[i]);
		const struct resil_rec *rec = resil_seg_rec_of(&d->seg, w);

		if (!rec || rec->gen != c->slots[i].gen || rec->conf.scope != RESIL_SCOPE_GLOBAL) {
			c->slots[i].active = false;
			resild_ck_slot_fini(&c->slots[i].ck);
		}
	}
	pthread_mutex_lock(&c->lock);
	if (c->sampling != t.limiters) {
		c->sampling = t.limiters;
		pthread_cond_signal(&c->cond);
	}
	if (t.post) {
		c->kick = true;
		pthread_cond_signal(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

void resild_cluster_tick(struct resild *d)
{
	cluster_tick(d, true);
}

int resild_cluster_wake_fd(const struct resild *d)
{
	return d->cluster ? d->cluster->efd : -1;
}

void resild_cluster_woken(struct resild *d)
{
	cluster_tick(d, false);
}

/* A family of one sample without labels. */
static void cl_one(struct resil_msink *k, const char *name, const char *help, enum resil_mtype type,
		   struct resil_mvalue v)
{
	k->family(k, name, help, type);
	k->sample(k, name, "", NULL, 0, v);
}

static void fallback_metrics(const struct resild_cluster *c, int tier, double share,
			     const char *name, const char *comp, struct resil_msink *k)
{
	struct resil_mlabel l[2] = {{"policy", name}, {"component", comp}};

	k->sample(k, "resil_cluster_fallback_rejecting", "", l, 2,
		  resil_mv_uint(tier == FB_NONE && c->fallback == RESILD_FALLBACK_SHARE));
	k->sample(k, "resil_cluster_fallback_share", "", l, 2, resil_mv_real(share, 3));
}

void resild_cluster_metrics(struct resild *d, struct resil_msink *k)
{
	struct resild_cluster *c = d->cluster;
	int64_t now = mono_ns(), last_ok;
	uint64_t calls, errors, exchanges;
	uint32_t dup, live;
	int64_t rtt;
	bool connected, too;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	connected = c->connected;
	last_ok = c->last_ok_ns;
	calls = c->script_calls;
	errors = c->errors;
	exchanges = c->exchanges;
	dup = c->dup_runs;
	live = c->hosts_live;
	rtt = c->rtt_ns;
	too = c->rtt_too_long;
	pthread_mutex_unlock(&c->lock);
	cl_one(k, "resil_cluster_connected", "1 when the exchange with Redis works.",
	       RESIL_MT_GAUGE, resil_mv_uint(connected ? 1 : 0));
	cl_one(k, "resil_cluster_last_exchange_age_seconds",
	       "Since the last exchange that answered every global policy (-1: never).",
	       RESIL_MT_GAUGE, resil_mv_real(last_ok ? (double)(now - last_ok) / 1e9 : -1.0, 3));
	cl_one(k, "resil_cluster_exchanges_total", "Rounds with Redis.", RESIL_MT_COUNTER,
	       resil_mv_uint(exchanges));
	cl_one(k, "resil_cluster_script_calls_total", "Lease script calls answered.",
	       RESIL_MT_COUNTER, resil_mv_uint(calls));
	cl_one(k, "resil_cluster_errors_total", "Failed connections and exchanges.",
	       RESIL_MT_COUNTER, resil_mv_uint(errors));
	k->family(k, "resil_cluster_script_errors_total",
		  "Script calls that failed or answered garbage for one policy (the others "
		  "untouched).",
		  RESIL_MT_COUNTER);
	cl_one(k, "resil_cluster_duplicate_runs",
	       "Other daemons running now under this host id (--cluster-host): each counts as a "
	       "host of its own.",
	       RESIL_MT_GAUGE, resil_mv_uint(dup));
	cl_one(k, "resil_cluster_hosts_live", "Daemons of the fleet that reported lately.",
	       RESIL_MT_GAUGE, resil_mv_uint(live));
	cl_one(k, "resil_cluster_round_trip_seconds",
	       "The longest round trip to Redis of the last rounds (it sizes the leases).",
	       RESIL_MT_GAUGE, resil_mv_real((double)rtt / 1e9, 3));
	cl_one(k, "resil_cluster_lease_length_seconds", "How long a lease lasts now.",
	       RESIL_MT_GAUGE, resil_mv_real((double)lease_ns(c) / 1e9, 3));
	cl_one(k, "resil_cluster_round_trip_too_long",
	       "1 when leases cannot cover the round trip within --cluster-fallback-for.",
	       RESIL_MT_GAUGE, resil_mv_uint(too));
	cl_one(k, "resil_cluster_lease_expiries_connected_total",
	       "Leases that ran out unrenewed while connected to Redis.", RESIL_MT_COUNTER,
	       resil_mv_uint(c->expired_connected));
	k->family(k, "resil_cluster_share", "Requests per second leased to this host.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_lease_seconds",
		  "Until the lease expires (<= 0: expired, clients fall back).", RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_demand", "Calls per second reaching the limiter here.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_hosts", "Hosts present in the policy's last lease.",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_early_calls_total",
		  "Lease calls between intervals (a demand rise, an acknowledgement).",
		  RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_fallbacks_total", "Leases that expired unrenewed.",
		  RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_fallback_rejecting",
		  "1 when the policy's clients would reject past their lease: no exchange with "
		  "Redis, and no fleet size known (--cluster-hosts).",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_fallback_share",
		  "What the clients fall back on past their lease, per second (bulkhead: "
		  "slots).",
		  RESIL_MT_GAUGE);
	k->family(k, "resil_cluster_breaker_opens_total",
		  "Fleet-wide opens that opened the breaker here.", RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_breaker_fleet_calls", "Calls in the fleet's time window.",
		  RESIL_MT_GAUGE);
	resild_cb_metrics_help(k);
	resild_ck_metrics_help(k);
	resild_cbh_metrics_help(k);
	for (uint32_t i = 0; i < c->cap; i++) {
		const struct cl_slot *cs = &c->slots[i];
		uint64_t sw = ld_relaxed(&resil_seg_slots(&d->seg)[i]);
		const struct resil_rec *rec = resil_seg_rec_of(&d->seg, sw);
		char name[RESIL_NAME_MAX + 1];
		struct resil_mlabel l = {"policy", name};
		uint64_t perrs;

		if (!cs->active || !rec || rec->gen != cs->gen)
			continue;
		/* the name as it is (the text sink escapes it) */
		memcpy(name, rec->name, RESIL_NAME_MAX);
		name[RESIL_NAME_MAX] = '\0';
		pthread_mutex_lock(&c->lock);
		perrs = c->perr[i].count;
		pthread_mutex_unlock(&c->lock);
		k->sample(k, "resil_cluster_script_errors_total", "", &l, 1, resil_mv_uint(perrs));
		resild_cb_metrics(rec, &cs->cb, name, k);
		if (resild_cbh_wants(rec)) {
			resild_cbh_metrics(&cs->bh, name, now, k);
			fallback_metrics(c, cs->bh.fb_tier, (double)cs->bh.fb_slots, name,
					 "bulkhead", k);
		}
		if (rec->conf.breaker.on) {
			k->sample(k, "resil_cluster_breaker_opens_total", "", &l, 1,
				  resil_mv_uint(cs->bk_trips));
			k->sample(k, "resil_cluster_breaker_fleet_calls", "", &l, 1,
				  resil_mv_int(cs->bk_calls));
		}
		if (resild_ck_wants(rec))
			resild_ck_metrics(&cs->ck, name, k);
		if (!rec->conf.limit.on || rec->conf.limit.keys)
			continue;
		k->sample(k, "resil_cluster_share", "", &l, 1,
			  resil_mv_real(cs->applied ? cs->share : 0.0, 3));
		k->sample(
		    k, "resil_cluster_lease_seconds", "", &l, 1,
		    resil_mv_real(cs->expiry_ns ? (double)(cs->expiry_ns - now) / 1e9 : 0.0, 3));
		k->sample(k, "resil_cluster_demand", "", &l, 1, resil_mv_real(cs->demand, 3));
		k->sample(k, "resil_cluster_hosts", "", &l, 1, resil_mv_uint(cs->hosts));
		k->sample(k, "resil_cluster_fallbacks_total", "", &l, 1,
			  resil_mv_uint(cs->fallbacks));
		k->sample(k, "resil_cluster_early_calls_total", "", &l, 1,
			  resil_mv_uint(cs->early));
		fallback_metrics(c, cs->fb_tier, cs->fb_share, name, "limit", k);
	}
}

int resild_cluster_info(struct resild *d, struct resild_cluster_info *out)
{
	struct resild_cluster *c = d->cluster;
	int64_t now = mono_ns(), last_ok;

	if (!c)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->redis = c->url;
	out->name = c->prefix;
	out->host = c->host;
	out->fallback = c->fallback == RESILD_FALLBACK_SHARE   ? "share"
			: c->fallback == RESILD_FALLBACK_LOCAL ? "local"
							       : "reject";
	out->interval_ns = c->interval_ns;
	pthread_mutex_lock(&c->lock);
	out->connected = c->connected;
	snprintf(out->last_error, sizeof(out->last_error), "%s", c->last_error);
	last_ok = c->last_ok_ns;
	out->exchanges = c->exchanges;
	out->script_calls = c->script_calls;
	out->errors = c->errors;
	out->dup_runs = c->dup_runs;
	out->hosts_live = c->hosts_live;
	out->rtt_ns = c->rtt_ns;
	out->rtt_too_long = c->rtt_too_long;
	pthread_mutex_unlock(&c->lock);
	out->lease_ns = lease_ns(c);
	out->expired_connected = c->expired_connected;
	out->run = c->run;
	out->hosts_expected = c->hosts_expected;
	out->fallback_for_ns = c->fallback_for_ns;
	out->last_exchange_ns = last_ok ? now - last_ok : -1;
	for (uint32_t i = 0; i < c->cap; i++)
		if (c->slots[i].active && c->slots[i].hosts > out->hosts_seen)
			out->hosts_seen = c->slots[i].hosts;
	return 0;
}

int resild_cluster_policy_info(struct resild *d, uint32_t slot, uint32_t gen,
			       struct resild_cluster_policy *out)
{
	struct resild_cluster *c = d->cluster;
	const struct cl_slot *cs;
	uint64_t w;
	const struct resil_rec *rec;

	if (!c || slot >= c->cap)
		return -ENOENT;
	cs = &c->slots[slot];
	w = ld_relaxed(&resil_seg_slots(&d->seg)[slot]);
	rec = resil_seg_rec_of(&d->seg, w);
	if (!cs->active || cs->gen != gen || !rec || rec->gen != gen)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->limit = resil_has(rec, RESIL_C_LIMIT) && !rec->conf.limit.keys;
	out->share = cs->applied ? cs->share : 0.0;
	out->lease_ns = cs->expiry_ns ? cs->expiry_ns - mono_ns() : 0;
	out->demand = cs->demand;
	out->hosts = cs->hosts;
	out->breaker =
	    resil_has(rec, RESIL_C_BREAKER) && rec->conf.breaker.window_kind == RESIL_WINDOW_TIME;
	out->fleet = cs->bk_probing ? 2 : cs->bk_open ? 1 : 0;
	out->fleet_open = cs->bk_gen;
	out->fleet_calls = cs->bk_calls;
	out->conflicts = cs->cb.conflicts;
	snprintf(out->conflict_host, sizeof(out->conflict_host), "%s", cs->cb.other_host);
	out->bulkhead = resild_cbh_wants(rec);
	out->slots = cs->bh.applied ? cs->bh.share : 0;
	out->max = resil_bulkhead_max_of(&rec->conf.bulkhead);
	out->parked = cs->bh.parked;
	out->slots_lease_ns = cs->bh.expiry_ns ? cs->bh.expiry_ns - mono_ns() : 0;
	out->slots_hosts = cs->bh.hosts;
	out->keyed = resild_ck_wants(rec);
	out->keyed_published = cs->ck.published;
	out->keyed_charged = cs->ck.charged;
	out->keyed_owing = cs->ck.debt_n;
	out->fallback = out->limit ? cs->fb_tier : cs->bh.fb_tier;
	out->fallback_share = cs->fb_share;
	out->fallback_slots = cs->bh.fb_slots;
	pthread_mutex_lock(&c->lock);
	snprintf(out->error, sizeof(out->error), "%s", c->perr[slot].text);
	out->errors = c->perr[slot].count;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void resild_cluster_fallback_text(const struct resild_cluster_policy *p, char *buf, size_t len)
{
	bool bh = !p->limit && p->bulkhead;

	switch (p->fallback) {
	case FB_HELD:
		if (bh)
			snprintf(buf, len, "its last share, %u slots, held by the fleet",
				 p->fallback_slots);
		else
			snprintf(buf, len, "its last share, %.1f/s, held by the fleet",
				 p->fallback_share);
		break;
	case FB_BASE:
		if (bh)
			snprintf(buf, len, "the fleet's max / its size: %u slots",
				 p->fallback_slots);
		else
			snprintf(buf, len, "the fleet's rate / its size: %.1f/s",
				 p->fallback_share);
		break;
	case FB_LOCAL:
		snprintf(buf, len, "the whole %s here (local)", bh ? "bulkhead" : "rate");
		break;
	case FB_NONE:
		snprintf(buf, len, "nothing: REJECT");
		break;
	default:
		snprintf(buf, len, "%s", "");
		break;
	}
}

const char *resild_cluster_lease_lua(void)
{
	return LEASE_LUA;
}

/* SPDX-License-Identifier: MIT */
/*
 * cluster_host.c - who a host is in the fleet: its id and its run, and
 * two daemons that run under one host id.
 *
 * A host's id (--cluster-host, /etc/machine-id by default) names it to an
 * operator; the fleet names it by that id and its run: the random epoch
 * of its segment pair (shm/seg.c), which a daemon that adopts the
 * segments from the fd store keeps (the same workers, the same state: the
 * same run), and so does a move to new sizes (the pair's run word,
 * daemon/segmove.c); a fresh start draws anew. Every script's field, stream
 * entry and hash key is "<id>#<run>" (resild_cluster's ident): two
 * daemons given one id (a cloned image with one /etc/machine-id, the
 * default id) are two hosts to every script, so each keeps the fleet's
 * bounds as two hosts do, and neither skips the other's keyed reports as
 * its own.
 *
 * Detection (HOSTS_LUA, one call per regular round, on the key
 * "<cluster>:hosts"): each run writes the Redis time of its report under
 * its ident; another run of the same id that has reported since this
 * run's previous report is running now (a run that a restart replaced
 * stops reporting before its successor's second report, so it is never
 * counted). Both daemons log it (once, and once when it ends), and
 * `resilctl status` and resil_cluster_duplicate_runs say so. The same
 * call counts the runs that reported within a lease length: the hosts
 * live in the fleet.
 *
 * Who writes what. The thread: the answer words in struct resild_cluster
 * (dup_runs, hosts_live, under its lock) and the logs of a change.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_priv.h"
#include "log.h"

/*
 * KEYS[1] "<cluster>:hosts": ident -> the Redis time (ms) of its last
 * report. ARGV: host id, run, live (ms). Returns {other runs of this host
 * id running now, runs that reported within live}.
 */
const char HOSTS_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local host, run, live = ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "if not live or live <= 0 or string.find(run, '#', 1, true) then\n"
    "  return redis.error_reply('ERR resil hosts: bad arguments')\n"
    "end\n"
    "local me = host .. '#' .. run\n"
    "local prev = tonumber(redis.call('HGET', KEYS[1], me))\n"
    "redis.call('HSET', KEYS[1], me, string.format('%d', now))\n"
    "local raw = redis.call('HGETALL', KEYS[1])\n"
    "local dup, n = 0, 0\n"
    "for i = 1, #raw, 2 do\n"
    "  local f, w = raw[i], tonumber(raw[i + 1])\n"
    "  if not w or w <= now - 100 * live then\n"
    "    redis.call('HDEL', KEYS[1], f)\n"
    "  else\n"
    "    if w > now - live then n = n + 1 end\n"
    "    local h = string.match(f, '^(.*)#[^#]*$')\n"
    "    if f ~= me and h == host and prev and w > prev then dup = dup + 1 end\n"
    "  end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], 100 * live + 60000)\n"
    "return {dup, n}\n";

void cl_ident_init(struct resild_cluster *c, uint64_t run)
{
	snprintf(c->run, sizeof(c->run), "%016" PRIx64, run);
	snprintf(c->ident, sizeof(c->ident), "%s#%s", c->host, c->run);
}

bool cl_hosts_append(struct resild_cluster *c, struct cl_hosts_cmd *cmd)
{
	snprintf(cmd->key, sizeof(cmd->key), "%s:hosts", c->prefix);
	snprintf(cmd->live, sizeof(cmd->live), "%lld", (long long)(lease_ns(c) / RESIL_NS_PER_MS));
	cmd->argv[0] = "EVALSHA";
	cmd->argv[1] = c->hs_sha;
	cmd->argv[2] = "1";
	cmd->argv[3] = cmd->key;
	cmd->argv[4] = c->host;
	cmd->argv[5] = c->run;
	cmd->argv[6] = cmd->live;
	return true;
}

bool cl_hosts_parse(struct resild_cluster *c, const redisReply *r)
{
	uint32_t dup, live, was;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 ||
	    r->element[1]->integer < 0)
		return false;
	dup = (uint32_t)resil_min64(r->element[0]->integer, UINT32_MAX);
	live = (uint32_t)resil_min64(r->element[1]->integer, UINT32_MAX);
	pthread_mutex_lock(&c->lock);
	was = c->dup_runs;
	c->dup_runs = dup;
	c->hosts_live = live;
	pthread_mutex_unlock(&c->lock);
	if (dup && !was)
		log_error(
		    "cluster: %u other daemon%s run%s as host %s at the same time as this one "
		    "(run %s): two daemons under one host id (a cloned image with one "
		    "/etc/machine-id?); the fleet counts each as a host of its own; give each "
		    "its own --cluster-host",
		    dup, dup > 1 ? "s" : "", dup > 1 ? "" : "s", c->host, c->run);
	else if (!dup && was)
		log_notice("cluster: host %s: no other daemon runs under this host id now",
			   c->host);
	return true;
}

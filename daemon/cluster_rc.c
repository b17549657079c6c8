/* SPDX-License-Identifier: MIT */
/*
 * cluster_rc.c - the exchange thread's side of policy.scope = global
 * (cluster.c opens with the design): Redis Cluster's slot map and
 * redirections, one exchange round (the pipelined script calls of every
 * global policy, their replies read back in order) and the thread that
 * runs it. Every function here runs on the exchange thread; it meets the
 * loop only in the words struct resild_cluster shares under its lock
 * (cluster_priv.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "cluster_priv.h"
#include "log.h"
#include "resil.h"

/* ------------------------------------------------ Redis Cluster
 *
 * Every key of one policy carries the hash tag {<policy>}, so one policy's
 * calls go to one node. Debian's hiredis has no cluster client: the
 * thread keeps a slot map learned from redirections. A command goes to
 * the node its slot maps to (the seed connection until a MOVED names
 * another); MOVED updates the map and sends the command again to the
 * named node, ASK sends ASKING and the command there once (a slot being
 * migrated), at most REDIRECTS_MAX hops. Commands are kept formatted
 * until their reply is read, for that. A node's connection is opened on
 * its first redirection (AUTH, the scripts loaded); any I/O error closes
 * them all and the map is learned again from the seed, or, when the seed
 * is gone (a failover), from the first learned node that answers.
 */

/* Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag. */
static uint32_t key_slot(const char *key)
{
	const char *o = strchr(key, '{'), *e;
	size_t n = strlen(key);
	uint16_t crc = 0;

	if (o && (e = strchr(o + 1, '}')) && e > o + 1) {
		key = o + 1;
		n = (size_t)(e - o - 1);
	}
	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((uint8_t)key[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc & (SLOTS - 1);
}

static struct timeval io_timeout(const struct resild_cluster *c)
{
	int64_t to = resil_max64(10 * c->interval_ns, 2 * RESIL_NS_PER_S);

	return (struct timeval){.tv_sec = to / RESIL_NS_PER_S,
				.tv_usec = (to % RESIL_NS_PER_S) / 1000};
}

/* A new connection to a cluster node, authenticated, scripts loaded;
 * NULL: logged. */
static redisContext *node_connect(struct resild_cluster *c, const struct cl_node *nd)
{
	static const char *const lua[] = {LEASE_LUA,	      BREAKER_LUA,    resild_cb_budget_lua,
					  resild_cb_conf_lua, resild_cbh_lua, resild_ck_lua,
					  HOSTS_LUA};
	struct timeval tv = io_timeout(c);
	char err[256];
	redisContext *rc = tcp_connect(c, nd->addr, nd->port, tv, err, sizeof(err));
	redisReply *r;

	if (!rc) {
		set_error(c, "cannot connect to Redis Cluster node %s:%d: %s", nd->addr, nd->port,
			  err);
		goto fail;
	}
	if (c->have_password) {
		const char *argv[] = {"AUTH", c->password};

		r = redisCommandArgv(rc, 2, argv, NULL);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			set_error(c, "Redis Cluster node %s:%d refused AUTH: %s", nd->addr,
				  nd->port, r ? r->str : rc->errstr);
			if (r)
				freeReplyObject(r);
			goto fail;
		}
		freeReplyObject(r);
	}
	for (size_t i = 0; i < sizeof(lua) / sizeof(lua[0]); i++) {
		const char *argv[] = {"SCRIPT", "LOAD", lua[i]};

		r = redisCommandArgv(rc, 3, argv, NULL);
		if (!r || r->type != REDIS_REPLY_STRING) {
			set_error(c, "Redis Cluster node %s:%d: SCRIPT LOAD: %s", nd->addr,
				  nd->port,
				  r && r->type == REDIS_REPLY_ERROR ? r->str
				  : r				    ? "garbage"
								    : rc->errstr);
			if (r)
				freeReplyObject(r);
			goto fail;
		}
		freeReplyObject(r);
	}
	return rc;
fail:
	if (rc)
		redisFree(rc);
	return NULL;
}

/* The node at host:port in the table (added); -1: the table is full. */
static int node_find(struct resild_cluster *c, const char *host, int port)
{
	for (uint32_t i = 0; i < c->nnodes; i++)
		if (c->nodes[i].port == port && strcmp(c->nodes[i].addr, host) == 0)
			return (int)i;
	if (c->nnodes == NODES_MAX)
		return -1;
	snprintf(c->nodes[c->nnodes].addr, sizeof(c->nodes[0].addr), "%s", host);
	c->nodes[c->nnodes].port = port;
	c->nodes[c->nnodes].rc = NULL;
	return (int)c->nnodes++;
}

static bool node_busy(const struct resild_cluster *c, const redisContext *rc)
{
	for (uint32_t i = c->rpend; i < c->npend; i++)
		if (c->pend[i].rc == rc)
			return true;
	return false;
}

/* p's command again where the redirection r (freed) says; the new reply,
 * or NULL (logged). */
static redisReply *follow(struct resild_cluster *c, struct cl_pend *p, redisReply *r)
{
	bool ask = strncmp(r->str, "ASK ", 4) == 0;
	char host[256], *colon;
	redisContext *rc, *tmp = NULL;
	redisReply *a = NULL;
	unsigned long slot;
	long port;
	int k;

	if (sscanf(r->str + (ask ? 4 : 6), "%lu %255s", &slot, host) != 2 || slot >= SLOTS ||
	    !(colon = strrchr(host, ':')) || (port = strtol(colon + 1, NULL, 10)) < 1 ||
	    port > 65535) {
		set_error(c, "Redis answered a redirection that cannot be read: %.120s", r->str);
		freeReplyObject(r);
		return NULL;
	}
	*colon = '\0';
	freeReplyObject(r);
	k = node_find(c, host, (int)port);
	if (k < 0) {
		set_error(c, "Redis Cluster: more than %d nodes", NODES_MAX);
		return NULL;
	}
	if (!c->nodes[k].rc && !(c->nodes[k].rc = node_connect(c, &c->nodes[k])))
		return NULL;
	rc = c->nodes[k].rc;
	if (!ask)
		c->slot_node[slot] = (uint8_t)(k + 1);
	c->redirects++;
	/* replies of this round still due on that connection come first:
	 * a connection of its own for this one */
	if (node_busy(c, rc)) {
		if (!(tmp = node_connect(c, &c->nodes[k])))
			return NULL;
		rc = tmp;
	}
	if ((ask && redisAppendCommand(rc, "ASKING") != REDIS_OK) ||
	    redisAppendFormattedCommand(rc, p->cmd, p->len) != REDIS_OK)
		goto io;
	if (ask) {
		if (redisGetReply(rc, (void **)&a) != REDIS_OK || !a)
			goto io;
		if (a->type == REDIS_REPLY_ERROR) {
			set_error(c, "Redis Cluster node %s:%ld refused ASKING: %s", host, port,
				  a->str);
			freeReplyObject(a);
			goto out;
		}
		freeReplyObject(a);
		a = NULL;
	}
	if (redisGetReply(rc, (void **)&a) != REDIS_OK || !a)
		goto io;
	if (tmp)
		redisFree(tmp);
	return a;
io:
	set_error(c, "Redis Cluster node %s:%ld: %s", host, port,
		  rc->errstr[0] ? rc->errstr : "connection lost");
out:
	if (tmp)
		redisFree(tmp);
	return NULL;
}

/* Route the next commands on key: the node its slot maps to. */
static void route_key(struct resild_cluster *c, const char *key)
{
	uint32_t k = c->slot_node[key_slot(key)];

	c->cur = c->rc;
	if (k && k <= c->nnodes) {
		struct cl_node *nd = &c->nodes[k - 1];

		if (!nd->rc)
			nd->rc = node_connect(c, nd);
		if (nd->rc)
			c->cur = nd->rc;
	}
}

/* Route the next policy's commands. */
static void route(struct resild_cluster *c, const struct xreq *q)
{
	char key[2 * RESIL_NAME_MAX + 16];

	snprintf(key, sizeof(key), "%s:{%s}:lease", c->prefix, q->name);
	route_key(c, key);
}

/* Format and queue a command on c->cur; its reply is read in order. */
static bool send_argv(struct resild_cluster *c, int argc, const char **argv, const size_t *argvlen)
{
	char *cmd;
	int len;

	if (c->npend == c->pend_cap) {
		uint32_t cap = c->pend_cap ? 2 * c->pend_cap : 64;
		struct cl_pend *n = realloc(c->pend, cap * sizeof(*n));

		if (!n)
			return false;
		c->pend = n;
		c->pend_cap = cap;
	}
	len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
	if (len < 0)
		return false;
	if (redisAppendFormattedCommand(c->cur, cmd, (size_t)len) != REDIS_OK) {
		redisFreeCommand(cmd);
		return false;
	}
	c->pend[c->npend++] = (struct cl_pend){.cmd = cmd, .len = (size_t)len, .rc = c->cur};
	return true;
}

static bool append_lease(struct resild_cluster *c, const struct xreq *q)
{
	char key[2 * RESIL_NAME_MAX + 16], d[32], rate[32], len[32], app[32], fb[32], hold[32],
	    n[16], base[32], keep[32];

	snprintf(key, sizeof(key), "%s:{%s}:lease", c->prefix, q->name);
	snprintf(d, sizeof(d), "%.3f", q->demand);
	snprintf(rate, sizeof(rate), "%.6f", q->rate);
	snprintf(len, sizeof(len), "%lld", (long long)(lease_ns(c) / RESIL_NS_PER_MS));
	snprintf(app, sizeof(app), "%llu", (unsigned long long)q->applied);
	snprintf(fb, sizeof(fb), "%.6f", q->fb);
	snprintf(hold, sizeof(hold), "%lld", (long long)(c->fallback_for_ns / RESIL_NS_PER_MS));
	snprintf(n, sizeof(n), "%u", c->hosts_expected);
	snprintf(base, sizeof(base), "%.6f", q->base);
	snprintf(keep, sizeof(keep), "%lld", (long long)(remember_ns(c) / RESIL_NS_PER_MS));
	const char *argv[] = {"EVALSHA", c->sha,
			      "1",	 key,
			      c->ident,	 d,
			      rate,	 len,
			      app,	 q->ack ? "1" : "0",
			      fb,	 hold,
			      n,	 base,
			      keep,	 c->fallback == RESILD_FALLBACK_SHARE ? "1" : "0"};

	return send_argv(c, 16, argv, NULL);
}

static bool append_breaker(struct resild_cluster *c, const struct xreq *q)
{
	char key[2 * RESIL_NAME_MAX + 16], v[14][32];

	snprintf(key, sizeof(key), "%s:{%s}:breaker", c->prefix, q->name);
	snprintf(v[0], 32, "%lld", (long long)q->calls);
	snprintf(v[1], 32, "%lld", (long long)q->failures);
	snprintf(v[2], 32, "%lld", (long long)q->slow);
	snprintf(v[3], 32, "%lld", (long long)q->window_ms);
	snprintf(v[4], 32, "%u", q->min_calls);
	snprintf(v[5], 32, "%u", q->failure_bp);
	snprintf(v[6], 32, "%u", q->slow_bp);
	snprintf(v[7], 32, "%lld", (long long)q->wait_ms);
	snprintf(v[8], 32, "%llu", (unsigned long long)q->sync);
	snprintf(v[9], 32, "%d", q->want ? 1 : 0);
	snprintf(v[10], 32, "%llu", (unsigned long long)q->res_gen);
	snprintf(v[11], 32, "%llu", (unsigned long long)q->res_round);
	snprintf(v[12], 32, "%d", q->res);
	snprintf(v[13], 32, "%lld", (long long)(hold_ns(c) / RESIL_NS_PER_MS));
	const char *argv[] = {"EVALSHA", c->bk_sha, "1",   key,	  c->ident, v[0], v[1],
			      v[2],	 v[3],	    v[4],  v[5],  v[6],	    v[7], v[8],
			      v[9],	 v[10],	    v[11], v[12], v[13]};

	return send_argv(c, 19, argv, NULL);
}

/* Errors that are the connection's, not a script's: the scripts gone
 * (NOSCRIPT: reloaded at the reconnection), a replica, a node loading or
 * cut off, a login refused. */
static bool conn_error(const char *s)
{
	static const char *const words[] = {"NOSCRIPT",	  "READONLY",	 "LOADING",
					    "MASTERDOWN", "CLUSTERDOWN", "NOAUTH",
					    "WRONGPASS",  "NOPERM",	 "TRYAGAIN"};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strncmp(s, words[i], strlen(words[i])) == 0)
			return true;
	return false;
}

/* r (freed), one script's reply for the policy name in slot (UINT32_MAX:
 * none, the round's HOSTS call), parsed (ok) or not: an error reply or
 * garbage is logged once per policy and text, counted, and kept for
 * `resilctl status`; the connection stays. Returns ok. */
static bool parsed_for(struct resild_cluster *c, redisReply *r, bool ok, const char *script,
		       uint32_t slot, const char *name)
{
	char text[160];
	bool said = false;

	if (!ok) {
		if (r->type == REDIS_REPLY_ERROR)
			snprintf(text, sizeof(text), "the %s script failed: %.110s", script,
				 r->str);
		else
			snprintf(text, sizeof(text),
				 "the %s script answered what cannot be read (reply type %d)",
				 script, r->type);
		pthread_mutex_lock(&c->lock);
		c->script_errors++;
		if (slot < c->cap) {
			struct cl_perr *e = &c->perr[slot];

			said = strcmp(e->text, text) == 0;
			snprintf(e->text, sizeof(e->text), "%s", text);
			e->count++;
		} else {
			said = strcmp(c->hosts_err, text) == 0;
			snprintf(c->hosts_err, sizeof(c->hosts_err), "%s", text);
		}
		pthread_mutex_unlock(&c->lock);
		if (!said && name)
			log_error("cluster: policy %s: %s; this policy runs on its last answer, "
				  "then its fallback, until it answers again; the others are "
				  "untouched",
				  name, text);
		else if (!said)
			log_error("cluster: the fleet's hosts: %s; the hosts' count and the check "
				  "for a duplicate host id wait",
				  text);
	}
	freeReplyObject(r);
	return ok;
}

/* A policy whose every script answered: a past error is over. */
static void policy_answered(struct resild_cluster *c, uint32_t slot, const char *name)
{
	bool was;

	pthread_mutex_lock(&c->lock);
	was = c->perr[slot].text[0] != '\0';
	c->perr[slot].text[0] = '\0';
	pthread_mutex_unlock(&c->lock);
	if (was)
		log_notice("cluster: policy %s: its scripts answer again", name);
}

/* The next reply of this round's commands, redirections followed; NULL:
 * the connection failed (logged, disconnected). */
static redisReply *next_reply(struct resild_cluster *c, const char *name, const char *what)
{
	redisReply *r = NULL;
	char w[URL_MAX + 16], e[96];
	struct cl_pend p;

	if (c->rpend >= c->npend) {
		set_error(c, "cluster: no reply pending for %s (%s)", name, what);
		disconnect(c);
		return NULL;
	}
	p = c->pend[c->rpend++];
	if (redisGetReply(p.rc, (void **)&r) != REDIS_OK || !r) {
		set_error(c, "Redis at %s: %s",
			  p.rc == c->rc ? where(c, w, sizeof(w)) : "a cluster node",
			  io_error(p.rc, e, sizeof(e)));
		redisFreeCommand(p.cmd);
		disconnect(c);
		return NULL;
	}
	for (int hop = 0; r && hop < REDIRECTS_MAX && r->type == REDIS_REPLY_ERROR &&
			  (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0);
	     hop++)
		r = follow(c, &p, r);
	redisFreeCommand(p.cmd);
	if (!r) {
		disconnect(c);
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR && conn_error(r->str)) {
		set_error(c, "Redis at %s: the %s script for %s: %s", where(c, w, sizeof(w)), what,
			  name, r->str);
		freeReplyObject(r);
		disconnect(c); /* NOSCRIPT: reconnecting reloads the scripts */
		return NULL;
	}
	/* any other error is this script's for this policy: parsed_for() */
	return r;
}

static bool append_cb(struct resild_cluster *c, const struct xreq *q)
{
	struct resild_cb_cmd cmd[2];
	int n = resild_cb_commands(&q->cb, q->name, c->prefix, c->ident, c->cb_sha, c->cf_sha, cmd);

	for (int k = 0; k < n; k++)
		if (!send_argv(c, cmd[k].argc, cmd[k].argv, NULL))
			return false;
	return true;
}

static bool append_bh(struct resild_cluster *c, const struct xreq *q)
{
	struct resild_cb_cmd cmd;

	resild_cbh_command(&q->bh, q->name, c->prefix, c->ident, c->bh_sha,
			   lease_ns(c) / RESIL_NS_PER_MS, c->fallback_for_ns / RESIL_NS_PER_MS,
			   c->hosts_expected, remember_ns(c) / RESIL_NS_PER_MS, &cmd);
	return send_argv(c, cmd.argc, cmd.argv, NULL);
}

static bool append_ck(struct resild_cluster *c, const struct xreq *q, uint32_t slot)
{
	struct resild_ck_cmd cmd;

	if (!q->ck.on)
		return true;
	resild_ck_command(&q->ck, &c->ck_thr[slot], q->gen, q->name, c->prefix, c->ident, c->ck_sha,
			  &cmd);
	return send_argv(c, cmd.argc, cmd.argv, cmd.argvlen);
}

/* A script's reply r, parsed (ok), is freed; one that was garbage closes
 * the connection with an error naming the script. false: logged, closed. */
/* The reply of append_ck's command into a; false: the connection is
 * gone (a reply this policy's script got wrong leaves a not fresh). */
static bool read_ck(struct resild_cluster *c, const struct xreq *q, uint32_t slot,
		    struct resild_ck_ans *a, bool *bad)
{
	redisReply *r;

	if (!q->ck.on)
		return true;
	if (!(r = next_reply(c, q->name, "keyed")))
		return false;
	*bad |= !parsed_for(c, r,
			    r->type != REDIS_REPLY_ERROR && resild_ck_parse(r, &c->ck_thr[slot], a),
			    "keyed", slot, q->name);
	return true;
}

/* The replies of append_cb's commands into a; false: the connection is
 * gone. */
static bool read_cb(struct resild_cluster *c, const struct xreq *q, uint32_t slot,
		    struct resild_cb_ans *a, bool *bad)
{
	redisReply *r;

	if (q->cb.budget) {
		if (!(r = next_reply(c, q->name, "budget")))
			return false;
		*bad |= !parsed_for(
		    c, r, r->type != REDIS_REPLY_ERROR && resild_cb_parse_budget(r, &q->cb, a),
		    "budget", slot, q->name);
	}
	if (q->cb.conf) {
		if (!(r = next_reply(c, q->name, "conf")))
			return false;
		*bad |=
		    !parsed_for(c, r, r->type != REDIS_REPLY_ERROR && resild_cb_parse_conf(r, a),
				"configuration", slot, q->name);
	}
	return true;
}

/* One round: pipelined script calls (a lease per global limiter, a
 * breaker call per global breaker), one round trip. early: only the early
 * lease calls of ereq (a regular round takes their place: it carries the
 * same demand and applied id). */
static void exchange(struct resild_cluster *c, bool early)
{
	const struct xreq *src = early ? c->ereq : c->req;
	uint32_t n = 0, ok = 0, last = 0;
	bool hello = false;
	int64_t t0;

	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < c->cap; i++) {
		resild_ck_free_req(&c->work[i].ck);
		c->work[i] = src[i];
		n += src[i].active;
		c->ereq[i].active = false;
		if (!early) {
			/* the records go with the request: the thread frees them */
			c->req[i].ck.blob = NULL;
			c->req[i].ck.len = 0;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (!n)
		return;

	t0 = mono_ns();
	/* who runs in the fleet, this run included (cluster_host.c) */
	if (!early) {
		struct cl_hosts_cmd hc;

		cl_hosts_append(c, &hc);
		route_key(c, hc.key);
		hello = send_argv(c, 7, hc.argv, NULL);
	}
	for (uint32_t i = 0; i < c->cap; i++) {
		struct xreq *q = &c->work[i];

		if (!q->active)
			continue;
		route(c, q);
		if (early) {
			q->breaker = false;
			q->cb.budget = q->cb.conf = false;
			q->bh.on = false;
		}
		if ((q->limit && !append_lease(c, q)) || (q->breaker && !append_breaker(c, q)) ||
		    !append_cb(c, q) || (q->bh.on && !append_bh(c, q)) || !append_ck(c, q, i))
			break;
		last = i + 1;
	}
	if (hello) {
		redisReply *r = next_reply(c, "the fleet's hosts", "hosts");

		if (!r)
			return;
		parsed_for(c, r, r->type != REDIS_REPLY_ERROR && cl_hosts_parse(c, r), "hosts",
			   UINT32_MAX, NULL);
	}
	/* Every reply is read, in order, whatever the one before it said: a
	 * script that fails or answers garbage for one policy leaves that
	 * part of that policy's answer not fresh (it runs on what it has,
	 * then its fallback), logged and counted, and touches no other
	 * policy; only a connection that fails ends the round. */
	for (uint32_t i = 0; i < last; i++) {
		struct xreq *q = &c->work[i];
		struct xans a = {.gen = q->gen};
		bool bad = false;
		redisReply *r;

		if (!q->active)
			continue;
		if (q->limit) {
			if (!(r = next_reply(c, q->name, "lease")))
				return;
			if (parsed_for(c, r, r->type != REDIS_REPLY_ERROR && parse_answer(r, &a),
				       "lease", i, q->name)) {
				a.fresh = !q->ack; /* an acknowledgement grants nothing */
				a.expiry_ns = t0 + lease_ns(c);
				a.sent_ns = t0;
				a.base = q->base;
			} else {
				bad = true;
			}
		}
		if (q->breaker) {
			if (!(r = next_reply(c, q->name, "breaker")))
				return;
			/* parse_breaker marks the answer fresh only when it is whole */
			if (parsed_for(c, r, r->type != REDIS_REPLY_ERROR && parse_breaker(r, &a),
				       "breaker", i, q->name))
				a.bk_until_ns = t0 + hold_ns(c);
			else
				bad = true;
		}
		if (!read_cb(c, q, i, &a.cb, &bad) || !read_ck(c, q, i, &a.ck, &bad))
			return;
		if (q->bh.on) {
			if (!(r = next_reply(c, q->name, "bulkhead")))
				return;
			if (parsed_for(c, r,
				       r->type != REDIS_REPLY_ERROR && resild_cbh_parse(r, &a.bh),
				       "bulkhead", i, q->name)) {
				a.bh.fresh = true;
				/* an interval before Redis' end: a call shorter than
				 * an interval is over before the slots go elsewhere */
				a.bh.expiry_ns = t0 + lease_ns(c) - c->interval_ns;
				a.bh.sent_ns = t0;
				a.bh.base = q->bh.base;
			} else {
				bad = true;
			}
		}
		if (!bad)
			policy_answered(c, i, q->name);
		resild_ck_free_req(&q->ck);
		pthread_mutex_lock(&c->lock);
		if (!early) {
			/* the keys' charges of an answer the loop has not taken yet */
			resild_ck_keep_ans(&a.ck, &c->ans[i].ck);
			resild_ck_free_ans(&c->ans[i].ck);
			c->ans[i] = a;
		} else if (a.fresh) {
			/* only the lease: a regular answer not yet taken keeps
			 * its breaker and budget parts */
			struct xans *o = &c->ans[i];

			if (o->gen != a.gen)
				memset(o, 0, sizeof(*o));
			o->gen = a.gen;
			o->fresh = true;
			o->id = a.id;
			o->share = a.share;
			o->expiry_ns = a.expiry_ns;
			o->sent_ns = a.sent_ns;
			o->base = a.base;
			o->hosts = a.hosts;
			o->tell = a.tell;
		}
		c->script_calls += (uint64_t)q->limit + (uint64_t)q->breaker +
				   (uint64_t)q->cb.budget + (uint64_t)q->cb.conf +
				   (uint64_t)q->bh.on + (uint64_t)q->ck.on;
		pthread_mutex_unlock(&c->lock);
		ok += !bad;
	}
	if (ok == n)
		cl_rtt_note(c, mono_ns() - t0);
	if (c->rpend != c->npend) {
		/* replies left unread would answer the next round's commands */
		set_error(c, "cluster: a round could not be sent whole");
		disconnect(c);
	}
	c->npend = c->rpend = 0;
	pthread_mutex_lock(&c->lock);
	c->exchanges++;
	if (ok == n)
		c->last_ok_ns = mono_ns();
	pthread_mutex_unlock(&c->lock);
}

void *cluster_main(void *arg)
{
	struct resild_cluster *c = arg;
	int64_t backoff = c->interval_ns, retry_at = 0;
	bool early;
	sigset_t all;

	/* signals belong to the loop's signalfd */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	c->rnd = (uint64_t)mono_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->stop && !c->kick && !c->kick_early) {
			struct timespec ts;
			int64_t at;

			if (!c->sampling || !c->rc) {
				pthread_cond_wait(&c->cond, &c->lock);
				continue;
			}
			/* a demand sample: wake the loop every interval / SAMPLES
			 * (it may post an early call on what it sees) */
			clock_gettime(CLOCK_MONOTONIC, &ts);
			at = (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec +
			     c->interval_ns / SAMPLES;
			ts.tv_sec = at / RESIL_NS_PER_S;
			ts.tv_nsec = at % RESIL_NS_PER_S;
			if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT &&
			    !c->kick && !c->kick_early && !c->stop)
				(void)eventfd_write(c->efd, 1);
		}
		if (c->stop)
			break;
		early = !c->kick;
		c->kick = c->kick_early = false;
		pthread_mutex_unlock(&c->lock);

		if (!c->rc && mono_ns() >= retry_at) {
			if (connect_redis(c)) {
				backoff = c->interval_ns;
			} else {
				/* full jitter over [backoff/2, backoff] */
				retry_at = mono_ns() + backoff / 2 +
					   (int64_t)(rnd_next(c) % (uint64_t)(backoff / 2 + 1));
				backoff =
				    resil_min64(backoff * 2, c->sentinel ? SENTINEL_BACKOFF_MAX_NS
									 : BACKOFF_MAX_NS);
			}
		}
		if (c->rc && c->sentinel && mono_ns() >= c->sentinel_at) {
			c->sentinel_at = mono_ns() + SENTINEL_RECHECK_NS;
			sentinel_recheck(c);
			if (!c->rc && connect_redis(c))
				backoff = c->interval_ns;
		}
		if (c->rc) {
			exchange(c, early);
			/* wake the loop: it applies the answers now rather than at
			 * its next tick (a lease, a fleet close, a budget a whole
			 * tick sooner); a full counter or a failed write costs only
			 * that tick */
			if (eventfd_write(c->efd, 1) < 0 && errno != EAGAIN)
				log_warning_errno(-errno, "cluster: cannot wake the loop: %m");
		}
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	disconnect(c);
	return NULL;
}

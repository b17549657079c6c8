/* SPDX-License-Identifier: MIT */
/*
 * cluster_keyed.c - policy.scope = global for keyed limiters: one limit
 * per key (a client IP, an API key) whichever host a request lands on.
 *
 * What. Each host runs the full per-key GCRA in its segment (the hot path
 * of a host keyed limiter, plus one relaxed add: shm/limit_global.c).
 * Every cluster interval the daemon collects the keys its clients
 * admitted since the last collect, with their counts, and sends them to
 * Redis in cluster.c's pipelined round (one script call per policy,
 * KEYED_LUA); the same call returns what the other hosts sent since this
 * host's last read, which the loop charges to the keys here: a key's TAT
 * moves by n * T for n admissions elsewhere, past a full bucket too
 * (shm/limit_global.c: what does not fit below a client's heal waits
 * here, per key, as a debt, and is charged again at every tick).
 *
 * Redis. Per policy one stream, "<cluster>:{<policy>}:keyed": one entry
 * per host and exchange, {h = host, d = records}, a record being a key's
 * fingerprint and its count (12 bytes, little-endian). The script trims
 * entries older than keep, adds this host's entry, and returns every entry
 * of the other hosts after the last one this host read (the thread keeps
 * that id per policy). Keys are named by fingerprint: the segment's
 * SipHash key is set from the cluster's name and password
 * (resild_ck_seg_key), so one key has one fingerprint on every host.
 *
 * Bound: the fleet admits at most r x S + b + (H - 1) x (r x D + b) of a
 * key in any span S (D = 2 x interval + one round trip + the loop's wake).
 * The design (the stream, the keys' secret, the bound's proof) is
 * docs/internals/cluster_keyed.md; docs/global.md is the operator's view.
 *
 * Untrusted words. Counts come from a table every client writes: cut to
 * what a GCRA can admit between two collects (resil_limit_global_cap).
 * Records from Redis (another client of it can write the stream): a
 * record that is no fingerprint or has count 0 is skipped and counted,
 * a report whose length is not a multiple of a record is skipped, an id
 * that is not a stream id is garbage; charges saturate.
 *
 * Who writes what. struct resild_ck_slot: the loop. struct resild_ck_thr:
 * the thread. Requests and answers: cluster.c's, under its lock; the
 * records they point to belong to whoever holds the request or answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_keyed.h"
#include "limit.h"
#include "limit_global.h"
#include "metrics.h"
#include "log.h"
#include "policy.h"
#include "resild.h"
#include "seg.h"

#define CK_KEEP_INTERVALS 10
#define CK_KEEP_MIN_MS	  1000

/*
 * KEYS[1] the policy's stream. ARGV: host, the last id this host read (""
 * none), keep (ms), this host's records. Returns {the last id read now,
 * the other hosts' records, one string per report}.
 */
const char resild_ck_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local me, last, keep, d = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]\n"
    "if not keep or keep <= 0 or #d % 12 ~= 0 or\n"
    "   (last ~= '' and not string.match(last, '^%d+%-%d+$')) then\n"
    "  return redis.error_reply('ERR resil keyed: bad arguments')\n"
    "end\n"
    "redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d', now - keep))\n"
    "if #d > 0 then redis.call('XADD', KEYS[1], '*', 'h', me, 'd', d) end\n"
    "local from = '-'\n"
    "if last ~= '' then from = '(' .. last end\n"
    "local r = redis.call('XRANGE', KEYS[1], from, '+')\n"
    "local out = {last}\n"
    "for _, e in ipairs(r) do\n"
    "  out[1] = e[1]\n"
    "  local f = e[2]\n"
    "  if f[1] == 'h' and f[2] ~= me and f[3] == 'd' and f[4] then out[#out + 1] = f[4] end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], keep + 60000)\n"
    "return out\n";

bool resild_ck_wants(const struct resil_rec *rec)
{
	return resil_has(rec, RESIL_C_LIMIT) && rec->conf.scope == RESIL_SCOPE_GLOBAL &&
	       rec->conf.limit.keys && rec->conf.limit.global &&
	       resil_limit_algo(&rec->conf.limit) == RESIL_LIMIT_GCRA;
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

struct buf {
	uint8_t *b;
	size_t len, cap;
	bool oom;
	uint64_t admitted;
};

static void put_rec(void *arg, uint64_t fp, uint32_t n)
{
	struct buf *b = arg;

	if (b->len + RESILD_CK_REC > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64 * RESILD_CK_REC;
		uint8_t *nb = realloc(b->b, cap);

		if (!nb) {
			b->oom = true;
			return;
		}
		b->b = nb;
		b->cap = cap;
	}
	for (int i = 0; i < 8; i++)
		b->b[b->len + (size_t)i] = (uint8_t)(fp >> (8 * i));
	for (int i = 0; i < 4; i++)
		b->b[b->len + 8 + (size_t)i] = (uint8_t)(n >> (8 * i));
	b->len += RESILD_CK_REC;
	b->admitted += n;
}

/* ------------------------------------------------------------ debts */

static uint32_t debt_home(const struct resild_ck_slot *cs, uint64_t fp)
{
	/* fingerprints are SipHash outputs: their low bits are spread */
	return (uint32_t)(fp * 0x9E3779B97F4A7C15ULL >> 32) & (cs->debt_cap - 1);
}

/* Room for one more debt (the table doubled at half full, up to twice
 * limit.keys: a host holds at most that many keys); false: none. */
static bool debt_room(struct resild_ck_slot *cs, const struct resil_limit_conf *lc)
{
	struct resild_ck_debt *old = cs->debt, *n;
	uint32_t ocap = cs->debt_cap, cap, most = 64;

	while (most < 2 * (uint64_t)lc->keys && most < (1u << 30))
		most *= 2;
	if (cs->debt && 2 * (cs->debt_n + 1) <= cs->debt_cap)
		return true;
	cap = ocap ? 2 * ocap : 64;
	if (cap > most)
		return cs->debt && cs->debt_n + 1 < cs->debt_cap;
	n = calloc(cap, sizeof(*n));
	if (!n)
		return cs->debt && cs->debt_n + 1 < cs->debt_cap;
	cs->debt = n;
	cs->debt_cap = cap;
	for (uint32_t i = 0; i < ocap; i++) {
		uint32_t j;

		if (!old[i].fp)
			continue;
		for (j = debt_home(cs, old[i].fp); n[j].fp; j = (j + 1) & (cap - 1))
			;
		n[j] = old[i];
	}
	free(old);
	return true;
}

/* Add ns to fp's debt; false: no room (the debt is dropped). */
static bool debt_add(struct resild_ck_slot *cs, const struct resil_limit_conf *lc, uint64_t fp,
		     int64_t ns)
{
	int64_t most = resil_limit_global_debt_max(lc);
	uint32_t j;

	if (!debt_room(cs, lc))
		return false;
	for (j = debt_home(cs, fp); cs->debt[j].fp && cs->debt[j].fp != fp;
	     j = (j + 1) & (cs->debt_cap - 1))
		;
	if (!cs->debt[j].fp) {
		cs->debt[j].fp = fp;
		cs->debt[j].ns = 0;
		cs->debt_n++;
	}
	cs->debt[j].ns = cs->debt[j].ns > most - ns ? most : cs->debt[j].ns + ns;
	return true;
}

/* Remove entry j, moving back the entries of its cluster that would
 * otherwise be cut off from their home. */
static void debt_del(struct resild_ck_slot *cs, uint32_t j)
{
	uint32_t m = cs->debt_cap - 1, i = j;

	for (;;) {
		uint32_t h;

		i = (i + 1) & m;
		if (!cs->debt[i].fp)
			break;
		h = debt_home(cs, cs->debt[i].fp);
		/* i's home is cyclically in (j, i]: it stays */
		if (j <= i ? (j < h && h <= i) : (j < h || h <= i))
			continue;
		cs->debt[j] = cs->debt[i];
		j = i;
	}
	cs->debt[j].fp = 0;
	cs->debt[j].ns = 0;
	cs->debt_n--;
}

void resild_ck_charge(struct resild_ck_slot *cs, const struct resil_limit_conf *lc, void *st,
		      uint64_t fp, uint32_t n, int64_t now)
{
	int64_t left;

	if (resil_limit_global_charge(lc, st, fp, resil_limit_global_debt(lc, n), now, &left) < 0) {
		cs->dropped++;
		return;
	}
	cs->charged += n;
	if (left > 0 && !debt_add(cs, lc, fp, left))
		cs->dropped++;
}

void resild_ck_recharge(struct resild_ck_slot *cs, const struct resil_limit_conf *lc, void *st,
			int64_t now)
{
	uint64_t owed = 0;

	for (uint32_t j = 0; cs->debt && j < cs->debt_cap;) {
		struct resild_ck_debt *e = &cs->debt[j];
		int64_t left = 0;

		if (!e->fp) {
			j++;
			continue;
		}
		/* a key that found no room keeps nothing to charge */
		if (resil_limit_global_charge(lc, st, e->fp, e->ns, now, &left) < 0)
			left = 0;
		if (left > 0) {
			e->ns = left;
			owed++;
			j++;
			continue;
		}
		/* the entry moved into j, if any, is looked at next */
		debt_del(cs, j);
	}
	cs->owed = owed;
}

void resild_ck_slot_fini(struct resild_ck_slot *cs)
{
	free(cs->debt);
	memset(cs, 0, sizeof(*cs));
}

/* ------------------------------------------------------------ the tick */

void resild_ck_tick(const struct resil_seg *s, const struct resil_rec *rec,
		    struct resild_ck_slot *cs, struct resild_ck_ans *a, struct resild_ck_req *q,
		    int64_t now, int64_t interval_ns, int64_t lease_ns, bool post)
{
	const struct resil_limit_conf *lc = &rec->conf.limit;
	void *st = resil_comp_state(s, rec, RESIL_C_LIMIT);
	struct buf b = {0};
	int64_t keep_ms =
	    resil_max64(interval_ns * CK_KEEP_INTERVALS, 2 * lease_ns) / RESIL_NS_PER_MS;

	resild_ck_recharge(cs, lc, st, now);
	if (a->fresh) {
		for (size_t o = 0; o + RESILD_CK_REC <= a->len; o += RESILD_CK_REC) {
			uint64_t fp = get_le64(a->blob + o);
			uint32_t n = get_le32(a->blob + o + 8);

			if (fp < 2 || fp >> 63 || !n) {
				cs->bad++;
				continue;
			}
			resild_ck_charge(cs, lc, st, fp, n, now);
		}
	}
	resild_ck_free_ans(a);
	if (!post)
		return;
	resil_limit_global_collect(
	    lc, st, resil_limit_global_cap(lc, cs->collect_ns ? now - cs->collect_ns : interval_ns),
	    put_rec, &b);
	cs->collect_ns = now;
	if (b.oom)
		log_warning("cluster: policy %s: out of memory for the keys' report; part of "
			    "this interval's admissions is not sent",
			    rec->name);
	cs->published += b.len / RESILD_CK_REC;
	cs->admitted += b.admitted;
	q->on = true;
	q->blob = b.b;
	q->len = b.len;
	q->keep_ms = keep_ms > CK_KEEP_MIN_MS ? keep_ms : CK_KEEP_MIN_MS;
}

static void append(uint8_t **dst, size_t *dlen, uint8_t **src, size_t *slen)
{
	uint8_t *n;

	if (!*src)
		return;
	if (!*dst) {
		*dst = *src;
		*dlen = *slen;
	} else if ((n = realloc(*dst, *dlen + *slen))) {
		memcpy(n + *dlen, *src, *slen);
		*dst = n;
		*dlen += *slen;
		free(*src);
	} else {
		free(*src); /* out of memory: those admissions go uncharged */
	}
	*src = NULL;
	*slen = 0;
}

void resild_ck_keep_req(struct resild_ck_req *q, struct resild_ck_req *old)
{
	append(&q->blob, &q->len, &old->blob, &old->len);
}

void resild_ck_keep_ans(struct resild_ck_ans *a, struct resild_ck_ans *old)
{
	if (old->fresh)
		append(&a->blob, &a->len, &old->blob, &old->len);
	old->fresh = false;
}

void resild_ck_free_req(struct resild_ck_req *q)
{
	free(q->blob);
	q->blob = NULL;
	q->len = 0;
}

void resild_ck_free_ans(struct resild_ck_ans *a)
{
	free(a->blob);
	a->blob = NULL;
	a->len = 0;
	a->fresh = false;
}

void resild_ck_command(const struct resild_ck_req *q, struct resild_ck_thr *th, uint32_t gen,
		       const char *name, const char *prefix, const char *host, const char *sha,
		       struct resild_ck_cmd *c)
{
	if (th->gen != gen) {
		th->gen = gen;
		th->last[0] = '\0';
	}
	snprintf(c->key, sizeof(c->key), "%s:{%s}:keyed", prefix, name);
	snprintf(c->keep, sizeof(c->keep), "%lld", (long long)q->keep_ms);
	c->argc = 0;
#define ARG(s, l)                                                                                  \
	do {                                                                                       \
		c->argv[c->argc] = (s);                                                            \
		c->argvlen[c->argc++] = (l);                                                       \
	} while (0)
	ARG("EVALSHA", 7);
	ARG(sha, strlen(sha));
	ARG("1", 1);
	ARG(c->key, strlen(c->key));
	ARG(host, strlen(host));
	ARG(th->last, strlen(th->last));
	ARG(c->keep, strlen(c->keep));
	ARG(q->blob ? (const char *)q->blob : "", q->len);
#undef ARG
}

static bool stream_id(const char *s, size_t len)
{
	size_t i = 0, d1 = 0, d2 = 0;

	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++, d1++;
	if (i == len || s[i++] != '-')
		return false;
	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++, d2++;
	return i == len && d1 && d2 && d1 <= 20 && d2 <= 20;
}

bool resild_ck_parse(const struct redisReply *r, struct resild_ck_thr *th, struct resild_ck_ans *a)
{
	const struct redisReply *id;
	size_t total = 0;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
		return false;
	id = r->element[0];
	if (id->type != REDIS_REPLY_STRING || id->len >= sizeof(th->last) ||
	    (id->len && !stream_id(id->str, id->len)))
		return false;
	for (size_t i = 1; i < r->elements; i++) {
		const struct redisReply *e = r->element[i];

		if (e->type == REDIS_REPLY_STRING && e->len % RESILD_CK_REC == 0)
			total += e->len;
	}
	a->blob = NULL;
	a->len = 0;
	if (total && !(a->blob = malloc(total)))
		return false;
	for (size_t i = 1; i < r->elements; i++) {
		const struct redisReply *e = r->element[i];

		/* a report another client of Redis mangled: skipped whole; an
		 * empty one adds nothing (and blob may be NULL then) */
		if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len % RESILD_CK_REC)
			continue;
		memcpy(a->blob + a->len, e->str, e->len);
		a->len += e->len;
	}
	memcpy(th->last, id->str, id->len);
	th->last[id->len] = '\0';
	a->fresh = true;
	return true;
}

static void read_secret(const char *path, char *buf, size_t len)
{
	FILE *f = path ? fopen(path, "re") : NULL;

	buf[0] = '\0';
	if (!f)
		return; /* resild_cluster_init says why */
	if (!fgets(buf, (int)len, f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
}

int resild_ck_seg_key(struct resild *d, bool adopted)
{
	const struct resild_opts *o = &d->opts;
	char pw[256], text[RESIL_NAME_MAX + sizeof(pw) + 32];
	uint64_t k0, k1;
	int n;

	if (!o->cluster_redis)
		return 0;
	read_secret(o->cluster_password_file, pw, sizeof(pw));
	n = snprintf(text, sizeof(text), "resil cluster key\n%s\n%s",
		     o->cluster_name ? o->cluster_name : "resil", pw);
	if (n < 0 || (size_t)n >= sizeof(text))
		n = (int)strnlen(text, sizeof(text));
	k0 = resil_hash64(text, (size_t)n, 0x736f6d6570736575ULL, 0x646f72616e646f6dULL);
	k1 = resil_hash64(text, (size_t)n, 0x6c7967656e657261ULL, 0x7465646279746573ULL);
	memset(pw, 0, sizeof(pw));
	memset(text, 0, sizeof(text));
	if (adopted) {
		if (d->seg.cfg->hash_k0 != k0 || d->seg.cfg->hash_k1 != k1)
			log_warning("cluster: the adopted segments hash keys with another key than "
				    "this cluster's (--cluster-name or the password changed): "
				    "global keyed limits do not match keys across hosts until "
				    "the segments are created afresh (a stop and start)");
		return 0;
	}
	/* a new pair: no name and no key is hashed yet, no client maps it */
	d->seg.cfg->hash_k0 = k0;
	d->seg.cfg->hash_k1 = k1;
	return 0;
}

void resild_ck_metrics_help(struct resil_msink *k)
{
	k->family(k, "resil_cluster_keyed_published_total",
		  "Key counts this host sent (a key per exchange it was admitted in).",
		  RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_keyed_charged_total",
		  "Admissions of other hosts charged to keys here.", RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_keyed_dropped_total",
		  "Charges dropped: no room for their key in the table.", RESIL_MT_COUNTER);
	k->family(k, "resil_cluster_keyed_owing_keys",
		  "Keys whose charges go past a full bucket: the rest is charged as time passes.",
		  RESIL_MT_GAUGE);
}

void resild_ck_metrics(const struct resild_ck_slot *cs, const char *name, struct resil_msink *k)
{
	struct resil_mlabel l = {"policy", name};

	k->sample(k, "resil_cluster_keyed_published_total", "", &l, 1,
		  resil_mv_uint(cs->published));
	k->sample(k, "resil_cluster_keyed_charged_total", "", &l, 1, resil_mv_uint(cs->charged));
	k->sample(k, "resil_cluster_keyed_dropped_total", "", &l, 1, resil_mv_uint(cs->dropped));
	k->sample(k, "resil_cluster_keyed_owing_keys", "", &l, 1, resil_mv_uint(cs->debt_n));
}

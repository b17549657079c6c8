/* SPDX-License-Identifier: MIT */
/*
 * redis.c - resil_bench's Redis on loopback (unix socket), through hiredis.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */
/* Redis on loopback (unix socket), through hiredis */

#ifdef RESIL_HAVE_HIREDIS
/* A consecutive-failures breaker in one hash: record an outcome and read
 * the state in one round trip. ARGV: outcome (1 failure), threshold, wait (us). */
static const char lua_breaker[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local h = redis.call('HMGET', KEYS[1], 's', 'f', 'o')\n"
    "local s = tonumber(h[1]) or 0\n"
    "local f = tonumber(h[2]) or 0\n"
    "local o = tonumber(h[3]) or 0\n"
    "if s == 1 then\n"
    "  if now - o < tonumber(ARGV[3]) then return 1 end\n"
    "  s = 2\n"
    "end\n"
    "if ARGV[1] == '1' then\n"
    "  f = f + 1\n"
    "  if s == 2 or f >= tonumber(ARGV[2]) then s = 1; o = now; f = 0 end\n"
    "else\n"
    "  f = 0; s = 0\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 's', s, 'f', f, 'o', o)\n"
    "return s\n";

static int redis_load(redisContext *c, const char *lua, char *sha, size_t len)
{
	redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", lua);
	int ret = -EPROTO;

	if (rep && rep->type == REDIS_REPLY_STRING) {
		snprintf(sha, len, "%s", rep->str);
		ret = 0;
	} else {
		fprintf(stderr, "resil_bench: SCRIPT LOAD: %s\n",
			rep && rep->str ? rep->str : c->errstr);
	}
	if (rep)
		freeReplyObject(rep);
	return ret;
}

static long long redis_used_memory(redisContext *c)
{
	redisReply *rep = redisCommand(c, "INFO memory");
	long long v = -1;
	char *p;

	if (rep && rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, "used_memory:")))
		v = atoll(p + strlen("used_memory:"));
	if (rep)
		freeReplyObject(rep);
	return v;
}

static bool redis_ok(redisContext *c, redisReply *rep, const char *what)
{
	bool ok = rep && rep->type != REDIS_REPLY_ERROR;

	if (!ok)
		fprintf(stderr, "resil_bench: redis %s: %s\n", what, rep ? rep->str : c->errstr);
	if (rep)
		freeReplyObject(rep);
	return ok;
}

enum { R_PING, R_GCRA, R_SLIDING, R_BREAKER };

/* One decision of kind op on key number k; false on an error. */
static bool redis_decide(redisContext *c, int op, const char *sha_gcra, const char *sha_br,
			 uint32_t k, uint64_t *seqno)
{
	redisReply *rep = NULL;
	struct timespec ts;
	long long now_us;
	int i;

	switch (op) {
	case R_PING:
		return redis_ok(c, redisCommand(c, "PING"), "PING");
	case R_GCRA:
		/* 1 per minute per key, burst 1000000: admits, and keys live 60 s */
		rep = redisCommand(c, "EVALSHA %s 1 rl:%u 60000000 1000000", sha_gcra, k);
		return redis_ok(c, rep, "EVALSHA gcra");
	case R_BREAKER:
		return redis_ok(c, redisCommand(c, "EVALSHA %s 1 br:%u 0 5 500000", sha_br, k),
				"EVALSHA breaker");
	case R_SLIDING:
		/* seed 004's window: 100 per 60 s, one MULTI pipeline per request */
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
		redisAppendCommand(c, "MULTI");
		redisAppendCommand(c, "ZREMRANGEBYSCORE sw:%u 0 %lld", k, now_us - 60000000LL);
		redisAppendCommand(c, "ZADD sw:%u %lld %lld-%llu", k, now_us, now_us,
				   (unsigned long long)++*seqno);
		redisAppendCommand(c, "ZCARD sw:%u", k);
		redisAppendCommand(c, "EXPIRE sw:%u 60", k);
		redisAppendCommand(c, "EXEC");
		for (i = 0; i < 6; i++) {
			if (redisGetReply(c, (void **)&rep) != REDIS_OK)
				return redis_ok(c, NULL, "sliding window");
			if (!redis_ok(c, rep, "sliding window"))
				return false;
		}
		return true;
	}
	return false;
}

static const struct redis_case redis_cases[] = {
    {"ping", R_PING, 1},
    {"gcra_evalsha", R_GCRA, 10000},
    {"sliding_window_pipeline", R_SLIDING, 1000},
    {"breaker_lua", R_BREAKER, 1000},
};

/* Aggregate decisions/s of nproc clients, each on its own connection. */
static double redis_throughput(int op, uint32_t keys, int nproc, const char *sha_g,
			       const char *sha_b)
{
	struct board {
		alignas(128) _Atomic int64_t t0;
		alignas(128) _Atomic uint32_t ready;
		struct {
			alignas(128) uint64_t ops;
		} w[MAX_PROCS];
	} * b;
	double secs = opt.smoke ? 0.1 : 1.0, total = 0;
	pid_t pids[MAX_PROCS];
	int i;

	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return -1;
	for (i = 0; i < nproc; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			redisContext *c = redisConnectUnix(opt.redis);
			uint64_t s = 99 + (uint64_t)i, seqno = (uint64_t)i << 40, ops = 0;
			int64_t t0, end;

			atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
			while ((t0 = atomic_load_explicit(&b->t0, memory_order_acquire)) == 0)
				usleep(100);
			if (!c || c->err)
				_exit(1);
			end = t0 + (int64_t)(secs * NS_PER_S);
			while (mono_ns() < end) {
				if (!redis_decide(c, op, sha_g, sha_b,
						  (uint32_t)(splitmix(&s) % keys), &seqno))
					_exit(1);
				ops++;
			}
			b->w[i].ops = ops;
			redisFree(c);
			_exit(0);
		}
	}
	while (atomic_load_explicit(&b->ready, memory_order_acquire) < (uint32_t)nproc)
		usleep(1000);
	atomic_store_explicit(&b->t0, mono_ns() + 10 * NS_PER_MS, memory_order_release);
	for (i = 0; i < nproc; i++) {
		int st;

		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			total = -1e30;
		total += (double)b->w[i].ops;
	}
	munmap(b, sizeof(*b));
	return total < 0 ? -1 : total / secs;
}

void run_redis(void)
{
	int n = opt.smoke ? 200 : 20000;
	char sha_g[64], sha_b[64];
	redisContext *c;
	uint64_t s = 5, seqno = 0;

	fprintf(stderr, "redis\n");
	c = redisConnectUnix(opt.redis);
	if (!c || c->err) {
		fprintf(stderr, "resil_bench: redis %s: %s\n", opt.redis,
			c ? c->errstr : "cannot allocate");
		if (c)
			redisFree(c);
		return;
	}
	if (redis_load(c, lua_gcra, sha_g, sizeof(sha_g)) < 0 ||
	    redis_load(c, lua_breaker, sha_b, sizeof(sha_b)) < 0)
		goto out;

	for (size_t k = 0; k < ARRAY_LEN(redis_cases); k++) {
		const struct redis_case *rc = &redis_cases[k];
		double *lat;
		long long m0, m1;
		char name[64];
		int i;

		if (!selected("redis", rc->name))
			continue;
		/* memory per key: fill every key once on an empty server */
		redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
		m0 = redis_used_memory(c);
		for (uint32_t key = 0; rc->op != R_PING && key < rc->keys; key++)
			if (!redis_decide(c, rc->op, sha_g, sha_b, key, &seqno))
				goto out;
		m1 = redis_used_memory(c);
		if (rc->op != R_PING && m0 > 0 && m1 > 0)
			emit("redis", rc->name, "bytes_per_key", (double)(m1 - m0) / rc->keys,
			     (double)(m1 - m0) / rc->keys, (double)(m1 - m0) / rc->keys, "B",
			     "one entry per key");

		lat = calloc(n, sizeof(*lat));
		for (int warm = 0; warm < 2 && lat; warm++) {
			pid_t spin = warm ? spinner_start() : -1;

			for (i = 0; i < n; i++) {
				int64_t t = mono_ns();

				if (!redis_decide(c, rc->op, sha_g, sha_b,
						  (uint32_t)(splitmix(&s) % rc->keys), &seqno))
					break;
				lat[i] = (double)(mono_ns() - t);
			}
			spinner_stop(spin);
			if (i == n)
				emit_latency("redis", rc->name, lat, n, warm);
		}
		free(lat);

		for (int np = 1; np <= 4; np *= 4) {
			double v = redis_throughput(rc->op, rc->keys, np, sha_g, sha_b);

			snprintf(name, sizeof(name), "%s.clients%d", rc->name, np);
			if (v > 0) {
				emit("redis", name, "decisions_per_s", v, v, v, "1/s", "");
				fprintf(stderr, "  redis          %-34s %.0f decisions/s\n", name,
					v);
			}
		}
	}
	/* a full window of 100 in seed 004's sorted set */
	if (!opt.smoke && selected("redis", "sliding_window_full")) {
		long long m0, m1;

		redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
		m0 = redis_used_memory(c);
		for (uint32_t key = 0; key < 100; key++)
			for (int j = 0; j < 100; j++)
				if (!redis_decide(c, R_SLIDING, sha_g, sha_b, key, &seqno))
					goto out;
		m1 = redis_used_memory(c);
		if (m0 > 0 && m1 > 0)
			emit("redis", "sliding_window_full", "bytes_per_key", (m1 - m0) / 100.0,
			     (m1 - m0) / 100.0, (m1 - m0) / 100.0, "B", "window of 100 entries");
	}
	redis_ok(c, redisCommand(c, "FLUSHALL"), "FLUSHALL");
out:
	redisFree(c);
}
#else
void run_redis(void)
{
	fprintf(stderr, "resil_bench: built without hiredis: no Redis figures\n");
}
#endif

/* SPDX-License-Identifier: MIT */
/*
 * cluster_bench.c - policy.scope = global measured: accuracy, Redis load,
 * and a per-request Redis limiter side by side (a benchmark, not a test:
 * it asserts nothing, it prints figures).
 *
 *   cluster_bench [--out DIR] [--quick] [--capacity] [--keyed]
 *
 * --quick: shorter phases; --capacity: the lease script's cost only;
 * --keyed: the keyed limiter's script (global per-key limits) only: Redis
 * load per host with 1k and 100k active keys per host, 3 hosts calling it
 * every 100 ms with a report of every key (the worst case: every active
 * key admitted in every interval), script time per call, Redis CPU,
 * bytes per exchange and what the stream holds.
 *
 * One private redis-server (unix socket) and resild daemons as hosts, one
 * limiter of 1,000/s (burst 10 per host) with --cluster-fallback reject.
 * A worker per host paces its demand (read from shared memory, so it can
 * shift) and counts its admissions per 100 ms bucket. The run goes
 * through: steady demand 1200/225/75 per second (80/15/5%), demand
 * shifting between the hosts every 2 s, a fourth host joining at 300/s, a
 * host leaving, Redis killed for 5 s and restarted. Printed:
 *   - per phase, the worst 1 s and 10 s spans of the fleet's admissions
 *     against rate x T + the sum of bursts, and the overshoot over rate x T;
 *   - lease script calls per second per host per policy (the daemons'
 *     resil_cluster_script_calls_total), Redis CPU over the steady phase
 *     (INFO's used_cpu_sys + used_cpu_user) and the workers' decision
 *     latency;
 *   - the same fleet load through a per-request limiter (a Lua GCRA
 *     EVALSHA per decision, as resil_bench's redis.gcra_evalsha): latency
 *     per decision and Redis CPU;
 *   - the lease script's cost in Redis (INFO commandstats) with 10, 100
 *     and 1000 hosts in a policy's hash, and the largest fleet one Redis
 *     core serves at a 100 ms interval (10 calls per host per second);
 *   - DIR/cluster_rate.csv and DIR/cluster_rate.svg: admitted per second
 *     per host over time through the join, the leave and the outage.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "cluster_keyed.h"
#include "limit_global.h"
#include "lua_gcra.h"
#include "cluster_util.h"

#define RATE	  1000
#define BURST	  10
#define HOSTS	  4
#define BUCKET_NS (100 * 1000 * 1000LL)
#define NBUCKETS  1200
#define CONF	  "policy.scope = global; limit.rate = 1000/s; limit.burst = 10"
#define LAT_MAX	  (1 << 16)
/* the lease length of the capacity runs: long, so every simulated host
 * stays in the hash (a real fleet renews every interval) */
#define LEASE_MS 600000

struct shared {
	int64_t t0;
	_Atomic int stop[HOSTS];
	_Atomic int per_s[HOSTS]; /* demand, per second */
	_Atomic uint32_t adm[HOSTS][NBUCKETS];
	_Atomic uint64_t dec_ns[HOSTS]; /* time spent deciding (acquire + release) */
	_Atomic uint64_t decs[HOSTS];
};

static struct shared *sh;
static char cname[64];
static struct test_redis rd;
static const char *outdir = ".";
static struct test_daemon hd[HOSTS];
static pid_t workers[HOSTS];
static bool quick, capacity_only, keyed_only;

static int bucket_now(void)
{
	int64_t b = (test_mono_ns() - sh->t0) / BUCKET_NS;

	return b < 0 ? 0 : b >= NBUCKETS ? NBUCKETS - 1 : (int)b;
}

static redisContext *rconn(void)
{
	return test_redis_conn(&rd);
}

/* INFO's used_cpu_sys + used_cpu_user, seconds; -1 when unreachable */
static double redis_cpu(void)
{
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, "INFO cpu") : NULL;
	double v = -1;
	const char *a, *b;

	if (r && r->type == REDIS_REPLY_STRING && (a = strstr(r->str, "used_cpu_sys:")) &&
	    (b = strstr(r->str, "used_cpu_user:")))
		v = strtod(a + 13, NULL) + strtod(b + 14, NULL);
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return v;
}

/* INFO commandstats: usec_per_call of EVALSHA; -1 when none */
static double evalsha_usec(void)
{
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, "INFO commandstats") : NULL;
	double v = -1;
	const char *a;

	if (r && r->type == REDIS_REPLY_STRING && (a = strstr(r->str, "cmdstat_evalsha:")) &&
	    (a = strstr(a, "usec_per_call=")))
		v = strtod(a + 14, NULL);
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return v;
}

static void redis_cmd(const char *cmd)
{
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, cmd) : NULL;

	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
}

/* A worker of host h: its demand (sh->per_s[h]) paced, admissions per
 * bucket, the time its decisions took. */
static void worker(int h)
{
	resil_policy_t *p;
	resil_t *r;
	int64_t next;

	if (resil_open(&r, hd[h].sock) < 0 || resil_policy(r, "p", &p) < 0)
		_exit(2);
	next = test_mono_ns();
	while (!atomic_load(&sh->stop[h])) {
		int per_s = atomic_load(&sh->per_s[h]);
		int64_t now = test_mono_ns(), t1;
		resil_permit_t pm;
		int b, v;

		if (per_s <= 0 || now < next) {
			int64_t d = per_s <= 0 ? 10000000 : next - now;
			struct timespec ts = {.tv_nsec = d > 999999999 ? 999999999 : d};

			nanosleep(&ts, NULL);
			continue;
		}
		next = (now - next > 50 * 1000 * 1000LL ? now : next) + (int64_t)(1e9 / per_s);
		b = bucket_now();
		v = resil_acquire(p, &pm);
		if (v == 0)
			resil_release(p, &pm, RESIL_SUCCESS);
		t1 = test_mono_ns();
		atomic_fetch_add(&sh->dec_ns[h], (uint64_t)(t1 - now));
		atomic_fetch_add(&sh->decs[h], 1);
		if (v == 0)
			atomic_fetch_add(&sh->adm[h][b], 1);
	}
	resil_close(r);
	_exit(0);
}

static void workers_start(int h, int per_s)
{
	atomic_store(&sh->per_s[h], per_s);
	atomic_store(&sh->stop[h], 0);
	workers[h] = fork();
	if (workers[h] == 0)
		worker(h);
}

static void workers_stop(int h)
{
	if (workers[h] <= 0)
		return;
	atomic_store(&sh->stop[h], 1);
	waitpid(workers[h], NULL, 0);
	workers[h] = 0;
}

static int host_start(int h)
{
	const char *more[] = {"--cluster-fallback", "reject", NULL};
	resil_t *r;
	int v;

	if (test_cluster_host(&hd[h], rd.url, cname, h, more) < 0)
		return -1;
	v = resil_open(&r, hd[h].sock);
	if (v < 0)
		return v;
	v = resil_define(r, "p", CONF);
	resil_close(r);
	return v;
}

static double metric(int h, const char *name)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[h].sock, "metrics", NULL};
	static char out[65536];
	char *at;

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return -1;
	for (at = out; (at = strstr(at, name)); at++)
		if ((at == out || at[-1] == '\n') &&
		    (at[strlen(name)] == ' ' || at[strlen(name)] == '{'))
			return strtod(strchr(at, ' ') + 1, NULL);
	return -1;
}

static void wait_buckets(int n)
{
	int until = bucket_now() + n;

	while (bucket_now() < until)
		test_sleep_ms(20);
}

static uint64_t fleet(int from, int to)
{
	uint64_t n = 0;

	for (int b = from; b < to; b++)
		for (int h = 0; h < HOSTS; h++)
			n += atomic_load(&sh->adm[h][b]);
	return n;
}

/* The worst span of `len` buckets in [from, to), against rate x T. */
static void span_row(const char *phase, int from, int to, int len, int hosts)
{
	uint64_t worst = 0, ideal = (uint64_t)RATE * len / 10;

	for (int a = from; a + len <= to; a++) {
		uint64_t n = fleet(a, a + len);

		if (n > worst)
			worst = n;
	}
	if (to - from < len) {
		printf("| %s | %d s | (phase shorter than the span) | | |\n", phase, len / 10);
		return;
	}
	printf("| %s | %d s | %llu | %llu | %+.2f%% |\n", phase, len / 10,
	       (unsigned long long)worst, (unsigned long long)(ideal + (uint64_t)hosts * BURST),
	       100.0 * ((double)worst - (double)ideal) / (double)ideal);
}

/* admitted per second per host over time: CSV and SVG */
static void write_plot(int end, const int *marks, const char *const *labels, int nmarks)
{
	static const char *const color[HOSTS] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
	char path[PATH_MAX];
	int secs = end / 10;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cluster_rate.csv", outdir);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "second,hostA,hostB,hostC,hostD,fleet\n");
	for (int s = 0; s < secs; s++) {
		uint64_t t = 0;

		fprintf(f, "%d", s);
		for (int h = 0; h < HOSTS; h++) {
			uint64_t n = 0;

			for (int b = s * 10; b < s * 10 + 10; b++)
				n += atomic_load(&sh->adm[h][b]);
			t += n;
			fprintf(f, ",%llu", (unsigned long long)n);
		}
		fprintf(f, ",%llu\n", (unsigned long long)t);
	}
	fclose(f);

	/* per 500 ms, scaled to per second: the curves show the shifts */
	snprintf(path, sizeof(path), "%s/cluster_rate.svg", outdir);
	f = fopen(path, "w");
	if (!f)
		return;
	const int W = 900, H = 420, L = 60, R = 20, T = 30, B = 50;
	const double ymax = 1400, xs = (double)(W - L - R) / end, ys = (H - T - B) / ymax;

	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"font-family=\"sans-serif\" font-size=\"12\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"18\">admitted per second per host (global limit 1,000/s, "
		"burst 10, 500 ms steps; cluster_bench)</text>\n",
		W, H, L);
	for (int y = 0; y <= 1400; y += 200)
		fprintf(f,
			"<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n",
			L, W - R, H - B - y * ys, H - B - y * ys, L - 6, H - B - y * ys + 4, y);
	fprintf(f,
		"<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
		"stroke-dasharray=\"4 3\"/>\n",
		L, W - R, H - B - RATE * ys, H - B - RATE * ys);
	for (int s = 0; s <= end / 10; s += 5)
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d s</text>\n",
			L + s * 10 * xs, H - B + 16, s);
	for (int i = 0; i < nmarks; i++)
		fprintf(f,
			"<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>"
			"<text x=\"%.1f\" y=\"%d\" fill=\"#555\">%s</text>\n",
			L + marks[i] * xs, L + marks[i] * xs, T, H - B, L + marks[i] * xs + 3,
			T + 12 + 14 * (i % 2), labels[i]);
	for (int h = 0; h <= HOSTS; h++) {
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
			h < HOSTS ? color[h] : "#000", h < HOSTS ? "1.5" : "0.8");
		for (int b = 0; b + 5 <= end; b += 5) {
			uint64_t n = 0;

			for (int k = b; k < b + 5; k++)
				n += h < HOSTS ? atomic_load(&sh->adm[h][k]) : fleet(k, k + 1);
			fprintf(f, "%.1f,%.1f ", L + (b + 2.5) * xs, H - B - 2.0 * (double)n * ys);
		}
		fprintf(f, "\"/>\n");
		fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", L + 10 + 80 * h,
			H - 10, h < HOSTS ? color[h] : "#000",
			h == 0	 ? "host A"
			: h == 1 ? "host B"
			: h == 2 ? "host C"
			: h == 3 ? "host D"
				 : "fleet");
	}
	fprintf(f, "</svg>\n");
	fclose(f);
}

/* The same fleet load through a per-request Redis limiter: `per_s`
 * decisions a second for `secs` from `procs` processes, each one EVALSHA
 * of the bench's Lua GCRA (lua_gcra.h). Latency: mean and p99 of every
 * decision. */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void per_request(int per_s, int procs, double secs)
{
	int64_t *lat = mmap(NULL, sizeof(int64_t) * LAT_MAX * procs, PROT_READ | PROT_WRITE,
			    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	_Atomic int *count = mmap(NULL, sizeof(int) * procs, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, "SCRIPT LOAD %s", lua_gcra) : NULL;
	char sha[64] = "";
	double cpu0, cpu1;
	pid_t pids[8];
	uint64_t n = 0, sum = 0;

	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(sha, sizeof(sha), "%s", r->str);
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	if (!*sha || lat == MAP_FAILED || count == MAP_FAILED) {
		printf("per-request limiter: Redis refused the script\n");
		return;
	}
	cpu0 = redis_cpu();
	for (int i = 0; i < procs; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			redisContext *rc = rconn();
			int64_t t0 = test_mono_ns(), next = t0,
				step = (int64_t)(1e9 * procs / per_s);

			while (rc && test_mono_ns() - t0 < (int64_t)(secs * 1e9)) {
				int64_t now = test_mono_ns(), t1;

				if (now < next) {
					struct timespec ts = {.tv_nsec = next - now};

					nanosleep(&ts, NULL);
					continue;
				}
				next += step;
				/* 1,000/s, burst 10: the same limit, one key */
				redisReply *x =
				    redisCommand(rc, "EVALSHA %s 1 bench:gcra 1000 10", sha);

				t1 = test_mono_ns();
				if (x)
					freeReplyObject(x);
				int k = atomic_fetch_add(&count[i], 1);

				if (k < LAT_MAX)
					lat[(size_t)i * LAT_MAX + k] = t1 - now;
			}
			_exit(0);
		}
	}
	for (int i = 0; i < procs; i++)
		waitpid(pids[i], NULL, 0);
	cpu1 = redis_cpu();
	int64_t *all = malloc(sizeof(int64_t) * LAT_MAX * procs);

	for (int i = 0; i < procs && all; i++)
		for (int k = 0; k < atomic_load(&count[i]) && k < LAT_MAX; k++) {
			all[n++] = lat[(size_t)i * LAT_MAX + k];
			sum += (uint64_t)lat[(size_t)i * LAT_MAX + k];
		}
	if (all && n) {
		qsort(all, n, sizeof(*all), cmp_i64);
		printf("| per-request Redis GCRA (EVALSHA per decision) | %llu decisions/s | "
		       "%.0f ns mean, %.0f ns median, %.0f ns p99 | %.1f%% of a core |\n",
		       (unsigned long long)(n / secs), (double)sum / n, (double)all[n / 2],
		       (double)all[n * 99 / 100], 100.0 * (cpu1 - cpu0) / secs);
	}
	free(all);
	munmap(lat, sizeof(int64_t) * LAT_MAX * procs);
	munmap(count, sizeof(int) * procs);
}

/* The lease script with `hosts` hosts in one policy's hash: Redis' own
 * cost per call (commandstats), and the fleet one core serves at 100 ms. */
static double lease_capacity(int hosts)
{
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, "SCRIPT LOAD %s", resild_cluster_lease_lua()) : NULL;
	char sha[64] = "", key[64], host[32], demand[32];
	int calls = quick ? 2000 : 6000;
	double us, wall, cpu0, cpu1;

	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(sha, sizeof(sha), "%s", r->str);
	if (r)
		freeReplyObject(r);
	if (!*sha) {
		if (c)
			redisFree(c);
		return -1;
	}
	snprintf(key, sizeof(key), "cap%d:{p}:lease", hosts);
	/* every host once (their records), then the counted calls in turn,
	 * pipelined by 100 as the daemons of many hosts would send them */
	for (int i = 0; i < hosts; i++) {
		snprintf(host, sizeof(host), "h%d", i);
		r = redisCommand(c, "EVALSHA %s 1 %s %s 10 1000 %d 0", sha, key, host, LEASE_MS);
		if (r)
			freeReplyObject(r);
	}
	redis_cmd("CONFIG RESETSTAT");
	cpu0 = redis_cpu();
	for (int i = 0; i < calls;) {
		int n = 0;

		for (; n < 100 && i < calls; n++, i++) {
			snprintf(host, sizeof(host), "h%d", i % hosts);
			snprintf(demand, sizeof(demand), "%d", 5 + i % 20);
			redisAppendCommand(c, "EVALSHA %s 1 %s %s %s 1000 %d %d", sha, key, host,
					   demand, LEASE_MS, i / hosts);
		}
		while (n--) {
			if (redisGetReply(c, (void **)&r) == REDIS_OK && r)
				freeReplyObject(r);
		}
	}
	cpu1 = redis_cpu();
	wall = evalsha_usec();
	redisFree(c);
	/* Redis' CPU time per call (INFO cpu): what a core spends, whatever
	 * else the machine runs; usec_per_call is the time inside the
	 * command, preemption included */
	us = (cpu1 - cpu0) * 1e6 / calls;
	if (us > 0)
		printf("| %d | %.1f us | %.1f us | %.0f | %s |\n", hosts, us, wall, 1e6 / us,
		       1e6 / us >= 10.0 * hosts ? "yes" : "no");
	return us;
}

/* The keyed script with `keys` active keys per host, 3 hosts, one call per
 * host per 100 ms: Redis' cost, the bytes each exchange moves. */
static void keyed_load(int keys)
{
	redisContext *c = rconn();
	redisReply *r = c ? redisCommand(c, "SCRIPT LOAD %s", resild_ck_lua) : NULL;
	char sha[64] = "", key[64], last[3][48] = {"", "", ""}, host[8];
	int rounds = quick ? 10 : 30, calls = 0;
	size_t len = (size_t)keys * RESILD_CK_REC, in = 0, out = 0;
	uint8_t *blob = malloc(len);
	double cpu0, cpu1, usec;
	long long mem = -1, xlen = -1;
	int64_t t0;

	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(sha, sizeof(sha), "%s", r->str);
	if (r)
		freeReplyObject(r);
	if (!*sha || !blob) {
		if (c)
			redisFree(c);
		free(blob);
		return;
	}
	snprintf(key, sizeof(key), "kl%d:{p}:keyed", keys);
	redis_cmd("CONFIG RESETSTAT");
	cpu0 = redis_cpu();
	t0 = test_mono_ns();
	for (int k = 0; k < rounds; k++) {
		int64_t at = t0 + (int64_t)k * BUCKET_NS;
		struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		for (int h = 0; h < 3; h++) {
			/* host h's keys: fingerprints of its own, counts 1..3 */
			for (int i = 0; i < keys; i++) {
				uint64_t fp = ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL) >> 1 | 2;
				uint32_t n = 1 + (uint32_t)((i + k + h) % 3);

				memcpy(blob + (size_t)i * RESILD_CK_REC, &fp, 8);
				memcpy(blob + (size_t)i * RESILD_CK_REC + 8, &n, 4);
			}
			snprintf(host, sizeof(host), "h%d", h);
			{
				const char *argv[] = {
				    "EVALSHA", sha,	"1",	key,
				    host,      last[h], "1000", (const char *)blob};
				size_t argvlen[] = {7,		 strlen(sha),  1,
						    strlen(key), strlen(host), strlen(last[h]),
						    4,		 len};

				r = redisCommandArgv(c, 8, argv, argvlen);
			}
			if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
				fprintf(stderr, "cluster_bench: the keyed script failed: %s\n",
					r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
				if (r)
					freeReplyObject(r);
				goto done;
			}
			snprintf(last[h], sizeof(last[h]), "%.*s", (int)r->element[0]->len,
				 r->element[0]->str);
			out += len;
			for (size_t e = 1; e < r->elements; e++)
				in += r->element[e]->len;
			freeReplyObject(r);
			calls++;
		}
	}
done:
	cpu1 = redis_cpu();
	usec = evalsha_usec();
	r = redisCommand(c, "MEMORY USAGE %s", key);
	if (r && r->type == REDIS_REPLY_INTEGER)
		mem = r->integer;
	if (r)
		freeReplyObject(r);
	r = redisCommand(c, "XLEN %s", key);
	if (r && r->type == REDIS_REPLY_INTEGER)
		xlen = r->integer;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	free(blob);
	if (!calls)
		return;
	printf("| %d | %.0f us | %.0f us | %.1f%% | %.1f KB | %.1f KB | %lld entries, %.1f MB |\n",
	       keys, usec, (cpu1 - cpu0) * 1e6 / calls, (cpu1 - cpu0) * 100.0 / calls * 30.0,
	       (double)out / calls / 1024.0, (double)in / calls / 1024.0, xlen,
	       (double)mem / 1048576.0);
}

static void count_rec(void *arg, uint64_t fp, uint32_t n)
{
	(void)fp;
	*(uint64_t *)arg += n;
}

/* The daemon's side of the keyed exchange: collecting a table's counts and
 * charging the other hosts' records, per record (the loop thread's cost
 * per interval is that times the records). */
static void keyed_loop_cost(uint32_t keys)
{
	struct resil_limit_conf c;
	char err[128], kv[32];
	struct resil_limit_state *st;
	struct resild_ck_slot ck = {0};
	uint64_t size, sum = 0;
	int64_t now = 1000 * RESIL_NS_PER_S, t0, t1, t2;

	resil_limit_conf_defaults(&c);
	snprintf(kv, sizeof(kv), "%u", 2 * keys);
	if (resil_limit_conf_set(&c, "limit.rate", "100/60s", err, sizeof(err)) < 0 ||
	    resil_limit_conf_set(&c, "limit.burst", "100", err, sizeof(err)) < 0 ||
	    resil_limit_conf_set(&c, "limit.keys", kv, err, sizeof(err)) < 0)
		return;
	c.global = 1;
	size = resil_limit_state_size(&c);
	st = aligned_alloc(128, (size + 127) / 128 * 128);
	if (!st)
		return;
	resil_limit_state_init(st, &c, now);
	/* two other hosts' reports of every key: inserts first, then charges
	 * of keys held */
	t0 = test_mono_ns();
	for (uint32_t i = 0; i < keys; i++)
		resild_ck_charge(&ck, &c, st, ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL) >> 1 | 2,
				 1, now);
	t1 = test_mono_ns();
	for (int h = 0; h < 2; h++)
		for (uint32_t i = 0; i < keys; i++)
			resild_ck_charge(&ck, &c, st,
					 ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL) >> 1 | 2, 1,
					 now);
	t2 = test_mono_ns();
	for (uint64_t i = 0; i < (uint64_t)keys * 4; i++)
		if (i % 3 == 0)
			st_relaxed(&resil_limit_global_counts(&c, st)[i], 1);
	{
		int64_t t3 = test_mono_ns(), t4;
		uint64_t acc = 0;

		sum = resil_limit_global_collect(&c, st, 1000, count_rec, &acc);
		t4 = test_mono_ns();
		printf("| %u | %.0f ns | %.0f ns | %.2f ms (%llu keys) |\n", keys,
		       (double)(t1 - t0) / keys, (double)(t2 - t1) / (2.0 * keys),
		       (double)(t4 - t3) / 1e6, (unsigned long long)sum);
	}
	resild_ck_slot_fini(&ck);
	free(st);
}

static void print_load(void)
{
	double l[3];

	if (getloadavg(l, 3) == 3)
		printf("\nload average at the end: %.2f %.2f %.2f\n", l[0], l[1], l[2]);
}

static void cleanup(void)
{
	for (int h = 0; h < HOSTS; h++) {
		workers_stop(h);
		test_daemon_fini(&hd[h]);
	}
	test_redis_kill(&rd);
}

int main(int argc, char **argv)
{
	int b_steady, b_shift, b_join, b_leave, b_out, b_back, b_end;
	double cpu0, cpu1, calls0[3], calls1[3];
	uint64_t dns = 0, dn = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			outdir = argv[++i];
		else if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--capacity"))
			capacity_only = true;
		else if (!strcmp(argv[i], "--keyed"))
			keyed_only = true;
		else {
			fprintf(stderr, "usage: cluster_bench [--out DIR] [--quick] [--capacity] "
					"[--keyed]\n");
			return 2;
		}
	}
	if (!test_redis_installed()) {
		fprintf(stderr, "cluster_bench: redis-server not installed\n");
		return 77;
	}
	if (test_redis_init(&rd, "clbench") < 0)
		return 1;
	snprintf(cname, sizeof(cname), "cb%d", (int)getpid());
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || test_redis_start(&rd, NULL) < 0) {
		fprintf(stderr, "cluster_bench: redis-server did not start\n");
		return 1;
	}
	if (keyed_only)
		goto keyed;
	if (capacity_only)
		goto capacity;
	for (int h = 0; h < 3; h++)
		if (host_start(h) < 0) {
			fprintf(stderr, "cluster_bench: host %d did not start\n", h);
			cleanup();
			return 1;
		}
	for (int h = 0; h < 3; h++)
		if (!TEST_EVENTUALLY(metric(h, "resil_cluster_lease_seconds") > 0))
			fprintf(stderr, "cluster_bench: host %d holds no lease\n", h);
	sh->t0 = test_mono_ns();
	workers_start(0, 1200);
	workers_start(1, 225);
	workers_start(2, 75);
	wait_buckets(20); /* shares settle */

	/* steady: 10 s (Redis CPU, script calls, decision latency) */
	b_steady = bucket_now();
	cpu0 = redis_cpu();
	for (int h = 0; h < 3; h++)
		calls0[h] = metric(h, "resil_cluster_script_calls_total");
	for (int h = 0; h < 3; h++) {
		atomic_store(&sh->dec_ns[h], 0);
		atomic_store(&sh->decs[h], 0);
	}
	wait_buckets(quick ? 50 : 100);
	cpu1 = redis_cpu();
	for (int h = 0; h < 3; h++) {
		calls1[h] = metric(h, "resil_cluster_script_calls_total");
		dns += atomic_load(&sh->dec_ns[h]);
		dn += atomic_load(&sh->decs[h]);
	}
	double steady_s = (double)(bucket_now() - b_steady) / 10.0;

	/* shifting: the heavy demand moves to another host every 2 s */
	b_shift = bucket_now();
	for (int k = 0; k < (quick ? 3 : 6); k++) {
		static const int d[3][3] = {{75, 1200, 225}, {225, 75, 1200}, {1200, 225, 75}};

		for (int h = 0; h < 3; h++)
			atomic_store(&sh->per_s[h], d[k % 3][h]);
		wait_buckets(20);
	}

	/* a fourth host joins at 300/s */
	b_join = bucket_now();
	host_start(3);
	workers_start(3, 300);
	wait_buckets(quick ? 50 : 80);

	/* B leaves */
	b_leave = bucket_now();
	workers_stop(1);
	test_daemon_stop(&hd[1]);
	wait_buckets(quick ? 40 : 60);

	/* Redis away for 5 s */
	b_out = bucket_now();
	test_redis_kill(&rd);
	wait_buckets(50);
	b_back = bucket_now();
	if (test_redis_start(&rd, NULL) < 0)
		fprintf(stderr, "cluster_bench: redis-server did not restart\n");
	wait_buckets(quick ? 40 : 60);
	b_end = bucket_now();

	printf("cluster_bench: 1,000/s global, burst 10 per host, --cluster-interval 100ms, "
	       "--cluster-fallback reject\n\n");
	printf("| phase | span | worst span (admitted) | bound: rate x T + bursts | overshoot "
	       "over rate x T |\n|---|---|---|---|---|\n");
	span_row("steady 80/15/5%", b_steady - 20, b_shift, 10, 3);
	span_row("steady 80/15/5%", b_steady - 20, b_shift, 100, 3);
	span_row("shifting every 2 s", b_shift, b_join, 10, 3);
	span_row("shifting every 2 s", b_shift, b_join, 100, 3);
	span_row("join, leave", b_join, b_out, 10, 4);
	span_row("join, leave", b_join, b_out, 100, 4);
	span_row("Redis down 5 s and back", b_out, b_end, 10, 3);
	span_row("Redis down 5 s and back", b_out, b_end, 100, 3);
	span_row("whole run", 0, b_end, 10, 4);
	span_row("whole run", 0, b_end, 100, 4);

	printf("\nlease script calls per second per host (one policy, steady %.1f s):", steady_s);
	for (int h = 0; h < 3; h++)
		printf(" %c %.1f", 'A' + h, (calls1[h] - calls0[h]) / steady_s);
	printf(" (target 10)\n\n");
	printf("| fleet load 1,500 decisions/s, 3 hosts | decided | latency per decision | Redis "
	       "CPU |\n|---|---|---|---|\n");
	printf("| resil scope = global (leases) | %.0f decisions/s | %.0f ns mean (acquire + "
	       "release, two clock reads included, in the worker) | %.1f%% of a core |\n",
	       (double)dn / steady_s, dn ? (double)dns / (double)dn : 0.0,
	       100.0 * (cpu1 - cpu0) / steady_s);
	for (int h = 0; h < HOSTS; h++)
		workers_stop(h);
	{
		int marks[] = {b_shift, b_join, b_leave, b_out, b_back};
		const char *labels[] = {"demand shifts", "D joins", "B leaves", "Redis killed",
					"Redis back"};

		write_plot(b_end, marks, labels, 5);
	}
	per_request(1500, 3, quick ? 5.0 : 10.0);
keyed:
	printf("\n| active keys per host | time in the script (usec_per_call) | Redis CPU per "
	       "call | a core's share at 3 hosts x 10 calls/s | sent per exchange | received per "
	       "exchange | the stream |\n|---|---|---|---|---|---|---|\n");
	keyed_load(1000);
	keyed_load(100000);
	printf("\n| active keys (table of 2x) | insert + charge, per record | charge a key held, "
	       "per record | collect the table |\n|---|---|---|---|\n");
	keyed_loop_cost(1000);
	keyed_loop_cost(100000);
	if (keyed_only)
		goto end;
capacity:

	printf("\n| hosts in the policy | Redis CPU per lease call | time in the command "
	       "(usec_per_call) | calls/s per core | one core serves them at 100 ms (10 "
	       "calls/s each) |\n|---|---|---|---|---|\n");
	{
		static const int hs[] = {10, 30, 100, 300, 1000};
		int best = 0;

		for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
			double us = lease_capacity(hs[i]);

			if (us > 0 && 1e6 / us >= 10.0 * hs[i])
				best = hs[i];
		}
		printf("\nlargest fleet measured that one Redis core serves at 100 ms, one global "
		       "policy: %d hosts\n",
		       best);
	}

end:
	print_load();
	cleanup();
	test_redis_fini(&rd, false);
	return 0;
}

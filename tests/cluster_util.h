/* SPDX-License-Identifier: MIT */
/*
 * cluster_util.h - what the cluster tests and bench/cluster_bench share:
 *
 *   - CHECK(cond, fmt, ...): count a failure and say where, go on;
 *   - a private redis-server on a unix socket in a fresh temporary
 *     directory, started (and awaited), killed, restarted by the test;
 *   - a number read from Redis (HGET, GET, ...);
 *   - a resild started as host A, B, ... of a cluster, its metrics read;
 *   - a relay that delays every byte (a Redis far away).
 */
#ifndef RESIL_CLUSTER_UTIL_H
#define RESIL_CLUSTER_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "testutil.h"

/* Failed CHECKs so far: a test exits non-zero when it is not 0. */
extern int test_failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			test_failures++;                                                           \
		}                                                                                  \
	} while (0)

struct test_redis {
	pid_t pid;		  /* 0 when not running */
	char dir[PATH_MAX];	  /* temporary directory: socket, log, the tests' own files */
	char sock[PATH_MAX + 16]; /* dir/redis.sock */
	char url[PATH_MAX + 32];  /* "unix:" sock, for --cluster-redis */
};

/* Is redis-server installed? (A test skips when it is not.) */
bool test_redis_installed(void);
/* Make the directory ($TMPDIR/resil-TAG-XXXXXX) and fill the paths: 0 or
 * -1. Does not start. */
int test_redis_init(struct test_redis *r, const char *tag);
/* Start redis-server on the socket (no TCP port, no persistence, its log
 * in dir/redis.log), with requirepass when password is not NULL, and
 * wait until it answers: 0, or -1 (nothing left running). */
int test_redis_start(struct test_redis *r, const char *password);
/* Does it answer PING (or AUTH password) right now? */
bool test_redis_up(const struct test_redis *r, const char *password);
/* SIGKILL and reap; a no-op when not running. */
void test_redis_kill(struct test_redis *r);
/* Kill, and remove the directory unless keep (a failed test keeps it). */
void test_redis_fini(struct test_redis *r, bool keep);
/* A connection (NULL on error: nothing to free). */
redisContext *test_redis_conn(const struct test_redis *r);
/* "CMD KEY FIELD" (FIELD may be NULL) as a number: -1 when there is no
 * answer or it is not a number. */
long long test_redis_num(const struct test_redis *r, const char *cmd, const char *key,
			 const char *field);

/* One command on the Redis at 127.0.0.1:port, on a connection of its
 * own: the reply (NULL: no answer), the caller frees it. */
redisReply *test_redis_tcp_cmd(int port, const char *fmt, ...);

/* Close each host's client, stop its daemon (a clean exit is CHECKed) and
 * remove its directory, or keep it and name its log when a check failed. */
void test_cluster_hosts_stop(struct test_daemon *hd, resil_t **cl, int n);

/* The value of metric name on d's `resilctl metrics`, the first sample
 * whose labels contain label (NULL: any); NAN when there is none. */
double test_cluster_metric(const struct test_daemon *d, const char *name, const char *label);

/* A password file in r's directory (dir/NAME): its path in path. 0 or -1. */
int test_cluster_pwfile(const struct test_redis *r, const char *name, const char *password,
			char *path, size_t len);

/* A process that accepts on the unix socket listen_path and relays each
 * connection to the unix socket target, every byte delayed by delay_ms
 * in each direction (a round trip of 2 x delay_ms, whatever the
 * pipelining: bytes keep their order and their spacing). Its pid (kill it
 * with SIGKILL and reap it), or -1. */
pid_t test_delay_proxy_start(const char *listen_path, const char *target, int delay_ms);

/* What each of `hosts` hosts may spend of a global budget whose fleet holds
 * fleet (milli), max_milli full: the level no retry passes below (grpc:
 * half the bucket; aws: none) plus the rest over the hosts, at least one
 * retry's worth (daemon/cluster_budget.c, slice_of). */
long long test_budget_slice(bool grpc, long long max_milli, long long fleet, int hosts);

/* Start d (initialised here) as host 'A' + h of cluster cname through url:
 * --state-size 16M --cluster-redis url --cluster-host host<A+h>
 * --cluster-name cname, then the NULL-ended more (may be NULL). 0 or -1. */
int test_cluster_host(struct test_daemon *d, const char *url, const char *cname, int h,
		      const char *const *more);

/* Every one of n hosts' policies p[h] asks for a retry of a failing call
 * about every millisecond until end (test_mono_ns), a refused one starting
 * the next call; allowed[h] counts the retries host h got: their sum. */
int test_cluster_retry_until(resil_policy_t *const *p, int n, int64_t end, int *allowed);

#endif

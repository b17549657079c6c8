/* SPDX-License-Identifier: MIT */
/*
 * int_cluster_tls.c - global policies through a Redis that speaks TLS
 * (--tls-port N, and a plain --port beside it that only one host is
 * pointed at, by mistake), with certificates made here by openssl: a
 * test CA, a server certificate it signs (localhost, 127.0.0.1), and a
 * second CA that signed nothing.
 *
 * Hosts A and B (rediss://127.0.0.1:N, --cluster-tls-ca the test CA)
 * sync a global gRPC budget through it: failures on A reach B, and the
 * bucket in Redis (read with redis-cli --tls) is exactly what A spent.
 * Host C trusts the other CA: the handshake fails, its log and `resilctl
 * status` say the certificate is refused, and its own budget keeps
 * deciding on its own (the fallback: nothing of A's failures reaches it).
 * Host D names a server name the certificate does not carry; then it
 * speaks plain to the TLS port, and TLS to a plain port of the same
 * server: each error says which (its log and `resilctl status`).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "budget.h"
#include "internal.h"
#include "cluster_util.h"

#define HOSTS 4
#define GCONF "policy.scope = global; retry.budget = grpc:100:1; retry.max_attempts = 5"

static char dir[PATH_MAX], url[64], cname[64], ca[PATH_MAX + 16], other[PATH_MAX + 16];
static int port, plain_port; /* the TLS port, and a plain one of the same server */
static pid_t redis_pid;
static struct test_daemon hd[HOSTS];
static resil_t *cl[HOSTS];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4 * PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* redis-cli --tls ARGS: its first line of output as a number (-1: none) */
static long long cli_num(const char *args)
{
	char cmd[4 * PATH_MAX], line[128] = "";
	long long v = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "redis-cli --tls --cacert '%s' -h 127.0.0.1 -p %d %s 2>/dev/null", ca, port, args);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	if (fgets(line, sizeof(line), f) && line[0] >= '0' && line[0] <= '9')
		v = atoll(line);
	pclose(f);
	return v;
}

static bool redis_up(void)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "DBSIZE");
	return cli_num(cmd) >= 0;
}

static long long fleet(void)
{
	char a[128];

	snprintf(a, sizeof(a), "HGET %s:{g}:budget t", cname);
	return cli_num(a);
}

static long long tokens(int h)
{
	const struct resil_rec *rec = test_rec_of(cl[h], "g");
	const struct resil_retry_conf *bc;
	void *st = resil_budget_state_for(&cl[h]->seg, rec, &bc);

	return st ? resil_budget_tokens_milli(st, bc, 0) : -1;
}

static long long want;
static bool synced(void)
{
	/* A and B each spend their half of the fleet's upper half */
	long long each = test_budget_slice(true, 100000, want, 2);

	return tokens(0) == each && tokens(1) == each && fleet() == want;
}

static bool status_has(int h, const char *want_text)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", hd[h].sock, "status", NULL};
	static char out[65536];

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return false;
	return strstr(out, want_text) != NULL;
}

static int host_start(int h, const char *const *more)
{
	if (test_cluster_host(&hd[h], url, cname, h, more) < 0)
		return -1;
	if (resil_open(&cl[h], hd[h].sock) < 0)
		return -1;
	return resil_define(cl[h], "g", GCONF);
}

static int make_certs(void)
{
	const char *key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

	if (sh("cd '%s' && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext && "
	       "openssl req -x509 %s -keyout ca.key -out ca.crt -days 2 -subj /CN=resil-test-ca "
	       ">openssl.log 2>&1 && "
	       "openssl req %s -keyout server.key -out server.csr -subj /CN=localhost "
	       ">>openssl.log 2>&1 && "
	       "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
	       "-out server.crt -days 2 -extfile ext >>openssl.log 2>&1 && "
	       "openssl req -x509 %s -keyout other.key -out other.crt -days 2 "
	       "-subj /CN=resil-other-ca >>openssl.log 2>&1",
	       dir, key, key, key) != 0)
		return -1;
	return 0;
}

static int start_redis(void)
{
	char p[16], pp[16], crt[PATH_MAX + 16], key[PATH_MAX + 16], log[PATH_MAX + 16];

	snprintf(p, sizeof(p), "%d", port);
	snprintf(pp, sizeof(pp), "%d", plain_port);
	snprintf(crt, sizeof(crt), "%s/server.crt", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	snprintf(log, sizeof(log), "%s/redis.log", dir);
	redis_pid = fork();
	if (redis_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		dup2(fd, 1);
		dup2(fd, 2);
		execlp("redis-server", "redis-server", "--port", pp, "--tls-port", p, "--bind",
		       "127.0.0.1", "--tls-cert-file", crt, "--tls-key-file", key,
		       "--tls-ca-cert-file", ca, "--tls-auth-clients", "no", "--save", "",
		       "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	return redis_pid > 0 ? 0 : -1;
}

static void fail_on(int h, int n)
{
	resil_policy_t *p;
	resil_retry_t rt;

	TEST_CHECK(resil_policy(cl[h], "g", &p) == 0);
	for (int i = 0; i < n; i++) {
		resil_retry_begin(p, &rt, 0);
		resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0);
	}
}

static void cleanup(void)
{
	test_cluster_hosts_stop(hd, cl, HOSTS);
	if (redis_pid > 0) {
		kill(redis_pid, SIGKILL);
		waitpid(redis_pid, NULL, 0);
	}
	if (test_failures)
		fprintf(stderr, "--- certificates and redis log in %s\n", dir);
	else
		(void)!sh("rm -rf '%s'", dir);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	const char *const good[] = {"--cluster-tls-ca", ca, NULL};
	const char *const bad[] = {"--cluster-tls-ca", other, NULL};
	const char *const badname[] = {"--cluster-tls-ca", ca, "--cluster-tls-server-name",
				       "redis.example", NULL};

	if (sh("command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null "
	       "2>&1 && command -v openssl >/dev/null 2>&1") != 0) {
		fprintf(stderr, "redis-server, redis-cli or openssl not installed: skipped\n");
		return TEST_SKIP;
	}
	snprintf(dir, sizeof(dir), "%s/resil-cltls-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
	snprintf(other, sizeof(other), "%s/other.crt", dir);
	/* a port in 19000..20999: below the other cluster tests' */
	port = 19000 + (int)(getpid() % 2000);
	plain_port = port + 4000; /* 23000..24999: above the Redis Cluster test's */
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", port);
	snprintf(cname, sizeof(cname), "tl%d", (int)getpid());

	CHECK(make_certs() == 0, "openssl makes the certificates (%s/openssl.log)", dir);
	CHECK(!test_failures && start_redis() == 0 && TEST_EVENTUALLY(redis_up()),
	      "redis-server serves TLS on %d (%s/redis.log)", port, dir);
	if (test_failures) {
		cleanup();
		return 1;
	}
	CHECK(host_start(0, good) == 0, "host A starts");
	CHECK(host_start(1, good) == 0, "host B starts");
	want = 100000;
	CHECK(TEST_EVENTUALLY(synced()), "A and B sync through TLS, the bucket full (%lld)",
	      fleet());
	fail_on(0, 10);
	want = 90000;
	CHECK(TEST_EVENTUALLY(synced()),
	      "10 failures on A seen by B through TLS, the bucket at 90 (%lld; A %lld, B %lld)",
	      fleet(), tokens(0), tokens(1));

	/* a CA that did not sign the server's certificate */
	CHECK(host_start(2, bad) == 0, "host C starts (the wrong CA is not fatal)");
	CHECK(TEST_EVENTUALLY(test_log_count(&hd[2], "the server's certificate is refused") > 0),
	      "host C logs the refused certificate");
	CHECK(TEST_EVENTUALLY(status_has(2, "NOT CONNECTED") &&
			      status_has(2, "certificate is refused") &&
			      status_has(2, "--cluster-tls-ca")),
	      "resilctl status on C says why");
	/* C has never exchanged and knows no fleet size: its budget holds
	 * the level no retry passes, and runs on its own */
	CHECK(tokens(2) == 50000, "C's budget runs on its own: A's failures never reach it (%lld)",
	      tokens(2));
	fail_on(2, 3);
	CHECK(tokens(2) == 47000, "C's own failures count locally (%lld)", tokens(2));
	CHECK(fleet() == 90000, "and nothing of C's reaches the fleet's bucket (%lld)", fleet());

	/* a server name the certificate does not carry */
	CHECK(host_start(3, badname) == 0, "host D starts");
	CHECK(TEST_EVENTUALLY(test_log_count(&hd[3], "--cluster-tls-server-name") > 0),
	      "host D logs the name mismatch");

	/* the TLS port spoken to in plain: the error says what it may be */
	resil_close(cl[3]);
	cl[3] = NULL;
	test_daemon_fini(&hd[3]);
	{
		char plain[64];

		snprintf(plain, sizeof(plain), "redis://127.0.0.1:%d", port);
		CHECK(test_cluster_host(&hd[3], plain, cname, 3, NULL) == 0,
		      "host D starts in plain");
		CHECK(TEST_EVENTUALLY(test_log_count(&hd[3], "a TLS port? rediss://") > 0),
		      "host D: plain to a TLS port, the hint in the log");
		CHECK(TEST_EVENTUALLY(status_has(3, "NOT CONNECTED") &&
				      status_has(3, "(a TLS port? rediss://")),
		      "host D: plain to a TLS port, the hint in resilctl status");
	}

	/* a TLS handshake a plain port answers: the error says what it may be */
	resil_close(cl[3]);
	cl[3] = NULL;
	test_daemon_fini(&hd[3]);
	{
		char tls[64];

		snprintf(tls, sizeof(tls), "rediss://127.0.0.1:%d", plain_port);
		CHECK(test_cluster_host(&hd[3], tls, cname, 3, good) == 0, "host D starts in TLS");
		CHECK(TEST_EVENTUALLY(test_log_count(&hd[3], "(a plain port? redis://") > 0),
		      "host D: TLS to a plain port, the hint in the log");
		CHECK(TEST_EVENTUALLY(status_has(3, "NOT CONNECTED") &&
				      status_has(3, "(a plain port? redis://")),
		      "host D: TLS to a plain port, the hint in resilctl status");
	}

	/* A and B still in sync */
	fail_on(1, 5);
	want = 85000;
	CHECK(TEST_EVENTUALLY(synced()), "5 failures on B seen by A (%lld; A %lld, B %lld)",
	      fleet(), tokens(0), tokens(1));

	cleanup();
	printf("%s\n", test_failures ? "FAILED" : "ok");
	return test_failures ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * cluster_util.c - a private redis-server and resild hosts for the
 * cluster tests and bench/cluster_bench (cluster_util.h).
 */
#include "cluster_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_failures;

bool test_redis_installed(void)
{
	return system("command -v redis-server >/dev/null 2>&1") == 0;
}

int test_redis_init(struct test_redis *r, const char *tag)
{
	const char *tmp = getenv("TMPDIR");

	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "%s/resil-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
	if (!mkdtemp(r->dir))
		return -1;
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
	snprintf(r->url, sizeof(r->url), "unix:%s", r->sock);
	return 0;
}

redisContext *test_redis_conn(const struct test_redis *r)
{
	redisContext *c = redisConnectUnix(r->sock);

	if (c && c->err) {
		redisFree(c);
		return NULL;
	}
	return c;
}

bool test_redis_up(const struct test_redis *r, const char *password)
{
	redisContext *c = test_redis_conn(r);
	redisReply *rep = NULL;
	bool ok;

	if (c)
		rep = password ? redisCommand(c, "AUTH %s", password) : redisCommand(c, "PING");
	ok = rep && rep->type != REDIS_REPLY_ERROR;
	if (rep)
		freeReplyObject(rep);
	if (c)
		redisFree(c);
	return ok;
}

int test_redis_start(struct test_redis *r, const char *password)
{
	pid_t pid = fork();

	if (pid == 0) {
		char log[PATH_MAX + 16];
		int fd;

		snprintf(log, sizeof(log), "%s/redis.log", r->dir);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (password)
			execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
			       r->sock, "--save", "", "--appendonly", "no", "--dir", r->dir,
			       "--requirepass", password, (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
			       r->sock, "--save", "", "--appendonly", "no", "--dir", r->dir,
			       (char *)NULL);
		_exit(127);
	}
	if (pid < 0)
		return -1;
	r->pid = pid;
	if (!TEST_EVENTUALLY(test_redis_up(r, password))) {
		fprintf(stderr, "redis-server did not start (log: %s/redis.log)\n", r->dir);
		test_redis_kill(r);
		return -1;
	}
	return 0;
}

void test_redis_kill(struct test_redis *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, NULL, 0);
	}
	r->pid = 0;
}

void test_redis_fini(struct test_redis *r, bool keep)
{
	test_redis_kill(r);
	if (!keep && r->dir[0]) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", r->dir);
	}
}

long long test_redis_num(const struct test_redis *r, const char *cmd, const char *key,
			 const char *field)
{
	redisContext *c = test_redis_conn(r);
	redisReply *rep = NULL;
	long long v = -1;

	if (!c)
		return -1;
	rep = field ? redisCommand(c, "%s %s %s", cmd, key, field)
		    : redisCommand(c, "%s %s", cmd, key);
	if (rep && rep->type == REDIS_REPLY_STRING)
		v = atoll(rep->str);
	else if (rep && rep->type == REDIS_REPLY_INTEGER)
		v = rep->integer;
	if (rep)
		freeReplyObject(rep);
	redisFree(c);
	return v;
}

int test_cluster_host(struct test_daemon *d, const char *url, const char *cname, int h,
		      const char *const *more)
{
	char host[16];
	const char *extra[32] = {"--state-size",   "16M", "--cluster-redis", url,
				 "--cluster-host", host,  "--cluster-name",  cname};
	int n = 8;

	snprintf(host, sizeof(host), "host%c", 'A' + h);
	for (int i = 0; more && more[i] && n < 31; i++)
		extra[n++] = more[i];
	extra[n] = NULL;
	if (test_daemon_init(d) < 0 || test_daemon_start(d, extra) < 0)
		return -1;
	return 0;
}

redisReply *test_redis_tcp_cmd(int port, const char *fmt, ...)
{
	redisContext *c = redisConnect("127.0.0.1", port);
	redisReply *r = NULL;
	va_list ap;

	if (c && !c->err) {
		va_start(ap, fmt);
		r = redisvCommand(c, fmt, ap);
		va_end(ap);
	}
	if (c)
		redisFree(c);
	return r;
}

void test_cluster_hosts_stop(struct test_daemon *hd, resil_t **cl, int n)
{
	for (int h = 0; h < n; h++) {
		if (cl[h])
			resil_close(cl[h]);
		cl[h] = NULL;
		if (hd[h].pid) {
			int st = test_daemon_stop(&hd[h]);

			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "host %c exits cleanly (status %#x)", 'A' + h, st);
		}
		if (test_failures)
			fprintf(stderr, "--- host %c log: %s\n", 'A' + h, hd[h].log);
		else
			test_daemon_fini(&hd[h]);
	}
}

double test_cluster_metric(const struct test_daemon *d, const char *name, const char *label)
{
	const char *argv[] = {RESILCTL_PATH, "--socket", d->sock, "metrics", NULL};
	static char out[1 << 17];
	size_t n = strlen(name);

	if (test_run(argv, NULL, out, sizeof(out)) != 0)
		return NAN;
	for (char *at = out; (at = strstr(at, name)); at++) {
		char *eol = strchr(at, '\n'), *sp;

		if ((at != out && at[-1] != '\n') || (at[n] != ' ' && at[n] != '{'))
			continue;
		if (eol)
			*eol = '\0';
		sp = strrchr(at, ' ');
		if (sp && (!label || strstr(at, label))) {
			double v = strtod(sp + 1, NULL);

			if (eol)
				*eol = '\n';
			return v;
		}
		if (eol)
			*eol = '\n';
	}
	return NAN;
}

int test_cluster_pwfile(const struct test_redis *r, const char *name, const char *password,
			char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/%s", r->dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "%s\n", password);
	return fclose(f) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------- delay proxy */

struct chunk {
	struct chunk *next;
	int64_t due;
	size_t len; /* 0: the source closed */
	char data[];
};

/* One direction of one connection: a reader stamps what arrives, a writer
 * hands it on at its time. */
struct way {
	int src, dst;
	int64_t delay_ns;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct chunk *head, **tail;
};

static void *way_read(void *arg)
{
	struct way *w = arg;
	char buf[65536];

	for (;;) {
		ssize_t n = read(w->src, buf, sizeof(buf));
		struct chunk *c;

		if (n < 0 && errno == EINTR)
			continue;
		c = malloc(sizeof(*c) + (n > 0 ? (size_t)n : 0));
		if (!c)
			_exit(5);
		c->next = NULL;
		c->due = test_mono_ns() + w->delay_ns;
		c->len = n > 0 ? (size_t)n : 0;
		if (n > 0)
			memcpy(c->data, buf, (size_t)n);
		pthread_mutex_lock(&w->lock);
		*w->tail = c;
		w->tail = &c->next;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		if (n <= 0)
			return NULL;
	}
}

static void *way_write(void *arg)
{
	struct way *w = arg;

	for (;;) {
		struct chunk *c;
		int64_t now;

		pthread_mutex_lock(&w->lock);
		while (!w->head)
			pthread_cond_wait(&w->cond, &w->lock);
		c = w->head;
		w->head = c->next;
		if (!w->head)
			w->tail = &w->head;
		pthread_mutex_unlock(&w->lock);
		now = test_mono_ns();
		if (c->due > now) {
			struct timespec ts = {.tv_sec = (c->due - now) / 1000000000,
					      .tv_nsec = (c->due - now) % 1000000000};

			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		if (!c->len) {
			shutdown(w->dst, SHUT_WR);
			free(c);
			return NULL;
		}
		for (size_t off = 0; off < c->len;) {
			ssize_t k = write(w->dst, c->data + off, c->len - off);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				shutdown(w->src, SHUT_RDWR);
				free(c);
				return NULL;
			}
			off += (size_t)k;
		}
		free(c);
	}
}

static void way_start(int src, int dst, int64_t delay_ns)
{
	struct way *w = calloc(1, sizeof(*w));
	pthread_t t;

	if (!w)
		_exit(5);
	w->src = src;
	w->dst = dst;
	w->delay_ns = delay_ns;
	w->tail = &w->head;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	if (pthread_create(&t, NULL, way_read, w) != 0)
		_exit(5);
	pthread_detach(t);
	if (pthread_create(&t, NULL, way_write, w) != 0)
		_exit(5);
	pthread_detach(t);
}

static int unix_sock(const char *path, bool listen_on)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(a.sun_path))
		goto fail;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if (listen_on ? bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0
		      : connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto fail;
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

pid_t test_delay_proxy_start(const char *listen_path, const char *target, int delay_ms)
{
	int lfd;
	pid_t pid;

	unlink(listen_path);
	lfd = unix_sock(listen_path, true);
	if (lfd < 0)
		return -1;
	pid = fork();
	if (pid != 0) {
		close(lfd);
		return pid;
	}
	for (;;) {
		int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b;

		if (a < 0) {
			if (errno == EINTR)
				continue;
			_exit(4);
		}
		b = unix_sock(target, false);
		if (b < 0) {
			close(a);
			continue;
		}
		way_start(a, b, (int64_t)delay_ms * 1000000);
		way_start(b, a, (int64_t)delay_ms * 1000000);
	}
}

long long test_budget_slice(bool grpc, long long max_milli, long long fleet, int hosts)
{
	long long level = grpc ? max_milli / 2 : 0, one = grpc ? 1000 : 14000, part;

	if (fleet <= level || hosts <= 1)
		return fleet;
	part = (fleet - level) / hosts;
	if (part < one)
		part = one;
	return level + part < fleet ? level + part : fleet;
}

int test_cluster_retry_until(resil_policy_t *const *p, int n, int64_t end, int *allowed)
{
	resil_retry_t rt[n];
	int total = 0;

	for (int h = 0; h < n; h++)
		resil_retry_begin(p[h], &rt[h], 0);
	while (test_mono_ns() < end) {
		for (int h = 0; h < n; h++) {
			if (resil_retry_next(&rt[h], RESIL_ERR_TRANSIENT, 0) >= 0)
				allowed[h]++;
			else /* refused: the next call, failing too */
				resil_retry_begin(p[h], &rt[h], 0);
		}
		usleep(1000);
	}
	for (int h = 0; h < n; h++)
		total += allowed[h];
	return total;
}

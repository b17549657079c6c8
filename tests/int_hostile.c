/* SPDX-License-Identifier: MIT */
/*
 * int_hostile.c - a client of the trust domain writes hostile values into
 * every word of the live state segment while resild ticks and serves.
 *
 * Instance A holds one policy of every component kind (breaker with count,
 * time and consecutive windows, GCRA, keyed and sliding limits, counted
 * and waiting bulkheads, a retry budget, both adaptive algorithms, a
 * shedder with a histogram, a process-scope copy). The test maps A's state
 * memfd writable (the descriptor resild hands the fd store, the segment
 * every client maps) and, round after round, writes one class of values
 * (0, all ones, huge, out-of-range enums, offsets pointing outside, claims
 * for rows that do not exist) into a stride of the words of every
 * component block, and one class of header words (geometry, counters,
 * sequence words, client rows, event ring, identity); later rounds write
 * random values at random places. Each round waits for a tick of A to pass
 * over the values and sends control requests (define with a new shape,
 * reset, force-open, force closed, show, a keyed show, list, metrics).
 * Half-way A is SIGKILLed and restarted with the stored descriptors: it
 * adopts the poisoned pair and the rounds go on.
 * Meanwhile worker processes of A decide on every policy, and a second
 * resild (B: own socket, own segments) serves workers of its own.
 *
 * Asserted:
 *   - A never dies: its pid is alive after every round (waitpid), and a
 *     final SIGTERM stops it with exit status 0;
 *   - A never hangs: every control request gets its reply within 1 s
 *     (a poll bound per request), and its tick goes on. The requests are
 *     sent at a raised priority (10 below this process's nice, as root):
 *     the bound is A's, not the time this busy process waits for a CPU
 *     once its reply is in (the most of a late reply under heavy load,
 *     two copies of this test at once). A define
 *     that needs space still in its grace period is answered once the
 *     space is free, up to RESILD_SPACE_WAIT_NS later, by design (only
 *     its own reply waits: int_space_wait); none does here (16,384
 *     records and 256 MiB, each round retires one small block);
 *   - A's workers may get wrong answers, never a crash: each exits 0;
 *   - B is untouched: every decision of its workers admitted, its calls
 *     counter equals what they counted, its repair counter stays 0;
 *   - resil_state_repairs_total of A moves, before and after the restart.
 * RESIL_TEST_SCALE multiplies the random rounds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "policy.h"
#include "resil.pb-c.h"
#include "testutil.h"

/* every control request answered within (a sanitized build runs resild
 * several times slower: its bound scales as its test timeouts do) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BOUND_MS 4000
#else
#define BOUND_MS 1000
#endif
#define NWORKERS_A 3
#define NWORKERS_B 2
#define STRIDE	   8 /* a systematic round writes every STRIDE-th word */

/* A's policies: one of every component kind. */
static const char *const POL[][2] = {
    {"bk_count", "breaker.window = count:10; breaker.wait = 100ms; "
		 "breaker.half_open_calls = 2; breaker.half_open_max_wait = 200ms"},
    {"bk_time", "breaker.window = time:2s; breaker.buckets = 4; breaker.min_calls = 2; "
		"breaker.wait = 100ms; breaker.slow_call = 1ms; breaker.slow_call_rate = 50"},
    {"bk_consec", "breaker.window = consecutive:3; breaker.wait = 100ms; "
		  "breaker.wait_multiplier = 2; breaker.wait_max = 1s"},
    {"gcra", "limit.rate = 1000/s; limit.burst = 10"},
    {"keyed", "limit.rate = 100/s; limit.burst = 5; limit.keys = 16"},
    {"sliding", "limit.rate = 1000/s; limit.algorithm = sliding"},
    {"approx", "limit.rate = 1000/s; limit.algorithm = sliding-approx"},
    {"bh", "bulkhead.max = 4"},
    {"bh_wait", "bulkhead.max = 2; bulkhead.wait = 20ms"},
    {"budget", "breaker.window = count:20; retry.budget = aws:50"},
    {"aimd", "adaptive.algorithm = aimd; adaptive.min = 1; adaptive.max = 8; "
	     "adaptive.initial = 4"},
    {"gradient", "adaptive.algorithm = gradient2"},
    {"shed", "bulkhead.max = 8; shed.k = 2; histogram = on"},
    {"proc", "policy.scope = process; breaker.window = consecutive:3; bulkhead.max = 2"},
};
#define NPOL (sizeof(POL) / sizeof(POL[0]))

/* B's policies: decisions that admit every call of well-behaved workers. */
static const char *const POL_B[][2] = {
    {"b_bk", "breaker.window = count:10; bulkhead.max = 64"},
    {"b_bh", "bulkhead.max = 16; histogram = on; breaker.window = consecutive:3"},
};
#define NPOL_B (sizeof(POL_B) / sizeof(POL_B[0]))

/* What the workers share with the test (MAP_SHARED). */
struct board {
	_Atomic int stop;
	_Atomic uint64_t a_calls[NWORKERS_A];
	_Atomic uint64_t b_calls[NWORKERS_B];
	_Atomic uint64_t b_admitted[NWORKERS_B];
	_Atomic int b_last_reject[NWORKERS_B]; /* policy index << 8 | verdict */
	_Atomic pid_t daemons[2];	       /* A and B, for the guardian */
	char dirs[2][PATH_MAX];
};
static struct board *board;

/* ---- control requests, each bounded ---- */

static int64_t max_ms;		 /* the slowest reply seen */
static char when[160] = "setup"; /* the round, for what a failure prints */
static int nreq;
static int nice0 = INT_MIN; /* this process's nice, before any request */

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

/*
 * One request on a fresh connection, its reply within BOUND_MS of the
 * connect (checked: the test fails naming the request when it is late or
 * missing). Returns the Response (the caller frees it).
 */
static Resil__Response *request(const char *sock, Resil__Request *req, const char *what)
{
	static uint8_t buf[70000];
	static uint64_t id = 1;
	Resil__Response *resp = NULL;
	int64_t t0 = test_mono_ns(), ms;
	size_t n;
	int fd;

	req->id = id++;
	/* raised for the request only (the children forked between keep
	 * ours); without the privilege it stays as it is */
	if (nice0 == INT_MIN) {
		errno = 0;
		nice0 = getpriority(PRIO_PROCESS, 0);
		if (errno)
			nice0 = 0;
	}
	(void)setpriority(PRIO_PROCESS, 0, nice0 - 10);
	fd = ctl_connect(sock);
	if (fd < 0) {
		fprintf(stderr, "%s: connect: %s\n", what, strerror(-fd));
		TEST_CHECK(fd >= 0);
	}
	n = resil__request__pack(req, buf);
	TEST_CHECK(send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = BOUND_MS - (int)((test_mono_ns() - t0) / 1000000);
		ssize_t r;

		if (left < 0 || poll(&p, 1, left) != 1) {
			fprintf(stderr, "%s: no reply within %d ms (%s)\n", what, BOUND_MS, when);
			TEST_CHECK(!"a control request answered within the bound");
		}
		r = recv(fd, buf, sizeof(buf), 0);
		if (r <= 0) {
			fprintf(stderr, "%s: connection closed without a reply (%s)\n", what, when);
			TEST_CHECK(r > 0);
		}
		resp = resil__response__unpack(NULL, (size_t)r, buf);
		TEST_CHECK(resp != NULL);
		if (resp->id == req->id)
			break;
		resil__response__free_unpacked(resp, NULL); /* an event */
	}
	close(fd);
	(void)setpriority(PRIO_PROCESS, 0, nice0);
	ms = (test_mono_ns() - t0) / 1000000;
	if (ms > max_ms)
		max_ms = ms;
	TEST_CHECK(ms <= BOUND_MS);
	nreq++;
	return resp;
}

/* A request whose answer only needs to exist (an error reply is one). */
static int ask(const char *sock, Resil__Request *req, const char *what)
{
	Resil__Response *r = request(sock, req, what);
	int e = r->error ? r->error->errno_value : 0;

	resil__response__free_unpacked(r, NULL);
	return e;
}

static int ask_define(const char *sock, const char *name, const char *conf)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;

	df.name = (char *)name;
	df.config = (char *)conf;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	return ask(sock, &req, "define");
}

static int ask_force(const char *sock, const char *name, Resil__BreakerState target)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;

	f.name = (char *)name;
	f.target = target;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	return ask(sock, &req, "force");
}

static int ask_reset(const char *sock, const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;

	f.name = (char *)name;
	f.reset = true;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	return ask(sock, &req, "reset");
}

static int ask_show(const char *sock, const char *name, const char *key)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Get g = RESIL__GET__INIT;

	g.name = (char *)name;
	if (key) {
		g.key.data = (uint8_t *)key;
		g.key.len = strlen(key);
		g.has_key = true;
	}
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &g;
	return ask(sock, &req, "show");
}

static int ask_list(const char *sock)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;

	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	return ask(sock, &req, "list");
}

/* The metrics' samples into out, one "name{labels} value" a line. */
static void ask_metrics(const char *sock, char *out, size_t len)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Response *r;
	size_t o = 0;

	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	r = request(sock, &req, "metrics");
	TEST_CHECK(r->error == NULL && r->body_case == RESIL__RESPONSE__BODY_METRICS);
	out[0] = '\0';
	for (size_t i = 0; i < r->metrics->n_families; i++) {
		const Resil__MetricFamily *f = r->metrics->families[i];

		for (size_t j = 0; j < f->n_samples && o < len; j++) {
			const Resil__Sample *sm = f->samples[j];

			o += (size_t)snprintf(out + o, len - o, "%s", sm->name);
			for (size_t k = 0; k < sm->n_labels && o < len; k++)
				o +=
				    (size_t)snprintf(out + o, len - o, "%s%s=\"%s\"", k ? "," : "{",
						     sm->labels[k]->name, sm->labels[k]->value);
			if (o < len)
				o += (size_t)snprintf(out + o, len - o, "%s %.*f\n",
						      sm->n_labels ? "}" : "", (int)sm->decimals,
						      sm->value);
		}
	}
	resil__response__free_unpacked(r, NULL);
}

/* The value of a metric line that starts with `line` (name and labels). */
static uint64_t metric(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, line, n) == 0 && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
	return UINT64_MAX;
}

/* Sum of every line of metric `name` whose labels contain `label`. */
static uint64_t metric_sum(const char *text, const char *name, const char *label)
{
	uint64_t sum = 0;
	size_t n = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		const char *e = strchr(p, '\n'), *sp;

		if (strncmp(p, name, n) != 0 || p[n] != '{')
			continue;
		sp = strchr(p, ' ');
		if (!sp || (e && sp > e))
			continue;
		if (memmem(p, (size_t)(sp - p), label, strlen(label)))
			sum += strtoull(sp + 1, NULL, 10);
	}
	return sum;
}

/* ---- resild A under a fd store: the test keeps its descriptors ---- */

struct store {
	int nfd; /* the notify socket */
	int cfg_fd, st_fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static void store_poll(struct store *s)
{
	for (;;) {
		char buf[4096];
		union {
			char b[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
			struct cmsghdr align;
		} cm;
		struct iovec iov = {buf, sizeof(buf) - 1};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.b,
				    .msg_controllen = sizeof(cm.b)};
		ssize_t len = recvmsg(s->nfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		int got = -1;

		if (len < 0)
			return;
		buf[len] = '\0';
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				memcpy(&got, CMSG_DATA(c), sizeof(int));
		if (got >= 0 && strstr(buf, "FDNAME=config") && s->cfg_fd < 0)
			s->cfg_fd = got;
		else if (got >= 0 && strstr(buf, "FDNAME=state") && s->st_fd < 0)
			s->st_fd = got;
		else if (got >= 0)
			close(got);
	}
}

static bool store_full(void *ctx)
{
	struct store *s = ctx;

	store_poll(s);
	return s->cfg_fd >= 0 && s->st_fd >= 0;
}

/* resild with NOTIFY_SOCKET, and the stored descriptors when with_store. */
static int spawn_a(struct test_daemon *d, struct store *s, bool with_store)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		char num[32];

		dup2(logfd, 1);
		dup2(logfd, 2);
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		setenv("NOTIFY_SOCKET", s->path, 1);
		if (with_store) {
			TEST_CHECK(dup2(s->cfg_fd, 100) == 100 && dup2(s->st_fd, 101) == 101);
			TEST_CHECK(dup2(100, 3) == 3 && dup2(101, 4) == 4);
			close(100);
			close(101);
			snprintf(num, sizeof(num), "%d", (int)getpid());
			setenv("LISTEN_PID", num, 1);
			setenv("LISTEN_FDS", "2", 1);
			setenv("LISTEN_FDNAMES", "config:state", 1);
		}
		execl(RESILD_PATH, RESILD_PATH, "--foreground", "--socket", d->sock, "--config",
		      d->confdir, (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
	atomic_store(&board->daemons[0], pid);
	return TEST_EVENTUALLY(test_daemon_answers(d)) ? 0 : -ETIMEDOUT;
}

static void print_log(const struct test_daemon *d)
{
	char buf[4096];
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return;
	fprintf(stderr, "---- %s ----\n", d->log);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	close(fd);
}

static const struct test_daemon *current_b;
static struct resil_state_hdr killed_hdr; /* A's header when it was killed */

/* Is the daemon still running? (Reaps and reports it when it died.) */
static bool alive(struct test_daemon *d, const char *when)
{
	int st;
	pid_t w = waitpid(d->pid, &st, WNOHANG);

	if (w == 0)
		return true;
	if (w == d->pid) {
		atomic_store(&board->daemons[d == current_b], 0);
		d->pid = 0;
		if (WIFSIGNALED(st))
			fprintf(stderr, "resild died of signal %d %s\n", WTERMSIG(st), when);
		else
			fprintf(stderr, "resild exited with %d %s\n", WEXITSTATUS(st), when);
		print_log(d);
	}
	return false;
}

/* ---- workers ---- */

static pid_t kids[NWORKERS_A + NWORKERS_B];
static int nkids;

/* A worker of instance A: decides on every policy until told to stop. A
 * hostile neighbour may make its answers wrong; it must not crash. */
static void worker_a(const char *sock, int i)
{
	resil_policy_t *p[NPOL];
	resil_t *r = NULL;
	uint64_t n = 0;

	TEST_CHECK(resil_open(&r, sock) == 0);
	for (size_t k = 0; k < NPOL; k++)
		TEST_CHECK(resil_policy(r, POL[k][0], &p[k]) == 0);
	while (!atomic_load_explicit(&board->stop, memory_order_relaxed)) {
		for (size_t k = 0; k < NPOL; k++) {
			resil_permit_t pm;
			char key[16];
			int v;

			snprintf(key, sizeof(key), "k%" PRIu64, n % 24);
			v = k == 4 ? resil_acquire_key(p[k], key, strlen(key), &pm)
				   : resil_acquire(p[k], &pm);
			if (v == RESIL_ADMIT)
				resil_release(p[k], &pm,
					      (n + k) % 3 == 0 ? RESIL_FAILURE : RESIL_SUCCESS);
			resil_policy_state(p[k]);
			n++;
		}
		atomic_store_explicit(&board->a_calls[i], n, memory_order_relaxed);
	}
	resil_close(r);
	_exit(0);
}

/* A worker of instance B: every call succeeds, every decision admits. */
static void worker_b(const char *sock, int i)
{
	resil_policy_t *p[NPOL_B];
	resil_t *r = NULL;
	uint64_t n = 0, ok = 0;

	TEST_CHECK(resil_open(&r, sock) == 0);
	for (size_t k = 0; k < NPOL_B; k++)
		TEST_CHECK(resil_policy(r, POL_B[k][0], &p[k]) == 0);
	while (!atomic_load_explicit(&board->stop, memory_order_relaxed)) {
		for (size_t k = 0; k < NPOL_B; k++) {
			resil_permit_t pm;

			int v = resil_acquire(p[k], &pm);

			if (v == RESIL_ADMIT) {
				resil_release(p[k], &pm, RESIL_SUCCESS);
				ok++;
			} else {
				atomic_store(&board->b_last_reject[i], (int)k << 8 | v);
			}
			n++;
		}
		atomic_store_explicit(&board->b_calls[i], n, memory_order_relaxed);
		atomic_store_explicit(&board->b_admitted[i], ok, memory_order_relaxed);
	}
	resil_close(r);
	_exit(0);
}

static pid_t fork_worker(void (*fn)(const char *, int), const char *sock, int i)
{
	pid_t pid = fork();

	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn(sock, i);
	}
	kids[nkids++] = pid;
	return pid;
}

static void kill_kids(void)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
}

/*
 * A failed check leaves at once (_exit): the guardian, a child that reads
 * a pipe only the test holds open, kills both daemons and removes their
 * directories when the test is gone, whichever way it went.
 */
static void guardian(void)
{
	int fds[2];
	pid_t pid;
	char c;

	TEST_CHECK(pipe2(fds, O_CLOEXEC) == 0);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid > 0) {
		close(fds[0]);
		return;
	}
	close(fds[1]);
	while (read(fds[0], &c, 1) < 0 && errno == EINTR)
		;
	for (int i = 0; i < 2; i++) {
		struct test_daemon d = {.pid = 0};
		pid_t dp = atomic_load(&board->daemons[i]);

		if (dp > 0)
			kill(dp, SIGKILL);
		if (board->dirs[i][0]) {
			test_daemon_paths(&d, board->dirs[i]);
			test_daemon_fini(&d);
		}
	}
	_exit(0);
}

/* ---- hostile values ---- */

struct hval {
	const char *what;
	int width; /* 4 or 8 bytes */
	uint64_t v;
};

static struct hval vals[16];
static size_t nvals;

static void vals_init(uint64_t st_size, uint32_t client_cap)
{
	const struct hval v[] = {
	    {"zero", 8, 0},
	    {"all ones", 8, UINT64_MAX},
	    {"huge", 8, 1ULL << 62},
	    {"INT64_MAX", 8, (uint64_t)INT64_MAX},
	    {"INT64_MIN", 8, 1ULL << 63},
	    {"offset outside", 8, st_size * 4},
	    {"enum out of range", 4, 7},
	    {"u32 all ones", 4, UINT32_MAX},
	    {"u32 sign bit", 4, 0x80000000u},
	    {"row that does not exist", 4, client_cap + 5},
	    {"row claim, owner of a free row", 4, client_cap},
	};

	nvals = sizeof(v) / sizeof(v[0]);
	memcpy(vals, v, sizeof(v));
}

static void put(char *base, uint64_t off, int width, uint64_t v)
{
	if (width == 4)
		atomic_store_explicit((_Atomic uint32_t *)(base + off), (uint32_t)v,
				      memory_order_relaxed);
	else
		atomic_store_explicit((_Atomic uint64_t *)(base + off), v, memory_order_relaxed);
}

/* The byte ranges of every component block of rec (fleet block and, for
 * process scope, the copies of the first rows). */
struct range {
	uint64_t off, len;
};

static size_t comp_ranges(const struct resil_rec *rec, struct range *out, size_t max)
{
	size_t n = 0;

	for (int c = 0; c < RESIL_C_MAX && n < max; c++) {
		uint64_t end = rec->state_size;

		if (!(rec->components & (1u << c)))
			continue;
		for (int o = 0; o < RESIL_C_MAX; o++)
			if ((rec->components & (1u << o)) && rec->comp_off[o] > rec->comp_off[c] &&
			    rec->comp_off[o] < end)
				end = rec->comp_off[o];
		out[n].off = rec->state_off + rec->comp_off[c];
		out[n].len = end - rec->comp_off[c];
		n++;
	}
	if (rec->proc_off && n < max) {
		out[n].off = rec->proc_off;
		out[n].len = rec->proc_stride * 4;
		n++;
	}
	return n;
}

/* The header words a client can write, by class. */
static const struct {
	const char *cls;
	size_t off;
	int width;
} HDR[] = {
    {"geometry", offsetof(struct resil_state_hdr, client_cap), 4},
    {"geometry", offsetof(struct resil_state_hdr, event_cap), 4},
    {"geometry", offsetof(struct resil_state_hdr, client_off), 8},
    {"geometry", offsetof(struct resil_state_hdr, event_off), 8},
    {"geometry", offsetof(struct resil_state_hdr, arena_off), 8},
    {"geometry", offsetof(struct resil_state_hdr, arena_size), 8},
    {"geometry", offsetof(struct resil_state_hdr, arena_used), 8},
    {"geometry", offsetof(struct resil_state_hdr, seg_size), 8},
    {"counters", offsetof(struct resil_state_hdr, events_dropped), 8},
    {"counters", offsetof(struct resil_state_hdr, clients_full), 8},
    {"counters", offsetof(struct resil_state_hdr, state_repairs), 8},
    {"seq", offsetof(struct resil_state_hdr, event_head), 8},
    {"seq", offsetof(struct resil_state_hdr, events_read), 8},
    {"seq", offsetof(struct resil_state_hdr, client_hint), 4},
    {"daemon line", offsetof(struct resil_state_hdr, daemon_pid), 4},
    {"daemon line", offsetof(struct resil_state_hdr, define_lock), 4},
    {"daemon line", offsetof(struct resil_state_hdr, daemon_beat_ns), 8},
    {"flags", offsetof(struct resil_state_hdr, flags), 4},
};
#define NHDR (sizeof(HDR) / sizeof(HDR[0]))

/* Client rows: claims for processes that are not there, pid 1, garbage. */
static void hostile_rows(char *st, const struct resil_seg *g, uint32_t round)
{
	uint64_t pid1_start = 0;
	FILE *f = fopen("/proc/1/stat", "re");

	if (f) {
		char buf[1024], *p;

		if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')'))) {
			p += 2;
			for (int field = 3; field < 22 && p; field++)
				p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL;
			if (p)
				pid1_start = strtoull(p, NULL, 10);
		}
		fclose(f);
	}
	for (uint32_t i = g->geo.client_cap / 2; i < g->geo.client_cap; i++) {
		char *row = st + g->geo.client_off + (uint64_t)i * RESIL_CLIENT_SIZE;
		uint64_t owner;

		switch ((round + i) % 5) {
		case 0: /* pid 1 with its real start time */
			owner = 1ULL << 32 | (pid1_start & 0xffffffff);
			put(row, offsetof(struct resil_client_row, start_time), 8, pid1_start);
			break;
		case 1: /* a pid that does not exist */
			owner = (uint64_t)(4194000 + i) << 32 | 12345;
			break;
		case 2:
			owner = UINT64_MAX;
			break;
		case 3: /* a live row's flags, garbage */
			owner = (uint64_t)getpid() << 32 | 1;
			put(row, offsetof(struct resil_client_row, flags), 4, UINT32_MAX);
			put(row, offsetof(struct resil_client_row, waiting), 4, UINT32_MAX);
			break;
		default:
			owner = 0;
			put(row, offsetof(struct resil_client_row, flags), 4, RESIL_ROW_DEAD);
			break;
		}
		put(row, offsetof(struct resil_client_row, owner), 8, owner);
	}
}

/* Event ring: entries half written, sequence numbers from other laps. */
static void hostile_events(char *st, const struct resil_seg *g, const struct hval *hv)
{
	struct resil_state_hdr *h = (struct resil_state_hdr *)st;
	uint64_t head = ld_relaxed(&h->event_head);

	for (uint32_t i = 0; i < g->geo.event_cap; i += 3) {
		char *e = st + g->geo.event_off + (uint64_t)i * RESIL_EVENT_SIZE;

		put(e, offsetof(struct resil_event, seq), 8, i % 2 ? hv->v : head + i);
		put(e, offsetof(struct resil_event, type), 4, hv->v);
		put(e, offsetof(struct resil_event, slot), 4, hv->v);
		put(e, offsetof(struct resil_event, a), 4, hv->v);
		put(e, offsetof(struct resil_event, b), 4, hv->v);
	}
	/* a head advanced over entries nobody writes */
	atomic_fetch_add_explicit(&h->event_head, 20, memory_order_relaxed);
}

static uint64_t seed = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

/* Wait for a tick of resild that started after now (its heartbeat). */
static bool ticked(struct resil_state_hdr *h, int64_t after)
{
	int64_t end = test_mono_ns() + 10 * RESIL_NS_PER_S;

	while (test_mono_ns() < end) {
		if ((int64_t)ld_relaxed(&h->daemon_beat_ns) > after)
			return true;
		test_sleep_ms(5);
	}
	return false;
}

/* One round's control requests, all bounded: name rotates through the
 * policies, define changes the shape of one policy each time. */
static void requests(const char *sock, uint32_t round)
{
	const char *name = POL[round % NPOL][0];
	char conf[128];
	static char metrics[1 << 20];

	snprintf(conf, sizeof(conf), "bulkhead.max = %u; breaker.window = count:%u", 2 + round % 7,
		 5 + round % 11);
	ask_define(sock, "reshaped", conf);
	ask_define(sock, POL[(round + 3) % NPOL][0], POL[(round + 3) % NPOL][1]);
	ask_reset(sock, name);
	ask_force(sock, POL[(round + 1) % NPOL][0], RESIL__BREAKER_STATE__BREAKER_FORCED_OPEN);
	ask_force(sock, POL[(round + 2) % NPOL][0], RESIL__BREAKER_STATE__BREAKER_CLOSED);
	ask_show(sock, name, NULL);
	ask_show(sock, "keyed", "k1");
	ask_list(sock);
	ask_metrics(sock, metrics, sizeof(metrics));
}

int main(void)
{
	struct test_daemon a, b;
	struct store s = {.cfg_fd = -1, .st_fd = -1};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	resil_t *ra = NULL, *rb = NULL;
	const struct resil_seg *g;
	static char mtext[1 << 20];
	uint64_t repairs0, repairs1, b_calls0, st_size;
	struct resil_state_hdr *h;
	char *st;
	int one = 1, scale = resil_test_scale();
	uint32_t round = 0, systematic, randomized;

	signal(SIGPIPE, SIG_IGN);
	board =
	    mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(board != MAP_FAILED);

	/* A, under a fd store */
	TEST_CHECK(test_daemon_init(&a) == 0);
	snprintf(s.path, sizeof(s.path), "%.*s/notify", (int)sizeof(s.path) - 8, a.dir);
	strcpy(sa.sun_path, s.path);
	s.nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	TEST_CHECK(s.nfd >= 0);
	TEST_CHECK(bind(s.nfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	setsockopt(s.nfd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	snprintf(board->dirs[0], sizeof(board->dirs[0]), "%s", a.dir);
	guardian();
	TEST_CHECK(spawn_a(&a, &s, false) == 0);
	TEST_CHECK(test_wait_until(store_full, &s, TEST_EVENTUALLY_MS));
	TEST_CHECK(resil_open(&ra, a.sock) == 0);
	for (size_t k = 0; k < NPOL; k++)
		TEST_CHECK(ask_define(a.sock, POL[k][0], POL[k][1]) == 0);

	/* B, another trust domain */
	TEST_CHECK(test_daemon_open(&b, &rb) == 0);
	atomic_store(&board->daemons[1], b.pid);
	current_b = &b;
	snprintf(board->dirs[1], sizeof(board->dirs[1]), "%s", b.dir);
	for (size_t k = 0; k < NPOL_B; k++)
		TEST_CHECK(ask_define(b.sock, POL_B[k][0], POL_B[k][1]) == 0);

	/* the test's own writable mapping of A's state memfd */
	g = &ra->seg;
	st_size = g->st_size;
	st = mmap(NULL, st_size, PROT_READ | PROT_WRITE, MAP_SHARED, s.st_fd, 0);
	TEST_CHECK(st != MAP_FAILED);
	h = (struct resil_state_hdr *)st;
	vals_init(st_size, g->geo.client_cap);

	for (int i = 0; i < NWORKERS_A; i++)
		fork_worker(worker_a, a.sock, i);
	for (int i = 0; i < NWORKERS_B; i++)
		fork_worker(worker_b, b.sock, i);
	atexit(kill_kids);
	/* every worker decides before the first hostile word */
	for (int i = 0; i < NWORKERS_A; i++)
		TEST_CHECK(TEST_EVENTUALLY(atomic_load(&board->a_calls[i]) > 0));
	for (int i = 0; i < NWORKERS_B; i++)
		TEST_CHECK(TEST_EVENTUALLY(atomic_load(&board->b_calls[i]) > 0));

	ask_metrics(b.sock, mtext, sizeof(mtext));
	TEST_CHECK(metric(mtext, "resil_state_repairs_total") == 0);
	ask_metrics(a.sock, mtext, sizeof(mtext));
	repairs0 = metric(mtext, "resil_state_repairs_total");
	TEST_CHECK(repairs0 != UINT64_MAX);

	/*
	 * Systematic rounds: value class x stride phase, every component
	 * block of every policy, one header word, the client rows and the
	 * event ring. Then random rounds. A restart that adopts in between.
	 */
	systematic = (uint32_t)(nvals * STRIDE);
	randomized = 60u * (uint32_t)scale;
	for (round = 0; round < 2 * systematic + randomized; round++) {
		const struct hval *hv = &vals[(round / STRIDE) % nvals];
		int64_t now = test_mono_ns();

		if (round == systematic) {
			/* the restart that adopts the poisoned pair */
			ask_metrics(a.sock, mtext, sizeof(mtext));
			repairs1 = metric(mtext, "resil_state_repairs_total");
			if (repairs1 == UINT64_MAX || repairs1 <= repairs0)
				fprintf(stderr,
					"repairs: %llu before, %llu now (metrics: %zu bytes)\n",
					(unsigned long long)repairs0, (unsigned long long)repairs1,
					strlen(mtext));
			TEST_CHECK(repairs1 != UINT64_MAX && repairs1 > repairs0);
			/* a whole tick after the last hostile word: the kill
			 * hits a daemon that repaired what it repairs */
			TEST_CHECK(ticked(h, test_mono_ns()));
			TEST_CHECK(ticked(h, test_mono_ns()));
			memcpy(&killed_hdr, h, sizeof(killed_hdr));
			atomic_store(&board->daemons[0], 0); /* reaped below */
			test_daemon_kill(&a);
			TEST_CHECK(spawn_a(&a, &s, true) == 0);
			if (!TEST_EVENTUALLY(test_log_count(&a, "adopted the segments") > 0)) {
				char err[256] = "";

				resil_seg_validate(g->cfg, g->cfg_size, st, st_size, err,
						   sizeof(err));
				fprintf(stderr,
					"not adopted: %s (magic %#" PRIx64 " abi %u.%u hdr %u seg "
					"%" PRIu64 " epoch %#" PRIx64 "/%#" PRIx64 ")\n",
					err, h->magic, h->abi_major, h->abi_minor, h->hdr_size,
					h->seg_size, h->epoch, g->cfg->epoch);
				fprintf(stderr,
					"at the kill: magic %#" PRIx64
					" abi %u.%u hdr %u seg %" PRIu64 " epoch %#" PRIx64 "\n",
					killed_hdr.magic, killed_hdr.abi_major,
					killed_hdr.abi_minor, killed_hdr.hdr_size,
					killed_hdr.seg_size, killed_hdr.epoch);
				print_log(&a);
				TEST_CHECK(!"the restarted resild adopts the pair");
			}
			/* the new daemon counts from 0, from its first tick on */
			TEST_CHECK(ticked(h, test_mono_ns()));
			ask_metrics(a.sock, mtext, sizeof(mtext));
			repairs0 = metric(mtext, "resil_state_repairs_total");
			TEST_CHECK(repairs0 != UINT64_MAX);
		}
		for (size_t k = 0; k < NPOL; k++) {
			const struct resil_rec *rec = test_rec_of(ra, POL[k][0]);
			struct range rg[RESIL_C_MAX + 1];
			size_t n = comp_ranges(rec, rg, RESIL_C_MAX + 1);

			for (size_t j = 0; j < n; j++) {
				if (round < 2 * systematic) {
					uint64_t w = (uint64_t)hv->width;

					for (uint64_t o = (round % STRIDE) * w; o + w <= rg[j].len;
					     o += STRIDE * w)
						put(st, rg[j].off + o, hv->width, hv->v);
				} else {
					for (int q = 0; q < 4; q++) {
						uint64_t o = (rnd() % (rg[j].len / 4)) * 4;
						const struct hval *rv = &vals[rnd() % nvals];

						put(st, rg[j].off + o, 4,
						    rnd() % 2 ? rv->v : rnd());
					}
				}
			}
		}
		{
			size_t i = round % NHDR;

			put(st, HDR[i].off, HDR[i].width, round % 2 ? hv->v : rnd());
		}
		if (round % 3 == 0)
			hostile_rows(st, g, round);
		if (round % 4 == 1)
			hostile_events(st, g, hv);
		if (round % 16 == 7) {
			/* identity words: what a restart validates */
			uint64_t magic = h->magic, epoch = h->epoch;

			put(st, offsetof(struct resil_state_hdr, magic), 8, hv->v);
			put(st, offsetof(struct resil_state_hdr, epoch), 8, hv->v);
			TEST_CHECK(ticked(h, now));
			h->magic = magic;
			h->epoch = epoch;
		}

		snprintf(when, sizeof(when), "after round %u (%s, header word %s)", round,
			 round < 2 * systematic ? hv->what : "random", HDR[round % NHDR].cls);
		requests(a.sock, round);
		if (!ticked(h, now) || !alive(&a, when)) {
			fprintf(stderr, "resild A stopped ticking or died %s\n", when);
			TEST_CHECK(!"resild A alive and ticking");
		}
	}

	/* A counted repairs after the restart too, and still serves */
	ask_metrics(a.sock, mtext, sizeof(mtext));
	repairs1 = metric(mtext, "resil_state_repairs_total");
	TEST_CHECK(repairs1 != UINT64_MAX && repairs1 > repairs0);
	TEST_CHECK(alive(&a, "at the end"));

	/* the workers: stopped, each exited 0 (a crash is a signal) */
	atomic_store(&board->stop, 1);
	for (int i = 0; i < nkids; i++) {
		int stt = test_wait_pid(kids[i], TEST_EVENTUALLY_MS);

		if (!(stt >= 0 && WIFEXITED(stt) && WEXITSTATUS(stt) == 0))
			fprintf(stderr, "worker %d (%s): status %#x%s\n", i,
				i < NWORKERS_A ? "A" : "B", stt,
				stt >= 0 && WIFSIGNALED(stt) ? " (killed by a signal)" : "");
		TEST_CHECK(stt >= 0 && WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
		kids[i] = 0;
	}

	/* B untouched: every decision admitted, every one counted, no repair */
	b_calls0 = 0;
	for (int i = 0; i < NWORKERS_B; i++) {
		if (board->b_admitted[i] != board->b_calls[i])
			fprintf(stderr,
				"B worker %d: %" PRIu64 " of %" PRIu64
				" admitted, last rejected: %s (%s)\n",
				i, (uint64_t)board->b_admitted[i], (uint64_t)board->b_calls[i],
				POL_B[board->b_last_reject[i] >> 8][0],
				resil_strverdict(board->b_last_reject[i] & 0xff));
		TEST_CHECK(board->b_admitted[i] == board->b_calls[i]);
		b_calls0 += board->b_calls[i];
	}
	ask_metrics(b.sock, mtext, sizeof(mtext));
	TEST_CHECK(metric(mtext, "resil_state_repairs_total") == 0);
	{
		uint64_t counted = metric_sum(mtext, "resil_calls_total", "policy=\"b_");

		if (counted != b_calls0)
			fprintf(stderr,
				"B counted %" PRIu64 " calls, its workers made %" PRIu64 "\n",
				counted, b_calls0);
		TEST_CHECK(counted == b_calls0);
	}
	TEST_CHECK(alive(&b, "at the end"));

	munmap(st, st_size);
	resil_close(ra);
	resil_close(rb);
	atomic_store(&board->daemons[0], 0); /* reaped by the stops */
	atomic_store(&board->daemons[1], 0);
	TEST_CHECK(test_daemon_stop(&a) == 0);
	TEST_CHECK(test_daemon_stop(&b) == 0);
	printf("int_hostile: ok (%u rounds, %d requests, slowest reply %" PRId64 " ms, %" PRIu64
	       " repairs after the restart, A alive, B untouched: %" PRIu64 " decisions)\n",
	       round, nreq, max_ms, repairs1 - repairs0, b_calls0);
	test_daemon_fini(&a);
	test_daemon_fini(&b);
	close(s.nfd);
	return 0;
}

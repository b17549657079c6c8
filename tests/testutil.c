/* SPDX-License-Identifier: MIT */
/*
 * testutil.c - helpers for every test (see testutil.h).
 *
 * Real-process helpers never wait a fixed time for something to happen:
 * they poll a condition with a 10 s limit, so a slow, shared 2-core machine
 * makes a test slower, never wrong.
 */
#include <dirent.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "resil.pb-c.h"
#include "resil.h"
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "adaptive.h"
#include "bulkhead.h"
#include "limit.h"
#include "stats.h"

#ifndef RESILD_PATH
#define RESILD_PATH "resild"
#endif

void test_daemons_kill(void);

void test_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: check failed: %s (pid %d)\n", file, line, what, (int)getpid());
	fflush(stderr);
	test_daemons_kill();
	test_accounts_remove();
	_exit(1);
}

/* The daemons this process started and has not stopped: a failing check
 * kills them, so a failed test leaves no resild behind. */
#define DAEMONS_MAX 16
static pid_t daemons[DAEMONS_MAX];
static pid_t daemons_owner;

static void daemon_note(pid_t pid, bool on)
{
	if (on && daemons_owner != getpid()) {
		memset(daemons, 0, sizeof(daemons));
		daemons_owner = getpid();
	}
	if (daemons_owner != getpid())
		return;
	for (int i = 0; i < DAEMONS_MAX; i++)
		if (daemons[i] == (on ? 0 : pid)) {
			daemons[i] = on ? pid : 0;
			return;
		}
}

void test_daemons_kill(void)
{
	if (daemons_owner != getpid())
		return;
	for (int i = 0; i < DAEMONS_MAX; i++)
		if (daemons[i] > 0) {
			kill(daemons[i], SIGKILL);
			waitpid(daemons[i], NULL, 0);
			daemons[i] = 0;
		}
}

/* ---- accounts ---- */

#define ACCOUNTS_MAX 16
static struct {
	char name[33];
	bool group;
} accounts[ACCOUNTS_MAX];
static int naccounts;
static pid_t accounts_owner;

static int argc_last(const char *const *argv)
{
	int n = 0;

	while (argv[n + 1])
		n++;
	return n;
}

static int run_quiet(const char *const *argv)
{
	char out[1024];
	int r = test_run(argv, NULL, out, sizeof(out));

	if (r != 0)
		fprintf(stderr, "%s %s: exit %d: %s\n", argv[0], argv[argc_last(argv)], r, out);
	return r;
}

void test_accounts_remove(void)
{
	if (getpid() != accounts_owner)
		return;
	/* users first: a group that is a user's primary group stays */
	for (int pass = 0; pass < 2; pass++)
		for (int i = naccounts - 1; i >= 0; i--) {
			const char *gdel[] = {"/usr/sbin/groupdel", accounts[i].name, NULL};
			const char *udel[] = {"/usr/sbin/userdel", "-f", accounts[i].name, NULL};
			const char *const *del = accounts[i].group ? gdel : udel;
			char out[256];

			if (accounts[i].name[0] && accounts[i].group == (pass == 1)) {
				(void)test_run(del, NULL, out, sizeof(out));
				accounts[i].name[0] = '\0';
			}
		}
	naccounts = 0;
}

static int account_note(const char *name, bool group)
{
	if (naccounts == ACCOUNTS_MAX || strlen(name) > 32)
		return -E2BIG;
	if (!accounts_owner) {
		accounts_owner = getpid();
		atexit(test_accounts_remove);
	}
	snprintf(accounts[naccounts].name, sizeof(accounts[0].name), "%s", name);
	accounts[naccounts++].group = group;
	return 0;
}

int test_group_make(const char *name, gid_t *gid)
{
	const char *del[] = {"/usr/sbin/groupdel", name, NULL};
	const char *add[] = {"/usr/sbin/groupadd", "--system", name, NULL};
	char out[256];
	struct group *g;
	int r;

	if (geteuid() != 0)
		return -EPERM;
	if ((g = getgrnam(name)) != NULL) {
		/* a killed run's, and its users (a group stays while it is a
		 * user's primary one) */
		gid_t old = g->gr_gid;
		struct passwd *pw;

		setpwent();
		while ((pw = getpwent()) != NULL)
			if (pw->pw_gid == old) {
				const char *udel[] = {"/usr/sbin/userdel", "-f", pw->pw_name, NULL};

				(void)test_run(udel, NULL, out, sizeof(out));
			}
		endpwent();
		(void)test_run(del, NULL, out, sizeof(out));
	}
	r = run_quiet(add);
	if (r != 0)
		return r < 0 ? r : -EIO;
	r = account_note(name, true);
	g = getgrnam(name);
	if (r < 0 || !g)
		return r < 0 ? r : -ENOENT;
	*gid = g->gr_gid;
	return 0;
}

int test_user_make(const char *name, gid_t group, uid_t *uid)
{
	const char *del[] = {"/usr/sbin/userdel", "-f", name, NULL};
	char gs[16], out[256];
	const char *add[] = {"/usr/sbin/useradd",
			     "--system",
			     "--no-create-home",
			     "--no-user-group",
			     "--gid",
			     gs,
			     "--shell",
			     "/usr/sbin/nologin",
			     name,
			     NULL};
	struct passwd *pw;
	int r;

	if (geteuid() != 0)
		return -EPERM;
	snprintf(gs, sizeof(gs), "%u", (unsigned)group);
	if (getpwnam(name))
		(void)test_run(del, NULL, out, sizeof(out));
	r = run_quiet(add);
	if (r != 0)
		return r < 0 ? r : -EIO;
	r = account_note(name, false);
	pw = getpwnam(name);
	if (r < 0 || !pw)
		return r < 0 ? r : -ENOENT;
	*uid = pw->pw_uid;
	return 0;
}

void test_become(uid_t uid, gid_t gid)
{
	/* a child of the test ends with it (a failed check leaves no
	 * process of a test account behind) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	TEST_CHECK(setgroups(1, &gid) == 0);
	TEST_CHECK(setresgid(gid, gid, gid) == 0);
	TEST_CHECK(setresuid(uid, uid, uid) == 0);
}

int64_t test_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void test_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool test_wait_until(bool (*cond)(void *ctx), void *ctx, int timeout_ms)
{
	int64_t end = test_mono_ns() + (int64_t)timeout_ms * 1000000LL;

	for (;;) {
		if (cond(ctx))
			return true;
		if (test_mono_ns() > end)
			return false;
		test_sleep_ms(5);
	}
}

int resil_test_scale(void)
{
	const char *s = getenv("RESIL_TEST_SCALE");
	long v;

	if (!s || !*s)
		return 1;
	v = strtol(s, NULL, 10);
	return v >= 1 && v <= 1000 ? (int)v : 1;
}

/* ---- clock ---- */

struct test_clock *test_clock_new(int64_t start_ns)
{
	struct test_clock *c =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (c == MAP_FAILED)
		return NULL;
	atomic_store_explicit(&c->ns, start_ns, memory_order_relaxed);
	return c;
}

void test_clock_free(struct test_clock *c)
{
	if (c)
		munmap(c, 4096);
}

int64_t test_clock_fn(void *ctx)
{
	struct test_clock *c = ctx;

	/* acquire: pairs with the release of test_clock_set/advance, so what a
	 * driver wrote before moving time is seen with the new time */
	return atomic_load_explicit(&c->ns, memory_order_acquire);
}

void test_clock_set(struct test_clock *c, int64_t ns)
{
	atomic_store_explicit(&c->ns, ns, memory_order_release);
}

void test_clock_advance(struct test_clock *c, int64_t ns)
{
	atomic_fetch_add_explicit(&c->ns, ns, memory_order_acq_rel);
}

/* ---- processes ---- */

int test_wait_pid(pid_t pid, int timeout_ms)
{
	int64_t end = test_mono_ns() + (int64_t)timeout_ms * 1000000LL;
	int status;

	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid)
			return status;
		if (w < 0 && errno != EINTR)
			return -errno;
		if (test_mono_ns() > end)
			return -ETIMEDOUT;
		test_sleep_ms(2);
	}
}

static int status_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -EIO;
}

int test_run(const char *const *argv, const char *const *env, char *out, size_t outlen)
{
	int64_t end = test_mono_ns() + 30LL * 1000000000LL;
	size_t used = 0;
	int pfd[2], status;
	pid_t pid;

	if (!argv || !argv[0])
		return -EINVAL;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -errno;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd p = {.fd = pfd[0], .events = POLLIN};
		char sink[512];
		ssize_t n;
		int left = (int)((end - test_mono_ns()) / 1000000);

		if (left <= 0) {
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&p, 1, left) <= 0)
			continue;
		if (out && used + 1 < outlen)
			n = read(pfd[0], out + used, outlen - 1 - used);
		else
			n = read(pfd[0], sink, sizeof(sink));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (out && used + 1 < outlen)
			used += (size_t)n;
	}
	close(pfd[0]);
	if (out && outlen)
		out[used] = 0;
	status = test_wait_pid(pid, 10000);
	if (status < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return status;
	}
	return status_code(status);
}

uid_t test_nobody_uid(void)
{
	struct passwd *pw = getpwnam("nobody");

	return pw ? pw->pw_uid : 65534;
}

gid_t test_nobody_gid(void)
{
	struct group *gr = getgrnam("nogroup");

	if (!gr)
		gr = getgrnam("nobody");
	return gr ? gr->gr_gid : 65534;
}

int test_drop_to_nobody(void)
{
	uid_t u = test_nobody_uid();
	gid_t g = test_nobody_gid();

	if (geteuid() != 0)
		return -EPERM;
	if (setgroups(0, NULL) < 0)
		return -errno;
	if (setresgid(g, g, g) < 0)
		return -errno;
	if (setresuid(u, u, u) < 0)
		return -errno;
	if (getuid() != u || geteuid() != u)
		return -EPERM;
	return 0;
}

/* ---- daemon ---- */

void test_daemon_paths(struct test_daemon *d, const char *dir)
{
	/* dir is a mkdtemp name, far below PATH_MAX: the precision only
	 * bounds what the compiler must assume */
	int n = PATH_MAX - 32;

	snprintf(d->dir, sizeof(d->dir), "%.*s", n, dir);
	snprintf(d->sock, sizeof(d->sock), "%.*s/control.sock", n, dir);
	snprintf(d->confdir, sizeof(d->confdir), "%.*s/conf.d", n, dir);
	snprintf(d->log, sizeof(d->log), "%.*s/resild.log", n, dir);
}

int test_daemon_init(struct test_daemon *d)
{
	char tmpl[] = "/tmp/resil-test-XXXXXX";

	memset(d, 0, sizeof(*d));
	if (!mkdtemp(tmpl))
		return -errno;
	/* 0755: a child dropped to nobody must reach the socket */
	chmod(tmpl, 0755);
	test_daemon_paths(d, tmpl);
	if (mkdir(d->confdir, 0755) < 0)
		return -errno;
	return 0;
}

/* One hello over SOCK_SEQPACKET: any datagram back means it answers. The
 * request is packed by hand (field 1 id = 1, field 10 Hello{1:1, 2:1}) so
 * this helper needs nothing of the library. */
bool test_daemon_answers(const struct test_daemon *d)
{
	static const unsigned char hello[] = {0x08, 0x01, 0x52, 0x04, 0x08, 0x01, 0x10, 0x01};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct pollfd p;
	char buf[4096];
	bool ok = false;
	int fd;

	if (strlen(d->sock) >= sizeof(sa.sun_path))
		return false;
	strcpy(sa.sun_path, d->sock);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello))
		goto out;
	p.fd = fd;
	p.events = POLLIN;
	if (poll(&p, 1, 1000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0)
		ok = true;
out:
	close(fd);
	return ok;
}

int test_daemon_start(struct test_daemon *d, const char *const *extra)
{
	const char *argv[32];
	int n = 0, logfd;
	int64_t end;
	pid_t pid;

	argv[n++] = RESILD_PATH;
	argv[n++] = "--foreground";
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--config-dir";
	argv[n++] = d->confdir;
	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;

	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(logfd);
		return -errno;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		unsetenv("NOTIFY_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		if (d->nofile) {
			struct rlimit rl = {d->nofile, d->nofile};

			if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
				_exit(126);
		}
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(logfd);
	d->pid = pid;
	daemon_note(pid, true);
	end = test_mono_ns() + (int64_t)TEST_EVENTUALLY_MS * 1000000LL;
	for (;;) {
		if (test_daemon_answers(d))
			return 0;
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			d->pid = 0;
			break;
		}
		if (test_mono_ns() > end) {
			test_daemon_kill(d);
			break;
		}
		test_sleep_ms(10);
	}
	/* say why */
	{
		char buf[4096];
		int fd = open(d->log, O_RDONLY | O_CLOEXEC);
		ssize_t r;

		fprintf(stderr, "resild did not start; its log:\n");
		if (fd >= 0) {
			while ((r = read(fd, buf, sizeof(buf))) > 0)
				fwrite(buf, 1, (size_t)r, stderr);
			close(fd);
		}
	}
	return -ECONNREFUSED;
}

int test_daemon_stop(struct test_daemon *d)
{
	int st;

	if (d->pid <= 0)
		return 0;
	kill(d->pid, SIGTERM);
	st = test_wait_pid(d->pid, TEST_EVENTUALLY_MS);
	if (st == -ETIMEDOUT) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	daemon_note(d->pid, false);
	d->pid = 0;
	return st;
}

void test_daemon_kill(struct test_daemon *d)
{
	if (d->pid <= 0)
		return;
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	daemon_note(d->pid, false);
	d->pid = 0;
}

static void rm_tree(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *e;
	char sub[PATH_MAX * 2];

	if (!dir) {
		unlink(path);
		return;
	}
	while ((e = readdir(dir))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (e->d_type == DT_DIR)
			rm_tree(sub);
		else
			unlink(sub);
	}
	closedir(dir);
	rmdir(path);
}

int test_log_count(const struct test_daemon *d, const char *what)
{
	int fd = open(d->log, O_RDONLY | O_CLOEXEC), count = 0;
	size_t wl = strlen(what);
	struct stat sb;
	const char *m, *p, *end;

	if (fd < 0)
		return 0;
	if (fstat(fd, &sb) != 0 || sb.st_size == 0 || wl == 0) {
		close(fd);
		return 0;
	}
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return 0;
	end = m + sb.st_size;
	for (p = m; (p = memmem(p, (size_t)(end - p), what, wl)) != NULL; p += wl)
		count++;
	munmap((void *)m, (size_t)sb.st_size);
	return count;
}

void test_daemon_fini(struct test_daemon *d)
{
	test_daemon_stop(d);
	if (d->dir[0] && strncmp(d->dir, "/tmp/resil-test-", 16) == 0)
		rm_tree(d->dir);
	d->dir[0] = 0;
}

int test_daemon_open(struct test_daemon *d, struct resil **r)
{
	int err = test_daemon_init(d);

	if (err < 0)
		return err;
	err = test_daemon_start(d, NULL);
	if (err < 0) {
		fprintf(stderr, "cannot start resild: %s\n", strerror(-err));
		test_daemon_fini(d);
		return err;
	}
	err = resil_open(r, d->sock);
	if (err < 0) {
		fprintf(stderr, "resil_open: %s: %s\n", strerror(-err), resil_last_error());
		test_daemon_fini(d);
		return err;
	}
	return 0;
}

int test_deny_syscalls(void)
{
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 3, 0),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 2, 0),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

const struct resil_rec *test_rec_of(resil_t *r, const char *name)
{
	const struct resil_rec *rec;
	uint64_t w;

	TEST_CHECK(resil_seg_lookup(&r->seg, name, NULL, &w) == 0);
	rec = resil_seg_rec_of(&r->seg, w);
	TEST_CHECK(rec != NULL);
	return rec;
}

uint32_t test_branch_of(const resil_policy_t *p)
{
	const struct resil_binding *b = atomic_load(&p->b);
	int n = (b->bk_st != NULL) + (b->lim_st != NULL) + (b->bh_st != NULL);

	if (b->steps & RESIL_STEP_GENERAL)
		return 0;
	if (n > 1)
		return 5;
	return b->bk_st ? 4 : b->bh_st ? 1 : b->lim_st ? 2 : 3;
}

struct resil_pool test_pool_of(resil_t *r, const char *name, bool adaptive)
{
	const struct resil_rec *rec = test_rec_of(r, name);

	if (adaptive)
		return resil_adaptive_pool(resil_comp_state(&r->seg, rec, RESIL_C_ADAPTIVE),
					   &rec->conf.adaptive);
	return resil_bulkhead_pool(resil_comp_state(&r->seg, rec, RESIL_C_BULKHEAD));
}

uint32_t test_pool_naming(struct resil_pool p, uint32_t id)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p.n; i++)
		n += atomic_load(&p.slots[(size_t)i << p.shift]) == id;
	return n;
}

uint32_t test_bulkhead_naming(resil_t *r, const char *name, uint32_t id)
{
	return test_pool_naming(test_pool_of(r, name, false), id);
}

uint32_t test_pool_forge(struct resil_pool p, uint32_t id)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p.n; i++) {
		uint32_t exp = 0;

		n += atomic_compare_exchange_strong(&p.slots[(size_t)i << p.shift], &exp, id);
	}
	return n;
}

uint32_t test_forge_as(uid_t uid, gid_t gid, const char *sock, const char *name, uint32_t id)
{
	uint32_t n = 0;
	int fds[2];
	pid_t pid;

	TEST_CHECK(pipe(fds) == 0);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		resil_t *r = NULL;

		close(fds[0]);
		test_become(uid, gid);
		TEST_CHECK(resil_open(&r, sock) == 0);
		n = test_pool_forge(test_pool_of(r, name, false), id);
		printf("uid %u: id %u written into %u free slots of %s\n", (unsigned)getuid(), id,
		       n, name);
		TEST_CHECK(write(fds[1], &n, sizeof(n)) == sizeof(n));
		resil_close(r);
		_exit(0);
	}
	close(fds[1]);
	TEST_CHECK(read(fds[0], &n, sizeof(n)) == sizeof(n));
	close(fds[0]);
	TEST_CHECK(test_wait_pid(pid, 60000) == 0);
	return n;
}

int test_admitted(resil_policy_t *p, int max)
{
	resil_permit_t pm[max + 1];
	int n = 0;

	for (int i = 0; i <= max; i++)
		n += resil_acquire(p, &pm[i]) == RESIL_ADMIT;
	for (int i = 0; i <= max; i++)
		resil_release(p, &pm[i], RESIL_SUCCESS);
	return n;
}

long long test_policy_stat(resil_t *r, const char *name, const char *stat)
{
	Resil__Response *resp = NULL;
	Resil__PolicyInfo *pi = test_policy_info(r, name, &resp);
	long long v = -1;

	TEST_CHECK(pi != NULL);
	for (size_t i = 0; i < pi->n_stats; i++)
		if (pi->stats[i]->name && !strcmp(pi->stats[i]->name, stat))
			v = (long long)pi->stats[i]->value;
	resil__response__free_unpacked(resp, NULL);
	return v;
}

void test_policy_reset(resil_t *r, const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;
	Resil__Response *resp = NULL;

	f.name = (char *)name;
	f.reset = true;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	pthread_mutex_lock(&r->lock);
	TEST_CHECK(resil_priv_request(r, &req, &resp, NULL, NULL) == 0);
	pthread_mutex_unlock(&r->lock);
	resil__response__free_unpacked(resp, NULL);
}

uint32_t test_bulkhead_fill(void *st, uint32_t free_slots)
{
	struct resil_bulkhead_state *s = st;
	struct resil_pool p = resil_bulkhead_pool(s);
	uint32_t held = p.n > free_slots ? p.n - free_slots : 0;

	for (uint32_t i = free_slots; i < p.n; i++)
		atomic_store(&p.slots[(size_t)i << p.shift], TEST_BULKHEAD_FILLER);
	return held;
}

Resil__PolicyInfo *test_policy_info(resil_t *r, const char *name, Resil__Response **resp)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Get g = RESIL__GET__INIT;
	int err;

	g.name = (char *)name;
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &g;
	*resp = NULL;
	pthread_mutex_lock(&r->lock);
	err = resil_priv_request(r, &req, resp, NULL, NULL);
	pthread_mutex_unlock(&r->lock);
	if (err < 0 || (*resp)->body_case != RESIL__RESPONSE__BODY_POLICY) {
		if (err == 0)
			resil__response__free_unpacked(*resp, NULL);
		*resp = NULL;
		return NULL;
	}
	return (*resp)->policy;
}

long long test_metric(resil_t *r, const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Response *resp = NULL;
	size_t n = strlen(name);
	long long v = -1;

	while (n && name[n - 1] == ' ')
		n--;
	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	pthread_mutex_lock(&r->lock);
	if (resil_priv_request(r, &req, &resp, NULL, NULL) != 0)
		resp = NULL;
	pthread_mutex_unlock(&r->lock);
	if (!resp)
		return -1;
	for (size_t f = 0; resp->body_case == RESIL__RESPONSE__BODY_METRICS &&
			   f < resp->metrics->n_families && v < 0;
	     f++) {
		const Resil__MetricFamily *fam = resp->metrics->families[f];

		for (size_t i = 0; i < fam->n_samples; i++) {
			const Resil__Sample *sm = fam->samples[i];
			char id[512];
			size_t k = (size_t)snprintf(id, sizeof(id), "%s", sm->name);

			/* the sample as the text format names it: NAME{l="v",...} */
			for (size_t l = 0; l < sm->n_labels && k < sizeof(id); l++)
				k += (size_t)snprintf(id + k, sizeof(id) - k, "%s%s=\"%s\"",
						      l ? "," : "{", sm->labels[l]->name,
						      sm->labels[l]->value);
			if (sm->n_labels && k < sizeof(id))
				k += (size_t)snprintf(id + k, sizeof(id) - k, "}");
			if (k == n && strncmp(id, name, n) == 0) {
				v = (long long)sm->value;
				break;
			}
		}
	}
	resil__response__free_unpacked(resp, NULL);
	return v;
}

resil_t *test_emb_r;
int64_t test_emb_ns;

static int64_t test_emb_clock(void *ctx)
{
	(void)ctx;
	return test_emb_ns;
}

int test_emb_open(void **state)
{
	(void)state;
	test_emb_ns = 1000 * RESIL_NS_PER_S;
	if (resil_open_embedded(&test_emb_r, NULL) < 0)
		return -1;
	return resil_set_clock(test_emb_r, test_emb_clock, NULL);
}

int test_emb_close(void **state)
{
	(void)state;
	resil_close(test_emb_r);
	test_emb_r = NULL;
	return 0;
}

uint64_t test_emb_stat(const char *name, int which)
{
	const struct resil_rec *rec = test_rec_of(test_emb_r, name);

	return resil_stats_read(resil_comp_state(&test_emb_r->seg, rec, RESIL_C_STATS),
				(enum resil_stat)which);
}

struct resil_limit_info test_emb_limit(const char *name)
{
	const struct resil_rec *rec = test_rec_of(test_emb_r, name);
	struct resil_limit_info li;

	resil_limit_info(&rec->conf.limit, resil_comp_state(&test_emb_r->seg, rec, RESIL_C_LIMIT),
			 &li);
	return li;
}

int test_connect_raw(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

bool test_hung_up(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

int test_try_acquire(resil_policy_t *p)
{
	resil_permit_t pm;
	int v = resil_acquire(p, &pm);

	if (v == RESIL_ADMIT)
		resil_release(p, &pm, RESIL_SUCCESS);
	return v;
}

void test_ticks(resil_t *r, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t b = atomic_load(&r->seg.st->daemon_beat_ns);

		TEST_CHECK(TEST_EVENTUALLY(atomic_load(&r->seg.st->daemon_beat_ns) != b));
	}
}

size_t test_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return n > 0 ? (size_t)n : 0;
}

int test_write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX + 64];
	va_list ap;
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	va_start(ap, fmt);
	r = vfprintf(f, fmt, ap);
	va_end(ap);
	return fclose(f) == 0 && r >= 0 ? 0 : -1;
}

pid_t test_watch_start(const struct test_daemon *d, char *out, size_t outlen)
{
	pid_t pid;
	int fd;

	snprintf(out, outlen, "%s/watch.out", d->dir);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	TEST_CHECK(fd >= 0);
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fd, 1);
		execl(RESILCTL_PATH, "resilctl", "--socket", d->sock, "watch", "--json",
		      (char *)NULL);
		_exit(127);
	}
	close(fd);
	return pid;
}

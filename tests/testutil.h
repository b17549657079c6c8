/* SPDX-License-Identifier: MIT */
/*
 * testutil.h - helpers every test may use.
 *
 *   - a resild of the test's own, on a socket in a fresh temporary
 *     directory, started and stopped by the test (RESILD_PATH comes from
 *     tests/CMakeLists.txt);
 *   - $RESIL_TEST_SCALE for long loops (default 1);
 *   - a manual clock in a MAP_SHARED page, so forked processes share it;
 *   - "eventually": poll a condition for up to 10 s, never sleep a fixed
 *     time to wait for something;
 *   - run a command and capture what it prints;
 *   - drop a forked child to uid/gid nobody.
 *
 * Exit code 77 means skipped (ctest SKIP_RETURN_CODE).
 */
#ifndef RESIL_TESTUTIL_H
#define RESIL_TESTUTIL_H

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "resil.h"

#define TEST_SKIP	   77
#define TEST_EVENTUALLY_MS 10000

/* ---- a resild of the test's own ---- */
struct resil_pool;

struct test_daemon {
	pid_t pid;		/* 0 when not running */
	char dir[PATH_MAX];	/* temporary directory (socket, config, logs) */
	char sock[PATH_MAX];	/* dir/control.sock */
	char confdir[PATH_MAX]; /* dir/conf.d: configuration files, empty at start */
	char log[PATH_MAX];	/* dir/resild.log: the daemon's stdout and stderr */
	unsigned nofile;	/* != 0: the daemon's RLIMIT_NOFILE, soft and hard */
};

/* Create the directory (mode 0755) and fill the paths; does not start. */
int test_daemon_init(struct test_daemon *d);
/* Fill d's paths for the directory dir (no file is made). */
void test_daemon_paths(struct test_daemon *d, const char *dir);
/* Start RESILD_PATH --foreground --socket SOCK --config-dir CONFDIR plus
 * extra (NULL-terminated, may be NULL) and wait until it answers (10 s).
 * 0 or -errno; on failure the log is printed to stderr. */
int test_daemon_start(struct test_daemon *d, const char *const *extra);
/* Does a control request on the socket get an answer right now? */
bool test_daemon_answers(const struct test_daemon *d);
/* SIGTERM and wait (10 s, then SIGKILL). Returns the exit status as
 * waitpid reports it, or -errno. */
int test_daemon_stop(struct test_daemon *d);
/* SIGKILL and reap. */
void test_daemon_kill(struct test_daemon *d);
/* SIGKILL every daemon this process started and has not stopped (a
 * failing check does it). */
void test_daemons_kill(void);
/* Stop if running and remove the directory. */
void test_daemon_fini(struct test_daemon *d);
/* How many times the daemon's log holds what, over the whole file (a long
 * log of a hostile run passes a megabyte). */
int test_log_count(const struct test_daemon *d, const char *what);
/* init + start + resil_open on its socket: 0, or -errno with what failed
 * on stderr and d cleaned up. */
int test_daemon_open(struct test_daemon *d, resil_t **r);

/* The value of the sample NAME (as the text format names it, labels
 * included: `x_total{result="ok"}`; trailing spaces ignored) of
 * the daemon r is connected to, from a protocol v2 Metrics reply; -1 when
 * there is none. */
long long test_metric(resil_t *r, const char *name);

/* resild's answer to a Get of NAME on r's connection: the PolicyInfo
 * (configuration, origin, stats) inside *resp, which the caller frees
 * (resil__response__free_unpacked); NULL (and *resp NULL) when the
 * request failed. */
struct Resil__PolicyInfo;
struct Resil__Response;
struct Resil__PolicyInfo *test_policy_info(resil_t *r, const char *name,
					   struct Resil__Response **resp);

/* ---- scale ---- */
/* $RESIL_TEST_SCALE as a positive integer (default 1). */
int resil_test_scale(void);

/* ---- a manual clock every forked process sees ---- */
struct test_clock {
	_Atomic int64_t ns;
};
/* A clock in its own MAP_SHARED anonymous page, starting at start_ns. */
struct test_clock *test_clock_new(int64_t start_ns);
void test_clock_free(struct test_clock *c);
int64_t test_clock_fn(void *ctx); /* a resil_clock_fn: ctx = struct test_clock * */
void test_clock_set(struct test_clock *c, int64_t ns);
void test_clock_advance(struct test_clock *c, int64_t ns);

/* ---- eventually ---- */
/* Poll cond(ctx) every few ms until it holds (true) or timeout_ms passed
 * (false). */
bool test_wait_until(bool (*cond)(void *ctx), void *ctx, int timeout_ms);
/* Statement form for an expression: true once it held within 10 s. */
#define TEST_EVENTUALLY(expr)                                                                      \
	({                                                                                         \
		bool ok_ = false;                                                                  \
		for (int i_ = 0; i_ < TEST_EVENTUALLY_MS / 5; i_++) {                              \
			if (expr) {                                                                \
				ok_ = true;                                                        \
				break;                                                             \
			}                                                                          \
			test_sleep_ms(5);                                                          \
		}                                                                                  \
		ok_;                                                                               \
	})
void test_sleep_ms(int ms);
int64_t test_mono_ns(void);

/* ---- processes ---- */
/* Run argv (argv[0] searched in PATH), capture stdout and stderr together
 * into out (NUL-terminated, truncated to outlen - 1). env: extra
 * "NAME=value" strings (NULL-terminated, may be NULL). Returns the exit
 * code (0..255), 128 + signal, or -errno; gives up after 30 s. */
int test_run(const char *const *argv, const char *const *env, char *out, size_t outlen);
/* Wait for pid within timeout_ms: its waitpid status, or -ETIMEDOUT. */
int test_wait_pid(pid_t pid, int timeout_ms);

/* Drop the calling process to uid and gid nobody (setgroups, setresgid,
 * setresuid). 0, or -EPERM when not root (the caller skips). */
int test_drop_to_nobody(void);
uid_t test_nobody_uid(void);
gid_t test_nobody_gid(void);

/* ---- accounts ---- */
/* A group and users made for the test (groupadd/useradd as root: system
 * accounts, no home, no login shell), removed at exit and when a check
 * fails in the process that made them. A leftover of a killed run with
 * the same name is removed first. Names: short, the test's own. 0, -EPERM
 * when not root, or -errno (the tools' failure printed). */
int test_group_make(const char *name, gid_t *gid);
int test_user_make(const char *name, gid_t group, uid_t *uid);
void test_accounts_remove(void);
/* Become uid with gid as its only group (a forked child: setgroups,
 * setresgid, setresuid), and end with the parent (PR_SET_PDEATHSIG).
 * Fails the test on error. */
void test_become(uid_t uid, gid_t gid);

/* From now on, any syscall but write, exit and exit_group kills the
 * calling process (a seccomp filter; no_new_privs first). 0 or -1.
 * (SECCOMP_MODE_STRICT cannot serve where read must be refused too.) */
int test_deny_syscalls(void);

/* The record policy NAME of r is bound to now (the directory's current
 * entry); fails the test when there is none. */
struct resil_rec;
const struct resil_rec *test_rec_of(resil_t *r, const char *name);
/* What p's binding decides by (internal.h, struct resil_binding: the
 * decision path's branches): 0 the general path; 3 the counters alone;
 * 4 a breaker; 1 a bulkhead; 2 a limiter; 5 two or three of them. */
uint32_t test_branch_of(const resil_policy_t *p);

/* ---- claims forged under an id (the count tables' tests) ---- */
/* The permit pool of policy name's bulkhead (adaptive: its adaptive
 * limit's) in the segments r maps. */
struct resil_pool test_pool_of(resil_t *r, const char *name, bool adaptive);
/* Slots of pool p naming id; of policy name's bulkhead. */
uint32_t test_pool_naming(struct resil_pool p, uint32_t id);
uint32_t test_bulkhead_naming(resil_t *r, const char *name, uint32_t id);
/* id written into every free slot of p: how many. */
uint32_t test_pool_forge(struct resil_pool p, uint32_t id);
/* As uid (group gid), through the socket sock: id written into every
 * free slot of policy name's bulkhead, in a child process; how many. */
uint32_t test_forge_as(uid_t uid, gid_t gid, const char *sock, const char *name, uint32_t id);
/* Permits p gives at once out of max + 1 tries, all released. */
int test_admitted(resil_policy_t *p, int max);
/* Policy name's stat called stat in `show` (-1: none). */
long long test_policy_stat(resil_t *r, const char *name, const char *stat);
/* An operator's `reset` of policy name, answered. */
void test_policy_reset(resil_t *r, const char *name);

/* A bulkhead state block (just initialised) whose slots from free_slots
 * on are claimed by TEST_BULKHEAD_FILLER: a live client that never lets
 * go. So a packed pool (above RESIL_POOL_SPREAD_MAX permits) behaves as
 * one of free_slots. Returns the slots so held. */
#define TEST_BULKHEAD_FILLER 0xfff0u
uint32_t test_bulkhead_fill(void *st, uint32_t free_slots);

/* ---- one embedded handle on a manual clock (cmocka fixtures) ---- */
/* test_emb_open (a cmocka setup) opens test_emb_r with
 * resil_open_embedded on the clock test_emb_ns, 1000 s at the start,
 * which the test sets and advances; test_emb_close (the teardown) closes
 * it. */
extern resil_t *test_emb_r;
extern int64_t test_emb_ns;
int test_emb_open(void **state);
int test_emb_close(void **state);
/* The statistic which (enum resil_stat) of test_emb_r's policy NAME. */
uint64_t test_emb_stat(const char *name, int which);
/* resil_limit_info of test_emb_r's policy NAME (limit.h's struct). */
struct resil_limit_info;
struct resil_limit_info test_emb_limit(const char *name);

/* ---- raw control connections ---- */
/* A blocking SOCK_SEQPACKET connection to the socket at path, nothing
 * sent: the fd, or -errno. */
int test_connect_raw(const char *path);
/* Has the peer closed fd (hang-up, or an error then hang-up), now? */
bool test_hung_up(int fd);

/* ---- the event stream ---- */
/* `resilctl watch --json` on d's socket, a child of the caller, its
 * standard output in d->dir/watch.out (that path into out, outlen bytes):
 * its pid. Read it with test_read_file; stop it with SIGTERM and
 * test_wait_pid. Fails the test when it cannot start. */
pid_t test_watch_start(const struct test_daemon *d, char *out, size_t outlen);

/* ---- decisions and ticks ---- */
/* One acquire on p, its permit released at once as a success: what the
 * acquire returned (RESIL_ADMIT or a refusal). */
int test_try_acquire(resil_policy_t *p);

/* Wait for n ticks of the daemon r is attached to (its heartbeat in the
 * state header moves n times; each within TEST_EVENTUALLY's bound). */
void test_ticks(resil_t *r, int n);

/* ---- files ---- */
/* Up to len - 1 bytes of the file at path into buf, NUL-terminated (an
 * empty string when it cannot be read): the bytes read. */
size_t test_read_file(const char *path, char *buf, size_t len);

/* dir/name written with printf's fmt: 0, or -1 when it cannot be. */
int test_write_file(const char *dir, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Plain assertion that works in forked children too (exit 1 with where). */
#define TEST_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			test_fail(__FILE__, __LINE__, #cond);                                      \
		}                                                                                  \
	} while (0)
void test_fail(const char *file, int line, const char *what) __attribute__((noreturn));

#endif

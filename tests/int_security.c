/* SPDX-License-Identifier: MIT */
/*
 * int_security.c - what a client of another uid cannot do to the segments.
 *
 * The test starts resild (as root), opens the library as root to receive
 * the two segment fds, then forks a child that drops to uid/gid nobody
 * (the fds survive setresuid) and checks, as nobody:
 *   - the config segment cannot be mapped PROT_WRITE (EACCES) nor reopened
 *     O_RDWR through /proc/self/fd (EACCES), but can be mapped read-only;
 *   - the state segment is sealed: ftruncate to shrink or grow fails with
 *     EPERM, fallocate beyond its size fails, the seals cannot be changed;
 *     mapping it read-write works (it is the clients' hot state).
 * A second child connects as nobody through resil_open on its own (the
 * socket's directory is 0755; the daemon decides whether nobody may
 * connect: either it works or it fails with a permission error, never
 * hangs).
 * Skips (77) when not root: dropping privileges needs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static void check_as_nobody(int cfg_fd, int st_fd, size_t cfg_size, size_t st_size)
{
	char path[64];
	void *m;
	int fd, seals;
	off_t sz;

	TEST_CHECK(test_drop_to_nobody() == 0);
	TEST_CHECK(getuid() != 0 && geteuid() != 0);

	/* config: read-only for clients */
	m = mmap(NULL, cfg_size, PROT_READ | PROT_WRITE, MAP_SHARED, cfg_fd, 0);
	TEST_CHECK(m == MAP_FAILED && errno == EACCES);
	m = mmap(NULL, cfg_size, PROT_READ, MAP_SHARED, cfg_fd, 0);
	TEST_CHECK(m != MAP_FAILED);
	if (m != MAP_FAILED) {
		TEST_CHECK(mprotect(m, cfg_size, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
		munmap(m, cfg_size);
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", cfg_fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	TEST_CHECK(fd < 0 && errno == EACCES);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	TEST_CHECK(fd < 0 && errno == EACCES);
	TEST_CHECK(fchmod(cfg_fd, 0666) < 0);

	/* state: read-write, sealed against shrinking and growing */
	sz = lseek(st_fd, 0, SEEK_END);
	TEST_CHECK(sz > 0 && (size_t)sz == st_size);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, st_fd, 0);
	TEST_CHECK(m != MAP_FAILED);
	if (m != MAP_FAILED)
		munmap(m, 4096);
	TEST_CHECK(ftruncate(st_fd, 0) < 0 && errno == EPERM);
	TEST_CHECK(ftruncate(st_fd, sz / 2) < 0 && errno == EPERM);
	TEST_CHECK(ftruncate(st_fd, sz + 4096) < 0 && errno == EPERM);
	TEST_CHECK(fallocate(st_fd, 0, sz, 4096) < 0 && errno == EPERM);
	seals = fcntl(st_fd, F_GET_SEALS);
	TEST_CHECK(seals >= 0);
	TEST_CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
		   (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
	TEST_CHECK(fcntl(st_fd, F_ADD_SEALS, F_SEAL_WRITE) < 0 && errno == EPERM);
	/* the size did not change */
	TEST_CHECK(lseek(st_fd, 0, SEEK_END) == sz);
	_exit(0);
}

static int wait_ok(pid_t pid, const char *what)
{
	int st = test_wait_pid(pid, 30000);

	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (st == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	fprintf(stderr, "%s failed (status %d)\n", what, st);
	return 1;
}

int main(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	pid_t pid;
	int fails = 0;

	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_security: needs root to drop to nobody: skipped\n");
		return TEST_SKIP;
	}
	if (test_daemon_open(&d, &r) < 0)
		return 1;
	TEST_CHECK(resil_define(r, "sec", "bulkhead.max = 2") == 0);

	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0)
		check_as_nobody(r->seg.cfg_fd, r->seg.st_fd, r->seg.cfg_size, r->seg.st_size);
	fails += wait_ok(pid, "checks as nobody");

	/* nobody connecting on its own: an answer within the bound, either way */
	pid = fork();
	TEST_CHECK(pid >= 0);
	if (pid == 0) {
		resil_t *r2 = NULL;
		int64_t t0;
		int e;

		TEST_CHECK(test_drop_to_nobody() == 0);
		setenv("RESIL_CONNECT_TIMEOUT_MS", "5000", 1);
		t0 = test_mono_ns();
		e = resil_open(&r2, d.sock);
		TEST_CHECK(test_mono_ns() - t0 < 10000000000LL);
		TEST_CHECK(e == 0 || e == -EACCES || e == -EPERM);
		if (e == 0) {
			/* mapped: the config is still read-only in this process */
			char *cfg = (char *)r2->seg.cfg;

			TEST_CHECK(mprotect(cfg, 4096, PROT_READ | PROT_WRITE) < 0);
			resil_close(r2);
		} else {
			printf("as nobody: resil_open: %s (%s)\n", strerror(-e),
			       resil_last_error());
		}
		_exit(0);
	}
	fails += wait_ok(pid, "open as nobody");

	resil_close(r);
	test_daemon_fini(&d);
	if (!fails)
		printf("int_security: ok\n");
	return fails ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * int_exhaust_state.c - one uid cannot fill the state segment. As a
 * member of the socket group without admin rights (accounts made for the
 * test: group rt-st, user rt-st-a), on a resild with --state-size 256M
 * (--max-state-per-uid: a quarter, the default), uid A creates keyed
 * limiters of a million keys (32 MiB each) until one is refused:
 *   - the refusal is -EDQUOT, naming --max-state-per-uid, and what A's
 *     policies take stays within it;
 *   - root's 3.2 MiB keyed limiter is created after it;
 *   - `resilctl status` shows uid A's share;
 *   - resild's resident memory grew by less than 16 MiB for all those
 *     tables, three ticks later (a new table's pages are not touched
 *     until clients use them: not by its init, its sweep or `show`).
 * Skips (77) when not root.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static long long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(void)
{
	struct test_daemon d;
	char gs[16], out[8192], want[64];
	const char *extra[] = {"--socket-group", gs, "--state-size", "256M", NULL};
	resil_t *root = NULL;
	long long rss0, rss1;
	gid_t g;
	uid_t ua;
	pid_t a;
	int made = 0, st, pfd[2];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0) {
		fprintf(stderr, "int_exhaust_state: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-st", &g) == 0);
	TEST_CHECK(test_user_make("rt-st-a", g, &ua) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	rss0 = rss_kb(d.pid);

	TEST_CHECK(pipe(pfd) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		resil_t *r = NULL;
		char name[32];
		int e = 0, n = 0;

		test_become(ua, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		for (n = 0; n < 11; n++) {
			snprintf(name, sizeof(name), "big%d", n);
			e = resil_define(r, name, "limit.rate = 100/s; limit.keys = 1000000");
			if (e < 0)
				break;
		}
		printf("uid %u: %d keyed limiters of a million keys, then: %s (%s)\n",
		       (unsigned)getuid(), n, strerror(-e), resil_last_error());
		TEST_CHECK(e == -EDQUOT);
		TEST_CHECK(strstr(resil_last_error(), "--max-state-per-uid") != NULL);
		TEST_CHECK(n >= 1 && n < 11);
		TEST_CHECK(write(pfd[1], &n, sizeof(n)) == sizeof(n));
		resil_close(r);
		_exit(0);
	}
	close(pfd[1]); /* a child that failed: read() sees the end */
	TEST_CHECK(read(pfd[0], &made, sizeof(made)) == sizeof(made));
	st = test_wait_pid(a, 60000);
	TEST_CHECK(st == 0);

	TEST_CHECK(resil_define(root, "root_keyed", "limit.rate = 100/s; limit.keys = 100000") ==
		   0);
	printf("root: a keyed limiter of 100,000 keys created after it\n");
	{
		const char *cmd[] = {RESILCTL_PATH, "--socket", d.sock, "status", NULL};

		TEST_CHECK(test_run(cmd, NULL, out, sizeof(out)) == 0);
		printf("%s", out);
		snprintf(want, sizeof(want), "uid %-8u %4d policies", (unsigned)ua, made);
		TEST_CHECK(strstr(out, want) != NULL);
		TEST_CHECK(strstr(out, "bytes of state") != NULL);
	}
	/* a few ticks: each sweeps every keyed table (limit.c's maintain) */
	for (int i = 0; i < 3; i++) {
		uint64_t b = ld_relaxed(&root->seg.st->daemon_beat_ns);

		TEST_CHECK(TEST_EVENTUALLY(ld_relaxed(&root->seg.st->daemon_beat_ns) != b));
	}
	rss1 = rss_kb(d.pid);
	printf("resild's resident memory: %lld kB before, %lld kB after %d tables of 32 MiB\n",
	       rss0, rss1, made + 1);
	TEST_CHECK(rss0 > 0 && rss1 > 0 && rss1 - rss0 < 16 * 1024);

	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_exhaust_state: ok\n");
	return 0;
}

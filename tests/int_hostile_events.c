/* SPDX-License-Identifier: MIT */
/*
 * int_hostile_events.c - events a member forges in the state segment's
 * ring are shown as that member's reports, never as resild's.
 *
 * As a member of the socket group without admin rights (accounts made for
 * the test: group rt-ev, user rt-ev-a), the attacker pushes into the ring
 * what only resild would say: "payments: deleted", "forced-open",
 * "reclaimed 512 permits". Then root deletes a policy for real. A root
 * `resilctl watch --json` and resild's log show:
 *   - each forged event with source "client", the attacker's uid and pid
 *     as resild knows them (its connection), and the log's line starts
 *     "client-reported by pid P uid U:";
 *   - the real delete with source "resild".
 * Skips (77) when not root.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static char out_path[4200];

/* The first watch line holding needle and also (when not NULL), copied
 * into line; true when found. */
static bool line_with2(const char *needle, const char *also, char *line, size_t len)
{
	static char buf[1 << 20];
	const char *p = buf, *b, *e;

	test_read_file(out_path, buf, sizeof(buf));
	while ((p = strstr(p, needle)) != NULL) {
		for (b = p; b > buf && b[-1] != '\n'; b--)
			;
		e = strchr(p, '\n');
		snprintf(line, len, "%.*s", (int)(e ? e - b : (long)strlen(b)), b);
		if (!also || strstr(line, also))
			return true;
		p++;
	}
	return false;
}

static bool line_with(const char *needle, char *line, size_t len)
{
	return line_with2(needle, NULL, line, len);
}

/* Lines of the watch that say a delete by resild itself. */
static int resild_deletes(void)
{
	static char buf[1 << 20];
	int n = 0;

	test_read_file(out_path, buf, sizeof(buf));
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
		n += strstr(l, "\"to\":\"deleted\"") && strstr(l, "\"source\":\"resild\"");
	return n;
}

int main(void)
{
	struct test_daemon d;
	char gs[16], line[2048], want[128];
	const char *extra[] = {"--socket-group", gs, NULL};
	resil_t *root = NULL;
	gid_t g;
	uid_t ua;
	pid_t watcher, a;
	int st, pfd[2], before;
	uint32_t apid = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_hostile_events: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-ev", &g) == 0);
	TEST_CHECK(test_user_make("rt-ev-a", g, &ua) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	TEST_CHECK(resil_define(root, "payments", "breaker.window = count:10; bulkhead.max = 8") ==
		   0);
	TEST_CHECK(resil_define(root, "gone", "bulkhead.max = 1") == 0);

	watcher = test_watch_start(&d, out_path, sizeof(out_path));
	/* the watcher is subscribed once a change of root's shows */
	TEST_CHECK(TEST_EVENTUALLY((resil_define(root, "ready", "bulkhead.max = 1") == 0 &&
				    resil_delete(root, "ready") == 0 &&
				    line_with("\"policy\":\"ready\"", line, sizeof(line)))));

	TEST_CHECK(pipe(pfd) == 0);
	a = fork();
	TEST_CHECK(a >= 0);
	if (a == 0) {
		resil_t *r = NULL;
		const struct resil_rec *rec;
		uint32_t id, me = (uint32_t)getpid();

		test_become(ua, g);
		TEST_CHECK(resil_open(&r, d.sock) == 0);
		rec = test_rec_of(r, "payments");
		id = ld_relaxed(&r->cur->claim_id);
		/* what only resild says, pushed as any client can */
		resil_event_push_by(&r->seg, id, me, RESIL_EV_CONFIG, rec->slot, rec->gen, 2, 0, 0,
				    0, 0);
		resil_event_push_by(&r->seg, id, me, RESIL_EV_TRANSITION, rec->slot, rec->gen,
				    RESIL_STATE_CLOSED, RESIL_STATE_FORCED_OPEN, 0, 0, 0);
		resil_event_push_by(&r->seg, id, me, RESIL_EV_RECLAIMED, rec->slot, rec->gen, 512,
				    0, 0, 4242, 0);
		TEST_CHECK(write(pfd[1], &me, sizeof(me)) == sizeof(me));
		pause(); /* alive, so resild still knows its row */
		_exit(0);
	}
	TEST_CHECK(read(pfd[0], &apid, sizeof(apid)) == sizeof(apid));
	TEST_CHECK(TEST_EVENTUALLY(line_with("\"type\":\"reclaimed\"", line, sizeof(line))));
	printf("%s\n", line);
	snprintf(want, sizeof(want), "\"pid\":%u,\"source\":\"client\",\"uid\":%u", apid,
		 (unsigned)ua);
	TEST_CHECK(strstr(line, want) != NULL);
	TEST_CHECK(line_with2("\"to\":\"deleted\"", "\"policy\":\"payments\"", line, sizeof(line)));
	printf("%s\n", line);
	TEST_CHECK(strstr(line, want) != NULL);
	TEST_CHECK(line_with("\"to\":\"forced-open\"", line, sizeof(line)));
	printf("%s\n", line);
	TEST_CHECK(strstr(line, want) != NULL);
	snprintf(want, sizeof(want), "client-reported by pid %u uid %u: policy payments", apid,
		 (unsigned)ua);
	TEST_CHECK(TEST_EVENTUALLY(test_log_count(&d, want) >= 2));

	/* resild's own: one more delete said by resild */
	before = resild_deletes();
	TEST_CHECK(resil_delete(root, "gone") == 0);
	TEST_CHECK(TEST_EVENTUALLY(resild_deletes() == before + 1));
	printf("root's delete: shown as resild's (%d such lines)\n", before + 1);

	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	kill(watcher, SIGTERM);
	st = test_wait_pid(watcher, 10000);
	(void)st;
	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_hostile_events: ok\n");
	return 0;
}

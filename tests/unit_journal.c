/* SPDX-License-Identifier: MIT */
/*
 * unit_journal.c - the daemon's event sink (daemon/journal.c):
 *   - stderr: one "<N>message" line per event, priorities by event, control
 *     characters flattened, the caller's text or a composed one;
 *   - the journald decision: $JOURNAL_STREAM must name fd 2's device and
 *     inode (absent, malformed or another file: stderr);
 *   - journald: in a private mount namespace a datagram socket stands in
 *     for /run/systemd/journal/socket and receives the entry; its fields
 *     (MESSAGE, PRIORITY, POLICY, FROM, TO, REASON) are checked. Skipped
 *     when the test cannot make a mount namespace (not root).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>
#include <cmocka.h>

#include "breaker.h"
#include "journal.h"
#include "resil.h"
#include "testutil.h"

static struct resil_event ev(uint32_t type, uint32_t a, uint32_t b, uint32_t reason)
{
	struct resil_event e;

	memset(&e, 0, sizeof(e));
	e.type = type;
	e.a = a;
	e.b = b;
	e.reason = reason;
	e.slot = 7;
	return e;
}

/* Run the sink with fd 2 on a temporary file; return what it wrote. */
static char *capture(const struct resil_event *e, const char *pol, const char *text)
{
	char path[] = "/tmp/resil-journal-XXXXXX", *out = calloc(1, 4096);
	int fd = mkstemp(path), saved = dup(2);
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0 && out);
	unlink(path);
	assert_int_equal(dup2(fd, 2), 2);
	resild_journal_open();
	resild_journal_event(NULL, e, pol, text);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	n = pread(fd, out, 4095, 0);
	assert_true(n >= 0);
	close(fd);
	resild_journal_open();
	return out;
}

static void test_stderr_lines(void **state)
{
	struct resil_event e;
	char *s;

	unsetenv("JOURNAL_STREAM");
	e = ev(RESIL_EV_TRANSITION, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_FAILURE_RATE);
	s = capture(&e, "payments", NULL);
	assert_string_equal(s, "<4>policy payments: closed -> open (failure rate)\n");
	free(s);

	/* back to closed: notice; the caller's text wins */
	e = ev(RESIL_EV_TRANSITION, RESIL_STATE_HALF_OPEN, RESIL_STATE_CLOSED,
	       RESIL_WHY_PROBES_PASSED);
	s = capture(&e, "payments", "policy payments: half-open -> closed, all good");
	assert_string_equal(s, "<5>policy payments: half-open -> closed, all good\n");
	free(s);

	/* a hostile name stays on one line */
	e = ev(RESIL_EV_BUDGET_EXHAUSTED, 0, 0, 0);
	s = capture(&e, "a\nb\rc", NULL);
	assert_string_equal(s, "<4>policy a b c: retry budget exhausted\n");
	free(s);

	/* no name: the slot */
	e = ev(RESIL_EV_RECLAIMED, 3, 1, 0);
	s = capture(&e, NULL, NULL);
	assert_string_equal(s,
			    "<5>policy #7: reclaimed 3 permits and 1 probes from a dead process\n");
	free(s);

	e = ev(RESIL_EV_CONFIG, 0, 0, 0);
	assert_int_equal(resild_journal_priority(&e), LOG_INFO);
	s = capture(&e, "x", NULL);
	assert_string_equal(s, "<6>policy x: created\n");
	free(s);
	e = ev(RESIL_EV_TRANSITION, RESIL_STATE_CLOSED, RESIL_STATE_FORCED_OPEN, RESIL_WHY_FORCED);
	assert_int_equal(resild_journal_priority(&e), LOG_WARNING);
	e = ev(RESIL_EV_CLIENTS_FULL, 0, 0, 0);
	assert_int_equal(resild_journal_priority(&e), LOG_WARNING);

	/* a very long text: one line, cut, newline-terminated */
	{
		char big[3000];

		memset(big, 'x', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		s = capture(&e, "x", big);
		assert_true(strlen(s) < 1024);
		assert_int_equal(s[strlen(s) - 1], '\n');
		assert_true(strchr(s, '\n') == s + strlen(s) - 1);
		free(s);
	}
}

static void test_decision(void **state)
{
	struct stat st;
	char buf[64];
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC), saved = dup(2);

	assert_true(fd >= 0 && saved >= 0);
	unsetenv("JOURNAL_STREAM");
	resild_journal_open();
	assert_false(resild_journal_connected());
	setenv("JOURNAL_STREAM", "garbage", 1);
	resild_journal_open();
	assert_false(resild_journal_connected());

	/* fd 2 is /dev/null; the variable names it: journald */
	assert_int_equal(dup2(fd, 2), 2);
	assert_int_equal(fstat(2, &st), 0);
	snprintf(buf, sizeof(buf), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", buf, 1);
	resild_journal_open();
	assert_true(resild_journal_connected());
	/* same device, another inode: not ours */
	snprintf(buf, sizeof(buf), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	setenv("JOURNAL_STREAM", buf, 1);
	resild_journal_open();
	assert_false(resild_journal_connected());
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	close(fd);
	unsetenv("JOURNAL_STREAM");
	resild_journal_open();
}

/* Child: private /run, a socket where journald's would be, one event. */
static int journal_child(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct resil_event e;
	struct stat st;
	char buf[4096], js[64];
	ssize_t n;
	int s;

	if (unshare(CLONE_NEWNS) < 0)
		return 77;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") < 0)
		return 77;
	if (mkdir("/run/systemd", 0755) < 0 || mkdir("/run/systemd/journal", 0755) < 0)
		return 2;
	strcpy(sa.sun_path, "/run/systemd/journal/socket");
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 3;
	if (fstat(2, &st) < 0)
		return 4;
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", js, 1);
	resild_journal_open();
	if (!resild_journal_connected())
		return 5;
	e = ev(RESIL_EV_TRANSITION, RESIL_STATE_CLOSED, RESIL_STATE_OPEN, RESIL_WHY_CONSECUTIVE);
	e.value = 5;
	resild_journal_event(NULL, &e, "payments", NULL);
	n = recv(s, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n <= 0)
		return 6;
	buf[n] = '\0';
	TEST_CHECK(strstr(buf, "MESSAGE=policy payments: closed -> open (consecutive failures)\n"));
	TEST_CHECK(strstr(buf, "PRIORITY=4\n"));
	TEST_CHECK(strstr(buf, "POLICY=payments\n"));
	TEST_CHECK(strstr(buf, "FROM=closed\n"));
	TEST_CHECK(strstr(buf, "TO=open\n"));
	TEST_CHECK(strstr(buf, "REASON=consecutive failures\n"));
	TEST_CHECK(strstr(buf, "RESIL_EVENT=transition\n"));
	TEST_CHECK(strstr(buf, "RESIL_VALUE=5\n"));
	/* every type by its name, a repair too (the one table: seg.c) */
	e = ev(RESIL_EV_REPAIRED, RESIL_W_LIMIT_TAT, 1, 0);
	resild_journal_event(NULL, &e, "payments", NULL);
	n = recv(s, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n <= 0)
		return 7;
	buf[n] = '\0';
	TEST_CHECK(strstr(buf, "RESIL_EVENT=repaired\n"));
	return 0;
}

static void test_journald(void **state)
{
	pid_t pid = fork();
	int ws;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(journal_child());
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	if (WEXITSTATUS(ws) == 77) {
		print_message("no mount namespace here (not root?): skipped\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(ws), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_stderr_lines),
	    cmocka_unit_test(test_decision),
	    cmocka_unit_test(test_journald),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * journal.c - events to journald (structured) or to stderr ("<N>" lines).
 *
 * What: resild_journal_event turns one event of the ring into one log
 * entry. Under systemd the daemon's stderr is a journald stream; systemd
 * sets $JOURNAL_STREAM to "DEVICE:INODE" of that stream, and a process
 * that finds fd 2 to be that very file talks to journald directly
 * (sd_journal_send), so the entry keeps its fields: POLICY=, FROM=, TO=,
 * REASON=, RESIL_EVENT= can be matched (`journalctl POLICY=payments`).
 * Anywhere else (by hand, a container, a test, stderr redirected by the
 * unit) it writes "<N>message\n", the prefix syslog and systemd read as
 * the priority.
 *
 * Why compare device and inode instead of trusting the variable: a child
 * inherits $JOURNAL_STREAM even when its stderr was redirected elsewhere;
 * only the match proves fd 2 is still the journal stream (systemd.exec(5)).
 *
 * Invariants: one event, one entry; a line never spans two writes (one
 * write(2) of at most 1 KiB, atomic on pipes); control characters of
 * names and messages are replaced on stderr so an entry stays one line.
 * Runs on the daemon's loop thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "journal.h"
#include "breaker.h"
#include "resil.h"

static int decided = -1; /* -1: not yet, 0: stderr, 1: journald */

void resild_journal_open(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	decided = 0;
	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return;
	if (fstat(STDERR_FILENO, &st) < 0)
		return;
	decided = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

bool resild_journal_connected(void)
{
	if (decided < 0)
		resild_journal_open();
	return decided == 1;
}

int resild_journal_priority(const struct resil_event *e)
{
	switch (e->type) {
	case RESIL_EV_TRANSITION:
		/* a breaker that stops calls is what an operator must see */
		return e->b == RESIL_STATE_OPEN || e->b == RESIL_STATE_FORCED_OPEN ? LOG_WARNING
										   : LOG_NOTICE;
	case RESIL_EV_RECLAIMED:
		return LOG_NOTICE;
	case RESIL_EV_CONFIG:
		return LOG_INFO;
	case RESIL_EV_CLUSTER:
		/* a share that moves is routine; a lease that ran out is not */
		return e->a == RESIL_CL_SHARE ? LOG_INFO : LOG_WARNING;
	default:
		return LOG_WARNING; /* budget exhausted, tables full */
	}
}

/* FROM, TO, REASON of an event, in words. */
static void fields_of(const struct resil_event *e, const char **from, const char **to,
		      const char **reason)
{
	*from = *to = "";
	*reason = resil_event_name(e->type);
	switch (e->type) {
	case RESIL_EV_TRANSITION:
		*from = resil_breaker_state_name((int)e->a);
		*to = resil_breaker_state_name((int)e->b);
		*reason = resil_breaker_why(e->reason);
		break;
	case RESIL_EV_CONFIG:
		*to = resil_config_change_name(e->a);
		break;
	default:
		break;
	}
}

static void compose(const struct resil_event *e, const char *pol, const char *from, const char *to,
		    const char *reason, char *buf, size_t len)
{
	switch (e->type) {
	case RESIL_EV_TRANSITION:
		snprintf(buf, len, "policy %s: %s -> %s (%s)", pol, from, to, reason);
		break;
	case RESIL_EV_RECLAIMED:
		snprintf(buf, len,
			 "policy %s: reclaimed %u permits and %u probes from a dead "
			 "process",
			 pol, e->a, e->b);
		break;
	case RESIL_EV_BUDGET_EXHAUSTED:
		snprintf(buf, len, "policy %s: retry budget exhausted", pol);
		break;
	case RESIL_EV_KEYS_FULL:
		snprintf(buf, len, "policy %s: keyed table full (limit.keys)", pol);
		break;
	case RESIL_EV_CLIENTS_FULL:
		snprintf(buf, len, "client table full: a process decides unregistered");
		break;
	case RESIL_EV_CONFIG:
		snprintf(buf, len, "policy %s: %s", pol, to);
		break;
	default:
		snprintf(buf, len, "policy %s: event %u", pol, e->type);
		break;
	}
}

static void to_stderr(int prio, const char *msg)
{
	char line[1024];
	size_t n;

	n = (size_t)snprintf(line, sizeof(line) - 1, "<%d>%s", prio, msg);
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	for (size_t i = 3; i < n; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = ' ';
	line[n++] = '\n';
	while (write(STDERR_FILENO, line, n) < 0 && errno == EINTR)
		;
}

void resild_journal_event_from(const struct resil_seg *s, const struct resil_event *e,
			       const char *policy_name, const char *text, bool own, int64_t uid,
			       uint32_t pid)
{
	const char *from, *to, *reason, *pol = policy_name && *policy_name ? policy_name : "";
	char msg[512], uids[24];
	int prio;

	(void)s;
	if (!e)
		return;
	prio = resild_journal_priority(e);
	fields_of(e, &from, &to, &reason);
	if (!text || !*text) {
		char slot[32];

		if (!*pol)
			snprintf(slot, sizeof(slot), "#%u", e->slot);
		compose(e, *pol ? pol : slot, from, to, reason, msg, sizeof(msg));
		text = msg;
	}
	/* RESIL_SOURCE: daemon (what resild did or saw) or client (what a
	 * process pushed into the ring: a report, events.c); a client's uid
	 * only when resild identified its row */
	snprintf(uids, sizeof(uids), "%lld", (long long)uid);
	if (resild_journal_connected() &&
	    sd_journal_send("MESSAGE=%s", text, "PRIORITY=%d", prio, "POLICY=%s", pol, "FROM=%s",
			    from, "TO=%s", to, "REASON=%s", reason, "RESIL_EVENT=%s",
			    resil_event_name(e->type), "RESIL_VALUE=%llu",
			    (unsigned long long)e->value, "RESIL_PID=%u", own ? e->pid : pid,
			    "RESIL_SOURCE=%s", own ? "daemon" : "client", "RESIL_CLIENT_UID=%s",
			    own || uid < 0 ? "" : uids, "SYSLOG_IDENTIFIER=resild", NULL) >= 0)
		return;
	to_stderr(prio, text);
}

void resild_journal_event(const struct resil_seg *s, const struct resil_event *e,
			  const char *policy_name, const char *text)
{
	resild_journal_event_from(s, e, policy_name, text, true, -1, 0);
}

/* SPDX-License-Identifier: MIT */
/*
 * journal.h - the daemon's event sink: one structured journal entry per
 * event when stderr is connected to journald, one "<N>" prefixed line on
 * stderr otherwise.
 */
#ifndef RESILD_JOURNAL_H
#define RESILD_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

struct resil_seg;
struct resil_event;

/*
 * Log event e of segment s. policy_name: the policy the event names (NULL
 * or "" when gone or none); text: the message (NULL: composed here from
 * the event). Under journald the entry carries MESSAGE=, PRIORITY=,
 * POLICY=, FROM=, TO=, REASON= (and RESIL_EVENT=, the event type); on
 * plain stderr it is "<N>MESSAGE\n" in one write. Never fails: when the
 * journal refuses the entry, the stderr line is written instead.
 */
void resild_journal_event(const struct resil_seg *s, const struct resil_event *e,
			  const char *policy_name, const char *text);
/* The same for an event of a given source (daemon/events.c): own, resild's;
 * else a client's report, uid (-1: unidentified) and pid as resild knows
 * them (RESIL_SOURCE=daemon|client, RESIL_CLIENT_UID=). */
void resild_journal_event_from(const struct resil_seg *s, const struct resil_event *e,
			       const char *policy_name, const char *text, bool own, int64_t uid,
			       uint32_t pid);

/* Decide (again) where events go: journald when $JOURNAL_STREAM names the
 * device and inode of fd 2, as systemd documents; stderr otherwise. Done
 * once on the first event; call it again after redirecting stderr. */
void resild_journal_open(void);
/* The decision in force (true: journald). */
bool resild_journal_connected(void);
/* The syslog priority an event is logged with. */
int resild_journal_priority(const struct resil_event *e);

#endif

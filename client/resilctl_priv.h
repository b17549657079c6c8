/* SPDX-License-Identifier: MIT */
/*
 * resilctl_priv.h - what resilctl.c (the command line, the helpers, the
 * commands that change policies) shares with the files of the other
 * commands (resilctl_show.c, resilctl_status.c, resilctl_watch.c): the
 * parsed options, the control connection, the output and error helpers.
 */
#ifndef RESIL_RESILCTL_PRIV_H
#define RESIL_RESILCTL_PRIV_H

#include <stdbool.h>
#include <stdio.h>

#include "resil.pb-c.h"

#include <stdint.h>
#include <time.h>

struct resil;

/* The command line: global options and the words after the command. */
struct opts {
	const char *socket;
	const char *key;
	bool json;
	int npos;
	const char *pos[64];
};

extern struct opts o;
extern struct resil *ctl; /* the control connection (libctl.c) */

/* resilctl.c: output, time, errors, the enums' words. */
void json_str(FILE *f, const char *s);
int64_t clock_ns(clockid_t id);
void fmt_utc(int64_t unix_ns, char *buf, size_t len);
int say_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fail(int err, const char *name);
/* the control socket's path (--socket, $RESIL_SOCKET, the default) */
const char *socket_path(void);
/* One request (name: the policy, for the error); 0, or 1 once the error is
 * said. */
int request(Resil__Request *req, Resil__Response **resp, const char *name);
const char *state_word(Resil__BreakerState s);
void print_policy_fields(const Resil__PolicyInfo *p, bool stats);

/* resilctl_show.c: `resilctl show NAME` (--key: o.key); the exit code.
 * fleet_word: the fleet's breaker (0 closed, 1 open, 2 probing). */
int cmd_show(const char *name);
const char *fleet_word(int64_t v);

/* resilctl_status.c: `resilctl metrics`, `resilctl status`; the exit code. */
int cmd_metrics(void);
int cmd_status(void);

/* resilctl_watch.c: `resilctl watch [NAME...]` (n names); the exit code. */
int cmd_watch(int n, const char *const *names);

#endif

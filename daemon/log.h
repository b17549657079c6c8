/* SPDX-License-Identifier: MIT */
/*
 * log.h - the daemon's logging: one line per message on stderr with a
 * "<N>" syslog priority prefix (journald and systemd understand it), or
 * structured journal entries when stderr is connected to journald.
 *
 * The helpers return their error argument, so a failure is logged and
 * returned in one step:
 *
 *	return log_error_errno(r, "cannot bind %s: %m", path);
 *
 * "%m" stands for strerror(-r) of the error given (not of errno).
 */
#ifndef RESILD_LOG_H
#define RESILD_LOG_H

#include <stdarg.h>
#include <syslog.h>

/* Decide the output once at start: journald (JOURNAL_STREAM names our
 * stderr) or plain stderr lines with priority prefixes. */
void log_open(void);
/* Messages above this priority (LOG_DEBUG > LOG_INFO ...) are dropped. */
void log_set_max_level(int level);
/* Plain "resild: message" lines on stderr, for commands a person runs. */
void log_set_plain(void);
int log_get_max_level(void);

/* Logs and returns err (a negative errno, or 0). */
int log_internal(int level, int err, const char *fields, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int log_internalv(int level, int err, const char *fields, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#define log_debug(...)	 log_internal(LOG_DEBUG, 0, NULL, __VA_ARGS__)
#define log_info(...)	 log_internal(LOG_INFO, 0, NULL, __VA_ARGS__)
#define log_notice(...)	 log_internal(LOG_NOTICE, 0, NULL, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_WARNING, 0, NULL, __VA_ARGS__)
#define log_error(...)	 log_internal(LOG_ERR, 0, NULL, __VA_ARGS__)

#define log_warning_errno(err, ...) log_internal(LOG_WARNING, (err), NULL, __VA_ARGS__)
#define log_error_errno(err, ...)   log_internal(LOG_ERR, (err), NULL, __VA_ARGS__)

/* A structured entry: fields is "KEY=value\n..." (journald) and is dropped
 * on plain stderr, where only the formatted message is printed. */
#define log_struct(level, fields, ...) log_internal((level), 0, (fields), __VA_ARGS__)

#endif

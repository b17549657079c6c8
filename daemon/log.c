/* SPDX-License-Identifier: MIT */
/*
 * log.c - stderr lines with "<N>" priority prefixes, or the journal.
 *
 * Why both: under systemd, stderr is a journald stream and "<N>" prefixes
 * set the priority; structured events (policy name, states) want the
 * native protocol, which we use when JOURNAL_STREAM says stderr is the
 * journal. Run by hand, in a container or from a test, the same lines
 * appear on stderr with their prefix so tests can read them.
 *
 * "%m" in a format is replaced by strerror(-err) of the error passed in,
 * never by errno: the daemon passes errors as values.
 *
 * Single-threaded daemon: no locking. A message longer than the line
 * buffer is truncated, never split.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "log.h"

static int max_level = LOG_INFO;
static int use_journal;
static int plain; /* a command a person runs (--check-config): no "<N>" */

void log_open(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	use_journal = 0;
	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return;
	if (fstat(STDERR_FILENO, &st) < 0)
		return;
	use_journal = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_max_level(int level)
{
	max_level = level;
}

void log_set_plain(void)
{
	plain = 1;
	use_journal = 0;
}

int log_get_max_level(void)
{
	return max_level;
}

/* Expand %m into strerror(-err), leaving everything else to vsnprintf. */
static void expand_m(char *out, size_t len, const char *fmt, int err)
{
	const char *msg = strerror(err < 0 ? -err : err);
	size_t o = 0;

	for (const char *p = fmt; *p && o + 1 < len; p++) {
		if (p[0] == '%' && p[1] == '%') {
			if (o + 2 < len) {
				out[o++] = '%';
				out[o++] = '%';
			}
			p++;
			continue;
		}
		if (p[0] == '%' && p[1] == 'm') {
			for (const char *m = msg; *m && o + 2 < len; m++) {
				if (*m == '%')
					continue;
				out[o++] = *m;
			}
			p++;
			continue;
		}
		out[o++] = *p;
	}
	out[o] = '\0';
}

int log_internalv(int level, int err, const char *fields, const char *fmt, va_list ap)
{
	char f[512], line[2048];
	int saved = errno;

	if (level > max_level)
		return err;
	expand_m(f, sizeof(f), fmt, err);
	vsnprintf(line, sizeof(line), f, ap);

	if (use_journal) {
		struct iovec iov[16];
		char prio[32], msgf[2100];
		char fb[1024];
		int n = 0;

		snprintf(prio, sizeof(prio), "PRIORITY=%d", level);
		snprintf(msgf, sizeof(msgf), "MESSAGE=%s", line);
		iov[n++] = (struct iovec){prio, strlen(prio)};
		iov[n++] = (struct iovec){msgf, strlen(msgf)};
		iov[n++] = (struct iovec){"SYSLOG_IDENTIFIER=resild", 24};
		if (fields) {
			/* one iovec per "KEY=value" line */
			snprintf(fb, sizeof(fb), "%s", fields);
			for (char *s = fb, *e; s && *s && n < 16; s = e) {
				e = strchr(s, '\n');
				if (e)
					*e++ = '\0';
				if (*s)
					iov[n++] = (struct iovec){s, strlen(s)};
			}
		}
		if (sd_journal_sendv(iov, n) >= 0) {
			errno = saved;
			return err;
		}
	}
	if (plain)
		fprintf(stderr, "resild: %s\n", line);
	else
		fprintf(stderr, "<%d>%s\n", level, line);
	errno = saved;
	return err;
}

int log_internal(int level, int err, const char *fields, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_internalv(level, err, fields, fmt, ap);
	va_end(ap);
	return err;
}

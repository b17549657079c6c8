/* SPDX-License-Identifier: MIT */
/*
 * resilctl.c - inspect and steer resild from the command line.
 *
 * Size: above 900 lines on purpose: one function per command (cmd_*)
 * over the same output helpers, control requests and error words; the two
 * commands with sections of their own are resilctl_show.c and
 * resilctl_top.c.
 *
 *   resilctl [--socket PATH] [--json] COMMAND [ARGS...]
 *
 * Global options go before or after the command; the socket defaults to
 * $RESIL_SOCKET, then /run/resild/control.sock. Every command is one or a
 * few control requests (libresil's control connection, libctl.c); nothing
 * here maps the segments, so resilctl works for any member of the socket's
 * group and what it prints is what the daemon answers.
 *
 * Errors say what to do: a daemon that is not running gives the command
 * that starts it; a refusal prints the daemon's message, which names the
 * group needed; an invalid configuration prints the daemon's message,
 * which names the pair ("in 'k = v': ...") or the line. Exit codes: 0 ok,
 * 1 error, 2 usage.
 *
 * --json: what a command answers is one JSON value on stdout (watch: one
 * object per line); an error is one object on stderr, {"errno": N,
 * "error": "ENAME", "message": "..."}, so stdout never holds anything but
 * answers and the exit status says which one came. Times are UTC, ISO
 * 8601 with milliseconds ("2026-12-01T23:04:05.678Z"), and in Unix ms
 * beside them; durations are numbers in the unit their name ends with
 * (_ms, _ns); rates and thresholds in percent (_pct). A configuration is
 * an object of its keys: plain numbers as numbers, yes/no as booleans,
 * durations and everything else as the strings the configuration writes
 * ("30s", "100/s", "count:100"; a zero duration is written 0, a number).
 *
 * `show` is resilctl_show.c, `top` resilctl_top.c; what this file and
 * show share is in resilctl_priv.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "breaker.h"
#include "internal.h"
#include "resil.pb-c.h"
#include "resilctl_priv.h"
#include "resilctl_top.h"
#include "seg.h"

/* the protocol's enums are names.h's lists (resilctl turns them into words) */
RESIL_NAMES_PROTO_CHECK

#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: resilctl [--socket PATH] [--json] COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  list                       every policy with its state\n"
    "  show NAME [--key K]        state and why (breaker, limiter, bulkhead, budget),\n"
    "                             configuration, counters (K: one key of a keyed limiter)\n"
    "  create NAME 'k = v; ...'   define a new policy (refused if NAME exists)\n"
    "  apply NAME 'k = v; ...'    create NAME, or re-define it (state kept where it can)\n"
    "  update NAME 'k = v; ...'   change a policy's configuration (state is kept)\n"
    "                             create, apply, update: a runtime change, which\n"
    "                             declarations from code do not undo\n"
    "  revert NAME                drop the runtime change: back to the policy's file,\n"
    "                             else to the newest declaration from code\n"
    "  delete NAME                remove a policy\n"
    "  force-open NAME            hold the breaker open\n"
    "  force-closed NAME          back to normal operation (a closed breaker)\n"
    "  disable NAME               the breaker admits everything and records nothing\n"
    "  reset NAME                 fresh state: counters, windows, breaker closed\n"
    "  metrics                    Prometheus text exposition\n"
    "  watch [NAME...]            one line per event, UTC times (--json: one object per\n"
    "                             line); reconnects when resild comes back\n"
    "  top [--sort ...]           a live table of every policy (top --help)\n"
    "  reload                     read the configuration files again; prints the\n"
    "                             error (FILE:LINE) and exits 1 if it did not apply\n"
    "  status                     the daemon: version, uptime, clients, policies,\n"
    "                             memory use, last reload, metrics listener\n"
    "\n"
    "options:\n"
    "  --socket PATH   control socket ($RESIL_SOCKET, else /run/resild/control.sock)\n"
    "  --json          JSON output; errors as JSON on stderr (resilctl(1))\n"
    "  --version       the version of resilctl\n"
    "  --help          this text\n";

struct opts o;
struct resil *ctl;
static volatile sig_atomic_t stop_watch;

/* An errno's symbolic name ("ENOENT"), for --json errors. */
static const char *errno_name(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "EIO";
}

/*
 * Report an error (err: a positive errno) and return 1: "resilctl: MSG" on
 * stderr, or with --json {"errno": N, "error": "ENAME", "message": "MSG"}
 * on stderr (see the top).
 */
int say_error(int err, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!o.json) {
		fprintf(stderr, "resilctl: %s\n", msg);
		return 1;
	}
	fprintf(stderr, "{\"errno\":%d,\"error\":", err);
	json_str(stderr, errno_name(err));
	fprintf(stderr, ",\"message\":");
	json_str(stderr, msg);
	fprintf(stderr, "}\n");
	return 1;
}

static int usage(const char *why)
{
	if (why && o.json) {
		say_error(EINVAL, "%s (resilctl --help)", why);
		return EXIT_USAGE;
	}
	if (why)
		fprintf(stderr, "resilctl: %s\n\n", why);
	fputs(usage_text, why ? stderr : stdout);
	return why ? EXIT_USAGE : 0;
}

/* ---- output helpers ---- */

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		switch (c) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		default:
			if (c < 0x20)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		}
	}
	fputc('"', f);
}

/* A JSON number as the text writes it: -?digits[.digits][e[+-]digits],
 * no leading zero. */
static bool json_number(const char *s, size_t n)
{
	size_t i = 0;

	if (i < n && s[i] == '-')
		i++;
	if (i >= n || s[i] < '0' || s[i] > '9')
		return false;
	if (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9')
		return false;
	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++;
	if (i < n && s[i] == '.') {
		if (++i >= n || s[i] < '0' || s[i] > '9')
			return false;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || s[i] < '0' || s[i] > '9')
			return false;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return i == n;
}

static void json_strn(FILE *f, const char *s, size_t n)
{
	char buf[1024];

	snprintf(buf, sizeof(buf), "%.*s", (int)(n < sizeof(buf) ? n : sizeof(buf) - 1), s);
	json_str(f, buf);
}

/* A configuration's "key = value" lines as an object (see the top for the
 * types). */
static void print_config_json(const char *config)
{
	bool first = true;

	putchar('{');
	for (const char *s = config; s && *s;) {
		const char *e = strchr(s, '\n'), *eq, *k, *ke, *v, *ve;
		size_t len = e ? (size_t)(e - s) : strlen(s);

		eq = memchr(s, '=', len);
		if (eq) {
			for (k = s; k < eq && *k == ' '; k++)
				;
			for (ke = eq; ke > k && ke[-1] == ' '; ke--)
				;
			for (v = eq + 1; v < s + len && *v == ' '; v++)
				;
			for (ve = s + len; ve > v && ve[-1] == ' '; ve--)
				;
			if (!first)
				putchar(',');
			first = false;
			json_strn(stdout, k, (size_t)(ke - k));
			putchar(':');
			if (json_number(v, (size_t)(ve - v)))
				printf("%.*s", (int)(ve - v), v);
			else if ((ve - v == 3 && !strncmp(v, "yes", 3)) ||
				 (ve - v == 2 && !strncmp(v, "on", 2)))
				fputs("true", stdout);
			else if ((ve - v == 2 && !strncmp(v, "no", 2)) ||
				 (ve - v == 3 && !strncmp(v, "off", 3)))
				fputs("false", stdout);
			else
				json_strn(stdout, v, (size_t)(ve - v));
		}
		s = e ? e + 1 : s + len;
	}
	putchar('}');
}

/* ---- time ---- */

int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A CLOCK_MONOTONIC time of this host (events, the policies' clock) as Unix
 * time in ns: off by the time between the two readings. */
static int64_t mono_to_unix_ns(int64_t mono)
{
	return clock_ns(CLOCK_REALTIME) - (clock_ns(CLOCK_MONOTONIC) - mono);
}

/* "2026-12-01T23:04:05.678Z": ISO 8601, UTC, milliseconds (floor). */
void fmt_utc(int64_t unix_ns, char *buf, size_t len)
{
	time_t t =
	    (time_t)(unix_ns >= 0 ? unix_ns / 1000000000 : (unix_ns - 999999999) / 1000000000);
	int ms = (int)((unix_ns - (int64_t)t * 1000000000) / 1000000);
	struct tm tm;
	char d[32];

	gmtime_r(&t, &tm);
	strftime(d, sizeof(d), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03dZ", d, ms);
}

/* ---- errors ---- */

static const char *socket_path(void)
{
	return resil_priv_socket_path(o.socket);
}

int fail(int err, const char *name)
{
	const char *msg = resil_last_error();
	const char *sock = socket_path();

	switch (-err) {
	case ECONNREFUSED:
	case ENOENT:
		if (ctl->ctl_fd < 0 && -err == ECONNREFUSED && !strncmp(sock, "/run/resild/", 12)) {
			/* the file is there and nothing listens: under systemd,
			 * the socket unit stopped or failed (a failed one stays
			 * failed until reset) */
			char unit[128];

			if (!strcmp(sock, "/run/resild/control.sock"))
				snprintf(unit, sizeof(unit), "resild");
			else
				snprintf(unit, sizeof(unit), "resild@%.*s",
					 (int)strcspn(sock + 12, "."), sock + 12);
			return say_error(-err,
					 "nothing listens on %s: %s.socket is stopped or failed "
					 "(`systemctl status %s.socket` says which); start it with "
					 "`systemctl reset-failed %s.socket %s.service; systemctl "
					 "start %s.socket`",
					 sock, unit, unit, unit, unit, unit);
		}
		if (ctl->ctl_fd < 0)
			return say_error(-err,
					 "resild is not running on %s: start it with "
					 "`resild --foreground --socket %s` or `systemctl start "
					 "resild.socket`",
					 sock, sock);
		if (name)
			return say_error(-err, "unknown policy %s", name);
		return say_error(-err, "%s", *msg ? msg : "unknown policy");
	case ETIMEDOUT:
		return say_error(-err, "resild on %s did not answer within %d ms", sock,
				 resil_priv_timeout_ms());
	case EACCES:
	case EPERM:
		return say_error(-err, "permission denied%s%s", *msg ? ": " : "", msg);
	case EINVAL:
		if (name && (!strcmp(o.pos[0], "create") || !strcmp(o.pos[0], "apply") ||
			     !strcmp(o.pos[0], "update")))
			return say_error(-err, "invalid configuration for %s: %s", name,
					 *msg ? msg : strerror(-err));
		if (name)
			return say_error(-err, "%s: %s", name, *msg ? msg : strerror(-err));
		return say_error(-err, "invalid request: %s", *msg ? msg : strerror(-err));
	default:
		return say_error(-err, "%s%s%s", strerror(-err), *msg ? ": " : "", msg);
	}
}

static int connect_ctl(void)
{
	int err;

	err = resil_priv_open_ctl(&ctl, o.socket);
	if (err < 0) {
		say_error(-err, "%s", *resil_last_error() ? resil_last_error() : strerror(-err));
		return err;
	}
	err = resil_priv_ctl_ensure(ctl);
	if (err < 0) {
		fail(err, NULL);
		return err;
	}
	return 0;
}

static int request(Resil__Request *req, Resil__Response **resp, const char *name)
{
	int err = resil_priv_request(ctl, req, resp, NULL, NULL);

	if (err < 0)
		return fail(err, name);
	return 0;
}

/* ---- the protocol's enums in the words users read ---- */

/* BreakerState: RESIL_STATE_* plus one, 0 for a policy without a breaker */
const char *state_word(Resil__BreakerState s)
{
	return s == RESIL__BREAKER_STATE__BREAKER_NONE ? "none"
						       : resil_breaker_state_name((int)s - 1);
}

/* Outcome: RESIL_DEFINE_* plus one, 0 for no define */
static const char *outcome_word(Resil__Outcome r)
{
	return r == RESIL__OUTCOME__OUTCOME_NONE ? "" : resil_define_name((uint32_t)r - 1);
}

static const char *metrics_state_word(Resil__MetricsState m)
{
	return resil_listener_name((uint32_t)m);
}

static const char *fallback_word(Resil__ClusterFallback f)
{
	return resil_fallback_name((uint32_t)f);
}

/* ---- commands ---- */

/* The fields of a policy object, without its closing brace. */
void print_policy_fields(const Resil__PolicyInfo *p, bool stats)
{
	printf("{\"name\":");
	json_str(stdout, p->name);
	printf(",\"slot\":%u,\"generation\":%u,\"state\":", p->slot, p->generation);
	json_str(stdout, state_word(p->breaker));
	printf(",\"owner_uid\":%u,\"from_file\":%s", p->owner_uid, p->from_file ? "true" : "false");
	if (stats) {
		bool first = true;

		printf(",\"config\":");
		print_config_json(p->config);
		printf(",\"stats\":{");
		for (size_t i = 0; i < p->n_stats; i++) {
			if (!strncmp(p->stats[i]->name, "why_", 4))
				continue; /* in "why" */
			if (!first)
				putchar(',');
			first = false;
			json_str(stdout, p->stats[i]->name);
			printf(":%" PRId64, p->stats[i]->value);
		}
		putchar('}');
	}
}

static void print_policy_json(const Resil__PolicyInfo *p, bool stats)
{
	print_policy_fields(p, stats);
	putchar('}');
}

static int cmd_list(void)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__List l = RESIL__LIST__INIT;
	char after[RESIL_NAME_MAX] = "";
	bool first = true, more = true;
	int n = 0;

	req.body_case = RESIL__REQUEST__BODY_LIST;
	req.list = &l;
	if (o.json)
		putchar('[');
	else
		printf("%-32s %-13s %6s %6s %s\n", "NAME", "STATE", "SLOT", "GEN", "OWNER");
	while (more) {
		Resil__Response *resp = NULL;

		l.after = after;
		l.limit = 256;
		if (request(&req, &resp, NULL))
			return 1;
		if (resp->body_case != RESIL__RESPONSE__BODY_LIST) {
			resil__response__free_unpacked(resp, NULL);
			return say_error(EPROTO, "unexpected answer to list");
		}
		for (size_t i = 0; i < resp->list->n_policies; i++) {
			Resil__PolicyInfo *p = resp->list->policies[i];

			if (o.json) {
				if (!first)
					putchar(',');
				print_policy_json(p, false);
			} else {
				printf("%-32s %-13s %6u %6u %u%s\n", p->name,
				       state_word(p->breaker), p->slot, p->generation, p->owner_uid,
				       p->from_file ? " (file)" : "");
			}
			first = false;
			snprintf(after, sizeof(after), "%s", p->name);
			n++;
		}
		more = resp->list->more && resp->list->n_policies > 0;
		resil__response__free_unpacked(resp, NULL);
	}
	if (o.json)
		printf("]\n");
	return 0;
}

static int done(const char *what, const char *name)
{
	if (o.json) {
		printf("{\"ok\":true,\"command\":");
		json_str(stdout, what);
		printf(",\"policy\":");
		json_str(stdout, name);
		printf("}\n");
	} else {
		printf("%s: %s\n", name, what);
	}
	return 0;
}

/* create: a new name only; apply: create, or re-define (state kept where
 * the shape allows); update: an existing policy, the keys given replace
 * those keys. */
static int cmd_define(const char *cmd, const char *name, const char *config)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;
	Resil__Response *resp = NULL;
	bool create = strcmp(cmd, "update") != 0;
	char what[16];

	/* one Define, one round trip: create must not find the name, update
	 * must (and merges), apply either */
	df.name = (char *)name;
	df.config = (char *)config;
	df.must_not_exist = !strcmp(cmd, "create");
	df.merge = !create;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	if (request(&req, &resp, name))
		return 1;
	snprintf(what, sizeof(what), "%s",
		 !strcmp(cmd, "create") ? "created"
		 : create		? "applied"
					: "updated");
	if (resp->body_case == RESIL__RESPONSE__BODY_POLICY && resp->policy->result)
		snprintf(what, sizeof(what), "%s", outcome_word(resp->policy->result));
	resil__response__free_unpacked(resp, NULL);
	return done(what, name);
}

static int cmd_delete(const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Delete d = RESIL__DELETE__INIT;
	Resil__Response *resp = NULL;

	d.name = (char *)name;
	req.body_case = RESIL__REQUEST__BODY_DELETE;
	req.delete_ = &d;
	if (request(&req, &resp, name))
		return 1;
	resil__response__free_unpacked(resp, NULL);
	return done("deleted", name);
}

/* revert: the runtime change goes, the configuration beneath comes back */
static int cmd_revert(const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Revert rv = RESIL__REVERT__INIT;
	Resil__Response *resp = NULL;
	const char *what = "reverted";

	rv.name = (char *)name;
	req.body_case = RESIL__REQUEST__BODY_REVERT;
	req.revert = &rv;
	if (request(&req, &resp, name))
		return 1;
	if (resp->body_case == RESIL__RESPONSE__BODY_POLICY && resp->policy->origin)
		what = resp->policy->origin->kind == RESIL__ORIGIN_KIND__ORIGIN_FILE
			   ? "reverted to its file"
			   : "reverted to its declaration";
	resil__response__free_unpacked(resp, NULL);
	return done(what, name);
}

/* state: RESIL_STATE_*; reset: closed, and the permits held unregistered freed */
static int cmd_force(const char *name, int state, bool reset, const char *what)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;
	Resil__Response *resp = NULL;

	f.name = (char *)name;
	f.target = (Resil__BreakerState)(state + 1);
	f.reset = reset;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	if (request(&req, &resp, name))
		return 1;
	resil__response__free_unpacked(resp, NULL);
	return done(what, name);
}

/* A sample's value as the exposition writes it: the shortest form that
 * reads back the same double; +Inf, -Inf, NaN. */
static void fmt_value(double v, char *buf, size_t len)
{
	if (isnan(v)) {
		snprintf(buf, len, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, len, "%cInf", v > 0 ? '+' : '-');
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* s with the exposition's escapes: \\ and \n, and \" in a label value */
static void put_escaped(const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", stdout);
		else if (*s == '\n')
			fputs("\\n", stdout);
		else if (*s == '"' && quote)
			fputs("\\\"", stdout);
		else
			putchar(*s);
	}
}

/* The families of a Metrics reply as the Prometheus text exposition
 * (what resild's HTTP endpoint serves). */
static void print_metrics_text(const Resil__MetricsReply *m)
{

	for (size_t i = 0; i < m->n_families; i++) {
		const Resil__MetricFamily *f = m->families[i];

		if (*f->help) {
			printf("# HELP %s ", f->name);
			put_escaped(f->help, false);
			putchar('\n');
		}
		if ((unsigned)f->type <= RESIL_MT_SUMMARY)
			printf("# TYPE %s %s\n", f->name, resil_mtype_name((uint32_t)f->type));
		for (size_t j = 0; j < f->n_samples; j++) {
			const Resil__Sample *x = f->samples[j];
			char v[40];

			fputs(x->name, stdout);
			for (size_t l = 0; l < x->n_labels; l++) {
				printf("%s%s=\"", l ? "," : "{", x->labels[l]->name);
				put_escaped(x->labels[l]->value, true);
				putchar('"');
			}
			if (x->n_labels)
				putchar('}');
			/* as the daemon's text writes it: its decimals, an integer
			 * as one */
			if (x->decimals && isfinite(x->value))
				snprintf(v, sizeof(v), "%.*f",
					 (int)(x->decimals > 17 ? 17 : x->decimals), x->value);
			else if (isfinite(x->value) && x->value == trunc(x->value) &&
				 fabs(x->value) < 1e19)
				snprintf(v, sizeof(v), "%.0f", x->value);
			else
				fmt_value(x->value, v, sizeof(v));
			printf(" %s\n", v);
		}
	}
	if (m->truncated)
		printf("# cut: a reply holds at most 64 KiB; "
		       "resild --metrics-listen serves all of it\n");
}

/*
 * The samples as {"samples": [{"name": ..., "labels": {...}, "value": N},
 * ...]}, in the exposition's order; +Inf, -Inf and NaN, which JSON has no
 * numbers for, as the strings "+Inf", "-Inf", "NaN".
 */
static void print_metrics_json(const Resil__MetricsReply *m)
{
	bool first = true;

	printf("{\"samples\":[");
	for (size_t i = 0; i < m->n_families; i++) {
		const Resil__MetricFamily *f = m->families[i];

		for (size_t j = 0; j < f->n_samples; j++) {
			const Resil__Sample *x = f->samples[j];
			char v[40];

			printf("%s{\"name\":", first ? "" : ",");
			first = false;
			json_str(stdout, x->name);
			printf(",\"labels\":{");
			for (size_t l = 0; l < x->n_labels; l++) {
				if (l)
					putchar(',');
				json_str(stdout, x->labels[l]->name);
				putchar(':');
				json_str(stdout, x->labels[l]->value);
			}
			fmt_value(x->value, v, sizeof(v));
			if (isfinite(x->value))
				printf("},\"value\":%s}", v);
			else
				printf("},\"value\":\"%s\"}", v);
		}
	}
	printf("]}\n");
}

static int cmd_metrics(void)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Response *resp = NULL;

	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	if (request(&req, &resp, NULL))
		return 1;
	if (resp->body_case != RESIL__RESPONSE__BODY_METRICS) {
		resil__response__free_unpacked(resp, NULL);
		return say_error(EPROTO, "unexpected answer to metrics");
	}
	if (o.json)
		print_metrics_json(resp->metrics);
	else
		print_metrics_text(resp->metrics);
	resil__response__free_unpacked(resp, NULL);
	return 0;
}

static int cmd_reload(void)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Reload rl = RESIL__RELOAD__INIT;
	Resil__Response *resp = NULL;
	const Resil__ReloadReply *rr;
	int ret;

	req.body_case = RESIL__REQUEST__BODY_RELOAD;
	req.reload = &rl;
	if (request(&req, &resp, NULL))
		return 1;
	if (resp->body_case != RESIL__RESPONSE__BODY_RELOAD) {
		resil__response__free_unpacked(resp, NULL);
		fprintf(stderr, "resilctl: unexpected answer to reload\n");
		return 1;
	}
	rr = resp->reload;
	if (o.json) {
		printf("{\"applied\":%s,\"policies\":%u,\"message\":",
		       rr->applied ? "true" : "false", rr->policies);
		json_str(stdout, rr->message);
		printf("}\n");
	} else if (rr->applied) {
		printf("reloaded: %s\n", rr->message);
	} else {
		fprintf(stderr,
			"resilctl: reload failed, the previous configuration keeps running: %s\n",
			rr->message);
	}
	ret = rr->applied ? 0 : 1;
	resil__response__free_unpacked(resp, NULL);
	return ret;
}

/* "3d 4h", "2h 5m", "7m 3s", "12s" */
static void fmt_uptime(uint64_t s, char *buf, size_t len)
{
	if (s >= 86400)
		snprintf(buf, len, "%llud %lluh", (unsigned long long)(s / 86400),
			 (unsigned long long)(s % 86400 / 3600));
	else if (s >= 3600)
		snprintf(buf, len, "%lluh %llum", (unsigned long long)(s / 3600),
			 (unsigned long long)(s % 3600 / 60));
	else if (s >= 60)
		snprintf(buf, len, "%llum %llus", (unsigned long long)(s / 60),
			 (unsigned long long)(s % 60));
	else
		snprintf(buf, len, "%llus", (unsigned long long)s);
}

static void fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || !localtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S %z", &tm))
		snprintf(buf, len, "never");
}

/* policy.scope = global: the exchange with Redis, and each global
 * policy's lease and fleet breaker as this host last exchanged them. */
static void status_cluster_json(const Resil__ClusterStatus *c)
{
	if (!c) {
		printf("null");
		return;
	}
	printf("{\"redis\":");
	json_str(stdout, c->redis);
	printf(",\"name\":");
	json_str(stdout, c->name);
	printf(",\"host\":");
	json_str(stdout, c->host);
	printf(",\"interval_ms\":%" PRIu64 ",\"fallback\":", c->interval_ms);
	json_str(stdout, fallback_word(c->fallback_mode));
	printf(",\"connected\":%s,\"last_error\":", c->connected ? "true" : "false");
	json_str(stdout, c->last_error);
	printf(",\"last_exchange_ms\":%" PRId64 ",\"exchanges\":%" PRIu64
	       ",\"script_calls\":%" PRIu64 ",\"errors\":%" PRIu64
	       ",\"hosts_seen\":%u,\"hosts_live\":%u,\"hosts_expected\":%u,"
	       "\"duplicate_runs\":%u,\"fallback_for_ms\":%" PRIu64 ",\"run\":",
	       c->last_exchange_ms, c->exchanges, c->script_calls, c->errors, c->hosts_seen,
	       c->hosts_live, c->hosts_expected, c->duplicate_runs, c->fallback_for_ms);
	json_str(stdout, c->run);
	printf(",\"round_trip_ms\":%" PRIu64 ",\"lease_length_ms\":%" PRIu64
	       ",\"round_trip_too_long\":%s,\"expired_connected\":%" PRIu64 ",\"policies\":[",
	       c->round_trip_ms, c->lease_length_ms, c->round_trip_too_long ? "true" : "false",
	       c->expired_connected);
	for (size_t i = 0; i < c->n_policies; i++) {
		const Resil__ClusterPolicy *p = c->policies[i];

		printf("%s{\"name\":", i ? "," : "");
		json_str(stdout, p->name);
		if (p->limit)
			printf(",\"share\":%.3f,\"lease_ms\":%" PRId64
			       ",\"demand\":%.3f,\"hosts\":%u",
			       p->share, p->lease_ms, p->demand, p->hosts);
		if (p->breaker) {
			printf(",\"fleet\":");
			json_str(stdout, fleet_word(p->fleet_state));
			printf(",\"fleet_open\":%" PRIu64 ",\"fleet_calls\":%" PRIu64,
			       p->fleet_open, p->fleet_calls);
		}
		printf(",\"conflicts\":%u", p->conflicts);
		if (p->conflicts) {
			printf(",\"conflict_host\":");
			json_str(stdout, p->conflict_host);
		}
		if (p->bulkhead)
			printf(",\"slots\":%u,\"slots_max\":%u,\"slots_lease_ms\":%" PRId64
			       ",\"parked\":%u",
			       p->slots, p->slots_max, p->slots_lease_ms, p->parked);
		if (p->keyed)
			printf(",\"keyed\":{\"published\":%" PRIu64 ",\"charged\":%" PRIu64
			       ",\"owing\":%" PRIu64 "}",
			       p->keyed_published, p->keyed_charged, p->keyed_owing);
		printf(",\"fallback\":");
		json_str(stdout, p->fallback_text);
		printf(",\"script_errors\":%" PRIu64 ",\"error\":", p->script_errors);
		json_str(stdout, p->error);
		printf("}");
	}
	printf("]}");
}

static void status_cluster_text(const Resil__ClusterStatus *c)
{
	if (!c)
		return;
	printf("cluster    %s as host %s, name %s, every %" PRIu64 " ms, fallback %s\n", c->redis,
	       c->host, c->name, c->interval_ms, fallback_word(c->fallback_mode));
	if (c->connected)
		printf("           connected");
	else
		printf("           NOT CONNECTED: %s", *c->last_error ? c->last_error : "not yet");
	if (c->last_exchange_ms >= 0)
		printf(", last exchange %" PRId64 " ms ago", c->last_exchange_ms);
	else
		printf(", no exchange yet");
	printf(" (%" PRIu64 " exchanges, %" PRIu64 " script calls, %" PRIu64
	       " errors), %u hosts seen",
	       c->exchanges, c->script_calls, c->errors, c->hosts_seen);
	if (c->hosts_expected)
		printf(" of --cluster-hosts %u", c->hosts_expected);
	printf(", fallback held %" PRIu64 " s\n", c->fallback_for_ms / 1000);
	printf("           round trip %" PRIu64 " ms, leases of %" PRIu64 " ms, %" PRIu64
	       " ran out while connected\n",
	       c->round_trip_ms, c->lease_length_ms, c->expired_connected);
	if (c->round_trip_too_long)
		printf("           ROUND TRIP TOO LONG: leases stop at half of "
		       "--cluster-fallback-for and run out between exchanges\n");
	if (c->duplicate_runs)
		printf("           DUPLICATE HOST ID: %u other daemon%s run%s as host %s (this run "
		       "%s): each counts as a host; give each its own --cluster-host\n",
		       c->duplicate_runs, c->duplicate_runs > 1 ? "s" : "",
		       c->duplicate_runs > 1 ? "" : "s", c->host, c->run);
	for (size_t i = 0; i < c->n_policies; i++) {
		const Resil__ClusterPolicy *p = c->policies[i];

		if (p->limit)
			printf("  %-16s share %.1f/s, lease %s %" PRId64 " ms, demand %.1f/s, "
			       "%u hosts\n",
			       p->name, p->share, p->lease_ms > 0 ? "for" : "EXPIRED",
			       p->lease_ms > 0 ? p->lease_ms : -p->lease_ms, p->demand, p->hosts);
		if (p->breaker)
			printf("  %-16s fleet breaker %s (opens %" PRIu64 "), %" PRIu64
			       " calls in the fleet's window\n",
			       p->name, fleet_word(p->fleet_state), p->fleet_open, p->fleet_calls);
		if (p->conflicts)
			printf("  %-16s CONFLICT: host %s%s runs it with another configuration\n",
			       p->name, p->conflict_host, p->conflicts > 1 ? " (and more)" : "");
		if (p->bulkhead)
			printf("  %-16s bulkhead %u slots of %u, lease %s %" PRId64
			       " ms, %u parked\n",
			       p->name, p->slots, p->slots_max,
			       p->slots_lease_ms > 0 ? "for" : "EXPIRED",
			       p->slots_lease_ms > 0 ? p->slots_lease_ms : -p->slots_lease_ms,
			       p->parked);
		if (p->keyed)
			printf("  %-16s keyed: each host the whole per-key limit, %" PRIu64
			       " key counts sent, %" PRIu64
			       " admissions of other hosts charged, %" PRIu64 " keys owing\n",
			       p->name, p->keyed_published, p->keyed_charged, p->keyed_owing);
		if ((p->limit || p->bulkhead) && *p->fallback_text)
			printf("  %-16s past its lease: %s\n", p->name, p->fallback_text);
		if (*p->error)
			printf("  %-16s ERROR: %s (%" PRIu64 " so far)\n", p->name, p->error,
			       p->script_errors);
	}
}

static int cmd_status(void)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Status st = RESIL__STATUS__INIT;
	Resil__Response *resp = NULL;
	const Resil__StatusReply *s;
	char up[32], started[64], reloaded[64];

	req.body_case = RESIL__REQUEST__BODY_STATUS;
	req.status = &st;
	if (request(&req, &resp, NULL))
		return 1;
	if (resp->body_case != RESIL__RESPONSE__BODY_STATUS) {
		resil__response__free_unpacked(resp, NULL);
		fprintf(stderr, "resilctl: unexpected answer to status (a resild older than "
				"resilctl?)\n");
		return 1;
	}
	s = resp->status;
	if (o.json) {
		printf("{\"version\":");
		json_str(stdout, s->version);
		printf(",\"pid\":%u,\"socket\":", s->pid);
		json_str(stdout, socket_path());
		printf(",\"started\":%" PRId64 ",\"uptime_s\":%" PRIu64
		       ",\"clients\":%u,\"connections\":%u,\"policies\":%u,\"policy_slots\":%u,"
		       "\"arena_used_bytes\":%" PRIu64 ",\"arena_bytes\":%" PRIu64
		       ",\"records_used\":%u,\"records\":%u,\"adopted\":%s,\"config_dir\":",
		       s->started, s->uptime_s, s->clients, s->connections, s->policies,
		       s->policy_slots, s->arena_used, s->arena_size, s->records_used, s->records,
		       s->adopted ? "true" : "false");
		json_str(stdout, s->config_dir);
		printf(",\"options_file\":");
		json_str(stdout, s->options_file);
		printf(",\"reload\":{\"ok\":%s,\"time\":%" PRId64 ",\"message\":",
		       s->reload_ok ? "true" : "false", s->reload_time);
		json_str(stdout, s->reload_message);
		printf(",\"reloads\":%" PRIu64 ",\"failed\":%" PRIu64 "},\"metrics\":{\"state\":",
		       s->reloads, s->reload_errors);
		json_str(stdout, metrics_state_word(s->metrics));
		printf(",\"listen\":");
		json_str(stdout, s->metrics_listen);
		printf(",\"error\":");
		json_str(stdout, s->metrics_error);
		printf("},\"per_uid\":{\"state_bytes_max\":%" PRIu64
		       ",\"client_rows_max\":%u,\"policies_max\":%u,\"uids\":[",
		       s->state_per_uid, s->clients_per_uid, s->policies_per_uid);
		for (size_t i = 0; i < s->n_uids; i++)
			printf("%s{\"uid\":%u,\"policies\":%u,\"state_bytes\":%" PRIu64
			       ",\"waiting_bytes\":%" PRIu64 ",\"client_rows\":%u,\"exempt\":%s}",
			       i ? "," : "", s->uids[i]->uid, s->uids[i]->policies,
			       s->uids[i]->state_bytes, s->uids[i]->waiting_bytes, s->uids[i]->rows,
			       s->uids[i]->exempt ? "true" : "false");
		printf("]},\"cluster\":");
		status_cluster_json(s->cluster);
		printf("}\n");
		resil__response__free_unpacked(resp, NULL);
		return 0;
	}
	fmt_uptime(s->uptime_s, up, sizeof(up));
	fmt_time(s->started, started, sizeof(started));
	fmt_time(s->reload_time, reloaded, sizeof(reloaded));
	printf("resild %s, pid %u, on %s\n", s->version, s->pid, socket_path());
	printf("up         %s (since %s)%s\n", up, started,
	       s->adopted ? ", state adopted from systemd's fd store" : "");
	printf("clients    %u processes, %u connections\n", s->clients, s->connections);
	printf("policies   %u of %u slots\n", s->policies, s->policy_slots);
	printf("arena      %" PRIu64 " of %" PRIu64 " bytes (%.1f%%)\n", s->arena_used,
	       s->arena_size,
	       s->arena_size ? 100.0 * (double)s->arena_used / (double)s->arena_size : 0);
	printf("records    %u of %u\n", s->records_used, s->records);
	/* what each uid takes, against its share (root and resild's uid, and
	 * the admin group's members, are exempt) */
	printf("per uid    at most %u policies, %u client rows, %" PRIu64 " bytes of state\n",
	       s->policies_per_uid, s->clients_per_uid, s->state_per_uid);
	for (size_t i = 0; i < s->n_uids; i++) {
		const Resil__UidUsage *u = s->uids[i];

		printf("  uid %-8u %4u policies, %" PRIu64 " bytes of state", u->uid, u->policies,
		       u->state_bytes);
		if (u->waiting_bytes)
			printf(" (%" PRIu64 " of them retired, in their grace period)",
			       u->waiting_bytes);
		printf(", %u client rows%s\n", u->rows, u->exempt ? " (exempt)" : "");
	}
	printf("config     %s%s%s\n", s->config_dir, *s->options_file ? ", settings " : "",
	       s->options_file);
	printf("reload     %s at %s: %s (%" PRIu64 " reloads, %" PRIu64 " failed)\n",
	       s->reload_ok ? "ok" : "FAILED", reloaded, s->reload_message, s->reloads,
	       s->reload_errors);
	if (s->metrics == RESIL__METRICS_STATE__METRICS_OFF)
		printf("metrics    off (no metrics_listen, no resild-metrics.socket)\n");
	else if (s->metrics == RESIL__METRICS_STATE__METRICS_FAILED)
		printf("metrics    FAILED: %s\n", s->metrics_error);
	else
		printf("metrics    %s on %s\n", metrics_state_word(s->metrics), s->metrics_listen);
	status_cluster_text(s->cluster);
	resil__response__free_unpacked(resp, NULL);
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop_watch = 1;
}

/*
 * An event's value in its unit: a rate in percent (the daemon sends basis
 * points), a wait or a probe's hold in ms (ns), failures in a row, a keyed
 * table's capacity in keys; unit "" when it has none (text: not printed;
 * --json: the value as the daemon sent it).
 */
/* An event's enums in the words users read. */
struct event_words {
	const char *type, *from, *to, *reason;
	char code[16];
};

static void event_words(const Resil__Event *e, struct event_words *w)
{
	unsigned k = (unsigned)e->kind;

	/* the kinds are the segment's RESIL_EV_* (proto/resil.proto) */
	w->type = resil_event_name(k);
	w->from = w->to = w->reason = "";
	w->code[0] = '\0';
	if (e->kind == RESIL__EVENT_KIND__EVENT_TRANSITION) {
		w->from = state_word(e->from_state);
		w->to = state_word(e->to_state);
		if (e->why)
			w->reason = resil_breaker_why((uint32_t)e->why);
		return;
	}
	if (e->kind == RESIL__EVENT_KIND__EVENT_CONFIG)
		w->to = resil_config_change_name((uint32_t)e->change);
	else if (e->kind == RESIL__EVENT_KIND__EVENT_REPAIRED)
		w->to = resil_word_name(e->word);
	if (e->code) {
		snprintf(w->code, sizeof(w->code), "%u", e->code);
		w->reason = w->code;
	}
}

static const char *event_value(const Resil__Event *e, double *v)
{
	Resil__BreakerWhy why =
	    e->kind == RESIL__EVENT_KIND__EVENT_TRANSITION ? e->why : RESIL__BREAKER_WHY__WHY_NONE;

	*v = (double)e->value;
	if (why == RESIL__BREAKER_WHY__WHY_FAILURE_RATE ||
	    why == RESIL__BREAKER_WHY__WHY_SLOW_RATE) {
		*v = (double)e->value / 100;
		return "%";
	}
	if (why == RESIL__BREAKER_WHY__WHY_WAIT_OVER ||
	    why == RESIL__BREAKER_WHY__WHY_PROBE_TIMEOUT) {
		*v = (double)e->value / 1e6;
		return "ms";
	}
	if (why == RESIL__BREAKER_WHY__WHY_CONSECUTIVE)
		return "failures";
	if (e->kind == RESIL__EVENT_KIND__EVENT_KEYS_FULL)
		return "keys";
	*v = 0;
	return "";
}

static void print_event(const Resil__Event *e)
{
	int64_t unix_ns = mono_to_unix_ns(e->time_ns);
	struct event_words w;
	const char *unit;
	char t[48];
	double v;

	fmt_utc(unix_ns, t, sizeof(t));
	event_words(e, &w);
	unit = event_value(e, &v);
	if (o.json) {
		printf("{\"seq\":%" PRIu64 ",\"time\":\"%s\",\"time_unix_ms\":%" PRId64
		       ",\"type\":",
		       e->seq, t, unix_ns / 1000000);
		json_str(stdout, w.type);
		printf(",\"policy\":");
		json_str(stdout, e->policy);
		printf(",\"from\":");
		json_str(stdout, w.from);
		printf(",\"to\":");
		json_str(stdout, w.to);
		printf(",\"reason\":");
		json_str(stdout, w.reason);
		printf(",\"pid\":%u", e->pid);
		/* who wrote it: resild, or a client's report (daemon/events.c) */
		printf(",\"source\":\"%s\"",
		       e->source == RESIL__EVENT_SOURCE__SOURCE_CLIENT ? "client" : "resild");
		if (e->source == RESIL__EVENT_SOURCE__SOURCE_CLIENT && e->identified)
			printf(",\"uid\":%u", e->uid);
		if (*unit)
			printf(",\"value\":%.3f,\"unit\":\"%s\"", v, unit);
		else
			printf(",\"value\":%" PRIu64, e->value);
		printf("}\n");
	} else {
		printf("%s %s %s", t, *e->policy ? e->policy : "-", w.type);
		if (*w.from || *w.to)
			printf(" %s%s%s", w.from, *w.from ? " -> " : "", w.to);
		if (*w.reason && *unit)
			printf(" (%s %.*f%s%s)", w.reason, !strcmp(unit, "%") ? 2 : 0, v,
			       !strcmp(unit, "%") ? "" : " ",
			       !strcmp(unit, "failures") ? "" : unit);
		else if (*w.reason)
			printf(" (%s)", w.reason);
		else if (*unit)
			printf(" (%.0f %s)", v, unit);
		if (e->source == RESIL__EVENT_SOURCE__SOURCE_CLIENT && e->identified)
			printf(" [reported by client pid %u uid %u]", e->pid, e->uid);
		else if (e->source == RESIL__EVENT_SOURCE__SOURCE_CLIENT)
			printf(" [reported by an unidentified client, says pid %u]", e->pid);
		else if (e->pid)
			printf(" pid %u", e->pid);
		printf(" seq %" PRIu64 "\n", e->seq);
	}
	fflush(stdout);
}

static int subscribe(int n, const char *const *names)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Subscribe s = RESIL__SUBSCRIBE__INIT;
	Resil__Response *resp = NULL;
	int err;

	s.n_names = (size_t)n;
	s.names = (char **)names;
	req.body_case = RESIL__REQUEST__BODY_SUBSCRIBE;
	req.subscribe = &s;
	err = resil_priv_request(ctl, &req, &resp, NULL, NULL);
	if (err == 0)
		resil__response__free_unpacked(resp, NULL);
	return err;
}

/* Sleep ms, or less when a signal comes (no SA_RESTART: nanosleep returns). */
static void nap_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/*
 * watch: subscribe, print each event. When the daemon goes away (the
 * connection closes), say so and subscribe again on a new connection once
 * it answers, trying after 100 ms, then doubling up to 2 s between tries:
 * never a busy loop, and a restarted daemon is seen within 2 s. Events
 * pushed while no daemon drained the ring are delivered by the new daemon
 * when it adopts the segments; those a fresh daemon never had are lost
 * (seq starts again). Only Ctrl-C or SIGTERM end it (exit 0).
 */
static int cmd_watch(int n, const char *const *names)
{
	struct sigaction sa = {.sa_handler = on_signal};
	Resil__Response *resp = NULL;
	int err, backoff = 0;

	err = subscribe(n, names);
	if (err < 0)
		return fail(err, n == 1 ? names[0] : NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop_watch) {
		if (backoff) {
			/* reconnecting */
			nap_ms(backoff);
			if (stop_watch)
				break;
			err = subscribe(n, names);
			if (err == -ECONNREFUSED || err == -ENOENT || err == -ECONNRESET ||
			    err == -EPIPE || err == -ETIMEDOUT || err == -ENOTCONN) {
				backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
				continue;
			}
			if (err < 0)
				return fail(err, n == 1 ? names[0] : NULL);
			backoff = 0;
			if (o.json) {
				fprintf(stderr, "{\"notice\":\"reconnected\",\"socket\":");
				json_str(stderr, socket_path());
				fprintf(stderr, "}\n");
			} else {
				fprintf(stderr, "resilctl: resild on %s is back: watching again\n",
					socket_path());
			}
			continue;
		}
		resp = NULL;
		err = resil_priv_recv_any(ctl, &resp, 500);
		if (err == -ETIMEDOUT || err == -EINTR)
			continue;
		if (err < 0) {
			if (stop_watch)
				break;
			if (err != -ECONNRESET && err != -ENOTCONN && err != -EPIPE &&
			    err != -EIO && err != -EPROTO)
				return fail(err, NULL);
			/* the daemon went away (stopped, restarted, crashed) */
			say_error(
			    ECONNRESET,
			    "resild on %s closed the connection: reconnecting when it is back",
			    socket_path());
			backoff = 100;
			continue;
		}
		if (resp->body_case == RESIL__RESPONSE__BODY_EVENT)
			print_event(resp->event);
		resil__response__free_unpacked(resp, NULL);
	}
	return 0;
}

/* ---- main ---- */

static int need(int n, const char *cmd)
{
	if (o.npos - 1 != n) {
		char why[128];

		snprintf(why, sizeof(why), "%s takes %d argument%s", cmd, n, n == 1 ? "" : "s");
		return usage(why);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd;
	int ret, top = 0;

	/* `top` has options of its own: everything after it is top's */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") || !strcmp(argv[i], "--key")) {
			i++;
			continue;
		}
		if (!strcmp(argv[i], "--json"))
			o.json = true; /* usage errors in JSON too */
		if (argv[i][0] == '-')
			continue;
		if (!strcmp(argv[i], "top"))
			top = i;
		break;
	}
	for (int i = 1; i < (top ? top : argc); i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return usage(NULL);
		if (!strcmp(a, "--version")) {
			printf("resilctl " RESIL_VERSION_STRING "\n");
			return 0;
		}
		if (!strcmp(a, "--json")) {
			o.json = true;
		} else if (!strcmp(a, "--socket") || !strcmp(a, "--key")) {
			if (i + 1 >= argc)
				return usage("option needs a value");
			if (a[2] == 's')
				o.socket = argv[++i];
			else
				o.key = argv[++i];
		} else if (!strncmp(a, "--socket=", 9)) {
			o.socket = a + 9;
		} else if (!strncmp(a, "--key=", 6)) {
			o.key = a + 6;
		} else if (a[0] == '-' && a[1] == '-' && a[2]) {
			char why[128];

			snprintf(why, sizeof(why), "unknown option %s", a);
			return usage(why);
		} else {
			if (o.npos >= (int)RESIL_ARRAY_SIZE(o.pos))
				return usage("too many arguments");
			o.pos[o.npos++] = a;
		}
	}
	if (top)
		return resilctl_top(argc - top - 1, argv + top + 1, o.socket, o.json);
	if (o.npos == 0)
		return usage("no command");
	cmd = o.pos[0];
	if (o.key && strcmp(cmd, "show"))
		return usage("--key goes with show");

	/* check usage before talking to the daemon */
	if (!strcmp(cmd, "list") || !strcmp(cmd, "metrics") || !strcmp(cmd, "reload") ||
	    !strcmp(cmd, "status")) {
		if ((ret = need(0, cmd)))
			return ret;
	} else if (!strcmp(cmd, "show") || !strcmp(cmd, "delete") || !strcmp(cmd, "force-open") ||
		   !strcmp(cmd, "force-closed") || !strcmp(cmd, "disable") ||
		   !strcmp(cmd, "reset") || !strcmp(cmd, "revert")) {
		if ((ret = need(1, cmd)))
			return ret;
	} else if (!strcmp(cmd, "create") || !strcmp(cmd, "apply") || !strcmp(cmd, "update")) {
		if ((ret = need(2, cmd)))
			return ret;
	} else if (strcmp(cmd, "watch")) {
		char why[128];

		snprintf(why, sizeof(why), "unknown command %s", cmd);
		return usage(why);
	}
	for (int i = 1; i < o.npos; i++) {
		if (strlen(o.pos[i]) >= RESIL_NAME_MAX &&
		    !(i == 2 && (!strcmp(cmd, "create") || !strcmp(cmd, "apply") ||
				 !strcmp(cmd, "update")))) {
			say_error(ENAMETOOLONG, "policy name too long (at most %d bytes): %s",
				  RESIL_NAME_MAX - 1, o.pos[i]);
			return EXIT_USAGE;
		}
	}

	if (connect_ctl() < 0) {
		resil_close(ctl);
		return 1;
	}
	if (!strcmp(cmd, "list"))
		ret = cmd_list();
	else if (!strcmp(cmd, "show"))
		ret = cmd_show(o.pos[1]);
	else if (!strcmp(cmd, "create") || !strcmp(cmd, "apply") || !strcmp(cmd, "update"))
		ret = cmd_define(cmd, o.pos[1], o.pos[2]);
	else if (!strcmp(cmd, "delete"))
		ret = cmd_delete(o.pos[1]);
	else if (!strcmp(cmd, "revert"))
		ret = cmd_revert(o.pos[1]);
	else if (!strcmp(cmd, "force-open"))
		ret = cmd_force(o.pos[1], RESIL_STATE_FORCED_OPEN, false, "forced open");
	else if (!strcmp(cmd, "force-closed"))
		ret = cmd_force(o.pos[1], RESIL_STATE_CLOSED, false, "closed");
	else if (!strcmp(cmd, "disable"))
		ret = cmd_force(o.pos[1], RESIL_STATE_DISABLED, false, "disabled");
	else if (!strcmp(cmd, "reset"))
		ret = cmd_force(o.pos[1], RESIL_STATE_CLOSED, true, "reset");
	else if (!strcmp(cmd, "metrics"))
		ret = cmd_metrics();
	else if (!strcmp(cmd, "reload"))
		ret = cmd_reload();
	else if (!strcmp(cmd, "status"))
		ret = cmd_status();
	else
		ret = cmd_watch(o.npos - 1, o.pos + 1);
	resil_close(ctl);
	return ret;
}

/* SPDX-License-Identifier: MIT */
/*
 * resilctl.c - inspect and steer resild from the command line.
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
 * This file: the command line, the output helpers, the control requests
 * and error words, and the commands that change policies (create, apply,
 * update, revert, delete, force-*, disable, reset), list and reload. The
 * others have files of their own: `show` resilctl_show.c, `metrics` and
 * `status` resilctl_status.c, `watch` resilctl_watch.c, `top`
 * resilctl_top.c; what they share with this file is in resilctl_priv.h.
 */
#include <errno.h>
#include <inttypes.h>
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

const char *socket_path(void)
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

int request(Resil__Request *req, Resil__Response **resp, const char *name)
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

/* SPDX-License-Identifier: MIT */
/*
 * resilctl_watch.c - `resilctl watch [NAME...]`: subscribe to the daemon's
 * events (every policy's, or the names given) and print one line per
 * event, with --json one object per line; reconnect when resild comes
 * back. Ctrl-C or SIGTERM end it. The output conventions are resilctl.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "resilctl_priv.h"

static volatile sig_atomic_t stop_watch;

/* A CLOCK_MONOTONIC time of this host (events, the policies' clock) as Unix
 * time in ns: off by the time between the two readings. */
static int64_t mono_to_unix_ns(int64_t mono)
{
	return clock_ns(CLOCK_REALTIME) - (clock_ns(CLOCK_MONOTONIC) - mono);
}

static void on_signal(int sig)
{
	(void)sig;
	stop_watch = 1;
}

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

/*
 * An event's value in its unit: a rate in percent (the daemon sends basis
 * points), a wait or a probe's hold in ms (ns), failures in a row, a keyed
 * table's capacity in keys; unit "" when it has none (text: not printed;
 * --json: the value as the daemon sent it).
 */
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
int cmd_watch(int n, const char *const *names)
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

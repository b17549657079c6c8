/* SPDX-License-Identifier: MIT */
/*
 * resilctl_status.c - `resilctl metrics` and `resilctl status`: one
 * Metrics or Status request each, the answer rendered at the edge.
 *
 * metrics: the Prometheus text exposition of the reply's families (what
 * resild's HTTP endpoint serves), or with --json the samples as one
 * object. status: the daemon (version, uptime, clients, policies, memory,
 * each uid's share, the last reload, the metrics listener) and, with
 * policy.scope = global, the exchange with Redis and each global policy's
 * lease and fleet breaker. The output conventions are resilctl.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "resilctl_priv.h"

/* ---- the enums of a Status reply in the words users read ---- */

static const char *metrics_state_word(Resil__MetricsState m)
{
	return resil_listener_name((uint32_t)m);
}

static const char *fallback_word(Resil__ClusterFallback f)
{
	return resil_fallback_name((uint32_t)f);
}

/* ---- metrics ---- */

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

int cmd_metrics(void)
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

/* ---- status ---- */

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
	printf(",\"reached\":");
	json_str(stdout, c->reached);
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
	if (c->connected && *c->reached)
		printf("           connected through node %s (the seed is out of reach)",
		       c->reached);
	else if (c->connected)
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

int cmd_status(void)
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

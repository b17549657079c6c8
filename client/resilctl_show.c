/* SPDX-License-Identifier: MIT */
/*
 * resilctl_show.c - `resilctl show NAME [--key K]`: one Get request, the
 * policy's state, owner and configuration, then the sections the daemon's
 * stats allow: why it decides as it does (the why_* stats), the fleet's
 * view (policy.scope = global), the keyed limiter and one key, a
 * bulkhead's permits, and the counters left over. Text by default, one
 * JSON object with --json. Only what the daemon answers is printed; a
 * section whose stats the daemon did not send is left out.
 */
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "resilctl_priv.h"

/* ---- show: the keyed limiter and one key ---- */

/* A stat of the reply by name; false when the daemon sent none. */
static bool stat_of(const Resil__PolicyInfo *p, const char *name, int64_t *v)
{
	for (size_t i = 0; i < p->n_stats; i++) {
		if (p->stats[i]->name && !strcmp(p->stats[i]->name, name)) {
			*v = p->stats[i]->value;
			return true;
		}
	}
	return false;
}

/* ,"json":value when the daemon sent the stat. */
static void put_stat(const Resil__PolicyInfo *p, const char *stat, const char *json)
{
	int64_t v;

	if (stat_of(p, stat, &v))
		printf(",\"%s\":%" PRId64, json, v);
}

/* The daemon's stats for a limiter (daemon/ctl.c) and their JSON names: a
 * keyed table's (its empty keys shown only when there were some or the
 * policy rejects them: empty_shown), then limit.dry_run's count (shown
 * only when the policy has dry_run on or the count is not 0: see
 * dry_run_shown). */
static const struct {
	const char *stat, *json;
} limit_stats[] = {
    {.stat = "limit_keys_used", .json = "keys_used"},
    {.stat = "limit_keys_capacity", .json = "keys_capacity"},
    {.stat = "limit_evictions", .json = "evictions"},
    {.stat = "limit_full_rejected", .json = "full_rejected"},
    {.stat = "limit_full_admitted", .json = "full_admitted"},
    {.stat = "limit_empty_keys", .json = "empty_keys"},
    {.stat = "limit_dry_run_rejects", .json = "dry_run_rejects"},
};
static const char *const key_stats[] = {"key_present", "key_tat_ns", "key_count", "key_wait_ns"};

/* Printed in a section of its own, not among the counters. */
static bool stat_in_section(const char *name)
{
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(limit_stats); i++)
		if (!strcmp(name, limit_stats[i].stat))
			return true;
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(key_stats); i++)
		if (!strcmp(name, key_stats[i]))
			return true;
	return !strncmp(name, "permits_", 8) || !strncmp(name, "held_", 5) ||
	       !strncmp(name, "forged_", 7) || !strncmp(name, "why_", 4) ||
	       !strncmp(name, "cluster_", 8);
}

/* ---- show: policy.scope = global (daemon/ctl.c add_cluster_stats) ---- */

const char *fleet_word(int64_t v)
{
	return resil_fleet_name(v >= 0 && v <= RESIL_FLEET_PROBING ? (uint32_t)v : 0);
}

static void show_cluster_json(const Resil__PolicyInfo *p)
{
	int64_t v, conn, last = -1;

	if (!stat_of(p, "cluster_connected", &conn))
		return;
	stat_of(p, "cluster_last_exchange_ms", &last);
	printf(",\"cluster\":{\"connected\":%s,\"last_exchange_ms\":%" PRId64,
	       conn ? "true" : "false", last);
	if (stat_of(p, "cluster_share_milli", &v)) {
		printf(",\"share\":%.3f", (double)v / 1000.0);
		put_stat(p, "cluster_lease_ms", "lease_ms");
		if (stat_of(p, "cluster_demand_milli", &v))
			printf(",\"demand\":%.3f", (double)v / 1000.0);
		put_stat(p, "cluster_hosts", "hosts");
	}
	if (stat_of(p, "cluster_slots", &v)) {
		printf(",\"slots\":%" PRId64, v);
		put_stat(p, "cluster_slots_max", "slots_max");
		put_stat(p, "cluster_slots_parked", "slots_parked");
		put_stat(p, "cluster_slots_lease_ms", "slots_lease_ms");
		put_stat(p, "cluster_slots_hosts", "slots_hosts");
	}
	if (stat_of(p, "cluster_fleet", &v)) {
		printf(",\"fleet\":\"%s\"", fleet_word(v));
		put_stat(p, "cluster_fleet_open", "fleet_open");
		put_stat(p, "cluster_fleet_calls", "fleet_calls");
	}
	put_stat(p, "cluster_keyed_charged", "keyed_charged");
	put_stat(p, "cluster_keyed_owing", "keyed_owing");
	put_stat(p, "cluster_conflicts", "conflicts");
	put_stat(p, "cluster_script_errors", "script_errors");
	printf("}");
}

static void show_cluster_text(const Resil__PolicyInfo *p)
{
	int64_t v, conn, last = -1, lease = 0, demand = 0, hosts = 0, gen = 0, calls = 0;
	int64_t conflicts = 0, failing = 0;

	if (!stat_of(p, "cluster_connected", &conn))
		return;
	stat_of(p, "cluster_last_exchange_ms", &last);
	stat_of(p, "cluster_conflicts", &conflicts);
	stat_of(p, "cluster_failing", &failing);
	/* in sync only when nothing says otherwise */
	printf("cluster     %s", !conn ? "NOT CONNECTED to Redis"
				 : conflicts
				     ? "CONFLICT: another configuration runs under this name"
				 : failing ? "SCRIPT FAILING for this policy (resilctl status)"
					   : "in sync");
	if (last >= 0)
		printf(", last exchange %" PRId64 " ms ago\n", last);
	else
		printf(", no exchange yet\n");
	if (stat_of(p, "cluster_share_milli", &v)) {
		stat_of(p, "cluster_lease_ms", &lease);
		stat_of(p, "cluster_demand_milli", &demand);
		stat_of(p, "cluster_hosts", &hosts);
		printf("  lease     %.1f/s of the global rate, %s %" PRId64 " ms "
		       "(demand here %.1f/s, %" PRId64 " hosts)\n",
		       (double)v / 1000.0, lease > 0 ? "expires in" : "EXPIRED",
		       lease > 0 ? lease : -lease, (double)demand / 1000.0, hosts);
	}
	if (stat_of(p, "cluster_slots", &v)) {
		int64_t max = 0, parked = 0;

		stat_of(p, "cluster_slots_max", &max);
		stat_of(p, "cluster_slots_parked", &parked);
		stat_of(p, "cluster_slots_lease_ms", &lease);
		stat_of(p, "cluster_slots_hosts", &hosts);
		printf("  bulkhead  %" PRId64 " of the fleet's %" PRId64 " slots, %s %" PRId64
		       " ms (%" PRId64 " parked here, %" PRId64 " hosts)\n",
		       v, max, lease > 0 ? "expires in" : "EXPIRED", lease > 0 ? lease : -lease,
		       parked, hosts);
	}
	if (stat_of(p, "cluster_fleet", &v)) {
		stat_of(p, "cluster_fleet_open", &gen);
		stat_of(p, "cluster_fleet_calls", &calls);
		printf("  fleet     breaker %s%s (opens %" PRId64 "), %" PRId64
		       " calls in the fleet's window\n",
		       fleet_word(v), v == 2 ? ": this host probes for the fleet" : "", gen, calls);
	}
	if (stat_of(p, "cluster_keyed_charged", &v)) {
		int64_t owing = 0;

		stat_of(p, "cluster_keyed_owing", &owing);
		printf("  keyed     each host the whole per-key limit, %" PRId64
		       " admissions of other hosts charged here, %" PRId64 " keys owing\n",
		       v, owing);
	}
}

/* Held permits (bulkhead and adaptive) and who holds them, as daemon/ctl.c
 * sends them: permits_held, permits_unregistered, held_row_R_pid_P (P 0:
 * a row nobody holds, a stray claim the daemon frees at its next tick),
 * forged_row_R (claims under row R's id its process does not hold),
 * held_norow_pid_P, held_by_nobody, held_by_other_rows. */
static void show_permits_text(const Resil__PolicyInfo *p)
{
	int64_t held, unreg = 0;
	unsigned row, pid;

	if (!stat_of(p, "permits_held", &held))
		return;
	stat_of(p, "permits_unregistered", &unreg);
	printf("permits held %" PRId64 "\n", held);
	for (size_t i = 0; i < p->n_stats; i++) {
		const char *nm = p->stats[i]->name;

		if (nm && sscanf(nm, "held_row_%u_pid_%u", &row, &pid) == 2)
			printf("  row %-5u pid %-8u %" PRId64 "%s\n", row, pid, p->stats[i]->value,
			       pid ? "" : " (stray: no live client)");
		else if (nm && sscanf(nm, "forged_row_%u", &row) == 1)
			printf("  row %-5u not its     %" PRId64
			       " (claimed under its id, not held by it: freed at the next tick)\n",
			       row, p->stats[i]->value);
		else if (nm && sscanf(nm, "held_norow_pid_%u", &pid) == 1)
			printf("  no row    pid %-8u %" PRId64 "\n", pid, p->stats[i]->value);
		else if (nm && strcmp(nm, "held_by_nobody") == 0)
			printf("  nobody               %" PRId64 " (a word naming no client: freed "
			       "at the next tick)\n",
			       p->stats[i]->value);
	}
	if (stat_of(p, "held_by_other_rows", &held))
		printf("  other rows           %" PRId64 "\n", held);
	if (unreg)
		printf("  without a row        %" PRId64 " (freed when their process is gone, or "
		       "by `resilctl reset`)\n",
		       unreg);
}

/* A wait for people, rounded up (a Retry-After is never early): "850 us",
 * "120 ms", "59 min 59 s", "1 h". */
static void fmt_wait(int64_t ns, char *buf, size_t len)
{
	int64_t s, h, m;
	int n = 0;

	if (ns < 1000000) {
		snprintf(buf, len, "%" PRId64 " us", (ns + 999) / 1000);
		return;
	}
	if (ns < 10 * 1000000000LL) {
		snprintf(buf, len, "%" PRId64 " ms", (ns + 999999) / 1000000);
		return;
	}
	s = (ns + 999999999) / 1000000000;
	h = s / 3600;
	m = s / 60 % 60;
	s %= 60;
	buf[0] = '\0';
	if (h)
		n += snprintf(buf + n, len - (size_t)n, "%" PRId64 " h", h);
	if (m && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64 " min", n ? " " : "", m);
	if (s && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, "%s%" PRId64 " s", n ? " " : "", s);
}

/* The configuration (as the daemon formats it) holds this line. */
static bool config_has_line(const Resil__PolicyInfo *p, const char *line)
{
	size_t n = strlen(line);

	for (const char *s = p->config; s && *s;) {
		const char *e = strchr(s, '\n');
		size_t len = e ? (size_t)(e - s) : strlen(s);

		if (len == n && !strncmp(s, line, n))
			return true;
		s = e ? e + 1 : s + len;
	}
	return false;
}

/* limit.dry_run's count, when there is something to say: the policy counts
 * in dry run, or it did before (the count is not 0). */
static bool dry_run_shown(const Resil__PolicyInfo *p, int64_t *v)
{
	if (!stat_of(p, "limit_dry_run_rejects", v))
		return false;
	return *v != 0 || config_has_line(p, "limit.dry_run = yes");
}

/* A keyed limiter's empty keys, when there is something to say: some
 * came, or the policy rejects them. */
static bool empty_shown(const Resil__PolicyInfo *p, int64_t *v)
{
	if (!stat_of(p, "limit_empty_keys", v))
		return false;
	return *v != 0 || config_has_line(p, "limit.empty_key = reject");
}

static void show_limit_json(const Resil__PolicyInfo *p)
{
	bool first = true;
	int64_t v;

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(limit_stats); i++) {
		if (!stat_of(p, limit_stats[i].stat, &v))
			continue;
		if (!strcmp(limit_stats[i].stat, "limit_dry_run_rejects") && !dry_run_shown(p, &v))
			continue;
		if (!strcmp(limit_stats[i].stat, "limit_empty_keys") && !empty_shown(p, &v))
			continue;
		printf("%s\"%s\":%" PRId64, first ? ",\"limiter\":{" : ",", limit_stats[i].json, v);
		first = false;
	}
	if (!first)
		putchar('}');
	if (!o.key || !stat_of(p, "key_present", &v))
		return;
	printf(",\"key\":{\"key\":");
	json_str(stdout, o.key);
	printf(",\"present\":%s", v ? "true" : "false");
	put_stat(p, "key_tat_ns", "tat_ns");
	put_stat(p, "key_count", "count");
	put_stat(p, "key_wait_ns", "wait_ns");
	putchar('}');
}

static void show_limit_text(const Resil__PolicyInfo *p)
{
	int64_t used, cap, ev = 0, rej = 0, adm = 0, empty = 0, present, wait = 0, count, dry = 0;
	bool keyed =
	    stat_of(p, "limit_keys_used", &used) && stat_of(p, "limit_keys_capacity", &cap);
	char w[64];

	if (keyed) {
		stat_of(p, "limit_evictions", &ev);
		stat_of(p, "limit_full_rejected", &rej);
		stat_of(p, "limit_full_admitted", &adm);
		printf("keyed limiter\n");
		printf("  keys in use                  %" PRId64 " of %" PRId64 "\n", used, cap);
		printf("  evictions                    %" PRId64 "\n", ev);
		printf("  table full, new key refused  %" PRId64 "\n", rej);
		printf("  table full, new key admitted %" PRId64 "\n", adm);
		if (empty_shown(p, &empty))
			printf("  empty keys                   %" PRId64 "\n", empty);
	}
	if (dry_run_shown(p, &dry)) {
		if (!keyed)
			printf("limiter\n");
		printf("  dry-run rejections           %" PRId64 "\n", dry);
	}
	if (!o.key || !stat_of(p, "key_present", &present))
		return;
	if (!present) {
		printf("key %s: not in the table (a fresh key)\n", o.key);
		return;
	}
	stat_of(p, "key_wait_ns", &wait);
	printf("key %s: present, ", o.key);
	if (wait > 0) {
		fmt_wait(wait, w, sizeof(w));
		printf("next permit in %s", w);
	} else {
		printf("a permit passes now");
	}
	if (stat_of(p, "key_count", &count))
		printf(" (weighted count %" PRId64 " in the window)", count);
	putchar('\n');
}

/* ---- show: why the policy decides as it does (the daemon's why_* stats,
 * daemon/ctl.c add_why_stats) ---- */

static void put_pct(int64_t bp)
{
	if (bp < 0)
		bp = 0;
	printf("%" PRId64 ".%02" PRId64, bp / 100, bp % 100);
}

/* ,"json":percent when the daemon sent the stat (basis points). */
static void put_stat_pct(const Resil__PolicyInfo *p, const char *stat, const char *json)
{
	int64_t bp;

	if (stat_of(p, stat, &bp)) {
		printf(",\"%s\":", json);
		put_pct(bp);
	}
}

/* ns as a signed "12.3 s" / "250 ms" for people. */
static void fmt_span(int64_t ns, char *buf, size_t len)
{
	int64_t a = ns < 0 ? -ns : ns;

	if (a < 10 * 1000000000LL)
		snprintf(buf, len, "%" PRId64 " ms", ns / 1000000);
	else
		snprintf(buf, len, "%.1f s", (double)ns / 1e9);
}

static void show_why_json(const Resil__PolicyInfo *p)
{
	int64_t v, since, next = 0, calls = 0;
	char t[48];
	const char *sep = "";

	printf(",\"why\":{");
	if (stat_of(p, "why_since_unix_ns", &since)) {
		int64_t now = clock_ns(CLOCK_REALTIME);

		printf("\"breaker\":{\"state\":");
		json_str(stdout, state_word(p->breaker));
		fmt_utc(since, t, sizeof(t));
		printf(",\"since\":\"%s\",\"since_unix_ms\":%" PRId64, t, since / 1000000);
		if (stat_of(p, "why_next_probe_unix_ns", &next)) {
			fmt_utc(next, t, sizeof(t));
			printf(",\"next_probe\":\"%s\",\"next_probe_unix_ms\":%" PRId64
			       ",\"next_probe_in_ms\":%" PRId64,
			       t, next / 1000000, next > now ? (next - now) / 1000000 : 0);
		}
		put_stat(p, "why_open_streak", "open_streak");
		stat_of(p, "why_window_calls", &calls);
		printf(",\"window\":{\"calls\":%" PRId64, calls);
		put_stat(p, "why_window_failures", "failures");
		put_stat(p, "why_window_slow", "slow");
		put_stat(p, "why_min_calls", "min_calls");
		put_stat_pct(p, "why_failure_rate_bp", "failure_rate_pct");
		put_stat_pct(p, "why_failure_threshold_bp", "failure_threshold_pct");
		put_stat_pct(p, "why_slow_rate_bp", "slow_rate_pct");
		put_stat_pct(p, "why_slow_threshold_bp", "slow_threshold_pct");
		putchar('}');
		if (stat_of(p, "why_probes_in_flight", &v)) {
			printf(",\"probes\":{\"in_flight\":%" PRId64, v);
			put_stat(p, "why_probes_answered", "answered");
			put_stat(p, "why_probes_max", "max");
			putchar('}');
		}
		putchar('}');
		sep = ",";
	}
	if (stat_of(p, "why_limit_available", &v)) {
		printf("%s\"limit\":{\"available\":%" PRId64, sep, v);
		if (stat_of(p, "why_limit_next_ns", &v))
			printf(",\"next_permit_in_ms\":%.3f", (double)v / 1e6);
		putchar('}');
		sep = ",";
	}
	if (stat_of(p, "why_bulkhead_in_use", &v)) {
		printf("%s\"bulkhead\":{\"in_use\":%" PRId64, sep, v);
		put_stat(p, "why_bulkhead_max", "max");
		put_stat(p, "why_bulkhead_waiters", "waiters");
		putchar('}');
		sep = ",";
	}
	if (stat_of(p, "why_budget_tokens_milli", &v))
		printf("%s\"budget\":{\"tokens\":%s%" PRId64 ".%03" PRId64 "}", sep,
		       v < 0 ? "-" : "", (v < 0 ? -v : v) / 1000, (v < 0 ? -v : v) % 1000);
	putchar('}');
}

static void show_why_text(const Resil__PolicyInfo *p)
{
	int64_t v, since, next = 0, calls = 0, fail = 0, slow = 0, min = 0, bp, th;
	int64_t now = clock_ns(CLOCK_REALTIME);
	bool any = false;
	char t[48], span[32];

#define WHY_HEAD() (any ? (void)0 : (void)(any = true, printf("why\n")))
	if (stat_of(p, "why_since_unix_ns", &since)) {
		WHY_HEAD();
		fmt_utc(since, t, sizeof(t));
		fmt_span(now - since, span, sizeof(span));
		printf("  breaker      %s since %s (%s ago)", state_word(p->breaker), t, span);
		if (stat_of(p, "why_open_streak", &v) && v > 0)
			printf(", reopened %" PRId64 " time%s in a row", v, v == 1 ? "" : "s");
		putchar('\n');
		if (stat_of(p, "why_next_probe_unix_ns", &next)) {
			fmt_utc(next, t, sizeof(t));
			if (next > now) {
				fmt_span(next - now, span, sizeof(span));
				printf("  next probe   %s (in %s)\n", t, span);
			} else {
				printf("  next probe   %s (due: the next call probes)\n", t);
			}
		}
		stat_of(p, "why_window_calls", &calls);
		stat_of(p, "why_window_failures", &fail);
		stat_of(p, "why_window_slow", &slow);
		stat_of(p, "why_min_calls", &min);
		if (stat_of(p, "why_probes_in_flight", &v)) {
			int64_t mx = 0;

			stat_of(p, "why_probes_max", &mx);
			printf("  probes       %" PRId64 " in flight, %" PRId64 " of %" PRId64
			       " answered (%" PRId64 " failed, %" PRId64 " slow)\n",
			       v, calls, mx, fail, slow);
		} else {
			printf("  window       %" PRId64 " call%s, %" PRId64 " failed, %" PRId64
			       " slow; rates judged from %" PRId64 " call%s\n",
			       calls, calls == 1 ? "" : "s", fail, slow, min, min == 1 ? "" : "s");
		}
		if (stat_of(p, "why_failure_rate_bp", &bp) &&
		    stat_of(p, "why_failure_threshold_bp", &th)) {
			printf("  failure rate ");
			put_pct(bp);
			printf("%% (opens at ");
			put_pct(th);
			printf("%%)\n");
		}
		if (stat_of(p, "why_slow_rate_bp", &bp) &&
		    stat_of(p, "why_slow_threshold_bp", &th)) {
			printf("  slow rate    ");
			put_pct(bp);
			if (th >= 10000) {
				printf("%% (slowness not judged)\n");
			} else {
				printf("%% (opens at ");
				put_pct(th);
				printf("%%)\n");
			}
		}
	}
	if (stat_of(p, "why_limit_available", &v)) {
		WHY_HEAD();
		if (v > 0) {
			printf("  limiter      %" PRId64 " permit%s pass%s now\n", v,
			       v == 1 ? "" : "s", v == 1 ? "es" : "");
		} else {
			stat_of(p, "why_limit_next_ns", &next);
			fmt_wait(next, t, sizeof(t));
			printf("  limiter      no permit now, the next in %s\n", t);
		}
	}
	if (stat_of(p, "why_bulkhead_in_use", &v)) {
		int64_t mx = 0, w = 0;

		WHY_HEAD();
		stat_of(p, "why_bulkhead_max", &mx);
		stat_of(p, "why_bulkhead_waiters", &w);
		printf("  bulkhead     %" PRId64 " in use of %" PRId64 ", %" PRId64 " waiting\n", v,
		       mx, w);
	}
	if (stat_of(p, "why_budget_tokens_milli", &v)) {
		WHY_HEAD();
		printf("  retry budget %s%" PRId64 ".%03" PRId64 " tokens\n", v < 0 ? "-" : "",
		       (v < 0 ? -v : v) / 1000, (v < 0 ? -v : v) % 1000);
	}
#undef WHY_HEAD
}

/* ---- show: where the configuration came from (daemon/owners.c) ---- */

static const char *origin_word(Resil__OriginKind k)
{
	switch (k) {
	case RESIL__ORIGIN_KIND__ORIGIN_FILE:
		return "file";
	case RESIL__ORIGIN_KIND__ORIGIN_RUNTIME:
		return "runtime";
	case RESIL__ORIGIN_KIND__ORIGIN_DECLARED:
		return "declared";
	default:
		return "unknown";
	}
}

static void show_origin_json(const Resil__PolicyInfo *p)
{
	const Resil__Origin *g = p->origin;

	if (!g)
		return;
	printf(",\"origin\":{\"kind\":\"%s\"", origin_word(g->kind));
	if (g->file && *g->file) {
		printf(",\"file\":");
		json_str(stdout, g->file);
		printf(",\"line\":%u", g->line);
	}
	if (g->kind == RESIL__ORIGIN_KIND__ORIGIN_RUNTIME ||
	    g->kind == RESIL__ORIGIN_KIND__ORIGIN_DECLARED) {
		printf(",\"uid\":%u,\"pid\":%u,\"time\":%" PRId64, g->uid, g->pid, g->time);
		if (g->exe && *g->exe) {
			printf(",\"exe\":");
			json_str(stdout, g->exe);
		}
	}
	if (g->declared_beneath) {
		printf(",\"declared_beneath\":{\"pid\":%u,\"time\":%" PRId64 ",\"differs\":%s",
		       g->declared_pid, g->declared_time, g->declared_differs ? "true" : "false");
		if (g->declared_exe && *g->declared_exe) {
			printf(",\"exe\":");
			json_str(stdout, g->declared_exe);
		}
		putchar('}');
	}
	printf(",\"pending_admitted\":%" PRIu64 ",\"pending_rejected\":%" PRIu64
	       ",\"pending_reports\":%u,\"declarations_superseded\":%" PRIu64 "}",
	       g->pending_admitted, g->pending_rejected, g->pending_processes,
	       g->declarations_superseded);
}

/* "pid N (EXE), uid U, at TIME" */
static void who(uint32_t pid, const char *exe, int uid, int64_t t)
{
	char when[48];

	printf("pid %u", pid);
	if (exe && *exe)
		printf(" (%s)", exe);
	if (uid >= 0)
		printf(", uid %d", uid);
	if (t) {
		fmt_utc(t * 1000000000LL, when, sizeof(when));
		printf(", at %s", when);
	}
}

static void show_origin_text(const Resil__PolicyInfo *p)
{
	const Resil__Origin *g = p->origin;

	if (!g)
		return;
	printf("configured  ");
	switch (g->kind) {
	case RESIL__ORIGIN_KIND__ORIGIN_FILE:
		printf("by %s:%u\n", g->file, g->line);
		break;
	case RESIL__ORIGIN_KIND__ORIGIN_RUNTIME:
		printf("by a runtime change");
		if (g->pid) {
			printf(" of ");
			who(g->pid, NULL, (int)g->uid, g->time);
		} else {
			printf(" made before resild started");
		}
		printf("\n            (it holds until resilctl revert %s", p->name);
		if (g->file && *g->file)
			printf(", or a reload of %s:%u", g->file, g->line);
		printf(")\n");
		break;
	case RESIL__ORIGIN_KIND__ORIGIN_DECLARED:
		printf("by the declaration of ");
		who(g->pid, g->exe, (int)g->uid, g->time);
		printf("\n");
		break;
	default:
		printf("before resild started (who is not known)\n");
		break;
	}
	if (g->declared_beneath) {
		printf("beneath     the declaration of ");
		who(g->declared_pid, g->declared_exe, -1, g->declared_time);
		printf(", %s\n", g->declared_differs ? "which differs" : "the same");
	}
	if (g->declarations_superseded)
		printf("            %" PRIu64
		       " declarations from older processes changed nothing\n",
		       g->declarations_superseded);
	if (g->pending_admitted || g->pending_rejected)
		printf("pending     %" PRIu64 " admitted, %" PRIu64 " rejected by policy.fallback "
		       "before resild was reached (%u reports)\n",
		       g->pending_admitted, g->pending_rejected, g->pending_processes);
}

int cmd_show(const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Get g = RESIL__GET__INIT;
	Resil__Response *resp = NULL;
	Resil__PolicyInfo *p;
	int err;

	g.name = (char *)name;
	if (o.key) {
		g.has_key = true;
		g.key.data = (uint8_t *)o.key;
		g.key.len = strlen(o.key);
	}
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &g;
	err = resil_priv_request(ctl, &req, &resp, NULL, NULL);
	if (err == -ENODATA && o.key) {
		/* --key on a policy without a keyed limiter: the daemon says so */
		return say_error(ENODATA, "%s",
				 *resil_last_error() ? resil_last_error() : "no keyed limiter");
	}
	if (err < 0)
		return fail(err, name);
	if (resp->body_case != RESIL__RESPONSE__BODY_POLICY) {
		resil__response__free_unpacked(resp, NULL);
		return say_error(EPROTO, "unexpected answer to show");
	}
	p = resp->policy;
	if (o.json) {
		print_policy_fields(p, true);
		show_origin_json(p);
		show_limit_json(p);
		show_why_json(p);
		show_cluster_json(p);
		printf("}\n");
	} else {
		printf("policy      %s\n", p->name);
		printf("state       %s\n", state_word(p->breaker));
		printf("slot        %u (generation %u)\n", p->slot, p->generation);
		/* who owns the name: the uid, and the account when there is one */
		{
			struct passwd pw, *pwp = NULL;
			char pwbuf[1024];

			if (getpwuid_r(p->owner_uid, &pw, pwbuf, sizeof(pwbuf), &pwp) != 0)
				pwp = NULL;
			printf("owner uid   %u%s%s%s%s\n", p->owner_uid, pwp ? " (" : "",
			       pwp ? pwp->pw_name : "", pwp ? ")" : "",
			       p->from_file ? " (configuration file)" : "");
		}
		show_origin_text(p);
		printf("config\n");
		for (const char *s = p->config; s && *s;) {
			const char *e = strchr(s, '\n');
			int len = e ? (int)(e - s) : (int)strlen(s);

			if (len)
				printf("  %.*s\n", len, s);
			s = e ? e + 1 : s + len;
		}
		show_why_text(p);
		show_cluster_text(p);
		show_limit_text(p);
		show_permits_text(p);
		if (p->n_stats)
			printf("counters\n");
		for (size_t i = 0; i < p->n_stats; i++)
			if (!stat_in_section(p->stats[i]->name))
				printf("  %-28s %" PRId64 "\n", p->stats[i]->name,
				       p->stats[i]->value);
	}
	resil__response__free_unpacked(resp, NULL);
	return 0;
}

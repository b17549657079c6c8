/* SPDX-License-Identifier: MIT */
/*
 * int_keyshow.c - what `resilctl show` says of a keyed limiter, through a
 * real resild, and how the limiter counts a full table.
 *
 *   - show: limit.rate = 1/h, burst 1, limit.keys = 4; six keys acquire
 *     through libresil. The first four are admitted and then limited for
 *     an hour; limited keys are never evicted, so the fifth and the sixth
 *     find no room and limit.when_full = reject refuses them. resilctl
 *     show (text and --json) reports 4 keys of 4, 0 evictions, 2 refused,
 *     0 admitted-when-full; --key of a used key: present, with a wait in
 *     (0, 1 h]; --key of a refused or never-seen key: not in the table.
 *     The full table pushed RESIL_EV_KEYS_FULL (once when both refusals
 *     came within a second, as they do unless the machine stalls).
 *     --key on a policy without a keyed limiter, or on an unknown one,
 *     fails with a message that says which.
 *   - when_full = admit: the same six keys are all admitted, two of them
 *     counted as admitted-when-full, and the event says "admitted" (a = 1).
 *   - evictions through the daemon (rate 10/s, burst 5: a key admitted
 *     once is not being limited, so a new key replaces one): on real time
 *     only invariants hold (the daemon may sweep idle keys meanwhile):
 *     the table's count equals the policy's `evictions` counter, at most
 *     two, at most 4 keys in use.
 *   - a sliding-approx key shows its weighted count instead of a TAT.
 *   - limit.dry_run: show prints "dry-run rejections" (JSON
 *     dry_run_rejects) for a limiter in dry run (unkeyed: under a
 *     "limiter" heading; keyed: in the table's section), and for one that
 *     counted before dry run went off; never for a limiter that never ran
 *     dry.
 *   - exact counting on a manual clock (embedded mode): six keys at one
 *     instant evict exactly two, counted in the table and in the policy's
 *     RESIL_STAT_EVICTIONS; refusals of new keys at one instant push one
 *     RESIL_EV_KEYS_FULL, 999 ms later still one, at 1 s a second one.
 *
 * Every wait is "eventually, within 10 s" (starting the daemon); nothing
 * sleeps. The daemon runs as the test's user; no root needed.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "limit.h"
#include "stats.h"
#include "testutil.h"

#define HOUR_NS (3600LL * RESIL_NS_PER_S)

static const char *const keys6[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3",
				    "10.0.0.4", "10.0.0.5", "10.0.0.6"};

static struct test_daemon daemon_;
static bool daemon_up;
static char out[65536];

static int setup(void **state)
{
	(void)state;
	if (test_daemon_init(&daemon_) < 0)
		return -1;
	if (test_daemon_start(&daemon_, NULL) < 0) {
		test_daemon_fini(&daemon_);
		return -1;
	}
	daemon_up = true;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (daemon_up)
		test_daemon_fini(&daemon_);
	daemon_up = false;
	return 0;
}

/* resilctl --socket SOCK ARGS... into out; its exit code. */
static int ctl(const char *arg0, ...)
{
	const char *argv[16] = {RESILCTL_PATH, "--socket", daemon_.sock, arg0};
	int n = 4, r;
	va_list ap;

	va_start(ap, arg0);
	while (n < 15 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	r = test_run(argv, NULL, out, sizeof(out));
	if (r < 0 || r > 1) /* usage error, crash: say what it printed */
		fprintf(stderr, "resilctl %s ...: exit %d: %s\n", arg0, r, out);
	return r;
}

/* out holds (or lacks) s; prints out when not, to show what it said. */
static void expect_in(const char *s)
{
	if (!strstr(out, s))
		fprintf(stderr, "expected \"%s\" in:\n%s\n", s, out);
	assert_non_null(strstr(out, s));
}

static void expect_not_in(const char *s)
{
	if (strstr(out, s))
		fprintf(stderr, "did not expect \"%s\" in:\n%s\n", s, out);
	assert_null(strstr(out, s));
}

/* The integer after "name": in a JSON text from `from` on; fails if none. */
static int64_t json_int(const char *from, const char *name)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", name);
	p = from ? strstr(from, pat) : NULL;
	assert_non_null(p);
	return strtoll(p + strlen(pat), NULL, 10);
}

/* RESIL_EV_KEYS_FULL events of slot in [from, to) of r's event ring; the
 * last one's a and value. */
static int keys_full_events(resil_t *r, uint32_t slot, uint64_t from, uint64_t to, uint32_t *a,
			    uint64_t *value)
{
	struct resil_event e;
	int n = 0;

	for (uint64_t i = from; i < to; i++) {
		if (resil_event_read(&r->seg, i, &e) < 0)
			continue;
		if (e.type != RESIL_EV_KEYS_FULL || e.slot != slot)
			continue;
		*a = e.a;
		*value = e.value;
		n++;
	}
	return n;
}

static uint32_t slot_of(resil_t *r, const char *name)
{
	uint32_t slot;
	uint64_t w;

	assert_int_equal(resil_seg_lookup(&r->seg, name, &slot, &w), 0);
	return slot;
}

static uint64_t event_head(resil_t *r)
{
	return ld_acquire(&r->seg.st->event_head);
}

static void test_show_keyed(void **state)
{
	const char *name = "keyshow";
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	uint64_t h0, value = 0;
	int64_t t0, t1, wait, lib_wait, tat;
	uint32_t a = 9;
	const char *k;
	int n;

	(void)state;
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(resil_define(r, name, "limit.rate = 1/h; limit.burst = 1; limit.keys = 4"),
			 0);
	assert_int_equal(resil_policy(r, name, &p), 0);

	/* before any call: an empty table */
	assert_int_equal(ctl("show", name, "--json", NULL), 0);
	expect_in("\"limiter\":{\"keys_used\":0,\"keys_capacity\":4,"
		  "\"evictions\":0,\"full_rejected\":0,\"full_admitted\":0}");

	h0 = event_head(r);
	t0 = test_mono_ns();
	for (int i = 0; i < 4; i++) {
		assert_int_equal(resil_acquire_key(p, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	/* no room: every key is limited for an hour, none may be evicted */
	for (int i = 4; i < 6; i++) {
		assert_int_equal(resil_acquire_key(p, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_REJECT_LIMITED);
		assert_true(resil_permit_wait_ns(&pm) > 0);
	}
	t1 = test_mono_ns();
	/* a used key: limited, Retry-After within the hour */
	assert_int_equal(resil_acquire_key(p, keys6[0], strlen(keys6[0]), &pm),
			 RESIL_REJECT_LIMITED);
	lib_wait = resil_permit_wait_ns(&pm);
	assert_true(lib_wait > 0 && lib_wait <= HOUR_NS);

	/* the full table was announced, at most once a second */
	n = keys_full_events(r, slot_of(r, name), h0, event_head(r), &a, &value);
	if (t1 - t0 < RESIL_NS_PER_S)
		assert_int_equal(n, 1);
	else
		assert_true(n >= 1 && n <= 2);
	assert_int_equal(a, 0); /* refused */
	assert_int_equal(value, 4);

	/* human text */
	assert_int_equal(ctl("show", name, NULL), 0);
	expect_in("keyed limiter\n");
	expect_in("  keys in use                  4 of 4\n");
	expect_in("  evictions                    0\n");
	expect_in("  table full, new key refused  2\n");
	expect_in("  table full, new key admitted 0\n");
	expect_not_in("limit_keys_used"); /* not repeated among the counters */
	expect_not_in("dry-run");	  /* never in dry run */
	expect_not_in("limit_dry_run_rejects");

	/* JSON: the limiter object and the raw stats */
	assert_int_equal(ctl("show", name, "--json", NULL), 0);
	expect_in("\"limiter\":{\"keys_used\":4,\"keys_capacity\":4,"
		  "\"evictions\":0,\"full_rejected\":2,\"full_admitted\":0}");
	assert_int_equal(json_int(out, "limit_keys_used"), 4);
	assert_int_equal(json_int(out, "limit_full_rejected"), 2);
	assert_int_equal(json_int(out, "evictions"), 0); /* the policy's counter */
	assert_int_equal(json_int(out, "rejected_limited"), 3);
	expect_not_in("\"key\":{");

	/* one used key: present, a permit in the future */
	assert_int_equal(ctl("show", name, "--key", keys6[1], NULL), 0);
	expect_in("key 10.0.0.2: present, next permit in ");
	assert_int_equal(ctl("--json", "show", name, "--key", keys6[0], NULL), 0);
	k = strstr(out, "\"key\":{\"key\":\"10.0.0.1\",\"present\":true,");
	assert_non_null(k);
	wait = json_int(k, "wait_ns");
	tat = json_int(k, "tat_ns");
	assert_true(wait > 0 && wait <= HOUR_NS);
	assert_true(wait <= lib_wait); /* asked later, on a clock never behind */
	assert_true(tat > t0 && tat <= t1 + HOUR_NS);
	assert_int_equal(json_int(out, "key_present"), 1);

	/* a refused key was never inserted; an unknown one neither */
	for (int i = 0; i < 2; i++) {
		const char *key = i ? "192.0.2.1" : keys6[4];
		char line[128];

		assert_int_equal(ctl("show", name, "--key", key, NULL), 0);
		snprintf(line, sizeof(line), "key %s: not in the table (a fresh key)\n", key);
		expect_in(line);
		assert_int_equal(ctl("show", name, "--key", key, "--json", NULL), 0);
		expect_in("\"present\":false,\"wait_ns\":0}");
		assert_int_equal(json_int(out, "key_present"), 0);
	}
	/* looking keys up inserted nothing */
	assert_int_equal(ctl("show", name, "--json", NULL), 0);
	assert_int_equal(json_int(out, "limit_keys_used"), 4);

	/* no keyed limiter: an unkeyed one, and none at all */
	assert_int_equal(resil_define(r, "keyshow-unkeyed", "limit.rate = 10/s"), 0);
	assert_int_equal(resil_define(r, "keyshow-breaker", "breaker.window = count:10"), 0);
	assert_int_equal(ctl("show", "keyshow-unkeyed", "--key", "x", NULL), 1);
	expect_in("policy keyshow-unkeyed has no keyed limiter (limit.keys)");
	assert_int_equal(ctl("show", "keyshow-breaker", "--key", "x", NULL), 1);
	expect_in("policy keyshow-breaker has no keyed limiter (limit.keys)");
	assert_int_equal(ctl("show", "keyshow-unkeyed", NULL), 0);
	expect_not_in("keyed limiter");
	expect_not_in("limiter\n");
	expect_not_in("dry-run");
	assert_int_equal(ctl("show", "keyshow-unkeyed", "--json", NULL), 0);
	expect_not_in("\"limiter\":");
	assert_int_equal(json_int(out, "limit_dry_run_rejects"), 0); /* the raw stat */
	assert_int_equal(ctl("show", "keyshow-nosuch", "--key", "x", NULL), 1);
	expect_in("unknown policy keyshow-nosuch");

	resil_close(r);
}

static void test_when_full_admit(void **state)
{
	const char *name = "keyshow-admit";
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	uint64_t h0, value = 0;
	uint32_t a = 9;

	(void)state;
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(resil_define(r, name,
				      "limit.rate = 1/h; limit.burst = 1; limit.keys = 4; "
				      "limit.when_full = admit"),
			 0);
	assert_int_equal(resil_policy(r, name, &p), 0);
	h0 = event_head(r);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(resil_acquire_key(p, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_true(keys_full_events(r, slot_of(r, name), h0, event_head(r), &a, &value) >= 1);
	assert_int_equal(a, 1); /* admitted */

	assert_int_equal(ctl("show", name, "--json", NULL), 0);
	expect_in("\"limiter\":{\"keys_used\":4,\"keys_capacity\":4,"
		  "\"evictions\":0,\"full_rejected\":0,\"full_admitted\":2}");
	assert_int_equal(ctl("show", name, NULL), 0);
	expect_in("  table full, new key admitted 2\n");
	/* admitted without a place in the table: still a fresh key */
	assert_int_equal(ctl("show", name, "--key", keys6[5], NULL), 0);
	expect_in("key 10.0.0.6: not in the table (a fresh key)\n");
	resil_close(r);
}

static void test_evictions_daemon(void **state)
{
	const char *name = "keyshow-evict";
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	int64_t ev, used;

	(void)state;
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(
	    resil_define(r, name, "limit.rate = 10/s; limit.burst = 5; limit.keys = 4"), 0);
	assert_int_equal(resil_policy(r, name, &p), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(resil_acquire_key(p, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(ctl("show", name, "--json", NULL), 0);
	ev = json_int(strstr(out, "\"limiter\":{"), "evictions");
	used = json_int(out, "limit_keys_used");
	assert_true(ev >= 0 && ev <= 2);
	assert_true(used >= 0 && used <= 4);
	assert_int_equal(json_int(out, "limit_evictions"), ev);
	expect_in("\"stats\":{\"calls\":6,\"success\":6,");
	assert_int_equal(json_int(strstr(out, "\"stats\":{"), "evictions"), ev);
	assert_int_equal(json_int(out, "limit_full_rejected"), 0);
	resil_close(r);
}

/* sliding-approx keys hold a weighted count, not a TAT */
static void test_sliding_key(void **state)
{
	const char *name = "keyshow-sliding";
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	const char *k;
	int64_t count;

	(void)state;
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	assert_int_equal(resil_define(r, name,
				      "limit.rate = 2/h; limit.algorithm = sliding-approx; "
				      "limit.keys = 4"),
			 0);
	assert_int_equal(resil_policy(r, name, &p), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(resil_acquire_key(p, "k", 1, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(ctl("show", name, "--key", "k", "--json", NULL), 0);
	k = strstr(out, "\"key\":{\"key\":\"k\",\"present\":true,\"count\":");
	assert_non_null(k);
	/* 2, or 1 if the two calls straddled the boundary of an hour window */
	count = json_int(k, "count");
	assert_true(count >= 1 && count <= 2);
	expect_not_in("tat_ns");
	assert_true(json_int(k, "wait_ns") >= 0 && json_int(k, "wait_ns") <= 2 * HOUR_NS);
	assert_int_equal(ctl("show", name, "--key", "k", NULL), 0);
	expect_in("key k: present, ");
	expect_in(" (weighted count ");
	resil_close(r);
}

/* limit.dry_run: what show says of it, unkeyed and keyed */
static void test_show_dry_run(void **state)
{
	resil_t *r = NULL;
	resil_policy_t *p, *k;
	resil_permit_t pm;

	(void)state;
	assert_int_equal(resil_open(&r, daemon_.sock), 0);
	/* in dry run, nothing counted yet: shown, 0 */
	assert_int_equal(resil_define(r, "keyshow-dry", "limit.rate = 1/h; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(r, "keyshow-dry", &p), 0);
	assert_int_equal(ctl("show", "keyshow-dry", NULL), 0);
	expect_in("limiter\n  dry-run rejections           0\n");
	/* three calls: one admitted by the limiter, two by dry run */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(ctl("show", "keyshow-dry", NULL), 0);
	expect_in("limiter\n  dry-run rejections           2\n");
	expect_not_in("keyed limiter");
	expect_not_in("limit_dry_run_rejects"); /* not repeated among the counters */
	assert_int_equal(ctl("show", "keyshow-dry", "--json", NULL), 0);
	expect_in("\"limiter\":{\"dry_run_rejects\":2}");
	assert_int_equal(json_int(out, "rejected_limited"), 0);
	assert_int_equal(json_int(out, "success"), 3);
	/* dry run off: the count is still said while it is not 0 */
	assert_int_equal(ctl("update", "keyshow-dry", "limit.dry_run = no", NULL), 0);
	assert_int_equal(ctl("show", "keyshow-dry", NULL), 0);
	expect_not_in("limit.dry_run");
	expect_in("  dry-run rejections           2\n");
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_LIMITED);

	/* keyed: in the table's section, last in the JSON object */
	assert_int_equal(resil_define(r, "keyshow-drykeys",
				      "limit.rate = 1/h; limit.keys = 4; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(r, "keyshow-drykeys", &k), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(resil_acquire_key(k, "a", 1, &pm), RESIL_ADMIT);
		resil_release(k, &pm, RESIL_SUCCESS);
	}
	assert_int_equal(ctl("show", "keyshow-drykeys", NULL), 0);
	expect_in("  table full, new key admitted 0\n  dry-run rejections           1\n");
	assert_int_equal(ctl("show", "keyshow-drykeys", "--json", NULL), 0);
	expect_in("\"limiter\":{\"keys_used\":1,\"keys_capacity\":4,\"evictions\":0,"
		  "\"full_rejected\":0,\"full_admitted\":0,\"dry_run_rejects\":1}");
	resil_close(r);
}

/* ---- exact, on a manual clock, without a daemon ---- */

static void limit_info_of(resil_t *r, const char *name, struct resil_limit_info *li,
			  uint64_t *stat_evictions)
{
	const struct resil_rec *rec = test_rec_of(r, name);

	assert_true(resil_has(rec, RESIL_C_LIMIT));
	resil_limit_info(&rec->conf.limit, resil_comp_state(&r->seg, rec, RESIL_C_LIMIT), li);
	*stat_evictions =
	    resil_stats_read(resil_stats_state_of(&r->seg, rec), RESIL_STAT_EVICTIONS);
}

static void test_counting_manual_clock(void **state)
{
	struct test_clock *clk = test_clock_new(1000 * RESIL_NS_PER_S);
	struct resil_limit_info li;
	resil_t *r = NULL;
	resil_policy_t *p, *q;
	resil_permit_t pm;
	uint64_t h0, value = 0, sev = 0;
	uint32_t a = 9, slot;
	char key[32];

	(void)state;
	assert_non_null(clk);
	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, test_clock_fn, clk), 0);

	/* evictions: a key admitted once (burst 5) is not being limited */
	assert_int_equal(
	    resil_define(r, "evict", "limit.rate = 10/s; limit.burst = 5; limit.keys = 4"), 0);
	assert_int_equal(resil_policy(r, "evict", &p), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(resil_acquire_key(p, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	limit_info_of(r, "evict", &li, &sev);
	assert_int_equal(li.size, 4);
	assert_int_equal(li.evictions, 2);
	assert_int_equal(sev, 2);
	assert_int_equal(li.full_rejects, 0);

	/* a full table: one event per second at most */
	assert_int_equal(
	    resil_define(r, "full", "limit.rate = 1/h; limit.burst = 1; limit.keys = 4"), 0);
	assert_int_equal(resil_policy(r, "full", &q), 0);
	slot = slot_of(r, "full");
	for (int i = 0; i < 4; i++) {
		assert_int_equal(resil_acquire_key(q, keys6[i], strlen(keys6[i]), &pm),
				 RESIL_ADMIT);
		resil_release(q, &pm, RESIL_SUCCESS);
	}
	h0 = event_head(r);
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "new-%d", i);
		assert_int_equal(resil_acquire_key(q, key, strlen(key), &pm), RESIL_REJECT_LIMITED);
	}
	assert_int_equal(keys_full_events(r, slot, h0, event_head(r), &a, &value), 1);
	assert_int_equal(a, 0);
	assert_int_equal(value, 4);
	test_clock_advance(clk, RESIL_NS_PER_S - 1000000);
	assert_int_equal(resil_acquire_key(q, "late", 4, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(keys_full_events(r, slot, h0, event_head(r), &a, &value), 1);
	test_clock_advance(clk, 1000000);
	assert_int_equal(resil_acquire_key(q, "later", 5, &pm), RESIL_REJECT_LIMITED);
	assert_int_equal(keys_full_events(r, slot, h0, event_head(r), &a, &value), 2);
	limit_info_of(r, "full", &li, &sev);
	assert_int_equal(li.size, 4);
	assert_int_equal(li.evictions, 0);
	assert_int_equal(sev, 0);
	assert_int_equal(li.full_rejects, 7);

	resil_close(r);
	test_clock_free(clk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_show_keyed),	     cmocka_unit_test(test_when_full_admit),
	    cmocka_unit_test(test_evictions_daemon), cmocka_unit_test(test_sliding_key),
	    cmocka_unit_test(test_show_dry_run),     cmocka_unit_test(test_counting_manual_clock),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}

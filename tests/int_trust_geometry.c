/* SPDX-License-Identifier: MIT */
/*
 * int_trust_geometry.c - a client rewrites the geometry words of the state
 * header (caps, offsets, sizes, the arena's bump pointer) in the live
 * state segment while resild serves defines and ticks:
 *   - the arena: arena_used and arena_size pointed at the end of the
 *     state segment (where resild's own writable mapping of the config
 *     segment may follow): a define must not write outside the arena.
 *     The configuration stays intact: every policy still resolves, a new
 *     client still maps the pair, the attacker's define lands in the
 *     arena;
 *   - the event ring and the client table: event_off, event_cap,
 *     client_off, client_cap pointed outside: defines push events, the
 *     tick drains them and scans rows; resild lives and answers;
 *   - the daemon repairs the header's copy (it addresses nothing through
 *     it) and counts the repair in resil_state_repairs_total.
 * Every wait is "eventually, within 10 s".
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "policy.h"
#include "testutil.h"

static const char *const NAMES[] = {"billing", "payments", "search"};

static bool header_repaired(void *ctx)
{
	resil_t *r = ctx;
	struct resil_state_hdr *h = r->seg.st;

	return h->event_off == r->seg.geo.event_off && h->client_cap == r->seg.geo.client_cap &&
	       h->arena_size == r->seg.geo.arena_size && ld_relaxed(&h->state_repairs) > 0;
}

/* A client of the same trust domain, mapped afresh, finds every policy. */
static void fresh_client_sees_all(struct test_daemon *d)
{
	resil_t *r2 = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	int e = resil_open(&r2, d->sock);

	if (e < 0)
		fprintf(stderr, "resil_open after the attack: %s\n", resil_last_error());
	TEST_CHECK(e == 0);
	for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++) {
		TEST_CHECK(resil_policy(r2, NAMES[i], &p) == 0);
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	resil_close(r2);
}

int main(void)
{
	struct test_daemon d;
	resil_t *r = NULL;
	struct resil_state_hdr *h;
	uint64_t st_size;
	char buf[64];

	signal(SIGPIPE, SIG_IGN);
	if (test_daemon_open(&d, &r) < 0)
		return 1;
	for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
		TEST_CHECK(resil_define(r, NAMES[i], "breaker.window = count:10") == 0);
	h = r->seg.st;
	st_size = r->seg.st_size;

	/* 1. the arena pointed at the end of the state segment (and beyond):
	 * each define takes a new block of another shape */
	const uint64_t used[] = {st_size - h->arena_off, st_size, UINT64_MAX - 4095,
				 st_size - h->arena_off - 4096};
	for (size_t i = 0; i < sizeof(used) / sizeof(used[0]); i++) {
		h->arena_size = UINT64_MAX / 2;
		st_relaxed(&h->arena_used, used[i]);
		snprintf(buf, sizeof(buf), "bulkhead.max = %zu", 100 + i);
		/* the attacker's own policy: a new shape each time */
		resil_define(r, "zz", buf);
		TEST_CHECK(kill(d.pid, 0) == 0);
		TEST_CHECK(test_daemon_answers(&d));
		fresh_client_sees_all(&d);
	}

	/* 2. the event ring and the client table pointed outside the
	 * segment: defines push events, the tick drains and scans */
	h->event_off = st_size - 64;
	h->event_cap = 1u << 30;
	h->client_off = st_size * 2;
	h->client_cap = 1u << 20;
	for (int i = 0; i < 3; i++) {
		snprintf(buf, sizeof(buf), "limit.rate = %d/s", 10 + i);
		TEST_CHECK(resil_define(r, "zz2", buf) == 0);
		TEST_CHECK(test_daemon_answers(&d));
	}
	TEST_CHECK(kill(d.pid, 0) == 0);
	fresh_client_sees_all(&d);

	/* 3. the header's copy repaired, the repairs counted */
	TEST_CHECK(test_wait_until(header_repaired, r, 10000));
	{
		const char *argv[] = {RESILCTL_PATH, "--socket", d.sock, "metrics", NULL};
		static char out[1 << 20];

		TEST_CHECK(test_run(argv, NULL, out, sizeof(out)) == 0);
		TEST_CHECK(strstr(out, "resil_state_repairs_total ") != NULL);
		TEST_CHECK(strstr(out, "resil_state_repairs_total 0\n") == NULL);
	}
	TEST_CHECK(kill(d.pid, 0) == 0);
	resil_close(r);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	printf("int_trust_geometry: ok (arena, ring and table geometry rewritten: config intact, "
	       "resild alive, repairs counted)\n");
	return 0;
}

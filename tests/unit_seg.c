/* SPDX-License-Identifier: MIT */
/*
 * unit_seg.c - the segment format on real memfds: creation and sealing,
 * validation (ABI major, corrupt headers), the name directory, publishing
 * and replacing records, capacity limits, client rows, the event ring.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf.h"
#include "policy.h"
#include "seg_records.h"

static void define_ok(struct resil_seg *s, const char *name, const char *text, int expect)
{
	struct resil_conf c;
	char err[256];
	int r;

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, text, 1, err, sizeof(err)), 0);
	r = resil_seg_define(s, name, &c, 1000, 0, 1, err, sizeof(err));
	if (r != expect)
		fail_msg("define %s: %d (%s), expected %d", name, r, err, expect);
}

static void test_create_and_seal(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .slots = 64, .clients = 16, .events = 64,
				      .state_size = 4 << 20 };
	int seals;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	assert_int_equal(s.cfg->magic, RESIL_CFG_MAGIC);
	assert_int_equal(s.cfg->abi_major, RESIL_ABI_MAJOR);
	assert_int_equal(s.cfg->slot_cap, 64);
	assert_true(s.cfg->dir_cap >= 128);
	assert_int_equal(s.cfg->epoch, s.st->epoch);
	seals = fcntl(s.st_fd, F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	/* sealed: even the creator cannot resize it */
	assert_int_equal(ftruncate(s.st_fd, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(s.st_fd, (off_t)s.st_size * 2), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(resil_seg_check(&s, NULL, 0), 0);
	resil_seg_unmap(&s);
}

static void test_validate_rejects(void **state)
{
	struct resil_seg s;
	char err[256];

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	assert_int_equal(resil_seg_validate(s.cfg, s.cfg_size, s.st, s.st_size, err, sizeof(err)),
			 0);

	s.cfg->abi_major = RESIL_ABI_MAJOR + 1;
	assert_int_equal(resil_seg_validate(s.cfg, s.cfg_size, s.st, s.st_size, err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "ABI"));
	s.cfg->abi_major = RESIL_ABI_MAJOR;

	s.cfg->dir_cap = 3;
	assert_int_equal(resil_seg_validate(s.cfg, s.cfg_size, NULL, 0, err, sizeof(err)),
			 -EBADMSG);
	s.cfg->dir_cap = 2 * RESIL_SLOTS_DEFAULT;

	s.st->event_off = s.st_size; /* outside */
	assert_int_equal(resil_seg_validate(NULL, 0, s.st, s.st_size, err, sizeof(err)), -EBADMSG);
	s.st->event_off = RESIL_HDR_SIZE + (uint64_t)s.st->client_cap * RESIL_CLIENT_SIZE;

	/* a 1.1 pair is described by its config header alone: the state
	 * header's identity words are client-written copies that must not
	 * keep a restarted daemon from adopting the pair, and the daemon's
	 * tick puts them back */
	{
		uint64_t epoch = s.st->epoch;

		s.st->epoch ^= 1;
		s.st->magic = 0;
		s.st->hdr_size = 1;
		s.st->seg_size = 0;
		assert_int_equal(
		    resil_seg_validate(s.cfg, s.cfg_size, s.st, s.st_size, err, sizeof(err)), 0);
		assert_true(resil_seg_repair_header(&s) >= 4);
		assert_int_equal(s.st->epoch, epoch);
		assert_int_equal(s.st->magic, RESIL_STATE_MAGIC);
		assert_int_equal(s.st->hdr_size, RESIL_HDR_SIZE);
		assert_int_equal(s.st->seg_size, s.st_size);
		/* the state segment alone (no config header) is still checked */
		s.st->magic = 0;
		assert_int_equal(resil_seg_validate(NULL, 0, s.st, s.st_size, err, sizeof(err)),
				 -EBADMSG);
		s.st->magic = RESIL_STATE_MAGIC;
	}

	atomic_store(&s.cfg->flags, RESIL_SEG_RETIRED);
	assert_int_equal(resil_seg_validate(s.cfg, s.cfg_size, s.st, s.st_size, err, sizeof(err)),
			 -ESTALE);
	atomic_store(&s.cfg->flags, 0);

	assert_int_equal(resil_seg_validate(s.cfg, 100, NULL, 0, err, sizeof(err)), -EBADMSG);
	resil_seg_unmap(&s);
}

/* A client receiving a segment of another ABI major gets -EPROTO and words. */
static void test_map_other_major(void **state)
{
	struct resil_seg s, m;
	char err[256];

	assert_int_equal(resil_seg_create(&s, NULL), 0);
	s.cfg->abi_major = RESIL_ABI_MAJOR + 1;
	assert_int_equal(resil_seg_map(&m, dup(s.cfg_fd), dup(s.st_fd), false, true, err,
				       sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "ABI"));
	s.cfg->abi_major = RESIL_ABI_MAJOR;
	assert_int_equal(resil_seg_map(&m, dup(s.cfg_fd), dup(s.st_fd), false, true, err,
				       sizeof(err)),
			 0);
	assert_false(m.cfg_writable);
	resil_seg_unmap(&m);
	resil_seg_unmap(&s);
}

static void test_directory(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .slots = 32 };
	uint32_t slot, slot2;
	uint64_t w, w2;
	char name[32];

	assert_int_equal(resil_seg_create(&s, &p), 0);
	assert_int_equal(resil_seg_lookup(&s, "payments", &slot, &w), -ENOENT);
	define_ok(&s, "payments", "breaker.window = consecutive:5", RESIL_DEFINE_CREATED);
	assert_int_equal(resil_seg_lookup(&s, "payments", &slot, &w), 0);
	assert_string_equal(resil_seg_rec_of(&s, w)->name, "payments");
	assert_int_equal(resil_seg_rec_of(&s, w)->owner_uid, 1000);

	/* identical: nothing written */
	define_ok(&s, "payments", "breaker.window = consecutive:5", RESIL_DEFINE_UNCHANGED);
	assert_int_equal(resil_seg_lookup(&s, "payments", &slot2, &w2), 0);
	assert_int_equal(w, w2);

	/* a threshold change keeps the state block, a new record, a new gen */
	define_ok(&s, "payments", "breaker.window = consecutive:5; breaker.wait = 5s",
		  RESIL_DEFINE_CHANGED);
	assert_int_equal(resil_seg_lookup(&s, "payments", &slot2, &w2), 0);
	assert_int_equal(slot, slot2);
	assert_int_not_equal(w, w2);
	assert_true(resil_slotw_gen(w2) > resil_slotw_gen(w));
	assert_int_equal(resil_seg_rec_of(&s, w2)->state_off, resil_seg_rec_of(&s, w)->state_off);

	/* a shape change gets a new block */
	define_ok(&s, "payments", "breaker.window = consecutive:7", RESIL_DEFINE_CHANGED);
	assert_int_equal(resil_seg_lookup(&s, "payments", &slot2, &w), 0);
	assert_int_not_equal(resil_seg_rec_of(&s, w)->state_off,
			     resil_seg_rec_of(&s, w2)->state_off);

	/* many names: all found; delete one: gone, others still found */
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "dep-%d", i);
		define_ok(&s, name, "bulkhead.max = 3", RESIL_DEFINE_CREATED);
	}
	assert_int_equal(resil_seg_delete(&s, "dep-7"), 0);
	assert_int_equal(resil_seg_delete(&s, "dep-7"), -ENOENT);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "dep-%d", i);
		assert_int_equal(resil_seg_lookup(&s, name, &slot, NULL), i == 7 ? -ENOENT : 0);
	}
	/* the name can come back, in a free slot */
	define_ok(&s, "dep-7", "bulkhead.max = 3", RESIL_DEFINE_CREATED);
	assert_int_equal(resil_seg_lookup(&s, "dep-7", &slot, NULL), 0);
	assert_int_equal(resil_seg_check(&s, NULL, 0), 0);
	resil_seg_unmap(&s);
}

static void test_bad_names_and_full(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .slots = 4 };
	struct resil_conf c;
	char err[256], name[32];
	int r;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "bulkhead.max = 1", 1, err, sizeof(err)), 0);
	assert_int_equal(resil_seg_define(&s, "", &c, 0, 0, 1, err, sizeof(err)), -EINVAL);
	assert_int_equal(resil_seg_define(&s, "a b", &c, 0, 0, 1, err, sizeof(err)), -EINVAL);
	assert_int_equal(resil_seg_define(&s, NULL, &c, 0, 0, 1, err, sizeof(err)), -EINVAL);
	/* one rule for every way in (the daemon words it, resil_name_valid decides) */
	assert_false(resil_name_valid("-x"));
	assert_false(resil_name_valid(".x"));
	assert_false(resil_name_valid("a@b"));
	assert_false(resil_name_valid("@"));
	assert_true(resil_name_valid("@budget"));
	assert_true(resil_name_valid("api.v2:read-x"));
	memset(name, 'x', sizeof(name));
	name[31] = 0;
	char longname[100];
	memset(longname, 'y', sizeof(longname));
	longname[99] = 0;
	assert_int_equal(resil_seg_define(&s, longname, &c, 0, 0, 1, err, sizeof(err)), -EINVAL);
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(resil_seg_define(&s, name, &c, 0, 0, 1, err, sizeof(err)), 0);
	}
	r = resil_seg_define(&s, "p4", &c, 0, 0, 1, err, sizeof(err));
	assert_int_equal(r, -ENOSPC);
	assert_non_null(strstr(err, "--policies"));
	resil_seg_unmap(&s);
}

static void test_state_full(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .slots = 256, .clients = 4, .events = 16,
				      .state_size = 256 << 10 };
	struct resil_conf c;
	char err[256], name[32];
	int r = 0, i;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "breaker.window = count:1000", 1, err, sizeof(err)),
			 0);
	for (i = 0; i < 256 && r >= 0; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		r = resil_seg_define(&s, name, &c, 0, 0, 1, err, sizeof(err));
	}
	assert_int_equal(r, -ENOSPC);
	assert_non_null(strstr(err, "--state-size"));
	/* what was defined is intact */
	assert_int_equal(resil_seg_check(&s, err, sizeof(err)), 0);
	resil_seg_unmap(&s);
}

static void test_clients(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .clients = 3 };
	int a, b, c;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	a = resil_client_claim(&s, 100, 5, 0);
	b = resil_client_claim(&s, 101, 6, 0);
	c = resil_client_claim(&s, 102, 7, 0);
	assert_true(a >= 0 && b >= 0 && c >= 0);
	assert_true(a != b && b != c && a != c);
	assert_int_equal(resil_client_claim(&s, 103, 8, 0), -ENOSPC);
	assert_int_equal(atomic_load(&s.st->clients_full), 1);
	assert_int_equal(atomic_load(&resil_seg_client(&s, (uint32_t)b)->owner),
			 (uint64_t)101 << 32 | 6);
	resil_client_release(&s, (uint32_t)b);
	assert_int_equal(resil_client_claim(&s, 103, 8, 0), b);
	assert_int_equal(resil_client_claim(&s, 0, 8, 0), -EINVAL);
	resil_seg_unmap(&s);
}

static void test_events(void **state)
{
	struct resil_seg s;
	struct resil_seg_params p = { .events = 8 };
	struct resil_event e;

	assert_int_equal(resil_seg_create(&s, &p), 0);
	assert_int_equal(resil_event_read(&s, 0, &e), -EAGAIN);
	for (uint32_t i = 0; i < 5; i++)
		resil_event_push(&s, RESIL_EV_TRANSITION, i, 1, 0, 1, 0, i * 10, 100 + i);
	for (uint32_t i = 0; i < 5; i++) {
		assert_int_equal(resil_event_read(&s, i, &e), 0);
		assert_int_equal(e.slot, i);
		assert_int_equal(e.value, i * 10);
		assert_int_equal(e.time_ns, 100 + i);
	}
	assert_int_equal(resil_event_read(&s, 5, &e), -EAGAIN);
	/* lap the ring: old entries are reported lost, not misread */
	for (uint32_t i = 5; i < 20; i++)
		resil_event_push(&s, RESIL_EV_TRANSITION, i, 1, 0, 1, 0, i, 0);
	assert_int_equal(resil_event_read(&s, 3, &e), -ESTALE);
	assert_int_equal(resil_event_read(&s, 19, &e), 0);
	assert_int_equal(e.slot, 19);
	/* a writer that died mid-entry: seq stays 0, the entry reads as not
	 * ready (the daemon skips it after a grace period) */
	uint64_t idx = atomic_fetch_add(&s.st->event_head, 1);
	atomic_store(&resil_seg_event(&s, idx)->seq, 0);
	assert_int_equal(resil_event_read(&s, idx, &e), -EAGAIN);
	resil_seg_unmap(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_and_seal),
	    cmocka_unit_test(test_validate_rejects),
	    cmocka_unit_test(test_map_other_major),
	    cmocka_unit_test(test_directory),
	    cmocka_unit_test(test_bad_names_and_full),
	    cmocka_unit_test(test_state_full),
	    cmocka_unit_test(test_clients),
	    cmocka_unit_test(test_events),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

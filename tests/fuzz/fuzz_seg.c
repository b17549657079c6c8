/* SPDX-License-Identifier: MIT */
/*
 * fuzz_seg.c - a corrupt segment pair handed to a restarting daemon.
 *
 * A real pair is created once (small) with a few policies; each input is a
 * list of (offset, bytes) patches applied to copies of both segments. The
 * validator must reject what it cannot use, and what it accepts must be
 * safe to walk: lookups, the daemon's maintenance pass and a reclaim.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "policy.h"
#include "seg_records.h"

static struct resil_seg base;
static void *cfg_copy, *st_copy;

static void setup(void)
{
	struct resil_seg_params p = { .slots = 16, .clients = 8, .events = 16,
				      .state_size = 1 << 20 };
	static const char *defs[][2] = {
		{ "a", "breaker.window = consecutive:3" },
		{ "b", "limit.rate = 10/s; limit.burst = 5" },
		{ "c", "bulkhead.max = 4; breaker.window = count:10" },
	};

	if (resil_seg_create(&base, &p) < 0)
		abort();
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
		struct resil_conf c;
		char err[256];

		resil_conf_init(&c);
		if (resil_conf_parse(&c, defs[i][1], 1, err, sizeof(err)) == 0)
			resil_seg_define(&base, defs[i][0], &c, 0, 0, 1, err, sizeof(err));
	}
	cfg_copy = mmap(NULL, base.cfg_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			0);
	st_copy = mmap(NULL, base.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
}

static int visit(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec, void *ctx)
{
	struct resil_ctx x = { .seg = s, .now = 1000 };
	struct resil_reclaim_counts counts = { 0 };

	if (!resil_rec_sane(s, rec))
		return 0;
	resil_policy_maintain(&x, rec);
	resil_policy_reclaim(&x, rec, 1, &counts);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resil_seg s;
	char err[256];

	if (!base.cfg)
		setup();
	memcpy(cfg_copy, base.cfg, base.cfg_size);
	memcpy(st_copy, base.st, base.st_size);
	/* patches: [u8 target][u32 offset][u8 len][len bytes] ... */
	while (size >= 6) {
		uint8_t target = data[0], len = data[5];
		uint32_t off;

		memcpy(&off, data + 1, 4);
		data += 6;
		size -= 6;
		if (len > size)
			len = (uint8_t)size;
		if (target & 1) {
			off %= (uint32_t)base.st_size;
			if (off + len <= base.st_size)
				memcpy((char *)st_copy + off, data, len);
		} else {
			/* aim at the headers and the first records most of the time */
			off %= (target & 2) ? (uint32_t)base.cfg_size : 16384;
			if (off + len <= base.cfg_size)
				memcpy((char *)cfg_copy + off, data, len);
		}
		data += len;
		size -= len;
	}
	memset(&s, 0, sizeof(s));
	s.cfg = cfg_copy;
	s.st = st_copy;
	s.cfg_size = base.cfg_size;
	s.st_size = base.st_size;
	s.cfg_fd = s.st_fd = -1;
	s.cfg_writable = true;
	if (resil_seg_validate(s.cfg, s.cfg_size, s.st, s.st_size, err, sizeof(err)) == 0 &&
	    resil_seg_take_geo(&s, err, sizeof(err)) == 0 &&
	    resil_seg_check(&s, err, sizeof(err)) == 0) {
		uint32_t slot;

		resil_seg_lookup(&s, "a", &slot, NULL);
		resil_seg_lookup(&s, "zz", &slot, NULL);
		resil_seg_foreach(&s, visit, NULL);
	}
	return 0;
}

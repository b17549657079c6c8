/* SPDX-License-Identifier: MIT */
/*
 * segfix.h - the fixture of the tests that write hostile words into a
 * real segment pair (resil_seg_create) and decide on a manual clock with
 * a seeded generator: unit_trust, unit_repair. Include it after cmocka.h,
 * once per test program (it holds the clock and the seed).
 */
#ifndef RESIL_SEGFIX_H
#define RESIL_SEGFIX_H

#include <stdint.h>
#include <string.h>

#include "conf.h"
#include "policy.h"
#include "resil.h"
#include "seg.h"
#include "seg_records.h"

/* The manual clock every context of the test reads; tests move it. */
static int64_t now_ns = 1000 * RESIL_NS_PER_S;

static inline int64_t manual_clock(void *ctx)
{
	(void)ctx;
	return now_ns;
}

static uint64_t seed = 42;
static inline uint64_t seeded(void *ctx)
{
	(void)ctx;
	return resil_splitmix64(&seed);
}

/* A caller's context on s: the manual clock, the seeded generator,
 * client id 1. */
static inline void ctx_init(struct resil_ctx *x, struct resil_seg *s)
{
	memset(x, 0, sizeof(*x));
	x->seg = s;
	x->clock.fn = manual_clock;
	x->random.fn = seeded;
	x->client_id = 1;
}

/* Define policy name from text (must parse and fit): its record. */
static inline const struct resil_rec *define(struct resil_seg *s, const char *name,
					     const char *text)
{
	struct resil_conf c;
	char err[256];
	uint32_t slot;
	uint64_t w;

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, text, 1, err, sizeof(err)), 0);
	assert_true(resil_seg_define(s, name, &c, 0, 0, now_ns, err, sizeof(err)) >= 0);
	assert_int_equal(resil_seg_lookup(s, name, &slot, &w), 0);
	return resil_seg_rec_of(s, w);
}

#endif

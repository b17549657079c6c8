/* SPDX-License-Identifier: MIT */
/*
 * counter.c - the test-only counter component (counter.h): every
 * admitted acquire and every release of a policy with `counter = on` adds
 * one to a word of its state block.
 *
 * Its configuration is one word of struct resil_conf's extension area
 * (the part its row declares: conf_ext_off 0, one word; 1 on, 0 off);
 * its state one line: two counters. Everything else comes from the
 * component table: the row below is the whole of its wiring (policy.c
 * lays it out after the components of its fixed order, and, in a build
 * with RESIL_COMP_HOOKS, calls the acquired/released hooks of the rows
 * that have them).
 *
 * Shared words: acquires and releases, written by every client with a
 * relaxed fetch_add (statistics: they order nothing, publish nothing),
 * read by observers with relaxed loads. A process killed around a call
 * leaves at most that call uncounted. Nothing to repair, nothing to
 * reclaim; the daemon's tick has nothing to do.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "counter.h"
#include "parse.h"

struct resil_counter_state {
	ra64 acquires;
	ra64 releases;
};

#define COUNTER_ON(c) (*RESIL_COMP_CONF_EXT(c, &resil_counter_ops))

static int counter_set(struct resil_conf *c, const char *key, const char *value, char *err,
		       size_t errlen)
{
	uint8_t on;

	if (strcmp(key, "counter") != 0)
		return -ENOENT;
	if (resil_parse_bool(value, &on) < 0)
		return resil_errf(err, errlen, -EINVAL, "counter: '%s' is not on or off", value);
	COUNTER_ON(c) = on;
	return 0;
}

static size_t counter_format(const struct resil_conf *c, char *buf, size_t len)
{
	return COUNTER_ON(c) ? (size_t)snprintf(buf, len, "counter = on\n") : 0;
}

static uint64_t counter_size(const struct resil_conf *c)
{
	return COUNTER_ON(c) ? sizeof(struct resil_counter_state) : 0;
}

static void counter_init(void *st, const struct resil_conf *c, int64_t now)
{
	memset(st, 0, sizeof(struct resil_counter_state));
}

static bool counter_same(const struct resil_conf *a, const struct resil_conf *b)
{
	return true;
}

static void counter_carry(void *nst, const struct resil_conf *nc, const void *ost,
			  const struct resil_conf *oc, int64_t now)
{
	struct resil_counter_state *n = nst;
	const struct resil_counter_state *o = ost;

	st_relaxed(&n->acquires, ld_relaxed(&o->acquires));
	st_relaxed(&n->releases, ld_relaxed(&o->releases));
}

static void counter_acquired(struct resil_ctx *x, const struct resil_conf *c, void *st)
{
	faa_relaxed(&((struct resil_counter_state *)st)->acquires, 1);
}

static void counter_released(struct resil_ctx *x, const struct resil_conf *c, void *st)
{
	faa_relaxed(&((struct resil_counter_state *)st)->releases, 1);
}

void resil_counter_read(const void *st, uint64_t *acquires, uint64_t *releases)
{
	const struct resil_counter_state *s = st;

	*acquires = ld_relaxed(&s->acquires);
	*releases = ld_relaxed(&s->releases);
}

const struct resil_comp_ops resil_counter_ops = {
    .name = "counter",
    .id = RESIL_C_COUNTER,
    .conf_ext_off = 0,
    .conf_ext_words = 1,
    .conf_set = counter_set,
    .conf_format = counter_format,
    .state_size = counter_size,
    .state_init = counter_init,
    .same_shape = counter_same,
    .carry = counter_carry,
    .acquired = counter_acquired,
    .released = counter_released,
};

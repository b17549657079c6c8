/* SPDX-License-Identifier: MIT */
/*
 * comp.c - the component table (comp.h): one row per component, each a
 * struct resil_comp_ops whose operations take the whole configuration and
 * hand the component its part. A component's own functions (breaker.h,
 * limit.h, ...) take their part of the configuration only; the adapters
 * here are the only place that knows which part is whose, and the one
 * place that knows the key prefixes.
 *
 * Cold code only: configuration, layout, the daemon's tick, adoption and
 * reclaim (and resil_comp_table_check, which tests run on each build's
 * table). No shared word is touched here; each operation is the
 * component's, with the writers, readers and orders its file states.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "comp.h"
#include "parse.h"
#include "breaker.h"
#include "limit.h"
#include "bulkhead.h"
#include "adaptive.h"
#include "shed.h"
#include "budget.h"
#include "stats.h"

/*
 * The adapters of a component X whose configuration is c->X and whose
 * keys all start with "X.": presence is c->X.on, every operation passes
 * &c->X.
 */
#define COMP_ADAPTERS(X)                                                                           \
	static void X##_defaults(struct resil_conf *c)                                             \
	{                                                                                          \
		resil_##X##_conf_defaults(&c->X);                                                  \
	}                                                                                          \
	static int X##_set(struct resil_conf *c, const char *key, const char *value, char *err,    \
			   size_t errlen)                                                          \
	{                                                                                          \
		if (strncmp(key, #X ".", sizeof(#X)) != 0)                                         \
			return -ENOENT;                                                            \
		return resil_##X##_conf_set(&c->X, key, value, err, errlen);                       \
	}                                                                                          \
	static size_t X##_format(const struct resil_conf *c, char *buf, size_t len)                \
	{                                                                                          \
		return c->X.on ? resil_##X##_conf_format(&c->X, buf, len) : 0;                     \
	}                                                                                          \
	static uint64_t X##_size(const struct resil_conf *c)                                       \
	{                                                                                          \
		return c->X.on ? resil_##X##_state_size(&c->X) : 0;                                \
	}                                                                                          \
	static void X##_init(void *st, const struct resil_conf *c, int64_t now)                    \
	{                                                                                          \
		resil_##X##_state_init(st, &c->X, now);                                            \
	}                                                                                          \
	static bool X##_same(const struct resil_conf *a, const struct resil_conf *b)               \
	{                                                                                          \
		return resil_##X##_same_shape(&a->X, &b->X);                                       \
	}                                                                                          \
	static void X##_carry(void *nst, const struct resil_conf *nc, const void *ost,             \
			      const struct resil_conf *oc, int64_t now)                            \
	{                                                                                          \
		resil_##X##_carry(nst, &nc->X, ost, &oc->X, now);                                  \
	}                                                                                          \
	static void X##_maintain(struct resil_ctx *x, const struct resil_conf *c, void *st)        \
	{                                                                                          \
		resil_##X##_maintain(x, &c->X, st);                                                \
	}                                                                                          \
	static void X##_reclaim(struct resil_ctx *x, const struct resil_conf *c, void *st,         \
				uint32_t dead, struct resil_reclaim_counts *n)                     \
	{                                                                                          \
		resil_##X##_reclaim(x, &c->X, st, dead, n);                                        \
	}

/* The block's layout copies, for the components that keep them. */
#define COMP_LAYOUT_OK(X)                                                                          \
	static bool X##_layout_ok(const struct resil_conf *c, const void *st)                      \
	{                                                                                          \
		return resil_##X##_layout_ok(&c->X, st);                                           \
	}

/* A decision component's row: the adapters above. */
#define COMP_ROW(X, ID, check, layout)                                                             \
	{                                                                                          \
		.name = #X, .id = ID, .decision = true, .conf_defaults = X##_defaults,             \
		.conf_set = X##_set, .conf_check = check, .conf_format = X##_format,               \
		.state_size = X##_size, .state_init = X##_init, .same_shape = X##_same,            \
		.carry = X##_carry, .layout_ok = layout, .maintain = X##_maintain,                 \
		.reclaim = X##_reclaim,                                                            \
	}

/* ---- the counters (and the latency histogram): every policy has them ---- */

static int stats_set(struct resil_conf *c, const char *key, const char *value, char *err,
		     size_t errlen)
{
	if (strcmp(key, "histogram") == 0) {
		if (resil_parse_bool(value, &c->histogram) < 0)
			return resil_errf(err, errlen, -EINVAL, "histogram: '%s' is not on or off",
					  value);
		return 0;
	}
	return -ENOENT;
}

static size_t stats_format(const struct resil_conf *c, char *buf, size_t len)
{
	return c->histogram ? (size_t)snprintf(buf, len, "histogram = on\n") : 0;
}

static const struct resil_comp_ops stats_ops = {
    .name = "stats",
    .id = RESIL_C_STATS,
    .conf_set = stats_set,
    .conf_format = stats_format,
    .state_size = resil_stats_state_size,
    .state_init = resil_stats_state_init,
    .same_shape = resil_stats_same_shape,
    .carry = resil_stats_carry,
    .maintain = resil_stats_maintain,
};

/* ---- the decision components ---- */

COMP_ADAPTERS(breaker)
COMP_LAYOUT_OK(breaker)
COMP_ADAPTERS(limit)
COMP_ADAPTERS(bulkhead)
COMP_LAYOUT_OK(bulkhead)
COMP_ADAPTERS(adaptive)
COMP_LAYOUT_OK(adaptive)
COMP_ADAPTERS(shed)
COMP_LAYOUT_OK(shed)

static int limit_check(const struct resil_conf *c, char *err, size_t errlen)
{
	if (c->limit.on && c->limit.default_key_len && !c->limit.keys)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.default_key: for a keyed limiter only (limit.keys = N)");
	return resil_limit_conf_check(&c->limit, err, errlen) < 0 ? -EINVAL : 0;
}

static int adaptive_check(const struct resil_conf *c, char *err, size_t errlen)
{
	if (c->adaptive.on && c->adaptive.min && c->adaptive.min > resil_adaptive_max(&c->adaptive))
		return resil_errf(err, errlen, -EINVAL,
				  "adaptive.min = %u is above adaptive.max = %u", c->adaptive.min,
				  resil_adaptive_max(&c->adaptive));
	return 0;
}

static const struct resil_comp_ops breaker_ops =
    COMP_ROW(breaker, RESIL_C_BREAKER, NULL, breaker_layout_ok);
static void limit_init_zeroed(void *st, const struct resil_conf *c, int64_t now)
{
	resil_limit_state_init_zeroed(st, &c->limit, now);
}
/* COMP_ROW's, with the keyed table's init on a zeroed block */
static const struct resil_comp_ops limit_ops = {
    .name = "limit",
    .id = RESIL_C_LIMIT,
    .decision = true,
    .conf_defaults = limit_defaults,
    .conf_set = limit_set,
    .conf_check = limit_check,
    .conf_format = limit_format,
    .state_size = limit_size,
    .state_init = limit_init,
    .state_init_zeroed = limit_init_zeroed,
    .same_shape = limit_same,
    .carry = limit_carry,
    .maintain = limit_maintain,
    .reclaim = limit_reclaim,
};
static const struct resil_comp_ops bulkhead_ops =
    COMP_ROW(bulkhead, RESIL_C_BULKHEAD, NULL, bulkhead_layout_ok);
static const struct resil_comp_ops adaptive_ops =
    COMP_ROW(adaptive, RESIL_C_ADAPTIVE, adaptive_check, adaptive_layout_ok);
static const struct resil_comp_ops shed_ops = COMP_ROW(shed, RESIL_C_SHED, NULL, shed_layout_ok);

/* ---- retries and the retry budget: the keys of the retry engine, the
 * state of a budget of the policy's own (grpc, aws, ratio) ---- */

static void retry_defaults(struct resil_conf *c)
{
	resil_retry_conf_defaults(&c->retry);
}

static int retry_set(struct resil_conf *c, const char *key, const char *value, char *err,
		     size_t errlen)
{
	if (strncmp(key, "retry.", 6) == 0 || strncmp(key, "hedge.", 6) == 0 ||
	    strcmp(key, "timeout") == 0 || strncmp(key, "timeout.", 8) == 0 ||
	    strcmp(key, "idempotent") == 0)
		return resil_retry_conf_set(&c->retry, key, value, err, errlen);
	return -ENOENT;
}

static int retry_check(const struct resil_conf *c, char *err, size_t errlen)
{
	return resil_retry_conf_check(&c->retry, err, errlen);
}

static size_t retry_format(const struct resil_conf *c, char *buf, size_t len)
{
	return c->retry.on ? resil_retry_conf_format(&c->retry, buf, len) : 0;
}

static uint64_t budget_size(const struct resil_conf *c)
{
	return resil_budget_has_state(&c->retry) ? resil_budget_state_size(&c->retry) : 0;
}

static void budget_init(void *st, const struct resil_conf *c, int64_t now)
{
	resil_budget_state_init(st, &c->retry, now);
}

static bool budget_same(const struct resil_conf *a, const struct resil_conf *b)
{
	return resil_budget_same_shape(&a->retry, &b->retry);
}

static void budget_carry(void *nst, const struct resil_conf *nc, const void *ost,
			 const struct resil_conf *oc, int64_t now)
{
	resil_budget_carry(nst, &nc->retry, ost, &oc->retry, now);
}

static void budget_maintain(struct resil_ctx *x, const struct resil_conf *c, void *st)
{
	resil_budget_maintain(x, &c->retry, st);
}

static const struct resil_comp_ops budget_ops = {
    .name = "budget",
    .id = RESIL_C_BUDGET,
    .conf_defaults = retry_defaults,
    .conf_set = retry_set,
    .conf_check = retry_check,
    .conf_format = retry_format,
    .state_size = budget_size,
    .state_init = budget_init,
    .same_shape = budget_same,
    .carry = budget_carry,
    .maintain = budget_maintain,
};

/* The test-only counter component (shm/counter.c): a row of the test
 * build's table only. */
#ifdef RESIL_TEST_COUNTER
extern const struct resil_comp_ops resil_counter_ops;
#endif

/* Configuration order: keys are formatted in it, checks run in it. */
const struct resil_comp_ops *const resil_comps[] = {
    &stats_ops,
    &breaker_ops,
    &limit_ops,
    &bulkhead_ops,
    &adaptive_ops,
    &shed_ops,
    &budget_ops,
#ifdef RESIL_TEST_COUNTER
    &resil_counter_ops,
#endif
    NULL,
};

int resil_comp_table_check(char *err, size_t errlen)
{
	uint32_t ids = 0;
	uint64_t ext = 0;

	resil_comp_foreach (op) {
		const struct resil_comp_ops *r = *op;
		uint64_t part;

		if ((unsigned)r->id >= RESIL_C_MAX || (ids & (1u << r->id)))
			return resil_errf(err, errlen, -EINVAL,
					  "component %s: id %u is taken or not below %u", r->name,
					  (unsigned)r->id, (unsigned)RESIL_C_MAX);
		ids |= 1u << r->id;
		if (!r->conf_ext_words)
			continue;
		if (r->conf_ext_off + r->conf_ext_words > RESIL_CONF_EXT_WORDS)
			return resil_errf(err, errlen, -EINVAL,
					  "component %s: extension words %u..%u past the %u of "
					  "struct resil_conf",
					  r->name, r->conf_ext_off,
					  r->conf_ext_off + r->conf_ext_words - 1,
					  (unsigned)RESIL_CONF_EXT_WORDS);
		part = ((1ull << r->conf_ext_words) - 1) << r->conf_ext_off;
		if (ext & part)
			return resil_errf(err, errlen, -EINVAL,
					  "component %s: extension words %u..%u overlap another "
					  "row's",
					  r->name, r->conf_ext_off,
					  r->conf_ext_off + r->conf_ext_words - 1);
		ext |= part;
	}
	return 0;
}

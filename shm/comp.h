/* SPDX-License-Identifier: MIT */
/*
 * comp.h - the component table: what each component of a policy gives
 * the code that is not the hot path, as one row of operations, so that
 * policy.c (layout, init, shape, carry, maintain, adoption, reclaim) and
 * conf.c (defaults, keys, checks, formatting) iterate the rows instead of
 * naming every component.
 *
 * The hot path does not go through the table: resil_policy_acquire and
 * resil_policy_release (policy.c) call each component by name, static and
 * inlined, in the order policy.h states.
 *
 * Every operation takes the whole configuration (struct resil_conf) and
 * the component's state block; the row knows its part of both. A row's
 * state operations are called only when its state_size is not 0 for the
 * configuration at hand (the block has the component: resil_has()).
 *
 * Adding a component of the product: its .c/.h at shm layer 2, a
 * RESIL_C_* in seg.h, its part of struct resil_conf, its row (a struct
 * resil_comp_ops of its own) in resil_comps[] (comp.c), and its calls in
 * the hot path if it decides. A component outside the product's list (a
 * build's own) takes a spare RESIL_C_*, a part of the configuration's
 * extension area and, if it observes decisions, the acquired/released
 * hooks: its own files and its row, nothing else in shm/.
 * ARCHITECTURE.md, "Components", says the rest.
 */
#ifndef RESIL_SHM_COMP_H
#define RESIL_SHM_COMP_H

#include "decision.h"

struct resil_comp_ops {
	const char *name;   /* its name in messages */
	enum resil_comp id; /* where its state is: rec->comp_off[id] */
	/* a decision component: policy.scope = process gives each row of
	 * the client table a copy of it (policy.c); else fleet-wide only */
	bool decision;

	/* configuration */
	void (*conf_defaults)(struct resil_conf *c);
	/* 0, -ENOENT for a key that is not one of its own, -EINVAL with a
	 * message in err */
	int (*conf_set)(struct resil_conf *c, const char *key, const char *value, char *err,
			size_t errlen);
	/* cross-key checks after parsing; NULL: none */
	int (*conf_check)(const struct resil_conf *c, char *err, size_t errlen);
	/* "key = value\n" lines when the configuration names the component,
	 * nothing otherwise; snprintf semantics (buf NULL when len is 0) */
	size_t (*conf_format)(const struct resil_conf *c, char *buf, size_t len);

	/* state: bytes in the block, 0 when the configuration has none */
	uint64_t (*state_size)(const struct resil_conf *c);
	void (*state_init)(void *st, const struct resil_conf *c, int64_t now);
	/* the same on a block known to be zero (a new block: policy.c), which
	 * writes nothing that is zero already, so a large table's pages stay
	 * untouched until decisions use them; NULL: state_init */
	void (*state_init_zeroed)(void *st, const struct resil_conf *c, int64_t now);
	/* the state of a can serve b as is (both have the component) */
	bool (*same_shape)(const struct resil_conf *a, const struct resil_conf *b);
	void (*carry)(void *nst, const struct resil_conf *nc, const void *ost,
		      const struct resil_conf *oc, int64_t now);
	/* the block's copies of its layout are the configuration's (adoption:
	 * a block whose are not is reset); NULL: it keeps no layout copies */
	bool (*layout_ok)(const struct resil_conf *c, const void *st);
	/* daemon tick; NULL: nothing to do */
	void (*maintain)(struct resil_ctx *x, const struct resil_conf *c, void *st);
	/* give back what a dead client held; NULL: it holds nothing */
	void (*reclaim)(struct resil_ctx *x, const struct resil_conf *c, void *st,
			uint32_t dead_client, struct resil_reclaim_counts *counts);

	/* Its part of the configuration's extension area (struct
	 * resil_conf's ext[]: words conf_ext_off .. + conf_ext_words - 1),
	 * for a component outside the product's own list, which has no named
	 * part of struct resil_conf; 0 words for every component of the
	 * product. resil_comp_table_check() says the parts fit and are
	 * disjoint. */
	uint8_t conf_ext_off;
	uint8_t conf_ext_words;

#ifdef RESIL_COMP_HOOKS
	/* Decision hooks of a component outside the hot path's own list,
	 * after an admitted acquire and before a release, on the policy's
	 * main block. They exist only in a build that defines
	 * RESIL_COMP_HOOKS (one whose table has such rows: the build says so,
	 * tests/CMakeLists.txt), where policy.c calls them through the table;
	 * a row that sets them does not compile in any other build, so no
	 * hook is ever silently left uncalled. The product's build has none:
	 * its components are called by the hot path itself, by name, and the
	 * hot path never walks the table. NULL: the row has no hook. */
	void (*acquired)(struct resil_ctx *x, const struct resil_conf *c, void *st);
	void (*released)(struct resil_ctx *x, const struct resil_conf *c, void *st);
#endif
};

/* Every component, in configuration order (the order keys are formatted
 * and checked in); NULL-terminated. */
extern const struct resil_comp_ops *const resil_comps[];

#define resil_comp_foreach(op) for (const struct resil_comp_ops *const *op = resil_comps; *op; op++)

/* The first word of a row's part of the extension area of configuration
 * c (const or not, as c is). */
#define RESIL_COMP_CONF_EXT(c, op) (&(c)->ext[(op)->conf_ext_off])

/* The table holds together: ids unique and below RESIL_C_MAX, every
 * extension part inside ext[] and no two overlapping. 0, or -EINVAL with
 * what is wrong in err. */
int resil_comp_table_check(char *err, size_t errlen);

#endif

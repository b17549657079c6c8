/* SPDX-License-Identifier: MIT */
/*
 * counter.h - a test-only component: it counts the acquires a policy
 * admitted and the releases it saw. Built only into the test target that
 * compiles shm/ with -DRESIL_TEST_COUNTER and -DRESIL_COMP_HOOKS
 * (tests/CMakeLists.txt): it exists to show what adding a component
 * takes (its own files and one row of the component table, comp.c).
 *
 * Its key: `counter = on|off`. Its state: one 128-byte line, fleet-wide.
 */
#ifndef RESIL_SHM_COUNTER_H
#define RESIL_SHM_COUNTER_H

#include "comp.h"

/* Its place in a record's comp_off[]: a spare slot below RESIL_C_MAX. */
#define RESIL_C_COUNTER ((enum resil_comp)(RESIL_C_MAX - 1))

/* Its row of the component table. */
extern const struct resil_comp_ops resil_counter_ops;

/* What the block at st counted (relaxed loads: statistics). */
void resil_counter_read(const void *st, uint64_t *acquires, uint64_t *releases);

#endif

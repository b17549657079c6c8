/* SPDX-License-Identifier: MIT */
/* counts.h - the clients' count tables (counts.c). */
#ifndef RESILD_COUNTS_H
#define RESILD_COUNTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resild.h"

/* Take fd (a memfd, shm/count_table.h) as the count table of the row bound to
 * peer's process; fd is the caller's still. 0, or -errno with err. */
int resild_counts_attach(struct resild *d, const struct resild_peer *peer, int fd, char *err,
			 size_t errlen);
/* Row `row` no longer names the process whose table it had. */
void resild_counts_forget(struct resild *d, uint32_t row);
void resild_counts_fini(struct resild *d);
/* Free the claims of rec's pools made under the id of a row with a table
 * beyond what the row's process can hold (docs/trust.md); how many. */
uint32_t resild_counts_sweep(struct resild *d, const struct resil_rec *rec);
/* What the process of row `row` holds at most in policy slot `slot`
 * (acquired - released of its table): false when the row has no table. */
bool resild_counts_bound(const struct resild *d, uint32_t row, uint32_t slot, uint64_t *held);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * segmove.h - a restart with new sizes moves the adopted policies into
 * segments of those sizes (segmove.c).
 */
#ifndef RESILD_SEGMOVE_H
#define RESILD_SEGMOVE_H

#include <stdbool.h>
#include <stdint.h>

struct resild;

/* Do the options ask for other sizes than the adopted segments have? */
bool resild_seg_sizes_differ(const struct resild *d);
/* Move every live policy and its state from d->seg into a new pair of
 * the options' sizes, retire the old pair and hand the new one to the fd
 * store: 1 moved, 0 kept the adopted pair (the reason logged: sizes too
 * small for the live policies, say what fits), -errno. */
int resild_seg_move(struct resild *d);
/* The tick: bulkheads honour the permits still held in the old pair;
 * the old pair is unmapped once none is. */
void resild_seg_move_tick(struct resild *d);
void resild_seg_move_fini(struct resild *d);
/* Does the move keep slots of rec's bulkhead parked for the old memory's
 * holders? (the stray sweep leaves them alone) */
struct resil_rec;
bool resild_seg_move_parks(const struct resild *d, const struct resil_rec *rec);
/* The permits of rec's policy.scope = global bulkhead that live holders
 * still hold in the old pair (counted at the last tick; 0: none, or no
 * move under way): the host holds them besides its new pool's
 * (cluster_bulkhead.c). */
uint32_t resild_seg_move_held(const struct resild *d, const struct resil_rec *rec);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * seg_priv.h - what seg.c (creating, mapping, the directory, client
 * rows), seg_records.c (defining, checking and deleting records),
 * seg_reuse.c (the arena, the reuse of records and blocks) and
 * seg_event.c (the event ring) share: the daemon's private free lists and
 * event queue, the directory's hashes, and the functions each calls in
 * another. Nothing outside the four includes it. The shared words, their
 * writers and their memory orders are seg.c's top comment; the design is
 * docs/internals/seg.md.
 */
#ifndef RESIL_SHM_SEG_PRIV_H
#define RESIL_SHM_SEG_PRIV_H

#include <pthread.h>
#include <string.h>

#include "seg.h"

/* The daemon's own events: a ring in private memory under a mutex (the
 * loop and the cluster exchange push; the loop takes). */
struct resil_evq {
	pthread_mutex_t lock;
	uint32_t cap, head, n;
	uint64_t dropped;
	struct resil_event ev[];
};

struct reuse_rec {
	uint32_t idx;
	int64_t until; /* free from then on (CLOCK_MONOTONIC) */
};

struct reuse_ext {
	uint64_t off; /* relative to the arena */
	uint64_t len;
	int64_t until; /* pending queue only: free from then on */
	uint32_t uid;  /* pending queue only: its policy's owner (UINT32_MAX: unknown) */
};

struct resil_reuse {
	/* records: the retired ones waiting out their grace period
	 * (unordered: each has its policy's own), and a FIFO of free ones
	 * (invalidated, gen 0), in the order they came free. New records are
	 * taken from the never used ones first, then from the FIFO's head:
	 * the record reused is the one free longest. Each array holds
	 * rec_cap entries: a record is in one of them at most once. */
	struct reuse_rec *rpend;
	uint32_t rp_n;
	uint32_t *rfree;
	uint32_t rf_head, rf_n;
	/* arena: the retired extents (unordered), and the holes sorted by
	 * offset, never adjacent (merged on insert) */
	struct reuse_ext *epend;
	size_t ep_n, ep_cap;
	struct reuse_ext *holes;
	size_t nholes, holes_cap;
	uint64_t pend_bytes, hole_bytes;
};

static inline uint64_t name_hash(const struct resil_seg *s, const char *name)
{
	return resil_hash64(name, strlen(name), s->cfg->hash_k0, s->cfg->hash_k1);
}

static inline uint32_t hash32(uint64_t h)
{
	uint32_t v = (uint32_t)(h >> 32);

	return v ? v : 1;
}

/* seg.c */
int resil_seg_priv_dir_find(const struct resil_seg *s, const char *name, uint32_t *ret_slot,
			    uint64_t *ret_word, uint32_t *ret_pos, int64_t *free_pos);

/* seg_reuse.c */
void resil_seg_priv_reuse_free(struct resil_reuse *u);
uint64_t resil_seg_priv_rec_extent(const struct resil_seg *s, const struct resil_rec *rec);
void resil_seg_priv_retire_rec(struct resil_seg *s, uint32_t idx, int64_t now);
void resil_seg_priv_retire_ext(struct resil_seg *s, uint64_t abs_off, uint64_t len, int64_t until,
			       uint32_t uid);
int64_t resil_seg_priv_block_until(const struct resil_seg *s, const struct resil_rec *rec,
				   int64_t now);
void resil_seg_priv_reuse_publish(struct resil_seg *s);
int resil_seg_priv_arena_alloc(struct resil_seg *s, uint64_t size, uint64_t *off, char *err,
			       size_t errlen);
int resil_seg_priv_take_rec(struct resil_seg *s, uint32_t *ri, char *err, size_t errlen);

#endif

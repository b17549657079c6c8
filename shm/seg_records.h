/* SPDX-License-Identifier: MIT */
/*
 * seg_records.h - configuration records checked, defined and deleted
 * (seg_records.c): the segment's writer side. It sits above the
 * components (a define lays out their state, a check parses a record's
 * configuration back), so it is apart from seg.h, the contract every
 * component may include.
 */
#ifndef RESIL_SHM_SEG_RECORDS_H
#define RESIL_SHM_SEG_RECORDS_H

#include "seg.h"

/* Deep validation of an adopted pair (a restarted daemon, the fuzzer):
 * every directory entry, slot word and live record points inside the
 * segments, names are terminated, state blocks lie in the arena. Reads
 * nothing of the state segment but its header's identity: the records
 * and the geometry are the configuration's. -EBADMSG with what is wrong
 * in err. */
int resil_seg_check(const struct resil_seg *s, char *err, size_t errlen);
/* One record, as resil_seg_check sees it (the daemon checks before use). */
bool resil_rec_sane(const struct resil_seg *s, const struct resil_rec *rec);
/* Would resil_seg_define find conf identical to orec's? The comparison
 * a define makes. */
bool resil_seg_conf_same(const struct resil_rec *orec, const struct resil_conf *conf);

/*
 * Writer side (daemon, or embedded under define_lock): create or replace
 * NAME with CONF. A change that keeps the state's shape reuses the state
 * block; one that changes it gets a new block, carrying over what still
 * means something. -ENOSPC names the limit in err; -EAGAIN when the
 * records or arena space it needs are those of earlier changes waiting
 * out their grace period (resil_seg_next_free_ns: from when on).
 * Positive results: RESIL_DEFINE_* (names.h).
 */
int resil_seg_define(struct resil_seg *s, const char *name, const struct resil_conf *conf,
		     uint32_t uid, uint32_t flags, int64_t now, char *err, size_t errlen);
int resil_seg_delete(struct resil_seg *s, const char *name);
/* What a define would take (resil_seg_define_cost: 0 of each when it
 * would leave the policy unchanged), or what is left (resil_seg_room). A
 * caller that applies several defines as one (a reload) checks their sum
 * against the room first, so it applies all of them or none. */
struct resil_define_cost {
	uint32_t records;
	uint32_t slots;
	uint64_t arena; /* bytes */
};
int resil_seg_define_cost(const struct resil_seg *s, const char *name,
			  const struct resil_conf *conf, uint32_t flags,
			  struct resil_define_cost *c);
void resil_seg_room(const struct resil_seg *s, struct resil_define_cost *room);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * seg_records.c - configuration records: one checked (resil_rec_sane, and
 * resil_seg_check for an adopted pair, down to a configuration round
 * trip), defined (the block sized, allocated and initialized, the record
 * written, then published by its slot word and its directory entry) and
 * deleted (the entry, then the slot word), and what a define would cost.
 * Writer: the daemon, or the embedding process under st->define_lock.
 * The publication order, its crash windows and the reuse that follows a
 * replace or a delete: docs/internals/seg.md; the words and their memory
 * orders: seg.c's top comment.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "seg_priv.h"
#include "seg_records.h"
#include "conf.h"
#include "policy.h"

bool resil_rec_sane(const struct resil_seg *s, const struct resil_rec *rec)
{
	uint64_t lo = s->geo.arena_off, hi = s->geo.arena_off + s->geo.arena_size;

	if (memchr(rec->name, '\0', sizeof(rec->name)) == NULL || !resil_name_valid(rec->name))
		return false;
	if (rec->slot >= s->cfg->slot_cap || rec->components >> RESIL_C_MAX)
		return false;
	/* state_off > hi first: hi - state_off would wrap and pass */
	if (rec->state_off < lo || rec->state_off > hi || rec->state_off % RESIL_HOT_ALIGN ||
	    rec->state_size > hi - rec->state_off)
		return false;
	for (int i = 0; i < RESIL_C_MAX; i++) {
		if (!(rec->components & (1u << i)))
			continue;
		if (rec->comp_off[i] >= rec->state_size || rec->comp_off[i] % RESIL_HOT_ALIGN)
			return false;
	}
	if (rec->budget_slot > s->cfg->slot_cap)
		return false;
	if (rec->proc_stride) {
		uint64_t n = s->geo.client_cap;

		/* the copies after the main block, each holding every
		 * component the copy covers (the stride: layout_ok below) */
		if (rec->conf.scope != RESIL_SCOPE_PROCESS || rec->proc_off < lo ||
		    rec->proc_off > hi || rec->proc_off % RESIL_HOT_ALIGN ||
		    rec->proc_stride % RESIL_HOT_ALIGN ||
		    rec->proc_off - rec->state_off < rec->state_size ||
		    rec->proc_stride > (hi - rec->proc_off) / n)
			return false;
	} else if (rec->conf.scope == RESIL_SCOPE_PROCESS || rec->proc_off) {
		return false;
	}
	/* the layout must be one a build computes for the conf */
	return resil_policy_layout_ok(rec);
}

/* A configuration is one the parser can produce (every bound the keys
 * check holds) when formatting it and parsing the text back gives the same
 * bytes: the one validator of a conf, whatever its components. */
static bool conf_round_trips(const struct resil_conf *c)
{
	/* on the stack: this runs when a daemon adopts segments, and a
	 * thread-local buffer would cost every thread of every client */
	char text[16384];
	struct resil_conf back;
	size_t n = resil_conf_format(c, text, sizeof(text));

	if (n >= sizeof(text))
		return false;
	resil_conf_init(&back);
	if (resil_conf_parse(&back, text, 1, NULL, 0) < 0)
		return false;
	return memcmp(&back, c, sizeof(back)) == 0;
}

int resil_seg_check(const struct resil_seg *s, char *err, size_t errlen)
{
	ra64 *dir, *slots;
	int r;

	if (!s || !s->cfg || !s->st)
		return resil_errf(err, errlen, -EINVAL, "no segments");
	r = resil_seg_validate(s->cfg, s->cfg_size, s->st, s->st_size, err, errlen);
	if (r < 0)
		return r;
	if (ld_relaxed(&s->cfg->rec_used) > s->cfg->rec_cap)
		return resil_errf(err, errlen, -EBADMSG,
				  "config segment: record count beyond capacity");
	dir = resil_seg_dir(s);
	slots = resil_seg_slots(s);
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++) {
		uint64_t w = ld_relaxed(&slots[i]);
		struct resil_rec *rec;

		if (!w)
			continue;
		if (resil_slotw_rec(w) >= ld_relaxed(&s->cfg->rec_used))
			return resil_errf(err, errlen, -EBADMSG, "slot %u: record out of range", i);
		rec = resil_seg_rec_of(s, w);
		/* the arena's end, not st->arena_used: that word is any
		 * client's to write (resil_seg_own_arena takes the used end
		 * from the records instead) */
		uint64_t end = s->geo.arena_off + s->geo.arena_size;

		if (!rec || rec->slot != i || !resil_rec_sane(s, rec) ||
		    rec->state_off + rec->state_size > end ||
		    (rec->proc_stride &&
		     rec->proc_off + rec->proc_stride * s->geo.client_cap > end))
			return resil_errf(err, errlen, -EBADMSG, "slot %u: corrupt record", i);
		if (!conf_round_trips(&rec->conf))
			return resil_errf(err, errlen, -EBADMSG,
					  "slot %u (%s): corrupt configuration", i, rec->name);
	}
	for (uint32_t i = 0; i < s->cfg->dir_cap; i++) {
		uint64_t e = ld_relaxed(&dir[i]);
		uint32_t sl = (uint32_t)e;

		if (e && sl != RESIL_DIR_TOMB && (sl == 0 || sl - 1 >= s->cfg->slot_cap))
			return resil_errf(err, errlen, -EBADMSG, "directory entry %u: bad slot", i);
	}
	return 0;
}

/* What resil_seg_define allocates for conf: the main block and, under
 * process scope, one copy of the decision components per client row. */
static uint64_t alloc_size_of(const struct resil_seg *s, const struct resil_conf *conf,
			      uint64_t *main_size, uint64_t *copy)
{
	uint32_t comp_off[RESIL_C_MAX], components;

	*main_size =
	    resil_align_up(resil_policy_state_layout(conf, comp_off, &components), RESIL_HOT_ALIGN);
	*copy = resil_policy_copy_size(conf);
	return *main_size + *copy * s->geo.client_cap;
}

bool resil_seg_conf_same(const struct resil_rec *orec, const struct resil_conf *conf)
{
	return memcmp(&orec->conf, conf, sizeof(*conf)) == 0;
}

/* A change of configuration that keeps orec's block as it is: the same
 * shape, the same layout. */
static bool keeps_block(const struct resil_rec *orec, const struct resil_conf *conf)
{
	uint32_t off[RESIL_C_MAX], comps;
	uint64_t size = resil_policy_state_layout(conf, off, &comps);

	return resil_policy_same_shape(&orec->conf, conf) && size == orec->state_size &&
	       comps == orec->components && memcmp(off, orec->comp_off, sizeof(off)) == 0 &&
	       orec->proc_stride == resil_policy_copy_size(conf);
}

int resil_seg_define(struct resil_seg *s, const char *name, const struct resil_conf *conf,
		     uint32_t uid, uint32_t flags, int64_t now, char *err, size_t errlen)
{
	ra64 *slots, *dir;
	uint32_t slot = 0, pos = 0, comp_off[RESIL_C_MAX] = {0}, components = 0, budget_slot = 0;
	uint64_t old_w = 0, state_off = 0, state_size;
	int64_t free_pos = -1;
	struct resil_rec *orec = NULL, *rec;
	uint32_t ri, gen;
	bool exists, reuse_state;
	int r;

	if (!s || !s->cfg || !s->cfg_writable || !conf)
		return resil_errf(err, errlen, -EINVAL, "invalid arguments");
	if (!resil_name_valid(name))
		return resil_errf(
		    err, errlen, -EINVAL,
		    "invalid policy name '%.80s': 1 to %d characters of A-Z a-z 0-9 _ . : -",
		    name ? name : "", RESIL_NAME_MAX - 1);
	slots = resil_seg_slots(s);
	dir = resil_seg_dir(s);

	r = resil_seg_priv_dir_find(s, name, &slot, &old_w, &pos, &free_pos);
	exists = r == 0;
	if (exists) {
		orec = resil_seg_rec_of(s, old_w);
		if (memcmp(&orec->conf, conf, sizeof(*conf)) == 0 &&
		    !((orec->flags ^ flags) & (RESIL_REC_FROM_FILE | RESIL_REC_RUNTIME)))
			return RESIL_DEFINE_UNCHANGED;
	} else if (free_pos < 0) {
		return resil_errf(err, errlen, -ENOSPC, "policy directory full: raise --policies");
	}

	if (conf->retry.budget_kind == RESIL_BUDGET_SHARED) {
		char bname[RESIL_NAME_MAX];
		uint32_t bslot;

		snprintf(bname, sizeof(bname), "@%.*s", (int)sizeof(conf->retry.budget_name),
			 conf->retry.budget_name);
		if (resil_seg_lookup(s, bname, &bslot, NULL) < 0)
			return resil_errf(
			    err, errlen, -ENOENT,
			    "retry.budget: no budget named %s (define [policy %s] with "
			    "retry.budget = grpc:..., aws:... or ratio:... first)",
			    bname, bname);
		budget_slot = bslot + 1;
	}

	state_size = resil_policy_state_layout(conf, comp_off, &components);
	reuse_state = exists && keeps_block(orec, conf);
	/* process scope: the main block, then one copy per client row */
	uint64_t main_size, copy_size, alloc_size;

	if (conf->scope == RESIL_SCOPE_PROCESS &&
	    resil_policy_copy_size(conf) > s->geo.arena_size / (s->geo.client_cap + 1ull))
		return resil_errf(err, errlen, -ENOSPC,
				  "policy.scope = process needs %" PRIu64
				  " bytes per client row for %" PRIu32 " rows: raise --state-size",
				  resil_policy_copy_size(conf), s->geo.client_cap);
	alloc_size = alloc_size_of(s, conf, &main_size, &copy_size);

	/* a never used record, else (reuse) the one free longest */
	ri = ld_relaxed(&s->cfg->rec_used);
	if (ri >= s->cfg->rec_cap) {
		r = resil_seg_priv_take_rec(s, &ri, err, errlen);
		if (r < 0)
			return r;
	}

	if (reuse_state) {
		state_off = orec->state_off;
	} else {
		r = resil_seg_priv_arena_alloc(s, alloc_size, &state_off, err, errlen);
		if (r < 0)
			return r;
	}

	if (!exists) {
		/* a free slot: word 0 */
		uint32_t i;

		for (i = 0; i < s->cfg->slot_cap; i++)
			if (ld_relaxed(&slots[i]) == 0)
				break;
		if (i == s->cfg->slot_cap)
			return resil_errf(err, errlen, -ENOSPC,
					  "all %" PRIu32 " policy slots in use: raise --policies",
					  s->cfg->slot_cap);
		slot = i;
	}

	if (ri < ld_relaxed(&s->cfg->rec_used)) {
		/* the free FIFO's head, taken: nothing can fail from here on */
		if (s->reuse) {
			s->reuse->rf_head = (s->reuse->rf_head + 1) % s->cfg->rec_cap;
			s->reuse->rf_n--;
		}
	} else {
		st_relaxed(&s->cfg->rec_used, ri + 1);
	}
	rec = resil_seg_rec(s, ri);
	/* embedded mode's reuse (resil_seg_priv_take_rec): gen 0 before anything else of
	 * the record changes (the daemon's reclaim stored it already) */
	st_relaxed((ra32 *)&rec->gen, 0);
	atomic_thread_fence(memory_order_release);
	/* gen stays 0 (a free record's, or a new one's) until the record is
	 * whole: the seqlock readers of libresil.c (a permit's release) */
	memset(rec, 0, RESIL_REC_SIZE);
	snprintf(rec->name, sizeof(rec->name), "%s", name);
	gen = ld_relaxed(&s->cfg->generation) + 1;
	rec->slot = slot;
	rec->owner_uid = exists ? orec->owner_uid : uid;
	rec->flags = flags;
	rec->components = components;
	rec->state_gen = reuse_state ? orec->state_gen : (exists ? orec->state_gen + 1 : 1);
	rec->state_off = state_off;
	rec->state_size = state_size;
	memcpy(rec->comp_off, comp_off, sizeof(comp_off));
	rec->budget_slot = budget_slot;
	if (conf->scope == RESIL_SCOPE_PROCESS) {
		rec->proc_off = state_off + main_size;
		rec->proc_stride = copy_size;
	}
	rec->conf = *conf;

	if (!reuse_state) {
		resil_policy_state_init(s, rec, now);
		if (exists)
			resil_policy_carry(s, rec, orec, now);
	}

	/* seqlock writer, second half: the whole record before its gen */
	st_release((ra32 *)&rec->gen, gen);
	/* the old record stamped before it is unnamed: a record no slot names
	 * whose stamp is 0 was never published (embedded mode reuses it) */
	if (exists)
		st_relaxed(&orec->retired_ns, (uint64_t)resil_clock_monotonic(NULL));
	st_release(&slots[slot], (uint64_t)(ri + 1) | (uint64_t)gen << 32);
	if (!exists)
		st_release(&dir[free_pos], (uint64_t)hash32(name_hash(s, name)) << 32 | (slot + 1));
	st_release(&s->cfg->generation, gen);
	if (exists) {
		/* after the slot word moved on: the old record, and its block
		 * unless the new record kept it, start their grace period */
		int64_t t = resil_clock_monotonic(NULL);

		if (!reuse_state)
			resil_seg_priv_retire_ext(
			    s, orec->state_off, resil_seg_priv_rec_extent(s, orec),
			    resil_seg_priv_block_until(s, orec, t), orec->owner_uid);
		resil_seg_priv_retire_rec(s, resil_slotw_rec(old_w), t);
	}
	resil_seg_priv_reuse_publish(s);
	resil_event_push(s, RESIL_EV_CONFIG, slot, gen,
			 exists ? RESIL_CHANGE_CHANGED : RESIL_CHANGE_CREATED, reuse_state, 0, 0,
			 now);
	return exists ? RESIL_DEFINE_CHANGED : RESIL_DEFINE_CREATED;
}

int resil_seg_define_cost(const struct resil_seg *s, const char *name,
			  const struct resil_conf *conf, uint32_t flags,
			  struct resil_define_cost *c)
{
	const struct resil_rec *orec = NULL;
	uint64_t w, main_size, copy_size;
	uint32_t slot;

	memset(c, 0, sizeof(*c));
	if (!s || !s->cfg || !conf || !resil_name_valid(name))
		return -EINVAL;
	if (resil_seg_lookup(s, name, &slot, &w) == 0) {
		orec = resil_seg_rec_of(s, w);
		if (resil_seg_conf_same(orec, conf) &&
		    !((orec->flags ^ flags) & (RESIL_REC_FROM_FILE | RESIL_REC_RUNTIME)))
			return 0;
	} else {
		c->slots = 1;
	}
	c->records = 1;
	if (orec && keeps_block(orec, conf))
		return 0;
	/* as resil_seg_define and resil_seg_priv_arena_alloc size it */
	c->arena = alloc_size_of(s, conf, &main_size, &copy_size);
	return 0;
}

void resil_seg_room(const struct resil_seg *s, struct resil_define_cost *room)
{
	/* the daemon's own bump pointer, never the client-writable copy */
	uint64_t used = s->arena_private ? s->arena_used : ld_relaxed(&s->st->arena_used);
	uint32_t rused = ld_relaxed(&s->cfg->rec_used), n = 0;

	room->records = rused < s->cfg->rec_cap ? s->cfg->rec_cap - rused : 0;
	/* the tail only: holes are counted out, so defines that fit this sum
	 * fit whatever the holes' sizes (a reload applies whole or not at
	 * all); the tail grows back as the holes at its end are freed */
	room->arena = used < s->geo.arena_size ? s->geo.arena_size - used : 0;
	if (s->reuse)
		room->records += s->reuse->rf_n;
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++)
		n += ld_relaxed(&resil_seg_slots(s)[i]) == 0;
	room->slots = n;
}

int resil_seg_delete(struct resil_seg *s, const char *name)
{
	struct resil_rec *rec;
	uint32_t slot, pos;
	uint64_t w;
	int64_t t;
	ra64 *dir;
	int r;

	if (!s || !s->cfg || !s->cfg_writable || !name)
		return -EINVAL;
	r = resil_seg_priv_dir_find(s, name, &slot, &w, &pos, NULL);
	if (r < 0)
		return r;
	dir = resil_seg_dir(s);
	rec = resil_seg_rec_of(s, w);
	t = resil_clock_monotonic(NULL);
	/* Stamped (resil_seg_priv_take_rec), then the entry: a lookup no longer finds the
	 * name; then the slot: a handle that still holds it sees 0 and
	 * answers -ENOENT. The record and the state block are reused only
	 * after their grace period (an old handle may still write to it:
	 * docs/internals/seg.md, "Reuse"). */
	if (rec)
		st_relaxed(&rec->retired_ns, (uint64_t)t);
	st_release(&dir[pos], (ld_relaxed(&dir[pos]) & 0xffffffff00000000ULL) | RESIL_DIR_TOMB);
	st_release(&resil_seg_slots(s)[slot], 0);
	if (rec) {
		/* unnamed: the record and its block wait out the grace period */
		resil_seg_priv_retire_ext(s, rec->state_off, resil_seg_priv_rec_extent(s, rec),
					  resil_seg_priv_block_until(s, rec, t), rec->owner_uid);
		resil_seg_priv_retire_rec(s, resil_slotw_rec(w), t);
		resil_seg_priv_reuse_publish(s);
	}
	uint32_t gen = ld_relaxed(&s->cfg->generation) + 1;
	st_release(&s->cfg->generation, gen);
	resil_event_push(s, RESIL_EV_CONFIG, slot, resil_slotw_gen(w), RESIL_CHANGE_DELETED, 0, 0,
			 0, 0);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * seg_reuse.c - the arena and the reuse of records and blocks: the
 * daemon's private queues of retired records and extents, the holes
 * (sorted, merged, first fit), the bump pointer, the grace periods,
 * reclaim, the queues rebuilt after a restart (resil_seg_reuse_init),
 * embedded mode's reuse by the records' stamps, and the usage figures
 * published in the config header. The daemon's queues live in its
 * private memory: nothing a client writes decides what is free. Design
 * ("Reuse", its crash window): docs/internals/seg.md; the words and
 * their memory orders: seg.c's top comment.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "seg_priv.h"

void resil_seg_priv_reuse_free(struct resil_reuse *u)
{
	if (!u)
		return;
	free(u->rpend);
	free(u->rfree);
	free(u->epend);
	free(u->holes);
	free(u);
}

/* The extent a record's block takes: the main block and, under process
 * scope, one copy per client row (as resil_seg_define allocates it). */
uint64_t resil_seg_priv_rec_extent(const struct resil_seg *s, const struct resil_rec *rec)
{
	uint64_t main_size =
	    resil_align_up(rec->state_size ? rec->state_size : RESIL_HOT_ALIGN, RESIL_HOT_ALIGN);

	if (rec->proc_stride)
		return rec->proc_off - rec->state_off + rec->proc_stride * s->geo.client_cap;
	return main_size;
}

/* How long after its retirement a record or block of conf may be
 * reused: the grace period, plus the longest a bulkhead waiter sleeps on
 * the block before it looks at it again (bulkhead.wait, bounded by
 * RESIL_WAIT_MAX_NS: conf.c refuses more; an adopted record's is clamped
 * here all the same). A policy's wait delays the reuse of its own
 * records and blocks only. */
static int64_t grace_of(const struct resil_conf *conf)
{
	int64_t w = conf->bulkhead.on ? conf->bulkhead.wait_ns : 0;

	if (w < 0)
		w = 0;
	if (w > RESIL_WAIT_MAX_NS)
		w = RESIL_WAIT_MAX_NS;
	return RESIL_REUSE_GRACE_NS + w;
}

void resil_seg_priv_retire_rec(struct resil_seg *s, uint32_t idx, int64_t now)
{
	struct resil_reuse *u = s->reuse;
	struct resil_rec *rec;

	if (idx >= s->cfg->rec_cap)
		return;
	rec = resil_seg_rec(s, idx);
	/* when it stopped being named: what embedded mode (no queues of
	 * its own across processes) reuses by */
	st_relaxed(&rec->retired_ns, (uint64_t)now);
	if (!u || u->rp_n >= s->cfg->rec_cap)
		return;
	u->rpend[u->rp_n++] = (struct reuse_rec){idx, resil_add_sat(now, grace_of(&rec->conf))};
}

void resil_seg_priv_retire_ext(struct resil_seg *s, uint64_t abs_off, uint64_t len, int64_t until,
			       uint32_t uid)
{
	struct resil_reuse *u = s->reuse;

	if (!u || !len || abs_off < s->geo.arena_off)
		return;
	if (u->ep_n == u->ep_cap) {
		size_t cap = u->ep_cap ? u->ep_cap * 2 : 64;
		struct reuse_ext *n = realloc(u->epend, cap * sizeof(*n));

		if (!n)
			return; /* out of memory: the extent stays used (lost) */
		u->epend = n;
		u->ep_cap = cap;
	}
	u->epend[u->ep_n++] = (struct reuse_ext){abs_off - s->geo.arena_off, len, until, uid};
	u->pend_bytes += len;
}

/* A retired block (rec's) is free once every record that named it is:
 * its own grace, or a longer one of an older record of the same block (a
 * change that kept the block) still waiting. */
int64_t resil_seg_priv_block_until(const struct resil_seg *s, const struct resil_rec *rec,
				   int64_t now)
{
	const struct resil_reuse *u = s->reuse;
	int64_t until = resil_add_sat(now, grace_of(&rec->conf));

	for (uint32_t i = 0; u && i < u->rp_n; i++)
		if (resil_seg_rec(s, u->rpend[i].idx)->state_off == rec->state_off &&
		    u->rpend[i].until > until)
			until = u->rpend[i].until;
	return until;
}

/* Insert [off, off + len) into the holes, merged with its neighbours; a
 * hole that then ends at the bump pointer lowers it. false: no memory
 * (the extent stays lost, counted as used). */
static bool hole_insert(struct resil_seg *s, uint64_t off, uint64_t len)
{
	struct resil_reuse *u = s->reuse;
	size_t lo = 0, hi = u->nholes;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (u->holes[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* lo: the first hole after off */
	bool prev = lo > 0 && u->holes[lo - 1].off + u->holes[lo - 1].len == off;
	bool next = lo < u->nholes && off + len == u->holes[lo].off;

	if (prev && next) {
		u->holes[lo - 1].len += len + u->holes[lo].len;
		memmove(u->holes + lo, u->holes + lo + 1, (u->nholes - lo - 1) * sizeof(*u->holes));
		u->nholes--;
		lo--;
	} else if (prev) {
		u->holes[--lo].len += len;
	} else if (next) {
		u->holes[lo].off = off;
		u->holes[lo].len += len;
	} else {
		if (u->nholes == u->holes_cap) {
			size_t cap = u->holes_cap ? u->holes_cap * 2 : 64;
			struct reuse_ext *n = realloc(u->holes, cap * sizeof(*n));

			if (!n)
				return false;
			u->holes = n;
			u->holes_cap = cap;
		}
		memmove(u->holes + lo + 1, u->holes + lo, (u->nholes - lo) * sizeof(*u->holes));
		u->holes[lo] = (struct reuse_ext){off, len, 0};
		u->nholes++;
	}
	u->hole_bytes += len;
	/* the last hole touching the bump pointer gives the tail back */
	if (lo == u->nholes - 1 && u->holes[lo].off + u->holes[lo].len == s->arena_used) {
		s->arena_used = u->holes[lo].off;
		u->hole_bytes -= u->holes[lo].len;
		u->nholes--;
		st_release(&s->st->arena_used, s->arena_used);
	}
	return true;
}

/* First fit among the holes: the arena-relative offset, or false. */
static bool hole_take(struct resil_seg *s, uint64_t sz, uint64_t *off)
{
	struct resil_reuse *u = s->reuse;

	for (size_t i = 0; u && i < u->nholes; i++) {
		if (u->holes[i].len < sz)
			continue;
		*off = u->holes[i].off;
		u->holes[i].off += sz;
		u->holes[i].len -= sz;
		u->hole_bytes -= sz;
		if (!u->holes[i].len) {
			memmove(u->holes + i, u->holes + i + 1,
				(u->nholes - i - 1) * sizeof(*u->holes));
			u->nholes--;
		}
		return true;
	}
	return false;
}

/* A block's pages go back to the kernel (they read as zeros until a new
 * owner writes them): only whole pages inside the extent. */
static void punch(const struct resil_seg *s, uint64_t abs_off, uint64_t len)
{
	uint64_t a = resil_align_up(abs_off, 4096), e = (abs_off + len) & ~4095ULL;

	if (e > a && s->st_fd >= 0)
		(void)fallocate(s->st_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
				(off_t)(e - a));
}

void resil_seg_zero(const struct resil_seg *s, uint64_t off, uint64_t len)
{
	uint64_t a = resil_align_up(off, 4096), e = (off + len) & ~4095ULL;

	if (s->st_fd < 0 || e <= a) {
		memset(resil_seg_state(s, off), 0, len);
		return;
	}
	/* the partial pages at the ends by hand, the whole ones by giving
	 * them back to the kernel: they read as zeros and cost nothing
	 * until a decision writes them */
	memset(resil_seg_state(s, off), 0, a - off);
	memset(resil_seg_state(s, e), 0, off + len - e);
	if (fallocate(s->st_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
		      (off_t)(e - a)) < 0)
		memset(resil_seg_state(s, a), 0, e - a);
}

void resil_seg_reclaim(struct resil_seg *s, int64_t now)
{
	struct resil_reuse *u = s ? s->reuse : NULL;

	if (!u)
		return;
	/* records first: a block's records come free no later than it. The
	 * pending ones stay in the order they retired (compacted in place),
	 * so those of one grace come free oldest first. */
	uint32_t k = 0;

	for (uint32_t i = 0; i < u->rp_n; i++) {
		struct reuse_rec r = u->rpend[i];
		struct resil_rec *rec;

		if (now < r.until) {
			u->rpend[k++] = r;
			continue;
		}
		rec = resil_seg_rec(s, r.idx);
		/* seqlock writer, first half: a reader that copies the record
		 * from now on sees gen 0 before or after its copy and drops it;
		 * the release fence orders this store before the rewrite's */
		st_relaxed((ra32 *)&rec->gen, 0);
		atomic_thread_fence(memory_order_release);
		u->rfree[(u->rf_head + u->rf_n++) % s->cfg->rec_cap] = r.idx;
	}
	u->rp_n = k;
	size_t m = 0;

	for (size_t i = 0; i < u->ep_n; i++) {
		struct reuse_ext e = u->epend[i];

		if (now < e.until) {
			u->epend[m++] = e;
			continue;
		}
		punch(s, s->geo.arena_off + e.off, e.len);
		u->pend_bytes -= e.len;
		(void)hole_insert(s, e.off, e.len);
	}
	u->ep_n = m;
	resil_seg_priv_reuse_publish(s);
}

int64_t resil_seg_next_free_ns(const struct resil_seg *s, bool records)
{
	const struct resil_reuse *u = s->reuse;
	int64_t t = INT64_MAX;

	if (!u) {
		/* embedded mode: the records' own stamps (embedded_rec) */
		for (uint32_t i = 0; records && i < s->cfg->rec_cap; i++) {
			const struct resil_rec *rec = resil_seg_rec(s, i);
			uint64_t at = ld_relaxed(&rec->retired_ns);

			if (at && resil_add_sat((int64_t)at, grace_of(&rec->conf)) < t)
				t = resil_add_sat((int64_t)at, grace_of(&rec->conf));
		}
		return t;
	}
	if (records)
		for (uint32_t i = 0; i < u->rp_n; i++)
			t = u->rpend[i].until < t ? u->rpend[i].until : t;
	else
		for (size_t i = 0; i < u->ep_n; i++)
			t = u->epend[i].until < t ? u->epend[i].until : t;
	return t;
}

/* Arena-relative extents of the live records, sorted by offset. */
static int cmp_ext(const void *a, const void *b)
{
	const struct reuse_ext *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* A retired record's (arena-relative) block offset and when it comes
 * free, for the gaps of an adopted arena. */
struct off_until {
	uint64_t off;
	int64_t until;
};

static int cmp_off_until(const void *a, const void *b)
{
	const struct off_until *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int resil_seg_reuse_init(struct resil_seg *s, int64_t now)
{
	struct resil_reuse *u;
	uint32_t cap = s->cfg->rec_cap, used = ld_relaxed(&s->cfg->rec_used);
	struct reuse_ext *live = NULL;
	struct off_until *gone = NULL;
	size_t nlive = 0, ngone = 0, g = 0;
	bool *named = NULL;
	ra64 *slots = resil_seg_slots(s);
	uint64_t at = 0;

	if (!s->cfg_writable || !s->arena_private)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->rpend = calloc(cap, sizeof(*u->rpend));
	u->rfree = calloc(cap, sizeof(*u->rfree));
	named = calloc(cap, sizeof(*named));
	live = calloc(s->cfg->slot_cap, sizeof(*live));
	gone = calloc(cap, sizeof(*gone));
	if (!u->rpend || !u->rfree || !named || !live || !gone) {
		resil_seg_priv_reuse_free(u);
		free(named);
		free(live);
		free(gone);
		return -ENOMEM;
	}
	resil_seg_priv_reuse_free(s->reuse);
	s->reuse = u;
	/* live: what a slot word names (resil_seg_check vouched for each) */
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++) {
		uint64_t w = ld_relaxed(&slots[i]);
		const struct resil_rec *rec = resil_seg_rec_of(s, w);

		if (!rec || resil_slotw_rec(w) >= used)
			continue;
		named[resil_slotw_rec(w)] = true;
		live[nlive++] = (struct reuse_ext){rec->state_off - s->geo.arena_off,
						   resil_seg_priv_rec_extent(s, rec), 0};
	}
	/* the rest was handed out before: an old permit may still name it.
	 * Its grace runs from when it was retired (the stamp our own writes
	 * left in the configuration), or from now */
	for (uint32_t i = 0; i < used && i < cap; i++) {
		struct resil_rec *rec = resil_seg_rec(s, i);
		uint64_t t = ld_relaxed(&rec->retired_ns);

		if (named[i])
			continue;
		resil_seg_priv_retire_rec(s, i, t && t <= (uint64_t)now ? (int64_t)t : now);
		if (rec->state_off >= s->geo.arena_off)
			gone[ngone++] = (struct off_until){rec->state_off - s->geo.arena_off,
							   u->rpend[u->rp_n - 1].until};
	}
	/* the gaps between live blocks: free once every retired record whose
	 * block lies there is (its policy's own grace), at least the grace */
	qsort(live, nlive, sizeof(*live), cmp_ext);
	qsort(gone, ngone, sizeof(*gone), cmp_off_until);
	for (size_t i = 0; i <= nlive; i++) {
		uint64_t end = i < nlive ? live[i].off : s->arena_used;
		int64_t until = resil_add_sat(now, RESIL_REUSE_GRACE_NS);

		for (; g < ngone && gone[g].off < end; g++)
			if (gone[g].off >= at && gone[g].until > until)
				until = gone[g].until;
		if (end > at)
			resil_seg_priv_retire_ext(s, s->geo.arena_off + at, end - at, until,
						  UINT32_MAX);
		if (i < nlive && live[i].off + live[i].len > at)
			at = live[i].off + live[i].len;
	}
	free(named);
	free(live);
	free(gone);
	resil_seg_priv_reuse_publish(s);
	return 0;
}

/* The figures of resil_seg_usage into the config header (seg.h). */
void resil_seg_priv_reuse_publish(struct resil_seg *s)
{
	struct resil_seg_usage v;

	if (!s->reuse)
		return;
	resil_seg_usage(s, &v);
	st_relaxed(&s->cfg->rec_free, s->reuse->rf_n);
	st_relaxed(&s->cfg->rec_waiting, v.records_waiting);
	st_relaxed(&s->cfg->arena_live, v.arena_used);
	st_relaxed(&s->cfg->arena_waiting, v.arena_waiting);
	st_relaxed(&s->cfg->arena_free, v.arena_free);
	st_relaxed(&s->cfg->arena_largest_free, v.arena_largest_free);
	st_relaxed(&s->cfg->arena_holes, v.arena_holes);
}

uint64_t resil_seg_rec_bytes(const struct resil_seg *s, const struct resil_rec *rec)
{
	return resil_seg_priv_rec_extent(s, rec);
}

uint64_t resil_seg_waiting_bytes_of(const struct resil_seg *s, uint32_t uid)
{
	const struct resil_reuse *u = s->reuse;
	uint64_t n = 0;

	for (size_t i = 0; u && i < u->ep_n; i++)
		if (u->epend[i].uid == uid)
			n += u->epend[i].len;
	return n;
}

void resil_seg_usage(const struct resil_seg *s, struct resil_seg_usage *v)
{
	const struct resil_reuse *u = s->reuse;
	uint64_t bump = s->arena_private ? s->arena_used : ld_relaxed(&s->st->arena_used);

	memset(v, 0, sizeof(*v));
	if (bump > s->geo.arena_size)
		bump = s->geo.arena_size;
	v->records = s->cfg->rec_cap;
	v->records_used = ld_relaxed(&s->cfg->rec_used);
	v->arena = s->geo.arena_size;
	v->arena_used = bump;
	v->arena_largest_free = s->geo.arena_size - bump;
	if (!u)
		return;
	v->records_used -= u->rf_n;
	v->records_waiting = u->rp_n;
	v->arena_used -= u->hole_bytes;
	v->arena_waiting = u->pend_bytes;
	v->arena_free = u->hole_bytes;
	v->arena_holes = (uint32_t)u->nholes;
	for (size_t i = 0; i < u->nholes; i++)
		if (u->holes[i].len > v->arena_largest_free)
			v->arena_largest_free = u->holes[i].len;
}

int resil_seg_priv_arena_alloc(struct resil_seg *s, uint64_t size, uint64_t *off, char *err,
			       size_t errlen)
{
	uint64_t sz = resil_align_up(size ? size : RESIL_HOT_ALIGN, RESIL_HOT_ALIGN);
	/* The daemon's own pointer; embedded processes share the header's,
	 * whatever it holds bounded by the private geometry below, so a
	 * hostile value can waste the arena, never reach past it. */
	uint64_t used = s->arena_private ? s->arena_used : ld_relaxed(&s->st->arena_used), hole;

	if (hole_take(s, sz, &hole)) {
		*off = s->geo.arena_off + hole;
		return 0;
	}
	/* Only one writer (daemon, or embedded under define_lock): no CAS. */
	if (sz > s->geo.arena_size || used > s->geo.arena_size - sz) {
		struct resil_reuse *u = s->reuse;
		int64_t now = resil_clock_monotonic(NULL), ready;

		/* blocks that wait out their grace period may make room: the
		 * caller may wait for them (resil_seg_next_free_ns), as a
		 * reload waits for records */
		if (u && u->pend_bytes && sz <= s->geo.arena_size &&
		    u->pend_bytes + u->hole_bytes + (s->geo.arena_size - used) >= sz) {
			ready = resil_seg_next_free_ns(s, false);
			return resil_errf(
			    err, errlen, -EAGAIN,
			    "state segment full (%" PRIu64 " of %" PRIu64 " bytes used, %" PRIu64
			    " needed; %" PRIu64
			    " bytes of deleted or changed policies come free from %" PRId64
			    " ms on): retry later or raise --state-size",
			    used - u->hole_bytes, s->geo.arena_size, sz, u->pend_bytes,
			    (int64_t)(ready > now
					  ? (ready - now + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS
					  : 0));
		}
		return resil_errf(err, errlen, -ENOSPC,
				  "state segment full (%" PRIu64 " of %" PRIu64
				  " bytes used, %" PRIu64 " needed): raise --state-size",
				  used, s->geo.arena_size, sz);
	}
	*off = s->geo.arena_off + used;
	s->arena_used = used + sz;
	st_release(&s->st->arena_used, used + sz);
	return 0;
}

void resil_seg_own_arena(struct resil_seg *s)
{
	uint64_t used = ld_relaxed(&s->st->arena_used), end = 0;
	uint32_t n = ld_relaxed(&s->cfg->rec_used);

	/* a client-written word: blocks are RESIL_HOT_ALIGN-aligned, so is
	 * the bump pointer (a misaligned one misaligns every later block) */
	used = used > s->geo.arena_size ? 0 : resil_align_up(used, RESIL_HOT_ALIGN);
	if (used > s->geo.arena_size)
		used = 0;
	/* every record ever published (live or replaced: an old handle may
	 * still use its block), none beyond the arena (resil_seg_check) */
	for (uint32_t i = 0; i < n && i < s->cfg->rec_cap; i++) {
		const struct resil_rec *rec = resil_seg_rec(s, i);
		uint64_t e = rec->state_off + rec->state_size;

		if (rec->proc_stride)
			e = rec->proc_off + rec->proc_stride * s->geo.client_cap;
		if (rec->state_off >= s->geo.arena_off && e > s->geo.arena_off &&
		    e - s->geo.arena_off <= s->geo.arena_size && e - s->geo.arena_off > end)
			end = e - s->geo.arena_off;
	}
	end = resil_align_up(end, RESIL_HOT_ALIGN);
	s->arena_used = used > end ? used : end;
	s->arena_private = true;
	st_release(&s->st->arena_used, s->arena_used);
}

/* Embedded mode: no queues survive across the processes that define, so
 * the records say it themselves: a record no slot word names whose
 * retirement stamp is older than its grace period (or 0: never published,
 * a define killed before it) is free. The one retired longest ago is
 * taken. Under define_lock; a walk of every slot and record, on a define
 * that found every record used, never on a decision. */
static int take_rec_embedded(struct resil_seg *s, uint32_t *ri, int64_t now)
{
	uint32_t cap = s->cfg->rec_cap, best = UINT32_MAX;
	uint64_t best_at = UINT64_MAX;
	bool *named = calloc(cap, sizeof(*named)), waiting = false;

	if (!named)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++) {
		uint64_t w = ld_relaxed(&resil_seg_slots(s)[i]);

		if (w && resil_slotw_rec(w) < cap)
			named[resil_slotw_rec(w)] = true;
	}
	for (uint32_t i = 0; i < cap; i++) {
		const struct resil_rec *rec = resil_seg_rec(s, i);
		uint64_t at = ld_relaxed(&rec->retired_ns);

		if (named[i])
			continue;
		if (at && now < resil_add_sat((int64_t)at, grace_of(&rec->conf))) {
			waiting = true;
			continue;
		}
		if (at < best_at) {
			best_at = at;
			best = i;
		}
	}
	free(named);
	if (best == UINT32_MAX)
		return waiting ? -EAGAIN : -ENOSPC;
	*ri = best;
	return 0;
}

/* A record for a define when every one was handed out once: the free one
 * that rested longest. -EAGAIN when the only ones to be had wait out
 * their grace period (resil_seg_next_free_ns says until when), -ENOSPC
 * when there are none; err says which. */
int resil_seg_priv_take_rec(struct resil_seg *s, uint32_t *ri, char *err, size_t errlen)
{
	int64_t now = resil_clock_monotonic(NULL), ready;
	int r;

	if (s->reuse) {
		resil_seg_reclaim(s, now);
		if (s->reuse->rf_n) {
			*ri = s->reuse->rfree[s->reuse->rf_head];
			return 0;
		}
		r = s->reuse->rp_n ? -EAGAIN : -ENOSPC;
	} else {
		r = take_rec_embedded(s, ri, now);
		if (r == 0 || r == -ENOMEM)
			return r;
	}
	if (r == -ENOSPC)
		return resil_errf(err, errlen, -ENOSPC,
				  "configuration records exhausted (%" PRIu32
				  " live policies and changes in flight): raise --policies",
				  s->cfg->rec_cap);
	ready = resil_seg_next_free_ns(s, true);
	return resil_errf(err, errlen, -EAGAIN,
			  "configuration records exhausted (every one of %" PRIu32
			  " is live or waits out its grace period after a change; the first "
			  "comes free in %" PRId64 " ms): retry later or raise --policies",
			  s->cfg->rec_cap,
			  (int64_t)(ready == INT64_MAX
					? 0
					: (ready - now + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS));
}

/* SPDX-License-Identifier: MIT */
/*
 * seg.c - creating, validating and mapping the segment pair; the name
 * directory; the state header's repair; client rows. The rest of the
 * segment's code: seg_records.c (publishing, checking and deleting
 * configuration records), seg_reuse.c (the arena's allocation, the reuse
 * of records and blocks: "Reuse"), seg_event.c (the event ring);
 * seg_priv.h is what they share. The layout is seg.h; the design (the
 * publication order, its crash windows, the ring, "Reuse", why a stale
 * handle cannot decide on a reused block) is docs/internals/seg.md.
 * Nothing here runs per decision.
 *
 * Shared words, their writers and memory orders:
 *   - config header, directory, slot words, records: the daemon only
 *     (embedded mode: the embedding process under st->define_lock). A
 *     record is written whole, then its gen (release), then the slot word
 *     (release), then a new name's directory entry (release); readers
 *     load the entry and the slot word with acquire (dir_find, foreach,
 *     libresil). cfg->generation: release, after the slot word.
 *     cfg->rec_used, rec->retired_ns and the usage figures (rec_free,
 *     arena_*): relaxed, one writer, read by observers.
 *   - a record's gen: a seqlock. Freed: gen = 0, then a release fence
 *     before the rewrite; rewritten: the new gen last, with release.
 *   - the magics: stored last at creation, after a release fence, so a
 *     half-made pair is never taken for a valid one.
 *   - the state header's identity and geometry: copies any client may
 *     write; every offset and capacity is taken from the config header
 *     into private memory (resil_seg_take_geo) and the daemon rewrites the
 *     copies each tick (resil_seg_repair_header). st->arena_used: the
 *     daemon's own bump pointer, published with release for observers;
 *     embedded processes share it under define_lock, bounded by the
 *     private geometry.
 *   - a client row's owner: claimed by one CAS (acq_rel) by the client
 *     itself (pid and the low bits of its start time: a row claimed by a
 *     process killed right after is still reclaimable), freed with a
 *     release store by the daemon after it reclaimed what the row held,
 *     or by the client in resil_close. row->flags: release, after the
 *     row's fields. st->client_hint, st->clients_full: relaxed (a hint, a
 *     counter).
 *   - the event ring: event_head by fetch_add (relaxed) from any process;
 *     each entry a seqlock on its seq (seg_event.c); the daemon consumes.
 * Everything the daemon reads of the state segment is untrusted: it is
 * bounded by the private geometry, and an adopted pair's records are
 * checked before use (resil_seg_check, seg_records.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg_priv.h"

static uint32_t pow2_at_least(uint64_t v)
{
	uint32_t p = 1;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

static uint64_t random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint64_t)resil_clock_monotonic(NULL) * 0x9e3779b97f4a7c15ULL;
	return v;
}

struct cfg_geometry {
	uint32_t slots, dir_cap, rec_cap;
	uint64_t dir_off, slots_off, recs_off, size;
};

static void cfg_geometry(uint32_t slots, struct cfg_geometry *g)
{
	g->slots = slots;
	g->dir_cap = pow2_at_least((uint64_t)slots * 2);
	/* each policy may change shape a few times before records run out */
	g->rec_cap = slots * 4;
	g->dir_off = RESIL_HDR_SIZE;
	g->slots_off = resil_align_up(g->dir_off + (uint64_t)g->dir_cap * 8, RESIL_LINE);
	g->recs_off = resil_align_up(g->slots_off + (uint64_t)slots * 8, 4096);
	g->size = resil_align_up(g->recs_off + (uint64_t)g->rec_cap * RESIL_REC_SIZE, 4096);
}

static int make_memfd(const char *name, uint64_t size, int *ret)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*ret = fd;
	return 0;
}

static bool within(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* A state geometry that fits a segment of st_size bytes, its regions in
 * order and aligned: the one check, whichever header it came from. */
static bool geo_valid(const struct resil_state_geo *g, uint64_t st_size)
{
	return g->client_cap != 0 && g->client_cap <= (1u << 20) && g->event_cap != 0 &&
	       !(g->event_cap & (g->event_cap - 1)) &&
	       within(g->client_off, (uint64_t)g->client_cap * RESIL_CLIENT_SIZE, st_size) &&
	       within(g->event_off, (uint64_t)g->event_cap * RESIL_EVENT_SIZE, st_size) &&
	       within(g->arena_off, g->arena_size, st_size) && g->client_off >= RESIL_HDR_SIZE &&
	       g->event_off >= g->client_off + (uint64_t)g->client_cap * RESIL_CLIENT_SIZE &&
	       g->arena_off >= g->event_off + (uint64_t)g->event_cap * RESIL_EVENT_SIZE &&
	       g->client_off % 64 == 0 && g->event_off % 64 == 0 && g->arena_off % 128 == 0;
}

static void geo_of_cfg(const struct resil_cfg_hdr *c, struct resil_state_geo *g)
{
	g->client_cap = c->st_client_cap;
	g->event_cap = c->st_event_cap;
	g->client_off = c->st_client_off;
	g->event_off = c->st_event_off;
	g->arena_off = c->st_arena_off;
	g->arena_size = c->st_arena_size;
}

static void geo_of_state(const struct resil_state_hdr *h, struct resil_state_geo *g)
{
	g->client_cap = h->client_cap;
	g->event_cap = h->event_cap;
	g->client_off = h->client_off;
	g->event_off = h->event_off;
	g->arena_off = h->arena_off;
	g->arena_size = h->arena_size;
}

int resil_seg_create(struct resil_seg *s, const struct resil_seg_params *p)
{
	struct resil_seg_params d = { 0 };
	struct cfg_geometry g;
	uint64_t events, client_off, event_off, arena_off, st_size;
	uint64_t epoch = random64();
	int cfd = -1, sfd = -1, r;
	void *cm = MAP_FAILED, *sm = MAP_FAILED;

	if (!s)
		return -EINVAL;
	if (p)
		d = *p;
	if (!d.slots)
		d.slots = RESIL_SLOTS_DEFAULT;
	if (!d.clients)
		d.clients = RESIL_CLIENTS_DEFAULT;
	if (!d.events)
		d.events = RESIL_EVENTS_DEFAULT;
	if (!d.state_size)
		d.state_size = RESIL_STATE_SIZE_DEFAULT;
	if (d.slots > (1u << 24) || d.clients > (1u << 20) || d.events > (1u << 24))
		return -EINVAL;

	cfg_geometry(d.slots, &g);
	events = pow2_at_least(d.events);
	client_off = RESIL_HDR_SIZE;
	event_off = resil_align_up(client_off + (uint64_t)d.clients * RESIL_CLIENT_SIZE, 4096);
	arena_off = resil_align_up(event_off + events * RESIL_EVENT_SIZE, 4096);
	st_size = resil_align_up(d.state_size, 4096);
	if (st_size < arena_off + 64 * 1024)
		return -EINVAL; /* too small for even a few policies */

	r = make_memfd("resil-config", g.size, &cfd);
	if (r < 0)
		goto fail;
	r = make_memfd("resil-state", st_size, &sfd);
	if (r < 0)
		goto fail;
	/* No client may truncate the state (SIGBUS for the fleet) or grow it. */
	if (fcntl(sfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    fcntl(cfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		goto fail;
	}
	cm = mmap(NULL, g.size, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	sm = mmap(NULL, st_size, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (cm == MAP_FAILED || sm == MAP_FAILED) {
		r = -errno;
		goto fail;
	}

	struct resil_cfg_hdr *ch = cm;
	ch->abi_major = RESIL_ABI_MAJOR;
	ch->abi_minor = RESIL_ABI_MINOR;
	ch->hdr_size = RESIL_HDR_SIZE;
	ch->seg_size = g.size;
	ch->epoch = epoch;
	ch->slot_cap = g.slots;
	ch->dir_cap = g.dir_cap;
	ch->rec_cap = g.rec_cap;
	ch->rec_size = RESIL_REC_SIZE;
	ch->dir_off = g.dir_off;
	ch->slots_off = g.slots_off;
	ch->recs_off = g.recs_off;
	ch->state_size = st_size;
	ch->hash_k0 = random64();
	ch->hash_k1 = random64();

	struct resil_state_hdr *sh = sm;
	sh->abi_major = RESIL_ABI_MAJOR;
	sh->abi_minor = RESIL_ABI_MINOR;
	sh->hdr_size = RESIL_HDR_SIZE;
	sh->seg_size = st_size;
	sh->epoch = epoch;
	sh->client_cap = d.clients;
	sh->event_cap = (uint32_t)events;
	sh->client_off = client_off;
	sh->event_off = event_off;
	sh->arena_off = arena_off;
	sh->arena_size = st_size - arena_off;
	ch->st_client_cap = d.clients;
	ch->st_event_cap = (uint32_t)events;
	ch->st_client_off = client_off;
	ch->st_event_off = event_off;
	ch->st_arena_off = arena_off;
	ch->st_arena_size = st_size - arena_off;

	/* The magic last: a half-made segment is never taken for a valid one. */
	atomic_thread_fence(memory_order_release);
	ch->magic = RESIL_CFG_MAGIC;
	sh->magic = RESIL_STATE_MAGIC;

	memset(s, 0, sizeof(*s));
	s->cfg = cm;
	s->st = sm;
	s->cfg_size = g.size;
	s->st_size = st_size;
	s->cfg_fd = cfd;
	s->st_fd = sfd;
	s->cfg_writable = true;
	geo_of_cfg(ch, &s->geo);
	return 0;
fail:
	if (cm != MAP_FAILED)
		munmap(cm, g.size);
	if (sm != MAP_FAILED)
		munmap(sm, st_size);
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0)
		close(sfd);
	return r;
}

int resil_seg_validate(const void *cfg, size_t cfg_size, const void *st, size_t st_size,
		       char *err, size_t errlen)
{
	const struct resil_cfg_hdr *c = cfg;
	const struct resil_state_hdr *s = st;

	if (cfg) {
		if (cfg_size < RESIL_HDR_SIZE)
			return resil_errf(err, errlen, -EBADMSG,
					  "config segment too small (%zu bytes)", cfg_size);
		if (c->magic != RESIL_CFG_MAGIC)
			return resil_errf(err, errlen, -EBADMSG, "config segment: bad magic");
		if (c->abi_major != RESIL_ABI_MAJOR)
			return resil_errf(
			    err, errlen, -EPROTO,
			    "config segment has ABI %" PRIu32 ".%" PRIu32
			    ", this build speaks %d.x: upgrade or restart the older side",
			    c->abi_major, c->abi_minor, RESIL_ABI_MAJOR);
		if (atomic_load_explicit((ra32 *)&c->flags, memory_order_acquire) &
		    RESIL_SEG_RETIRED)
			return resil_errf(err, errlen, -ESTALE,
					  "config segment retired by a newer daemon");
		if (c->hdr_size != RESIL_HDR_SIZE || c->seg_size != cfg_size ||
		    c->rec_size != RESIL_REC_SIZE || c->slot_cap == 0 ||
		    c->slot_cap > (1u << 24) || c->dir_cap < 2 * (uint64_t)c->slot_cap ||
		    (c->dir_cap & (c->dir_cap - 1)) || c->rec_cap < c->slot_cap ||
		    !within(c->dir_off, (uint64_t)c->dir_cap * 8, cfg_size) ||
		    !within(c->slots_off, (uint64_t)c->slot_cap * 8, cfg_size) ||
		    !within(c->recs_off, (uint64_t)c->rec_cap * RESIL_REC_SIZE, cfg_size) ||
		    c->dir_off < RESIL_HDR_SIZE || c->slots_off < c->dir_off + (uint64_t)c->dir_cap * 8 ||
		    c->recs_off < c->slots_off + (uint64_t)c->slot_cap * 8 || c->dir_off % 8 ||
		    c->slots_off % 8 || c->recs_off % 8)
			return resil_errf(err, errlen, -EBADMSG,
					  "config segment: inconsistent header");
	}
	if (st) {
		if (st_size < RESIL_HDR_SIZE)
			return resil_errf(err, errlen, -EBADMSG,
					  "state segment too small (%zu bytes)", st_size);
		/* A pair is described by its config header alone: the state
		 * header's identity and geometry words are client-writable
		 * copies the daemon repairs each tick (resil_seg_repair_header),
		 * so a store into one between that tick and a restart must not
		 * keep the restarted daemon from adopting the pair. A state
		 * segment validated alone is read by its own header. */
		bool described = cfg != NULL;
		struct resil_state_geo g;

		if (!described && s->magic != RESIL_STATE_MAGIC)
			return resil_errf(err, errlen, -EBADMSG, "state segment: bad magic");
		if (!described && s->abi_major != RESIL_ABI_MAJOR)
			return resil_errf(err, errlen, -EPROTO,
					  "state segment has ABI %" PRIu32 ".%" PRIu32
					  ", this build speaks %d.x",
					  s->abi_major, s->abi_minor, RESIL_ABI_MAJOR);
		if (described)
			geo_of_cfg(c, &g);
		else
			geo_of_state(s, &g);
		if ((!described && (s->hdr_size != RESIL_HDR_SIZE || s->seg_size != st_size)) ||
		    !geo_valid(&g, st_size))
			return resil_errf(err, errlen, -EBADMSG,
					  "state segment: inconsistent header");
	}
	if (cfg && st) {
		if (c->state_size != st_size)
			return resil_errf(err, errlen, -EBADMSG, "state segment size mismatch");
	}
	return 0;
}

int resil_seg_map(struct resil_seg *s, int cfg_fd, int st_fd, bool writable_cfg,
		  bool writable_state, char *err, size_t errlen)
{
	struct stat cst, sst;
	void *cm = MAP_FAILED, *sm = MAP_FAILED;
	int r;

	if (!s || cfg_fd < 0 || st_fd < 0)
		return resil_errf(err, errlen, -EINVAL, "invalid arguments");
	if (fstat(cfg_fd, &cst) < 0 || fstat(st_fd, &sst) < 0)
		return resil_errf(err, errlen, -errno, "fstat: %s", strerror(errno));
	if (cst.st_size < RESIL_HDR_SIZE || sst.st_size < RESIL_HDR_SIZE)
		return resil_errf(err, errlen, -EBADMSG, "segments too small");
	cm = mmap(NULL, (size_t)cst.st_size, PROT_READ | (writable_cfg ? PROT_WRITE : 0),
		  MAP_SHARED, cfg_fd, 0);
	if (cm == MAP_FAILED)
		return resil_errf(err, errlen, -errno, "mmap config segment: %s", strerror(errno));
	sm = mmap(NULL, (size_t)sst.st_size, PROT_READ | (writable_state ? PROT_WRITE : 0),
		  MAP_SHARED, st_fd, 0);
	if (sm == MAP_FAILED) {
		r = resil_errf(err, errlen, -errno, "mmap state segment: %s", strerror(errno));
		munmap(cm, (size_t)cst.st_size);
		return r;
	}
	r = resil_seg_validate(cm, (size_t)cst.st_size, sm, (size_t)sst.st_size, err, errlen);
	if (r < 0) {
		munmap(cm, (size_t)cst.st_size);
		munmap(sm, (size_t)sst.st_size);
		return r;
	}
	memset(s, 0, sizeof(*s));
	s->cfg = cm;
	s->st = sm;
	s->cfg_size = (size_t)cst.st_size;
	s->st_size = (size_t)sst.st_size;
	s->cfg_fd = cfg_fd;
	s->st_fd = st_fd;
	s->cfg_writable = writable_cfg;
	r = resil_seg_take_geo(s, err, errlen);
	if (r < 0) {
		/* the fds stay the caller's, as on every other failure */
		munmap(cm, (size_t)cst.st_size);
		munmap(sm, (size_t)sst.st_size);
		memset(s, 0, sizeof(*s));
		s->cfg_fd = s->st_fd = -1;
		return r;
	}
	return 0;
}

int resil_seg_take_geo(struct resil_seg *s, char *err, size_t errlen)
{
	/* taken once and validated as taken (a client may rewrite the state
	 * header between two reads); never read from the headers again */
	geo_of_cfg(s->cfg, &s->geo);
	if (!geo_valid(&s->geo, s->st_size))
		return resil_errf(err, errlen, -EBADMSG, "state segment: inconsistent header");
	return 0;
}

void resil_seg_unmap(struct resil_seg *s)
{
	if (!s)
		return;
	if (s->own_events) {
		pthread_mutex_destroy(&s->own_events->lock);
		free(s->own_events);
		s->own_events = NULL;
	}
	if (s->cfg)
		munmap(s->cfg, s->cfg_size);
	if (s->st)
		munmap(s->st, s->st_size);
	if (s->cfg_fd >= 0)
		close(s->cfg_fd);
	if (s->st_fd >= 0)
		close(s->st_fd);
	resil_seg_priv_reuse_free(s->reuse);
	memset(s, 0, sizeof(*s));
	s->cfg_fd = s->st_fd = -1;
}

bool resil_name_valid(const char *name)
{
	size_t n;

	if (!name || !name[0] || name[0] == '.' || name[0] == '-')
		return false;
	for (n = 0; name[n]; n++) {
		char c = name[n];

		if (n >= RESIL_NAME_MAX - 1)
			return false;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || c == '.' || c == ':' || c == '-')
			continue;
		if (c == '@' && n == 0 && name[1])
			continue;
		return false;
	}
	return true;
}

struct resil_rec *resil_seg_rec_of(const struct resil_seg *s, uint64_t w)
{
	uint32_t i;

	if (!w)
		return NULL;
	i = resil_slotw_rec(w);
	if (i >= s->cfg->rec_cap)
		return NULL;
	return resil_seg_rec(s, i);
}

/* Directory probe for NAME: the entry index holding it, or -ENOENT; *free
 * gets the first empty-or-tombstone position met (for inserts). */
int resil_seg_priv_dir_find(const struct resil_seg *s, const char *name, uint32_t *ret_slot,
			    uint64_t *ret_word, uint32_t *ret_pos, int64_t *free_pos)
{
	ra64 *dir = resil_seg_dir(s);
	ra64 *slots = resil_seg_slots(s);
	uint32_t mask = s->cfg->dir_cap - 1;
	uint64_t h = name_hash(s, name);
	uint32_t h32 = hash32(h);

	if (free_pos)
		*free_pos = -1;
	for (uint32_t n = 0, i = (uint32_t)h & mask; n <= mask; n++, i = (i + 1) & mask) {
		uint64_t e = ld_acquire(&dir[i]);
		uint32_t sl = (uint32_t)e;

		if (e == 0) {
			if (free_pos && *free_pos < 0)
				*free_pos = i;
			return -ENOENT;
		}
		if (sl == RESIL_DIR_TOMB) {
			if (free_pos && *free_pos < 0)
				*free_pos = i;
			continue;
		}
		if ((uint32_t)(e >> 32) != h32 || sl - 1 >= s->cfg->slot_cap)
			continue;
		uint64_t w = ld_acquire(&slots[sl - 1]);
		struct resil_rec *rec = resil_seg_rec_of(s, w);

		if (rec && strncmp(rec->name, name, RESIL_NAME_MAX) == 0) {
			if (ret_slot)
				*ret_slot = sl - 1;
			if (ret_word)
				*ret_word = w;
			if (ret_pos)
				*ret_pos = i;
			return 0;
		}
	}
	return -ENOENT;
}

int resil_seg_lookup(const struct resil_seg *s, const char *name, uint32_t *ret_slot,
		     uint64_t *ret_word)
{
	if (!s || !s->cfg || !name)
		return -EINVAL;
	return resil_seg_priv_dir_find(s, name, ret_slot, ret_word, NULL, NULL);
}

uint32_t resil_seg_repair_header(struct resil_seg *s)
{
	struct resil_state_hdr *h = s->st;
	uint32_t n = 0;

#define FIX(field, val)                                                                            \
	do {                                                                                       \
		if (h->field != (val)) {                                                           \
			h->field = (val);                                                          \
			n++;                                                                       \
		}                                                                                  \
	} while (0)
	FIX(client_cap, s->geo.client_cap);
	FIX(event_cap, s->geo.event_cap);
	FIX(client_off, s->geo.client_off);
	FIX(event_off, s->geo.event_off);
	FIX(arena_off, s->geo.arena_off);
	FIX(arena_size, s->geo.arena_size);
	FIX(seg_size, s->st_size);
	FIX(hdr_size, RESIL_HDR_SIZE);
	FIX(magic, RESIL_STATE_MAGIC);
	FIX(abi_major, RESIL_ABI_MAJOR);
	FIX(epoch, s->cfg->epoch);
	if (s->arena_private && ld_relaxed(&h->arena_used) != s->arena_used) {
		st_release(&h->arena_used, s->arena_used);
		n++;
	}
#undef FIX
	return n;
}

int resil_seg_foreach(const struct resil_seg *s, resil_seg_visit_fn fn, void *ctx)
{
	ra64 *slots;

	if (!s || !s->cfg || !fn)
		return -EINVAL;
	slots = resil_seg_slots(s);
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++) {
		uint64_t w = ld_acquire(&slots[i]);
		struct resil_rec *rec = resil_seg_rec_of(s, w);
		int r;

		if (!rec)
			continue;
		r = fn(s, i, rec, ctx);
		if (r)
			return r;
	}
	return 0;
}

int resil_client_claim(const struct resil_seg *s, uint32_t pid, uint64_t start_time, uint32_t uid)
{
	uint32_t cap, start;
	uint64_t owner = (uint64_t)pid << 32 | (start_time & 0xffffffffULL);

	if (!s || !s->st || pid == 0)
		return -EINVAL;
	cap = s->geo.client_cap;
	start = ld_relaxed(&s->st->client_hint) % cap;
	for (uint32_t n = 0; n < cap; n++) {
		uint32_t i = (start + n) % cap;
		struct resil_client_row *row = resil_seg_client(s, i);
		uint64_t expect = 0;

		if (ld_relaxed(&row->owner) != 0)
			continue;
		/* The claim is one CAS; the owner word alone identifies the
		 * process (pid plus the low bits of its start time), so a row
		 * claimed by a process killed right after is still reclaimable. */
		if (!cas_acq_rel(&row->owner, &expect, owner))
			continue;
		resil_client_init_row(s, i, start_time, uid);
		st_relaxed(&s->st->client_hint, i + 1);
		return (int)i;
	}
	faa_relaxed(&s->st->clients_full, 1);
	return -ENOSPC;
}

void resil_client_init_row(const struct resil_seg *s, uint32_t i, uint64_t start_time, uint32_t uid)
{
	struct resil_client_row *row;

	if (i >= s->geo.client_cap)
		return;
	row = resil_seg_client(s, i);
	row->start_time = start_time;
	row->uid = uid;
	st_relaxed(&row->waiting, 0);
	st_release(&row->flags, RESIL_ROW_LIVE);
}

void resil_client_release(const struct resil_seg *s, uint32_t row)
{
	struct resil_client_row *r;

	if (!s || !s->st || row >= s->geo.client_cap)
		return;
	r = resil_seg_client(s, row);
	st_relaxed(&r->flags, 0);
	st_release(&r->owner, 0);
}

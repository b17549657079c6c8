/* SPDX-License-Identifier: MIT */
/*
 * seg.c - creating, validating and mapping the segment pair; the name
 * directory; publishing configuration records; client rows; the event ring.
 *
 * Size: above 900 lines on purpose: the layout of the segment pair is one
 * argument. Create, validate, define, delete and reclaim check and write
 * the same geometry and extents through the same static helpers (within,
 * geo_valid, rec_extent, retire_rec, the hole list), and the publication
 * order below holds only if they agree; nothing here runs per decision.
 *
 * Writers of the config segment: the daemon only (embedded mode: the
 * embedding process under st->define_lock). Publication order on define:
 *   1. state block allocated and initialized (plain stores);
 *   2. record written (plain stores);
 *   3. slot word stored with release: a reader that loads it with acquire
 *      sees 1 and 2 complete;
 *   4. (new name) directory entry stored with release, after the slot word,
 *      so a lookup that finds the entry finds a published slot.
 * A reader never waits: a lookup racing with a define finds either the old
 * record or the new one.
 *
 * Crash windows (embedded mode; the daemon is one process and a crash of it
 * restarts the writer with the same segments):
 *   - killed after 1: arena space is lost (bounded, reported by
 *     arena_used); nothing points at it;
 *   - killed after 2: a record index is used up; nothing points at it;
 *   - killed after 3, before 4: the slot is live but unnamed; the next
 *     define of the same name takes a new slot, this one stays unreachable.
 *   Each wastes capacity, never corrupts a decision.
 *
 * Event ring: a writer takes an index with fetch_add on event_head, marks
 * the entry in progress (seq = 0), writes it, and publishes seq = idx + 1
 * with release. The reader treats the entry as a seqlock: seq read before
 * and after the copy must both equal idx + 1. A writer killed in between
 * leaves seq != idx + 1: the reader skips it after a grace period (the
 * daemon's events.c), it is never waited on forever.
 *
 * Reuse (records: the daemon and embedded mode; arena blocks: the daemon
 * only, embedded mode allocates them by bump). A record is retired when a
 * define replaces it or a delete unnames it; a state block (with its
 * keyed table and its process-scope copies: one extent) when a define of
 * another shape or a delete leaves no live record naming it. Each has a
 * grace period of its own policy's (grace_of: RESIL_REUSE_GRACE_NS plus
 * that policy's bulkhead.wait, at most RESIL_WAIT_MAX_NS: a waiter sleeps
 * on its block that long, then looks at it again; a block waits for the
 * longest of the records that named it), so a member who keeps a policy
 * with a long wait delays the reuse of that policy's space only. The
 * daemon keeps the retired ones in private queues (struct resil_reuse:
 * nothing a client writes is read to decide what is free); embedded mode
 * (several processes define, none keeps queues for the others) finds its
 * free records by their stamp (rec->retired_ns, written in the
 * configuration, which only the definer writes). A define that needs
 * what still waits answers -EAGAIN and when it comes free, and its caller
 * may wait for it, bounded (a reload, a create, an embedded define).
 * Freeing a record first stores its gen = 0 (release), so a reader's
 * gen check fails from then on; a rewrite of a free record stores the new
 * gen last, with release (a seqlock: readers copy between two loads).
 * Freeing a block punches its pages out of the memfd (memory back to the
 * kernel) and merges it into a sorted list of holes; a hole ending at the
 * bump pointer lowers it. A block is allocated first fit among the
 * holes, else from the bump pointer; a record from the never used ones,
 * else the one free longest (so a record usually rests far longer than
 * its grace period).
 *
 * Why a stale handle cannot decide on a reused block:
 *   - a handle decides only after it loaded its slot word (acquire) and
 *     found the word it bound (libresil.c, bound()); a replace or delete
 *     changes the word before the old record or block is even retired,
 *     so every decision that starts later re-binds by name. What remains
 *     is a decision that loaded the word just before the change and has
 *     not finished writing a grace period later: a thread stopped between
 *     two instructions (SIGSTOP, a debugger, a frozen cgroup). The grace
 *     period is five orders of magnitude above a decision's length. Such
 *     a thread writes into a block reused since as any client may write
 *     into any block (below); one that reads its record while the daemon
 *     rewrites it reads a mix of two configurations, the one way a stale
 *     handle could crash its own process: records rest longest (above);
 *   - resil_call holds its record across the application's function: it
 *     checks the record's gen after it (libcall.c) and records nothing
 *     into a record reused meanwhile;
 *   - a permit may be held for any time: it names its record and the low
 *     16 bits of the record's gen (libresil.c, the permit's tag), and a
 *     release whose record no longer carries that gen drops, so it never
 *     writes into the block a recycled record names now. A permit held
 *     across exactly a multiple of 65,536 definitions and a recycle of its
 *     own record could pass the check: its release then frees what its
 *     own client id claimed (releases are CAS from the holder's id) and
 *     counts one outcome in another policy;
 *   - whatever such a late write does lands inside the arena at offsets
 *     of a record the daemon wrote, so it is one more client write into
 *     the trust domain's state: the daemon checks those words anyway
 *     (DESIGN.md, "What the daemon may believe").
 * A block comes free no earlier than every record naming it (block_until),
 * so one pass of resil_seg_reclaim frees a block only after (or together
 * with, records first) those records.
 * Crash window: the queues are private; a daemon that dies loses them.
 * The next daemon (adopting the pair from the fd store) rebuilds them
 * from the slot words in resil_seg_reuse_init: every record no live
 * record names waits out its grace from its stamp, every arena range no
 * live record names from the restart, so a restart only delays reuse.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg.h"
#include "conf.h"
#include "policy.h"

/* The daemon's own events: a ring in private memory under a mutex (the
 * loop and the cluster exchange push; the loop takes). */
struct resil_evq {
	pthread_mutex_t lock;
	uint32_t cap, head, n;
	uint64_t dropped;
	struct resil_event ev[];
};

struct resil_reuse;
static void reuse_free(struct resil_reuse *u);
static void retire_rec(struct resil_seg *s, uint32_t idx, int64_t now);
static void retire_ext(struct resil_seg *s, uint64_t abs_off, uint64_t len, int64_t until,
		       uint32_t uid);
static uint64_t rec_extent(const struct resil_seg *s, const struct resil_rec *rec);
static void reuse_publish(struct resil_seg *s);

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
	reuse_free(s->reuse);
	memset(s, 0, sizeof(*s));
	s->cfg_fd = s->st_fd = -1;
}

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

static uint64_t name_hash(const struct resil_seg *s, const char *name)
{
	return resil_hash64(name, strlen(name), s->cfg->hash_k0, s->cfg->hash_k1);
}

static uint32_t hash32(uint64_t h)
{
	uint32_t v = (uint32_t)(h >> 32);

	return v ? v : 1;
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
static int dir_find(const struct resil_seg *s, const char *name, uint32_t *ret_slot,
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
	return dir_find(s, name, ret_slot, ret_word, NULL, NULL);
}

/* ---- reuse (the daemon's private free lists; see "Reuse" above) ---- */

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

static void reuse_free(struct resil_reuse *u)
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
static uint64_t rec_extent(const struct resil_seg *s, const struct resil_rec *rec)
{
	uint64_t main_size =
	    resil_align_up(rec->state_size ? rec->state_size : RESIL_HOT_ALIGN, RESIL_HOT_ALIGN);

	if (rec->proc_stride)
		return rec->proc_off - rec->state_off + rec->proc_stride * s->geo.client_cap;
	return main_size;
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

static void retire_rec(struct resil_seg *s, uint32_t idx, int64_t now)
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

static void retire_ext(struct resil_seg *s, uint64_t abs_off, uint64_t len, int64_t until,
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
static int64_t block_until(const struct resil_seg *s, const struct resil_rec *rec, int64_t now)
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
	reuse_publish(s);
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
		reuse_free(u);
		free(named);
		free(live);
		free(gone);
		return -ENOMEM;
	}
	reuse_free(s->reuse);
	s->reuse = u;
	/* live: what a slot word names (resil_seg_check vouched for each) */
	for (uint32_t i = 0; i < s->cfg->slot_cap; i++) {
		uint64_t w = ld_relaxed(&slots[i]);
		const struct resil_rec *rec = resil_seg_rec_of(s, w);

		if (!rec || resil_slotw_rec(w) >= used)
			continue;
		named[resil_slotw_rec(w)] = true;
		live[nlive++] =
		    (struct reuse_ext){rec->state_off - s->geo.arena_off, rec_extent(s, rec), 0};
	}
	/* the rest was handed out before: an old permit may still name it.
	 * Its grace runs from when it was retired (the stamp our own writes
	 * left in the configuration), or from now */
	for (uint32_t i = 0; i < used && i < cap; i++) {
		struct resil_rec *rec = resil_seg_rec(s, i);
		uint64_t t = ld_relaxed(&rec->retired_ns);

		if (named[i])
			continue;
		retire_rec(s, i, t && t <= (uint64_t)now ? (int64_t)t : now);
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
			retire_ext(s, s->geo.arena_off + at, end - at, until, UINT32_MAX);
		if (i < nlive && live[i].off + live[i].len > at)
			at = live[i].off + live[i].len;
	}
	free(named);
	free(live);
	free(gone);
	reuse_publish(s);
	return 0;
}

/* The figures of resil_seg_usage into the config header (seg.h). */
static void reuse_publish(struct resil_seg *s)
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
	return rec_extent(s, rec);
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

static int arena_alloc(struct resil_seg *s, uint64_t size, uint64_t *off, char *err, size_t errlen)
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
static int take_rec(struct resil_seg *s, uint32_t *ri, char *err, size_t errlen)
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

int resil_seg_define(struct resil_seg *s, const char *name, const struct resil_conf *conf,
		     uint32_t uid, uint32_t flags, int64_t now, char *err, size_t errlen)
{
	ra64 *slots, *dir;
	uint32_t slot = 0, pos = 0, comp_off[RESIL_C_MAX] = { 0 }, components = 0, budget_slot = 0;
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

	r = dir_find(s, name, &slot, &old_w, &pos, &free_pos);
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
		r = take_rec(s, &ri, err, errlen);
		if (r < 0)
			return r;
	}

	if (reuse_state) {
		state_off = orec->state_off;
	} else {
		r = arena_alloc(s, alloc_size, &state_off, err, errlen);
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
	/* embedded mode's reuse (take_rec): gen 0 before anything else of
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
			retire_ext(s, orec->state_off, rec_extent(s, orec), block_until(s, orec, t),
				   orec->owner_uid);
		retire_rec(s, resil_slotw_rec(old_w), t);
	}
	reuse_publish(s);
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
	/* as resil_seg_define and arena_alloc size it */
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
	r = dir_find(s, name, &slot, &w, &pos, NULL);
	if (r < 0)
		return r;
	dir = resil_seg_dir(s);
	rec = resil_seg_rec_of(s, w);
	t = resil_clock_monotonic(NULL);
	/* Stamped (take_rec), then the entry: a lookup no longer finds the
	 * name; then the slot: a handle that still holds it sees 0 and
	 * answers -ENOENT. The record and the state block are reused only
	 * after their grace period (an old handle may still write to it:
	 * "Reuse" above). */
	if (rec)
		st_relaxed(&rec->retired_ns, (uint64_t)t);
	st_release(&dir[pos], (ld_relaxed(&dir[pos]) & 0xffffffff00000000ULL) | RESIL_DIR_TOMB);
	st_release(&resil_seg_slots(s)[slot], 0);
	if (rec) {
		/* unnamed: the record and its block wait out the grace period */
		retire_ext(s, rec->state_off, rec_extent(s, rec), block_until(s, rec, t),
			   rec->owner_uid);
		retire_rec(s, resil_slotw_rec(w), t);
		reuse_publish(s);
	}
	uint32_t gen = ld_relaxed(&s->cfg->generation) + 1;
	st_release(&s->cfg->generation, gen);
	resil_event_push(s, RESIL_EV_CONFIG, slot, resil_slotw_gen(w), RESIL_CHANGE_DELETED, 0, 0,
			 0, 0);
	return 0;
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

void resil_event_push(const struct resil_seg *s, uint32_t type, uint32_t slot, uint32_t gen,
		      uint32_t a, uint32_t b, uint32_t reason, uint64_t value, int64_t now)
{
	resil_event_push_by(s, 0, 0, type, slot, gen, a, b, reason, value, now);
}

int resil_seg_own_events(struct resil_seg *s, uint32_t cap)
{
	struct resil_evq *q = calloc(1, sizeof(*q) + (size_t)cap * sizeof(q->ev[0]));

	if (!q || !cap) {
		free(q);
		return -ENOMEM;
	}
	pthread_mutex_init(&q->lock, NULL);
	q->cap = cap;
	s->own_events = q;
	return 0;
}

static void own_push(struct resil_evq *q, const struct resil_event *e)
{
	pthread_mutex_lock(&q->lock);
	if (q->n == q->cap)
		q->dropped++;
	else
		memcpy(&q->ev[(q->head + q->n++) % q->cap], e, sizeof(*e));
	pthread_mutex_unlock(&q->lock);
}

int resil_seg_own_event_take(const struct resil_seg *s, struct resil_event *out, uint64_t *dropped)
{
	struct resil_evq *q = s->own_events;
	int r = -EAGAIN;

	*dropped = 0;
	if (!q)
		return r;
	pthread_mutex_lock(&q->lock);
	if (q->n) {
		memcpy(out, &q->ev[q->head], sizeof(*out));
		q->head = (q->head + 1) % q->cap;
		q->n--;
		r = 0;
	}
	*dropped = q->dropped;
	q->dropped = 0;
	pthread_mutex_unlock(&q->lock);
	return r;
}

void resil_event_push_by(const struct resil_seg *s, uint32_t client_id, uint32_t pid, uint32_t type,
			 uint32_t slot, uint32_t gen, uint32_t a, uint32_t b, uint32_t reason,
			 uint64_t value, int64_t now)
{
	struct resil_event *e;
	uint64_t idx;

	if (s && s->own_events) {
		struct resil_event own = {.time_ns = now,
					  .type = type,
					  .slot = slot,
					  .gen = gen,
					  .a = a,
					  .b = b,
					  .reason = reason,
					  .pid = pid,
					  .client_id = client_id,
					  .value = value};

		own_push(s->own_events, &own);
		return;
	}
	if (!s || !s->st || !s->geo.event_cap)
		return;
	idx = faa_relaxed(&s->st->event_head, 1);
	e = resil_seg_event(s, idx);
	/* in progress: a reader that copies now sees seq change */
	st_relaxed(&e->seq, 0);
	atomic_thread_fence(memory_order_release);
	e->time_ns = now;
	e->type = type;
	e->slot = slot;
	e->gen = gen;
	e->a = a;
	e->b = b;
	e->reason = reason;
	e->pid = pid;
	e->client_id = client_id;
	e->value = value;
	/* CRASH WINDOW: killed here, seq stays 0: the reader skips the entry
	 * after its grace period. */
	st_release(&e->seq, idx + 1);
}

int resil_event_read(const struct resil_seg *s, uint64_t idx, struct resil_event *out)
{
	struct resil_event *e = resil_seg_event(s, idx);
	uint64_t s1 = ld_acquire(&e->seq), s2;

	if (s1 != idx + 1)
		return s1 > idx + 1 ? -ESTALE : -EAGAIN;
	out->time_ns = e->time_ns;
	out->type = e->type;
	out->slot = e->slot;
	out->gen = e->gen;
	out->a = e->a;
	out->b = e->b;
	out->reason = e->reason;
	out->pid = e->pid;
	out->client_id = e->client_id;
	out->value = e->value;
	atomic_thread_fence(memory_order_acquire);
	s2 = ld_relaxed(&e->seq);
	if (s2 != s1)
		return s2 > idx + 1 || s2 == 0 ? -ESTALE : -EAGAIN;
	st_relaxed(&out->seq, s1);
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

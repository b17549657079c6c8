/* SPDX-License-Identifier: MIT */
/*
 * seg.h - the segment format: an ABI between processes of different builds.
 *
 * Two memfds make one trust domain:
 *
 *   config segment (clients map it read-only, after fchmod 0440 and an
 *   O_RDONLY reopen):
 *     [cfg header 4 KiB][directory: dir_cap u64][slot words: slot_cap u64]
 *     [records: rec_cap x 1 KiB]
 *   state segment (read-write for clients, sealed SHRINK|GROW|SEAL):
 *     [state header 4 KiB][client table: client_cap x 64 B]
 *     [event ring: event_cap x 64 B][arena: policy state blocks]
 *
 * Who writes what:
 *   - cfg header, directory, slot words, records: the daemon (or, in
 *     embedded mode, the embedding process under st->define_lock) only.
 *   - a record is immutable once its slot word points at it; a change of
 *     configuration writes a new record and swaps the slot word (release),
 *     so a reader that loaded the slot word (acquire) sees a whole record.
 *     A replaced or deleted record is reused by the daemon only after a
 *     grace period (docs/internals/seg.md, "Reuse"): its gen is stored 0
 *     first and the new gen last, so a permit's release tells a reused
 *     record by its gen; a handle that still holds an old record
 *     meanwhile reads a consistent, if stale, config.
 *   - arena space is allocated by the daemon only: first fit among the
 *     holes retired blocks left after their grace period, else a bump
 *     pointer (embedded mode: bump only, never reused).
 *   - client rows: claimed by CAS by the client itself, freed by the
 *     daemon after it reclaimed what the row held (or by the client in
 *     resil_close).
 *   - event ring: any process appends, the daemon consumes.
 *
 * Offsets, never pointers; fixed-width types; 64-bit fields alignas(8);
 * every size and offset a client relies on is static_asserted below.
 */
#ifndef RESIL_SHM_SEG_H
#define RESIL_SHM_SEG_H

#include "common.h"
#include "conf_types.h"
#include "names.h"

#define RESIL_CFG_MAGIC   0x4746434c49534552ULL /* "RESILCFG" */
#define RESIL_STATE_MAGIC 0x5453434c49534552ULL /* "RESILSTA" with a twist */
#define RESIL_ABI_MAJOR   1
#define RESIL_ABI_MINOR	  0

#define RESIL_HDR_SIZE      4096
#define RESIL_NAME_MAX      64 /* including the NUL */
#define RESIL_REC_SIZE      2048
#define RESIL_CLIENT_SIZE   64
#define RESIL_EVENT_SIZE    64
#define RESIL_SLOTS_DEFAULT 4096
#define RESIL_CLIENTS_DEFAULT 1024
#define RESIL_EVENTS_DEFAULT  4096
#define RESIL_STATE_SIZE_DEFAULT (256ULL << 20) /* sparse */

/* header flags */
#define RESIL_SEG_RETIRED 0x1u /* a newer daemon of another ABI major replaced it */

struct resil_cfg_hdr {
	RESIL_A8 uint64_t magic;
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t hdr_size;
	ra32 flags; /* RESIL_SEG_*; daemon writes, clients read acquire */
	RESIL_A8 uint64_t seg_size;
	RESIL_A8 uint64_t epoch; /* random per segment pair; ties cfg and state together */
	uint32_t slot_cap;
	uint32_t dir_cap; /* power of two, >= 2 * slot_cap */
	uint32_t rec_cap;
	uint32_t rec_size;
	RESIL_A8 uint64_t dir_off;
	RESIL_A8 uint64_t slots_off;
	RESIL_A8 uint64_t recs_off;
	RESIL_A8 uint64_t state_size; /* the paired state segment's size */
	RESIL_A8 uint64_t hash_k0;    /* SipHash key for names and keyed tables */
	RESIL_A8 uint64_t hash_k1;
	ra32 rec_used;    /* records handed out (bump); writer: daemon */
	ra32 generation;  /* bumped on every directory change; observers re-list */
	/* The state segment's geometry, written once by the daemon that
	 * created the pair. The state header keeps a copy (a self-describing
	 * segment, for dumps and a state segment validated alone), but every
	 * client writes there: every process addresses the state segment
	 * with these words only, validated once at map time. */
	uint32_t st_client_cap;
	uint32_t st_event_cap;
	RESIL_A8 uint64_t st_client_off;
	RESIL_A8 uint64_t st_event_off;
	RESIL_A8 uint64_t st_arena_off;
	RESIL_A8 uint64_t st_arena_size;
	/* What the daemon's reuse holds (docs/internals/seg.md, "Reuse"), for
	 * metrics and observers: the daemon stores them relaxed after every change and
	 * tick, readers load them relaxed and only display them. */
	ra32 rec_free;		 /* records free for reuse (rec_used counts them) */
	ra32 rec_waiting;	 /* records retired, waiting out the grace period */
	ra64 arena_live;	 /* arena bytes in use: live blocks and waiting ones */
	ra64 arena_waiting;	 /* of which retired, in their grace period */
	ra64 arena_free;	 /* free holes below the bump pointer, bytes */
	ra64 arena_largest_free; /* the largest hole or the tail */
	ra32 arena_holes;	 /* number of holes (fragmentation) */
	uint32_t reserved32;
	/* The host's run in a cluster (daemon/cluster_host.c), 0: the epoch.
	 * A move to new sizes (daemon/segmove.c) gives the new pair the run
	 * of the one it moved from: the fleet keeps one name for the state.
	 * Written by the daemon before the pair is served. */
	RESIL_A8 uint64_t run;
	RESIL_A8 uint64_t reserved[20];
};

/* A directory entry: 0 empty, else (hash32 << 32) | (slot + 1). A deleted
 * entry keeps its hash with slot bits RESIL_DIR_TOMB so probing goes on. */
#define RESIL_DIR_TOMB 0xffffffffu

/* A slot word: 0 = free; else (rec_index + 1) | (uint64_t)gen << 32.
 * gen grows on every change of the slot, so a handle that cached the word
 * compares one load to know it is current. */
static inline uint32_t resil_slotw_rec(uint64_t w)
{
	return (uint32_t)w - 1;
}
static inline uint32_t resil_slotw_gen(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

/* Component bits (rec->components) and indexes (rec->comp_off[]). */
enum resil_comp {
	RESIL_C_STATS = 0, /* counters and histogram: always present */
	RESIL_C_BREAKER,
	RESIL_C_LIMIT,
	RESIL_C_BULKHEAD,
	RESIL_C_ADAPTIVE,
	RESIL_C_SHED,
	RESIL_C_BUDGET,
	RESIL_C_MAX = 12,
};

/* rec->flags */
#define RESIL_REC_FROM_FILE 0x1u /* defined by a configuration file */
#define RESIL_REC_BUDGET    0x2u /* a named budget (@NAME), not a callable policy */
/* an operator's change (resilctl create, apply, update) holds the
 * configuration: declarations from code do not change it (daemon/owners.c) */
#define RESIL_REC_RUNTIME 0x4u

/* One policy's configuration: immutable once published. */
struct resil_rec {
	char name[RESIL_NAME_MAX];
	uint32_t slot;
	uint32_t gen;        /* the slot generation this record was published with */
	uint32_t owner_uid;  /* who created it (permission to change/delete) */
	uint32_t flags;      /* RESIL_REC_* */
	uint32_t components; /* 1u << enum resil_comp */
	uint32_t state_gen;  /* bumped when the state shape changes (new block) */
	RESIL_A8 uint64_t state_off;  /* policy state block in the state segment */
	RESIL_A8 uint64_t state_size;
	uint32_t comp_off[RESIL_C_MAX]; /* component state, relative to state_off */
	uint32_t budget_slot;           /* retry.budget = @NAME: that budget's slot + 1 */
	uint32_t reserved32[7];
	/* policy.scope = process: one copy of the decision components per
	 * client row at proc_off + (client_id - 1) * proc_stride (absolute
	 * offsets in the state segment), each component at comp_off[] in it;
	 * the copy is the block's prefix of decision components (policy.c).
	 * The counters, the histogram and the retry budget stay fleet-wide in
	 * the main block.
	 * 0 for fleet scope. */
	RESIL_A8 uint64_t proc_off;
	RESIL_A8 uint64_t proc_stride;
	/* CLOCK_MONOTONIC when a define or delete stopped naming it (stored
	 * relaxed by the writer just before the slot word moves on; 0 while
	 * it was never unnamed): its grace period runs from then
	 * (docs/internals/seg.md, "Reuse"). Read by the writer only (embedded
	 * mode's reuse, an adopting daemon). */
	ra64 retired_ns;
	RESIL_A8 uint64_t reserved[5];
	struct resil_conf conf;
};

/* A client row: claimed by the client with one CAS on owner. */
struct resil_client_row {
	ra64 owner;   /* 0 free; else pid << 32 | (start_time & 0xffffffff); CAS by client */
	RESIL_A8 uint64_t start_time; /* /proc/PID/stat field 22, clock ticks since boot */
	ra32 flags;   /* RESIL_ROW_*; */
	uint32_t uid;
	ra32 waiting; /* in a futex wait on some policy: the daemon repairs waiter counts */
	uint32_t reserved32;
	RESIL_A8 uint64_t reserved[4];
};
#define RESIL_ROW_LIVE    0x1u
#define RESIL_ROW_DEAD    0x2u /* daemon saw it die; reclaim in progress */

/* An event in the ring; 64 bytes. seq = index + 1 once the entry is whole.
 * Its types (RESIL_EV_*) and what a, b and value mean: names.h. */

/* RESIL_EV_CLUSTER's a (pushed by the daemon's cluster exchange). */
enum resil_cluster_event {
	RESIL_CL_SHARE = 1,    /* the leased share changed: value = share in thousandths per s */
	RESIL_CL_FALLBACK = 2, /* a lease ran out unrenewed: clients fall back */
	RESIL_CL_CONFLICT = 8, /* hosts with another configuration of the policy: value = hosts */
};

struct resil_event {
	ra64 seq;
	RESIL_A8 int64_t time_ns;
	uint32_t type;
	uint32_t slot;
	uint32_t gen;
	uint32_t a;
	uint32_t b;
	uint32_t reason; /* RESIL_WHY_* */
	uint32_t pid;	 /* the pusher's getpid(), as it says (display only) */
	uint32_t client_id; /* the pusher's row + 1 (resil_ctx), 0: none; the
			     * daemon names the pid it knows for that row */
	RESIL_A8 uint64_t value;
	RESIL_A8 uint64_t reserved[1];
};

struct resil_state_hdr {
	RESIL_A8 uint64_t magic;
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t hdr_size;
	ra32 flags; /* RESIL_SEG_* */
	RESIL_A8 uint64_t seg_size;
	RESIL_A8 uint64_t epoch; /* equals the cfg header's */
	uint32_t client_cap;
	uint32_t event_cap; /* power of two */
	RESIL_A8 uint64_t client_off;
	RESIL_A8 uint64_t event_off;
	RESIL_A8 uint64_t arena_off;
	RESIL_A8 uint64_t arena_size;
	RESIL_A8 uint64_t reserved0[4];

	/* line: daemon-written */
	alignas(RESIL_HOT_ALIGN) ra64 arena_used; /* bump pointer, relative to arena_off */
	ra64 events_read;   /* the daemon's consumer position (for observers) */
	ra64 events_dropped;
	ra32 daemon_pid;    /* 0 in embedded mode */
	ra32 define_lock;   /* embedded mode: serializes defines across forked processes */
	ra64 daemon_beat_ns; /* CLOCK_MONOTONIC of the daemon's last tick, 0: stopped or
			      * never ran; daemon stores relaxed, clients load relaxed (a
			      * hint: stale means "ask the socket who serves now") */
	ra64 state_repairs;  /* state words the daemon found out of range and
			      * repaired since it started; a copy of its private count,
			      * stored relaxed each tick, for metrics (display only) */

	/* line: client-written, rare */
	alignas(RESIL_HOT_ALIGN) ra64 event_head; /* next event index; writers fetch_add */
	ra64 clients_full;  /* decisions made unregistered because the table was full */
	ra32 client_hint;   /* where the next row search starts */

	alignas(RESIL_HOT_ALIGN) RESIL_A8 uint64_t reserved[64];
};

/* Static layout: other processes rely on every one of these. */
RESIL_STATIC_ASSERT(sizeof(struct resil_cfg_hdr) <= RESIL_HDR_SIZE, "cfg header size");
RESIL_STATIC_ASSERT(sizeof(struct resil_state_hdr) <= RESIL_HDR_SIZE, "state header size");
RESIL_STATIC_ASSERT(sizeof(struct resil_rec) <= RESIL_REC_SIZE, "record size");
RESIL_STATIC_ASSERT(sizeof(struct resil_client_row) == RESIL_CLIENT_SIZE, "client row size");
RESIL_STATIC_ASSERT(sizeof(struct resil_event) == RESIL_EVENT_SIZE, "event size");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, magic) == 0, "magic first");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, abi_major) == 8, "abi_major offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, abi_minor) == 12, "abi_minor offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, flags) == 20, "flags offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, seg_size) == 24, "seg_size offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, epoch) == 32, "epoch offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, dir_off) == 56, "dir_off offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, hash_k0) == 88, "hash_k0 offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, st_client_cap) == 112, "st_client_cap offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, st_client_off) == 120, "st_client_off offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, st_arena_size) == 144, "st_arena_size offset");
RESIL_STATIC_ASSERT(sizeof(struct resil_cfg_hdr) == 368, "cfg header size unchanged");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, rec_free) == 152, "rec_free offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_cfg_hdr, arena_holes) == 192, "arena_holes offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, magic) == 0, "magic first");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, abi_major) == 8, "abi_major offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, flags) == 20, "flags offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, arena_used) % RESIL_HOT_ALIGN == 0,
		    "daemon line");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, event_head) % RESIL_HOT_ALIGN == 0,
		    "client line");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, daemon_beat_ns) ==
			offsetof(struct resil_state_hdr, arena_used) + 32,
		    "daemon_beat_ns on the daemon line");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, state_repairs) ==
			offsetof(struct resil_state_hdr, arena_used) + 40,
		    "state_repairs on the daemon line");
RESIL_STATIC_ASSERT(offsetof(struct resil_state_hdr, event_head) == 256, "client line unmoved");
RESIL_STATIC_ASSERT(offsetof(struct resil_rec, state_off) % 8 == 0, "state_off aligned");
RESIL_STATIC_ASSERT(offsetof(struct resil_rec, conf) % 8 == 0, "conf aligned");
RESIL_STATIC_ASSERT(offsetof(struct resil_rec, proc_off) == 184, "proc_off offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_rec, conf) == 248, "conf offset");
RESIL_STATIC_ASSERT(offsetof(struct resil_client_row, owner) == 0, "owner first");
RESIL_STATIC_ASSERT(offsetof(struct resil_event, seq) == 0, "seq first");

/* The state segment's geometry as this process validated it when it
 * created or mapped the pair (private memory). */
struct resil_state_geo {
	uint64_t client_off;
	uint64_t event_off;
	uint64_t arena_off;
	uint64_t arena_size;
	uint32_t client_cap;
	uint32_t event_cap; /* power of two */
};

struct resil_reuse; /* the daemon's free lists (seg_reuse.c); private memory */
struct resil_evq;   /* the daemon's own events (seg_event.c); private memory */

/* A mapped segment pair, as one process sees it. */
struct resil_seg {
	struct resil_cfg_hdr *cfg; /* read-only for clients */
	struct resil_state_hdr *st;
	size_t cfg_size;
	size_t st_size;
	int cfg_fd; /* -1 once closed */
	int st_fd;
	bool cfg_writable; /* daemon or embedded */
	/* The daemon allocates from arena_used below, its own bump pointer
	 * (resil_seg_own_arena), and only publishes it to st->arena_used for
	 * observers; embedded processes share st->arena_used under
	 * define_lock, bounded by geo. */
	bool arena_private;
	uint64_t arena_used;
	/* Every offset and capacity into the state segment comes from here,
	 * never from st (which every client writes). */
	struct resil_state_geo geo;
	/* The daemon's reuse of records and arena space (resil_seg_reuse_init):
	 * NULL elsewhere (clients, embedded mode: bump allocation only). */
	struct resil_reuse *reuse;
	/* The daemon's own count of repairs (its loop stores, its HTTP thread
	 * loads: relaxed, a counter orders nothing), shown by the metrics
	 * instead of st->state_repairs, which any client can rewrite; 0 and
	 * unused (repairs_own false) in clients and embedded mode. */
	bool repairs_own;
	ra64 repairs;
	/* The daemon's own events (resil_seg_own_events): what this process
	 * pushes goes there, never into the ring every client writes, so an
	 * event read from the ring is a client's report and one from here is
	 * the daemon's. NULL elsewhere. */
	struct resil_evq *own_events;
};

/* Sizes of a new segment pair. */
struct resil_seg_params {
	uint32_t slots;   /* policies (default RESIL_SLOTS_DEFAULT) */
	uint32_t clients; /* client rows (default RESIL_CLIENTS_DEFAULT) */
	uint32_t events;  /* ring entries, rounded up to a power of two */
	uint64_t state_size;
};

/* Create a new pair of sealed memfds, laid out and mapped read-write. */
int resil_seg_create(struct resil_seg *s, const struct resil_seg_params *p);
/* Map a received pair; writable_cfg only for the daemon adopting its own.
 * Validates everything a process relies on: -EPROTO on another ABI major,
 * -EBADMSG on a corrupt header, -ESTALE on a retired one. */
int resil_seg_map(struct resil_seg *s, int cfg_fd, int st_fd, bool writable_cfg,
		  bool writable_state, char *err, size_t errlen);
/* Validate headers only (pure, for the fuzzer and adoption). */
int resil_seg_validate(const void *cfg, size_t cfg_size, const void *st, size_t st_size,
		       char *err, size_t errlen);
void resil_seg_unmap(struct resil_seg *s); /* closes fds too */
/* Take the state geometry into s->geo from the validated config header;
 * resil_seg_map does it. -EBADMSG if invalid. */
int resil_seg_take_geo(struct resil_seg *s, char *err, size_t errlen);
/* The daemon takes the arena's bump pointer into its private memory: the
 * end of the furthest block any record ever got (records live in the
 * config segment), or the shared word if it is further and in range.
 * From then on arena_alloc uses the private copy. */
void resil_seg_own_arena(struct resil_seg *s);
/*
 * Reuse (the daemon only, after resil_seg_own_arena): records and arena
 * blocks that no slot word names any more wait out a grace period, then
 * return to daemon-private free lists (docs/internals/seg.md, "Reuse").
 * init rebuilds the lists of an adopted pair from the slot words:
 * whatever no live record names starts its grace period now. 0 or
 * -ENOMEM.
 */
int resil_seg_reuse_init(struct resil_seg *s, int64_t now);
/* Zero [off, off + len) of the state segment (absolute offsets), touching
 * only the partial pages at its ends: the whole pages between are punched
 * out of the memfd (they read as zeros and take no memory until written),
 * or memset where the process has no descriptor of the segment. */
void resil_seg_zero(const struct resil_seg *s, uint64_t off, uint64_t len);
/* The tick: records and blocks whose grace period is over become free. */
void resil_seg_reclaim(struct resil_seg *s, int64_t now);
/* What the configuration and the arena hold (for metrics). Without reuse
 * (embedded mode), nothing waits and nothing is free. */
struct resil_seg_usage {
	uint32_t records;	     /* capacity */
	uint32_t records_used;	     /* live or waiting out the grace period */
	uint32_t records_waiting;    /* retired, in their grace period */
	uint64_t arena;		     /* bytes */
	uint64_t arena_used;	     /* live or waiting, bytes */
	uint64_t arena_waiting;	     /* retired blocks in their grace period, bytes */
	uint64_t arena_free;	     /* free bytes below the bump pointer (holes) */
	uint64_t arena_largest_free; /* the largest hole, or the tail if larger */
	uint32_t arena_holes;	     /* free extents below the bump pointer */
};
void resil_seg_usage(const struct resil_seg *s, struct resil_seg_usage *u);
/* The arena bytes rec's state takes (its block, and its process-scope
 * copies), and those of uid's retired policies still waiting out their
 * grace period (0 without reuse): what counts against the uid's share of
 * the state segment (resild's --max-state-per-uid). */
uint64_t resil_seg_rec_bytes(const struct resil_seg *s, const struct resil_rec *rec);
uint64_t resil_seg_waiting_bytes_of(const struct resil_seg *s, uint32_t uid);
/* The grace period: a retired record or block is reused this long after
 * the slot word stopped naming it, plus its own policy's bulkhead.wait
 * (docs/internals/seg.md, "Reuse"), or later. */
#define RESIL_REUSE_GRACE_NS (1000LL * 1000 * 1000)
/* When the first record (records) or arena block (else) waiting out its
 * grace period comes free (CLOCK_MONOTONIC), INT64_MAX when none waits.
 * A define that answered -EAGAIN may be tried again then. */
int64_t resil_seg_next_free_ns(const struct resil_seg *s, bool records);

/* The daemon's tick: rewrite the state header's identity and geometry
 * copy (for dumps; nothing addresses memory through it) from the private
 * copy. Returns the number of words repaired (enum resil_word
 * RESIL_W_HEADER). */
uint32_t resil_seg_repair_header(struct resil_seg *s);

static inline ra64 *resil_seg_dir(const struct resil_seg *s)
{
	return (ra64 *)((char *)s->cfg + s->cfg->dir_off);
}
static inline ra64 *resil_seg_slots(const struct resil_seg *s)
{
	return (ra64 *)((char *)s->cfg + s->cfg->slots_off);
}
static inline struct resil_rec *resil_seg_rec(const struct resil_seg *s, uint32_t i)
{
	return (struct resil_rec *)((char *)s->cfg + s->cfg->recs_off +
				    (uint64_t)i * s->cfg->rec_size);
}
/* Row i < s->geo.client_cap (callers bound i by the private cap). */
static inline struct resil_client_row *resil_seg_client(const struct resil_seg *s, uint32_t i)
{
	return (struct resil_client_row *)((char *)s->st + s->geo.client_off +
					   (uint64_t)i * RESIL_CLIENT_SIZE);
}
static inline struct resil_event *resil_seg_event(const struct resil_seg *s, uint64_t idx)
{
	return (struct resil_event *)((char *)s->st + s->geo.event_off +
				      (idx & (s->geo.event_cap - 1)) * RESIL_EVENT_SIZE);
}
static inline void *resil_seg_state(const struct resil_seg *s, uint64_t off)
{
	return (char *)s->st + off;
}

/* Directory (O(1) expected): find the slot of NAME, -ENOENT if none.
 * Lock-free for readers; ret_word gets the slot word read (acquire). */
int resil_seg_lookup(const struct resil_seg *s, const char *name, uint32_t *ret_slot,
		     uint64_t *ret_word);
/* The record a slot word points at, NULL if it is free or corrupt. */
struct resil_rec *resil_seg_rec_of(const struct resil_seg *s, uint64_t slot_word);
/* Defining, checking and deleting records: seg_records.h (they lay out
 * the components' state, above this contract). */

/* A valid policy name: 1..63 of [A-Za-z0-9_.:@-], not starting with '.' or
 * '-', '@' only first (budgets). The one rule, for every way in. */
bool resil_name_valid(const char *name);
/* Visit every live policy in slot order. */
typedef int (*resil_seg_visit_fn)(const struct resil_seg *s, uint32_t slot,
				  const struct resil_rec *rec, void *ctx);
int resil_seg_foreach(const struct resil_seg *s, resil_seg_visit_fn fn, void *ctx);

/* Events: any process appends; never blocks. */
/* resil_event_push by a process: its client id (0: none) and pid. */
void resil_event_push_by(const struct resil_seg *s, uint32_t client_id, uint32_t pid, uint32_t type,
			 uint32_t slot, uint32_t gen, uint32_t a, uint32_t b, uint32_t reason,
			 uint64_t value, int64_t now);
void resil_event_push(const struct resil_seg *s, uint32_t type, uint32_t slot, uint32_t gen,
		      uint32_t a, uint32_t b, uint32_t reason, uint64_t value, int64_t now);

/* The daemon: from now on this process's pushes on s go to a private
 * queue of cap entries (a full queue drops the newest and counts it),
 * thread-safe; resil_seg_own_event_take takes the oldest (0, or -EAGAIN
 * when empty) and says how many were dropped since the last take. 0 or
 * -ENOMEM. resil_seg_unmap frees it. */
int resil_seg_own_events(struct resil_seg *s, uint32_t cap);
int resil_seg_own_event_take(const struct resil_seg *s, struct resil_event *out, uint64_t *dropped);

/* Consumer side (the daemon, observers): read entry idx into out.
 * 0: read; -EAGAIN: not written yet (or its writer died: skip it after a
 * grace period); -ESTALE: overwritten by a writer one lap ahead (lost). */
int resil_event_read(const struct resil_seg *s, uint64_t idx, struct resil_event *out);

/* Client rows. ret: row index; -ENOSPC when the table is full (the caller
 * decides unregistered and counts it). */
int resil_client_claim(const struct resil_seg *s, uint32_t pid, uint64_t start_time,
		       uint32_t uid);
void resil_client_release(const struct resil_seg *s, uint32_t row);
/* A row's fields once its owner word was taken (by the claim's CAS, or
 * resild's taking over a row for a connection): start time, uid, no
 * waiter, LIVE (release: after the owner word). */
void resil_client_init_row(const struct resil_seg *s, uint32_t i, uint64_t start_time,
			   uint32_t uid);
/* A client's identity as stored in claims: row + 1 (0 = nobody). */
static inline uint32_t resil_client_id(int row)
{
	return row < 0 ? 0 : (uint32_t)row + 1;
}
/* The id a process claims permits with (a decision's x->client_id): its
 * row + 1, or without a row (the table was full, or resild refused the
 * row) RESIL_CLIENT_PID_TAG | its pid (pids stay below PID_MAX_LIMIT,
 * 2^22). So a rowless holder is named too: resild frees its claims once
 * that pid is gone (daemon/clients.c, "Stray claims"). Ids above the
 * table and below the tag, and above the tag's pids, name nobody: any
 * claim that carries one is freed by the next sweep (a word of all ones
 * among them). */
#define RESIL_CLIENT_PID_TAG 0x80000000u
#define RESIL_CLIENT_PID_MAX (1u << 22)
static inline uint32_t resil_client_claim_id(int row, uint32_t pid)
{
	return row >= 0 ? (uint32_t)row + 1
			: RESIL_CLIENT_PID_TAG | (pid & (RESIL_CLIENT_PID_MAX - 1));
}
/* The row of a claim id, or -1 when it names none (a pid tag, nobody). */
static inline int resil_client_row_of(uint32_t id, uint32_t client_cap)
{
	return id >= 1 && id <= client_cap ? (int)(id - 1) : -1;
}

#endif

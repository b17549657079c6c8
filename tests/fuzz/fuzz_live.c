/* SPDX-License-Identifier: MIT */
/*
 * fuzz_live.c - a hostile client of the trust domain writes into the live
 * state segment between the daemon's steps.
 *
 * Each input starts a daemon in-process on a fresh, real segment pair
 * (memfds, as resild creates them) with one policy of every component
 * kind and a client row bound to this process, then runs a program of
 * 13-byte steps [op u8][off u32][val u64]:
 *   - a write of 1, 4 or 8 bytes of val into the state segment: the
 *     header, client table and event ring, the arena in use, a policy's
 *     state block, or anywhere;
 *   - the daemon's tick (header repair, every policy's maintain with the
 *     repairs counted, the client scan with its reclaim and stray sweep,
 *     the event drain), as loop.c runs it;
 *   - a control request through resild_handle (define with a new shape,
 *     reset, force open and closed, show, a keyed show, list, metrics,
 *     delete);
 *   - the metrics text; the observers' reads (breaker states, permit
 *     holders, the event ring);
 *   - a client's decision (acquire and release) on the manual clock;
 *   - reclaim of a client id and a sweep of stray claims;
 *   - a restart that adopts the pair (map, check, own the arena), as
 *     main.c does with the descriptors of the fd store;
 *   - the clock moved.
 * Nothing may crash, read or write outside the segments (ASan), overflow
 * (UBSan), or leave the configuration inconsistent (resil_seg_check after
 * every step that writes it).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <unistd.h>

#include "clients.h"
#include "ctl.h"
#include "events.h"
#include "log.h"
#include "owners.h"
#include "policy.h"
#include "seg_records.h"
#include "resil.pb-c.h"
#include "resild.h"

static const char *const POL[][2] = {
    {"bk_count", "breaker.window = count:10; breaker.wait = 100ms; "
		 "breaker.half_open_calls = 2; breaker.half_open_max_wait = 200ms"},
    {"bk_time", "breaker.window = time:2s; breaker.buckets = 4; breaker.min_calls = 2; "
		"breaker.slow_call = 1ms; breaker.slow_call_rate = 50"},
    {"bk_consec", "breaker.window = consecutive:3; breaker.wait = 100ms; "
		  "breaker.wait_multiplier = 2; breaker.wait_max = 1s"},
    {"gcra", "limit.rate = 1000/s; limit.burst = 10"},
    {"keyed", "limit.rate = 100/s; limit.burst = 5; limit.keys = 8"},
    {"sliding", "limit.rate = 1000/s; limit.algorithm = sliding"},
    {"approx", "limit.rate = 1000/s; limit.algorithm = sliding-approx"},
    {"bh", "bulkhead.max = 4"},
    {"bh_wait", "bulkhead.max = 2; bulkhead.wait = 20ms"},
    {"budget", "breaker.window = count:20; retry.budget = aws:50"},
    {"aimd", "adaptive.algorithm = aimd; adaptive.min = 1; adaptive.max = 8; "
	     "adaptive.initial = 4"},
    {"gradient", "adaptive.algorithm = gradient2"},
    {"shed", "bulkhead.max = 8; shed.k = 2; histogram = on"},
    {"proc", "policy.scope = process; breaker.window = consecutive:3; bulkhead.max = 2"},
};
#define NPOL (sizeof(POL) / sizeof(POL[0]))

static struct resild d;
static uint8_t out[RESILD_MSG_MAX];
static char text[1 << 18];
static int64_t clock_ns;
static int row = -1;

static int64_t manual_clock(void *ctx)
{
	(void)ctx;
	return clock_ns;
}

static int handle(Resil__Request *req)
{
	static uint8_t msg[RESILD_MSG_MAX];
	struct resild_peer peer = {.pid = getpid(), .rx_fd = -1};
	int fds[RESILD_HANDLE_FDS], nfds = 0, r;
	size_t len = resil__request__pack(req, msg), outlen = sizeof(out);

	r = resild_handle(&d, &peer, msg, len, out, &outlen, fds, &nfds);
	if (r >= 0 && outlen > RESILD_MSG_MAX)
		abort();
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	resild_peer_gone(&d, &peer);
	return r;
}

/* Define (an upsert) */
static void define(const char *name, const char *conf)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;

	df.name = (char *)name;
	df.config = (char *)conf;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	handle(&req);
}

/* The control requests a step may send (val picks one). */
static void control(uint64_t val)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Get g = RESIL__GET__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;
	Resil__List l = RESIL__LIST__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Delete dl = RESIL__DELETE__INIT;
	const char *name = POL[(val >> 8) % NPOL][0];
	char conf[96];

	switch (val % 9) {
	case 0: /* a new shape: a new block from the arena */
		snprintf(conf, sizeof(conf), "bulkhead.max = %u; breaker.window = count:%u",
			 (unsigned)(1 + (val >> 16) % 9), (unsigned)(2 + (val >> 24) % 13));
		define((val >> 32) & 1 ? "reshaped" : name, conf);
		return;
	case 1:
		f.name = (char *)name;
		f.reset = true;
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &f;
		break;
	case 2:
	case 3:
		f.name = (char *)name;
		f.target = val % 9 == 2 ? RESIL__BREAKER_STATE__BREAKER_OPEN
					: RESIL__BREAKER_STATE__BREAKER_CLOSED;
		req.body_case = RESIL__REQUEST__BODY_FORCE;
		req.force = &f;
		break;
	case 4:
	case 5:
		g.name = (char *)(val % 9 == 5 ? "keyed" : name);
		if (val % 9 == 5) {
			g.key.data = (uint8_t *)&val;
			g.key.len = 1 + (val >> 40) % 7;
			g.has_key = true;
		}
		req.body_case = RESIL__REQUEST__BODY_GET;
		req.get = &g;
		break;
	case 6:
		req.body_case = RESIL__REQUEST__BODY_LIST;
		req.list = &l;
		break;
	case 7:
		req.body_case = RESIL__REQUEST__BODY_METRICS;
		req.metrics = &m;
		break;
	default:
		dl.name = "reshaped";
		req.body_case = RESIL__REQUEST__BODY_DELETE;
		req.delete_ = &dl;
		break;
	}
	handle(&req);
}

static int tick_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *ctx)
{
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};

	(void)ctx;
	resil_policy_maintain(&x, rec);
	if (x.repairs)
		resild_state_repaired(&d, slot, rec->gen, x.repair_word, x.repairs);
	return 0;
}

/* loop.c's on_tick without the sockets. */
static void tick(void)
{
	uint32_t fixed = resil_seg_repair_header(&d.seg);

	if (fixed)
		resild_state_repaired(&d, UINT32_MAX, 0, RESIL_W_HEADER, fixed);
	resil_seg_foreach(&d.seg, tick_one, NULL);
	resild_clients_scan(&d);
	resild_events_drain(&d);
}

/* A client's decision on the manual clock, the way libresil makes it. */
static void decide(const struct resil_rec *rec, uint64_t val)
{
	struct resil_ctx x = {.seg = &d.seg,
			      .rec = rec,
			      .clock = {manual_clock, NULL},
			      .client_id = resil_client_id(row),
			      .pid = (uint32_t)getpid()};
	struct resil_permit_priv pm = {0};
	char key[8];

	memcpy(key, &val, sizeof(key));
	if (resil_policy_acquire(&x, rec, &pm, key, 1 + (val >> 8) % 7) == 0) {
		x.now = 0;
		clock_ns += (int64_t)(val >> 16) % 5000000;
		resil_policy_release(&x, rec, &pm, (int)(val % 3));
	}
}

static uint64_t stray_bits;

static bool stray(uint32_t id, void *ctx)
{
	(void)ctx;
	return (stray_bits >> (id % 64)) & 1;
}

static void holder(uint32_t id, void *ctx)
{
	*(uint64_t *)ctx += id;
}

static const struct resil_rec *recs[NPOL];

static int collect(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec, void *ctx)
{
	size_t *n = ctx;

	(void)s;
	(void)slot;
	if (*n < NPOL)
		recs[(*n)++] = rec;
	return 0;
}

/* The live records (they change with defines and restarts). */
static size_t live_recs(void)
{
	size_t n = 0;

	resil_seg_foreach(&d.seg, collect, &n);
	return n;
}

static void daemon_fini(void)
{
	resild_owners_fini(&d);
	resild_clients_fini(&d);
	resil_seg_unmap(&d.seg);
	memset(&d, 0, sizeof(d));
}

/* The daemon's start on a pair: fresh (cfg_fd < 0) or adopted. */
static int daemon_start(int cfg_fd, int st_fd)
{
	struct resil_seg_params p = {
	    .slots = 32, .clients = 8, .events = 16, .state_size = 2 << 20};
	char err[256];

	memset(&d, 0, sizeof(d));
	d.opts.policies = 32;
	d.opts.clients = 8;
	d.opts.state_size = p.state_size;
	d.listen_fd = -1;
	if (cfg_fd >= 0) {
		if (resil_seg_map(&d.seg, cfg_fd, st_fd, true, true, err, sizeof(err)) < 0)
			return -1;
		if (resil_seg_check(&d.seg, err, sizeof(err)) < 0) {
			/* the descriptors stay the caller's, as in main.c */
			munmap(d.seg.cfg, d.seg.cfg_size);
			munmap(d.seg.st, d.seg.st_size);
			memset(&d.seg, 0, sizeof(d.seg));
			return -1;
		}
		d.adopted = true;
	} else if (resil_seg_create(&d.seg, &p) < 0) {
		abort();
	}
	d.have_seg = true;
	resil_seg_own_arena(&d.seg);
	st_release(&d.seg.st->daemon_pid, (uint32_t)getpid());
	if (resild_clients_init(&d) < 0)
		abort();
	resild_events_init(&d);
	row = resild_clients_bind(&d, getpid(), 0, true);
	return 0;
}

/* A restart with the fd store: the new daemon adopts the same memfds. */
static void restart(void)
{
	int cfg_fd = dup(d.seg.cfg_fd), st_fd = dup(d.seg.st_fd);

	if (cfg_fd < 0 || st_fd < 0)
		abort();
	daemon_fini();
	if (daemon_start(cfg_fd, st_fd) < 0) {
		/* not adopted (the state header's identity words were
		 * rewritten): resild starts fresh, as main.c does */
		close(cfg_fd);
		close(st_fd);
		if (daemon_start(-1, -1) < 0)
			abort();
		for (size_t i = 0; i < NPOL; i++)
			define(POL[i][0], POL[i][1]);
	}
}

/*
 * The configuration is still whole (resil_seg_check). The check also
 * compares the state header's identity words, which any client may
 * rewrite (a restart would then refuse the pair): they are put back for
 * the check and rewritten after it.
 */
static bool config_sane(char *err, size_t len)
{
	struct resil_state_hdr *h = d.seg.st, saved;
	bool ok;

	memcpy(&saved, h, offsetof(struct resil_state_hdr, client_cap));
	h->magic = RESIL_STATE_MAGIC;
	h->abi_major = d.seg.cfg->abi_major;
	h->abi_minor = d.seg.cfg->abi_minor;
	h->hdr_size = RESIL_HDR_SIZE;
	h->seg_size = d.seg.st_size;
	h->epoch = d.seg.cfg->epoch;
	ok = resil_seg_check(&d.seg, err, len) == 0;
	memcpy(h, &saved, offsetof(struct resil_state_hdr, client_cap));
	return ok;
}

static void poke(uint8_t op, uint32_t off, uint64_t val)
{
	char *st = (char *)d.seg.st;
	uint64_t size = d.seg.st_size, base = 0, len;
	int width = (op & 3) == 0 ? 1 : (op & 3) == 1 ? 4 : 8;
	size_t n;

	switch ((op >> 2) & 3) {
	case 0: /* header, client table, event ring */
		len = d.seg.geo.arena_off;
		break;
	case 1: /* the arena in use */
		base = d.seg.geo.arena_off;
		len = d.seg.arena_used ? d.seg.arena_used : 1;
		break;
	case 2: /* one policy's state block */
		n = live_recs();
		if (n == 0)
			return;
		base = recs[off % n]->state_off;
		len = recs[off % n]->state_size ? recs[off % n]->state_size : 1;
		off >>= 4;
		break;
	default:
		len = size;
		break;
	}
	base += off % len;
	base &= ~(uint64_t)(width - 1);
	if (base + (uint64_t)width > size)
		return;
	if (width == 1)
		atomic_store_explicit((_Atomic uint8_t *)(st + base), (uint8_t)val,
				      memory_order_relaxed);
	else if (width == 4)
		atomic_store_explicit((_Atomic uint32_t *)(st + base), (uint32_t)val,
				      memory_order_relaxed);
	else
		atomic_store_explicit((_Atomic uint64_t *)(st + base), val, memory_order_relaxed);
}

static void observe(void)
{
	struct resil_state_hdr *h = d.seg.st;
	uint64_t sum = 0, head = ld_relaxed(&h->event_head);
	size_t n = live_recs();

	for (size_t i = 0; i < n; i++) {
		resil_policy_breaker_state(&d.seg, recs[i]);
		resil_policy_breaker_state_of(&d.seg, recs[i], resil_client_id(row));
		resil_policy_holders(&d.seg, recs[i], holder, &sum);
	}
	for (uint64_t i = 0; i < 4; i++) {
		struct resil_event e;

		resil_event_read(&d.seg, head - i, &e);
	}
	resild_metrics_publish(&d);
	resild_metrics_http_text(&d.seg, text, sizeof(text));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];
	size_t n;

	log_set_max_level(LOG_EMERG);
	clock_ns = resil_clock_monotonic(NULL);
	if (daemon_start(-1, -1) < 0)
		abort();
	for (size_t i = 0; i < NPOL; i++)
		define(POL[i][0], POL[i][1]);
	n = live_recs();
	for (size_t i = 0; i < n; i++)
		decide(recs[i], i);
	tick();

	while (size >= 13) {
		uint8_t op = data[0];
		uint32_t off;
		uint64_t val;

		memcpy(&off, data + 1, 4);
		memcpy(&val, data + 5, 8);
		data += 13;
		size -= 13;
		switch (op >> 4) {
		case 0:
		case 1:
		case 2:
		case 3:
		case 4:
		case 5:
			poke(op, off, val);
			break;
		case 6:
		case 7:
			tick();
			break;
		case 8:
			control(val);
			break;
		case 9:
			observe();
			break;
		case 10:
		case 11:
			n = live_recs();
			if (n)
				decide(recs[off % n], val);
			break;
		case 12:
			n = live_recs();
			for (size_t i = 0; i < n; i++) {
				struct resil_ctx x = {
				    .seg = &d.seg, .rec = recs[i], .now = clock_ns};
				struct resil_reclaim_counts counts = {0};

				resil_policy_reclaim(&x, recs[i], (uint32_t)val, &counts);
			}
			break;
		case 13:
			n = live_recs();
			stray_bits = val;
			for (size_t i = 0; i < n; i++) {
				struct resil_ctx x = {
				    .seg = &d.seg, .rec = recs[i], .now = clock_ns};

				resil_policy_sweep(&x, recs[i], stray, NULL);
			}
			resild_clients_exited(&d, off % 16, (uint32_t)val % 4);
			break;
		case 14:
			restart();
			break;
		default:
			clock_ns += (int64_t)(val % (10 * RESIL_NS_PER_S));
			break;
		}
		/* the steps that write the configuration */
		if ((op >> 4 == 8 || op >> 4 == 14) && !config_sane(err, sizeof(err))) {
			fprintf(stderr, "after step %#x: %s\n", op, err);
			abort();
		}
	}
	tick();
	observe();
	daemon_fini();
	return 0;
}

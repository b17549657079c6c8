/* SPDX-License-Identifier: MIT */
/*
 * stress_breaker.c - 4 forked processes on one circuit breaker in a
 * MAP_SHARED region, with random outcomes in phases (mostly healthy, then
 * mostly failing) so the breaker goes round CLOSED -> OPEN -> HALF_OPEN
 * many times, each process holding up to 3 permits at once, some probes
 * held past half_open_max_wait, and the parent running the daemon's tick
 * (maintain) meanwhile. Time is a manual clock in the shared page that
 * every call advances, so OPEN waits end while the processes race.
 *
 * Invariants (validate part), for each window kind:
 *   - HALF_OPEN never admits more than half_open_calls probes in one
 *     generation (not counting those given back with RESIL_IGNORED), nor
 *     more than half_open_concurrent at once (each prober counts itself
 *     in right after its acquire and out right before its release);
 *   - at quiescence: every probe slot free; count window counters equal
 *     the histogram of its slots;
 *   - transitions read back from the event ring are neither lost nor
 *     doubled: their number equals the generations the state word went
 *     through, and per state, entries minus exits equal
 *     [final state] - [initial state].
 * Then (bench part) calls per second of the whole run are printed.
 *
 * Default 200k calls per process and window kind; RESIL_TEST_SCALE
 * multiplies them (5 gives the 1M of the design notes).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "resil.h"
#include "breaker.h"
#include "conf.h"
#include "seg.h"
#include "testutil.h"

#define PROCS	 4
#define GENS	 (1u << 20)
#define HO_CALLS 5
#define HO_CONC	 3

struct shared {
	alignas(RESIL_HOT_ALIGN) _Atomic int64_t now; /* the manual clock */
	alignas(RESIL_HOT_ALIGN) _Atomic long admitted;
	_Atomic long rejected;
	_Atomic long probes;
	_Atomic int ready; /* children at the start line */
	_Atomic uint32_t probes_in_gen[GENS];
	_Atomic uint32_t inflight_in_gen[GENS];
	alignas(RESIL_HOT_ALIGN) char st[]; /* the breaker state */
};

static int64_t shared_clock(void *ctx)
{
	return atomic_load_explicit((_Atomic int64_t *)ctx, memory_order_relaxed);
}

static void worker(struct shared *sh, struct resil_seg *seg, const struct resil_breaker_conf *c,
		   uint32_t id, long calls)
{
	struct resil_breaker_state *st = (struct resil_breaker_state *)sh->st;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (id + 11);
	long admitted = 0, rejected = 0, probes = 0;
	struct resil_permit_priv pm[3];
	struct resil_ctx x;

	memset(&x, 0, sizeof(x));
	x.seg = seg;
	x.clock.fn = shared_clock;
	x.clock.ctx = &sh->now;
	x.client_id = id;
	/* start together, so the processes really overlap */
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->ready) < PROCS)
		sched_yield();
	for (long n = 0; n < calls;) {
		uint64_t rnd = resil_splitmix64(&seed);
		bool bad = (n / 4000) & 1;
		int want = 1 + (int)(rnd % 3), got = 0;

		for (int i = 0; i < want; i++, n++) {
			memset(&pm[got], 0, sizeof(pm[got]));
			atomic_fetch_add_explicit(&sh->now, 10 * RESIL_NS_PER_US,
						  memory_order_relaxed);
			x.now = 0;
			if (resil_breaker_check(&x, c, st, &pm[got]) ||
			    resil_breaker_acquire(&x, c, st, &pm[got])) {
				rejected++;
				continue;
			}
			if (pm[got].probe_idx) {
				uint32_t g = pm[got].breaker_gen;
				uint32_t total = atomic_fetch_add(&sh->probes_in_gen[g], 1) + 1;
				uint32_t in = atomic_fetch_add(&sh->inflight_in_gen[g], 1) + 1;

				TEST_CHECK(total <= HO_CALLS);
				TEST_CHECK(in <= HO_CONC);
				probes++;
			}
			admitted++;
			got++;
		}
		if (((rnd >> 40) & 255) == 0) /* now and then a call that hangs */
			atomic_fetch_add_explicit(&sh->now, 3 * RESIL_NS_PER_MS,
						  memory_order_relaxed);
		if (((rnd >> 32) & 63) == 0)
			sched_yield();
		while (got > 0) {
			uint64_t o = resil_splitmix64(&seed) % 100;
			int outcome = o < 5		      ? RESIL_IGNORED
				      : o < (bad ? 75u : 10u) ? RESIL_FAILURE
							      : RESIL_SUCCESS;

			got--;
			if (pm[got].probe_idx) {
				uint32_t g = pm[got].breaker_gen;

				atomic_fetch_sub(&sh->inflight_in_gen[g], 1);
				/* an ignored probe is given back: another may go */
				if (outcome == RESIL_IGNORED)
					atomic_fetch_sub(&sh->probes_in_gen[g], 1);
			}
			x.now = 0;
			resil_breaker_release(&x, c, st, &pm[got], outcome);
		}
	}
	atomic_fetch_add(&sh->admitted, admitted);
	atomic_fetch_add(&sh->rejected, rejected);
	atomic_fetch_add(&sh->probes, probes);
}

static int run(const char *name, const char *cfg, long calls)
{
	struct resil_seg_params sp = {
	    .slots = 4, .clients = 16, .events = 1u << 18, .state_size = 64 << 20};
	struct resil_seg seg;
	struct resil_conf conf;
	struct resil_breaker_conf *c = &conf.breaker;
	struct resil_breaker_state *st;
	struct shared *sh;
	char err[256];
	size_t size;
	pid_t pids[PROCS];
	long in[8] = {0}, out[8] = {0}, events = 0;
	int64_t t0, t1;
	int failed = 0;

	resil_conf_init(&conf);
	if (resil_conf_parse(&conf, cfg, 1, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", name, err);
		return 1;
	}
	TEST_CHECK(resil_seg_create(&seg, &sp) == 0);
	size = sizeof(*sh) + resil_breaker_state_size(c);
	sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	TEST_CHECK(sh != MAP_FAILED);
	st = (struct resil_breaker_state *)sh->st;
	atomic_store(&sh->now, 1000 * RESIL_NS_PER_S);
	resil_breaker_state_init(st, c, atomic_load(&sh->now));

	t0 = test_mono_ns();
	for (int i = 0; i < PROCS; i++) {
		pids[i] = fork();
		TEST_CHECK(pids[i] >= 0);
		if (pids[i] == 0) {
			worker(sh, &seg, c, (uint32_t)i + 1, calls);
			_exit(0);
		}
	}
	/* the daemon's tick, meanwhile, until every child is gone */
	{
		struct resil_ctx x;
		int left = PROCS;

		memset(&x, 0, sizeof(x));
		x.seg = &seg;
		x.clock.fn = shared_clock;
		x.clock.ctx = &sh->now;
		while (left > 0) {
			int status;
			pid_t p = waitpid(-1, &status, WNOHANG);

			if (p > 0) {
				if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
					failed = 1;
				left--;
				continue;
			}
			x.now = 0;
			resil_breaker_maintain(&x, c, st);
			usleep(200);
		}
	}
	t1 = test_mono_ns();
	if (failed) {
		fprintf(stderr, "%s: a worker failed\n", name);
		return 1;
	}

	/* quiescence: every probe back */
	{
		struct resil_breaker_probe *p =
		    (struct resil_breaker_probe *)((char *)st + st->probe_off);

		for (uint32_t i = 0; i < st->nprobe; i++)
			TEST_CHECK(atomic_load(&p[i].owner) == 0);
	}
	/* count window: counters equal the slots */
	if (c->window_kind == RESIL_WINDOW_COUNT) {
		ra32 *slots = (ra32 *)((char *)st + st->win_off);
		struct resil_breaker_counts k, h = {0};

		for (uint32_t i = 0; i < st->size; i++) {
			uint32_t v = atomic_load(&slots[i]);

			h.calls += v & 1;
			h.failures += (v >> 1) & 1;
			h.slow += (v >> 2) & 1;
		}
		resil_breaker_unpack(atomic_load(&st->counters), &k);
		if (k.calls != h.calls || k.failures != h.failures || k.slow != h.slow) {
			fprintf(stderr, "%s: counters %ld/%ld/%ld, slots %ld/%ld/%ld\n", name,
				(long)k.calls, (long)k.failures, (long)k.slow, (long)h.calls,
				(long)h.failures, (long)h.slow);
			return 1;
		}
	}
	/* transitions: neither lost nor doubled */
	{
		uint64_t head = atomic_load(&seg.st->event_head);
		uint64_t w = atomic_load(&st->word);
		uint32_t gen = (uint32_t)(w >> 8) & (GENS - 1);
		int final = (int)(w & 7);

		TEST_CHECK(head < seg.st->event_cap); /* the ring did not wrap */
		for (uint64_t i = 0; i < head; i++) {
			struct resil_event e;

			TEST_CHECK(resil_event_read(&seg, i, &e) == 0);
			TEST_CHECK(e.type == RESIL_EV_TRANSITION);
			TEST_CHECK(e.a < 8 && e.b < 8 && e.a != e.b);
			out[e.a]++;
			in[e.b]++;
			events++;
		}
		if ((uint64_t)events != gen) {
			fprintf(stderr, "%s: %ld transition events, %u generations\n", name, events,
				gen);
			return 1;
		}
		for (int s = 0; s < 8; s++)
			TEST_CHECK(in[s] - out[s] ==
				   (s == final ? 1 : 0) - (s == RESIL_STATE_CLOSED ? 1 : 0));
	}
	printf("%s: %ld calls, %ld admitted, %ld rejected, %ld probes, %ld transitions "
	       "(%ld opens), %.1f M calls/s\n",
	       name, calls * PROCS, atomic_load(&sh->admitted), atomic_load(&sh->rejected),
	       atomic_load(&sh->probes), events, in[RESIL_STATE_OPEN],
	       (double)(calls * PROCS) * 1e3 / (double)(t1 - t0));
	/* the run must have gone round the states, or it proved nothing */
	TEST_CHECK(in[RESIL_STATE_OPEN] >= 10 && in[RESIL_STATE_HALF_OPEN] >= 10 &&
		   in[RESIL_STATE_CLOSED] >= 2);
	munmap(sh, size);
	resil_seg_unmap(&seg);
	return 0;
}

int main(void)
{
	long calls = 200000L * resil_test_scale();
	const char *common = "breaker.wait = 1ms; breaker.half_open_calls = 5;"
			     "breaker.half_open_concurrent = 3; breaker.half_open_max_wait = 2ms;";
	char cfg[512];
	int r = 0;

	snprintf(cfg, sizeof(cfg), "%s breaker.window = count:100; breaker.min_calls = 20", common);
	r |= run("count", cfg, calls);
	snprintf(cfg, sizeof(cfg), "%s breaker.window = time:20ms; breaker.min_calls = 20", common);
	r |= run("time", cfg, calls);
	snprintf(cfg, sizeof(cfg), "%s breaker.window = consecutive:5", common);
	r |= run("consecutive", cfg, calls);
	return r;
}

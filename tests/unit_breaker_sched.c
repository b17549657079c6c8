/* SPDX-License-Identifier: MIT */
/*
 * unit_breaker_sched.c - every interleaving (up to a number of preemptions)
 * of a few callers racing on the breaker's state word, probes and window.
 *
 * The real breaker.c is compiled into this test with the atomic
 * operations of <stdatomic.h> wrapped: before each one, the calling
 * "thread" (a ucontext coroutine) yields to a scheduler, which decides
 * who performs the next atomic step. A run is a sequence of such
 * decisions; the explorer replays runs depth first, each from the same
 * initial state (manual clock, no randomness: runs are deterministic),
 * until every schedule with at most 2 preemptions was run (3 when
 * RESIL_TEST_SCALE > 1: 16 s instead of 0.4), i.e. stateless model
 * checking with preemption bounding. Plain memory needs no interleaving:
 * besides its own permit and stack, a caller only reads words that are
 * immutable after init (base, offsets); the event ring (seg_event.c, not under
 * test here) is pushed in one step. The runs are sequentially consistent:
 * reorderings a weaker memory model allows are not explored (the orders
 * and the fence in breaker.c are argued in its comments).
 *
 * Scenarios and what must hold after every schedule:
 *   - two failures crossing the threshold at once: exactly one
 *     transition to OPEN;
 *   - three callers at the end of the OPEN wait (2 probes in total, 1 at
 *     once): one OPEN -> HALF_OPEN, never more probes than allowed, in
 *     total or at once, no call admitted while OPEN;
 *   - a late probe answer against the timeout and the daemon's tick;
 *   - the last probe answer against new claims (count window): the
 *     decision made once, the fresh window's counters equal its slots;
 *   - a force against a transition: the forced state wins.
 * And always: transitions pushed to the event ring = generations the
 * state word went through (none lost, none doubled), entries minus exits
 * per state consistent, no probe slot owned at the end, and never a
 * HALF_OPEN left with every probe answered and none held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cmocka.h>

#include "common.h"

/* ---- the scheduler's hook in every atomic operation ---- */

static void bk_sched(void);

#undef atomic_load_explicit
#undef atomic_store_explicit
#undef atomic_fetch_add_explicit
#undef atomic_exchange_explicit
#undef atomic_compare_exchange_strong_explicit
/* The operations on the plain type behind the _Atomic one (same size and
 * representation: the types are lock free), so gcc and clang take them. */
#define BK_PLAIN(p_) (__typeof__((void)0, *(p_)) *)(p_)
#define atomic_load_explicit(P, MO)                                                                \
	__extension__({                                                                            \
		__auto_type p_ = (P);                                                              \
		bk_sched();                                                                        \
		__atomic_load_n(BK_PLAIN(p_), (MO));                                               \
	})
#define atomic_store_explicit(P, V, MO)                                                            \
	__extension__({                                                                            \
		__auto_type p_ = (P);                                                              \
		__typeof__((void)0, *p_) v_ = (V);                                                 \
		bk_sched();                                                                        \
		__atomic_store_n(BK_PLAIN(p_), v_, (MO));                                          \
	})
#define atomic_fetch_add_explicit(P, V, MO)                                                        \
	__extension__({                                                                            \
		__auto_type p_ = (P);                                                              \
		__typeof__((void)0, *p_) v_ = (V);                                                 \
		bk_sched();                                                                        \
		__atomic_fetch_add(BK_PLAIN(p_), v_, (MO));                                        \
	})
#define atomic_exchange_explicit(P, V, MO)                                                         \
	__extension__({                                                                            \
		__auto_type p_ = (P);                                                              \
		__typeof__((void)0, *p_) v_ = (V);                                                 \
		bk_sched();                                                                        \
		__atomic_exchange_n(BK_PLAIN(p_), v_, (MO));                                       \
	})
#define atomic_compare_exchange_strong_explicit(P, E, D, S, F)                                     \
	__extension__({                                                                            \
		__auto_type p_ = (P);                                                              \
		__typeof__((void)0, *p_) d_ = (D);                                                 \
		bk_sched();                                                                        \
		__atomic_compare_exchange_n(BK_PLAIN(p_), (E), d_, 0, (S), (F));                   \
	})

/* The real thing, with the hooks above. Its functions take the place of
 * the library's (the linker takes no archive member for a symbol already
 * defined). */
#include "breaker.c"

#include "conf.h"
#include "seg.h"

#define S	 RESIL_NS_PER_S
#define MAXT	 4
#define MAXSTEPS 4096
#define STACK	 (128 * 1024)

/* ---- coroutines and the explorer ---- */

struct sim;
typedef void (*thread_fn)(struct sim *m, int id);

struct sim {
	/* the system under test */
	struct resil_breaker_conf conf;
	struct resil_breaker_state *st;
	size_t st_size;
	struct resil_seg seg;
	int64_t now;
	/* what the scenario counts as it goes */
	int probes_in_gen[64];
	int inflight_in_gen[64];
	int admitted_open; /* admissions while the word said OPEN */
	int too_many;	   /* probes over the total or over the concurrency */
	/* threads */
	int nthreads;
	thread_fn fn[MAXT];
	ucontext_t uc[MAXT], sched;
	char *stack[MAXT];
	bool done[MAXT];
	int cur;
	/* the schedule */
	int step, plen;
	uint8_t prefix[MAXSTEPS], chosen[MAXSTEPS], nch[MAXSTEPS];
	uint8_t preempt_before[MAXSTEPS];
	bool cur_runnable[MAXSTEPS];
	int preemptions;
	long runs;
};

static struct sim *the_sim;
static int preemption_bound = 2;

static void bk_sched(void)
{
	struct sim *m = the_sim;

	if (!m || m->cur < 0)
		return; /* setup and checks run outside the scheduler */
	swapcontext(&m->uc[m->cur], &m->sched);
}

static void trampoline(int id)
{
	struct sim *m = the_sim;

	m->fn[id](m, id);
	m->done[id] = true;
	/* uc_link returns to the scheduler */
}

static int64_t sim_clock(void *ctx)
{
	return ((struct sim *)ctx)->now;
}

static void sim_ctx(struct sim *m, struct resil_ctx *x, int id)
{
	memset(x, 0, sizeof(*x));
	x->seg = &m->seg;
	x->clock.fn = sim_clock;
	x->clock.ctx = m;
	x->client_id = (uint32_t)id + 1;
}

/* One run of the current prefix; false when the step budget ran out. */
static bool run_once(struct sim *m)
{
	int order[MAXT];

	m->step = 0;
	m->preemptions = 0;
	m->cur = -1;
	for (int i = 0; i < m->nthreads; i++) {
		m->done[i] = false;
		getcontext(&m->uc[i]);
		m->uc[i].uc_stack.ss_sp = m->stack[i];
		m->uc[i].uc_stack.ss_size = STACK;
		m->uc[i].uc_link = &m->sched;
		makecontext(&m->uc[i], (void (*)(void))trampoline, 1, i);
	}
	for (;;) {
		int n = 0, choice, next;
		bool runnable = m->cur >= 0 && !m->done[m->cur];

		if (runnable)
			order[n++] = m->cur;
		for (int i = 0; i < m->nthreads; i++)
			if (!m->done[i] && i != m->cur)
				order[n++] = i;
		if (n == 0)
			break;
		if (m->step >= MAXSTEPS)
			return false;
		choice = m->step < m->plen ? m->prefix[m->step] : 0;
		if (choice >= n)
			choice = n - 1;
		m->chosen[m->step] = (uint8_t)choice;
		m->nch[m->step] = (uint8_t)n;
		m->cur_runnable[m->step] = runnable;
		m->preempt_before[m->step] = (uint8_t)m->preemptions;
		if (runnable && choice > 0)
			m->preemptions++;
		m->step++;
		next = order[choice];
		m->cur = next;
		swapcontext(&m->sched, &m->uc[next]);
	}
	m->cur = -1;
	return true;
}

/* The next prefix, depth first within the preemption bound. */
static bool next_prefix(struct sim *m)
{
	for (int k = m->step - 1; k >= 0; k--) {
		int c = m->chosen[k] + 1;

		if (c >= m->nch[k])
			continue;
		if (m->preempt_before[k] + (m->cur_runnable[k] ? 1 : 0) > preemption_bound)
			continue;
		memcpy(m->prefix, m->chosen, (size_t)k);
		m->prefix[k] = (uint8_t)c;
		m->plen = k + 1;
		return true;
	}
	return false;
}

/* ---- building blocks of the scenarios ---- */

static void sim_conf(struct sim *m, const char *cfg)
{
	struct resil_conf c;
	char err[256];

	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, cfg, 1, err, sizeof(err)), 0);
	m->conf = c.breaker;
	m->st_size = resil_align_up(resil_breaker_state_size(&m->conf), RESIL_HOT_ALIGN);
	m->st = aligned_alloc(RESIL_HOT_ALIGN, m->st_size);
	assert_non_null(m->st);
}

static void sim_reset(struct sim *m)
{
	memset(m->st, 0, m->st_size);
	m->now = 1000 * S;
	resil_breaker_state_init(m->st, &m->conf, m->now);
	atomic_store(&m->seg.st->event_head, 0);
	memset(m->probes_in_gen, 0, sizeof(m->probes_in_gen));
	memset(m->inflight_in_gen, 0, sizeof(m->inflight_in_gen));
	m->admitted_open = 0;
	m->too_many = 0;
}

/* acquire as policy.c does: check, then (last) acquire. */
static int sim_acquire(struct sim *m, struct resil_ctx *x, struct resil_permit_priv *pm)
{
	int r;

	memset(pm, 0, sizeof(*pm));
	x->now = 0;
	r = resil_breaker_check(x, &m->conf, m->st, pm);
	if (!r)
		r = resil_breaker_acquire(x, &m->conf, m->st, pm);
	if (r)
		return r;
	if (pm->probe_idx) {
		uint32_t g = pm->breaker_gen & 63;

		/* counted, checked after the run (no assert on a coroutine) */
		m->probes_in_gen[g]++;
		m->inflight_in_gen[g]++;
		if (m->probes_in_gen[g] > (int)ho_calls(&m->conf) ||
		    m->inflight_in_gen[g] > (int)nprobe_of(&m->conf))
			m->too_many++;
	}
	return 0;
}

static void sim_release(struct sim *m, struct resil_ctx *x, struct resil_permit_priv *pm,
			int outcome)
{
	if (pm->probe_idx) {
		uint32_t g = pm->breaker_gen & 63;

		m->inflight_in_gen[g]--;
		if (outcome == RESIL_IGNORED)
			m->probes_in_gen[g]--;
	}
	x->now = 0;
	resil_breaker_release(x, &m->conf, m->st, pm, outcome);
}

/* Invariants after every schedule. */
static void sim_check(struct sim *m)
{
	uint64_t w = atomic_load(&m->st->word), head = atomic_load(&m->seg.st->event_head);
	long in[8] = {0}, out[8] = {0};
	struct resil_breaker_probe *p = probes(m->st);

	for (uint64_t i = 0; i < head; i++) {
		struct resil_event e;

		assert_int_equal(resil_event_read(&m->seg, i, &e), 0);
		assert_true(e.a < 8 && e.b < 8);
		out[e.a]++;
		in[e.b]++;
	}
	/* none lost, none doubled */
	assert_int_equal(head, w_gen(w));
	for (int s = 0; s < 8; s++)
		assert_int_equal(in[s] - out[s], (s == w_state(w)) - (s == RESIL_STATE_CLOSED));
	for (uint32_t i = 0; i < m->st->nprobe; i++)
		assert_int_equal(atomic_load(&p[i].owner), 0);
	if (w_state(w) == RESIL_STATE_HALF_OPEN) {
		uint64_t h = atomic_load(&m->st->ho);

		assert_false(ho_gen(h) == w_gen(w) && ho_done(h) >= ho_calls(&m->conf));
	}
	if (m->conf.window_kind == RESIL_WINDOW_COUNT) {
		struct resil_breaker_counts k, hs = {0};
		ra32 *slots = cslots(m->st, &m->conf);

		for (uint32_t i = 0; i < m->st->size; i++) {
			uint32_t v = atomic_load(&slots[i]);

			hs.calls += v & 1;
			hs.failures += (v >> 1) & 1;
			hs.slow += (v >> 2) & 1;
		}
		resil_breaker_unpack(atomic_load(&m->st->counters), &k);
		assert_memory_equal(&k, &hs, sizeof(k));
	}
	assert_int_equal(m->admitted_open, 0);
	assert_int_equal(m->too_many, 0);
}

typedef void (*setup_fn)(struct sim *m);
typedef void (*check_fn)(struct sim *m);

/* Explore every schedule of the scenario; returns the number of runs. */
static long explore(const char *cfg, setup_fn setup, int nthreads, const thread_fn *fns,
		    check_fn extra)
{
	struct sim *m = calloc(1, sizeof(*m));
	struct resil_seg_params sp = {
	    .slots = 4, .clients = 8, .events = 1024, .state_size = 1 << 20};
	long runs = 0;

	assert_non_null(m);
	the_sim = m;
	m->cur = -1;
	assert_int_equal(resil_seg_create(&m->seg, &sp), 0);
	sim_conf(m, cfg);
	m->nthreads = nthreads;
	for (int i = 0; i < nthreads; i++) {
		m->fn[i] = fns[i];
		m->stack[i] = malloc(STACK);
		assert_non_null(m->stack[i]);
	}
	m->plen = 0;
	do {
		sim_reset(m);
		if (setup)
			setup(m);
		assert_true(run_once(m));
		sim_check(m);
		if (extra)
			extra(m);
		runs++;
	} while (next_prefix(m));
	for (int i = 0; i < nthreads; i++)
		free(m->stack[i]);
	free(m->st);
	resil_seg_unmap(&m->seg);
	the_sim = NULL;
	free(m);
	return runs;
}

/* ---- scenarios ---- */

static void th_fail(struct sim *m, int id)
{
	struct resil_ctx x;
	struct resil_permit_priv pm;

	sim_ctx(m, &x, id);
	if (sim_acquire(m, &x, &pm) == 0)
		sim_release(m, &x, &pm, RESIL_FAILURE);
}

static void th_succeed(struct sim *m, int id)
{
	struct resil_ctx x;
	struct resil_permit_priv pm;

	sim_ctx(m, &x, id);
	if (sim_acquire(m, &x, &pm) == 0)
		sim_release(m, &x, &pm, RESIL_SUCCESS);
}

static void setup_warm(struct sim *m)
{
	struct resil_ctx x;
	struct resil_permit_priv pm;

	/* two successes in a window of 4: the next two failures reach 50% */
	sim_ctx(m, &x, 3);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(sim_acquire(m, &x, &pm), 0);
		sim_release(m, &x, &pm, RESIL_SUCCESS);
	}
}

static void check_opened_once(struct sim *m)
{
	assert_int_equal(w_state(atomic_load(&m->st->word)), RESIL_STATE_OPEN);
	assert_int_equal(atomic_load(&m->seg.st->event_head), 1);
}

static void test_open_race(void **unused)
{
	const thread_fn fns[] = {th_fail, th_fail, th_succeed};
	long runs = explore("breaker.window = count:4; breaker.min_calls = 4", setup_warm, 3, fns,
			    check_opened_once);

	printf("  open race: %ld schedules\n", runs);
}

/* OPEN, its wait just over: callers race for the probes */
static void setup_open_over(struct sim *m)
{
	struct resil_ctx x;

	sim_ctx(m, &x, 3);
	assert_int_equal(resil_breaker_force(&x, &m->conf, m->st, RESIL_STATE_CLOSED), 0);
	th_fail(m, 3);
	assert_int_equal(w_state(atomic_load(&m->st->word)), RESIL_STATE_OPEN);
	m->now += m->conf.wait_ns;
	memset(m->probes_in_gen, 0, sizeof(m->probes_in_gen));
}

static void th_probe_or_not(struct sim *m, int id)
{
	struct resil_ctx x;
	struct resil_permit_priv pm;
	uint64_t w;

	sim_ctx(m, &x, id);
	if (sim_acquire(m, &x, &pm) != 0)
		return;
	/* admitted: a probe, or a normal call of a CLOSED breaker */
	w = __atomic_load_n(BK_PLAIN(&m->st->word), __ATOMIC_SEQ_CST); /* no yield */
	if (!pm.probe_idx && w_state(w) == RESIL_STATE_OPEN && w_gen(w) == pm.breaker_gen)
		m->admitted_open++;
	sim_release(m, &x, &pm, id == 0 ? RESIL_FAILURE : RESIL_SUCCESS);
}

static void test_half_open_race(void **unused)
{
	const thread_fn fns[] = {th_probe_or_not, th_probe_or_not, th_probe_or_not};
	long runs = explore("breaker.window = count:4; breaker.min_calls = 1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 2; breaker.half_open_concurrent = 1",
			    setup_open_over, 3, fns, NULL);

	printf("  half-open race: %ld schedules\n", runs);
}

static void test_half_open_race_consecutive(void **unused)
{
	const thread_fn fns[] = {th_probe_or_not, th_probe_or_not, th_probe_or_not};
	long runs = explore("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 2",
			    setup_open_over, 3, fns, NULL);

	printf("  half-open race, consecutive: %ld schedules\n", runs);
}

/* A probe held past half_open_max_wait answers late while a caller and
 * the daemon's tick notice the timeout. */
static struct resil_permit_priv held_probe;

static void setup_held_probe(struct sim *m)
{
	struct resil_ctx x;

	setup_open_over(m);
	sim_ctx(m, &x, 0);
	assert_int_equal(sim_acquire(m, &x, &held_probe), 0);
	assert_true(held_probe.probe_idx != 0);
	m->now += m->conf.half_open_max_wait_ns;
}

static void th_late_answer(struct sim *m, int id)
{
	struct resil_ctx x;

	sim_ctx(m, &x, 0);
	sim_release(m, &x, &held_probe, RESIL_SUCCESS);
}

static void th_maintain(struct sim *m, int id)
{
	struct resil_ctx x;

	sim_ctx(m, &x, id);
	resil_breaker_maintain(&x, &m->conf, m->st);
}

static void check_timeout(struct sim *m)
{
	int s = w_state(atomic_load(&m->st->word));

	/* the answer closed it, or the timeout re-opened it (and the wait
	 * of 1 s is not over): never stuck in HALF_OPEN */
	assert_true(s == RESIL_STATE_CLOSED || s == RESIL_STATE_OPEN);
}

static void test_timeout_race(void **unused)
{
	const thread_fn fns[] = {th_late_answer, th_succeed, th_maintain};
	long runs = explore("breaker.window = consecutive:1; breaker.wait = 1s;"
			    "breaker.half_open_calls = 1; breaker.half_open_max_wait = 5s",
			    setup_held_probe, 3, fns, check_timeout);

	printf("  timeout race: %ld schedules\n", runs);
}

/* The last answer and new claims, count window (decision resets it) */
static void setup_one_answered(struct sim *m)
{
	struct resil_ctx x;
	struct resil_permit_priv pm;

	setup_open_over(m);
	sim_ctx(m, &x, 3);
	assert_int_equal(sim_acquire(m, &x, &pm), 0);
	sim_release(m, &x, &pm, RESIL_SUCCESS);
	sim_ctx(m, &x, 0);
	assert_int_equal(sim_acquire(m, &x, &held_probe), 0);
	assert_true(held_probe.probe_idx != 0);
}

static void test_decision_race(void **unused)
{
	const thread_fn fns[] = {th_late_answer, th_fail, th_succeed};
	long runs = explore("breaker.window = count:4; breaker.min_calls = 1;"
			    "breaker.wait = 1s; breaker.half_open_calls = 2",
			    setup_one_answered, 3, fns, NULL);

	printf("  decision race: %ld schedules\n", runs);
}

static void th_force_disabled(struct sim *m, int id)
{
	struct resil_ctx x;

	sim_ctx(m, &x, id);
	resil_breaker_force(&x, &m->conf, m->st, RESIL_STATE_DISABLED);
}

static void check_disabled(struct sim *m)
{
	assert_int_equal(w_state(atomic_load(&m->st->word)), RESIL_STATE_DISABLED);
}

static void test_force_race(void **unused)
{
	const thread_fn fns[] = {th_fail, th_fail, th_force_disabled};
	long runs = explore("breaker.window = count:4; breaker.min_calls = 4", setup_warm, 3, fns,
			    check_disabled);

	printf("  force race: %ld schedules\n", runs);
}

int main(void)
{
	const char *scale = getenv("RESIL_TEST_SCALE");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_race),
	    cmocka_unit_test(test_half_open_race),
	    cmocka_unit_test(test_half_open_race_consecutive),
	    cmocka_unit_test(test_timeout_race),
	    cmocka_unit_test(test_decision_race),
	    cmocka_unit_test(test_force_race),
	};

#if defined(__SANITIZE_THREAD__)
#define BK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BK_TSAN 1
#endif
#endif
#ifdef BK_TSAN
	/* TSan cannot follow coroutines switched by swapcontext */
	fprintf(stderr, "skipped: built with TSan\n");
	return 77;
#endif
	if (scale && atoi(scale) > 1)
		preemption_bound = 3;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * libcall.c - resil_call: run fn under the whole policy (acquire, deadline,
 * classify, release, retry, hedge), the interrupting watchdog, and the
 * hedge pool.
 *
 * resil_call runs fn in the calling thread, reads the clock only when
 * something needs a time, and sleeps (clock_nanosleep) only when retrying,
 * never on the success path. Each attempt reports SUCCESS, FAILURE
 * (TRANSIENT, THROTTLED, TIMEOUT, user) or IGNORED (PERMANENT, a hedge that
 * lost) to the breaker. Return: 0, the RESIL_REJECT_* of a refused attempt
 * (a retry refused by the budget: RESIL_REJECT_BUDGET), RESIL_CALL_ERR +
 * the last class when fn's errors ended the retries, or -errno (-EINVAL,
 * -ENOENT: the policy was deleted). An attempt's deadline is
 * min(now + timeout, the enclosing resil_call's deadline). The design (the
 * clock readings, the outcomes, deadlines, interruption and what it can
 * interrupt, hedging) is docs/internals/call.md.
 *
 * Interruption (timeout.interrupt = SIGNAL, opt-in): one watchdog thread
 * per process sweeps a fixed array of slots; a thread owns one slot for its
 * life (claimed once by CAS, freed by a thread-exit destructor); at the
 * deadline, and again every tick until the call ends, the watchdog sends
 * the signal to the calling thread with tgkill (a no-op handler without
 * SA_RESTART: a blocking syscall returns EINTR).
 *
 * Race protocol (seed 001, 6.3), per slot state word:
 *   IDLE -> ARMED            caller, seq_cst store, before fn
 *   ARMED -> FIRING          watchdog CAS, deadline passed; then
 *                            fired = 1, tgkill, then FIRING -> ARMED
 *                            (release store)
 *   ARMED -> IDLE            caller CAS after fn; if it finds FIRING it
 *                            waits (yield) until the watchdog stored
 *                            ARMED again, i.e. until its tgkill returned
 * So every tgkill of an arming has returned when the caller's CAS
 * ARMED -> IDLE succeeds, and none follows it; if fired is set the caller
 * drains the pending signal with sigtimedwait (zero timeout): no signal of
 * this arming is pending when resil_call returns (the proof:
 * docs/internals/call.md). The drain is a syscall on the timed-out path
 * only.
 *
 * Hedging (hedge.delay, hedge.max, idempotent = yes): each hedge is a job
 * for a small lazy pool of worker threads (at most HEDGE_THREADS) that
 * waits until start + k * delay, pays the retry budget, acquires its own
 * permit and runs fn in parallel; the first success wins. The round (its
 * lock, condition and counters) lives on the caller's stack, and
 * resil_call returns only when every job has dropped it. Without hedging
 * nothing of this is touched: no allocation, no lock, no syscall on the
 * success path.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "budget.h"
#include "stats.h"

void resil_priv_retry_counted(struct resil_ctx *x, const struct resil_rec *rec,
			      const struct resil_retry_priv *t, int64_t delay);
void resil_priv_budget_event(struct resil_ctx *x, const struct resil_rec *rec);

struct hround;

struct resil_attempt {
	struct hround *round;	     /* NULL without hedging */
	struct resil_attempt *outer; /* the attempt this thread ran before (nesting) */
	int64_t deadline_ns;	     /* policy clock, 0: none */
	int64_t retry_after_ns;
	int number;	 /* 1-based */
	int interrupted; /* the watchdog sent the signal */
};

static _Thread_local struct resil_attempt *tl_attempt;

int64_t resil_priv_attempt_deadline(void)
{
	return tl_attempt ? tl_attempt->deadline_ns : 0;
}

RESIL_API int64_t resil_attempt_deadline(const resil_attempt_t *a)
{
	return a ? a->deadline_ns : -EINVAL;
}

RESIL_API int resil_attempt_number(const resil_attempt_t *a)
{
	return a ? a->number : -EINVAL;
}

RESIL_API void resil_attempt_retry_after(resil_attempt_t *a, int64_t ns)
{
	if (a && ns > 0)
		a->retry_after_ns = ns;
}

/*
 * Sleeping between attempts. Tests on a manual clock replace it (advance
 * the clock instead of sleeping); NULL: clock_nanosleep on CLOCK_MONOTONIC.
 */
void (*resil_priv_call_sleep)(void *clock_ctx, int64_t ns);

static void sleep_ns(const struct resil_clock *c, int64_t ns)
{
	struct timespec ts;

	if (ns <= 0)
		return;
	if (resil_priv_call_sleep) {
		resil_priv_call_sleep(c->ctx, ns);
		return;
	}
	ts.tv_sec = ns / RESIL_NS_PER_S;
	ts.tv_nsec = ns % RESIL_NS_PER_S;
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* ------------------------------------------------------------- watchdog */

#define WD_SLOTS      1024
#define WD_TICK_NS    (1 * RESIL_NS_PER_MS)
#define WD_IDLE_TICKS	1000 /* nothing armed for this many ticks: tick slower */
#define WD_IDLE_TICK_NS (10 * RESIL_NS_PER_MS)

enum { WD_IDLE = 0, WD_ARMED = 1, WD_FIRING = 2 };

/*
 * One slot per thread that ever armed. owner: claimed by CAS by its
 * thread, freed at thread exit. state: see the race protocol above.
 * fired: written by the watchdog (relaxed, ordered by the release store
 * of state), read and cleared by the owner. sig, tid, deadline: written by
 * the owner before the seq_cst store of ARMED, read by the watchdog after
 * its acquire load of ARMED.
 */
struct wd_slot {
	alignas(64) ra32 owner;
	ra32 state;
	ra32 fired;
	_Atomic int32_t sig;
	_Atomic int32_t tid;
	rai64 deadline; /* CLOCK_MONOTONIC */
};

static struct wd_slot wd_slots[WD_SLOTS];
static ra32 wd_hwm;	     /* slots ever claimed: the sweep bound */
static ra32 wd_gen;	     /* bumped in a forked child: thread-local slots are stale */
static _Atomic int wd_state; /* 0 not started, 1 running */
static ra64 wd_sigs;	     /* signals whose no-op handler is installed */
static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t wd_key;
static int32_t wd_pid;

static _Thread_local int tl_slot = -1;
static _Thread_local uint32_t tl_gen;
static _Thread_local int32_t tl_tid;

static int64_t mono_now(void)
{
	return resil_clock_monotonic(NULL);
}

static void wd_noop(int sig)
{
	(void)sig;
}

static void *wd_main(void *arg)
{
	uint32_t idle = 0;

	(void)arg;
	for (;;) {
		int64_t now = mono_now();
		uint32_t n = ld_acquire(&wd_hwm);
		bool any = false;
		struct timespec ts = {0, WD_TICK_NS};

		for (uint32_t i = 0; i < n && i < WD_SLOTS; i++) {
			struct wd_slot *s = &wd_slots[i];
			uint32_t e = WD_ARMED;

			if (atomic_load_explicit(&s->state, memory_order_seq_cst) != WD_ARMED)
				continue;
			any = true;
			if (now < ld_relaxed(&s->deadline))
				continue;
			if (!cas_acq_rel(&s->state, &e, WD_FIRING))
				continue;
			/* FIRING holds the slot still (the owner can neither
			 * disarm nor re-arm it), so read the deadline again: the
			 * ARMED seen above may have been an earlier call's, the
			 * owner having disarmed and re-armed since (ABA) */
			if (now >= ld_relaxed(&s->deadline)) {
				st_relaxed(&s->fired, 1);
				syscall(SYS_tgkill, wd_pid, ld_relaxed(&s->tid),
					ld_relaxed(&s->sig));
			}
			/* release: the caller's CAS that reads ARMED after this
			 * knows the tgkill returned */
			st_release(&s->state, WD_ARMED);
		}
		/* Nothing armed for a second: tick at WD_IDLE_TICK_NS instead.
		 * Arming never wakes the watchdog (no syscall on the caller's
		 * path); the price is that an interrupt of the first call after
		 * a quiet second lands up to one idle tick late. */
		idle = any ? 0 : idle + 1;
		if (idle >= WD_IDLE_TICKS)
			ts.tv_nsec = WD_IDLE_TICK_NS;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void wd_thread_exit(void *v)
{
	int i = (int)(intptr_t)v - 1;

	if (i >= 0 && i < WD_SLOTS)
		st_release(&wd_slots[i].owner, 0);
}

static void wd_atfork_child(void)
{
	/* only the forking thread lives on: every slot is free again, the
	 * watchdog must be started anew */
	memset(wd_slots, 0, sizeof(wd_slots));
	st_relaxed(&wd_hwm, 0);
	atomic_store_explicit(&wd_state, 0, memory_order_relaxed);
	faa_relaxed(&wd_gen, 1);
	pthread_mutex_init(&wd_lock, NULL);
}

/* Slow path, once per process (and per forked child): the thread. */
static int wd_start(void)
{
	static _Atomic int once;
	pthread_attr_t at;
	pthread_t th;
	sigset_t all, old;
	int e = 0;

	pthread_mutex_lock(&wd_lock);
	if (atomic_load_explicit(&wd_state, memory_order_acquire) == 0) {
		if (!atomic_exchange_explicit(&once, 1, memory_order_relaxed)) {
			pthread_key_create(&wd_key, wd_thread_exit);
			pthread_atfork(NULL, NULL, wd_atfork_child);
		}
		wd_pid = (int32_t)getpid();
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 64 * 1024);
		/* the watchdog itself takes no signal */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		e = pthread_create(&th, &at, wd_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&at);
		if (e == 0)
			atomic_store_explicit(&wd_state, 1, memory_order_release);
	}
	pthread_mutex_unlock(&wd_lock);
	return -e;
}

static int wd_install(int sig)
{
	struct sigaction sa;
	uint64_t bit = 1ULL << (sig & 63);

	if (ld_acquire(&wd_sigs) & bit)
		return 0;
	pthread_mutex_lock(&wd_lock);
	if (!(ld_relaxed(&wd_sigs) & bit)) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = wd_noop;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = 0; /* no SA_RESTART: blocking syscalls return EINTR */
		if (sigaction(sig, &sa, NULL) < 0) {
			pthread_mutex_unlock(&wd_lock);
			return -errno;
		}
		atomic_fetch_or_explicit(&wd_sigs, bit, memory_order_release);
	}
	pthread_mutex_unlock(&wd_lock);
	return 0;
}

/* This thread's slot, claimed once. -1 when every slot is taken. */
static int wd_my_slot(void)
{
	uint32_t g = ld_relaxed(&wd_gen);

	if (RESIL_LIKELY(tl_slot >= 0 && tl_gen == g))
		return tl_slot;
	tl_slot = -1;
	tl_gen = g;
	tl_tid = (int32_t)syscall(SYS_gettid);
	for (int i = 0; i < WD_SLOTS; i++) {
		uint32_t e = 0;

		if (ld_relaxed(&wd_slots[i].owner) == 0 && cas_acq_rel(&wd_slots[i].owner, &e, 1)) {
			uint32_t h = ld_relaxed(&wd_hwm);

			/* seq_cst: in the Dekker below, the watchdog's seq_cst
			 * load of wd_hwm must see this bump when it cannot see
			 * our later ARMED */
			while (h < (uint32_t)i + 1 &&
			       !atomic_compare_exchange_strong_explicit(
				   &wd_hwm, &h, (uint32_t)i + 1, memory_order_seq_cst,
				   memory_order_relaxed))
				;
			tl_slot = i;
			pthread_setspecific(wd_key, (void *)(intptr_t)(i + 1));
			return i;
		}
	}
	return -1;
}

/* Arm this thread's slot for a CLOCK_MONOTONIC deadline. -1: not armed. */
static int wd_arm(int sig, int64_t deadline_mono)
{
	struct wd_slot *s;
	int i;

	if (RESIL_UNLIKELY(atomic_load_explicit(&wd_state, memory_order_acquire) == 0)) {
		if (wd_start() < 0)
			return -1;
	}
	if (RESIL_UNLIKELY(wd_install(sig) < 0))
		return -1;
	i = wd_my_slot();
	if (i < 0)
		return -1;
	s = &wd_slots[i];
	st_relaxed(&s->sig, sig);
	st_relaxed(&s->tid, tl_tid);
	st_relaxed(&s->deadline, deadline_mono);
	st_relaxed(&s->fired, 0);
	atomic_store_explicit(&s->state, WD_ARMED, memory_order_seq_cst);
	return i;
}

/* Armings during which the watchdog sent the signal (tests read it). */
ra64 resil_priv_wd_fired;

/* Disarm; true when the watchdog sent the signal during this arming. */
static bool wd_disarm(int i)
{
	struct wd_slot *s = &wd_slots[i];
	uint32_t e = WD_ARMED;
	sigset_t set;
	struct timespec zero = {0, 0};
	int sig;

	while (!cas_acq_rel(&s->state, &e, WD_IDLE)) {
		if (e == WD_IDLE)
			break;
		/* FIRING: the watchdog is inside its tgkill; wait for its store */
		sched_yield();
		e = WD_ARMED;
	}
	if (!ld_relaxed(&s->fired))
		return false;
	/* every signal of this arming is pending or delivered: drain */
	sig = ld_relaxed(&s->sig);
	sigemptyset(&set);
	sigaddset(&set, sig);
	while (sigtimedwait(&set, NULL, &zero) == sig)
		;
	st_relaxed(&s->fired, 0);
	faa_relaxed(&resil_priv_wd_fired, 1);
	return true;
}

/* ---------------------------------------------------------------- hedging */

#define HEDGE_THREADS 16
#define HEDGE_QUEUE   64
#define HEDGE_POLL_NS (1 * RESIL_NS_PER_MS) /* a replaced clock's reading, while waiting */

/* The pool's bound (tests read it: to make every worker busy) */
const int resil_priv_hedge_threads = HEDGE_THREADS;

struct hround {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	ra32 won;	     /* 1 once an attempt succeeded: the others are cancelled */
	int closed;	     /* the primary ended: hedges not started yet never start */
	int jobs;	     /* jobs that still hold a pointer to this round */
	int ok;		     /* a hedge succeeded */
	struct resil_clock clock; /* the policy's: start and delay are on it */
	int64_t start_ns;
	int64_t delay_ns;
	/* what a hedge needs */
	resil_policy_t *p;
	int (*fn)(void *, resil_attempt_t *);
	void *arg;
	int64_t deadline_ns;
	int number; /* the primary's number; hedge k is number + k */
	int sig;    /* interrupt signal, 0: none */
};

struct hjob {
	struct hround *round;
	int k;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct hjob q[HEDGE_QUEUE];
	uint32_t head, tail; /* under lock */
	int threads, idle;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static int outcome_of(int cls)
{
	if (cls == RESIL_ERR_NONE)
		return RESIL_SUCCESS;
	if (cls == RESIL_ERR_PERMANENT)
		return RESIL_IGNORED;
	return RESIL_FAILURE;
}

static void run_hedge(struct hround *h, int k)
{
	const struct resil_retry_conf *bc = NULL;
	struct resil_permit_priv pm;
	const struct resil_rec *rec;
	struct resil_attempt a = {0};
	struct resil_ctx x;
	void *budget;
	uint32_t cost, rgen;
	bool first = false, cur;
	int err = 0, cls, slot = -1;
	int64_t at = h->start_ns + (int64_t)k * h->delay_ns;

	pthread_mutex_lock(&h->lock);
	while (!h->closed && !ld_acquire(&h->won)) {
		/* CLOCK_MONOTONIC: until the start; a replaced clock: read again
		 * every HEDGE_POLL_NS of CLOCK_MONOTONIC */
		int64_t now = h->clock.fn ? resil_clock_now(&h->clock) : mono_now();
		int64_t wake = h->clock.fn ? mono_now() + HEDGE_POLL_NS : at;
		struct timespec until = {wake / RESIL_NS_PER_S, wake % RESIL_NS_PER_S};

		if (now >= at)
			break;
		pthread_cond_timedwait(&h->cond, &h->lock, &until);
	}
	if (h->closed || ld_acquire(&h->won)) {
		pthread_mutex_unlock(&h->lock);
		return;
	}
	pthread_mutex_unlock(&h->lock);

	rec = resil_priv_ctx(h->p, &x, &err);
	if (!rec)
		return;
	budget = resil_budget_state_for(x.seg, rec, &bc);
	if (budget && resil_budget_try_retry(budget, bc, RESIL_ERR_TRANSIENT, true,
					     resil_ctx_now(&x), &cost, &first) != 0) {
		resil_budget_count(budget, RESIL_BUDGET_CNT_REFUSED);
		resil_stats_add(&x, resil_comp_state(x.seg, rec, RESIL_C_STATS),
				RESIL_STAT_REJ_BUDGET, 1);
		if (first)
			resil_priv_budget_event(&x, rec);
		return;
	}
	memset(&pm, 0, sizeof(pm));
	pm.limit_permits = 1;
	if (resil_policy_acquire(&x, rec, &pm, NULL, 0) != RESIL_ADMIT)
		return;
	pm.flags |= RESIL_PERMIT_HELD;
	rgen = rec->gen;
	a.round = h;
	a.number = h->number + k;
	a.deadline_ns = h->deadline_ns;
	a.outer = tl_attempt;
	tl_attempt = &a;
	if (h->sig && h->deadline_ns) {
		int64_t pnow = resil_ctx_now(&x);

		slot = wd_arm(h->sig,
			      x.clock.fn ? mono_now() + (h->deadline_ns - pnow) : h->deadline_ns);
	}
	cls = h->fn(h->arg, &a);
	if (slot >= 0)
		a.interrupted = wd_disarm(slot);
	tl_attempt = a.outer;
	x.now = 0;
	/* the record reused while fn ran (the policy changed shape or went
	 * away a grace period ago, docs/internals/seg.md "Reuse"): its block is another
	 * policy's now, so nothing is written there */
	cur = resil_priv_rec_current(rec, rgen);
	if (!cur)
		budget = NULL;
	if (cls == RESIL_ERR_NONE) {
		uint32_t e = 0;

		if (cas_acq_rel(&h->won, &e, 1)) {
			pthread_mutex_lock(&h->lock);
			h->ok = 1;
			pthread_cond_broadcast(&h->cond);
			pthread_mutex_unlock(&h->lock);
		}
		if (budget)
			resil_budget_record(budget, bc, true, false, 2, cost);
	} else if (budget) {
		resil_budget_record(budget, bc, false, true, 2, 0);
	}
	if (!cur)
		return;
	resil_ctx_now(&x);
	resil_policy_release(&x, rec, &pm,
			     cls != RESIL_ERR_NONE && ld_acquire(&h->won) ? RESIL_IGNORED
									  : outcome_of(cls));
}

static void *pool_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct hjob j;

		pthread_mutex_lock(&pool.lock);
		while (pool.head == pool.tail) {
			pool.idle++;
			pthread_cond_wait(&pool.cond, &pool.lock);
			pool.idle--;
		}
		j = pool.q[pool.head++ % HEDGE_QUEUE];
		pthread_mutex_unlock(&pool.lock);
		run_hedge(j.round, j.k);
		pthread_mutex_lock(&j.round->lock);
		j.round->jobs--;
		pthread_cond_broadcast(&j.round->cond);
		pthread_mutex_unlock(&j.round->lock);
	}
	return NULL;
}

static void pool_atfork_child(void)
{
	pthread_mutex_init(&pool.lock, NULL);
	pthread_cond_init(&pool.cond, NULL);
	pool.head = pool.tail = 0;
	pool.threads = pool.idle = 0;
}

/* Hand hedge k of h to a worker; false when none can take it. */
static bool pool_post(struct hround *h, int k)
{
	static bool atfork;
	bool ok = false;

	pthread_mutex_lock(&pool.lock);
	if (!atfork) {
		pthread_atfork(NULL, NULL, pool_atfork_child);
		atfork = true;
	}
	if (pool.tail - pool.head < HEDGE_QUEUE) {
		/* a worker for every queued job, up to the cap */
		if ((int)(pool.tail - pool.head) >= pool.idle && pool.threads < HEDGE_THREADS) {
			pthread_attr_t at;
			pthread_t th;
			sigset_t all, old;

			pthread_attr_init(&at);
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			if (pthread_create(&th, &at, pool_main, NULL) == 0)
				pool.threads++;
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			pthread_attr_destroy(&at);
		}
		if (pool.threads > 0) {
			pool.q[pool.tail++ % HEDGE_QUEUE] = (struct hjob){h, k};
			pthread_cond_signal(&pool.cond);
			ok = true;
		}
	}
	pthread_mutex_unlock(&pool.lock);
	return ok;
}

/*
 * The round is over: take its jobs no worker has taken yet out of the
 * queue (the jobs behind close ranks, in order), so the caller does not
 * wait for a worker busy with another call, and their slots are free at
 * once: a job left in its slot until a worker comes by would let a caller
 * that makes calls faster than the workers are scheduled fill the queue
 * with dead jobs, and its next hedges would be dropped (queue full).
 * Lock order: round, then pool (workers never hold both).
 */
static void pool_withdraw(struct hround *h)
{
	uint32_t to;

	pthread_mutex_lock(&pool.lock);
	to = pool.head;
	for (uint32_t i = pool.head; i != pool.tail; i++) {
		struct hjob j = pool.q[i % HEDGE_QUEUE];

		if (j.round == h)
			h->jobs--;
		else
			pool.q[to++ % HEDGE_QUEUE] = j;
	}
	pool.tail = to;
	pthread_mutex_unlock(&pool.lock);
}

/* ---------------------------------------------------------------- call */

RESIL_API bool resil_attempt_cancelled(const resil_attempt_t *a)
{
	return a && a->round && ld_acquire(&a->round->won);
}

static int64_t hedge_delay(const struct resil_ctx *x, const struct resil_rec *rec)
{
	const struct resil_retry_conf *c = &rec->conf.retry;

	if (!c->idempotent || c->hedge_delay_ns == 0)
		return 0;
	if (c->hedge_delay_ns > 0)
		return c->hedge_delay_ns;
	return resil_stats_p95_ns(x->seg, rec); /* -1: no histogram or no samples yet */
}

RESIL_API int resil_call(resil_policy_t *p, int (*fn)(void *arg, resil_attempt_t *a), void *arg)
{
	struct resil_retry_priv rt = {0};
	const struct resil_retry_conf *bc = NULL;
	const struct resil_rec *rec;
	uint32_t rgen;
	struct resil_ctx x;
	int64_t now, outer, end, d;
	int err = 0, cls = RESIL_ERR_NONE;
	void *budget;

	if (RESIL_UNLIKELY(!p || !fn))
		return -EINVAL;
	rec = resil_priv_ctx(p, &x, &err);
	if (RESIL_UNLIKELY(!rec))
		return err ? err : -ENOENT;
	outer = tl_attempt ? tl_attempt->deadline_ns : 0;
	budget = resil_budget_state_for(x.seg, rec, &bc);
	/* the clock only when something needs a time: a deadline, the ratio
	 * budget's buckets, a hedge; else the components read it if they need
	 * it (x.now caches the one reading either way) */
	now = 0;
	if (rec->conf.retry.timeout_ns > 0 || outer || rec->conf.retry.hedge_delay_ns ||
	    (budget && bc->budget_kind == RESIL_BUDGET_RATIO))
		now = resil_ctx_now(&x);
	resil_retry_engine_begin(&rt, now, outer);
	rt.policy = p;
	if (budget)
		resil_budget_begin(budget, bc, now);

	for (;;) {
		const struct resil_retry_conf *c = &rec->conf.retry;
		struct resil_permit_priv pm;
		struct resil_attempt a;
		int64_t hd;
		int v, slot = -1;

		memset(&pm, 0, sizeof(pm));
		pm.limit_permits = 1;
		v = resil_policy_acquire(&x, rec, &pm, NULL, 0);
		if (v != RESIL_ADMIT) {
			if (rt.attempts > 0) {
				rt.reason = RESIL_RSTOP_REJECTED;
				rt.verdict = (uint32_t)v;
				resil_stats_add(&x, resil_comp_state(x.seg, rec, RESIL_C_STATS),
						RESIL_STAT_GIVEUPS, 1);
			}
			return v;
		}
		pm.flags |= RESIL_PERMIT_HELD;
		rgen = rec->gen;
		if (c->timeout_ns > 0 || c->hedge_delay_ns)
			now = resil_ctx_now(&x);

		a.round = NULL;
		a.retry_after_ns = 0;
		a.interrupted = 0;
		a.number = (int)rt.attempts + 1;
		a.deadline_ns = c->timeout_ns > 0 ? now + c->timeout_ns : 0;
		if (outer && (a.deadline_ns == 0 || outer < a.deadline_ns))
			a.deadline_ns = outer;
		a.outer = tl_attempt;

		hd = RESIL_UNLIKELY(c->hedge_delay_ns != 0) ? hedge_delay(&x, rec) : 0;
		if (RESIL_UNLIKELY(c->interrupt_signal && a.deadline_ns))
			slot =
			    wd_arm(c->interrupt_signal,
				   x.clock.fn ? mono_now() + (a.deadline_ns - now) : a.deadline_ns);

		if (RESIL_LIKELY(hd <= 0)) {
			tl_attempt = &a;
			cls = fn(arg, &a);
			tl_attempt = a.outer;
			if (slot >= 0)
				a.interrupted = wd_disarm(slot);
		} else {
			struct hround h;
			pthread_condattr_t ca;

			memset(&h, 0, sizeof(h));
			pthread_mutex_init(&h.lock, NULL);
			pthread_condattr_init(&ca);
			pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
			pthread_cond_init(&h.cond, &ca);
			pthread_condattr_destroy(&ca);
			h.clock = x.clock;
			h.start_ns = now;
			h.delay_ns = hd;
			h.p = p;
			h.fn = fn;
			h.arg = arg;
			h.deadline_ns = a.deadline_ns;
			h.number = a.number;
			h.sig = c->interrupt_signal;
			a.round = &h;
			for (uint32_t k = 1; k <= c->hedge_max; k++) {
				pthread_mutex_lock(&h.lock);
				h.jobs++;
				pthread_mutex_unlock(&h.lock);
				if (!pool_post(&h, (int)k)) {
					pthread_mutex_lock(&h.lock);
					h.jobs--;
					pthread_mutex_unlock(&h.lock);
					break;
				}
			}
			tl_attempt = &a;
			cls = fn(arg, &a);
			tl_attempt = a.outer;
			if (slot >= 0)
				a.interrupted = wd_disarm(slot);
			pthread_mutex_lock(&h.lock);
			if (cls == RESIL_ERR_NONE) {
				uint32_t e = 0;

				cas_acq_rel(&h.won, &e, 1);
			}
			h.closed = 1;
			pthread_cond_broadcast(&h.cond);
			pool_withdraw(&h);
			while (h.jobs > 0)
				pthread_cond_wait(&h.cond, &h.lock);
			pthread_mutex_unlock(&h.lock);
			pthread_cond_destroy(&h.cond);
			pthread_mutex_destroy(&h.lock);
			if (!resil_priv_rec_current(rec, rgen))
				return cls == RESIL_ERR_NONE || h.ok ? 0 : RESIL_CALL_ERR + cls;
			if (cls != RESIL_ERR_NONE && h.ok) {
				/* a hedge won: the primary lost and reports nothing */
				x.now = 0;
				resil_ctx_now(&x);
				resil_policy_release(&x, rec, &pm, RESIL_IGNORED);
				return 0;
			}
		}
		if (a.interrupted && cls != RESIL_ERR_NONE)
			cls = RESIL_ERR_TIMEOUT;
		if (cls < 0)
			cls = RESIL_ERR_TRANSIENT;
		/* the record reused while fn ran (docs/internals/seg.md "Reuse"): its block
		 * is another policy's; the attempt's result stands, unrecorded */
		if (RESIL_UNLIKELY(!resil_priv_rec_current(rec, rgen)))
			return cls == RESIL_ERR_NONE ? 0 : RESIL_CALL_ERR + cls;

		/* after the attempt: a reading if the release needs a duration,
		 * or the retry decision a time (a failure) */
		x.now = 0;
		end = cls != RESIL_ERR_NONE ? resil_ctx_now(&x) : 0;
		resil_policy_release(&x, rec, &pm, outcome_of(cls));
		d = resil_retry_engine_next(&rt, c, budget, bc, (uint32_t)cls, a.retry_after_ns,
					    end, &x.random);
		if (RESIL_LIKELY(d < 0 && cls == RESIL_ERR_NONE))
			return 0;
		resil_priv_retry_counted(&x, rec, &rt, d);
		if (d < 0)
			return rt.reason == RESIL_RSTOP_BUDGET ? RESIL_REJECT_BUDGET
							       : RESIL_CALL_ERR + cls;
		sleep_ns(&x.clock, d);
		/* the next attempt: current record, one clock reading */
		rec = resil_priv_ctx(p, &x, &err);
		if (!rec)
			return err ? err : -ENOENT;
		now = resil_ctx_now(&x);
		budget = resil_budget_state_for(x.seg, rec, &bc);
		if (outer && now >= outer)
			return RESIL_CALL_ERR + cls;
	}
}

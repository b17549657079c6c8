/* SPDX-License-Identifier: MIT */
/*
 * hot.c - resil_bench's resil hot paths: every component's acquire and
 * release, keyed limiters, resil_call and retries, on the fleet's
 * segments and per process.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */
/* resil hot paths */

static void loop_acq_rel(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++) {
		resil_permit_t pm;

		if (resil_acquire(x->p, &pm) == RESIL_ADMIT) {
			a++;
			resil_release(x->p, &pm, RESIL_SUCCESS);
		}
	}
	admits += a;
}

static void loop_keyed(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0, pos = x->pos;

	for (uint64_t i = 0; i < n; i++, pos++) {
		uint32_t k = key_of(x->seq[pos & (SEQ_LEN - 1)]);
		resil_permit_t pm;

		if (resil_acquire_key(x->p, &k, sizeof(k), &pm) == RESIL_ADMIT) {
			a++;
			resil_release(x->p, &pm, RESIL_SUCCESS);
		}
	}
	x->pos = pos;
	admits += a;
}

static int call_ok(void *arg, resil_attempt_t *a)
{
	return dep_ok((uint64_t)(uintptr_t)arg);
}

static void loop_call(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++)
		a += resil_call(x->p, call_ok, NULL) == 0;
	admits += a;
}

/* One retry decision against the budget: begin, then "may I retry?" */
static void loop_retry(void *ctx, uint64_t n)
{
	struct pctx *x = ctx;
	uint64_t a = 0;

	for (uint64_t i = 0; i < n; i++) {
		resil_retry_t rt;

		resil_retry_begin(x->p, &rt, 0);
		a += resil_retry_next(&rt, RESIL_ERR_TRANSIENT, 0) >= 0;
	}
	admits += a;
}

resil_policy_t *mkpol(resil_t *r, const char *base, const char *cfg)
{
	resil_policy_t *p;
	char name[64];
	int ret;

	snprintf(name, sizeof(name), "bench-%s-%d", base, (int)getpid());
	ret = resil_define(r, name, cfg);
	if (ret == 0)
		ret = resil_policy(r, name, &p);
	if (ret < 0) {
		fprintf(stderr, "resil_bench: define %s \"%s\": %s\n", name, cfg, strerror(-ret));
		return NULL;
	}
	if (ndefined < (int)ARRAY_LEN(defined)) {
		defined[ndefined].r = r;
		snprintf(defined[ndefined].name, sizeof(defined[ndefined].name), "%s", name);
		ndefined++;
	}
	return p;
}

void drop_defined(resil_t *r)
{
	for (int i = 0; i < ndefined; i++)
		if (defined[i].r == r)
			resil_delete(r, defined[i].name);
}

uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Distinct IPv4-like keys and index sequences: uniform, or Zipf (s = 0.99,
 * as YCSB) over nkeys, from a fixed seed. */

static uint32_t *make_seq(uint32_t nkeys, bool zipf)
{
	uint32_t *seq = malloc(sizeof(*seq) * SEQ_LEN);
	double *cdf = NULL, sum = 0;
	uint64_t s = 7;

	if (!seq)
		return NULL;
	if (!zipf) {
		for (uint32_t i = 0; i < SEQ_LEN; i++)
			seq[i] = (uint32_t)(splitmix(&s) % nkeys);
		return seq;
	}
	cdf = malloc(sizeof(*cdf) * nkeys);
	if (!cdf) {
		free(seq);
		return NULL;
	}
	for (uint32_t i = 0; i < nkeys; i++) {
		sum += 1.0 / pow((double)(i + 1), 0.99);
		cdf[i] = sum;
	}
	for (uint32_t i = 0; i < SEQ_LEN; i++) {
		double u = (double)(splitmix(&s) >> 11) / (double)(1ULL << 53) * sum;
		uint32_t lo = 0, hi = nkeys - 1;

		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* scatter ranks over the key array so hot keys are not neighbours */
		seq[i] = (uint32_t)(((uint64_t)lo * 2654435761u) % nkeys);
	}
	free(cdf);
	return seq;
}

/*
 * A keyed case: a table sized for nkeys, filled, then the uniform and the
 * Zipf sequence. With g (the tables of 1k keys) the two are queued into
 * the batch under way, their contexts kept in g until release_simple();
 * without (100k keys and more) they run in a batch of their own with the
 * table's memory floor, whose cost they are read against.
 */
static void keyed_case(resil_t *r, const char *group, uint32_t nkeys, const char *label,
		       struct simple_group *g)
{
	struct mem_floor own_floor = {0}, *floor = &own_floor;
	char cfg[160], base[32], own_names[2][KEYED_NAME_MAX];
	char(*names)[KEYED_NAME_MAX] = own_names;
	struct pctx own[2] = {{0}}, *x = own;
	bool any = false;

	if (g) { /* the batch keeps names, contexts and floor until its flush */
		if (g->nkeyed + 2 > KEYED_QUEUED)
			return;
		x = &g->keyed[g->nkeyed];
		names = &g->keyed_name[g->nkeyed];
		floor = &g->floor;
	}
	for (int z = 0; z < 2; z++) {
		snprintf(names[z], sizeof(names[z]), "limit.keyed_%s.%s", label,
			 z ? "zipf" : "random");
		any |= selected(group, names[z]);
	}
	if (!any)
		return;
	if (g)
		g->nkeyed += 2;
	snprintf(base, sizeof(base), "keyed%s", label);
	/* a table sized for the keys, as one would configure it ("_global":
	 * policy.scope = global, the keys' admissions counted for the
	 * exchange; embedded, no daemon: the hot path alone) */
	snprintf(cfg, sizeof(cfg),
		 "%slimit.rate = 1000000000/s; limit.burst = 1000000; limit.keys = %u",
		 strstr(label, "_global") ? "policy.scope = global; " : "", nkeys);
	x[0].p = mkpol(r, base, cfg);
	if (!x[0].p)
		return;
	/* every key once, so the measured loop finds them in the table */
	for (uint32_t i = 0; i < nkeys; i++) {
		uint32_t k = key_of(i);
		resil_permit_t pm;

		if (resil_acquire_key(x[0].p, &k, sizeof(k), &pm) == RESIL_ADMIT)
			resil_release(x[0].p, &pm, RESIL_SUCCESS);
	}
	/* the table's floor, the uniform and the Zipf case, interleaved (in
	 * the batch under way with g: a group's 1k tables share one floor,
	 * which says whether the table stayed in the L1 while they ran) */
	if (!g)
		batch_begin();
	if (!floor->a) {
		floor->keys = nkeys;
		mem_floor_init(floor); /* unmapped (an error): only the floor is lost */
		measure_mem_floor(floor);
	}
	for (int z = 0; z < 2; z++) {
		x[z].p = x[0].p;
		x[z].seq = make_seq(nkeys, z);
		if (x[z].seq)
			measure(group, names[z], loop_keyed, &x[z]);
	}
	if (g)
		return;
	batch_flush();
	mem_floor_fini(floor);
	for (int z = 0; z < 2; z++)
		free((void *)x[z].seq);
}

static void keyed_reject_case(resil_t *r, const char *group, struct simple_group *g)
{
	struct pctx *x;
	uint32_t nkeys = 1000;

	if (!selected(group, "limit.keyed_reject") || g->nkeyed + 1 > KEYED_QUEUED)
		return;
	x = &g->keyed[g->nkeyed++];
	x->seq = make_seq(nkeys, false);
	x->p = mkpol(r, "keyedrej", "limit.rate = 1/h; limit.keys = 2048");
	if (!x->p || !x->seq)
		return;
	for (uint32_t i = 0; i < nkeys; i++) { /* spend each key's one permit */
		uint32_t k = key_of(i);
		resil_permit_t pm;

		if (resil_acquire_key(x->p, &k, sizeof(k), &pm) == RESIL_ADMIT)
			resil_release(x->p, &pm, RESIL_SUCCESS);
	}
	measure(group, "limit.keyed_reject", loop_keyed, x);
}

/* PREP_HOLD_ALL: the bench process takes every permit it can and holds
 * them during the loop, so each acquire of the loop is a rejection. */
/* PREP_LEASE: a global bulkhead leased all of its slots until far in the
 * future, with the default fallback (--cluster-fallback share) of three
 * hosts, as its daemon would (no cluster here): the hot path under a live
 * lease. */
enum { PREP_NONE, PREP_FAIL_ONCE, PREP_ADMIT_ONCE, PREP_HOLD_ALL, PREP_LEASE };

static const struct simple_case simple_cases[N_SIMPLE_CASES] = {
    {"empty.acq_rel", "empty", "policy.scope = fleet", PREP_NONE, loop_acq_rel},
    {"breaker.count100.acq_rel", "bcount", "breaker.window = count:100", PREP_NONE, loop_acq_rel},
    {"breaker.consecutive.acq_rel", "bcons", "breaker.window = consecutive:5", PREP_NONE,
     loop_acq_rel},
    {"breaker.time.acq_rel", "btime", "breaker.window = time:10s", PREP_NONE, loop_acq_rel},
    {"breaker.open_reject", "bopen", "breaker.window = consecutive:1; breaker.wait = 1h",
     PREP_FAIL_ONCE, loop_acq_rel},
    {"limit.admit", "ladmit", "limit.rate = 1000000000/s; limit.burst = 1000000", PREP_NONE,
     loop_acq_rel},
    {"limit.admit_global", "lglobal",
     "policy.scope = global; limit.rate = 1000000000/s; limit.burst = 1000000", PREP_NONE,
     loop_acq_rel},
    {"limit.admit_slow_rate", "lslow", "limit.rate = 10/s; limit.burst = 100000000", PREP_NONE,
     loop_acq_rel},
    {"limit.reject", "lrej", "limit.rate = 1/h", PREP_ADMIT_ONCE, loop_acq_rel},
    {"bulkhead.acq_rel", "bulk", "bulkhead.max = 25", PREP_NONE, loop_acq_rel},
    {"bulkhead.reject", "bulkrej", "bulkhead.max = 25", PREP_HOLD_ALL, loop_acq_rel},
    {"bulkhead1000.acq_rel", "bulk1k", "bulkhead.max = 1000", PREP_NONE, loop_acq_rel},
    {"bulkhead1000.reject", "bulkrej1k", "bulkhead.max = 1000", PREP_HOLD_ALL, loop_acq_rel},
    /* packed slots (above 1024 permits) */
    {"bulkhead2000.acq_rel", "bulk2k", "bulkhead.max = 2000", PREP_NONE, loop_acq_rel},
    {"bulkhead2000.reject", "bulkrej2k", "bulkhead.max = 2000", PREP_HOLD_ALL, loop_acq_rel},
    {"bulkhead_wait.acq_rel", "bulkw", "bulkhead.max = 25; bulkhead.wait = 100ms", PREP_NONE,
     loop_acq_rel},
    {"bulkhead.acq_rel_global", "bglobal", "policy.scope = global; bulkhead.max = 25", PREP_LEASE,
     loop_acq_rel},
    {"adaptive.acq_rel", "adapt", "adaptive.algorithm = vegas", PREP_NONE, loop_acq_rel},
    {"shed.acq_rel", "shed", "shed.k = 2", PREP_NONE, loop_acq_rel},
    {"budget.acq_rel", "budget", "retry.budget = grpc:100:0.1", PREP_NONE, loop_acq_rel},
    {"budget.acq_rel_global", "bgbudget", "policy.scope = global; retry.budget = grpc:100:0.1",
     PREP_NONE, loop_acq_rel},
    {"retry.next", "retry", "retry.max_attempts = 3", PREP_NONE, loop_retry},
    {"budget.retry_next", "rbudget", "retry.max_attempts = 3; retry.budget = grpc:100:0.1",
     PREP_NONE, loop_retry},
    {"breaker.count100.call", "call", "breaker.window = count:100", PREP_NONE, loop_call},
    {"stack.acq_rel", "stack",
     "breaker.window = count:100; limit.rate = 1000000000/s; limit.burst = 1000000;"
     " bulkhead.max = 25",
     PREP_NONE, loop_acq_rel},
};

void run_simple(resil_t *r, const char *group, bool keyed, struct simple_group *g)
{
	fprintf(stderr, "%s\n", group);
	memset(g, 0, sizeof(*g));
	for (size_t i = 0; i < ARRAY_LEN(simple_cases); i++) {
		const struct simple_case *c = &simple_cases[i];
		struct pctx *x = &g->x[i];
		resil_permit_t pm;

		if (!selected(group, c->name))
			continue;
		x->p = mkpol(r, c->base, c->cfg);
		if (!x->p)
			continue;
		if (c->prep == PREP_LEASE) {
			/* one decision binds the policy (its state block) */
			if (resil_acquire(x->p, &pm) == RESIL_ADMIT)
				resil_release(x->p, &pm, RESIL_SUCCESS);
			void *st = atomic_load(&x->p->b)->bh_st;

			if (st)
				resil_bulkhead_lease_set(st, INT64_MAX, 25, 25 / 3);
			if (!st || resil_acquire(x->p, &pm) != RESIL_ADMIT) {
				fprintf(stderr, "%s: no lease set\n", c->name);
				continue;
			}
			resil_release(x->p, &pm, RESIL_SUCCESS);
		} else if (c->prep == PREP_HOLD_ALL) {
			while (g->nheld < HOLD_MAX &&
			       resil_acquire(x->p, &g->held[g->nheld]) == RESIL_ADMIT)
				g->held_p[g->nheld++] = x->p;
		} else if (c->prep != PREP_NONE && c->prep != PREP_HOLD_ALL &&
			   resil_acquire(x->p, &pm) == RESIL_ADMIT) {
			resil_release(x->p, &pm,
				      c->prep == PREP_FAIL_ONCE ? RESIL_FAILURE : RESIL_SUCCESS);
		}
		measure(group, c->name, c->fn, x);
	}
	/* The keyed cases on 1k keys join the batch: "keyed GCRA at 1k keys
	 * at most 2x unkeyed" compares limit.keyed_1k with limit.admit, so the
	 * two are measured in the same rounds. This host has episodes of
	 * seconds in which a 32 KB working set (a 1k-key table is 500 lines)
	 * no longer stays in its L1 (bench/untrusted.md); a batch of their
	 * own, a second long, read one as the table's cost. */
	keyed_reject_case(r, group, g);
	if (!keyed)
		return;
	keyed_case(r, group, 1000, "1k", g);
	keyed_case(r, group, 1000, "1k_global", g);
}

void release_simple(struct simple_group *g)
{
	while (g->nheld > 0) {
		g->nheld--;
		resil_release(g->held_p[g->nheld], &g->held[g->nheld], RESIL_IGNORED);
	}
	while (g->nkeyed > 0)
		free((void *)g->keyed[--g->nkeyed].seq);
	mem_floor_fini(&g->floor);
}

void run_keyed(resil_t *r, const char *group)
{
	keyed_case(r, group, 100000, "100k", NULL);
	if (!opt.smoke)
		keyed_case(r, group, 1000000, "1m", NULL);
}

_Static_assert(ARRAY_LEN(simple_cases) == N_SIMPLE_CASES, "N_SIMPLE_CASES");

/* SPDX-License-Identifier: MIT */
/*
 * floors.c - resil_bench's floors: what a bare call, an atomic, a clock
 * read and a syscall cost, and the keyed table's memory floor.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */
/* Floors */

static _Atomic uint64_t *floor_page; /* one MAP_SHARED memfd page */

/* The bare call: the dependency itself, out of line so it stays a call. */
__attribute__((noinline)) int dep_ok(uint64_t i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return 0;
}

static void loop_bare(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += dep_ok(i);
	sink += s;
}

static void loop_faa(void *ctx, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		atomic_fetch_add_explicit(&floor_page[0], 1, memory_order_relaxed);
}

static void loop_load(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += atomic_load_explicit(&floor_page[0], memory_order_acquire);
	sink += s;
}

static void loop_cas(void *ctx, uint64_t n)
{
	uint64_t e = atomic_load_explicit(&floor_page[16], memory_order_relaxed);

	for (uint64_t i = 0; i < n; i++) {
		/* succeeds every time (one writer); e holds the current value */
		if (atomic_compare_exchange_strong_explicit(
			&floor_page[16], &e, e + 1, memory_order_acq_rel, memory_order_acquire))
			e++;
	}
}

/* A fail-fast bulkhead's floor: its claim's CAS (0 -> id) and its
 * release's (id -> 0) on one line, and nothing else. */
static void loop_cas_pair(void *ctx, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t e = 0;

		atomic_compare_exchange_strong_explicit(&floor_page[56], &e, 7,
							memory_order_acquire, memory_order_relaxed);
		e = 7;
		atomic_compare_exchange_strong_explicit(&floor_page[56], &e, 0,
							memory_order_release, memory_order_relaxed);
	}
}

static void loop_clock(void *ctx, uint64_t n)
{
	clockid_t id = (clockid_t)(intptr_t)ctx;
	struct timespec ts;
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(id, &ts);
		s += (uint64_t)ts.tv_nsec;
	}
	sink += s;
}

/* GCRA's own floor: one precise clock read and one successful CAS. */
static void loop_clock_cas(void *ctx, uint64_t n)
{
	clockid_t id = (clockid_t)(intptr_t)ctx;
	uint64_t e = atomic_load_explicit(&floor_page[32], memory_order_relaxed);
	struct timespec ts;

	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(id, &ts);
		if (atomic_compare_exchange_strong_explicit(
			&floor_page[32], &e, e + (uint64_t)ts.tv_nsec, memory_order_acq_rel,
			memory_order_acquire))
			e += (uint64_t)ts.tv_nsec;
	}
}

/* The decision clock (shm/clock.c and common.h, linked from libresil.a):
 * CLOCK_MONOTONIC extrapolated from the TSC where the host allows it. */

static void loop_clock_fast(void *ctx, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += (uint64_t)resil_clock_fast();
	sink += s;
}

/* The keyed table's hash (SipHash-2-4, shm/common.c) of a key of the
 * kind users limit by: each hash's seed is the previous one's output, so
 * this is the latency a decision waits for before its bucket's line. */
static void loop_hash(void *ctx, uint64_t n)
{
	const char *key = ctx;
	size_t len = strlen(key);
	uint64_t h = 0;

	for (uint64_t i = 0; i < n; i++)
		h = resil_hash64(key, len, h, 0x0f0e0d0c0b0a0908ULL);
	sink += h;
}

/* GCRA's floor on the decision clock: one fast clock read and one CAS. */
static void loop_fast_cas(void *ctx, uint64_t n)
{
	uint64_t e = atomic_load_explicit(&floor_page[48], memory_order_relaxed);

	for (uint64_t i = 0; i < n; i++) {
		uint64_t t = (uint64_t)resil_clock_fast();

		if (atomic_compare_exchange_strong_explicit(
			&floor_page[48], &e, e + t, memory_order_acq_rel, memory_order_acquire))
			e += t;
	}
}

static void loop_syscall(void *ctx, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		sink += (uint64_t)syscall(SYS_getppid);
}

static void loop_mem_random(void *ctx, uint64_t n)
{
	struct mem_floor *m = ctx;
	uint64_t idx = m->idx, s = m->s;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = atomic_load_explicit(&m->a[idx], memory_order_relaxed);

		/* multiply-shift: the top 32 bits of the mix onto [0, words) */
		idx = (((v ^ splitmix(&s)) >> 32) * m->words) >> 32;
	}
	m->idx = idx;
	m->s = s;
}

int mem_floor_init(struct mem_floor *m)
{
	struct resil_limit_conf c = {.algorithm = RESIL_LIMIT_GCRA, .keys = m->keys};
	long page = sysconf(_SC_PAGESIZE);
	uint64_t s = 11;
	int fd;

	m->bytes = resil_limit_state_size(&c) - sizeof(struct resil_limit_state);
	m->words = m->bytes / sizeof(uint64_t);
	m->map_len = (size_t)((m->bytes + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page);
	snprintf(m->name, sizeof(m->name), "mem_random_%.3gmb", (double)m->bytes / 1e6);
	if (!selected("floor", m->name) || m->words < 2 || m->words >= (1ULL << 32))
		return 0;
	fd = memfd_create("resil-bench-table", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)m->map_len) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		fprintf(stderr, "resil_bench: memfd %zu bytes: %s\n", m->map_len, strerror(e));
		return -e;
	}
	m->a = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m->a == MAP_FAILED) {
		int e = errno;

		m->a = NULL;
		fprintf(stderr, "resil_bench: mmap %zu bytes: %s\n", m->map_len, strerror(e));
		return -e;
	}
	/* every line written: the walk finds it mapped, and its values random */
	for (uint64_t i = 0; i < m->words; i++)
		atomic_store_explicit(&m->a[i], splitmix(&s), memory_order_relaxed);
	m->idx = 0;
	m->s = 13;
	return 0;
}

int floors_init(void)
{
	int fd = memfd_create("resil-bench-floor", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, 4096) < 0) {
		fprintf(stderr, "resil_bench: memfd: %s\n", strerror(errno));
		return -errno;
	}
	floor_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (floor_page == MAP_FAILED) {
		fprintf(stderr, "resil_bench: mmap: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

void mem_floor_fini(struct mem_floor *m)
{
	if (m->a)
		munmap((void *)m->a, m->map_len);
	m->a = NULL;
}

void run_floors(void)
{
	fprintf(stderr, "floors\n");
	measure("floor", "bare_call", loop_bare, NULL);
	measure("floor", "fetch_add", loop_faa, NULL);
	measure("floor", "load_acquire", loop_load, NULL);
	measure("floor", "cas", loop_cas, NULL);
	measure("floor", "cas_pair", loop_cas_pair, NULL);
	measure("floor", "clock_monotonic", loop_clock, (void *)(intptr_t)CLOCK_MONOTONIC);
	measure("floor", "clock_fast", loop_clock_fast, NULL);
	measure("floor", "clock_coarse", loop_clock, (void *)(intptr_t)CLOCK_MONOTONIC_COARSE);
	measure("floor", "clock_cas", loop_clock_cas, (void *)(intptr_t)CLOCK_MONOTONIC);
	measure("floor", "fast_cas", loop_fast_cas, NULL);
	measure("floor", "coarse_cas", loop_clock_cas, (void *)(intptr_t)CLOCK_MONOTONIC_COARSE);
	measure("floor", "hash_ip", loop_hash, (void *)"192.168.100.200");
	measure("floor", "hash_api_key", loop_hash, (void *)"key-3f9a8b7c6d5e4f3a2b1c0d9e8f7a");
	if (!opt.callgrind)
		measure("floor", "syscall_getppid", loop_syscall, NULL);
}

/* A keyed case's memory floor, measured in the case's own interleaved
 * runs (memory latency moves with the neighbours' load more than anything
 * else here). */
void measure_mem_floor(struct mem_floor *m)
{
	char note[96];

	if (!m->a)
		return;
	/* which table it stands for, for the report */
	snprintf(note, sizeof(note), "the table of limit.keyed_* with %u keys (limit.keys)",
		 m->keys);
	emit("floor", m->name, "keys", m->keys, m->keys, m->keys, "keys", note);
	emit("floor", m->name, "bytes", (double)m->bytes, (double)m->bytes, (double)m->bytes, "B",
	     note);
	measure("floor", m->name, loop_mem_random, m);
}

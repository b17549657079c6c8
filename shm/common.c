/* SPDX-License-Identifier: MIT */
/*
 * common.c - clocks, the per-thread generator, SipHash.
 *
 * The clock is CLOCK_MONOTONIC for every process on the host, so a time
 * written into the segment by one process compares with another's. The
 * coarse variant (CLOCK_MONOTONIC_COARSE) shares that time base at a lower
 * resolution; decisions that can afford it use it (limit.c says when).
 * Decisions read the precise one through resil_clock_fast() (clock.c: the
 * same time base extrapolated from the TSC, within a stated error);
 * resil_clock_monotonic() here is the plain clock_gettime, for deadlines
 * and sleeps the kernel measures.
 *
 * The per-thread generator is splitmix64, seeded from getrandom() the
 * first time a thread draws, and reseeded in a forked child (libresil's
 * atfork handler bumps resil_random_epoch): children that kept the
 * parent's sequence would jitter in lockstep.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int64_t resil_clock_monotonic(void *ctx)
{
	struct timespec ts;

	(void)ctx;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

int64_t resil_clock_coarse(void *ctx)
{
	struct timespec ts;

	(void)ctx;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

int64_t resil_clock_coarse_resolution_ns(void)
{
	static _Atomic int64_t res;
	int64_t r = ld_relaxed(&res);
	struct timespec ts;

	if (r)
		return r;
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) < 0)
		r = 10 * RESIL_NS_PER_MS;
	else
		r = (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
	if (r <= 0)
		r = 1;
	st_relaxed(&res, r);
	return r;
}

/* Bumped in a forked child; a thread whose seed epoch differs reseeds. */
ra32 resil_random_epoch;

static _Thread_local uint64_t rnd_state;
static _Thread_local uint32_t rnd_epoch;
static _Thread_local bool rnd_seeded;

uint64_t resil_random_thread(void)
{
	uint32_t e = ld_relaxed(&resil_random_epoch);

	if (RESIL_UNLIKELY(!rnd_seeded || rnd_epoch != e)) {
		uint64_t seed = 0;

		if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
			seed = (uint64_t)resil_clock_monotonic(NULL) ^ (uint64_t)(uintptr_t)&seed;
		rnd_state = seed;
		rnd_epoch = e;
		rnd_seeded = true;
	}
	return resil_splitmix64(&rnd_state);
}

/*
 * SipHash-1-3, 64-bit output: the rounds CPython's and Rust's hash tables
 * use. The key is a secret of the segment pair no client sees the hashes
 * of, so flooding one bucket needs the key, which fewer rounds do not give.
 */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = ROTL(v1, 13);                                                                 \
		v1 ^= v0;                                                                          \
		v0 = ROTL(v0, 32);                                                                 \
		v2 += v3;                                                                          \
		v3 = ROTL(v3, 16);                                                                 \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = ROTL(v3, 21);                                                                 \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = ROTL(v1, 17);                                                                 \
		v1 ^= v2;                                                                          \
		v2 = ROTL(v2, 32);                                                                 \
	} while (0)

uint64_t resil_hash64(const void *data, size_t len, uint64_t k0, uint64_t k1)
{
	const uint8_t *in = data;
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
	uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
	uint64_t v3 = 0x7465646279746573ULL ^ k1;
	uint64_t b = (uint64_t)len << 56;
	size_t left = len & 7;
	const uint8_t *end = in + len - left;

	for (; in != end; in += 8) {
		uint64_t m;

		/* one load, little-endian whatever the host, not a loop over
		 * the bytes */
		memcpy(&m, in, sizeof(m));
		m = le64toh(m);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	/* the last 0-7 bytes, little-endian, without a loop */
	switch (left) {
	case 7:
		b |= (uint64_t)in[6] << 48;
		/* fallthrough */
	case 6:
		b |= (uint64_t)in[5] << 40;
		/* fallthrough */
	case 5:
		b |= (uint64_t)in[4] << 32;
		/* fallthrough */
	case 4:
		b |= (uint64_t)in[3] << 24 | (uint64_t)in[2] << 16 | (uint64_t)in[1] << 8 | in[0];
		break;
	case 3:
		b |= (uint64_t)in[2] << 16;
		/* fallthrough */
	case 2:
		b |= (uint64_t)in[1] << 8;
		/* fallthrough */
	case 1:
		b |= in[0];
		break;
	default:
		break;
	}
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

int resil_errf(char *err, size_t errlen, int r, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return r;
}

int resil_proc_stat(uint32_t pid, uint64_t *start_time, uint32_t *ppid)
{
	char path[64], buf[1024];
	unsigned long long v;
	const char *p;
	ssize_t n;
	int fd;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	/* comm (field 2) may hold spaces and parentheses: start after the last ')' */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	p++;
	/* fields 3..21, then 22; field 4 is the parent's pid */
	for (int f = 3; f <= 22; f++) {
		while (*p == ' ')
			p++;
		if (f == 4 && ppid) {
			if (sscanf(p, "%llu", &v) != 1)
				return -EIO;
			*ppid = (uint32_t)v;
		}
		if (f == 22)
			break;
		while (*p && *p != ' ')
			p++;
	}
	if (sscanf(p, "%llu", &v) != 1)
		return -EIO;
	*start_time = v;
	return 0;
}

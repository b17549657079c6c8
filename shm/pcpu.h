/* SPDX-License-Identifier: MIT */
/*
 * pcpu.h - adding to the calling CPU's own counter word without a lock
 * prefix, in a restartable sequence (rseq(2)).
 *
 * What: resil_pcpu_add(w0, stride, n) adds n to the word at
 * w0 + cpu * stride bytes, cpu being the CPU the thread runs on when the
 * add executes. Words 0 .. RESIL_PCPU_SPARE - 1 are owned by the CPUs of
 * the same number; word RESIL_PCPU_SPARE is the spare.
 *
 * Why: a locked fetch_add (BENCHMARKS.md "Floors", bench case
 * floor.fetch_add) costs several times a plain add, which stays inside
 * the core. A plain add (load, add, store inside the core) is only
 * exact on a word that no other CPU writes meanwhile: the word of the CPU
 * we run on, if we are still on it when the add executes. The rseq
 * critical section gives exactly that: the kernel sends a thread that is
 * preempted, migrated or signalled between its read of cpu_id and the add
 * (the commit instruction) to the abort label, which adds to the spare
 * word with a locked fetch_add instead. glibc >= 2.35 registers every
 * thread's rseq area (__rseq_offset, __rseq_size) with RSEQ_SIG, the
 * signature the abort label carries.
 *
 * The mode is the host's, not the process's: processes of one host share
 * the words, and a plain add is only exact if no other process takes a
 * locked add to the same word from another CPU. An owned host is an x86
 * host whose every CPU (sysconf(_SC_NPROCESSORS_CONF)) numbers below
 * RESIL_PCPU_SPARE; every process computes that alike, whatever its libc.
 * On an owned host, each word below the spare is written by plain adds on
 * its own CPU only, the spare by locked adds only:
 *   - resil_pcpu_owned: this process has rseq (glibc >= 2.35 registered
 *     it): the plain add above; a thread without rseq reads cpu_id as a
 *     negative marker and takes the spare.
 *   - resil_pcpu_spare: this process has no rseq (an older glibc, the
 *     glibc.pthread.rseq=0 tunable, valgrind, a build without it): every
 *     add is a locked add on the spare.
 * Otherwise (more CPUs, other architectures) every process takes a locked
 * fetch_add on word cpu % (RESIL_PCPU_SPARE + 1), read with
 * sched_getcpu(), which glibc also answers from the rseq area. A host
 * whose CPU count cannot be read counts as owned (the spare is safe
 * either way).
 *
 * Memory order: relaxed, like the fetch_add it replaces (a counter
 * publishes nothing but itself); readers load the aligned 8-byte words
 * relaxed; the plain add stores the word whole.
 *
 * Crash window: none; the add is one instruction. A process killed before
 * it wrote nothing.
 */
#ifndef RESIL_SHM_PCPU_H
#define RESIL_SHM_PCPU_H

#include <sched.h>
#include <sys/rseq.h>

#include "common.h"

#define RESIL_PCPU_SPARE 15 /* words per counter: RESIL_PCPU_SPARE + 1 */

#if defined(__x86_64__) && defined(RSEQ_SIG) && !defined(RESIL_NO_RSEQ)
#define RESIL_PCPU_RSEQ	   1
#define RESIL_PCPU_STR_(x) #x
#define RESIL_PCPU_STR(x)  RESIL_PCPU_STR_(x)
#endif

/* The modes, see above, and __rseq_offset copied (one load of our own
 * instead of two through libc's GOT entry). Written once by a
 * constructor, then only read. */
extern int resil_pcpu_owned;
extern int resil_pcpu_spare;
extern long resil_pcpu_off;

/* The word index a locked writer uses outside owned mode. */
static inline unsigned resil_pcpu_index(void)
{
	if (resil_pcpu_spare)
		return RESIL_PCPU_SPARE;
#ifdef RESIL_PCPU_RSEQ
	if (RESIL_LIKELY(__rseq_size != 0)) {
		char *tp;

		__asm__("mov %%fs:0, %0" : "=r"(tp));
		return ((const volatile struct rseq *)(tp + __rseq_offset))->cpu_id %
		       (RESIL_PCPU_SPARE + 1);
	}
#endif
	return (unsigned)sched_getcpu() % (RESIL_PCPU_SPARE + 1);
}

static inline __attribute__((always_inline)) void resil_pcpu_add(ra64 *w0, uint64_t stride,
								 uint64_t n)
{
#ifdef RESIL_PCPU_RSEQ
	if (RESIL_LIKELY(resil_pcpu_owned)) {
		/*
		 * 3: the rseq_cs descriptor {version 0, flags 0, start_ip 1,
		 * post_commit_offset 2 - 1, abort_ip 4}; stored into the
		 * thread's rseq area (rseq_cs at offset 8), then 1: read
		 * cpu_id (offset 4), bail out to the spare when it is not an
		 * owner, add (the commit), 2: done. 4 sits after the
		 * signature, out of line, and jumps to the locked add.
		 */
		/* clang-format off */
		__asm__ goto(".pushsection __rseq_cs, \"aw\"\n\t"
			     ".balign 32\n\t"
			     "3:\n\t"
			     ".long 0x0, 0x0\n\t"
			     ".quad 1f, (2f - 1f), 4f\n\t"
			     ".popsection\n\t"
			     "leaq 3b(%%rip), %%rax\n\t"
			     "movq %%rax, %%fs:8(%[off])\n\t"
			     "1:\n\t"
			     "movl %%fs:4(%[off]), %%eax\n\t"
			     "cmpl $" RESIL_PCPU_STR(RESIL_PCPU_SPARE) ", %%eax\n\t"
			     "jae %l[spare]\n\t"
			     "imulq %[stride], %%rax\n\t"
			     "addq %[n], (%[w0], %%rax)\n\t"
			     "2:\n\t"
			     ".pushsection __rseq_failure, \"ax\"\n\t"
			     ".byte 0x0f, 0xb9, 0x3d\n\t"
			     ".long " RESIL_PCPU_STR(RSEQ_SIG) "\n\t"
			     "4:\n\t"
			     "jmp %l[spare]\n\t"
			     ".popsection\n\t"
			     :
			     : [off] "r"(resil_pcpu_off), [w0] "r"(w0), [stride] "r"(stride),
			       [n] "r"(n)
			     : "rax", "memory", "cc"
			     : spare);
		/* clang-format on */
		return;
	spare:
		faa_relaxed((ra64 *)((char *)w0 + RESIL_PCPU_SPARE * stride), n);
		return;
	}
#endif
	faa_relaxed((ra64 *)((char *)w0 + resil_pcpu_index() * stride), n);
}

#endif

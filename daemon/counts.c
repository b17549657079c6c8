/* SPDX-License-Identifier: MIT */
/*
 * counts.c - the clients' count tables: claims forged under a live
 * client's id freed without touching more than that.
 *
 * A process may hand resild a count table (shm/count_table.h) for the row
 * resild bound to its connection. For each pooled policy (bulkhead,
 * adaptive limit) and each row with a table whose id its slots name,
 * resild reads the table's released counts (acquire) before it counts the
 * slots naming that id (C), and the acquired counts after (an acquire
 * fence after the slot loads); A - R then bounds from above what the
 * process held when the slots were counted (shm/count_table.h says why), so
 * C - (A - R), when positive, is at most the slots others wrote that id
 * into. That many slots naming the id are freed (CAS id -> 0), any of
 * them: a slot of the process's own freed this way takes the place of a
 * forged one still occupied, so nobody is admitted past the maximum, and
 * the process's release of it is a CAS that fails. A process lying in
 * its own table only lets its own claims be freed.
 *
 * Words: the tables are read only (PROT_READ mappings); the slots are
 * written by the pools' sweeps (CAS), as the stray sweep does
 * (clients.c). Bounded work: three passes over a policy's pools when a
 * row with a table holds claims there (one otherwise), at most
 * COUNT_IDS rows a policy a pass (the rest at the next).
 *
 * Crash window: none of resild's own: each free is one CAS, and a
 * restarted resild maps no table until its process hands it again (the
 * rows it adopts keep today's rule meanwhile). The process's windows
 * (killed between a count and its CAS) leave A - R too high: fewer slots
 * freed, never one more.
 *
 * Who may hand a table: the process of a row resild bound or judged
 * (resild_clients_who names its pid), for that row only; the memfd must
 * be sealed against shrinking and growing and have exactly the size the
 * configuration's slot count gives, so reading it never faults.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clients.h"
#include "count_table.h"
#include "counts.h"
#include "policy.h"

#define COUNT_IDS 64 /* rows with a table looked at per policy and pass */

struct table {
	void *base; /* NULL: none */
	uint64_t size;
	uint32_t pid;
};

struct resild_counts {
	uint32_t cap; /* client rows */
	struct table t[];
};

int resild_counts_attach(struct resild *d, const struct resild_peer *peer, int fd, char *err,
			 size_t errlen)
{
	uint64_t want = resil_count_table_size(d->seg.cfg->slot_cap);
	uint32_t cap = d->seg.geo.client_cap, pid = 0, uid, row;
	struct stat st;
	void *base;
	int seals;

	/* pid 0: a peer in a pid namespace we cannot see names no row */
	for (row = 0; peer->pid > 0 && row < cap; row++)
		if (resild_clients_who(d, row, &pid, &uid) && pid == (uint32_t)peer->pid)
			break;
	if (peer->pid <= 0 || row == cap) {
		snprintf(err, errlen, "no client row is bound to pid %d", (int)peer->pid);
		return -ENOENT;
	}
	if (fd < 0) {
		snprintf(err, errlen, "a count table comes with its descriptor");
		return -EBADF;
	}
	/* the seals first: only a memfd has them, so nothing slower (a file
	 * of a FUSE mount) is asked anything more */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen,
			 "a count table is a memfd sealed against shrinking and growing");
		return -EINVAL;
	}
	if ((uint64_t)st.st_size != want) {
		snprintf(err, errlen, "a count table takes %llu bytes here, not %llu",
			 (unsigned long long)want, (unsigned long long)st.st_size);
		return -EINVAL;
	}
	if (!d->counts) {
		d->counts = calloc(1, sizeof(*d->counts) + cap * sizeof(struct table));
		if (!d->counts) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		d->counts->cap = cap;
	}
	base = mmap(NULL, want, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		int r = -errno;

		snprintf(err, errlen, "cannot map the count table: %s", strerror(-r));
		return r;
	}
	resild_counts_forget(d, row);
	d->counts->t[row] = (struct table){base, want, pid};
	return 0;
}

void resild_counts_forget(struct resild *d, uint32_t row)
{
	struct table *t;

	if (!d->counts || row >= d->counts->cap || !d->counts->t[row].base)
		return;
	t = &d->counts->t[row];
	munmap(t->base, t->size);
	*t = (struct table){0};
}

void resild_counts_fini(struct resild *d)
{
	if (!d->counts)
		return;
	for (uint32_t i = 0; i < d->counts->cap; i++)
		resild_counts_forget(d, i);
	free(d->counts);
	d->counts = NULL;
}

/* The sum over the stripes of row's entry for slot: acquired or released,
 * each loaded acquire. */
static uint64_t sum(const struct resild *d, uint32_t row, uint32_t slot, bool acquired)
{
	void *base = d->counts->t[row].base;
	uint32_t cap = d->seg.cfg->slot_cap;
	uint64_t n = 0;

	for (uint32_t s = 0; s < RESIL_COUNT_STRIPES; s++) {
		struct resil_count *e = resil_count_at(base, cap, s, slot);

		n += acquired ? ld_acquire(&e->acquired) : ld_acquire(&e->released);
	}
	return n;
}

bool resild_counts_bound(const struct resild *d, uint32_t row, uint32_t slot, uint64_t *held)
{
	uint64_t r, a;

	if (!d->counts || row >= d->counts->cap || !d->counts->t[row].base ||
	    slot >= d->seg.cfg->slot_cap)
		return false;
	r = sum(d, row, slot, false);
	atomic_thread_fence(memory_order_acquire);
	a = sum(d, row, slot, true);
	*held = a > r ? a - r : 0;
	return true;
}

struct pass {
	const struct resild_counts *k;
	bool known_only; /* count the ids found already, add none */
	uint32_t n;
	uint32_t id[COUNT_IDS], c[COUNT_IDS], left[COUNT_IDS];
};

/* resil_holder_fn: count a claim under the id of a row with a table. */
static void note(uint32_t id, void *ctx)
{
	struct pass *p = ctx;
	uint32_t i;

	if (id == 0 || id > p->k->cap || !p->k->t[id - 1].base)
		return;
	for (i = 0; i < p->n && p->id[i] != id; i++)
		;
	if (i == p->n) {
		if (p->known_only || p->n == COUNT_IDS)
			return;
		p->id[p->n++] = id;
	}
	p->c[i]++;
}

/* resil_stray_fn: free a claim under an id while it has some left. */
static bool forged(uint32_t id, void *ctx)
{
	struct pass *p = ctx;

	for (uint32_t i = 0; i < p->n; i++)
		if (p->id[i] == id) {
			if (!p->left[i])
				return false;
			p->left[i]--;
			return true;
		}
	return false;
}

uint32_t resild_counts_sweep(struct resild *d, const struct resil_rec *rec)
{
	struct resil_ctx x = {.seg = &d->seg, .pid = (uint32_t)getpid()};
	struct pass p = {.k = d->counts};
	uint64_t rel[COUNT_IDS];
	bool any = false;

	if (!d->counts || rec->slot >= d->seg.cfg->slot_cap ||
	    !(resil_has(rec, RESIL_C_BULKHEAD) || resil_has(rec, RESIL_C_ADAPTIVE)))
		return 0;
	/* 1: which rows with a table have claims here */
	resil_policy_holders(&d->seg, rec, note, &p);
	if (!p.n)
		return 0;
	/* 2: released before the count, acquired after */
	for (uint32_t i = 0; i < p.n; i++) {
		rel[i] = sum(d, p.id[i] - 1, rec->slot, false);
		p.c[i] = 0;
	}
	p.known_only = true;
	resil_policy_holders(&d->seg, rec, note, &p);
	atomic_thread_fence(memory_order_acquire);
	for (uint32_t i = 0; i < p.n; i++) {
		uint64_t acq = sum(d, p.id[i] - 1, rec->slot, true);
		uint64_t held = acq > rel[i] ? acq - rel[i] : 0;

		p.left[i] = p.c[i] > held ? (uint32_t)(p.c[i] - held) : 0;
		any |= p.left[i] != 0;
	}
	/* 3: free that many slots naming each id */
	return any ? resil_policy_sweep_pools(&x, rec, forged, &p) : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * clients.h - the client registry: which processes hold rows of the
 * client table (bound to a connection, or tied to a client as its forked
 * child), watched through pidfds, and reclaim when one dies.
 */
#ifndef RESILD_CLIENTS_H
#define RESILD_CLIENTS_H

#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

struct resild;
struct resil_rec;

int resild_clients_init(struct resild *d);
void resild_clients_fini(struct resild *d);
/* Each tick, with bounded work: judge new rows (bound, a child of a known
 * client, unidentifiable, or refused and freed), reclaim the rows of
 * processes that died, sweep permits held by ids naming no live row. */
void resild_clients_scan(struct resild *d);
/* Dead clients reclaimed per tick (a reclaim walks every policy): by the
 * tick's scan, and as many again by the loop as exits come in between. */
#define RESILD_RECLAIM_PER_TICK 8
/* The loop saw the pidfd of row become readable: that process exited.
 * Reclaimed now while the budget of the tick to come lasts, else by the
 * next tick. */
void resild_clients_exited(struct resild *d, uint32_t row, uint32_t cookie);
/* Rows held by live processes we identified. */
uint32_t resild_clients_live(const struct resild *d);
/* Claim a row for the peer of a connection (its SO_PEERCRED pid, in our
 * pid namespace) and watch it: the row index, or -errno (-ESRCH: the
 * peer's pid is not visible here; -ENOSPC: the table is full). */
int resild_clients_bind(struct resild *d, pid_t peer_pid, uid_t uid, bool exempt);
/* Client rows held by uid's processes (bound, forked children, adopted),
 * for the per-uid quota (--max-clients-per-uid). */
uint32_t resild_clients_of_uid(const struct resild *d, uint32_t uid);
/* Our pid for row's process (0: not one we identified). */
uint32_t resild_clients_pid_of(const struct resild *d, uint32_t row);
/* The process of row as resild identified it (its connection's
 * SO_PEERCRED, or a forked child's /proc entry, and a pidfd): its pid in
 * our namespace and its uid. false when the row is not one we vouch for. */
bool resild_clients_who(const struct resild *d, uint32_t row, uint32_t *pid, uint32_t *uid);
/* Free the permits of policy rec held by RESIL_CLIENT_UNREGISTERED (an
 * operator's reset: the tick never guesses about them). How many. */
uint32_t resild_clients_free_unregistered(struct resild *d, const struct resil_rec *rec);

struct resild_clients_stats {
	uint64_t bound;		    /* rows bound to a connection */
	uint64_t refused;	    /* rows freed: no process we can tie to a client */
	uint64_t over_quota;	    /* rows refused or not bound: the uid's quota */
	uint64_t stray_freed;	    /* permits freed: held by an id naming no live row */
	uint64_t evicted; /* rows given to a connecting client: nobody's or unidentified */
	uint32_t unknown;	    /* rows kept unidentified (another pid namespace) */
	uint32_t unregistered_held; /* the sweep pass in progress */
	uint32_t unregistered_last; /* permits held unregistered, the last whole pass */
};
void resild_clients_stats(const struct resild *d, struct resild_clients_stats *out);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * fdstore_util.h - systemd 252 for one unit, as far as resild's restarts
 * see it: the notify socket (READY=1, STATUS=), the fd store
 * (FDSTORE=1 with FDNAME=, FDSTOREREMOVE=1, FileDescriptorStoreMax=8,
 * duplicates kept once) and a start that hands the store back as
 * LISTEN_FDS / LISTEN_FDNAMES, as Restart=always does after a crash.
 */
#ifndef RESIL_FDSTORE_UTIL_H
#define RESIL_FDSTORE_UTIL_H

#include <stdbool.h>
#include <sys/un.h>

#include "testutil.h"

#define TEST_STORE_MAX 8 /* FileDescriptorStoreMax= */

struct test_unit {
	struct test_daemon d;
	char notify[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int nfd; /* the notify socket */
	int fds[TEST_STORE_MAX];
	char names[TEST_STORE_MAX][64];
	int n;
	int ready;	  /* READY=1 seen (counted) */
	char status[128]; /* the last STATUS= */
};

/* A daemon directory and a bound notify socket: 0 or -errno. */
int test_unit_init(struct test_unit *u);
/* Start (or restart) the unit's daemon, handing it the store when
 * with_store: 0 once it answers, or -errno. */
int test_unit_start(struct test_unit *u, bool with_store);
/* Read every message that arrived on the notify socket. */
void test_unit_poll(struct test_unit *u);
/* The store holds exactly n fds (after a poll). */
bool test_unit_stored(struct test_unit *u, int n);
/* The last STATUS= has what. */
bool test_unit_status_has(struct test_unit *u, const char *what);
/* The stored fd named name, or -1. */
int test_unit_store_fd(struct test_unit *u, const char *name);
/* A crash: SIGKILL (Restart=always brings it back with the store). */
void test_unit_crash(struct test_unit *u);
/* systemctl stop: the daemon stops, the store is emptied; its exit
 * status as waitpid gives it, or -errno. */
int test_unit_stop(struct test_unit *u);
/* Stop if running, close the store and the socket, remove the directory. */
void test_unit_fini(struct test_unit *u);

#endif

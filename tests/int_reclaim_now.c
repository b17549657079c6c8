/* SPDX-License-Identifier: MIT */
/*
 * int_reclaim_now.c - a client's exit that the loop sees (its pidfd
 * readable) is reclaimed at once while the tick's budget lasts, and past
 * the budget by the ticks, RESILD_RECLAIM_PER_TICK a tick (daemon/
 * clients.c, "Bounded work per tick").
 *
 * Real forked processes; the daemon's registry, control handler and
 * segments driven in-process, without the loop: the test plays the
 * loop's part, calling resild_clients_exited as the loop does when a
 * pidfd fires, and the tick's, calling resild_clients_scan.
 *
 * N = RESILD_RECLAIM_PER_TICK + 3 children, each bound to a row as a
 * connection's peer is (resild_clients_bind), each holding one permit of
 * a bulkhead under its own client id; all SIGKILLed and waited for; then
 *   - the first RESILD_RECLAIM_PER_TICK exits are reclaimed by the call
 *     itself: rows free, permits back, before any scan;
 *   - the other 3 stay held until a tick: the first scan finds the budget
 *     spent by the exits, the second reclaims them;
 *   - an exit reported again, or with a cookie not its watch's,
 *     reclaims nothing more.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bulkhead.h"
#include "clients.h"
#include "ctl.h"
#include "policy.h"
#include "events.h"
#include "resil.pb-c.h"
#include "resild.h"
#include "testutil.h"

#define N (RESILD_RECLAIM_PER_TICK + 3)

static struct resild d;

static void define(const char *name, const char *conf)
{
	static uint8_t msg[RESILD_MSG_MAX], out[RESILD_MSG_MAX];
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;
	struct resild_peer peer = {.pid = getpid(), .rx_fd = -1};
	int fds[RESILD_HANDLE_FDS], nfds = 0, r;
	size_t len, outlen = sizeof(out);

	df.name = (char *)name;
	df.config = (char *)conf;
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	len = resil__request__pack(&req, msg);
	r = resild_handle(&d, &peer, msg, len, out, &outlen, fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	resild_peer_gone(&d, &peer);
	if (r < 0) {
		fprintf(stderr, "define %s: %d\n", name, r);
		exit(1);
	}
}

struct find {
	const char *name;
	const struct resil_rec *rec;
};

static int find_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		    void *ctx)
{
	struct find *f = ctx;

	(void)s;
	(void)slot;
	if (!strcmp(rec->name, f->name))
		f->rec = rec;
	return 0;
}

static uint32_t held(const struct resil_rec *rec)
{
	return resil_bulkhead_held(&rec->conf.bulkhead,
				   resil_comp_state(&d.seg, rec, RESIL_C_BULKHEAD));
}

static uint64_t owner(int row)
{
	return ld_acquire(&resil_seg_client(&d.seg, (uint32_t)row)->owner);
}

/* The loop's report of row's exit: every cookie, as the test does not
 * know which one its watch got; the others are a stale watch's and must
 * do nothing. */
static void exited(int row)
{
	for (uint32_t cookie = 0; cookie < 4 * N; cookie++)
		resild_clients_exited(&d, (uint32_t)row, cookie);
}

int main(void)
{
	struct resil_seg_params sp = {
	    .slots = 16, .clients = 2 * N, .events = 64, .state_size = 4 << 20};
	struct find f = {.name = "rn"};
	pid_t pid[N];
	int row[N], gate[2];
	uint64_t reclaims;

	d.opts.policies = sp.slots;
	d.opts.clients = sp.clients;
	d.opts.state_size = sp.state_size;
	d.listen_fd = -1;
	if (resil_seg_create(&d.seg, &sp) < 0)
		return 1;
	d.have_seg = true;
	resil_seg_own_arena(&d.seg);
	st_release(&d.seg.st->daemon_pid, (uint32_t)getpid());
	TEST_CHECK(resild_clients_init(&d) == 0);
	resild_events_init(&d);
	define("rn", "bulkhead.max = 64");
	resil_seg_foreach(&d.seg, find_one, &f);
	TEST_CHECK(f.rec != NULL);

	/* children that live until they are killed, each a row and a permit */
	TEST_CHECK(pipe(gate) == 0);
	for (int i = 0; i < N; i++) {
		struct resil_ctx x = {.seg = &d.seg, .rec = f.rec, .pid = (uint32_t)getpid()};
		struct resil_permit_priv pm = {0};
		char c;

		pid[i] = fork();
		TEST_CHECK(pid[i] >= 0);
		if (pid[i] == 0) {
			close(gate[1]);
			while (read(gate[0], &c, 1) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		row[i] = resild_clients_bind(&d, pid[i], 0, true);
		TEST_CHECK(row[i] >= 0);
		x.client_id = resil_client_id(row[i]);
		TEST_CHECK(resil_policy_acquire(&x, f.rec, &pm, NULL, 0) == RESIL_ADMIT);
	}
	TEST_CHECK(held(f.rec) == N);
	TEST_CHECK(resild_clients_live(&d) == N);
	for (int i = 0; i < N; i++) {
		TEST_CHECK(kill(pid[i], SIGKILL) == 0);
		TEST_CHECK(waitpid(pid[i], NULL, 0) == pid[i]);
	}

	/* the exits the loop sees: reclaimed at once, up to the budget */
	reclaims = d.reclaims;
	for (int i = 0; i < N; i++)
		exited(row[i]);
	TEST_CHECK(d.reclaims - reclaims == RESILD_RECLAIM_PER_TICK);
	TEST_CHECK(held(f.rec) == N - RESILD_RECLAIM_PER_TICK);
	for (int i = 0; i < N; i++)
		TEST_CHECK((owner(row[i]) == 0) == (i < RESILD_RECLAIM_PER_TICK));
	/* reported again: nothing more */
	for (int i = 0; i < N; i++)
		exited(row[i]);
	TEST_CHECK(d.reclaims - reclaims == RESILD_RECLAIM_PER_TICK);

	/* the first tick's budget went to those exits; the next tick's
	 * reclaims the rest */
	resild_clients_scan(&d);
	TEST_CHECK(d.reclaims - reclaims == RESILD_RECLAIM_PER_TICK);
	TEST_CHECK(held(f.rec) == N - RESILD_RECLAIM_PER_TICK);
	resild_clients_scan(&d);
	TEST_CHECK(d.reclaims - reclaims == N);
	TEST_CHECK(held(f.rec) == 0);
	for (int i = 0; i < N; i++)
		TEST_CHECK(owner(row[i]) == 0);
	TEST_CHECK(resild_clients_live(&d) == 0);

	close(gate[0]);
	close(gate[1]);
	resild_clients_fini(&d);
	resil_seg_unmap(&d.seg);
	printf("int_reclaim_now: %d exits, %d reclaimed at once, the rest at the second tick\n", N,
	       RESILD_RECLAIM_PER_TICK);
	return 0;
}

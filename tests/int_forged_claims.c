/* SPDX-License-Identifier: MIT */
/*
 * int_forged_claims.c - claims a member forges under a live client's id
 * are freed, when that client hands resild a count table (shm/count_table.h,
 * daemon/counts.c). As members of the socket group without admin rights
 * (accounts made for the test: group rt-fgd, users rt-fgd-v, the victim,
 * and rt-fgd-a, the attacker), on a bulkhead of 8 root defines:
 *   - the victim hands its count table (a sealed memfd; one of the wrong
 *     size, one unsealed and a request without a descriptor are refused,
 *     each with its reason), and holds 2 permits, counting them in its
 *     table as the design has a library do (acquired before the claim,
 *     released after the release);
 *   - the attacker writes the victim's id into the 6 free slots and
 *     exits. Within a tick (resild's beat moves twice) exactly 2 slots
 *     name the victim again, and root gets exactly 6 permits: nobody past
 *     the maximum. `show` lists the victim's row with 2;
 *   - again, then root's `reset`: when it answers, 2 slots name the
 *     victim (freed by the reset, or by a tick before it);
 *   - the victim releases its 2 (a release whose slot was freed in place
 *     of a forged one is a CAS that fails): within a tick no slot names
 *     it, and root gets all 8.
 * Skips (77) when not root.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bulkhead.h"
#include "count_table.h"
#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define MAX 8

static struct test_daemon d;
static gid_t g;
static uid_t ua, uv;
static int to_parent[2], to_victim[2];

static void one_tick(resil_t *r)
{
	for (int i = 0; i < 2; i++) {
		uint64_t b = ld_relaxed(&r->seg.st->daemon_beat_ns);

		TEST_CHECK(TEST_EVENTUALLY(ld_relaxed(&r->seg.st->daemon_beat_ns) != b));
	}
}

/* A CountTable request with fd (-1: none) on a connection of its own;
 * the reply's errno (0: taken). */
static int hand_table(int fd)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__CountTable ct = RESIL__COUNT_TABLE__INIT;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	static uint8_t buf[4096];
	struct iovec iov;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	Resil__Response *resp;
	struct pollfd pf;
	int s, e;
	ssize_t n;

	s = test_connect_raw(d.sock);
	TEST_CHECK(s >= 0);
	req.id = 7;
	req.body_case = RESIL__REQUEST__BODY_COUNT_TABLE;
	req.count_table = &ct;
	iov.iov_base = buf;
	iov.iov_len = resil__request__pack(&req, buf);
	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	TEST_CHECK(sendmsg(s, &mh, MSG_NOSIGNAL) == (ssize_t)iov.iov_len);
	pf = (struct pollfd){.fd = s, .events = POLLIN};
	TEST_CHECK(poll(&pf, 1, TEST_EVENTUALLY_MS) == 1);
	n = recv(s, buf, sizeof(buf), 0);
	TEST_CHECK(n > 0);
	resp = resil__response__unpack(NULL, (size_t)n, buf);
	TEST_CHECK(resp != NULL && resp->id == 7);
	e = resp->error ? resp->error->errno_value : 0;
	if (e)
		printf("victim: table refused: %s\n", resp->error->message);
	resil__response__free_unpacked(resp, NULL);
	close(s);
	return e;
}

static int table_fd(uint64_t size, bool seal)
{
	int fd = memfd_create("resil-counts", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	TEST_CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
	if (seal)
		TEST_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	return fd;
}

/* The victim: hands its table, holds 2 permits counted in it, reports its
 * id, releases them when told. */
static void victim(void)
{
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm[2];
	uint32_t slot_cap, slot, id;
	uint64_t size;
	struct resil_count *e;
	void *t;
	int fd;
	char ch;

	test_become(uv, g);
	TEST_CHECK(resil_open(&r, d.sock) == 0);
	TEST_CHECK(resil_policy(r, "forged", &p) == 0);
	slot_cap = r->seg.cfg->slot_cap;
	slot = test_rec_of(r, "forged")->slot;
	size = resil_count_table_size(slot_cap);
	TEST_CHECK(hand_table(-1) == EBADF);
	fd = table_fd(size + 4096, true);
	TEST_CHECK(hand_table(fd) == EINVAL);
	close(fd);
	fd = table_fd(size, false);
	TEST_CHECK(hand_table(fd) == EINVAL);
	close(fd);
	fd = table_fd(size, true);
	t = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	TEST_CHECK(t != MAP_FAILED);
	TEST_CHECK(hand_table(fd) == 0);
	close(fd);
	e = resil_count_at(t, slot_cap, 0, slot);
	for (int i = 0; i < 2; i++) {
		atomic_fetch_add(&e->acquired, 1);
		TEST_CHECK(resil_acquire(p, &pm[i]) == RESIL_ADMIT);
	}
	id = resil_client_id(atomic_load(&r->row));
	TEST_CHECK(id != 0);
	TEST_CHECK(write(to_parent[1], &id, sizeof(id)) == sizeof(id));
	TEST_CHECK(read(to_victim[0], &ch, 1) == 1);
	for (int i = 0; i < 2; i++) {
		resil_release(p, &pm[i], RESIL_SUCCESS);
		atomic_fetch_add(&e->released, 1);
	}
	TEST_CHECK(write(to_parent[1], &id, sizeof(id)) == sizeof(id));
	TEST_CHECK(read(to_victim[0], &ch, 1) == 0); /* the parent is done */
	resil_close(r);
}

static uint32_t victim_id;

int main(void)
{
	char gs[16], held[48];
	const char *extra[] = {"--socket-group", gs, NULL};
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;
	Resil__Response *resp = NULL;
	resil_t *root = NULL;
	resil_policy_t *p;
	pid_t vp;
	char ch = 'g';
	uint32_t id;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0) {
		fprintf(stderr, "int_forged_claims: needs root to make accounts: skipped\n");
		return TEST_SKIP;
	}
	TEST_CHECK(test_group_make("rt-fgd", &g) == 0);
	TEST_CHECK(test_user_make("rt-fgd-a", g, &ua) == 0);
	TEST_CHECK(test_user_make("rt-fgd-v", g, &uv) == 0);
	snprintf(gs, sizeof(gs), "%u", (unsigned)g);
	if (test_daemon_init(&d) < 0 || test_daemon_start(&d, extra) < 0)
		return 1;
	TEST_CHECK(resil_open(&root, d.sock) == 0);
	TEST_CHECK(resil_define(root, "forged", "bulkhead.max = 8") == 0);
	TEST_CHECK(resil_policy(root, "forged", &p) == 0);

	TEST_CHECK(pipe(to_parent) == 0 && pipe(to_victim) == 0);
	vp = fork();
	TEST_CHECK(vp >= 0);
	if (vp == 0) {
		close(to_parent[0]);
		close(to_victim[1]);
		victim();
		_exit(0);
	}
	close(to_parent[1]);
	close(to_victim[0]);
	TEST_CHECK(read(to_parent[0], &id, sizeof(id)) == sizeof(id));
	victim_id = id;
	TEST_CHECK(test_bulkhead_naming(root, "forged", id) == 2);

	/* forged, then a tick */
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	one_tick(root);
	printf("after a tick: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", id) == 2);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 2);
	snprintf(held, sizeof(held), "held_row_%u_pid_%d", id - 1, (int)vp);
	TEST_CHECK(test_policy_stat(root, "forged", held) == 2);
	snprintf(held, sizeof(held), "forged_row_%u", id - 1);
	TEST_CHECK(test_policy_stat(root, "forged", held) == -1);

	/* forged, then root's reset */
	TEST_CHECK(test_forge_as(ua, g, d.sock, "forged", victim_id) == MAX - 2);
	f.name = "forged";
	f.reset = true;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	pthread_mutex_lock(&root->lock);
	TEST_CHECK(resil_priv_request(root, &req, &resp, NULL, NULL) == 0);
	pthread_mutex_unlock(&root->lock);
	resil__response__free_unpacked(resp, NULL);
	printf("after the reset: %u slots name the victim\n",
	       test_bulkhead_naming(root, "forged", id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", id) == 2);
	TEST_CHECK(test_admitted(p, MAX) == MAX - 2);

	/* the victim releases: nothing of it stays */
	TEST_CHECK(write(to_victim[1], &ch, 1) == 1);
	TEST_CHECK(read(to_parent[0], &id, sizeof(id)) == sizeof(id));
	one_tick(root);
	printf("after the victim's release and a tick: %u slots name it\n",
	       test_bulkhead_naming(root, "forged", id));
	TEST_CHECK(test_bulkhead_naming(root, "forged", id) == 0);
	TEST_CHECK(test_admitted(p, MAX) == MAX);

	close(to_victim[1]);
	TEST_CHECK(test_wait_pid(vp, 60000) == 0);
	resil_close(root);
	TEST_CHECK(test_daemon_stop(&d) == 0);
	test_daemon_fini(&d);
	test_accounts_remove();
	printf("int_forged_claims: ok\n");
	return 0;
}

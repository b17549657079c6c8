/* SPDX-License-Identifier: MIT */
/*
 * unit_client.c - libresil's own behaviour, in embedded mode unless a
 * socket is the point: bad input gives -EINVAL and never a crash, unknown
 * names -ENOENT, resil_open answers within its bound when nothing listens
 * or nothing answers, a full segment -ENOSPC, handles survive redefinition
 * and report deletion, a forked child claims its own row, a full client
 * table decides unregistered and counts it.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "resil.pb-c.h"
#include "testutil.h"

#define BREAKER5 "breaker.window = consecutive:5; breaker.wait = 1h; breaker.half_open_calls = 2"

static int open_emb(void **state)
{
	resil_t *r = NULL;

	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	*state = r;
	return 0;
}

static int close_emb(void **state)
{
	resil_close(*state);
	return 0;
}

static void test_null_args(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p = NULL;
	resil_permit_t pm;
	char longname[RESIL_NAME_MAX + 8];
	struct resil_req bad = {.key = NULL, .key_len = 4};

	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;

	assert_int_equal(resil_open(NULL, "/nonexistent"), -EINVAL);
	assert_int_equal(resil_open_embedded(NULL, NULL), -EINVAL);
	resil_close(NULL);
	assert_int_equal(resil_define(NULL, "x", BREAKER5), -EINVAL);
	assert_int_equal(resil_define(r, NULL, BREAKER5), -EINVAL);
	assert_int_equal(resil_define(r, "", BREAKER5), -EINVAL);
	assert_int_equal(resil_define(r, longname, BREAKER5), -EINVAL);
	assert_int_equal(resil_define(r, "x", NULL), -EINVAL);
	assert_int_equal(resil_delete(NULL, "x"), -EINVAL);
	assert_int_equal(resil_delete(r, NULL), -EINVAL);
	assert_int_equal(resil_policy(NULL, "x", &p), -EINVAL);
	assert_int_equal(resil_policy(r, NULL, &p), -EINVAL);
	assert_int_equal(resil_policy(r, "x", NULL), -EINVAL);
	assert_int_equal(resil_policy(r, longname, &p), -EINVAL);
	assert_null(p); /* out-parameters written only on success */
	assert_int_equal(resil_acquire(NULL, &pm), -EINVAL);
	assert_int_equal(resil_acquire_key(NULL, "k", 1, &pm), -EINVAL);
	assert_int_equal(resil_acquire_ex(NULL, NULL, &pm), -EINVAL);
	resil_release(NULL, &pm, RESIL_SUCCESS);
	resil_release(NULL, NULL, RESIL_SUCCESS);
	assert_int_equal(resil_set_clock(NULL, test_clock_fn, NULL), -EINVAL);
	assert_int_equal(resil_set_random(NULL, NULL, NULL), -EINVAL);
	assert_int_equal(resil_force_state(NULL, "x", RESIL_STATE_OPEN), -EINVAL);
	assert_int_equal(resil_force_state(r, "x", 42), -EINVAL);
	assert_int_equal(resil_reset(NULL, "x"), -EINVAL);
	assert_int_equal(resil_policy_state(NULL), -EINVAL);
	assert_int_equal(resil_permit_wait_ns(NULL), -EINVAL);
	assert_string_equal(resil_policy_name(NULL), "");
	assert_non_null(resil_strverdict(12345));
	assert_non_null(resil_strverdict(-5));
	assert_non_null(resil_strstate(-1));
	assert_string_equal(resil_strstate(RESIL_STATE_HALF_OPEN), "half-open");
	assert_int_equal(resil_outcome_http(NULL, 7), -EINVAL);
	assert_int_equal(resil_outcome_http(NULL, 503), RESIL_FAILURE);
	assert_int_equal(resil_outcome_http(NULL, 200), RESIL_SUCCESS);
	/* the same mapping with or without a policy: other 4xx are the
	 * caller's doing, connection errors fail, EINVAL is ignored */
	assert_int_equal(resil_outcome_http(NULL, 404), RESIL_IGNORED);
	assert_int_equal(resil_outcome_http(NULL, 429), RESIL_FAILURE);
	assert_int_equal(resil_outcome_errno(NULL, -ECONNREFUSED), RESIL_FAILURE);
	assert_int_equal(resil_outcome_errno(NULL, EINVAL), RESIL_IGNORED);
	assert_int_equal(resil_outcome_errno(NULL, 0), RESIL_SUCCESS);
	assert_non_null(resil_last_error());

	/* a real handle with bad arguments */
	assert_int_equal(resil_define(r, "nullargs", BREAKER5), 0);
	assert_int_equal(resil_policy(r, "nullargs", &p), 0);
	assert_int_equal(resil_acquire(p, NULL), -EINVAL);
	assert_int_equal(resil_acquire_key(p, NULL, 3, &pm), -EINVAL);
	assert_int_equal(resil_acquire_ex(p, &bad, &pm), -EINVAL);
	bad.key = "k";
	bad.key_len = 1;
	bad.priority = 7;
	assert_int_equal(resil_acquire_ex(p, &bad, &pm), -EINVAL);
	/* a release without an acquire, or twice, frees nothing */
	memset(&pm, 0, sizeof(pm));
	resil_release(p, &pm, RESIL_FAILURE);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_release(p, &pm, RESIL_FAILURE);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
}

static void test_garbage_config(void **state)
{
	resil_t *r = *state;

	assert_int_equal(resil_define(r, "bad", "breaker.window = sideways"), -EINVAL);
	assert_true(strlen(resil_last_error()) > 0);
	assert_int_equal(resil_define(r, "bad", "no.such.key = 1"), -EINVAL);
	assert_int_equal(resil_define(r, "bad", "breaker.wait ="), -EINVAL);
	assert_int_equal(resil_define(r, "bad", "\x01\x02\xff garbage"), -EINVAL);
	/* nothing was defined */
	resil_policy_t *p = NULL;
	assert_int_equal(resil_policy(r, "bad", &p), -ENOENT);
}

static void test_unknown_policy(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p = NULL;

	assert_int_equal(resil_policy(r, "nobody-defined-this", &p), -ENOENT);
	assert_null(p);
	assert_int_equal(resil_delete(r, "nobody-defined-this"), -ENOENT);
	assert_int_equal(resil_force_state(r, "nobody-defined-this", RESIL_STATE_OPEN), -ENOENT);
}

static void test_breaker_opens(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p, *p2;
	resil_permit_t pm;

	assert_int_equal(resil_define(r, "db", BREAKER5), 0);
	assert_int_equal(resil_policy(r, "db", &p), 0);
	assert_int_equal(resil_policy(r, "db", &p2), 0);
	assert_ptr_equal(p, p2); /* one handle per name */
	assert_string_equal(resil_policy_name(p), "db");
	for (int i = 0; i < 5; i++) {
		assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_FAILURE);
	}
	assert_int_equal(resil_policy_state(p), RESIL_STATE_OPEN);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_OPEN);

	/* a change of configuration keeps the state; the handle follows */
	assert_int_equal(resil_define(r, "db",
				      "breaker.window = consecutive:5; breaker.wait = 2h;"
				      " breaker.half_open_calls = 2"),
			 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_OPEN);

	/* forced states */
	assert_int_equal(resil_force_state(r, "db", RESIL_STATE_CLOSED), 0);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_CLOSED);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(resil_force_state(r, "db", RESIL_STATE_OPEN), 0);
	assert_int_equal(resil_policy_state(p), RESIL_STATE_FORCED_OPEN);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_OPEN);
	assert_int_equal(resil_reset(r, "db"), 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
}

static void test_delete_and_back(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p, *p2;
	resil_permit_t pm, held;

	assert_int_equal(resil_define(r, "gone", "bulkhead.max = 1"), 0);
	assert_int_equal(resil_policy(r, "gone", &p), 0);
	assert_int_equal(resil_acquire(p, &held), RESIL_ADMIT);
	assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_FULL);
	assert_int_equal(resil_delete(r, "gone"), 0);
	assert_int_equal(resil_acquire(p, &pm), -ENOENT);
	assert_int_equal(resil_policy_state(p), -ENOENT);
	resil_release(p, &held, RESIL_SUCCESS); /* into the old state block: no crash */
	assert_int_equal(resil_define(r, "gone", "bulkhead.max = 1"), 0);
	assert_int_equal(resil_policy(r, "gone", &p2), 0);
	assert_ptr_equal(p, p2);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT); /* the handle resolves again */
	resil_release(p, &pm, RESIL_SUCCESS);
}

static void test_release_after_reresolve(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p;
	resil_permit_t a, b;

	assert_int_equal(resil_define(r, "bh", "bulkhead.max = 1; breaker.window = count:10"), 0);
	assert_int_equal(resil_policy(r, "bh", &p), 0);
	uint64_t w0 = atomic_load(&p->b)->word;

	assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
	/* a change while the permit is held: the handle re-resolves */
	assert_int_equal(resil_define(r, "bh",
				      "bulkhead.max = 1; breaker.window = count:10;"
				      " breaker.wait = 5s"),
			 0);
	assert_int_equal(resil_acquire(p, &b), RESIL_REJECT_FULL);
	assert_true(atomic_load(&p->b)->word != w0); /* it did re-resolve */
	resil_release(p, &a, RESIL_SUCCESS);
	/* the permit held under the old generation was freed */
	assert_int_equal(resil_acquire(p, &b), RESIL_ADMIT);
	resil_release(p, &b, RESIL_SUCCESS);
}

static int bindings_of(const resil_policy_t *p)
{
	int n = p->last != NULL;

	for (const struct resil_binding *b = p->retired; b; b = b->next)
		n++;
	return n;
}

/* A handle's binding is published once per (mapping, slot word), and a
 * replaced one is kept through its grace (internal.h): the handle holds
 * more bindings with redefinitions, never with calls, and a replaced
 * binding stays readable. */
static void test_binding_kept(void **state)
{
	resil_t *r = *state;
	const struct resil_binding *b0, *b1;
	resil_policy_t *p;
	resil_permit_t pm;

	assert_int_equal(resil_define(r, "bk", "bulkhead.max = 2; breaker.window = count:10"), 0);
	assert_int_equal(resil_policy(r, "bk", &p), 0);
	b0 = atomic_load(&p->b);
	assert_true(b0->word != 0);
	for (int i = 0; i < 1000; i++) {
		resil_policy_t *q;

		assert_int_equal(resil_policy(r, "bk", &q), 0); /* binds again */
		assert_ptr_equal(q, p);
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	assert_ptr_equal(atomic_load(&p->b), b0);
	assert_int_equal(bindings_of(p), 1);

	/* a permit held across a redefinition: a new binding; the old one
	 * stays whole, and the permit goes back through it */
	{
		resil_permit_t old, a;

		assert_int_equal(resil_acquire(p, &old), RESIL_ADMIT);
		assert_int_equal(resil_acquire(p, &a), RESIL_ADMIT);
		/* the same shape (the block is kept), another record */
		assert_int_equal(resil_define(r, "bk",
					      "bulkhead.max = 2; breaker.window = count:10;"
					      " breaker.wait = 5s"),
				 0);
		assert_int_equal(resil_acquire(p, &pm), RESIL_REJECT_FULL); /* both still held */
		b1 = atomic_load(&p->b);
		assert_ptr_not_equal(b1, b0);
		assert_true(b1->word != b0->word);
		assert_int_equal(bindings_of(p), 2);
		assert_true(b0->word != 0 && b0->rec != NULL); /* not freed, not rewritten */
		resil_release(p, &old, RESIL_SUCCESS);
		resil_release(p, &a, RESIL_SUCCESS);
	}
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_ptr_equal(atomic_load(&p->b), b1);
	assert_int_equal(bindings_of(p), 2);
}

static int bindings_held(const resil_policy_t *p)
{
	int n = bindings_of(p);

	for (const struct resil_binding *b = p->spares; b; b = b->next)
		n++;
	return n;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* 20,000 redefinitions of one policy in embedded mode, an acquire after
 * each: every define succeeds (more changes than records: the records of
 * earlier changes come back after their grace period, the defines that
 * need them wait for them), the bind after a change walks nothing, and
 * the bindings a handle holds stop growing: once the grace period is
 * over, the replaced ones are taken again by later binds. */
#define REDEFS 20000
static void test_bindings_bounded(void **unused)
{
	struct resil_embedded_opts o = {.slots = 1024}; /* 4096 records */
	static int64_t first[1000], last[1000];
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	int peak, held;

	(void)unused;
	assert_int_equal(resil_open_embedded(&r, &o), 0);
	assert_int_equal(resil_define(r, "churn", "breaker.window = count:10; breaker.wait = 1s"),
			 0);
	assert_int_equal(resil_policy(r, "churn", &p), 0);
	for (int i = 0; i < REDEFS; i++) {
		int64_t t0;

		assert_int_equal(resil_define(r, "churn",
					      i & 1
						  ? "breaker.window = count:10; breaker.wait = 1s"
						  : "breaker.window = count:10; breaker.wait = 2s"),
				 0);
		t0 = test_mono_ns();
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		if (i < 1000)
			first[i] = test_mono_ns() - t0;
		else if (i >= REDEFS - 1000)
			last[i - (REDEFS - 1000)] = test_mono_ns() - t0;
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	qsort(first, 1000, sizeof(first[0]), cmp_i64);
	qsort(last, 1000, sizeof(last[0]), cmp_i64);
	printf("first acquire after a redefinition, median: %lld ns (changes 1-1000), %lld ns "
	       "(changes %d-%d); bindings held %d\n",
	       (long long)first[500], (long long)last[500], REDEFS - 999, REDEFS, bindings_held(p));
	/* past the grace period, a change retires what the burst left */
	peak = bindings_held(p);
	test_sleep_ms((int)(RESIL_BINDING_GRACE_NS / RESIL_NS_PER_MS) + 100);
	assert_int_equal(resil_define(r, "churn", "breaker.window = count:10; breaker.wait = 3s"),
			 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	assert_int_equal(bindings_of(p), 2); /* the current one and the one it replaced */
	/* a second burst takes the first one's bindings again */
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(resil_define(r, "churn",
					      i & 1
						  ? "breaker.window = count:10; breaker.wait = 1s"
						  : "breaker.window = count:10; breaker.wait = 2s"),
				 0);
		assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
		resil_release(p, &pm, RESIL_SUCCESS);
	}
	held = bindings_held(p);
	assert_true(held <= peak + 1);
	resil_close(r);
}

static void test_segment_full(void **state)
{
	struct resil_embedded_opts o = {.slots = 2};
	resil_t *r = NULL;
	int err = 0, i;
	char name[32];

	assert_int_equal(resil_open_embedded(&r, &o), 0);
	for (i = 0; i < 64; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		err = resil_define(r, name, "bulkhead.max = 3");
		if (err < 0)
			break;
	}
	assert_int_equal(err, -ENOSPC);
	assert_true(i >= 2 && i < 64);
	assert_true(strlen(resil_last_error()) > 0);
	/* the ones that fit still work */
	resil_policy_t *p;
	resil_permit_t pm;
	assert_int_equal(resil_policy(r, "p0", &p), 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	resil_close(r);
}

static void test_open_nothing_listens(void **state)
{
	char dir[] = "/tmp/resil-unit-XXXXXX";
	char path[PATH_MAX];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	resil_t *r = NULL;
	int64_t t0;
	int fd, err;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/none.sock", dir);
	t0 = test_mono_ns();
	err = resil_open(&r, path);
	assert_int_equal(err, -ENOENT);
	assert_null(r);
	assert_true(strstr(resil_last_error(), path) != NULL);

	/* a socket file whose listener is gone: refused at once */
	assert_true(strlen(path) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	err = resil_open(&r, path);
	assert_int_equal(err, -ECONNREFUSED);
	/* "at once": far below the 5 s bound even on a loaded machine */
	assert_true(test_mono_ns() - t0 < 3000000000LL);
	unlink(path);
	rmdir(dir);
}

static void test_open_never_answers(void **state)
{
	char dir[] = "/tmp/resil-unit-XXXXXX";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	resil_t *r = NULL;
	int64_t t0, dt;
	int fd, err;

	assert_non_null(mkdtemp(dir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mute.sock", dir);
	/* listens (as socket activation does) but never accepts nor answers */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	setenv("RESIL_CONNECT_TIMEOUT_MS", "300", 1);
	t0 = test_mono_ns();
	err = resil_open(&r, sa.sun_path);
	dt = test_mono_ns() - t0;
	unsetenv("RESIL_CONNECT_TIMEOUT_MS");
	assert_int_equal(err, -ETIMEDOUT);
	assert_null(r);
	assert_true(dt >= 290000000LL); /* it did wait for the bound */
	assert_true(dt < 5000000000LL); /* and not for the default */
	close(fd);
	unlink(sa.sun_path);
	rmdir(dir);
}

/* A daemon that speaks another segment ABI: -EPROTO, and the message says
 * which versions. */
static void test_open_other_abi(void **state)
{
	char dir[] = "/tmp/resil-unit-XXXXXX";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	resil_t *r = NULL;
	int fd, err, st;
	pid_t pid;

	assert_non_null(mkdtemp(dir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/abi.sock", dir);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		Resil__Response resp = RESIL__RESPONSE__INIT;
		Resil__HelloReply hr = RESIL__HELLO_REPLY__INIT;
		Resil__Request *req;
		uint8_t buf[4096];
		ssize_t n;
		int c = accept(fd, NULL, NULL);

		TEST_CHECK(c >= 0);
		n = recv(c, buf, sizeof(buf), 0);
		TEST_CHECK(n > 0);
		req = resil__request__unpack(NULL, (size_t)n, buf);
		TEST_CHECK(req && req->body_case == RESIL__REQUEST__BODY_HELLO);
		/* the hello offers the one version the library speaks */
		TEST_CHECK(req->hello->min_version == 1 && req->hello->max_version == 1);
		TEST_CHECK(req->version == 1);
		resp.id = req->id;
		hr.version = 1;
		hr.abi_major = RESIL_ABI_MAJOR + 1;
		resp.body_case = RESIL__RESPONSE__BODY_HELLO;
		resp.hello = &hr;
		n = (ssize_t)resil__response__pack(&resp, buf);
		TEST_CHECK(send(c, buf, (size_t)n, 0) == n);
		/* stay until the client hangs up */
		(void)!recv(c, buf, sizeof(buf), 0);
		_exit(0);
	}
	err = resil_open(&r, sa.sun_path);
	assert_int_equal(err, -EPROTO);
	assert_null(r);
	assert_non_null(strstr(resil_last_error(), "ABI"));
	st = test_wait_pid(pid, 10000);
	assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd);
	unlink(sa.sun_path);
	rmdir(dir);
}

static void test_fork_own_row(void **state)
{
	resil_t *r = *state;
	resil_policy_t *p;
	resil_permit_t pm;
	int parent_row, st;
	pid_t pid;

	assert_int_equal(resil_define(r, "forky", "bulkhead.max = 4"), 0);
	assert_int_equal(resil_policy(r, "forky", &p), 0);
	assert_int_equal(resil_acquire(p, &pm), RESIL_ADMIT);
	resil_release(p, &pm, RESIL_SUCCESS);
	parent_row = atomic_load(&r->row);
	assert_true(parent_row >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct resil_client_row *row;

		TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
		TEST_CHECK(atomic_load(&r->row) >= 0);
		TEST_CHECK(atomic_load(&r->row) != parent_row);
		row = resil_seg_client(&r->seg, (uint32_t)atomic_load(&r->row));
		TEST_CHECK((ld_acquire(&row->owner) >> 32) == (uint64_t)getpid());
		TEST_CHECK(r->ctl_fd < 0);
		resil_release(p, &pm, RESIL_SUCCESS);
		resil_close(r);
		_exit(0);
	}
	st = test_wait_pid(pid, 10000);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* the parent's row is still its own */
	assert_int_equal(atomic_load(&r->row), parent_row);
	struct resil_client_row *row = resil_seg_client(&r->seg, (uint32_t)parent_row);
	assert_int_equal(ld_acquire(&row->owner) >> 32, (uint64_t)getpid());
}

static void test_table_full(void **state)
{
	struct resil_embedded_opts o = {.clients = 1};
	resil_t *r = NULL;
	resil_policy_t *p;
	resil_permit_t pm;
	int st;
	pid_t pid;

	assert_int_equal(resil_open_embedded(&r, &o), 0);
	assert_int_equal(resil_define(r, "full", "bulkhead.max = 2"), 0);
	assert_int_equal(resil_policy(r, "full", &p), 0);
	assert_int_equal(atomic_load(&r->row), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* no row left for the child: it still decides, unregistered */
		TEST_CHECK(resil_acquire(p, &pm) == RESIL_ADMIT);
		TEST_CHECK(atomic_load(&r->row) == -1);
		TEST_CHECK(ld_relaxed(&r->seg.st->clients_full) >= 1);
		resil_release(p, &pm, RESIL_SUCCESS);
		_exit(0);
	}
	st = test_wait_pid(pid, 10000);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(ld_relaxed(&r->seg.st->clients_full) >= 1);
	resil_close(r);
}

/* A definer killed while holding the define lock: the next one takes the
 * lock over from the dead pid instead of waiting forever. */
static void test_define_lock_dead_holder(void **state)
{
	resil_t *r = *state;
	pid_t dead = fork();
	int64_t t0;

	assert_true(dead >= 0);
	if (dead == 0)
		_exit(0);
	assert_true(test_wait_pid(dead, 10000) >= 0); /* reaped: the pid is free */
	st_release(&r->seg.st->define_lock, (uint32_t)dead);
	t0 = test_mono_ns();
	assert_int_equal(resil_define(r, "after-dead-holder", "bulkhead.max = 1"), 0);
	assert_true(test_mono_ns() - t0 < 5000000000LL);
	assert_int_equal(ld_acquire(&r->seg.st->define_lock), 0);
}

static int64_t fixed_clock(void *ctx)
{
	return *(int64_t *)ctx;
}

static void test_clock_is_used(void **state)
{
	resil_t *r = *state;
	int64_t now = 123456789;

	assert_int_equal(resil_set_clock(r, fixed_clock, &now), 0);
	assert_int_equal(resil_now(r), 123456789);
	now = 5;
	assert_int_equal(resil_now(r), 5);
	assert_int_equal(resil_set_clock(r, NULL, NULL), 0);
	assert_true(resil_now(r) > 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_null_args, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_garbage_config, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_unknown_policy, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_breaker_opens, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_delete_and_back, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_release_after_reresolve, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_binding_kept, open_emb, close_emb),
	    cmocka_unit_test(test_bindings_bounded),
	    cmocka_unit_test(test_segment_full),
	    cmocka_unit_test(test_open_nothing_listens),
	    cmocka_unit_test(test_open_never_answers),
	    cmocka_unit_test(test_open_other_abi),
	    cmocka_unit_test_setup_teardown(test_fork_own_row, open_emb, close_emb),
	    cmocka_unit_test(test_table_full),
	    cmocka_unit_test_setup_teardown(test_define_lock_dead_holder, open_emb, close_emb),
	    cmocka_unit_test_setup_teardown(test_clock_is_used, open_emb, close_emb),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

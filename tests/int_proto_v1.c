/* SPDX-License-Identifier: MIT */
/*
 * int_proto_v1.c - the control protocol's two versions against one real
 * resild (proto/resil.proto says what each sends).
 *
 *   - version 1 as it was: the requests below are the bytes a version 1
 *     client sent, packed from the version 1 resil.proto (saved here, not
 *     built with today's schema). Each gets a version 1 answer: Hello
 *     chooses 1, Create/Update/ForceState("open")/Reset/Get/List answer
 *     words (state "forced-open", outcome "created"), never the enums;
 *     Metrics answers the text, Status the metrics state as a word.
 *   - version 2: Hello 1..2 chooses 2; Define creates, refuses a name that
 *     exists with must_not_exist (EEXIST), upserts without it (changed,
 *     unchanged), merges only into an existing policy (ENOENT);
 *     ForceState takes its target as an enum and reset as a flag (and
 *     refuses reset with another target); the answers carry the enums and
 *     not the words; a v1-only body in a v2 request is refused (EPROTO), a
 *     version past 2 too (EPROTONOSUPPORT); Metrics answers families of
 *     samples (the slot count's gauge equals the status's slot count).
 *   - resilctl speaks version 2: the daemon's count of v1 requests moves
 *     only by this test's own v1 request while resilctl create, list and
 *     show run, the v2 count by theirs; `resilctl metrics` renders the same
 *     lines (names and labels, value aside) as the v1 text.
 *
 * The daemon runs as the test's user; every wait is the daemon's start
 * (10 s at most).
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
#include <unistd.h>

#include <cmocka.h>

#include "resil.pb-c.h"
#include "testutil.h"

static struct test_daemon daemon_;
static bool daemon_up;
static char out[65536];

/* Version 1 requests, packed by protoc-c from the version 1 resil.proto. */
struct saved {
	const char *what;
	uint8_t bytes[64];
	size_t len;
};
static const struct saved v1[] = {
    {"hello 1..1 (id 1)",
     {0x08, 0x01, 0x52, 0x08, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x02, 0x76, 0x31},
     12},
    {"create v1pol 'breaker.failure_rate = 50' exclusive (id 2)",
     {0x08, 0x02, 0x72, 0x24, 0x0a, 0x05, 0x76, 0x31, 0x70, 0x6f, 0x6c, 0x12, 0x19, 0x62,
      0x72, 0x65, 0x61, 0x6b, 0x65, 0x72, 0x2e, 0x66, 0x61, 0x69, 0x6c, 0x75, 0x72, 0x65,
      0x5f, 0x72, 0x61, 0x74, 0x65, 0x20, 0x3d, 0x20, 0x35, 0x30, 0x18, 0x01},
     40},
    {"update v1pol 'breaker.failure_rate = 60' (id 3)",
     {0x08, 0x03, 0x7a, 0x22, 0x0a, 0x05, 0x76, 0x31, 0x70, 0x6f, 0x6c, 0x12, 0x19,
      0x62, 0x72, 0x65, 0x61, 0x6b, 0x65, 0x72, 0x2e, 0x66, 0x61, 0x69, 0x6c, 0x75,
      0x72, 0x65, 0x5f, 0x72, 0x61, 0x74, 0x65, 0x20, 0x3d, 0x20, 0x36, 0x30},
     38},
    {"force v1pol 'open' (id 4)",
     {0x08, 0x04, 0x8a, 0x01, 0x0d, 0x0a, 0x05, 0x76, 0x31, 0x70, 0x6f, 0x6c, 0x12, 0x04, 0x6f,
      0x70, 0x65, 0x6e},
     18},
    {"reset v1pol (id 5)",
     {0x08, 0x05, 0x92, 0x01, 0x07, 0x0a, 0x05, 0x76, 0x31, 0x70, 0x6f, 0x6c},
     12},
    {"get v1pol (id 6)", {0x08, 0x06, 0x6a, 0x07, 0x0a, 0x05, 0x76, 0x31, 0x70, 0x6f, 0x6c}, 11},
    {"list (id 7)", {0x08, 0x07, 0x62, 0x00}, 4},
    {"metrics (id 8)", {0x08, 0x08, 0xa2, 0x01, 0x00}, 5},
    {"status (id 9)", {0x08, 0x09, 0xb2, 0x01, 0x00}, 5},
};
enum { V1_HELLO, V1_CREATE, V1_UPDATE, V1_FORCE, V1_RESET, V1_GET, V1_LIST, V1_METRICS, V1_STATUS };

static int setup(void **state)
{
	(void)state;
	if (test_daemon_init(&daemon_) < 0)
		return -1;
	if (test_daemon_start(&daemon_, NULL) < 0) {
		test_daemon_fini(&daemon_);
		return -1;
	}
	daemon_up = true;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (daemon_up)
		test_daemon_fini(&daemon_);
	daemon_up = false;
	return 0;
}

static int connect_ctl(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(daemon_.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, daemon_.sock, strlen(daemon_.sock) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Send one request's bytes, answer the reply to it (events skipped). */
static Resil__Response *call_bytes(int fd, const uint8_t *msg, size_t len)
{
	static uint8_t buf[70000];
	Resil__Response *r;
	ssize_t n;

	assert_int_equal(send(fd, msg, len, 0), (ssize_t)len);
	for (;;) {
		n = recv(fd, buf, sizeof(buf), 0);
		assert_true(n > 0);
		r = resil__response__unpack(NULL, (size_t)n, buf);
		assert_non_null(r);
		if (r->id != 0)
			return r;
		resil__response__free_unpacked(r, NULL);
	}
}

static Resil__Response *call(int fd, Resil__Request *req)
{
	uint8_t msg[4096];
	size_t len = resil__request__pack(req, msg);

	return call_bytes(fd, msg, len);
}

static int err_of(const Resil__Response *r)
{
	return r->error ? (int)r->error->errno_value : 0;
}

/* A v1 PolicyInfo: the words, none of v2's enums. */
static void expect_v1_policy(const Resil__Response *r, const char *state, const char *outcome)
{
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_POLICY);
	assert_string_equal(r->policy->state, state);
	assert_string_equal(r->policy->outcome, outcome);
	assert_int_equal(r->policy->breaker, 0);
	assert_int_equal(r->policy->result, 0);
}

static void test_v1_saved(void **state)
{
	int fd = connect_ctl();
	Resil__Response *r;
	bool found = false;

	(void)state;
	r = call_bytes(fd, v1[V1_HELLO].bytes, v1[V1_HELLO].len);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_HELLO);
	assert_int_equal(r->hello->version, 1);
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_CREATE].bytes, v1[V1_CREATE].len);
	assert_int_equal(r->id, 2);
	expect_v1_policy(r, "closed", "created");
	resil__response__free_unpacked(r, NULL);
	/* exclusive: a second create of the name is refused */
	r = call_bytes(fd, v1[V1_CREATE].bytes, v1[V1_CREATE].len);
	assert_int_equal(err_of(r), EEXIST);
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_UPDATE].bytes, v1[V1_UPDATE].len);
	expect_v1_policy(r, "closed", "changed");
	assert_non_null(strstr(r->policy->config, "breaker.failure_rate = 60"));
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_FORCE].bytes, v1[V1_FORCE].len);
	expect_v1_policy(r, "forced-open", "");
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_RESET].bytes, v1[V1_RESET].len);
	expect_v1_policy(r, "closed", "");
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_GET].bytes, v1[V1_GET].len);
	expect_v1_policy(r, "closed", "");
	assert_string_equal(r->policy->name, "v1pol");
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_LIST].bytes, v1[V1_LIST].len);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_LIST);
	for (size_t i = 0; i < r->list->n_policies; i++) {
		assert_int_equal(r->list->policies[i]->breaker, 0);
		if (!strcmp(r->list->policies[i]->name, "v1pol")) {
			assert_string_equal(r->list->policies[i]->state, "closed");
			found = true;
		}
	}
	assert_true(found);
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_METRICS].bytes, v1[V1_METRICS].len);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_METRICS);
	assert_non_null(strstr(r->metrics->text, "# TYPE resil_policy_slots gauge\n"));
	assert_int_equal(r->metrics->n_families, 0);
	resil__response__free_unpacked(r, NULL);

	r = call_bytes(fd, v1[V1_STATUS].bytes, v1[V1_STATUS].len);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_STATUS);
	assert_string_equal(r->status->metrics_state, "off");
	resil__response__free_unpacked(r, NULL);
	close(fd);
}

/* A v2 Define of v2pol; the response (caller frees). */
static Resil__Response *define(int fd, const char *config, bool must_not_exist, bool merge,
			       const char *name)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Define df = RESIL__DEFINE__INIT;

	df.name = (char *)name;
	df.config = (char *)config;
	df.must_not_exist = must_not_exist;
	df.merge = merge;
	req.id = 20;
	req.version = 2;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	return call(fd, &req);
}

static Resil__Response *force(int fd, Resil__BreakerState target, bool reset)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;

	f.name = "v2pol";
	f.target = target;
	f.reset = reset;
	req.id = 21;
	req.version = 2;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	return call(fd, &req);
}

static void expect_v2_policy(Resil__Response *r, Resil__BreakerState s, Resil__Outcome o)
{
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_POLICY);
	assert_int_equal(r->policy->breaker, s);
	assert_int_equal(r->policy->result, o);
	assert_string_equal(r->policy->state, "");
	assert_string_equal(r->policy->outcome, "");
	resil__response__free_unpacked(r, NULL);
}

static void expect_err(Resil__Response *r, int err)
{
	if (err_of(r) != err)
		fprintf(stderr, "expected errno %d, got %d: %s\n", err, err_of(r),
			r->error ? r->error->message : "");
	assert_int_equal(err_of(r), err);
	resil__response__free_unpacked(r, NULL);
}

static void test_v2(void **state)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello h = RESIL__HELLO__INIT;
	Resil__Create c = RESIL__CREATE__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Status st = RESIL__STATUS__INIT;
	Resil__Response *r;
	uint32_t slots;
	bool seen = false;
	int fd = connect_ctl();

	(void)state;
	h.min_version = 1;
	h.max_version = 2;
	req.id = 1;
	req.version = 2;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &h;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->hello->version, 2);
	resil__response__free_unpacked(r, NULL);

	expect_v2_policy(define(fd, "breaker.failure_rate = 50", true, false, "v2pol"),
			 RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CREATED);
	expect_err(define(fd, "breaker.failure_rate = 50", true, false, "v2pol"), EEXIST);
	expect_v2_policy(define(fd, "breaker.failure_rate = 70", false, false, "v2pol"),
			 RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CHANGED);
	expect_v2_policy(define(fd, "breaker.failure_rate = 70", false, false, "v2pol"),
			 RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_UNCHANGED);
	expect_err(define(fd, "breaker.failure_rate = 70", false, true, "v2absent"), ENOENT);
	expect_v2_policy(define(fd, "breaker.failure_rate = 80", false, true, "v2pol"),
			 RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CHANGED);

	expect_v2_policy(force(fd, RESIL__BREAKER_STATE__BREAKER_OPEN, false),
			 RESIL__BREAKER_STATE__BREAKER_FORCED_OPEN, RESIL__OUTCOME__OUTCOME_NONE);
	expect_err(force(fd, RESIL__BREAKER_STATE__BREAKER_OPEN, true), EINVAL);
	expect_err(force(fd, RESIL__BREAKER_STATE__BREAKER_NONE, false), EINVAL);
	expect_v2_policy(force(fd, RESIL__BREAKER_STATE__BREAKER_NONE, true),
			 RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_NONE);

	/* version 1 bodies are not version 2 */
	c.name = "v2other";
	c.config = "";
	req.body_case = RESIL__REQUEST__BODY_CREATE;
	req.create = &c;
	expect_err(call(fd, &req), EPROTO);
	req.version = 3;
	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	expect_err(call(fd, &req), EPROTONOSUPPORT);

	req.version = 2;
	req.body_case = RESIL__REQUEST__BODY_STATUS;
	req.status = &st;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_string_equal(r->status->metrics_state, "");
	assert_int_equal(r->status->metrics, RESIL__METRICS_STATE__METRICS_OFF);
	slots = r->status->policy_slots;
	resil__response__free_unpacked(r, NULL);

	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_string_equal(r->metrics->text, "");
	assert_false(r->metrics->truncated);
	assert_true(r->metrics->n_families > 10);
	for (size_t i = 0; i < r->metrics->n_families; i++) {
		const Resil__MetricFamily *f = r->metrics->families[i];

		if (strcmp(f->name, "resil_policy_slots"))
			continue;
		assert_int_equal(f->type, RESIL__METRIC_TYPE__METRIC_GAUGE);
		assert_true(*f->help != '\0');
		assert_int_equal(f->n_samples, 1);
		assert_int_equal(f->samples[0]->n_labels, 0);
		assert_true(f->samples[0]->value == (double)slots);
		seen = true;
	}
	assert_true(seen);
	resil__response__free_unpacked(r, NULL);
	close(fd);
}

/* resilctl --socket SOCK ARGS... into out; its exit code. */
static int ctl(const char *arg0, ...)
{
	const char *argv[16] = {RESILCTL_PATH, "--socket", daemon_.sock, arg0};
	int n = 4, r;
	va_list ap;

	va_start(ap, arg0);
	while (n < 15 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	r = test_run(argv, NULL, out, sizeof(out));
	if (r != 0)
		fprintf(stderr, "resilctl %s ...: exit %d: %s\n", arg0, r, out);
	return r;
}

/* resil_control_requests_total{version="v"} in a v1 metrics text */
static unsigned long long requests_of(const char *text, int v)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "resil_control_requests_total{version=\"%d\"} ", v);
	p = strstr(text, key);
	assert_non_null(p);
	return strtoull(p + strlen(key), NULL, 10);
}

/* The exposition with each sample's value cut off: names and labels. */
static void skeleton(const char *text, char *buf, size_t len)
{
	size_t o = 0;

	for (const char *l = text; *l;) {
		const char *e = strchr(l, '\n'), *sp;
		size_t n;

		if (!e)
			e = l + strlen(l);
		sp = e;
		if (*l != '#')
			for (sp = e; sp > l && sp[-1] != ' '; sp--)
				;
		n = (size_t)(sp - l);
		assert_true(o + n + 2 < len);
		memcpy(buf + o, l, n);
		o += n;
		buf[o++] = '\n';
		l = *e ? e + 1 : e;
	}
	buf[o] = '\0';
}

static void test_resilctl_v2(void **state)
{
	static char v1text[65536], a[65536], b[65536];
	unsigned long long v1_before, v2_before;
	int fd = connect_ctl();
	Resil__Response *r;

	(void)state;
	r = call_bytes(fd, v1[V1_METRICS].bytes, v1[V1_METRICS].len);
	v1_before = requests_of(r->metrics->text, 1);
	v2_before = requests_of(r->metrics->text, 2);
	resil__response__free_unpacked(r, NULL);

	assert_int_equal(ctl("create", "ctlpol", "breaker.failure_rate = 40", NULL), 0);
	assert_non_null(strstr(out, "ctlpol: created"));
	assert_int_equal(ctl("apply", "ctlpol", "breaker.failure_rate = 40", NULL), 0);
	assert_non_null(strstr(out, "ctlpol: unchanged"));
	assert_int_equal(ctl("list", NULL), 0);
	assert_non_null(strstr(out, "ctlpol"));
	assert_int_equal(ctl("--json", "show", "ctlpol", NULL), 0);
	assert_non_null(strstr(out, "\"state\":\"closed\""));

	r = call_bytes(fd, v1[V1_METRICS].bytes, v1[V1_METRICS].len);
	snprintf(v1text, sizeof(v1text), "%s", r->metrics->text);
	resil__response__free_unpacked(r, NULL);
	/* this request is the one v1 request meanwhile; each resilctl said
	 * hello and asked once, in version 2 */
	assert_int_equal(requests_of(v1text, 1), v1_before + 1);
	assert_true(requests_of(v1text, 2) >= v2_before + 8);

	/* the text resilctl renders from the samples: the same lines */
	assert_int_equal(ctl("metrics", NULL), 0);
	skeleton(out, a, sizeof(a));
	skeleton(v1text, b, sizeof(b));
	if (strcmp(a, b))
		fprintf(stderr, "resilctl metrics:\n%s\nv1 text:\n%s\n", a, b);
	assert_string_equal(a, b);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v1_saved),
	    cmocka_unit_test(test_v2),
	    cmocka_unit_test(test_resilctl_v2),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}

/* SPDX-License-Identifier: MIT */
/*
 * int_proto.c - the control protocol against one real resild
 * (proto/resil.proto):
 *
 *   - Hello 1..1 chooses 1; a range resild does not speak is refused
 *     (EPROTONOSUPPORT), and so is a request naming a later version;
 *   - Define creates, refuses a name that exists with must_not_exist
 *     (EEXIST), upserts without it (changed, unchanged), merges only into
 *     an existing policy (ENOENT); ForceState takes its target as an enum
 *     and reset as a flag (and refuses reset with another target); the
 *     answers carry the breaker state and the Define's outcome as enums;
 *   - Status answers the metrics listener's state; Metrics answers
 *     families of samples (the slot count's gauge equals the status's
 *     slot count);
 *   - resilctl speaks it: the daemon's count of version 1 requests moves by
 *     every hello and request of resilctl create, apply, list and show;
 *     `resilctl metrics` renders every family of a Metrics reply, by name
 *     and type.
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

/* A Define of name; the response (caller frees). */
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
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_DEFINE;
	req.define = &df;
	return call(fd, &req);
}

static Resil__Response *force(int fd, Resil__BreakerState target, bool reset)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__ForceState f = RESIL__FORCE_STATE__INIT;

	f.name = "pol";
	f.target = target;
	f.reset = reset;
	req.id = 21;
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_FORCE;
	req.force = &f;
	return call(fd, &req);
}

static void expect_policy(Resil__Response *r, Resil__BreakerState s, Resil__Outcome o)
{
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_POLICY);
	assert_int_equal(r->policy->breaker, s);
	assert_int_equal(r->policy->result, o);
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

static void test_protocol(void **state)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello h = RESIL__HELLO__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Status st = RESIL__STATUS__INIT;
	Resil__Response *r;
	uint32_t slots;
	bool seen = false;
	int fd = connect_ctl();

	(void)state;
	h.min_version = 2;
	h.max_version = 3;
	req.id = 1;
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &h;
	expect_err(call(fd, &req), EPROTONOSUPPORT);
	h.min_version = 1;
	h.max_version = 1;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->hello->version, 1);
	resil__response__free_unpacked(r, NULL);

	expect_policy(define(fd, "breaker.failure_rate = 50", true, false, "pol"),
		      RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CREATED);
	expect_err(define(fd, "breaker.failure_rate = 50", true, false, "pol"), EEXIST);
	expect_policy(define(fd, "breaker.failure_rate = 70", false, false, "pol"),
		      RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CHANGED);
	expect_policy(define(fd, "breaker.failure_rate = 70", false, false, "pol"),
		      RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_UNCHANGED);
	expect_err(define(fd, "breaker.failure_rate = 70", false, true, "absent"), ENOENT);
	expect_policy(define(fd, "breaker.failure_rate = 80", false, true, "pol"),
		      RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_CHANGED);

	expect_policy(force(fd, RESIL__BREAKER_STATE__BREAKER_OPEN, false),
		      RESIL__BREAKER_STATE__BREAKER_FORCED_OPEN, RESIL__OUTCOME__OUTCOME_NONE);
	expect_err(force(fd, RESIL__BREAKER_STATE__BREAKER_OPEN, true), EINVAL);
	expect_err(force(fd, RESIL__BREAKER_STATE__BREAKER_NONE, false), EINVAL);
	expect_policy(force(fd, RESIL__BREAKER_STATE__BREAKER_NONE, true),
		      RESIL__BREAKER_STATE__BREAKER_CLOSED, RESIL__OUTCOME__OUTCOME_NONE);

	/* a version past resild's */
	req.version = 2;
	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	expect_err(call(fd, &req), EPROTONOSUPPORT);

	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_STATUS;
	req.status = &st;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->status->metrics, RESIL__METRICS_STATE__METRICS_OFF);
	slots = r->status->policy_slots;
	resil__response__free_unpacked(r, NULL);

	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
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

/* A Metrics request's reply (caller frees). */
static Resil__Response *metrics(int fd)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Metrics m = RESIL__METRICS__INIT;
	Resil__Response *r;

	req.id = 30;
	req.version = 1;
	req.body_case = RESIL__REQUEST__BODY_METRICS;
	req.metrics = &m;
	r = call(fd, &req);
	assert_int_equal(err_of(r), 0);
	assert_int_equal(r->body_case, RESIL__RESPONSE__BODY_METRICS);
	return r;
}

/* resil_control_requests_total{version="1"} in a Metrics reply */
static double requests_v1(const Resil__MetricsReply *m)
{
	for (size_t i = 0; i < m->n_families; i++) {
		const Resil__MetricFamily *f = m->families[i];

		if (strcmp(f->name, "resil_control_requests_total"))
			continue;
		for (size_t j = 0; j < f->n_samples; j++)
			if (f->samples[j]->n_labels == 1 &&
			    !strcmp(f->samples[j]->labels[0]->name, "version") &&
			    !strcmp(f->samples[j]->labels[0]->value, "1"))
				return f->samples[j]->value;
	}
	fail_msg("no resil_control_requests_total{version=\"1\"}");
	return 0;
}

static void test_resilctl(void **state)
{
	static const char *const types[] = {"untyped", "counter", "gauge", "histogram", "summary"};
	int fd = connect_ctl();
	Resil__Response *r;
	double before, after;
	char line[256];

	(void)state;
	r = metrics(fd);
	before = requests_v1(r->metrics);
	resil__response__free_unpacked(r, NULL);

	assert_int_equal(ctl("create", "ctlpol", "breaker.failure_rate = 40", NULL), 0);
	assert_non_null(strstr(out, "ctlpol: created"));
	assert_int_equal(ctl("apply", "ctlpol", "breaker.failure_rate = 40", NULL), 0);
	assert_non_null(strstr(out, "ctlpol: unchanged"));
	assert_int_equal(ctl("list", NULL), 0);
	assert_non_null(strstr(out, "ctlpol"));
	assert_int_equal(ctl("--json", "show", "ctlpol", NULL), 0);
	assert_non_null(strstr(out, "\"state\":\"closed\""));

	/* each resilctl said hello and asked at least once, in version 1;
	 * this test's own Metrics request counts too */
	r = metrics(fd);
	after = requests_v1(r->metrics);
	assert_true(after >= before + 9);

	/* the text resilctl renders from the samples: every family */
	assert_int_equal(ctl("metrics", NULL), 0);
	for (size_t i = 0; i < r->metrics->n_families; i++) {
		const Resil__MetricFamily *f = r->metrics->families[i];

		assert_true((unsigned)f->type < 5);
		snprintf(line, sizeof(line), "# TYPE %s %s\n", f->name, types[f->type]);
		if (!strstr(out, line))
			fail_msg("resilctl metrics lacks '%s'", line);
	}
	resil__response__free_unpacked(r, NULL);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_protocol),
	    cmocka_unit_test(test_resilctl),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}

/* SPDX-License-Identifier: MIT */
/*
 * unit_metrics.c - the Prometheus exposition (shm/metrics.c) against the
 * text format 0.0.4, with a small strict parser:
 *   - every line is "# HELP name text", "# TYPE name type" or a sample;
 *   - metric and label names have the format's syntax, label values only
 *     the escapes \\ \" \n, values are Go floats (or +Inf, -Inf, NaN);
 *   - a family's HELP and TYPE come once, before its samples; its samples
 *     are contiguous and named after it (histograms: _bucket, _sum,
 *     _count); no series twice;
 *   - histograms: le ascending per series, counts cumulative, a +Inf
 *     bucket equal to _count, a _sum;
 * and the values: what a known workload (embedded mode, manual clock)
 * must show. Also: escaping of hostile names, snprintf semantics.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf.h"
#include "internal.h"
#include "metrics.h"
#include "stats.h"
#include "testutil.h"
#include "http.h"
#include "seg_records.h"

/* ---- the parser ---- */

#define MAXF 64
#define MAXS 4096

struct sample {
	char name[128];
	char labels[512]; /* canonical: name="value",... in order, without le */
	char le[64];
	double value;
	int family;
};

struct parsed {
	char fam[MAXF][128];
	char type[MAXF][16];
	bool help[MAXF];
	int nfam;
	struct sample s[MAXS];
	int ns;
};

static bool name_ok(const char *p, size_t n, bool label)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			     (!label && c == ':');

		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

static bool value_ok(const char *v, double *out)
{
	char *end;

	if (!strcmp(v, "+Inf")) {
		*out = __builtin_inf();
		return true;
	}
	if (!strcmp(v, "-Inf")) {
		*out = -__builtin_inf();
		return true;
	}
	if (!strcmp(v, "NaN")) {
		*out = __builtin_nan("");
		return true;
	}
	if (!*v || strchr(v, ' '))
		return false;
	*out = strtod(v, &end);
	return *end == '\0';
}

static int find_family(struct parsed *p, const char *name, size_t n)
{
	for (int i = 0; i < p->nfam; i++)
		if (strlen(p->fam[i]) == n && !strncmp(p->fam[i], name, n))
			return i;
	return -1;
}

/* Which family a sample name belongs to: its own, or a histogram's. */
static int family_of(struct parsed *p, const char *name)
{
	static const char *const sfx[] = {"_bucket", "_sum", "_count"};
	size_t n = strlen(name);
	int f = find_family(p, name, n);

	if (f >= 0 && strcmp(p->type[f], "histogram"))
		return f;
	for (unsigned i = 0; i < 3; i++) {
		size_t k = strlen(sfx[i]);

		if (n > k && !strcmp(name + n - k, sfx[i])) {
			f = find_family(p, name, n - k);
			if (f >= 0 && !strcmp(p->type[f], "histogram"))
				return f;
		}
	}
	return -1;
}

/* Why the last text was rejected. */
static char perr[512];
#define BAD(...)                                                                                   \
	do {                                                                                       \
		snprintf(perr, sizeof(perr), __VA_ARGS__);                                         \
		return false;                                                                      \
	} while (0)

static bool parse_line(struct parsed *p, char *line, int lineno, int *cur)
{
	if (line[0] == '#') {
		char kw[8], name[128];
		int off = 0, f;

		if (sscanf(line, "# %7s %127s %n", kw, name, &off) < 2)
			BAD("line %d: bad comment: %s", lineno, line);
		if (strcmp(kw, "HELP") && strcmp(kw, "TYPE"))
			return true; /* a plain comment */
		if (!name_ok(name, strlen(name), false))
			BAD("line %d: bad metric name %s", lineno, name);
		f = find_family(p, name, strlen(name));
		if (f < 0) {
			assert_true(p->nfam < MAXF);
			f = p->nfam++;
			strcpy(p->fam[f], name);
		} else if (f != *cur) {
			BAD("line %d: family %s comes back after others", lineno, name);
		}
		if (!strcmp(kw, "HELP")) {
			if (p->help[f])
				BAD("line %d: second HELP for %s", lineno, name);
			p->help[f] = true;
		} else {
			const char *t = line + off;

			if (p->type[f][0])
				BAD("line %d: second TYPE for %s", lineno, name);
			for (int i = 0; i < p->ns; i++)
				if (p->s[i].family == f)
					BAD("line %d: TYPE after samples of %s", lineno, name);
			if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
			    strcmp(t, "summary") && strcmp(t, "untyped"))
				BAD("line %d: bad type %s", lineno, t);
			snprintf(p->type[f], sizeof(p->type[f]), "%s", t);
		}
		*cur = f;
		return true;
	}

	struct sample *s;
	char *q = line, *lab;
	size_t n = strcspn(line, "{ ");

	assert_true(p->ns < MAXS);
	s = &p->s[p->ns];
	memset(s, 0, sizeof(*s));
	if (!name_ok(line, n, false) || n >= sizeof(s->name))
		BAD("line %d: bad sample name: %s", lineno, line);
	memcpy(s->name, line, n);
	q = line + n;
	lab = s->labels;
	if (*q == '{') {
		q++;
		while (*q != '}') {
			char lname[64], lval[256];
			size_t ln = strcspn(q, "=");
			size_t vi = 0;

			if (!name_ok(q, ln, true) || ln >= sizeof(lname) || q[ln] != '=' ||
			    q[ln + 1] != '"')
				BAD("line %d: bad label at: %s", lineno, q);
			memcpy(lname, q, ln);
			lname[ln] = '\0';
			q += ln + 2;
			while (*q != '"') {
				if (!*q || *q == '\n')
					BAD("line %d: unterminated label value", lineno);
				if (*q == '\\') {
					if (q[1] != '\\' && q[1] != '"' && q[1] != 'n')
						BAD("line %d: bad escape \\%c", lineno, q[1]);
					lval[vi++] = q[1] == 'n' ? '\n' : q[1];
					q += 2;
				} else {
					lval[vi++] = *q++;
				}
				assert_true(vi < sizeof(lval) - 1);
			}
			lval[vi] = '\0';
			q++;
			if (!strcmp(lname, "le")) {
				snprintf(s->le, sizeof(s->le), "%.63s", lval);
			} else {
				lab += snprintf(lab, sizeof(s->labels) - (size_t)(lab - s->labels),
						"%s=%s,", lname, lval);
			}
			if (*q == ',')
				q++;
			else if (*q != '}')
				BAD("line %d: expected , or } at: %s", lineno, q);
		}
		q++;
	}
	if (*q != ' ')
		BAD("line %d: no space before the value: %s", lineno, line);
	q++;
	{
		char v[64];
		size_t vn = strcspn(q, " ");

		if (vn >= sizeof(v))
			BAD("line %d: value too long", lineno);
		memcpy(v, q, vn);
		v[vn] = '\0';
		if (!value_ok(v, &s->value))
			BAD("line %d: bad value '%s'", lineno, v);
		if (q[vn] == ' ') {
			char *end;

			strtoll(q + vn + 1, &end, 10);
			if (*end)
				BAD("line %d: bad timestamp", lineno);
		}
	}
	s->family = family_of(p, s->name);
	if (s->family < 0 || !p->type[s->family][0])
		BAD("line %d: sample %s without a TYPE before it", lineno, s->name);
	if (s->family != *cur)
		BAD("line %d: sample %s outside its family's block", lineno, s->name);
	if (!p->help[s->family])
		BAD("line %d: family of %s has no HELP", lineno, s->name);
	if (!strcmp(p->type[s->family], "counter") && !(s->value >= 0))
		BAD("line %d: negative counter", lineno);
	if (s->le[0] && (strcmp(p->type[s->family], "histogram") || !strstr(s->name, "_bucket")))
		BAD("line %d: le outside a histogram bucket", lineno);
	/* no series twice */
	for (int i = 0; i < p->ns; i++)
		if (!strcmp(p->s[i].name, s->name) && !strcmp(p->s[i].labels, s->labels) &&
		    !strcmp(p->s[i].le, s->le))
			BAD("line %d: series %s{%s} twice", lineno, s->name, s->labels);
	p->ns++;
	return true;
}

static bool check_histograms(struct parsed *p)
{
	for (int i = 0; i < p->ns; i++) {
		struct sample *s = &p->s[i];
		const char *fam;
		char nm[160];
		double prev_le = -__builtin_inf(), prev = 0, inf = -1, count = -1;
		bool sum = false;
		int nb = 0;

		if (strcmp(p->type[s->family], "histogram") || !strstr(s->name, "_count"))
			continue;
		fam = p->fam[s->family];
		count = s->value;
		for (int j = 0; j < p->ns; j++) {
			struct sample *b = &p->s[j];

			if (b->family != s->family || strcmp(b->labels, s->labels))
				continue;
			snprintf(nm, sizeof(nm), "%s_sum", fam);
			if (!strcmp(b->name, nm))
				sum = true;
			snprintf(nm, sizeof(nm), "%s_bucket", fam);
			if (strcmp(b->name, nm))
				continue;
			double le;

			if (!b->le[0] || !value_ok(b->le, &le))
				BAD("%s{%s}: bucket without a valid le", fam, s->labels);
			if (!(le > prev_le))
				BAD("%s{%s}: le %s not ascending", fam, s->labels, b->le);
			if (b->value < prev)
				BAD("%s{%s}: le %s not cumulative", fam, s->labels, b->le);
			prev_le = le;
			prev = b->value;
			nb++;
			if (le == __builtin_inf())
				inf = b->value;
		}
		if (!nb || inf < 0)
			BAD("%s{%s}: no +Inf bucket", fam, s->labels);
		if (prev_le != __builtin_inf())
			BAD("%s{%s}: +Inf is not the last bucket", fam, s->labels);
		if (inf != count)
			BAD("%s{%s}: +Inf %g != _count %g", fam, s->labels, inf, count);
		if (!sum)
			BAD("%s{%s}: no _sum", fam, s->labels);
	}
	return true;
}

static bool parse_text(struct parsed *p, const char *text)
{
	char *copy = strdup(text), *save = NULL, *line;
	int lineno = 0, cur = -1;
	size_t n = strlen(text);

	bool ok = true;

	assert_non_null(copy);
	memset(p, 0, sizeof(*p));
	perr[0] = '\0';
	if (!n || text[n - 1] != '\n' || strstr(text, "\n\n") || strchr(text, '\r')) {
		free(copy);
		BAD("not a sequence of \\n-terminated, non-empty lines");
	}
	for (line = strtok_r(copy, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save))
		ok = parse_line(p, line, ++lineno, &cur);
	free(copy);
	if (!ok)
		return false;
	for (int f = 0; f < p->nfam; f++)
		if (!p->type[f][0])
			BAD("family %s has HELP but no TYPE", p->fam[f]);
	return check_histograms(p);
}

static void parse(struct parsed *p, const char *text)
{
	if (!parse_text(p, text))
		fail_msg("exposition rejected: %s\n%s", perr, text);
}

static bool value_of(struct parsed *p, const char *name, const char *labels, const char *le,
		     double *v)
{
	for (int i = 0; i < p->ns; i++)
		if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels) &&
		    !strcmp(p->s[i].le, le ? le : "")) {
			*v = p->s[i].value;
			return true;
		}
	return false;
}

static double must(struct parsed *p, const char *name, const char *labels, const char *le)
{
	double v;

	if (!value_of(p, name, labels, le, &v))
		fail_msg("no sample %s{%s%s%s}", name, labels, le ? " le=" : "", le ? le : "");
	return v;
}

static char *metrics(const struct resil_seg *s)
{
	size_t need = resil_metrics_text(s, NULL, 0), got;
	char *buf = malloc(need + 1);

	assert_non_null(buf);
	got = resil_metrics_text(s, buf, need + 1);
	assert_int_equal(got, need);
	assert_int_equal(strlen(buf), need);
	return buf;
}

/* ---- the parser itself rejects what it must ---- */

static void test_parser_rejects(void **state)
{
	static const char *const good =
	    "# HELP a_total x\n# TYPE a_total counter\na_total{policy=\"x\\\"y\\n\"} 3\n"
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
	    "h_sum 0.5\nh_count 2\n";
	static const char *const bad[] = {
	    "# HELP a x\n# TYPE a counter\na 1",		     /* no final newline */
	    "a 1\n",						     /* no TYPE */
	    "# HELP a x\n# TYPE a counter\n9a 1\n",		     /* metric name */
	    "# HELP a x\n# TYPE a counter\na{9l=\"v\"} 1\n",	     /* label name */
	    "# HELP a x\n# TYPE a counter\na{l=\"\\t\"} 1\n",	     /* escape */
	    "# HELP a x\n# TYPE a counter\na{l=\"v} 1\n",	     /* unterminated */
	    "# HELP a x\n# TYPE a counter\na 1x\n",		     /* value */
	    "# HELP a x\n# TYPE a counter\na -1\n",		     /* negative counter */
	    "# HELP a x\n# TYPE a counter\na 1\na 2\n",		     /* series twice */
	    "# HELP a x\n# TYPE a counter\na 1\n# TYPE a counter\n", /* TYPE twice */
	    "# HELP a x\n# TYPE a counter\n# HELP b x\n# TYPE b gauge\nb 1\na 1\n",
	    "# HELP a x\n# TYPE a bogus\na 1\n", /* type */
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
	    "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", /* le order */
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
	    "h_sum 1\nh_count 1\n", /* not cumulative */
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
	    "h_sum 1\nh_count 3\n", /* +Inf != count */
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
	    "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", /* sum */
	    "# HELP a x\n# TYPE a gauge\na{le=\"1\"} 1\n", /* le in a gauge */
	    "# HELP a x\n# TYPE a counter\na 1\n\n",	   /* empty line */
	};
	struct parsed *p = malloc(sizeof(*p));

	assert_non_null(p);
	parse(p, good);
	assert_int_equal(p->ns, 5);
	assert_int_equal(must(p, "a_total", "policy=x\"y\n,", NULL), 3);
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(bad); i++)
		if (parse_text(p, bad[i]))
			fail_msg("bad text %u accepted:\n%s", i, bad[i]);
		else
			print_message("rejected %2u: %s\n", i, perr);
	free(p);
}

/* ---- the exposition of a known workload ---- */

static void test_exposition(void **state)
{
	struct test_clock *clk = test_clock_new(1000 * RESIL_NS_PER_S);
	struct parsed *p = malloc(sizeof(*p));
	resil_t *r;
	resil_policy_t *db, *cache;
	char *text;
	double v, prev;

	assert_non_null(p);
	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_set_clock(r, test_clock_fn, clk), 0);
	assert_int_equal(resil_define(r, "db",
				      "histogram = on; breaker.slow_call = 40ms; "
				      "breaker.slow_call_rate = 50; "
				      "breaker.min_calls = 1000; bulkhead.max = 2"),
			 0);
	assert_int_equal(resil_define(r, "cache",
				      "breaker.window = consecutive:3; "
				      "breaker.wait = 10s"),
			 0);
	assert_int_equal(resil_define(r, "api", "retry.budget = grpc:10:0.1"), 0);
	assert_int_equal(resil_policy(r, "db", &db), 0);
	assert_int_equal(resil_policy(r, "cache", &cache), 0);

	/* empty: parses, zeros */
	text = metrics(&r->seg);
	parse(p, text);
	assert_int_equal(must(p, "resil_calls_total", "policy=db,outcome=success,", NULL), 0);
	assert_int_equal(must(p, "resil_call_duration_seconds_count", "policy=db,", NULL), 0);
	assert_int_equal(must(p, "resil_policies", "", NULL), 3);
	free(text);

	/* db: 40 calls of 1..40 ms, every 4th a failure; 10 rejected (bulkhead) */
	for (int i = 1; i <= 40; i++) {
		resil_permit_t a, b, c;

		assert_int_equal(resil_acquire(db, &a), 0);
		assert_int_equal(resil_acquire(db, &b), 0);
		if (i <= 10)
			assert_int_equal(resil_acquire(db, &c), RESIL_REJECT_FULL);
		resil_release(db, &b, RESIL_IGNORED);
		test_clock_advance(clk, i * RESIL_NS_PER_MS);
		resil_release(db, &a, i % 4 ? RESIL_SUCCESS : RESIL_FAILURE);
	}
	/* cache: 3 failures open it, then 2 rejections */
	for (int i = 0; i < 5; i++) {
		resil_permit_t a;
		int v2 = resil_acquire(cache, &a);

		if (i < 3) {
			assert_int_equal(v2, 0);
			resil_release(cache, &a, RESIL_FAILURE);
		} else {
			assert_int_equal(v2, RESIL_REJECT_OPEN);
		}
	}

	text = metrics(&r->seg);
	parse(p, text);
	assert_string_equal(p->type[find_family(p, "resil_calls_total", 17)], "counter");
	assert_int_equal(must(p, "resil_calls_total", "policy=db,outcome=success,", NULL), 30);
	assert_int_equal(must(p, "resil_calls_total", "policy=db,outcome=failure,", NULL), 10);
	assert_int_equal(must(p, "resil_calls_total", "policy=db,outcome=ignored,", NULL), 40);
	assert_int_equal(must(p, "resil_calls_total", "policy=db,outcome=rejected_full,", NULL),
			 10);
	assert_int_equal(must(p, "resil_calls_total", "policy=cache,outcome=failure,", NULL), 3);
	assert_int_equal(must(p, "resil_calls_total", "policy=cache,outcome=rejected_open,", NULL),
			 2);
	assert_false(value_of(p, "resil_calls_total", "policy=api,outcome=success,", NULL, &v) &&
		     v != 0);
	/* 40 ms is slow: one call */
	assert_int_equal(must(p, "resil_slow_calls_total", "policy=db,", NULL), 1);
	/* breaker state: an enum, every state present, 1 for the current one */
	{
		static const char *const st[] = {"closed",   "open",	    "half_open",
						 "disabled", "forced_open", "metrics_only"};
		char lab[96];

		for (unsigned i = 0; i < RESIL_ARRAY_SIZE(st); i++) {
			snprintf(lab, sizeof(lab), "policy=db,state=%s,", st[i]);
			assert_int_equal(must(p, "resil_breaker_state", lab, NULL), i == 0);
			snprintf(lab, sizeof(lab), "policy=cache,state=%s,", st[i]);
			assert_int_equal(must(p, "resil_breaker_state", lab, NULL), i == 1);
		}
	}
	/* transitions by from and to: the cycle always, forced ones once seen */
	assert_int_equal(
	    must(p, "resil_breaker_transitions_total", "policy=cache,from=closed,to=open,", NULL),
	    1);
	assert_int_equal(must(p, "resil_breaker_transitions_total",
			      "policy=cache,from=open,to=half_open,", NULL),
			 0);
	assert_int_equal(
	    must(p, "resil_breaker_transitions_total", "policy=db,from=half_open,to=closed,", NULL),
	    0);
	assert_false(value_of(p, "resil_breaker_transitions_total",
			      "policy=cache,from=closed,to=forced_open,", NULL, &v));
	assert_false(value_of(p, "resil_breaker_transitions_total",
			      "policy=cache,from=open,to=closed,", NULL, &v));
	assert_false(value_of(p, "resil_breaker_transitions_total",
			      "policy=db,from=closed,to=closed,", NULL, &v));
	assert_false(value_of(p, "resil_breaker_transitions_total", "policy=cache,", NULL, &v));
	/* the window's rates (count window: 30 successes, 10 failures, the
	 * 40 ms call slow; ignored outcomes are not recorded); a consecutive
	 * window has none */
	assert_int_equal(must(p, "resil_breaker_window_calls", "policy=db,", NULL), 40);
	v = must(p, "resil_breaker_failure_rate", "policy=db,", NULL);
	assert_true(v > 0.2499 && v < 0.2501);
	v = must(p, "resil_breaker_slow_call_rate", "policy=db,", NULL);
	assert_true(v > 0.0249 && v < 0.0251);
	assert_false(value_of(p, "resil_breaker_failure_rate", "policy=cache,", NULL, &v));
	/* slowness not judged (slow_call_rate 100): no slow rate to show */
	assert_false(value_of(p, "resil_breaker_slow_call_rate", "policy=cache,", NULL, &v));
	assert_false(value_of(p, "resil_breaker_window_calls", "policy=api,", NULL, &v));
	assert_int_equal(must(p, "resil_bulkhead_max", "policy=db,", NULL), 2);
	/* the budget starts full: 10 tokens */
	assert_int_equal(must(p, "resil_retry_budget_tokens", "policy=api,", NULL), 10);
	/* histogram: 40 timed calls (ignored ones are not), 1..40 ms */
	assert_int_equal(must(p, "resil_call_duration_seconds_count", "policy=db,", NULL), 40);
	v = must(p, "resil_call_duration_seconds_sum", "policy=db,", NULL);
	assert_true(v > 0.819 && v < 0.821); /* 820 ms */
	/* le = 2^20 ns (1.048576 ms): the 1 ms call; 2^25 ns (33.5 ms): 33 calls */
	assert_int_equal(must(p, "resil_call_duration_seconds_bucket", "policy=db,", "0.001048576"),
			 1);
	assert_int_equal(must(p, "resil_call_duration_seconds_bucket", "policy=db,", "0.033554432"),
			 33);
	assert_int_equal(must(p, "resil_call_duration_seconds_bucket", "policy=db,", "+Inf"), 40);
	prev = must(p, "resil_call_duration_seconds_bucket", "policy=db,", "1.024e-06");
	assert_int_equal(prev, 0);
	/* no histogram for cache */
	assert_false(value_of(p, "resil_call_duration_seconds_count", "policy=cache,", NULL, &v));
	assert_int_equal(must(p, "resil_bulkhead_in_use", "policy=db,", NULL), 0);
	free(text);

	/* one permit held in each: in flight; the adaptive limit as configured */
	{
		resil_permit_t a, b;
		resil_policy_t *ad;

		assert_int_equal(resil_define(r, "ad",
					      "adaptive.algorithm = aimd; "
					      "adaptive.initial = 7; adaptive.min = 1; "
					      "adaptive.max = 50"),
				 0);
		assert_int_equal(resil_policy(r, "ad", &ad), 0);
		assert_int_equal(resil_acquire(db, &a), 0);
		assert_int_equal(resil_acquire(ad, &b), 0);
		text = metrics(&r->seg);
		parse(p, text);
		assert_int_equal(must(p, "resil_bulkhead_in_use", "policy=db,", NULL), 1);
		assert_int_equal(must(p, "resil_adaptive_in_use", "policy=ad,", NULL), 1);
		assert_int_equal(must(p, "resil_adaptive_limit", "policy=ad,", NULL), 7);
		assert_false(value_of(p, "resil_adaptive_limit", "policy=db,", NULL, &v));
		free(text);
		resil_release(db, &a, RESIL_IGNORED);
		resil_release(ad, &b, RESIL_IGNORED);
	}

	/* limit.dry_run: what the limiter would have rejected, admitted; a
	 * limiter without dry run says 0, a policy without a limiter nothing */
	{
		resil_policy_t *dry, *lim;
		resil_permit_t a;

		assert_int_equal(resil_define(r, "dry", "limit.rate = 1/h; limit.dry_run = yes"),
				 0);
		assert_int_equal(resil_define(r, "lim", "limit.rate = 1/h; limit.keys = 4"), 0);
		assert_int_equal(resil_policy(r, "dry", &dry), 0);
		assert_int_equal(resil_policy(r, "lim", &lim), 0);
		for (int i = 0; i < 4; i++) {
			assert_int_equal(resil_acquire(dry, &a), 0);
			resil_release(dry, &a, RESIL_SUCCESS);
		}
		assert_int_equal(resil_acquire_key(lim, "k", 1, &a), 0);
		resil_release(lim, &a, RESIL_SUCCESS);
		assert_int_equal(resil_acquire_key(lim, "k", 1, &a), RESIL_REJECT_LIMITED);
		text = metrics(&r->seg);
		parse(p, text);
		{
			const char *fam = "resil_limit_dry_run_rejects_total";
			int fi = find_family(p, fam, strlen(fam));

			assert_true(fi >= 0);
			assert_string_equal(p->type[fi], "counter");
		}
		assert_int_equal(must(p, "resil_limit_dry_run_rejects_total", "policy=dry,", NULL),
				 3);
		assert_int_equal(must(p, "resil_limit_dry_run_rejects_total", "policy=lim,", NULL),
				 0);
		assert_false(
		    value_of(p, "resil_limit_dry_run_rejects_total", "policy=db,", NULL, &v));
		assert_int_equal(
		    must(p, "resil_calls_total", "policy=dry,outcome=rejected_limited,", NULL), 0);
		assert_int_equal(must(p, "resil_calls_total", "policy=dry,outcome=success,", NULL),
				 4);
		assert_int_equal(
		    must(p, "resil_calls_total", "policy=lim,outcome=rejected_limited,", NULL), 1);
		free(text);
	}

	/* an operator's force and reset are transitions too; a change of the
	 * breaker's shape (a fresh state) carries the counts over */
	assert_int_equal(resil_force_state(r, "cache", RESIL_STATE_FORCED_OPEN), 0);
	assert_int_equal(resil_reset(r, "cache"), 0);
	assert_int_equal(resil_define(r, "cache",
				      "breaker.window = consecutive:4; "
				      "breaker.wait = 10s"),
			 0);
	text = metrics(&r->seg);
	parse(p, text);
	assert_int_equal(
	    must(p, "resil_breaker_transitions_total", "policy=cache,from=closed,to=open,", NULL),
	    1);
	assert_int_equal(must(p, "resil_breaker_transitions_total",
			      "policy=cache,from=open,to=forced_open,", NULL),
			 1);
	assert_int_equal(must(p, "resil_breaker_transitions_total",
			      "policy=cache,from=forced_open,to=closed,", NULL),
			 1);
	assert_int_equal(must(p, "resil_breaker_state", "policy=cache,state=closed,", NULL), 1);
	free(text);

	resil_close(r);
	test_clock_free(clk);
	free(p);
}

/* A rate limiter's available permits, for each algorithm: the metrics read
 * CLOCK_MONOTONIC, so these limiters run on it too; at 1/h no permit comes
 * back while the test runs. A keyed limiter reports its unkeyed word. */
static void test_limit_available(void **state)
{
	static const char *const conf[] = {
	    "limit.rate = 1/h; limit.burst = 5",
	    "limit.rate = 5/h; limit.algorithm = sliding",
	    "limit.rate = 5/h; limit.algorithm = sliding-approx",
	    "limit.rate = 1/h; limit.burst = 5; limit.keys = 8",
	};
	struct parsed *p = malloc(sizeof(*p));
	resil_policy_t *pol[RESIL_ARRAY_SIZE(conf)];
	resil_permit_t a;
	char name[16], lab[32], *text;
	resil_t *r;

	(void)state;
	assert_non_null(p);
	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(conf); i++) {
		snprintf(name, sizeof(name), "l%u", i);
		assert_int_equal(resil_define(r, name, conf[i]), 0);
		assert_int_equal(resil_policy(r, name, &pol[i]), 0);
	}
	text = metrics(&r->seg);
	parse(p, text);
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(conf); i++) {
		snprintf(lab, sizeof(lab), "policy=l%u,", i);
		assert_int_equal(must(p, "resil_limit_available_permits", lab, NULL), 5);
	}
	free(text);
	/* two permits taken from each (a keyed one's through a key: its
	 * unkeyed word keeps 5), then everything */
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(conf); i++)
		for (int k = 0; k < 2; k++) {
			if (i == 3)
				assert_int_equal(resil_acquire_key(pol[i], "k", 1, &a), 0);
			else
				assert_int_equal(resil_acquire(pol[i], &a), 0);
			resil_release(pol[i], &a, RESIL_SUCCESS);
		}
	text = metrics(&r->seg);
	parse(p, text);
	for (unsigned i = 0; i < RESIL_ARRAY_SIZE(conf); i++) {
		snprintf(lab, sizeof(lab), "policy=l%u,", i);
		assert_int_equal(must(p, "resil_limit_available_permits", lab, NULL),
				 i == 3 ? 5 : 3);
	}
	free(text);
	while (resil_acquire(pol[0], &a) == RESIL_ADMIT)
		resil_release(pol[0], &a, RESIL_SUCCESS);
	text = metrics(&r->seg);
	parse(p, text);
	assert_int_equal(must(p, "resil_limit_available_permits", "policy=l0,", NULL), 0);
	free(text);
	resil_close(r);
	free(p);
}

/* policy.scope = process: each live process's breaker and bulkhead, side
 * by side, labelled with its pid. */
static void test_process_scope(void **state)
{
	struct parsed *p = malloc(sizeof(*p));
	int up[2], down[2];
	resil_t *r;
	resil_policy_t *loc;
	char *text, lab[128];
	pid_t child;
	int ws;

	assert_non_null(p);
	assert_int_equal(resil_open_embedded(&r, NULL), 0);
	assert_int_equal(resil_define(r, "local",
				      "policy.scope = process; "
				      "breaker.window = consecutive:2; breaker.wait = 60s; "
				      "bulkhead.max = 4; limit.rate = 1/h; limit.dry_run = yes"),
			 0);
	assert_int_equal(resil_policy(r, "local", &loc), 0);
	for (int i = 0; i < 2; i++) {
		resil_permit_t pm;

		assert_int_equal(resil_acquire(loc, &pm), 0);
		resil_release(loc, &pm, RESIL_FAILURE);
	}
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		resil_permit_t pm;
		char c = 0;

		/* its own copy: closed, a permit held until the parent is done */
		TEST_CHECK(resil_acquire(loc, &pm) == 0);
		TEST_CHECK(write(up[1], "x", 1) == 1);
		TEST_CHECK(read(down[0], &c, 1) == 1);
		resil_release(loc, &pm, RESIL_SUCCESS);
		_exit(0);
	}
	{
		char c;

		assert_int_equal(read(up[0], &c, 1), 1);
	}
	text = metrics(&r->seg);
	parse(p, text);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,state=open,", (int)getpid());
	assert_int_equal(must(p, "resil_breaker_state", lab, NULL), 1);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,state=closed,", (int)getpid());
	assert_int_equal(must(p, "resil_breaker_state", lab, NULL), 0);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,state=closed,", (int)child);
	assert_int_equal(must(p, "resil_breaker_state", lab, NULL), 1);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,state=open,", (int)child);
	assert_int_equal(must(p, "resil_breaker_state", lab, NULL), 0);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,", (int)child);
	assert_int_equal(must(p, "resil_bulkhead_in_use", lab, NULL), 1);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,", (int)getpid());
	assert_int_equal(must(p, "resil_bulkhead_in_use", lab, NULL), 0);
	/* each process's limiter: the parent's second call was a dry-run
	 * admission, the child's one call an ordinary one */
	assert_int_equal(must(p, "resil_limit_dry_run_rejects_total", lab, NULL), 1);
	snprintf(lab, sizeof(lab), "policy=local,pid=%d,", (int)child);
	assert_int_equal(must(p, "resil_limit_dry_run_rejects_total", lab, NULL), 0);
	/* the counters stay fleet-wide: one series */
	assert_int_equal(must(p, "resil_calls_total", "policy=local,outcome=failure,", NULL), 2);
	free(text);
	assert_int_equal(write(down[1], "x", 1), 1);
	assert_int_equal(waitpid(child, &ws, 0), child);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	resil_close(r);
	free(p);
}

/* A corrupt record's name (the segment is untrusted): escaped, and a
 * record pointing outside the state segment is left out, not read. */
static void test_hostile(void **state)
{
	struct resil_seg s;
	struct resil_conf c;
	struct parsed *p = malloc(sizeof(*p));
	char err[256], *text, esc[32];
	uint32_t slot;
	uint64_t word;
	struct resil_rec *rec;

	assert_non_null(p);
	assert_int_equal(resil_seg_create(&s, NULL), 0);
	resil_conf_init(&c);
	assert_int_equal(resil_conf_parse(&c, "histogram = on", 1, err, sizeof(err)), 0);
	assert_true(resil_seg_define(&s, "x", &c, 0, 0, 1, err, sizeof(err)) >= 0);
	assert_true(resil_seg_define(&s, "y", &c, 0, 0, 1, err, sizeof(err)) >= 0);
	assert_int_equal(resil_seg_lookup(&s, "x", &slot, &word), 0);
	rec = resil_seg_rec_of(&s, word);
	memcpy(rec->name, "a\"b\\c\nd", 8);
	/* every byte of the name used, no NUL: read up to RESIL_NAME_MAX */
	assert_int_equal(resil_seg_lookup(&s, "y", &slot, &word), 0);
	text = metrics(&s);
	parse(p, text);
	assert_int_equal(must(p, "resil_calls_total", "policy=a\"b\\c\nd,outcome=success,", NULL),
			 0);
	assert_non_null(strstr(text, "policy=\"a\\\"b\\\\c\\nd\""));
	free(text);

	rec = resil_seg_rec_of(&s, word);
	rec->state_off = s.st_size - 8;
	text = metrics(&s);
	parse(p, text);
	assert_false(strstr(text, "policy=\"y\""));
	free(text);
	memset(rec->name, 'z', RESIL_NAME_MAX);
	text = metrics(&s);
	parse(p, text);
	free(text);

	/* escape helper: snprintf semantics */
	assert_int_equal(resil_metrics_escape("a\"\\\n", 16, esc, sizeof(esc)), 7);
	assert_string_equal(esc, "a\\\"\\\\\\n");
	assert_int_equal(resil_metrics_escape("abcdef", 3, esc, 2), 3);
	assert_string_equal(esc, "a");
	/* a cut buffer: terminated, length needed returned */
	{
		size_t need = resil_metrics_text(&s, NULL, 0);
		char small[100];

		assert_int_equal(resil_metrics_text(&s, small, sizeof(small)), need);
		assert_int_equal(strlen(small), sizeof(small) - 1);
	}
	resil_seg_unmap(&s);
	free(p);
}

/* ---- GET /metrics over HTTP (daemon/http.c) ---- */

static size_t seg_text(char *buf, size_t len, void *ctx)
{
	return resil_metrics_text(ctx, buf, len);
}

/* One request on a fresh connection; the whole answer (HTTP/1.0: the
 * server closes). */
static char *http(int port, const char *req)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	size_t cap = 1 << 20, n = 0;
	char *out = malloc(cap);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t k;

	assert_non_null(out);
	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while ((k = read(fd, out + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(fd);
	return out;
}

static void test_http(void **state)
{
	struct resil_seg s;
	struct resil_conf c;
	struct parsed *p = malloc(sizeof(*p));
	char err[256], *ans, *body;
	int port, busy;

	assert_non_null(p);
	assert_int_equal(resil_seg_create(&s, NULL), 0);
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c, "histogram = on; breaker.window = count:10", 1, err, sizeof(err)),
	    0);
	assert_true(resil_seg_define(&s, "orders", &c, 0, 0, 1, err, sizeof(err)) >= 0);

	assert_int_equal(resild_http_port(), 0);
	assert_int_equal(resild_http_start("127.0.0.1:0", seg_text, &s), 0);
	port = resild_http_port();
	assert_true(port > 0);
	assert_int_equal(resild_http_start("127.0.0.1:0", seg_text, &s), -EALREADY);

	ans = http(port, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
	assert_true(!strncmp(ans, "HTTP/1.1 200", 12) || !strncmp(ans, "HTTP/1.0 200", 12));
	assert_non_null(strstr(ans, "text/plain; version=0.0.4"));
	body = strstr(ans, "\r\n\r\n");
	assert_non_null(body);
	parse(p, body + 4);
	assert_int_equal(must(p, "resil_calls_total", "policy=orders,outcome=success,", NULL), 0);
	assert_int_equal(must(p, "resil_breaker_state", "policy=orders,state=closed,", NULL), 1);
	assert_int_equal(must(p, "resil_breaker_state", "policy=orders,state=open,", NULL), 0);
	free(ans);

	ans = http(port, "GET /nope HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(ans, " 404 "));
	free(ans);
	ans = http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
	assert_non_null(strstr(ans, " 405 "));
	assert_non_null(strstr(ans, "GET, HEAD"));
	free(ans);
	ans = http(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(ans, " 200 "));
	assert_null(strstr(ans, "# HELP"));
	free(ans);

	resild_http_stop();
	assert_int_equal(resild_http_port(), 0);
	resild_http_stop(); /* twice: a no-op */

	/* addresses */
	assert_int_equal(resild_http_start("nope", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start("127.0.0.1", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start("::1:9464", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start("[::1]9464", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start("127.0.0.1:99999", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start("127.0.0.1:x", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_start(":9464", seg_text, &s), -EINVAL);
	assert_int_equal(resild_http_port(), 0);

	/* a port in use: an error, not a crash, and nothing left running */
	{
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t sl = sizeof(sa);
		char addr[64];

		busy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(bind(busy, (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(listen(busy, 1), 0);
		assert_int_equal(getsockname(busy, (struct sockaddr *)&sa, &sl), 0);
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
		assert_true(resild_http_start(addr, seg_text, &s) < 0);
		assert_int_equal(resild_http_port(), 0);
		close(busy);
	}
	/* IPv6 loopback, when the host has it */
	if (resild_http_start("[::1]:0", seg_text, &s) == 0) {
		assert_true(resild_http_port() > 0);
		resild_http_stop();
	}
	resil_seg_unmap(&s);
	free(p);
}

/* Samples rendered at the edge: the text sink writes exactly the
 * exposition (HELP and TYPE, labels escaped, each value in its form), and
 * a recording replays the same calls into it. */
static void emit_some(struct resil_msink *k)
{
	struct resil_mlabel l[3] = {{"policy", "a\"b\\c\nd"}, {"le", "0.5"}, {"kind", "x"}};

	k->family(k, "t_calls_total", "Calls, by \\ and\nlines.", RESIL_MT_COUNTER);
	k->sample(k, "t_calls_total", "", l, 1, resil_mv_uint(18446744073709551615u));
	k->family(k, "t_gauge", "A gauge.", RESIL_MT_GAUGE);
	k->sample(k, "t_gauge", "", NULL, 0, resil_mv_int(-42));
	k->sample(k, "t_gauge", "", &l[2], 1, resil_mv_real(0.25, 6));
	k->sample(k, "t_gauge", "", &l[2], 1, resil_mv_fixed(true, 500, 3));
	k->family(k, "t_seconds", "A histogram.", RESIL_MT_HISTOGRAM);
	k->sample(k, "t_seconds", "_bucket", l, 2, resil_mv_uint(3));
	k->sample(k, "t_seconds", "_sum", l, 1, resil_mv_fixed(false, 1234567890123u, 9));
	k->sample(k, "t_seconds", "_count", l, 1, resil_mv_uint(3));
}

static void test_samples_text(void **state)
{
	static const char want[] =
	    "# HELP t_calls_total Calls, by \\\\ and\\nlines.\n"
	    "# TYPE t_calls_total counter\n"
	    "t_calls_total{policy=\"a\\\"b\\\\c\\nd\"} 18446744073709551615\n"
	    "# HELP t_gauge A gauge.\n"
	    "# TYPE t_gauge gauge\n"
	    "t_gauge -42\n"
	    "t_gauge{kind=\"x\"} 0.250000\n"
	    "t_gauge{kind=\"x\"} -0.500\n"
	    "# HELP t_seconds A histogram.\n"
	    "# TYPE t_seconds histogram\n"
	    "t_seconds_bucket{policy=\"a\\\"b\\\\c\\nd\",le=\"0.5\"} 3\n"
	    "t_seconds_sum{policy=\"a\\\"b\\\\c\\nd\"} 1234.567890123\n"
	    "t_seconds_count{policy=\"a\\\"b\\\\c\\nd\"} 3\n";
	struct resil_mtext t;
	static struct resil_mrec r;
	char buf[1024], small[40];

	resil_mtext_init(&t, buf, sizeof(buf));
	emit_some(&t.sink);
	assert_string_equal(buf, want);
	assert_int_equal(t.pos, strlen(want));

	/* snprintf semantics: cut, NUL-ended, the whole length counted */
	resil_mtext_init(&t, small, sizeof(small));
	emit_some(&t.sink);
	assert_int_equal(t.pos, strlen(want));
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, want, sizeof(small) - 1);

	/* a recording replays the same calls */
	resil_mrec_init(&r);
	emit_some(&r.sink);
	assert_false(r.full);
	resil_mtext_init(&t, buf, sizeof(buf));
	resil_mrec_replay(&r, &t.sink);
	assert_string_equal(buf, want);

	/* the values protocol v2 carries, and their decimals */
	assert_true(resil_mvalue_double(resil_mv_fixed(true, 500, 3)) == -0.5);
	assert_int_equal(resil_mvalue_decimals(resil_mv_fixed(true, 500, 3)), 3);
	assert_true(resil_mvalue_double(resil_mv_fixed(false, 1234567890123u, 9)) ==
		    1234.567890123);
	assert_true(resil_mvalue_double(resil_mv_int(-42)) == -42.0);
	assert_int_equal(resil_mvalue_decimals(resil_mv_uint(7)), 0);
	assert_int_equal(resil_mvalue_decimals(resil_mv_real(0.25, 6)), 6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parser_rejects),  cmocka_unit_test(test_exposition),
	    cmocka_unit_test(test_hostile),	    cmocka_unit_test(test_process_scope),
	    cmocka_unit_test(test_limit_available), cmocka_unit_test(test_http),
	    cmocka_unit_test(test_samples_text),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * conf.c - "key = value" pairs into struct resil_conf.
 *
 * The generic part lives here: splitting a text into pairs (';' or
 * newlines, '#' comments), the value parsers every component shares
 * (durations, rates, percents, numbers, booleans), and the dispatch of a
 * key to its component through the component table (comp.h: each row
 * claims its own prefixes). Each component parses its own keys
 * (breaker.c, limit.c, ...), so a key and its meaning live together.
 *
 * Errors are precise and say where: "line N: key: what is wrong" in a text
 * of lines (a configuration file passes its section's line numbers through
 * first_line), "in 'key = value': ..." in a one-line text of ';'-separated
 * pairs (resil_define, resilctl create), where "line 1" would say nothing.
 * An unknown key names the nearest known one (edit distance over
 * known_keys); a bare number where a duration is wanted says to add a
 * unit. Parsing never allocates; the text is not modified.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "comp.h"
#include "parse.h"
#include "breaker.h"
#include "bulkhead.h"
#include "limit.h"
#include "budget.h"

#define KEY_MAX   96
#define VALUE_MAX 512

void resil_conf_init(struct resil_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->scope = RESIL_SCOPE_FLEET;
	resil_comp_foreach (op)
		if ((*op)->conf_defaults)
			(*op)->conf_defaults(c);
}

static const char *skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* Nothing but blanks and newlines from s on. */
static bool only_blank_nl(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return *s == '\0';
}

/*
 * Every key a configuration accepts, for the "did you mean" of an unknown
 * one (retry.on.CLASS is a family: its four named classes stand for it).
 * unit_confmsg checks that each of them is known to resil_conf_set.
 */
static const char *const known_keys[] = {
    "policy.scope",
    "policy.fallback",
    "histogram",
    "breaker.window",
    "breaker.buckets",
    "breaker.failure_rate",
    "breaker.slow_call_rate",
    "breaker.slow_call",
    "breaker.min_calls",
    "breaker.wait",
    "breaker.wait_max",
    "breaker.wait_multiplier",
    "breaker.half_open_calls",
    "breaker.half_open_concurrent",
    "breaker.half_open_max_wait",
    "breaker.record",
    "limit.rate",
    "limit.burst",
    "limit.algorithm",
    "limit.keys",
    "limit.when_full",
    "limit.wait",
    "limit.dry_run",
    "limit.default_key",
    "limit.empty_key",
    "bulkhead.max",
    "bulkhead.wait",
    "bulkhead.critical",
    "adaptive.algorithm",
    "adaptive.min",
    "adaptive.max",
    "adaptive.initial",
    "adaptive.window",
    "adaptive.probe",
    "adaptive.tolerance",
    "shed.k",
    "shed.window",
    "retry.max_attempts",
    "retry.base",
    "retry.multiplier",
    "retry.max_delay",
    "retry.jitter",
    "retry.budget",
    "retry.on.transient",
    "retry.on.throttled",
    "retry.on.timeout",
    "retry.on.permanent",
    "timeout",
    "timeout.interrupt",
    "hedge.delay",
    "hedge.max",
    "idempotent",
};

const char *resil_conf_key(size_t i)
{
	return i < RESIL_ARRAY_SIZE(known_keys) ? known_keys[i] : NULL;
}

/* Edit distance with transpositions (optimal string alignment) between a
 * and b, both shorter than KEY_MAX; counting stops at limit + 1. */
static unsigned key_distance(const char *a, const char *b, unsigned limit)
{
	size_t n = strlen(a), m = strlen(b);
	unsigned d[3][KEY_MAX + 1];

	if (n >= KEY_MAX || m >= KEY_MAX)
		return limit + 1;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++) {
		unsigned *cur = d[i % 3], *prev = d[(i - 1) % 3], *pp = d[(i + 1) % 3];
		unsigned best = cur[0] = (unsigned)i;

		for (size_t j = 1; j <= m; j++) {
			unsigned cost = a[i - 1] != b[j - 1], v = prev[j - 1] + cost;

			if (prev[j] + 1 < v)
				v = prev[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			cur[j] = v;
			if (v < best)
				best = v;
		}
		if (best > limit)
			return limit + 1;
	}
	return d[n % 3][m];
}

/* The known key nearest to key: at most 2 edits, or a third of its length
 * for longer keys; NULL when none is that near. */
const char *resil_conf_nearest_key(const char *key)
{
	size_t len = strlen(key);
	unsigned limit = len / 3 > 2 ? (unsigned)(len / 3) : 2, best = limit + 1;
	const char *near = NULL;

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(known_keys); i++) {
		unsigned d = key_distance(key, known_keys[i], limit);

		if (d < best) {
			best = d;
			near = known_keys[i];
		}
	}
	return near;
}

/* The number a value ends with ("30", "time:30", "1.5"), or NULL. */
static const char *trailing_number(const char *value, char *buf, size_t len)
{
	const char *e = value + strlen(value), *s;

	while (e > value && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	s = e;
	while (s > value && (isdigit((unsigned char)s[-1]) || s[-1] == '.'))
		s--;
	if (s == e || !isdigit((unsigned char)e[-1]) || (size_t)(e - s) >= len)
		return NULL;
	memcpy(buf, s, (size_t)(e - s));
	buf[e - s] = '\0';
	return buf;
}

static int conf_set(struct resil_conf *c, const char *key, const char *value, char *err,
		    size_t errlen);

/*
 * A value refused that ends with a bare number and is accepted with a unit
 * after it wanted a duration: say so, rather than the component's words.
 * Tried on a copy, so c is left as a refused value leaves it.
 */
static int duration_hint(const struct resil_conf *c, const char *key, const char *value, char *err,
			 size_t errlen)
{
	struct resil_conf t = *c;
	char with_unit[VALUE_MAX + 2], num[32];

	if (!trailing_number(value, num, sizeof(num)) || strlen(value) + 2 > sizeof(with_unit))
		return 0;
	snprintf(with_unit, sizeof(with_unit), "%s", value);
	{
		size_t n = strlen(with_unit);

		while (n && (with_unit[n - 1] == ' ' || with_unit[n - 1] == '\t'))
			n--;
		with_unit[n++] = 's';
		with_unit[n] = '\0';
	}
	if (conf_set(&t, key, with_unit, NULL, 0) < 0)
		return 0;
	return resil_errf(err, errlen, -EINVAL, "%s: '%s' is not a duration: add a unit, e.g. %ss",
			  key, num, num);
}

int resil_conf_set(struct resil_conf *c, const char *key, const char *value, char *err,
		   size_t errlen)
{
	int r = conf_set(c, key, value, err, errlen);

	if (r == -ENOENT) {
		const char *near = resil_conf_nearest_key(key);

		if (near)
			return resil_errf(err, errlen, -EINVAL,
					  "unknown key '%s': did you mean %s?", key, near);
		return resil_errf(err, errlen, -EINVAL, "unknown key '%s'", key);
	}
	if (r < 0 && duration_hint(c, key, value, err, errlen) < 0)
		return -EINVAL;
	return r;
}

/* Keys of the policy itself, then dispatch by prefix; -ENOENT for a key
 * nobody knows. */
static int conf_set(struct resil_conf *c, const char *key, const char *value, char *err,
		    size_t errlen)
{
	int r;

	if (strcmp(key, "policy.scope") == 0) {
		const char *v = skip_blank(value);

		if (strcmp(v, "fleet") == 0)
			c->scope = RESIL_SCOPE_FLEET;
		else if (strcmp(v, "process") == 0)
			c->scope = RESIL_SCOPE_PROCESS;
		else if (strcmp(v, "global") == 0)
			c->scope = RESIL_SCOPE_GLOBAL;
		else
			return resil_errf(
			    err, errlen, -EINVAL,
			    "policy.scope: '%s' is not 'fleet', 'process' or 'global'", value);
		c->limit.global = c->scope == RESIL_SCOPE_GLOBAL;
		return 0;
	}
	if (strcmp(key, "policy.fallback") == 0) {
		const char *v = skip_blank(value);

		if (strcmp(v, "local") == 0)
			c->fallback = RESIL_FALLBACK_LOCAL;
		else if (strcmp(v, "admit") == 0)
			c->fallback = RESIL_FALLBACK_ADMIT;
		else if (strcmp(v, "reject") == 0)
			c->fallback = RESIL_FALLBACK_REJECT;
		else
			return resil_errf(
			    err, errlen, -EINVAL,
			    "policy.fallback: '%s' is not 'local', 'admit' or 'reject'", value);
		return 0;
	}
	/* the component whose key it is (each row knows its prefixes) */
	r = -ENOENT;
	resil_comp_foreach (op) {
		r = (*op)->conf_set(c, key, value, err, errlen);
		if (r != -ENOENT)
			break;
	}
	return r;
}

bool resil_conf_text_empty(const char *text)
{
	for (const char *p = text; *p; p++) {
		if (*p == '#') {
			while (p[1] && p[1] != '\n' && p[1] != ';')
				p++;
			continue;
		}
		if (!isspace((unsigned char)*p) && *p != ';')
			return false;
	}
	return true;
}

/* Trim blanks on both ends of [s, e) into out. */
static int copy_trim(const char *s, const char *e, char *out, size_t outlen)
{
	while (s < e && isspace((unsigned char)*s))
		s++;
	while (e > s && isspace((unsigned char)e[-1]))
		e--;
	if ((size_t)(e - s) >= outlen)
		return -E2BIG;
	memcpy(out, s, (size_t)(e - s));
	out[e - s] = '\0';
	return 0;
}

/*
 * Where an error is: "line N" in a text of lines (a file's section, or a
 * text with newlines), the pair itself ("in 'k = v'") in a one-line text
 * of ';'-separated pairs, where "line 1" would say nothing.
 */
struct where {
	bool by_line;
	int line;
	const char *pair;
	int pair_len;
};

static int where_fmt(const struct where *w, char *buf, size_t len)
{
	if (w->by_line)
		return snprintf(buf, len, "line %d", w->line);
	return snprintf(buf, len, "in '%.*s'", w->pair_len, w->pair);
}

int resil_conf_parse(struct resil_conf *c, const char *text, int first_line, char *err,
		     size_t errlen)
{
	const char *p = text;
	int line = first_line, nseen = 0;
	/* keys given so far: a key given twice is a mistake, not an override */
	char seen[64][KEY_MAX];
	struct where seen_at[64];
	bool by_line;

	if (!c || !text)
		return resil_errf(err, errlen, -EINVAL, "no configuration text");
	{
		const char *nl = strchr(text, '\n');

		/* a newline followed by more than blanks: a text of lines */
		by_line = first_line != 1 || (nl && !only_blank_nl(nl));
	}
	while (*p) {
		const char *end = p, *eq;
		char key[KEY_MAX], value[VALUE_MAX], msg[256], at[VALUE_MAX + 16];
		struct where w = {.by_line = by_line, .line = line};
		int r;

		while (*end && *end != ';' && *end != '\n')
			end++;
		if (*end == '\n')
			line++;
		/* a '#' starts a comment up to the end of the pair */
		eq = p;
		while (eq < end && *eq != '#')
			eq++;
		const char *stop = eq;
		{
			const char *a = p, *b = stop;

			while (a < b && isspace((unsigned char)*a))
				a++;
			while (b > a && isspace((unsigned char)b[-1]))
				b--;
			w.pair = a;
			w.pair_len = (int)(b - a > VALUE_MAX ? VALUE_MAX : b - a);
		}
		where_fmt(&w, at, sizeof(at));
		eq = memchr(p, '=', (size_t)(stop - p));
		if (!eq) {
			if (w.pair_len && by_line)
				return resil_errf(err, errlen, -EINVAL,
						  "%s: expected 'key = value', got '%.*s'", at,
						  w.pair_len, w.pair);
			if (w.pair_len)
				return resil_errf(err, errlen, -EINVAL,
						  "expected 'key = value', got '%.*s'", w.pair_len,
						  w.pair);
		} else {
			if (copy_trim(p, eq, key, sizeof(key)) < 0 || !key[0])
				return resil_errf(err, errlen, -EINVAL,
						  "%s: missing or too long key", at);
			if (copy_trim(eq + 1, stop, value, sizeof(value)) < 0)
				return resil_errf(err, errlen, -EINVAL,
						  "%s%svalue of '%s' too long (at most %d bytes)",
						  by_line ? at : "", by_line ? ": " : "", key,
						  VALUE_MAX - 1);
			if (!value[0])
				return resil_errf(err, errlen, -EINVAL, "%s: key '%s' has no value",
						  at, key);
			for (int i = 0; i < nseen; i++) {
				char first[VALUE_MAX + 16];

				if (strcmp(seen[i], key) != 0)
					continue;
				where_fmt(&seen_at[i], first, sizeof(first));
				return resil_errf(err, errlen, -EINVAL,
						  "%s: key '%s' given twice (first %s%s)", at, key,
						  by_line ? "on " : "", first);
			}
			if (nseen < (int)RESIL_ARRAY_SIZE(seen)) {
				memcpy(seen[nseen], key, sizeof(key));
				seen_at[nseen++] = w;
			}
			msg[0] = '\0';
			r = resil_conf_set(c, key, value, msg, sizeof(msg));
			if (r < 0)
				return resil_errf(err, errlen, -EINVAL, "%s: %s", at,
						  msg[0] ? msg : "invalid value");
		}
		p = *end ? end + 1 : end;
	}
	return resil_conf_check(c, err, errlen);
}

/* scope = global: what the cluster exchange can share across hosts */
static int global_check(const struct resil_conf *c, char *err, size_t errlen)
{
	if (c->breaker.on && c->breaker.window_kind != RESIL_WINDOW_TIME)
		return resil_errf(err, errlen, -EINVAL,
				  "policy.scope = global needs a time window (breaker.window = "
				  "time:DURATION): a %s window cannot be added up across hosts",
				  c->breaker.window_kind == RESIL_WINDOW_COUNT ? "count"
									       : "consecutive");
	if (c->limit.on && resil_limit_algo(&c->limit) != RESIL_LIMIT_GCRA)
		return resil_errf(err, errlen, -EINVAL,
				  "policy.scope = global applies to the gcra limiter, keyed or not "
				  "(limit.algorithm = gcra)");
	if (c->bulkhead.on && !resil_bulkhead_fail_fast(&c->bulkhead))
		return resil_errf(err, errlen, -EINVAL,
				  "policy.scope = global applies to fail-fast bulkheads of at most "
				  "%u permits (bulkhead.wait = 0, no bulkhead.critical)",
				  RESIL_POOL_SPREAD_MAX);
	if (!c->limit.on && !c->breaker.on && !c->bulkhead.on && !resil_budget_has_state(&c->retry))
		return resil_errf(err, errlen, -EINVAL,
				  "policy.scope = global needs limit.rate, a time-window breaker, "
				  "bulkhead.max or a retry.budget of its own (grpc, aws or ratio)");
	return 0;
}

/* The durations a configuration states, with their maxima (conf_types.h:
 * RESIL_WAIT_MAX_NS unless a reason says otherwise). */
static const struct {
	const char *key;
	size_t off; /* of an int64_t in struct resil_conf */
	int64_t max;
} dur_max[] = {
#define D(key, field, max)                                                                         \
	{                                                                                          \
		key, offsetof(struct resil_conf, field), max                                       \
	}
    D("breaker.slow_call", breaker.slow_call_ns, RESIL_WAIT_MAX_NS),
    D("breaker.wait", breaker.wait_ns, RESIL_WAIT_MAX_NS),
    D("breaker.wait_max", breaker.wait_max_ns, RESIL_WAIT_MAX_NS),
    D("breaker.half_open_max_wait", breaker.half_open_max_wait_ns, RESIL_WAIT_MAX_NS),
    D("breaker.window", breaker.window_ns, RESIL_BK_TIME_MAX_NS),
    D("limit.rate", limit.period_ns, RESIL_RATE_PERIOD_MAX_NS),
    D("limit.wait", limit.wait_ns, RESIL_WAIT_MAX_NS),
    D("bulkhead.wait", bulkhead.wait_ns, RESIL_WAIT_MAX_NS),
    D("adaptive.window", adaptive.window_ns, RESIL_WAIT_MAX_NS),
    D("adaptive.probe", adaptive.probe_ns, RESIL_WAIT_MAX_NS),
    D("shed.window", shed.window_ns, RESIL_WAIT_MAX_NS),
    D("retry.base", retry.base_ns, RESIL_WAIT_MAX_NS),
    D("retry.max_delay", retry.max_delay_ns, RESIL_WAIT_MAX_NS),
    D("timeout", retry.timeout_ns, RESIL_WAIT_MAX_NS),
    D("hedge.delay", retry.hedge_delay_ns, RESIL_WAIT_MAX_NS),
#undef D
};

static int too_long(const char *key, int64_t v, int64_t max, char *err, size_t errlen)
{
	char a[32], b[32];

	resil_format_duration(v, a, sizeof(a));
	resil_format_duration(max, b, sizeof(b));
	return resil_errf(err, errlen, -ERANGE, "%s: %s is longer than the maximum, %s", key, a, b);
}

/* Every duration and count within its stated maximum (conf_types.h). */
static int bounds_check(const struct resil_conf *c, char *err, size_t errlen)
{
	const struct resil_breaker_conf *b = &c->breaker;

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(dur_max); i++) {
		int64_t v;

		memcpy(&v, (const char *)c + dur_max[i].off, sizeof(v));
		if (v > dur_max[i].max)
			return too_long(dur_max[i].key, v, dur_max[i].max, err, errlen);
	}
	for (uint32_t i = 0; i < c->retry.nrules && i < RESIL_RETRY_RULES; i++) {
		const struct resil_retry_rule *r = &c->retry.rules[i];

		if (r->base_ns > RESIL_WAIT_MAX_NS)
			return too_long("retry.on.*: base", r->base_ns, RESIL_WAIT_MAX_NS, err,
					errlen);
		if (r->max_delay_ns > RESIL_WAIT_MAX_NS)
			return too_long("retry.on.*: max_delay", r->max_delay_ns, RESIL_WAIT_MAX_NS,
					err, errlen);
		if (r->multiplier_milli > RESIL_MULTIPLIER_MAX * 1000u)
			return resil_errf(err, errlen, -ERANGE,
					  "retry.on.*: multiplier: at most %u",
					  RESIL_MULTIPLIER_MAX);
	}
	if (b->window_kind != RESIL_WINDOW_TIME && b->window_size > RESIL_COUNT_MAX)
		return resil_errf(err, errlen, -ERANGE, "breaker.window: at most %u calls",
				  RESIL_COUNT_MAX);
	if (b->min_calls > RESIL_COUNT_MAX)
		return resil_errf(err, errlen, -ERANGE, "breaker.min_calls: at most %u",
				  RESIL_COUNT_MAX);
	if (b->wait_multiplier_milli > RESIL_MULTIPLIER_MAX * 1000u)
		return resil_errf(err, errlen, -ERANGE, "breaker.wait_multiplier: at most %u",
				  RESIL_MULTIPLIER_MAX);
	if (c->retry.multiplier_milli > RESIL_MULTIPLIER_MAX * 1000u)
		return resil_errf(err, errlen, -ERANGE, "retry.multiplier: at most %u",
				  RESIL_MULTIPLIER_MAX);
	return 0;
}

int resil_conf_check(const struct resil_conf *c, char *err, size_t errlen)
{
	if (bounds_check(c, err, errlen) < 0)
		return -EINVAL;
	if (c->scope == RESIL_SCOPE_GLOBAL && global_check(c, err, errlen) < 0)
		return -EINVAL;
	resil_comp_foreach (op) {
		int r = (*op)->conf_check ? (*op)->conf_check(c, err, errlen) : 0;

		if (r < 0)
			return r;
	}
	return 0;
}

size_t resil_conf_format(const struct resil_conf *c, char *buf, size_t len)
{
	size_t n = 0;

#define PUT(expr)                                                                                  \
	do {                                                                                       \
		size_t w_ = (expr);                                                                \
		n += w_;                                                                           \
	} while (0)
#define AT (n < len ? buf + n : NULL)
#define LEFT (n < len ? len - n : 0)

	if (len)
		buf[0] = '\0';
	if (c->scope == RESIL_SCOPE_PROCESS)
		PUT((size_t)snprintf(AT, LEFT, "policy.scope = process\n"));
	else if (c->scope == RESIL_SCOPE_GLOBAL)
		PUT((size_t)snprintf(AT, LEFT, "policy.scope = global\n"));
	if (c->fallback == RESIL_FALLBACK_ADMIT)
		PUT((size_t)snprintf(AT, LEFT, "policy.fallback = admit\n"));
	else if (c->fallback == RESIL_FALLBACK_REJECT)
		PUT((size_t)snprintf(AT, LEFT, "policy.fallback = reject\n"));
	resil_comp_foreach (op)
		PUT((*op)->conf_format(c, AT, LEFT));
#undef PUT
#undef AT
#undef LEFT
	return n;
}

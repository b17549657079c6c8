/* SPDX-License-Identifier: MIT */
/*
 * conf.c - "key = value" pairs into struct resil_conf.
 *
 * The generic part lives here: splitting a text into pairs (';' or
 * newlines, '#' comments), the value parsers every component shares
 * (durations, rates, percents, numbers, booleans), and the dispatch of a
 * key to its component by prefix. Each component parses its own keys
 * (breaker.c, limit.c, ...), so a key and its meaning live together.
 *
 * Errors are precise: "line N: key 'x': what is wrong", the line counted in
 * the text (a configuration file passes its section's line numbers through
 * first_line). Parsing never allocates; the text is not modified.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "breaker.h"
#include "limit.h"
#include "bulkhead.h"
#include "adaptive.h"
#include "shed.h"
#include "budget.h"

#define KEY_MAX   96
#define VALUE_MAX 512

void resil_conf_init(struct resil_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->scope = RESIL_SCOPE_FLEET;
	resil_breaker_conf_defaults(&c->breaker);
	resil_limit_conf_defaults(&c->limit);
	resil_bulkhead_conf_defaults(&c->bulkhead);
	resil_adaptive_conf_defaults(&c->adaptive);
	resil_shed_conf_defaults(&c->shed);
	resil_retry_conf_defaults(&c->retry);
}

/* Value parsers. Each accepts surrounding blanks, nothing else. */

static const char *skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

static bool only_blank(const char *s)
{
	return *skip_blank(s) == '\0';
}

int resil_parse_u32(const char *s, uint32_t *v)
{
	char *end;
	unsigned long long x;

	s = skip_blank(s);
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || x > UINT32_MAX || !only_blank(end))
		return -EINVAL;
	*v = (uint32_t)x;
	return 0;
}

/* A decimal number with up to 'digits' fractional digits, scaled by
 * 10^digits: "1.5" with 3 digits -> 1500. */
static int parse_fixed(const char *s, int digits, uint64_t max, uint64_t *v, const char **rest)
{
	uint64_t x = 0;
	int frac = -1;
	bool any = false;

	s = skip_blank(s);
	for (; *s; s++) {
		if (*s == '.' && frac < 0) {
			frac = 0;
			continue;
		}
		if (!isdigit((unsigned char)*s))
			break;
		any = true;
		if (frac >= 0) {
			if (frac == digits)
				continue; /* digits beyond the precision are dropped */
			frac++;
		}
		if (x > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	if (!any)
		return -EINVAL;
	for (int i = frac < 0 ? 0 : frac; i < digits; i++) {
		if (x > UINT64_MAX / 10)
			return -ERANGE;
		x *= 10;
	}
	if (x > max)
		return -ERANGE;
	*v = x;
	*rest = s;
	return 0;
}

int resil_parse_milli(const char *s, uint32_t *milli)
{
	uint64_t v;
	const char *rest;
	int r = parse_fixed(s, 3, UINT32_MAX, &v, &rest);

	if (r < 0)
		return r;
	if (!only_blank(rest))
		return -EINVAL;
	*milli = (uint32_t)v;
	return 0;
}

int resil_parse_percent_bp(const char *s, uint32_t *bp)
{
	uint64_t v;
	const char *rest;
	int r = parse_fixed(s, 2, 10000, &v, &rest);

	if (r < 0)
		return r;
	rest = skip_blank(rest);
	if (*rest == '%')
		rest++;
	if (!only_blank(rest))
		return -EINVAL;
	*bp = (uint32_t)v;
	return 0;
}

static const struct {
	const char *unit;
	int64_t ns;
} units[] = {
	{ "ns", 1 },
	{ "us", RESIL_NS_PER_US },
	{ "ms", RESIL_NS_PER_MS },
	{ "s", RESIL_NS_PER_S },
	{ "m", 60 * RESIL_NS_PER_S },
	{ "h", 3600 * RESIL_NS_PER_S },
};

/* "DURATION" at s: a number (decimals allowed) and a unit; "0" alone. */
static int parse_duration_at(const char *s, int64_t *ns, const char **rest)
{
	uint64_t v;
	const char *p;
	int r = parse_fixed(s, 3, UINT64_MAX / 1000, &v, &p);
	size_t n = 0;

	if (r < 0)
		return r;
	while (isalpha((unsigned char)p[n]))
		n++;
	if (n == 0) {
		if (v != 0)
			return -EINVAL; /* a unit is required */
		*ns = 0;
		*rest = p;
		return 0;
	}
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(units); i++) {
		if (strlen(units[i].unit) != n || strncmp(p, units[i].unit, n) != 0)
			continue;
		/* v is in thousandths of the unit: whole units and the
		 * fraction apart, so the product overflows only when the
		 * duration itself does not fit in int64 ns */
		uint64_t whole = v / 1000, frac = v % 1000, u = (uint64_t)units[i].ns;

		if (whole > (uint64_t)INT64_MAX / u ||
		    whole * u > (uint64_t)INT64_MAX - frac * u / 1000)
			return -ERANGE;
		*ns = (int64_t)(whole * u + frac * u / 1000);
		*rest = p + n;
		return 0;
	}
	return -EINVAL;
}

int resil_parse_duration(const char *s, int64_t *ns)
{
	const char *rest;
	int64_t v;
	int r = parse_duration_at(s, &v, &rest);

	if (r < 0)
		return r;
	if (!only_blank(rest))
		return -EINVAL;
	*ns = v;
	return 0;
}

int resil_parse_rate(const char *s, uint32_t *count, int64_t *period_ns)
{
	uint32_t n;
	char num[32];
	const char *slash = strchr(s, '/');
	size_t len;
	int64_t p;
	int r;

	if (!slash)
		return -EINVAL;
	len = (size_t)(slash - s);
	if (len == 0 || len >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, len);
	num[len] = '\0';
	r = resil_parse_u32(num, &n);
	if (r < 0 || n == 0)
		return -EINVAL;
	slash = skip_blank(slash + 1);
	if (isalpha((unsigned char)*slash)) {
		/* "100/s": a bare unit means one of it */
		char d[16];

		if (strlen(slash) >= sizeof(d) - 1)
			return -EINVAL;
		snprintf(d, sizeof(d), "1%s", slash);
		r = resil_parse_duration(d, &p);
	} else {
		r = resil_parse_duration(slash, &p);
	}
	if (r < 0 || p <= 0)
		return -EINVAL;
	*count = n;
	*period_ns = p;
	return 0;
}

int resil_parse_bool(const char *s, uint8_t *v)
{
	static const char *yes[] = { "yes", "on", "true", "1" };
	static const char *no[] = { "no", "off", "false", "0" };
	char w[8];
	size_t n;

	s = skip_blank(s);
	for (n = 0; s[n] && s[n] != ' ' && s[n] != '\t' && n < sizeof(w) - 1; n++)
		w[n] = (char)tolower((unsigned char)s[n]);
	w[n] = '\0';
	if (!only_blank(s + n))
		return -EINVAL;
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(yes); i++) {
		if (strcmp(w, yes[i]) == 0) {
			*v = 1;
			return 0;
		}
		if (strcmp(w, no[i]) == 0) {
			*v = 0;
			return 0;
		}
	}
	return -EINVAL;
}

size_t resil_format_duration(int64_t ns, char *buf, size_t len)
{
	int i;

	if (ns == 0)
		return (size_t)snprintf(buf, len, "0");
	for (i = (int)RESIL_ARRAY_SIZE(units) - 1; i > 0; i--)
		if (ns % units[i].ns == 0)
			break;
	return (size_t)snprintf(buf, len, "%" PRId64 "%s", ns / units[i].ns, units[i].unit);
}

/* Keys of the policy itself, then dispatch by prefix. */
int resil_conf_set(struct resil_conf *c, const char *key, const char *value, char *err,
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
		return 0;
	}
	if (strcmp(key, "histogram") == 0) {
		if (resil_parse_bool(value, &c->histogram) < 0)
			return resil_errf(err, errlen, -EINVAL, "histogram: '%s' is not on or off",
					  value);
		return 0;
	}
	if (strncmp(key, "breaker.", 8) == 0)
		r = resil_breaker_conf_set(&c->breaker, key, value, err, errlen);
	else if (strncmp(key, "limit.", 6) == 0)
		r = resil_limit_conf_set(&c->limit, key, value, err, errlen);
	else if (strncmp(key, "bulkhead.", 9) == 0)
		r = resil_bulkhead_conf_set(&c->bulkhead, key, value, err, errlen);
	else if (strncmp(key, "adaptive.", 9) == 0)
		r = resil_adaptive_conf_set(&c->adaptive, key, value, err, errlen);
	else if (strncmp(key, "shed.", 5) == 0)
		r = resil_shed_conf_set(&c->shed, key, value, err, errlen);
	else if (strncmp(key, "retry.", 6) == 0 || strncmp(key, "hedge.", 6) == 0 ||
		 strcmp(key, "timeout") == 0 || strncmp(key, "timeout.", 8) == 0 ||
		 strcmp(key, "idempotent") == 0)
		r = resil_retry_conf_set(&c->retry, key, value, err, errlen);
	else
		r = -ENOENT;
	if (r == -ENOENT)
		return resil_errf(err, errlen, -EINVAL, "unknown key '%s'", key);
	return r;
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

int resil_conf_parse(struct resil_conf *c, const char *text, int first_line, char *err,
		     size_t errlen)
{
	const char *p = text;
	int line = first_line, nseen = 0;
	/* keys given so far: a key given twice is a mistake, not an override */
	char seen[64][KEY_MAX];
	int seen_line[64];

	if (!c || !text)
		return resil_errf(err, errlen, -EINVAL, "no configuration text");
	while (*p) {
		const char *end = p, *eq;
		char key[KEY_MAX], value[VALUE_MAX], msg[256];
		int this_line = line;
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
		eq = memchr(p, '=', (size_t)(stop - p));
		if (!eq) {
			const char *q = p;

			while (q < stop && isspace((unsigned char)*q))
				q++;
			if (q != stop)
				return resil_errf(err, errlen, -EINVAL,
						  "line %d: expected 'key = value', got '%.*s'",
						  this_line, (int)(stop - q), q);
		} else {
			if (copy_trim(p, eq, key, sizeof(key)) < 0 || !key[0])
				return resil_errf(err, errlen, -EINVAL,
						  "line %d: missing or too long key", this_line);
			if (copy_trim(eq + 1, stop, value, sizeof(value)) < 0)
				return resil_errf(err, errlen, -EINVAL,
						  "line %d: value of '%s' too long", this_line,
						  key);
			if (!value[0])
				return resil_errf(err, errlen, -EINVAL,
						  "line %d: key '%s' has no value", this_line, key);
			for (int i = 0; i < nseen; i++)
				if (strcmp(seen[i], key) == 0)
					return resil_errf(err, errlen, -EINVAL,
							  "line %d: key '%s' given twice (first on "
							  "line %d)",
							  this_line, key, seen_line[i]);
			if (nseen < (int)RESIL_ARRAY_SIZE(seen)) {
				memcpy(seen[nseen], key, sizeof(key));
				seen_line[nseen++] = this_line;
			}
			msg[0] = '\0';
			r = resil_conf_set(c, key, value, msg, sizeof(msg));
			if (r < 0)
				return resil_errf(err, errlen, -EINVAL, "line %d: %s", this_line,
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
	if (c->limit.on && (resil_limit_algo(&c->limit) != RESIL_LIMIT_GCRA || c->limit.keys))
		return resil_errf(err, errlen, -EINVAL,
				  "policy.scope = global applies to the unkeyed gcra limiter "
				  "(limit.algorithm = gcra, no limit.keys)");
	if (!c->limit.on && !c->breaker.on)
		return resil_errf(
		    err, errlen, -EINVAL,
		    "policy.scope = global needs limit.rate or a time-window breaker");
	return 0;
}

int resil_conf_check(const struct resil_conf *c, char *err, size_t errlen)
{
	if (c->scope == RESIL_SCOPE_GLOBAL && global_check(c, err, errlen) < 0)
		return -EINVAL;
	if (resil_limit_conf_check(&c->limit, err, errlen) < 0)
		return -EINVAL;
	if (c->adaptive.on && c->adaptive.min && c->adaptive.min > resil_adaptive_max(&c->adaptive))
		return resil_errf(err, errlen, -EINVAL,
				  "adaptive.min = %u is above adaptive.max = %u", c->adaptive.min,
				  resil_adaptive_max(&c->adaptive));
	return resil_retry_conf_check(&c->retry, err, errlen);
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
	if (c->histogram)
		PUT((size_t)snprintf(AT, LEFT, "histogram = on\n"));
	if (c->breaker.on)
		PUT(resil_breaker_conf_format(&c->breaker, AT, LEFT));
	if (c->limit.on)
		PUT(resil_limit_conf_format(&c->limit, AT, LEFT));
	if (c->bulkhead.on)
		PUT(resil_bulkhead_conf_format(&c->bulkhead, AT, LEFT));
	if (c->adaptive.on)
		PUT(resil_adaptive_conf_format(&c->adaptive, AT, LEFT));
	if (c->shed.on)
		PUT(resil_shed_conf_format(&c->shed, AT, LEFT));
	if (c->retry.on)
		PUT(resil_retry_conf_format(&c->retry, AT, LEFT));
#undef PUT
#undef AT
#undef LEFT
	return n;
}

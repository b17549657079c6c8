/* SPDX-License-Identifier: MIT */
/*
 * parse.c - the value parsers and formatters every configuration key
 * shares: durations, rates, percents, numbers, booleans, and the appending
 * printf the formatters write with.
 *
 * A leaf: it knows no component, no segment and no policy, so any module
 * may use it (conf.c's dispatcher, each component's keys, the daemon's own
 * settings) without an arrow back. Parsing never allocates and never
 * modifies its input; a value is accepted with blanks around it and
 * nothing else.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "common.h"

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

/* A decimal number at s, its whole part and its fraction apart: the
 * fraction to 'digits' places, scaled by 10^digits ("1.5" with 3 digits ->
 * whole 1, frac 500); digits beyond the precision are dropped. The whole
 * part may use all of uint64, so a caller that scales it by a unit checks
 * its own product rather than inherit a cap meant for another unit. */
static int parse_decimal(const char *s, int digits, uint64_t *whole, uint64_t *frac,
			 const char **rest)
{
	uint64_t w = 0, f = 0;
	int places = -1;
	bool any = false;

	s = skip_blank(s);
	for (; *s; s++) {
		if (*s == '.' && places < 0) {
			places = 0;
			continue;
		}
		if (!isdigit((unsigned char)*s))
			break;
		any = true;
		if (places < 0) {
			if (w > (UINT64_MAX - 9) / 10)
				return -ERANGE;
			w = w * 10 + (uint64_t)(*s - '0');
		} else if (places < digits) {
			f = f * 10 + (uint64_t)(*s - '0');
			places++;
		}
	}
	if (!any)
		return -EINVAL;
	for (int i = places < 0 ? 0 : places; i < digits; i++)
		f *= 10;
	*whole = w;
	*frac = f;
	*rest = s;
	return 0;
}

/* A decimal number with up to 'digits' fractional digits, scaled by
 * 10^digits: "1.5" with 3 digits -> 1500. */
static int parse_fixed(const char *s, int digits, uint64_t max, uint64_t *v, const char **rest)
{
	uint64_t whole, frac, scale = 1;
	int r = parse_decimal(s, digits, &whole, &frac, rest);

	if (r < 0)
		return r;
	for (int i = 0; i < digits; i++)
		scale *= 10;
	if (whole > (UINT64_MAX - frac) / scale || whole * scale + frac > max)
		return -ERANGE;
	*v = whole * scale + frac;
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
    {"ns", 1},
    {"us", RESIL_NS_PER_US},
    {"ms", RESIL_NS_PER_MS},
    {"s", RESIL_NS_PER_S},
    {"m", 60 * RESIL_NS_PER_S},
    {"h", 3600 * RESIL_NS_PER_S},
};

/* "DURATION" at s: a number (decimals allowed) and a unit; "0" alone. */
static int parse_duration_at(const char *s, int64_t *ns, const char **rest)
{
	uint64_t whole, frac;
	const char *p;
	int r = parse_decimal(s, 3, &whole, &frac, &p);
	size_t n = 0;

	if (r < 0)
		return r;
	while (isalpha((unsigned char)p[n]))
		n++;
	if (n == 0) {
		if (whole != 0 || frac != 0)
			return -EINVAL; /* a unit is required */
		*ns = 0;
		*rest = p;
		return 0;
	}
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(units); i++) {
		if (strlen(units[i].unit) != n || strncmp(p, units[i].unit, n) != 0)
			continue;
		/* frac is in thousandths of the unit: the product overflows
		 * only when the duration itself does not fit in int64 ns,
		 * whatever unit it is written in (what resil_format_duration
		 * prints, in the largest unit that divides it, reads back) */
		uint64_t u = (uint64_t)units[i].ns, part = frac * u / 1000;

		if (whole > (uint64_t)INT64_MAX / u || whole * u > (uint64_t)INT64_MAX - part)
			return -ERANGE;
		*ns = (int64_t)(whole * u + part);
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
	static const char *yes[] = {"yes", "on", "true", "1"};
	static const char *no[] = {"no", "off", "false", "0"};
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

void resil_priv_put(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*off < len ? buf + *off : NULL, *off < len ? len - *off : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*off += (size_t)n;
}

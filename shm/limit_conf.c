/* SPDX-License-Identifier: MIT */
/*
 * limit_conf.c - the rate limiter's keys: defaults, the cross-key check,
 * "limit.x = y" parsing and formatting. Nothing here touches the shared
 * state; docs/configuration.md is the keys' reference.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "limit.h"
#include "parse.h"
#include "resil.h"

/* ------------------------------------------------------- configuration */

void resil_limit_conf_defaults(struct resil_limit_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->algorithm = RESIL_LIMIT_GCRA;
	c->burst = 1;
}

/* value without the blanks around it */
static bool word_is(const char *value, const char *w)
{
	size_t n = strlen(w);

	while (*value == ' ' || *value == '\t')
		value++;
	if (strncmp(value, w, n) != 0)
		return false;
	for (value += n; *value; value++)
		if (*value != ' ' && *value != '\t' && *value != '\n' && *value != '\r')
			return false;
	return true;
}

int resil_limit_conf_check(const struct resil_limit_conf *c, char *err, size_t errlen)
{
	unsigned algo = resil_limit_algo(c);

	if (!c->on)
		return 0;
	if (c->count == 0 || c->period_ns <= 0 || c->interval_ns <= 0)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.rate: required (N/DURATION, e.g. 100/s)");
	if (algo == RESIL_LIMIT_SLIDING && c->count > RESIL_LIMIT_SLIDING_MAX)
		return resil_errf(
		    err, errlen, -EINVAL,
		    "limit.rate: sliding keeps one slot per admission: at most %u per "
		    "period (sliding-approx counts more)",
		    RESIL_LIMIT_SLIDING_MAX);
	if (algo == RESIL_LIMIT_SLIDING_APPROX && c->count > RESIL_LIMIT_APPROX_MAX)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.rate: sliding-approx counts up to %u per period",
				  RESIL_LIMIT_APPROX_MAX);
	if (c->burst == 0 ||
	    (uint64_t)c->burst > (uint64_t)(INT64_MAX / 4) / (uint64_t)c->interval_ns)
		return resil_errf(err, errlen, -EINVAL,
				  "limit.burst: at least 1, and burst x interval below 2^61 ns");
	if (c->keys > RESIL_LIMIT_KEYS_MAX)
		return resil_errf(err, errlen, -EINVAL, "limit.keys: at most %u",
				  RESIL_LIMIT_KEYS_MAX);
	return 0;
}

int resil_limit_conf_set(struct resil_limit_conf *c, const char *key, const char *value, char *err,
			 size_t errlen)
{
	struct resil_limit_conf n = *c;
	uint32_t u;
	int64_t d;
	int r;

	if (strcmp(key, "limit.rate") == 0) {
		if (resil_parse_rate(value, &n.count, &n.period_ns) < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.rate: '%s' is not N/DURATION (e.g. 100/s, 5/2m)",
					  value);
		n.interval_ns = n.period_ns / n.count;
		if (n.interval_ns <= 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.rate: '%s' is faster than one per nanosecond",
					  value);
	} else if (strcmp(key, "limit.burst") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.burst: '%s' is not a count >= 1", value);
		n.burst = u;
	} else if (strcmp(key, "limit.algorithm") == 0) {
		if (word_is(value, "gcra"))
			n.algorithm = RESIL_LIMIT_GCRA;
		else if (word_is(value, "sliding"))
			n.algorithm = RESIL_LIMIT_SLIDING;
		else if (word_is(value, "sliding-approx"))
			n.algorithm = RESIL_LIMIT_SLIDING_APPROX;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.algorithm: '%s' is not gcra, sliding or "
					  "sliding-approx",
					  value);
	} else if (strcmp(key, "limit.keys") == 0) {
		if (resil_parse_u32(value, &u) < 0)
			return resil_errf(err, errlen, -EINVAL, "limit.keys: '%s' is not a count",
					  value);
		n.keys = u;
	} else if (strcmp(key, "limit.when_full") == 0) {
		if (word_is(value, "reject"))
			n.when_full_admit = 0;
		else if (word_is(value, "admit"))
			n.when_full_admit = 1;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.when_full: '%s' is neither reject nor admit",
					  value);
	} else if (strcmp(key, "limit.wait") == 0) {
		if (resil_parse_duration(value, &d) < 0 || d < 0 || d > INT64_MAX / 4)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.wait: '%s' is not a duration", value);
		n.wait_ns = d;
	} else if (strcmp(key, "limit.empty_key") == 0) {
		if (word_is(value, "admit"))
			n.empty_key_reject = 0;
		else if (word_is(value, "reject"))
			n.empty_key_reject = 1;
		else
			return resil_errf(err, errlen, -EINVAL,
					  "limit.empty_key: '%s' is neither admit nor reject",
					  value);
	} else if (strcmp(key, "limit.dry_run") == 0) {
		if (resil_parse_bool(value, &n.dry_run) < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "limit.dry_run: '%s' is not yes or no", value);
	} else if (strcmp(key, "limit.default_key") == 0) {
		/* a word: the text's blanks and separators cannot be in it */
		if (!*value || strlen(value) >= sizeof(n.default_key) || strpbrk(value, " \t;#"))
			return resil_errf(err, errlen, -EINVAL,
					  "limit.default_key: '%s' is not a key of 1 to %zu "
					  "characters without blanks",
					  value, sizeof(n.default_key) - 1);
		memset(n.default_key, 0, sizeof(n.default_key));
		n.default_key_len = (uint8_t)strlen(value);
		memcpy(n.default_key, value, n.default_key_len);
	} else {
		if (err && errlen)
			snprintf(err, errlen, "unknown key '%s'", key);
		return -ENOENT;
	}
	n.on = 1;
	/* the combination so far (a missing rate is checked at the end) */
	if (n.count) {
		r = resil_limit_conf_check(&n, err, errlen);
		if (r < 0)
			return r;
	}
	*c = n;
	return 0;
}

static const char *algo_name(unsigned a)
{
	switch (a) {
	case RESIL_LIMIT_SLIDING:
		return "sliding";
	case RESIL_LIMIT_SLIDING_APPROX:
		return "sliding-approx";
	default:
		return "gcra";
	}
}

size_t resil_limit_conf_format(const struct resil_limit_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t n = 0;

#define PUTF(...)                                                                                  \
	do {                                                                                       \
		int w_ = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__);   \
		if (w_ > 0)                                                                        \
			n += (size_t)w_;                                                           \
	} while (0)

	if (len)
		buf[0] = '\0';
	if (!c->on)
		return 0;
	if (c->count) {
		resil_format_duration(c->period_ns, d, sizeof(d));
		PUTF("limit.rate = %" PRIu32 "/%s\n", c->count, d);
	}
	PUTF("limit.burst = %" PRIu32 "\n", c->burst);
	PUTF("limit.algorithm = %s\n", algo_name(c->algorithm));
	if (c->keys) {
		PUTF("limit.keys = %" PRIu32 "\n", c->keys);
		PUTF("limit.when_full = %s\n", c->when_full_admit ? "admit" : "reject");
		if (c->empty_key_reject)
			PUTF("limit.empty_key = reject\n");
	}
	if (c->wait_ns) {
		resil_format_duration(c->wait_ns, d, sizeof(d));
		PUTF("limit.wait = %s\n", d);
	}
	if (c->dry_run)
		PUTF("limit.dry_run = yes\n");
	if (c->default_key_len)
		PUTF("limit.default_key = %.*s\n", (int)c->default_key_len, c->default_key);
#undef PUTF
	return n;
}

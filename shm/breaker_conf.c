/* SPDX-License-Identifier: MIT */
/*
 * breaker_conf.c - the circuit breaker's configuration: its keys
 * (breaker.*), the outcome an HTTP status or an errno counts as, and the
 * names of states and reasons for people.
 *
 * Nothing here reads or writes the shared state (breaker.c does): these
 * run when a configuration is parsed or printed, when a caller classifies
 * a result before its release, and when an observer prints a breaker.
 *
 * Outcomes (resil_breaker_outcome_http/_errno): breaker.record rules
 * first, in order, first match wins; then 5xx, 408, 429 and no status
 * (< 100) fail, other 4xx are ignored, the rest succeed; errno 0 succeeds,
 * the caller's own errors (EINVAL, EPERM, EACCES, ENOENT, EINTR,
 * ECANCELED, E2BIG, EBADF, EFAULT, ENOMEM, EMFILE, ENFILE) are ignored,
 * every other errno (connection errors, timeouts, EPIPE, EIO...) fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "breaker.h"
#include "parse.h"
#include "resil.h"

/* ---- outcomes ------------------------------------------------------------ */

#define RULE_HTTP  0
#define RULE_ERRNO 1

static int rule_match(const struct resil_breaker_conf *c, int kind, int v)
{
	uint32_t n = c->nrecord < RESIL_RECORD_RULES ? c->nrecord : RESIL_RECORD_RULES;

	for (uint32_t i = 0; i < n; i++) {
		const struct resil_record_rule *r = &c->record[i];

		if (r->kind == kind && v >= r->lo && v <= r->hi)
			return r->outcome;
	}
	return -1;
}

int resil_breaker_outcome_http(const struct resil_breaker_conf *c, int status)
{
	int r = c ? rule_match(c, RULE_HTTP, status) : -1;

	if (r >= 0)
		return r;
	if (status >= 500 || status == 408 || status == 429 || status < 100)
		return RESIL_FAILURE; /* 5xx, timeouts, throttling, no status at all */
	if (status >= 400)
		return RESIL_IGNORED; /* the caller's fault, not the dependency's */
	return RESIL_SUCCESS;
}

int resil_breaker_outcome_errno(const struct resil_breaker_conf *c, int err)
{
	int e = err < 0 ? -err : err;
	int r = c ? rule_match(c, RULE_ERRNO, e) : -1;

	if (r >= 0)
		return r;
	switch (e) {
	case 0:
		return RESIL_SUCCESS;
	/* the caller's own doing: says nothing about the dependency */
	case EINVAL:
	case EPERM:
	case EACCES:
	case ENOENT:
	case EINTR:
	case ECANCELED:
	case E2BIG:
	case EBADF:
	case EFAULT:
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		return RESIL_IGNORED;
	default:
		/* ECONNREFUSED, ECONNRESET, ETIMEDOUT, EHOSTUNREACH,
		 * ENETUNREACH, EPIPE, ECONNABORTED, ENETDOWN, EAGAIN, EIO and
		 * anything else: the dependency failed */
		return RESIL_FAILURE;
	}
}

/* ---- configuration -------------------------------------------------------- */

void resil_breaker_conf_defaults(struct resil_breaker_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->window_kind = RESIL_WINDOW_COUNT;
	c->window_size = 100;
	c->buckets = 10;
	c->window_ns = 0;
	c->failure_rate_bp = 5000;
	c->slow_rate_bp = 10000;
	c->slow_call_ns = 60 * RESIL_NS_PER_S;
	c->min_calls = 100;
	c->half_open_calls = 10;
	c->half_open_concurrent = 0; /* = half_open_calls */
	c->wait_multiplier_milli = 1000;
	c->wait_ns = 60 * RESIL_NS_PER_S;
	c->wait_max_ns = 0; /* = wait */
	c->half_open_max_wait_ns = 60 * RESIL_NS_PER_S;
}

static int bad(char *err, size_t errlen, const char *key, const char *value, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "%s: '%s' %s", key, value, why);
	return -EINVAL;
}

static const char *blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

static const struct {
	const char *name;
	int e;
} errnames[] = {
    {"ECONNREFUSED", ECONNREFUSED},
    {"ECONNRESET", ECONNRESET},
    {"ECONNABORTED", ECONNABORTED},
    {"ETIMEDOUT", ETIMEDOUT},
    {"EHOSTUNREACH", EHOSTUNREACH},
    {"ENETUNREACH", ENETUNREACH},
    {"ENETDOWN", ENETDOWN},
    {"EHOSTDOWN", EHOSTDOWN},
    {"EPIPE", EPIPE},
    {"EAGAIN", EAGAIN},
    {"EIO", EIO},
    {"ENOTCONN", ENOTCONN},
    {"EINVAL", EINVAL},
    {"EPERM", EPERM},
    {"EACCES", EACCES},
    {"ENOENT", ENOENT},
    {"EINTR", EINTR},
    {"ECANCELED", ECANCELED},
    {"ENOMEM", ENOMEM},
    {"EPROTO", EPROTO},
    {"EMSGSIZE", EMSGSIZE},
    {"ENOSPC", ENOSPC},
    {"EBUSY", EBUSY},
    {"ENOBUFS", ENOBUFS},
};

static const char *outcome_word(int o)
{
	return o == RESIL_SUCCESS ? "success" : o == RESIL_FAILURE ? "failure" : "ignored";
}

/* One item of a rule's list: "5xx", "404", "500-504", "ETIMEDOUT", "110". */
static int parse_item(const char *s, size_t n, int kind, uint16_t *lo, uint16_t *hi)
{
	char buf[32];
	unsigned a, b;
	char tail;

	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n);
	buf[n] = '\0';
	if (kind == RULE_ERRNO) {
		for (size_t i = 0; i < RESIL_ARRAY_SIZE(errnames); i++)
			if (strcasecmp(buf, errnames[i].name) == 0) {
				*lo = *hi = (uint16_t)errnames[i].e;
				return 0;
			}
	}
	if (kind == RULE_HTTP && n == 3 && buf[0] >= '1' && buf[0] <= '5' &&
	    (buf[1] == 'x' || buf[1] == 'X') && (buf[2] == 'x' || buf[2] == 'X')) {
		*lo = (uint16_t)((buf[0] - '0') * 100);
		*hi = (uint16_t)(*lo + 99);
		return 0;
	}
	if (sscanf(buf, "%u-%u%c", &a, &b, &tail) == 2 && buf[0] >= '0' && buf[0] <= '9') {
		if (a > b || b > 65535)
			return -EINVAL;
		*lo = (uint16_t)a;
		*hi = (uint16_t)b;
		return 0;
	}
	if (sscanf(buf, "%u%c", &a, &tail) == 1 && buf[0] >= '0' && buf[0] <= '9' && a <= 65535) {
		*lo = *hi = (uint16_t)a;
		return 0;
	}
	return -EINVAL;
}

/*
 * breaker.record: rules separated by blanks (or ';' when the value holds
 * them), each "KIND:ITEM,ITEM,...=OUTCOME" with KIND http or errno, ITEM a
 * status, a class (5xx), a range (500-504), an errno name or number, and
 * OUTCOME failure, success or ignored. First match wins; the usual mapping
 * applies when none matches. The value replaces earlier rules; "none"
 * clears them.
 */
static int parse_record(struct resil_breaker_conf *c, const char *key, const char *value, char *err,
			size_t errlen)
{
	struct resil_breaker_conf t = *c;
	const char *p = blank(value);

	t.nrecord = 0;
	memset(t.record, 0, sizeof(t.record));
	if (strcmp(p, "none") == 0) {
		*c = t;
		return 0;
	}
	while (*p) {
		const char *e = p, *colon, *eq, *it;
		int kind, outcome;

		while (*e && *e != ' ' && *e != '\t' && *e != ';')
			e++;
		colon = memchr(p, ':', (size_t)(e - p));
		eq = memchr(p, '=', (size_t)(e - p));
		if (!colon || !eq || eq < colon)
			return bad(err, errlen, key, value,
				   "needs rules like 'http:5xx,408=failure errno:EPIPE=ignored'");
		if ((size_t)(colon - p) == 4 && strncasecmp(p, "http", 4) == 0)
			kind = RULE_HTTP;
		else if ((size_t)(colon - p) == 5 && strncasecmp(p, "errno", 5) == 0)
			kind = RULE_ERRNO;
		else
			return bad(err, errlen, key, value, "rule kind is not http or errno");
		if ((size_t)(e - eq - 1) == 7 && strncasecmp(eq + 1, "failure", 7) == 0)
			outcome = RESIL_FAILURE;
		else if ((size_t)(e - eq - 1) == 7 && strncasecmp(eq + 1, "success", 7) == 0)
			outcome = RESIL_SUCCESS;
		else if ((size_t)(e - eq - 1) == 7 && strncasecmp(eq + 1, "ignored", 7) == 0)
			outcome = RESIL_IGNORED;
		else
			return bad(err, errlen, key, value,
				   "outcome is not failure, success or ignored");
		for (it = colon + 1; it < eq;) {
			const char *ie = it;
			struct resil_record_rule *r;

			while (ie < eq && *ie != ',')
				ie++;
			if (t.nrecord >= RESIL_RECORD_RULES)
				return bad(err, errlen, key, value, "has more than 16 items");
			r = &t.record[t.nrecord];
			if (parse_item(it, (size_t)(ie - it), kind, &r->lo, &r->hi) < 0)
				return bad(err, errlen, key, value,
					   "has an item that is no status, class, range or errno");
			r->outcome = (uint8_t)outcome;
			r->kind = (uint8_t)kind;
			t.nrecord++;
			it = ie < eq ? ie + 1 : eq;
		}
		p = e;
		while (*p == ' ' || *p == '\t' || *p == ';')
			p++;
	}
	*c = t;
	return 0;
}

int resil_breaker_conf_set(struct resil_breaker_conf *c, const char *key, const char *value,
			   char *err, size_t errlen)
{
	const char *k = key + 8; /* after "breaker." */
	uint32_t u;
	int64_t ns;
	int r;

	if (strncmp(key, "breaker.", 8) != 0)
		return -ENOENT;
	if (strcmp(k, "window") == 0) {
		const char *v = blank(value);

		if (strncmp(v, "count:", 6) == 0) {
			if (resil_parse_u32(v + 6, &u) < 0 || u == 0 || u > RESIL_BK_WINDOW_MAX)
				return bad(err, errlen, key, value,
					   "count:N needs 1 <= N <= 1000000");
			c->window_kind = RESIL_WINDOW_COUNT;
			c->window_size = u;
			c->window_ns = 0;
		} else if (strncmp(v, "consecutive:", 12) == 0) {
			if (resil_parse_u32(v + 12, &u) < 0 || u == 0)
				return bad(err, errlen, key, value, "consecutive:N needs N >= 1");
			c->window_kind = RESIL_WINDOW_CONSECUTIVE;
			c->window_size = u;
			c->window_ns = 0;
		} else if (strncmp(v, "time:", 5) == 0) {
			r = resil_parse_duration(v + 5, &ns);
			if ((r == 0 && ns > RESIL_BK_TIME_MAX_NS) || r == -ERANGE)
				return bad(err, errlen, key, value,
					   "time:DURATION is longer than a day (at most 24h)");
			if (r < 0 || ns <= 0)
				return bad(err, errlen, key, value,
					   "time:DURATION needs a duration above 0");
			c->window_kind = RESIL_WINDOW_TIME;
			c->window_size = 0;
			c->window_ns = ns;
		} else {
			return bad(err, errlen, key, value,
				   "is not count:N, time:DURATION or consecutive:N");
		}
	} else if (strcmp(k, "buckets") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0 || u > RESIL_BK_BUCKETS_MAX)
			return bad(err, errlen, key, value, "needs 1..4096 buckets");
		c->buckets = (uint16_t)u;
	} else if (strcmp(k, "failure_rate") == 0 || strcmp(k, "slow_call_rate") == 0) {
		if (resil_parse_percent_bp(value, &u) < 0 || u == 0)
			return bad(err, errlen, key, value, "is not a percent in (0, 100]");
		if (k[0] == 'f')
			c->failure_rate_bp = u;
		else
			c->slow_rate_bp = u;
	} else if (strcmp(k, "slow_call") == 0) {
		if (resil_parse_duration(value, &ns) < 0 || ns <= 0)
			return bad(err, errlen, key, value, "is not a duration above 0");
		c->slow_call_ns = ns;
	} else if (strcmp(k, "min_calls") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0)
			return bad(err, errlen, key, value, "is not a number of calls >= 1");
		c->min_calls = u;
	} else if (strcmp(k, "wait") == 0 || strcmp(k, "wait_max") == 0 ||
		   strcmp(k, "half_open_max_wait") == 0) {
		if (resil_parse_duration(value, &ns) < 0 || ns < 0)
			return bad(err, errlen, key, value, "is not a duration");
		if (strcmp(k, "wait") == 0)
			c->wait_ns = ns;
		else if (strcmp(k, "wait_max") == 0)
			c->wait_max_ns = ns;
		else
			c->half_open_max_wait_ns = ns;
	} else if (strcmp(k, "wait_multiplier") == 0) {
		if (resil_parse_milli(value, &u) < 0 || u < 1000)
			return bad(err, errlen, key, value, "is not a multiplier >= 1");
		c->wait_multiplier_milli = u;
	} else if (strcmp(k, "half_open_calls") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0 || u > RESIL_BK_HALF_OPEN_MAX)
			return bad(err, errlen, key, value, "needs 1..10000 probes");
		c->half_open_calls = u;
	} else if (strcmp(k, "half_open_concurrent") == 0) {
		if (resil_parse_u32(value, &u) < 0 || u == 0 || u > RESIL_BK_PROBES_MAX)
			return bad(err, errlen, key, value, "needs 1..1024 probes at once");
		c->half_open_concurrent = u;
	} else if (strcmp(k, "record") == 0) {
		int r = parse_record(c, key, value, err, errlen);

		if (r < 0)
			return r;
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

#define PUTF(...)                                                                                  \
	do {                                                                                       \
		int w_ = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__);   \
		if (w_ > 0)                                                                        \
			n += (size_t)w_;                                                           \
	} while (0)

size_t resil_breaker_conf_format(const struct resil_breaker_conf *c, char *buf, size_t len)
{
	size_t n = 0;
	char d[32];

	if (buf && len)
		buf[0] = '\0';
	if (c->window_kind == RESIL_WINDOW_TIME) {
		resil_format_duration(c->window_ns, d, sizeof(d));
		PUTF("breaker.window = time:%s\n", d);
		PUTF("breaker.buckets = %u\n", (unsigned)c->buckets);
	} else {
		PUTF("breaker.window = %s:%" PRIu32 "\n",
		     c->window_kind == RESIL_WINDOW_CONSECUTIVE ? "consecutive" : "count",
		     c->window_size);
	}
	PUTF("breaker.failure_rate = %" PRIu32 ".%02" PRIu32 "\n", c->failure_rate_bp / 100,
	     c->failure_rate_bp % 100);
	PUTF("breaker.slow_call_rate = %" PRIu32 ".%02" PRIu32 "\n", c->slow_rate_bp / 100,
	     c->slow_rate_bp % 100);
	resil_format_duration(c->slow_call_ns, d, sizeof(d));
	PUTF("breaker.slow_call = %s\n", d);
	PUTF("breaker.min_calls = %" PRIu32 "\n", c->min_calls);
	resil_format_duration(c->wait_ns, d, sizeof(d));
	PUTF("breaker.wait = %s\n", d);
	PUTF("breaker.wait_multiplier = %" PRIu32 ".%03" PRIu32 "\n",
	     c->wait_multiplier_milli / 1000, c->wait_multiplier_milli % 1000);
	if (c->wait_max_ns) {
		resil_format_duration(c->wait_max_ns, d, sizeof(d));
		PUTF("breaker.wait_max = %s\n", d);
	}
	PUTF("breaker.half_open_calls = %" PRIu32 "\n", c->half_open_calls);
	if (c->half_open_concurrent)
		PUTF("breaker.half_open_concurrent = %" PRIu32 "\n", c->half_open_concurrent);
	resil_format_duration(c->half_open_max_wait_ns, d, sizeof(d));
	PUTF("breaker.half_open_max_wait = %s\n", d);
	if (c->nrecord) {
		uint32_t nr = c->nrecord < RESIL_RECORD_RULES ? c->nrecord : RESIL_RECORD_RULES;

		PUTF("breaker.record =");
		for (uint32_t i = 0; i < nr; i++) {
			const struct resil_record_rule *r = &c->record[i];

			PUTF(" %s:", r->kind == RULE_ERRNO ? "errno" : "http");
			if (r->lo == r->hi)
				PUTF("%u", (unsigned)r->lo);
			else
				PUTF("%u-%u", (unsigned)r->lo, (unsigned)r->hi);
			PUTF("=%s", outcome_word(r->outcome));
		}
		PUTF("\n");
	}
	return n;
}

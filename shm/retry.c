/* SPDX-License-Identifier: MIT */
/*
 * retry.c - retries: configuration keys (retry.*, timeout*, hedge.*,
 * idempotent) and the backoff and rule engine. The retry budget every
 * process of the fleet shares is budget.c's.
 *
 * Engine. A retry loop's state lives on the caller's stack (struct
 * resil_retry_priv inside resil_retry_t): attempts made, failures per
 * rule, the previous delay. After each attempt the caller reports its
 * class; the engine finds the first rule naming that class (Step Functions
 * Retry blocks: ordered, first match wins; classes without a rule use the
 * policy's retry.* values, TRANSIENT, THROTTLED and TIMEOUT retried,
 * PERMANENT and user classes never), counts the failure against that rule,
 * and answers a delay or a stop with its reason. A rule's attempts count
 * like retry.max_attempts, the first included: the loop stops when the
 * failures matched by that rule reach the number (classes without a rule
 * share one count against retry.max_attempts); a rule's fields left out
 * take the policy's retry.* values. retry.on.all matches every class
 * (Step Functions' States.ALL), so it belongs last. Delays are exponential
 * with a cap, computed by repeated multiplication with saturation (never
 * pow), then jittered (AWS "Exponential Backoff And Jitter"):
 *   none          ceil
 *   full          random(0, ceil)
 *   equal         ceil/2 + random(0, ceil/2)
 *   decorrelated  min(cap, random(base, prev*3))
 * where ceil = min(cap, base * multiplier^n) and random(lo, hi) is
 * lo + ((r * (hi - lo + 1)) >> 64) for one 64-bit draw r, so a seeded
 * source gives exact delays. A Retry-After replaces the computed delay,
 * capped by max_delay. An attempt that would start at or after the
 * deadline is not made: the loop stops and says when it would have
 * started. The engine never sleeps.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "parse.h"

#define MILLI 1000

/* ---------------------------------------------------------------- config */

void resil_retry_conf_defaults(struct resil_retry_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->jitter = RESIL_JITTER_FULL;
	c->max_attempts = 3;
	c->multiplier_milli = 2000;
	c->base_ns = 50 * RESIL_NS_PER_MS;
	c->max_delay_ns = 20 * RESIL_NS_PER_S;
	c->hedge_max = 1;
}

static const char *const jitter_names[] = {
    [RESIL_JITTER_FULL] = "full",
    [RESIL_JITTER_EQUAL] = "equal",
    [RESIL_JITTER_DECORRELATED] = "decorrelated",
    [RESIL_JITTER_NONE] = "none",
};

static int parse_jitter(const char *v, uint8_t *j)
{
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(jitter_names); i++) {
		if (strcmp(v, jitter_names[i]) == 0) {
			*j = (uint8_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *const class_names[] = {
    [RESIL_ERR_TRANSIENT] = "transient",
    [RESIL_ERR_THROTTLED] = "throttled",
    [RESIL_ERR_TIMEOUT] = "timeout",
    [RESIL_ERR_PERMANENT] = "permanent",
};

const char *resil_retry_class_name(uint32_t cls, char *buf, size_t len)
{
	if (cls == RESIL_RETRY_CLASS_ALL)
		snprintf(buf, len, "all");
	else if (cls >= RESIL_ERR_TRANSIENT && cls <= RESIL_ERR_PERMANENT)
		snprintf(buf, len, "%s", class_names[cls]);
	else if (cls == RESIL_ERR_NONE)
		snprintf(buf, len, "success");
	else
		snprintf(buf, len, "%" PRIu32, cls);
	return buf;
}

static int parse_class(const char *s, uint32_t *cls)
{
	uint32_t v;

	if (strcmp(s, "all") == 0) {
		*cls = RESIL_RETRY_CLASS_ALL;
		return 0;
	}
	for (uint32_t i = RESIL_ERR_TRANSIENT; i <= RESIL_ERR_PERMANENT; i++) {
		if (strcmp(s, class_names[i]) == 0) {
			*cls = i;
			return 0;
		}
	}
	if (resil_parse_u32(s, &v) == 0 && v >= RESIL_ERR_USER && v != RESIL_RETRY_CLASS_ALL) {
		*cls = v;
		return 0;
	}
	return -EINVAL;
}

/* "base:1s attempts:6 max_delay:60s multiplier:2 jitter:none" or "never". */
static int parse_rule(const char *key, const char *value, struct resil_retry_rule *r, char *err,
		      size_t errlen)
{
	char buf[256], *save = NULL, *tok;
	unsigned fields = 0;

	if (strlen(value) >= sizeof(buf))
		return resil_errf(err, errlen, -EINVAL, "%s: value too long", key);
	memset(r, 0, sizeof(*r));
	r->retry = 1;
	r->jitter = RESIL_RETRY_JITTER_INHERIT;
	strcpy(buf, value);
	for (tok = strtok_r(buf, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
		char *colon = strchr(tok, ':');
		const char *v;
		int rc = 0;

		if (strcmp(tok, "never") == 0) {
			r->retry = 0;
			fields++;
			continue;
		}
		if (!colon)
			return resil_errf(err, errlen, -EINVAL,
					  "%s: '%s' is not NAME:VALUE (base, attempts, max_delay, "
					  "multiplier, jitter) or 'never'",
					  key, tok);
		*colon = '\0';
		v = colon + 1;
		if (strcmp(tok, "base") == 0) {
			rc = resil_parse_duration(v, &r->base_ns);
			if (rc == 0 && r->base_ns <= 0)
				rc = -EINVAL;
		} else if (strcmp(tok, "attempts") == 0) {
			rc = resil_parse_u32(v, &r->max_attempts);
			if (rc == 0 && (r->max_attempts < 1 || r->max_attempts > 255))
				rc = -ERANGE;
		} else if (strcmp(tok, "max_delay") == 0) {
			rc = resil_parse_duration(v, &r->max_delay_ns);
			if (rc == 0 && r->max_delay_ns <= 0)
				rc = -EINVAL;
		} else if (strcmp(tok, "multiplier") == 0) {
			rc = resil_parse_milli(v, &r->multiplier_milli);
			if (rc == 0 && r->multiplier_milli < MILLI)
				rc = -ERANGE;
		} else if (strcmp(tok, "jitter") == 0) {
			rc = parse_jitter(v, &r->jitter);
		} else {
			return resil_errf(
			    err, errlen, -EINVAL,
			    "%s: unknown field '%s' (base, attempts, max_delay, multiplier, "
			    "jitter)",
			    key, tok);
		}
		if (rc < 0)
			return resil_errf(err, errlen, -EINVAL, "%s: bad %s '%s'", key, tok, v);
		fields++;
	}
	/* separators only (","): no rule was written, and an empty one would
	 * format to a line the parser refuses */
	if (fields == 0)
		return resil_errf(err, errlen, -EINVAL,
				  "%s: '%s' names no field (base, attempts, max_delay, multiplier, "
				  "jitter) and is not 'never'",
				  key, value);
	return 0;
}

static int parse_budget(struct resil_retry_conf *c, const char *v, char *err, size_t errlen)
{
	char buf[64];
	char *a, *b;
	uint32_t max = 0, ratio = 0;

	if (strlen(v) >= sizeof(buf))
		return resil_errf(err, errlen, -EINVAL, "retry.budget: value too long");
	strcpy(buf, v);
	if (strcmp(buf, "none") == 0 || strcmp(buf, "off") == 0) {
		c->budget_kind = RESIL_BUDGET_NONE;
		c->budget_max = 0;
		c->budget_ratio_milli = 0;
		memset(c->budget_name, 0, sizeof(c->budget_name));
		return 0;
	}
	if (buf[0] == '@') {
		size_t n = strlen(buf);

		if (n < 2 || n - 1 >= sizeof(c->budget_name))
			return resil_errf(err, errlen, -EINVAL,
					  "retry.budget: '%s': a shared budget is @NAME, 1 to %zu "
					  "characters",
					  v, sizeof(c->budget_name) - 2);
		c->budget_kind = RESIL_BUDGET_SHARED;
		c->budget_max = 0;
		c->budget_ratio_milli = 0;
		memset(c->budget_name, 0, sizeof(c->budget_name));
		/* without its '@': the budget is the policy named "@" + budget_name */
		memcpy(c->budget_name, buf + 1, n - 1);
		return 0;
	}
	a = strchr(buf, ':');
	if (!a)
		goto bad;
	*a++ = '\0';
	if (strcmp(buf, "grpc") == 0) {
		b = strchr(a, ':');
		if (!b)
			goto bad;
		*b++ = '\0';
		if (resil_parse_u32(a, &max) < 0 || max == 0 || max > 1000000 ||
		    resil_parse_milli(b, &ratio) < 0 || ratio == 0 || ratio > max * MILLI)
			goto bad;
		c->budget_kind = RESIL_BUDGET_GRPC;
	} else if (strcmp(buf, "aws") == 0) {
		if (resil_parse_u32(a, &max) < 0 || max == 0 || max > 1000000)
			goto bad;
		c->budget_kind = RESIL_BUDGET_AWS;
	} else if (strcmp(buf, "ratio") == 0) {
		uint32_t bp;

		if (resil_parse_percent_bp(a, &bp) < 0 || bp == 0)
			goto bad;
		ratio = bp / 10; /* thousandths of one: 10% -> 100 */
		if (ratio == 0)
			goto bad;
		c->budget_kind = RESIL_BUDGET_RATIO;
	} else {
		goto bad;
	}
	c->budget_max = max;
	c->budget_ratio_milli = ratio;
	memset(c->budget_name, 0, sizeof(c->budget_name));
	return 0;
bad:
	return resil_errf(err, errlen, -EINVAL,
			  "retry.budget: '%s' is not grpc:MAX_TOKENS:RATIO, aws:TOKENS, "
			  "ratio:PERCENT or @NAME",
			  v);
}

static const struct {
	const char *name;
	int sig;
} sig_names[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},	  {"SIGALRM", SIGALRM},
    {"SIGURG", SIGURG},	  {"SIGWINCH", SIGWINCH},
};

static int parse_signal(const char *v, int32_t *sig)
{
	uint32_t n;

	if (strcmp(v, "none") == 0 || strcmp(v, "0") == 0) {
		*sig = 0;
		return 0;
	}
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(sig_names); i++) {
		if (strcmp(v, sig_names[i].name) == 0 || strcmp(v, sig_names[i].name + 3) == 0) {
			*sig = sig_names[i].sig;
			return 0;
		}
	}
	if (strncmp(v, "SIGRTMIN+", 9) == 0 && resil_parse_u32(v + 9, &n) == 0 &&
	    SIGRTMIN + (int)n <= SIGRTMAX) {
		*sig = SIGRTMIN + (int)n;
		return 0;
	}
	if (resil_parse_u32(v, &n) == 0 && n > 0 && (int)n <= SIGRTMAX && n != SIGKILL &&
	    n != SIGSTOP) {
		*sig = (int32_t)n;
		return 0;
	}
	return -EINVAL;
}

int resil_retry_conf_set(struct resil_retry_conf *c, const char *key, const char *value, char *err,
			 size_t errlen)
{
	char v[128];
	size_t n;
	int r = 0;

	while (*value == ' ' || *value == '\t')
		value++;
	n = strlen(value);
	while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
		n--;
	if (n >= sizeof(v))
		return resil_errf(err, errlen, -EINVAL, "%s: value too long", key);
	memcpy(v, value, n);
	v[n] = '\0';

	if (strcmp(key, "retry.max_attempts") == 0) {
		uint32_t a;

		if (resil_parse_u32(v, &a) < 0 || a < 1 || a > 255)
			return resil_errf(
			    err, errlen, -EINVAL,
			    "retry.max_attempts: '%s' is not 1..255 (attempts including "
			    "the first; 1 disables retries)",
			    v);
		c->max_attempts = a;
	} else if (strcmp(key, "retry.base") == 0) {
		int64_t d;

		if (resil_parse_duration(v, &d) < 0 || d <= 0)
			return resil_errf(err, errlen, -EINVAL,
					  "retry.base: '%s' is not a duration > 0", v);
		c->base_ns = d;
	} else if (strcmp(key, "retry.multiplier") == 0) {
		uint32_t m;

		if (resil_parse_milli(v, &m) < 0 || m < MILLI || m > 100 * MILLI)
			return resil_errf(err, errlen, -EINVAL,
					  "retry.multiplier: '%s' is not 1..100", v);
		c->multiplier_milli = m;
	} else if (strcmp(key, "retry.max_delay") == 0) {
		int64_t d;

		if (resil_parse_duration(v, &d) < 0 || d <= 0)
			return resil_errf(err, errlen, -EINVAL,
					  "retry.max_delay: '%s' is not a duration > 0", v);
		c->max_delay_ns = d;
	} else if (strcmp(key, "retry.jitter") == 0) {
		if (parse_jitter(v, &c->jitter) < 0)
			return resil_errf(
			    err, errlen, -EINVAL,
			    "retry.jitter: '%s' is not full, equal, decorrelated or none", v);
	} else if (strncmp(key, "retry.on.", 9) == 0) {
		struct resil_retry_rule rule;
		uint32_t cls, i;

		if (parse_class(key + 9, &cls) < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "%s: class '%s' is not transient, throttled, timeout, "
					  "permanent, all or a number from 100",
					  key, key + 9);
		r = parse_rule(key, v, &rule, err, errlen);
		if (r < 0)
			return r;
		rule.error_class = cls;
		/* a class given again replaces its rule where it stands */
		for (i = 0; i < c->nrules; i++)
			if (c->rules[i].error_class == cls)
				break;
		if (i == c->nrules) {
			if (c->nrules == RESIL_RETRY_RULES)
				return resil_errf(err, errlen, -EINVAL,
						  "%s: at most %d retry.on rules", key,
						  RESIL_RETRY_RULES);
			c->nrules++;
		}
		c->rules[i] = rule;
	} else if (strcmp(key, "retry.budget") == 0) {
		r = parse_budget(c, v, err, errlen);
		if (r < 0)
			return r;
	} else if (strcmp(key, "timeout") == 0) {
		int64_t d;

		if (strcmp(v, "none") == 0)
			d = 0;
		else if (resil_parse_duration(v, &d) < 0 || d < 0)
			return resil_errf(err, errlen, -EINVAL, "timeout: '%s' is not a duration",
					  v);
		c->timeout_ns = d;
	} else if (strcmp(key, "timeout.interrupt") == 0) {
		if (parse_signal(v, &c->interrupt_signal) < 0)
			return resil_errf(
			    err, errlen, -EINVAL,
			    "timeout.interrupt: '%s' is not none or a signal (SIGUSR2, "
			    "SIGRTMIN+N, a number)",
			    v);
	} else if (strcmp(key, "hedge.delay") == 0) {
		int64_t d;

		if (strcmp(v, "p95") == 0)
			d = -1;
		else if (strcmp(v, "off") == 0 || strcmp(v, "none") == 0)
			d = 0;
		else if (resil_parse_duration(v, &d) < 0 || d < 0)
			return resil_errf(err, errlen, -EINVAL,
					  "hedge.delay: '%s' is not a duration, p95 or off", v);
		c->hedge_delay_ns = d;
	} else if (strcmp(key, "hedge.max") == 0) {
		uint32_t m;

		if (resil_parse_u32(v, &m) < 0 || m < 1 || m > 4)
			return resil_errf(err, errlen, -EINVAL, "hedge.max: '%s' is not 1..4", v);
		c->hedge_max = m;
	} else if (strcmp(key, "idempotent") == 0) {
		if (resil_parse_bool(v, &c->idempotent) < 0)
			return resil_errf(err, errlen, -EINVAL, "idempotent: '%s' is not yes or no",
					  v);
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

int resil_retry_conf_check(const struct resil_retry_conf *c, char *err, size_t errlen)
{
	if (!c->on)
		return 0;
	if (c->hedge_delay_ns != 0 && !c->idempotent)
		return resil_errf(err, errlen, -EINVAL,
				  "hedge.delay needs idempotent = yes: a hedge runs the call more "
				  "than once at the same time");
	if (c->interrupt_signal && c->timeout_ns <= 0)
		return resil_errf(err, errlen, -EINVAL,
				  "timeout.interrupt needs a timeout: set timeout = DURATION");
	if ((c->budget_kind == RESIL_BUDGET_GRPC || c->budget_kind == RESIL_BUDGET_AWS) &&
	    c->budget_max == 0)
		return resil_errf(err, errlen, -EINVAL, "retry.budget: no tokens");
	return 0;
}

static size_t put_dur(char *buf, size_t len, const char *key, int64_t ns)
{
	char d[32];

	resil_format_duration(ns, d, sizeof(d));
	return (size_t)snprintf(buf, len, "%s = %s\n", key, d);
}

static size_t put_milli(char *out, size_t len, uint32_t m)
{
	if (m % MILLI == 0)
		return (size_t)snprintf(out, len, "%" PRIu32, m / MILLI);
	return (size_t)snprintf(out, len, "%" PRIu32 ".%03" PRIu32, m / MILLI, m % MILLI);
}

size_t resil_retry_conf_format(const struct resil_retry_conf *c, char *buf, size_t len)
{
	size_t n = 0;
	char tmp[64], d[32], cls[24];

#define AT   (n < len ? buf + n : NULL)
#define LEFT (n < len ? len - n : 0)
	n += (size_t)snprintf(AT, LEFT, "retry.max_attempts = %" PRIu32 "\n", c->max_attempts);
	n += put_dur(AT, LEFT, "retry.base", c->base_ns);
	put_milli(tmp, sizeof(tmp), c->multiplier_milli);
	n += (size_t)snprintf(AT, LEFT, "retry.multiplier = %s\n", tmp);
	n += put_dur(AT, LEFT, "retry.max_delay", c->max_delay_ns);
	n += (size_t)snprintf(AT, LEFT, "retry.jitter = %s\n",
			      c->jitter < RESIL_ARRAY_SIZE(jitter_names) ? jitter_names[c->jitter]
									 : "full");
	for (uint32_t i = 0; i < c->nrules && i < RESIL_RETRY_RULES; i++) {
		const struct resil_retry_rule *r = &c->rules[i];

		n += (size_t)snprintf(AT, LEFT, "retry.on.%s =",
				      resil_retry_class_name(r->error_class, cls, sizeof(cls)));
		if (!r->retry)
			n += (size_t)snprintf(AT, LEFT, " never");
		if (r->base_ns) {
			resil_format_duration(r->base_ns, d, sizeof(d));
			n += (size_t)snprintf(AT, LEFT, " base:%s", d);
		}
		if (r->max_attempts)
			n += (size_t)snprintf(AT, LEFT, " attempts:%" PRIu32, r->max_attempts);
		if (r->max_delay_ns) {
			resil_format_duration(r->max_delay_ns, d, sizeof(d));
			n += (size_t)snprintf(AT, LEFT, " max_delay:%s", d);
		}
		if (r->multiplier_milli) {
			put_milli(tmp, sizeof(tmp), r->multiplier_milli);
			n += (size_t)snprintf(AT, LEFT, " multiplier:%s", tmp);
		}
		if (r->jitter < RESIL_ARRAY_SIZE(jitter_names))
			n += (size_t)snprintf(AT, LEFT, " jitter:%s", jitter_names[r->jitter]);
		n += (size_t)snprintf(AT, LEFT, "\n");
	}
	switch (c->budget_kind) {
	case RESIL_BUDGET_GRPC:
		put_milli(tmp, sizeof(tmp), c->budget_ratio_milli);
		n += (size_t)snprintf(AT, LEFT, "retry.budget = grpc:%" PRIu32 ":%s\n",
				      c->budget_max, tmp);
		break;
	case RESIL_BUDGET_AWS:
		n += (size_t)snprintf(AT, LEFT, "retry.budget = aws:%" PRIu32 "\n", c->budget_max);
		break;
	case RESIL_BUDGET_RATIO:
		/* thousandths of one -> percent with one decimal */
		if (c->budget_ratio_milli % 10 == 0)
			n += (size_t)snprintf(AT, LEFT, "retry.budget = ratio:%" PRIu32 "\n",
					      c->budget_ratio_milli / 10);
		else
			n += (size_t)snprintf(
			    AT, LEFT, "retry.budget = ratio:%" PRIu32 ".%" PRIu32 "\n",
			    c->budget_ratio_milli / 10, c->budget_ratio_milli % 10);
		break;
	case RESIL_BUDGET_SHARED:
		n += (size_t)snprintf(AT, LEFT, "retry.budget = @%.*s\n",
				      (int)sizeof(c->budget_name), c->budget_name);
		break;
	default:
		break;
	}
	if (c->timeout_ns)
		n += put_dur(AT, LEFT, "timeout", c->timeout_ns);
	if (c->interrupt_signal) {
		const char *name = NULL;

		for (size_t i = 0; i < RESIL_ARRAY_SIZE(sig_names); i++)
			if (sig_names[i].sig == c->interrupt_signal)
				name = sig_names[i].name;
		if (name)
			n += (size_t)snprintf(AT, LEFT, "timeout.interrupt = %s\n", name);
		else
			n += (size_t)snprintf(AT, LEFT, "timeout.interrupt = %" PRId32 "\n",
					      c->interrupt_signal);
	}
	if (c->hedge_delay_ns < 0)
		n += (size_t)snprintf(AT, LEFT, "hedge.delay = p95\n");
	else if (c->hedge_delay_ns > 0)
		n += put_dur(AT, LEFT, "hedge.delay", c->hedge_delay_ns);
	if (c->hedge_delay_ns)
		n += (size_t)snprintf(AT, LEFT, "hedge.max = %" PRIu32 "\n", c->hedge_max);
	if (c->idempotent)
		n += (size_t)snprintf(AT, LEFT, "idempotent = yes\n");
#undef AT
#undef LEFT
	return n;
}

/* ---------------------------------------------------------------- engine */

void resil_retry_engine_begin(struct resil_retry_priv *rt, int64_t now, int64_t deadline_ns)
{
	void *p = rt->policy;

	memset(rt, 0, sizeof(*rt));
	rt->policy = p;
	rt->start_ns = now;
	rt->deadline_ns = deadline_ns;
}

static bool default_retried(uint32_t cls)
{
	return cls == RESIL_ERR_TRANSIENT || cls == RESIL_ERR_THROTTLED || cls == RESIL_ERR_TIMEOUT;
}

void resil_retry_plan_for(const struct resil_retry_conf *c, uint32_t cls,
			  struct resil_retry_plan *plan)
{
	const struct resil_retry_rule *r = NULL;
	uint32_t i;

	for (i = 0; i < c->nrules && i < RESIL_RETRY_RULES; i++) {
		if (c->rules[i].error_class == cls ||
		    c->rules[i].error_class == RESIL_RETRY_CLASS_ALL) {
			r = &c->rules[i];
			break;
		}
	}
	memset(plan, 0, sizeof(*plan));
	plan->max_attempts = c->max_attempts ? c->max_attempts : 1;
	plan->base_ns = c->base_ns;
	plan->max_delay_ns = c->max_delay_ns;
	plan->multiplier_milli = c->multiplier_milli ? c->multiplier_milli : MILLI;
	plan->jitter = c->jitter;
	if (!r) {
		plan->rule = 0;
		plan->retry = default_retried(cls);
		return;
	}
	plan->rule = i + 1;
	plan->retry = r->retry;
	if (r->max_attempts)
		plan->max_attempts = r->max_attempts;
	if (r->base_ns)
		plan->base_ns = r->base_ns;
	if (r->max_delay_ns)
		plan->max_delay_ns = r->max_delay_ns;
	if (r->multiplier_milli)
		plan->multiplier_milli = r->multiplier_milli;
	if (r->jitter != RESIL_RETRY_JITTER_INHERIT)
		plan->jitter = r->jitter;
}

/* The high 64 bits of a * b (portable: no 128-bit type on i386). */
static uint64_t mulhi64(uint64_t a, uint64_t b)
{
	uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
	uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
	uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;

	return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

/* lo + r * (hi - lo + 1) / 2^64: uniform in [lo, hi], exact for a given r. */
static int64_t uniform(const struct resil_random *rnd, int64_t lo, int64_t hi)
{
	uint64_t span, r;

	if (hi <= lo)
		return lo;
	span = (uint64_t)(hi - lo) + 1;
	r = resil_random_next(rnd);
	return lo + (int64_t)mulhi64(r, span);
}

int64_t resil_retry_backoff(const struct resil_retry_plan *plan, uint32_t n, int64_t prev_ns,
			    const struct resil_random *rnd)
{
	int64_t cap = plan->max_delay_ns > 0 ? plan->max_delay_ns : INT64_MAX / 4;
	int64_t base = plan->base_ns > 0 ? plan->base_ns : 1;
	int64_t ceil = resil_min64(base, cap);
	int64_t hi;

	/* base * multiplier^n, saturating at the cap */
	for (uint32_t i = 0; i < n && ceil < cap; i++) {
		uint64_t m = plan->multiplier_milli;

		if ((uint64_t)ceil > (uint64_t)INT64_MAX / m)
			ceil = cap;
		else
			ceil = resil_min64(cap, (int64_t)((uint64_t)ceil * m / MILLI));
	}
	switch (plan->jitter) {
	case RESIL_JITTER_NONE:
		return ceil;
	case RESIL_JITTER_EQUAL:
		return ceil / 2 + uniform(rnd, 0, ceil - ceil / 2);
	case RESIL_JITTER_DECORRELATED:
		if (prev_ns < base)
			prev_ns = base;
		hi = prev_ns > cap / 3 ? cap : prev_ns * 3;
		return resil_min64(cap, uniform(rnd, resil_min64(base, cap), hi));
	case RESIL_JITTER_FULL:
	default:
		return uniform(rnd, 0, ceil);
	}
}

static void stop(struct resil_retry_priv *rt, uint32_t why)
{
	rt->reason = why;
	rt->flags |= RESIL_RETRYF_STOPPED;
}

static void count_giveup(void *budget, uint32_t why)
{
	static const uint8_t cnt[RESIL_RSTOP_MAX] = {
	    [RESIL_RSTOP_NOT_RETRIED] = RESIL_BUDGET_CNT_GIVEUP_NOT_RETRIED,
	    [RESIL_RSTOP_ATTEMPTS] = RESIL_BUDGET_CNT_GIVEUP_ATTEMPTS,
	    [RESIL_RSTOP_DEADLINE] = RESIL_BUDGET_CNT_GIVEUP_DEADLINE,
	    [RESIL_RSTOP_BUDGET] = RESIL_BUDGET_CNT_GIVEUP_BUDGET,
	};

	if (budget && why < RESIL_RSTOP_MAX && cnt[why])
		resil_budget_count(budget, cnt[why]);
}

int64_t resil_retry_engine_next(struct resil_retry_priv *rt, const struct resil_retry_conf *c,
				void *budget, const struct resil_retry_conf *bconf, uint32_t cls,
				int64_t retry_after_ns, int64_t now, const struct resil_random *rnd)
{
	struct resil_retry_plan plan;
	uint32_t count, cost = 0;
	int64_t delay;

	if (rt->flags & RESIL_RETRYF_STOPPED)
		return -1;
	if (!budget)
		bconf = NULL;
	rt->attempts++;
	if (cls == RESIL_ERR_NONE) {
		if (bconf)
			resil_budget_record(budget, bconf, true, false, rt->attempts,
					    rt->cost_milli);
		stop(rt, RESIL_RSTOP_SUCCESS);
		return -1;
	}
	rt->last_class = cls;
	resil_retry_plan_for(c, cls, &plan);
	rt->rule = plan.rule;
	if (bconf)
		resil_budget_record(budget, bconf, false, plan.retry, rt->attempts, 0);
	if (!plan.retry) {
		stop(rt, RESIL_RSTOP_NOT_RETRIED);
		count_giveup(budget, RESIL_RSTOP_NOT_RETRIED);
		return -1;
	}
	count = rt->rule_count[plan.rule] + 1u;
	rt->rule_count[plan.rule] = (uint8_t)(count > 255 ? 255 : count);
	if (count >= plan.max_attempts) {
		rt->limit = plan.max_attempts;
		stop(rt, RESIL_RSTOP_ATTEMPTS);
		count_giveup(budget, RESIL_RSTOP_ATTEMPTS);
		return -1;
	}
	if (retry_after_ns > 0)
		delay = resil_min64(retry_after_ns,
				    plan.max_delay_ns > 0 ? plan.max_delay_ns : retry_after_ns);
	else
		delay = resil_retry_backoff(&plan, count - 1, rt->prev_delay_ns, rnd);
	rt->prev_delay_ns = delay;
	if (rt->deadline_ns && now + delay >= rt->deadline_ns) {
		rt->next_at_ns = now + delay;
		stop(rt, RESIL_RSTOP_DEADLINE);
		count_giveup(budget, RESIL_RSTOP_DEADLINE);
		return -1;
	}
	if (bconf) {
		bool first = false;

		if (resil_budget_try_retry(budget, bconf, cls, false, now, &cost, &first) != 0) {
			if (first)
				rt->flags |= RESIL_RETRYF_EXHAUSTED;
			resil_budget_count(budget, RESIL_BUDGET_CNT_REFUSED);
			stop(rt, RESIL_RSTOP_BUDGET);
			count_giveup(budget, RESIL_RSTOP_BUDGET);
			return -1;
		}
		resil_budget_count(budget, RESIL_BUDGET_CNT_RETRIES);
	}
	rt->cost_milli = cost;
	return delay;
}

/* "7 s", "250 ms", "1.5 s", "40 us": a duration for people. */
static void human_dur(int64_t ns, char *buf, size_t len)
{
	static const struct {
		int64_t ns;
		const char *unit;
	} u[] = {{RESIL_NS_PER_S, "s"}, {RESIL_NS_PER_MS, "ms"}, {RESIL_NS_PER_US, "us"}};
	bool neg = ns < 0;

	if (neg)
		ns = -ns;
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(u); i++) {
		if (ns >= u[i].ns) {
			int64_t whole = ns / u[i].ns;
			int64_t frac = (ns % u[i].ns) * 1000 / u[i].ns; /* thousandths */

			if (frac == 0)
				snprintf(buf, len, "%s%" PRId64 " %s", neg ? "-" : "", whole,
					 u[i].unit);
			else {
				while (frac % 10 == 0)
					frac /= 10;
				snprintf(buf, len, "%s%" PRId64 ".%" PRId64 " %s", neg ? "-" : "",
					 whole, frac, u[i].unit);
			}
			return;
		}
	}
	snprintf(buf, len, "%s%" PRId64 " ns", neg ? "-" : "", ns);
}

static const char *const reject_words[] = {
    [1] = "circuit breaker open",   [2] = "bulkhead full", [3] = "rate limited", [4] = "load shed",
    [5] = "retry budget exhausted",
};

const char *resil_retry_engine_reason(const struct resil_retry_priv *rt, char *buf, size_t len)
{
	char a[32], b[32], cls[24];
	const char *key;

	switch (rt->reason) {
	case RESIL_RSTOP_RETRYING:
		if (rt->attempts == 0)
			snprintf(buf, len, "no attempt reported yet");
		else
			snprintf(buf, len, "retrying: attempt %" PRIu32 " next", rt->attempts + 1);
		break;
	case RESIL_RSTOP_SUCCESS:
		snprintf(buf, len, "attempt %" PRIu32 " succeeded", rt->attempts);
		break;
	case RESIL_RSTOP_NOT_RETRIED:
		resil_retry_class_name(rt->last_class, cls, sizeof(cls));
		if (rt->rule)
			snprintf(buf, len, "%s error, never retried (retry.on rule %" PRIu32 ")",
				 cls, rt->rule);
		else if (rt->last_class == RESIL_ERR_PERMANENT)
			snprintf(buf, len, "permanent error");
		else
			snprintf(buf, len, "%s error, not retried without a retry.on rule", cls);
		break;
	case RESIL_RSTOP_ATTEMPTS:
		key = rt->rule ? "retry.on" : "retry.max_attempts";
		if (rt->rule)
			snprintf(buf, len, "%" PRIu32 " attempts made (%s rule %" PRIu32 ", %s)",
				 rt->attempts, key, rt->rule,
				 resil_retry_class_name(rt->last_class, cls, sizeof(cls)));
		else
			snprintf(buf, len, "%" PRIu32 " attempts made (%s)", rt->attempts, key);
		break;
	case RESIL_RSTOP_DEADLINE:
		human_dur(rt->next_at_ns - rt->start_ns, a, sizeof(a));
		human_dur(rt->deadline_ns - rt->start_ns, b, sizeof(b));
		snprintf(buf, len, "attempt %" PRIu32 " would start at %s, after the %s deadline",
			 rt->attempts + 1, a, b);
		break;
	case RESIL_RSTOP_BUDGET:
		snprintf(buf, len, "retry budget exhausted");
		break;
	case RESIL_RSTOP_GONE:
		snprintf(buf, len, "policy deleted");
		break;
	case RESIL_RSTOP_REJECTED:
		snprintf(buf, len, "attempt %" PRIu32 " refused: %s", rt->attempts + 1,
			 rt->verdict < RESIL_ARRAY_SIZE(reject_words) && reject_words[rt->verdict]
			     ? reject_words[rt->verdict]
			     : "policy refused");
		break;
	default:
		snprintf(buf, len, "unknown");
		break;
	}
	return buf;
}

/* SPDX-License-Identifier: MIT */
/*
 * bulkhead_conf.c - the bulkhead's configuration: its keys
 * (bulkhead.max, bulkhead.wait, bulkhead.critical), their defaults and
 * their format. Nothing here reads or writes the shared state
 * (bulkhead.c and bulkhead_maint.c do).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bulkhead.h"
#include "parse.h"
#include "resil.h"

void resil_bulkhead_conf_defaults(struct resil_bulkhead_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->max = 25;
	c->critical_bp = 0;
	c->wait_ns = 0;
}

int resil_bulkhead_conf_set(struct resil_bulkhead_conf *c, const char *key, const char *value,
			    char *err, size_t errlen)
{
	if (strcmp(key, "bulkhead.max") == 0) {
		uint32_t v;

		if (resil_parse_u32(value, &v) < 0 || v == 0 || v > RESIL_POOL_MAX) {
			snprintf(err, errlen,
				 "bulkhead.max: '%s' is not a number of permits in 1..%u", value,
				 RESIL_POOL_MAX);
			return -EINVAL;
		}
		c->max = v;
	} else if (strcmp(key, "bulkhead.wait") == 0) {
		int64_t ns;

		if (resil_parse_duration(value, &ns) < 0 || ns < 0) {
			snprintf(err, errlen,
				 "bulkhead.wait: '%s' is not a duration (e.g. 200ms, 0)", value);
			return -EINVAL;
		}
		c->wait_ns = ns;
	} else if (strcmp(key, "bulkhead.critical") == 0) {
		uint32_t bp;

		if (resil_parse_percent_bp(value, &bp) < 0 || bp > 10000) {
			snprintf(err, errlen, "bulkhead.critical: '%s' is not a percent in 0..100",
				 value);
			return -EINVAL;
		}
		c->critical_bp = bp;
	} else {
		return -ENOENT;
	}
	c->on = 1;
	return 0;
}

size_t resil_bulkhead_conf_format(const struct resil_bulkhead_conf *c, char *buf, size_t len)
{
	char d[32];
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	resil_priv_put(buf, len, &off, "bulkhead.max = %u\n", c->max);
	resil_format_duration(c->wait_ns, d, sizeof(d));
	resil_priv_put(buf, len, &off, "bulkhead.wait = %s\n", d);
	if (c->critical_bp % 100 == 0)
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u%%\n", c->critical_bp / 100);
	else if (c->critical_bp % 10 == 0)
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u.%u%%\n",
			       c->critical_bp / 100, c->critical_bp / 10 % 10);
	else
		resil_priv_put(buf, len, &off, "bulkhead.critical = %u.%02u%%\n",
			       c->critical_bp / 100, c->critical_bp % 100);
	return off;
}

/* SPDX-License-Identifier: MIT */
/*
 * conf.h - a policy's configuration, parsed from "key = value" pairs.
 *
 * The same pairs come from a [policy NAME] section of a file, from
 * resil_define() (pairs separated by ';' or newlines) and from
 * `resilctl create`. A component (breaker, limit, ...) is present when any
 * of its keys is given. The types are conf_types.h's; the value parsers
 * parse.h's; each component parses its own keys (X_conf_set in its
 * header). This is the dispatcher above them all: no component includes
 * it.
 */
#ifndef RESIL_SHM_CONF_H
#define RESIL_SHM_CONF_H

#include "conf_types.h"

/* Defaults: every component off, every key at its documented default. */
void resil_conf_init(struct resil_conf *c);

/*
 * Parse "key = value; key = value\n..." into c (which holds defaults or an
 * earlier state). 0 or -EINVAL with what is wrong in err, and where:
 * "line N: ..." (the line of the text, starting at first_line) when the
 * text has several lines or first_line is not 1, else "in 'key = value':
 * ..." (the pair of a one-line, ';'-separated text).
 */
int resil_conf_parse(struct resil_conf *c, const char *text, int first_line, char *err,
		     size_t errlen);
/* A text without a single pair (blanks, separators, comments): a policy
 * of nothing, which every way in refuses as a mistake. */
bool resil_conf_text_empty(const char *text);
/* One pair. -EINVAL with a message in err: an unknown key names the
 * nearest known one ("did you mean breaker.window?"), a bare number where a
 * duration is wanted says to add a unit. */
int resil_conf_set(struct resil_conf *c, const char *key, const char *value, char *err,
		   size_t errlen);
/* The known keys, i = 0.. until NULL; the nearest to key, or NULL. */
const char *resil_conf_key(size_t i);
const char *resil_conf_nearest_key(const char *key);
/* Cross-key checks after parsing (e.g. hedging needs idempotent = yes). */
int resil_conf_check(const struct resil_conf *c, char *err, size_t errlen);
/* Write the configuration back as "key = value" lines (for show). */
size_t resil_conf_format(const struct resil_conf *c, char *buf, size_t len);

#endif

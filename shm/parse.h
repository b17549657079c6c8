/* SPDX-License-Identifier: MIT */
/*
 * parse.h - value parsers and formatters shared by every configuration
 * key (parse.c). A leaf module: it includes no component, segment or
 * policy header, so whoever parses or prints a value includes it without
 * an arrow back (ARCHITECTURE.md).
 *
 * Each parser returns 0 or a negative errno (-EINVAL: not a value of that
 * kind, -ERANGE: one that does not fit) and writes its out-parameter only
 * on success.
 */
#ifndef RESIL_SHM_PARSE_H
#define RESIL_SHM_PARSE_H

#include <stddef.h>
#include <stdint.h>

int resil_parse_duration(const char *s, int64_t *ns);			  /* "250ms", "2m", "0" */
int resil_parse_rate(const char *s, uint32_t *count, int64_t *period_ns); /* "100/s", "5/2m" */
int resil_parse_percent_bp(const char *s, uint32_t *bp);		  /* "50", "12.5", "20%" */
int resil_parse_u32(const char *s, uint32_t *v);
int resil_parse_milli(const char *s, uint32_t *milli); /* "1.5" -> 1500 */
int resil_parse_bool(const char *s, uint8_t *v);       /* yes/no/on/off/true/false/1/0 */
/* The largest unit that divides ns exactly: "250ms", "2m", "0". */
size_t resil_format_duration(int64_t ns, char *buf, size_t len);

/* Append printf output at buf + *off; *off grows by the would-be length,
 * like snprintf, so a caller can tell truncation (*off >= len). */
void resil_priv_put(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif

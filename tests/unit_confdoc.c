/* SPDX-License-Identifier: MIT */
/*
 * unit_confdoc.c - the documented keys are the parser's keys, so the
 * reference cannot drift from the code:
 *   - docs/configuration.md's reference table (between its keys markers)
 *     names every key resil_conf_set knows (resil_conf_key) and no other;
 *     each key the component table formats back for a configuration that
 *     names every component is in it too;
 *   - where the table gives a key's default as one literal value, setting
 *     the key to that value changes nothing in a configuration that already
 *     has the key's component (a default that drifted shows as a byte that
 *     differs; a word whose 0 stands for the default compares by what it
 *     means);
 *   - resild.conf(5) names every key.
 * retry.on.CLASS in the documents stands for the classes' keys.
 */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "adaptive.h"
#include "conf.h"

#define MAX_KEYS 128
#define KEY_LEN	 64

struct doc_key {
	char key[KEY_LEN];
	char def[KEY_LEN];	  /* the one literal default, or "" */
	char prefix_key[KEY_LEN]; /* another key of the same component with a literal default */
};

static struct doc_key doc[MAX_KEYS];
static size_t ndoc;

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The retry classes' keys are documented as one family. */
static bool family_key(const char *key)
{
	return strncmp(key, "retry.on.", 9) == 0;
}

/* The component a key belongs to, by its prefix ("breaker."); the retry
 * engine also owns timeout*, hedge.* and idempotent. False for keys of no
 * component (policy.scope, histogram). */
static bool comp_prefix(const char *key, char out[KEY_LEN])
{
	const char *dot = strchr(key, '.');

	if (strncmp(key, "timeout", 7) == 0 || strncmp(key, "hedge.", 6) == 0 ||
	    strcmp(key, "idempotent") == 0) {
		strcpy(out, "retry.");
		return true;
	}
	if (!dot || strncmp(key, "policy.", 7) == 0)
		return false;
	memcpy(out, key, (size_t)(dot - key) + 1);
	out[dot - key + 1] = '\0';
	return true;
}

/* Cell i (from 0) of a table row, without its blanks, into out; '\|' is
 * a pipe inside a cell. */
static bool row_cell(const char *row, int i, char *out, size_t len)
{
	const char *p = row;

	for (int k = 0; k <= i; k++) {
		p = strchr(p, '|');
		while (p && p > row && p[-1] == '\\')
			p = strchr(p + 1, '|');
		if (!p)
			return false;
		p++;
	}
	const char *e = p;
	while (*e && *e != '\n' && !(*e == '|' && e[-1] != '\\'))
		e++;
	while (p < e && *p == ' ')
		p++;
	while (e > p && e[-1] == ' ')
		e--;
	if ((size_t)(e - p) >= len)
		return false;
	memcpy(out, p, (size_t)(e - p));
	out[e - p] = '\0';
	return true;
}

static void add_doc_key(const char *key, const char *def)
{
	assert_true(ndoc < MAX_KEYS);
	for (size_t i = 0; i < ndoc; i++)
		if (strcmp(doc[i].key, key) == 0)
			fail_msg("docs/configuration.md: %s is in the table twice", key);
	snprintf(doc[ndoc].key, KEY_LEN, "%s", key);
	snprintf(doc[ndoc].def, KEY_LEN, "%s", def);
	ndoc++;
}

/* The reference table: one or more `key` in the first cell; the default
 * in the third, kept when it is one `literal` and nothing else. */
static void load_table(void)
{
	char *text = read_file(RESIL_SOURCE_DIR "/docs/configuration.md");
	char *begin = strstr(text, "\n<!-- keys: begin");
	char *end = strstr(text, "\n<!-- keys: end");
	char cell[256], defcell[256], def[KEY_LEN];

	assert_non_null(begin);
	assert_non_null(end);
	*end = '\0';
	ndoc = 0;
	for (char *row = strstr(begin, "\n| `"); row; row = strstr(row + 1, "\n| `")) {
		row++;
		assert_true(row_cell(row, 0, cell, sizeof(cell)));
		def[0] = '\0';
		if (row_cell(row, 2, defcell, sizeof(defcell))) {
			const char *d = defcell;
			size_t n = strlen(d);

			if (n > 2 && d[0] == '`' && d[n - 1] == '`' && !memchr(d + 1, '`', n - 2) &&
			    n - 2 < KEY_LEN && d[1] != '=') {
				memcpy(def, d + 1, n - 2);
				def[n - 2] = '\0';
			}
		}
		/* only cells with one key keep the default: a shared cell lists
		 * several values */
		int keys = 0;
		for (const char *p = cell; (p = strchr(p, '`')); keys++) {
			const char *q = strchr(p + 1, '`');
			assert_non_null(q);
			p = q + 1;
		}
		for (const char *p = cell; (p = strchr(p, '`'));) {
			const char *q = strchr(p + 1, '`');
			char key[KEY_LEN];

			assert_true((size_t)(q - p - 1) < KEY_LEN);
			memcpy(key, p + 1, (size_t)(q - p - 1));
			key[q - p - 1] = '\0';
			add_doc_key(key, keys == 1 ? def : "");
			p = q + 1;
		}
	}
	free(text);
	assert_true(ndoc > 30);
	/* each key's component: another key of the same component whose
	 * default is known, to turn the component on without naming the key */
	for (size_t i = 0; i < ndoc; i++) {
		char pi[KEY_LEN], pj[KEY_LEN];

		if (!comp_prefix(doc[i].key, pi))
			continue;
		for (size_t j = 0; j < ndoc; j++)
			if (j != i && doc[j].def[0] && comp_prefix(doc[j].key, pj) &&
			    strcmp(pi, pj) == 0) {
				memcpy(doc[i].prefix_key, doc[j].key, KEY_LEN);
				break;
			}
	}
}

static bool documented(const char *key)
{
	for (size_t i = 0; i < ndoc; i++)
		if (strcmp(doc[i].key, key) == 0 ||
		    (family_key(key) && strcmp(doc[i].key, "retry.on.CLASS") == 0))
			return true;
	return false;
}

static void test_table_is_the_keys(void **state)
{
	struct resil_conf c;
	char err[512] = "", buf[8192];

	(void)state;
	load_table();
	/* every known key is documented */
	for (size_t i = 0; resil_conf_key(i); i++)
		if (!documented(resil_conf_key(i)))
			fail_msg("key %s is not in docs/configuration.md's reference table",
				 resil_conf_key(i));
	/* every documented key is known */
	for (size_t i = 0; i < ndoc; i++) {
		const char *key =
		    strcmp(doc[i].key, "retry.on.CLASS") == 0 ? "retry.on.transient" : doc[i].key;
		resil_conf_init(&c);
		err[0] = '\0';
		resil_conf_set(&c, key, "\x01", err, sizeof(err));
		if (strstr(err, "unknown key"))
			fail_msg(
			    "docs/configuration.md documents %s, which the parser does not know",
			    doc[i].key);
	}
	/* what the component table formats back, for every component */
	resil_conf_init(&c);
	assert_int_equal(
	    resil_conf_parse(&c,
			     "histogram = on; breaker.window = time:10s;"
			     "breaker.slow_call_rate = 50; limit.rate = 10/s;"
			     "limit.keys = 100; limit.wait = 1s; limit.dry_run = yes;"
			     "bulkhead.max = 3; bulkhead.wait = 1s; bulkhead.critical = 10;"
			     "adaptive.algorithm = gradient2; shed.k = 2;"
			     "retry.on.throttled = base:1s; retry.budget = grpc:10:0.1;"
			     "timeout = 1s; timeout.interrupt = SIGUSR2; hedge.delay = 5ms;"
			     "idempotent = yes",
			     1, err, sizeof(err)),
	    0);
	resil_conf_format(&c, buf, sizeof(buf));
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		char *eq = strstr(line, " = ");

		assert_non_null(eq);
		*eq = '\0';
		if (!documented(line))
			fail_msg(
			    "the component table formats %s, which docs/configuration.md lacks",
			    line);
	}
}

static void test_table_defaults(void **state)
{
	struct resil_conf a, b;
	char err[512] = "";
	int checked = 0;

	(void)state;
	load_table();
	for (size_t i = 0; i < ndoc; i++) {
		const struct doc_key *d = &doc[i];

		char pre[KEY_LEN];

		if (!d->def[0] || (comp_prefix(d->key, pre) && !d->prefix_key[0]))
			continue;
		resil_conf_init(&a);
		for (size_t j = 0; d->prefix_key[0] && j < ndoc; j++)
			if (strcmp(doc[j].key, d->prefix_key) == 0 &&
			    resil_conf_set(&a, doc[j].key, doc[j].def, err, sizeof(err)) < 0)
				fail_msg("%s = %s: %s", doc[j].key, doc[j].def, err);
		b = a;
		if (resil_conf_set(&b, d->key, d->def, err, sizeof(err)) < 0)
			fail_msg("docs/configuration.md: %s's default %s: %s", d->key, d->def, err);
		/* a word whose 0 means "the default" is compared by what it means */
		if (strcmp(d->key, "adaptive.tolerance") == 0 &&
		    resil_adaptive_tolerance_milli(&a.adaptive) ==
			resil_adaptive_tolerance_milli(&b.adaptive))
			b.adaptive.tolerance_milli = a.adaptive.tolerance_milli;
		if (memcmp(&a, &b, sizeof(a)) != 0)
			fail_msg(
			    "docs/configuration.md says %s defaults to %s; the parser's default "
			    "differs",
			    d->key, d->def);
		checked++;
	}
	printf("%d documented defaults agree with the parser's\n", checked);
	assert_true(checked >= 25);
}

static void test_man_page_keys(void **state)
{
	char *man = read_file(RESIL_SOURCE_DIR "/docs/man/resild.conf.5.scd");
	char pat[KEY_LEN + 2];

	(void)state;
	for (size_t i = 0; resil_conf_key(i); i++) {
		const char *key = resil_conf_key(i);

		if (family_key(key))
			snprintf(pat, sizeof(pat), "*retry.on.*_CLASS_");
		else
			snprintf(pat, sizeof(pat), "*%s*", key);
		if (!strstr(man, pat))
			fail_msg("resild.conf(5) does not name %s", key);
	}
	free(man);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table_is_the_keys),
	    cmocka_unit_test(test_table_defaults),
	    cmocka_unit_test(test_man_page_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * unit_cfglong.c - configuration file lines longer than inih's own line
 * buffer (200 bytes in Debian's libinih, whatever ini_max_line says) are
 * read whole, and a line past the format's limit is refused with its
 * file:line and the limit.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cfgfile.h"

/* "breaker.record = http:500=failure http:501=failure ..." of at least
 * len characters: the number of rules */
static unsigned long_record(char *buf, size_t len)
{
	size_t n = (size_t)sprintf(buf, "breaker.record =");
	unsigned rules = 0;

	for (int code = 500; n < len && code < 516; code++, rules++)
		n += (size_t)sprintf(buf + n, " http:%d=failure", code);
	while (n < len)
		buf[n++] = ' ';
	buf[n] = '\0';
	return rules;
}

static void test_long_lines_accepted(void **state)
{
	struct resild_cfgset *set = resild_cfgset_new();
	char line[400], text[1200], err[512] = "";
	const struct resild_cfgent *e;
	unsigned rules;

	(void)state;
	rules = long_record(line, 199);
	assert_true(strlen(line) >= 199);
	snprintf(text, sizeof(text),
		 "; a comment\n[policy long]\n%s\nbreaker.failure_rate = 40   ; %0150d\n"
		 "[policy %s]\nbulkhead.max = 3\n",
		 line, 0, "next");
	assert_int_equal(resild_cfgset_parse_string(set, "long.conf", text, err, sizeof(err)), 0);
	e = resild_cfgset_find(set, "long");
	assert_non_null(e);
	assert_int_equal(e->conf.breaker.nrecord, rules);
	assert_true(rules > 8);
	assert_int_equal(e->conf.breaker.failure_rate_bp, 4000);
	assert_non_null(resild_cfgset_find(set, "next"));
	resild_cfgset_free(set);
}

static void test_too_long_and_bad_long(void **state)
{
	struct resild_cfgset *set = resild_cfgset_new();
	char *text = malloc(10000), err[512] = "";
	size_t n;

	(void)state;
	n = (size_t)sprintf(text, "[policy p]\nbulkhead.max = 3\nbreaker.record = ");
	memset(text + n, 'x', 5000);
	strcpy(text + n + 5000, "\n");
	assert_int_equal(resild_cfgset_parse_string(set, "big.conf", text, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "big.conf:3: line longer than 4094 characters"));

	/* a long line with an unknown key names the key and its line */
	n = (size_t)sprintf(text, "[policy p]\n\nbreaker.nosuchkey = ");
	memset(text + n, '1', 300);
	strcpy(text + n + 300, "\n");
	assert_int_equal(resild_cfgset_parse_string(set, "bad.conf", text, err, sizeof(err)),
			 -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "bad.conf:3:"));
	assert_non_null(strstr(err, "nosuchkey"));

	/* a long line without '=' is a syntax error at its line */
	memset(text, 'y', 300);
	strcpy(text + 300, "\n");
	assert_int_equal(resild_cfgset_parse_string(set, "syn.conf", text, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "syn.conf:1:"));
	free(text);
	resild_cfgset_free(set);
}

static void test_duplicate_key(void **state)
{
	struct resild_cfgset *set = resild_cfgset_new();
	char err[512] = "";

	(void)state;
	assert_int_equal(
	    resild_cfgset_parse_string(set, "dup.conf",
				       "[policy a]\nbulkhead.max = 3\n\n"
				       "[policy b]\nbulkhead.max = 3\n; note\nbulkhead.max = 5\n",
				       err, sizeof(err)),
	    -EINVAL);
	printf("%s\n", err);
	assert_non_null(strstr(err, "dup.conf:7: key bulkhead.max given twice in this section "
				    "(first on line 5)"));
	resild_cfgset_free(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_long_lines_accepted),
	    cmocka_unit_test(test_too_long_and_bad_long),
	    cmocka_unit_test(test_duplicate_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

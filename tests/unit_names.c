/* SPDX-License-Identifier: MIT */
/*
 * unit_names.c - the words of names.h's lists, as everything prints them:
 * each member has a word of its own (no two members of a list share one,
 * none is empty), the lookups give the list's word for each value and
 * "unknown" past the list (a value a hostile client wrote into an event),
 * --cluster-fallback's words parse back to their values, and the public
 * API's resil_strverdict and resil_strstate are the same words. The
 * protocol's enums are tied to the lists at compile time
 * (RESIL_NAMES_PROTO_CHECK, expanded here too). Also common.c's
 * /proc/PID/stat parser, the one both the library and the daemon use.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "resil.h"
#include "resil.pb-c.h"
#include "seg.h"

RESIL_NAMES_PROTO_CHECK

struct member {
	unsigned v;
	const char *word;
};

/* every member's word is what fn gives for its value, none empty, none
 * twice; past the list: "unknown" */
static void check(const char *what, const struct member *m, size_t n, const char *(*fn)(uint32_t))
{
	for (size_t i = 0; i < n; i++) {
		if (!m[i].word[0])
			fail_msg("%s %u: an empty word", what, m[i].v);
		if (strcmp(fn(m[i].v), m[i].word))
			fail_msg("%s %u: '%s', the list says '%s'", what, m[i].v, fn(m[i].v),
				 m[i].word);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m[i].word, m[j].word))
				fail_msg("%s %u and %u: both '%s'", what, m[j].v, m[i].v,
					 m[i].word);
	}
	assert_string_equal(fn(1000), "unknown");
	assert_string_equal(fn(UINT32_MAX), "unknown");
}

#define MEMBER_(id, v, w, ...) {v, w},
#define CHECK_(list, fn)                                                                           \
	do {                                                                                       \
		static const struct member m_[] = {list(MEMBER_)};                                 \
		check(#list, m_, sizeof(m_) / sizeof(m_[0]), fn);                                  \
	} while (0)

/* the int-valued lookups, over the positive values (negative ones:
 * test_columns) */
static const char *state_name(uint32_t v)
{
	return resil_breaker_state_name(v > INT32_MAX ? INT32_MAX : (int)v);
}

static const char *verdict_name(uint32_t v)
{
	return resil_verdict_name(v > INT32_MAX ? INT32_MAX : (int)v);
}

static void test_words(void **state)
{
	(void)state;
	CHECK_(RESIL_STATE_LIST, state_name);
	CHECK_(RESIL_VERDICT_LIST, verdict_name);
	CHECK_(RESIL_EVENT_LIST, resil_event_name);
	CHECK_(RESIL_WHY_LIST, resil_breaker_why);
	CHECK_(RESIL_CHANGE_LIST, resil_config_change_name);
	CHECK_(RESIL_WORD_LIST, resil_word_name);
	CHECK_(RESIL_DEFINE_LIST, resil_define_name);
	CHECK_(RESIL_MTYPE_LIST, resil_mtype_name);
	CHECK_(RESIL_LISTENER_LIST, resil_listener_name);
	CHECK_(RESIL_FALLBACK_LIST, resil_fallback_name);
	CHECK_(RESIL_FLEET_LIST, resil_fleet_name);
	/* the enums that end in a count end at the list's end */
	assert_string_equal(resil_breaker_why(RESIL_WHY_MAX), "unknown");
	assert_string_equal(resil_word_name(RESIL_W_MAX), "unknown");
	assert_string_equal(resil_breaker_state_name(RESIL_STATE_COUNT), "unknown");
	assert_string_equal(resil_breaker_state_name(-1), "unknown");
	assert_string_equal(resil_verdict_name(-EINVAL), "error");
}

static void test_columns(void **state)
{
	(void)state;
	/* the metrics' labels and top's column are their own words */
	assert_string_equal(resil_breaker_state_label(RESIL_STATE_HALF_OPEN), "half_open");
	assert_string_equal(resil_breaker_state_short(RESIL_STATE_FORCED_OPEN), "forced");
	assert_string_equal(resil_breaker_state_label(RESIL_STATE_COUNT), "unknown");
	/* the public API prints the same words */
	for (int v = RESIL_ADMIT; v <= RESIL_REJECT_BUDGET + 1; v++)
		assert_string_equal(resil_strverdict(v), resil_verdict_name(v));
	for (int s = -1; s <= RESIL_STATE_COUNT; s++)
		assert_string_equal(resil_strstate(s), resil_breaker_state_name(s));
}

static void test_fallback_parse(void **state)
{
	(void)state;
#define PARSE_(id, v, w) assert_int_equal(resil_fallback_parse(w), v);
	RESIL_FALLBACK_LIST(PARSE_)
#undef PARSE_
	assert_int_equal(resil_fallback_parse("unknown"), -EINVAL);
	assert_int_equal(resil_fallback_parse("Share"), -EINVAL);
	assert_int_equal(resil_fallback_parse(""), -EINVAL);
}

static void test_proc_stat(void **state)
{
	uint64_t self = 0, again = 0, parent = 0;
	uint32_t ppid = 0;

	(void)state;
	assert_int_equal(resil_proc_stat(0, &self, NULL), 0);
	assert_true(self > 0);
	assert_int_equal(resil_proc_stat((uint32_t)getpid(), &again, &ppid), 0);
	assert_true(again == self);
	assert_int_equal(ppid, (uint32_t)getppid());
	/* a parent started before its child */
	assert_int_equal(resil_proc_stat(ppid, &parent, NULL), 0);
	assert_true(parent <= self);
	/* pid_max is at most 2^22: this pid is no process's */
	assert_int_equal(resil_proc_stat(1u << 23, &again, NULL), -ESRCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_words),
	    cmocka_unit_test(test_columns),
	    cmocka_unit_test(test_fallback_parse),
	    cmocka_unit_test(test_proc_stat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

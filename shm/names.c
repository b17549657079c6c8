/* SPDX-License-Identifier: MIT */
/*
 * names.c - the word of each member of names.h's lists: one table per
 * list, built from it, so a member cannot lack its word. The public
 * enums (resil.h) are tied to their lists here.
 */
#include <errno.h>
#include <string.h>

#include "common.h"
#include "names.h"
#include "resil.h"

#define NAMES_TIE_STATE_(id, v, w, s, l) _Static_assert(RESIL_STATE_##id == (v), "state " #id);
#define NAMES_TIE_VERDICT_(id, v, w)	 _Static_assert(RESIL_##id == (v), "verdict " #id);
RESIL_STATE_LIST(NAMES_TIE_STATE_)
RESIL_VERDICT_LIST(NAMES_TIE_VERDICT_)

/* A table indexed by value: [VALUE] = COLUMN. */
#define NAMES_AT_(id, v, w, ...)     [v] = w,
#define NAMES_SHORT_(id, v, w, s, l) [v] = s,
#define NAMES_LABEL_(id, v, w, s, l) [v] = l,
#define NAMES_WORD_(list, i, ...)                                                                  \
	do {                                                                                       \
		static const char *const t_[] = {list(__VA_ARGS__)};                               \
		return (i) < RESIL_ARRAY_SIZE(t_) && t_[i] ? t_[i] : "unknown";                    \
	} while (0)

const char *resil_breaker_state_name(int state)
{
	NAMES_WORD_(RESIL_STATE_LIST, (unsigned)state, NAMES_AT_);
}

const char *resil_breaker_state_short(int state)
{
	NAMES_WORD_(RESIL_STATE_LIST, (unsigned)state, NAMES_SHORT_);
}

const char *resil_breaker_state_label(int state)
{
	NAMES_WORD_(RESIL_STATE_LIST, (unsigned)state, NAMES_LABEL_);
}

const char *resil_verdict_name(int verdict)
{
	if (verdict < 0)
		return "error";
	NAMES_WORD_(RESIL_VERDICT_LIST, (unsigned)verdict, NAMES_AT_);
}

const char *resil_event_name(uint32_t type)
{
	NAMES_WORD_(RESIL_EVENT_LIST, type, NAMES_AT_);
}

const char *resil_breaker_why(uint32_t reason)
{
	NAMES_WORD_(RESIL_WHY_LIST, reason, NAMES_AT_);
}

const char *resil_config_change_name(uint32_t change)
{
	NAMES_WORD_(RESIL_CHANGE_LIST, change, NAMES_AT_);
}

const char *resil_word_name(uint32_t word)
{
	NAMES_WORD_(RESIL_WORD_LIST, word, NAMES_AT_);
}

const char *resil_define_name(uint32_t outcome)
{
	NAMES_WORD_(RESIL_DEFINE_LIST, outcome, NAMES_AT_);
}

const char *resil_mtype_name(uint32_t type)
{
	NAMES_WORD_(RESIL_MTYPE_LIST, type, NAMES_AT_);
}

const char *resil_listener_name(uint32_t state)
{
	NAMES_WORD_(RESIL_LISTENER_LIST, state, NAMES_AT_);
}

const char *resil_fallback_name(uint32_t fallback)
{
	NAMES_WORD_(RESIL_FALLBACK_LIST, fallback, NAMES_AT_);
}

const char *resil_fleet_name(uint32_t state)
{
	NAMES_WORD_(RESIL_FLEET_LIST, state, NAMES_AT_);
}

int resil_fallback_parse(const char *word)
{
#define NAMES_PARSE_(id, v, w)                                                                     \
	if (strcmp(word, w) == 0)                                                                  \
		return v;
	RESIL_FALLBACK_LIST(NAMES_PARSE_)
#undef NAMES_PARSE_
	return -EINVAL;
}

/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cfgfile.c - the daemon's configuration file parser (inih plus
 * resil_conf_set) on arbitrary text.
 *
 * Whatever the text, parsing returns 0 or -EINVAL with a message that
 * starts with the file's label and a line number; on success every
 * section it kept has a valid name, passes resil_conf_check, and names
 * are unique.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfgfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resild_cfgset *set = resild_cfgset_new();
	char *text = malloc(size + 1);
	char err[1024] = "";
	int r;

	if (!set || !text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	r = resild_cfgset_parse_string(set, "fuzz.conf", text, err, sizeof(err));
	if (r != 0 && r != -EINVAL)
		abort();
	if (r < 0 && (strncmp(err, "fuzz.conf:", 10) != 0 || set->n != 0))
		abort();
	for (size_t i = 0; r == 0 && i < set->n; i++) {
		char msg[256];

		if (resild_name_check(set->ent[i].name, msg, sizeof(msg)) != 0)
			abort();
		if (resil_conf_check(&set->ent[i].conf, msg, sizeof(msg)) != 0)
			abort();
		for (size_t j = 0; j < i; j++)
			if (strcmp(set->ent[i].name, set->ent[j].name) == 0)
				abort();
	}
	resild_cfgset_free(set);
	free(text);
	return 0;
}

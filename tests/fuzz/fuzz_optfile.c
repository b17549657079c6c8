/* SPDX-License-Identifier: MIT */
/*
 * fuzz_optfile.c - the parser of resild's settings file ([daemon] KEY =
 * VALUE, [cluster] reserved) on arbitrary text.
 *
 * Whatever the text, parsing returns 0 or -EINVAL with a message that
 * starts with the file's label and a line number, and keeps nothing on an
 * error; on success every entry names a key of the list, once, with a
 * value that is not empty and a line within the text.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfgfile.h"

static const char *const keys[] = {"socket", "state_size", "policies", "metrics_listen", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resild_optfile f = {0};
	char *text = malloc(size + 1);
	char err[1024] = "";
	int r, lines = 1;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	r = resild_optfile_parse_string(&f, "fuzz.conf", text, keys, err, sizeof(err));
	if (r != 0 && r != -EINVAL)
		abort();
	if (r < 0 && (strncmp(err, "fuzz.conf:", 10) != 0 || f.n != 0))
		abort();
	for (size_t i = 0; r == 0 && i < f.n; i++) {
		bool known = false;

		for (const char *const *k = keys; *k; k++)
			known |= f.ent[i].key == *k;
		if (!known || !f.ent[i].value[0] || f.ent[i].line < 1 || f.ent[i].line > lines)
			abort();
		for (size_t j = 0; j < i; j++)
			if (f.ent[i].key == f.ent[j].key)
				abort();
	}
	resild_optfile_clear(&f);
	free(text);
	return 0;
}

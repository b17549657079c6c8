/* SPDX-License-Identifier: MIT */
/*
 * link_example.c - a short program to copy: one policy, one call.
 * Build: cc link_example.c -lresil. It asks resild ($RESIL_SOCKET, then
 * /run/resild/control.sock); with --embedded it runs without a daemon.
 */
#include <stdio.h>
#include <string.h>

#include "resil.h"

int main(int argc, char **argv)
{
	bool embedded = argc > 1 && strcmp(argv[1], "--embedded") == 0;
	resil_permit_t permit;
	resil_policy_t *p;
	resil_t *r;
	int ret;

	ret = embedded ? resil_open_embedded(&r, NULL) : resil_open(&r, NULL);
	if (ret < 0) {
		fprintf(stderr, "resil_open: %s\n", strerror(-ret));
		return 1;
	}
	/* workers declare what they use at start: an identical define is allowed */
	ret = resil_define(r, "payments", "breaker.window = count:100; limit.rate = 100/s");
	if (ret == 0)
		ret = resil_policy(r, "payments", &p);
	if (ret < 0) {
		fprintf(stderr, "payments: %s\n", strerror(-ret));
		resil_close(r);
		return 1;
	}

	ret = resil_acquire(p, &permit);
	if (ret == RESIL_ADMIT) {
		bool ok = true; /* call the dependency here */

		resil_release(p, &permit, ok ? RESIL_SUCCESS : RESIL_FAILURE);
	}
	printf("payments: %s\n", resil_strverdict(ret));
	resil_close(r);
	return 0;
}

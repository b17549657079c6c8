/* SPDX-License-Identifier: MIT */
/*
 * per_ip_limit.c - a per-client rate limit shared by every worker of the
 * host, with the Retry-After a rejected client should be sent.
 *
 * One keyed policy: 5 requests per second per IP address, bursts of 5,
 * at most 100000 addresses tracked. Every worker that defines the same
 * policy shares the same table, so a client that spreads its requests over
 * the workers still gets 5 per second in all. Here one process plays the
 * server and one noisy client sends 8 requests at once, then one more
 * after the wait it was given.
 *
 * Build: cc per_ip_limit.c -lresil. Run with resild, or with --embedded.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "resil.h"

/* What a server would do with one request from addr: 0 served, 429 limited. */
static int handle(resil_policy_t *p, struct in_addr addr, long long *retry_after_ms)
{
	resil_permit_t permit;
	int v = resil_acquire_key(p, &addr, sizeof(addr), &permit);

	if (v == RESIL_ADMIT) {
		/* serve the request here */
		resil_release(p, &permit, RESIL_SUCCESS);
		return 0;
	}
	if (v == RESIL_REJECT_LIMITED) {
		*retry_after_ms = (resil_permit_wait_ns(&permit) + 999999) / 1000000;
		return 429;
	}
	return v < 0 ? v : 503;
}

int main(int argc, char **argv)
{
	bool embedded = argc > 1 && strcmp(argv[1], "--embedded") == 0;
	struct in_addr client;
	long long wait_ms = 0;
	resil_policy_t *p;
	resil_t *r;
	int ret, i;

	ret = embedded ? resil_open_embedded(&r, NULL) : resil_open(&r, NULL);
	if (ret < 0) {
		fprintf(stderr, "resil_open: %s\n", strerror(-ret));
		return 1;
	}
	ret =
	    resil_define(r, "api-per-ip", "limit.rate = 5/s; limit.burst = 5; limit.keys = 100000");
	if (ret == 0)
		ret = resil_policy(r, "api-per-ip", &p);
	if (ret < 0) {
		fprintf(stderr, "api-per-ip: %s\n", strerror(-ret));
		resil_close(r);
		return 1;
	}

	inet_pton(AF_INET, "192.0.2.7", &client);
	for (i = 1; i <= 8; i++) {
		ret = handle(p, client, &wait_ms);
		if (ret == 429)
			printf("request %d: 429, Retry-After %lld ms\n", i, wait_ms);
		else
			printf("request %d: %s\n", i, ret == 0 ? "200" : "error");
	}
	if (wait_ms > 0) {
		struct timespec ts = {.tv_sec = wait_ms / 1000,
				      .tv_nsec = (wait_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
		ret = handle(p, client, &wait_ms);
		printf("after waiting: %s\n", ret == 0 ? "200" : "429");
	}
	resil_close(r);
	return 0;
}

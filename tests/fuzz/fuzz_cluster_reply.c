/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cluster_reply.c - what the daemons make of Redis' replies to their
 * scripts (policy.scope = global): any bytes, read as RESP by hiredis'
 * reader, given to every reply parser of the exchange (lease, breaker,
 * bulkhead, budget, configuration, keyed, the fleet's hosts).
 *
 * Whatever the reply, a parser answers true or false, and what it fills
 * on true stays in range: a share finite and not negative, ids and hosts
 * at least 1, a bulkhead's slots within a pool, a budget's tokens within
 * its bucket, keyed records whole (12 bytes each) and the stream id read
 * one; the hosts' counts are what the reply said, clamped. Another client
 * of Redis can write what the scripts read back, so nothing here may
 * crash, read out of bounds or leak.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "cluster_priv.h"
#include "bulkhead.h"

static void check(redisReply *r)
{
	static struct resild_cluster c;
	static bool init;
	struct xans a = {0};
	struct resild_cb_req q = {.tokens = true, .max_milli = 100000, .seq = 7};
	struct resild_cb_ans cb = {0};
	struct resild_cbh_ans bh = {0};
	struct resild_ck_ans ck = {0};
	struct resild_ck_thr th = {0};

	if (!init) {
		pthread_mutex_init(&c.lock, NULL);
		snprintf(c.host, sizeof(c.host), "fuzz");
		init = true;
	}
	if (parse_answer(r, &a) && (!isfinite(a.share) || a.share < 0 || a.id < 1 || a.hosts < 1 ||
				    a.tell < 0 || a.tell > 2))
		abort();
	if (parse_breaker(r, &a) && (a.bk_rate_bp > 10000 || a.bk_calls < 0))
		abort();
	if (resild_cbh_parse(r, &bh) && (bh.share > RESIL_POOL_MAX || bh.id < 1 || bh.hosts < 1))
		abort();
	if (resild_cb_parse_budget(r, &q, &cb) &&
	    (cb.tokens_milli < 0 || cb.tokens_milli > q.max_milli || cb.hosts < 1 || cb.seq != 7))
		abort();
	q.tokens = false;
	resild_cb_parse_budget(r, &q, &cb);
	if (resild_cb_parse_conf(r, &cb) && strchr(cb.other_host, '#'))
		abort();
	if (resild_ck_parse(r, &th, &ck)) {
		if (ck.len % RESILD_CK_REC || (ck.len && !ck.blob) ||
		    !memchr(th.last, 0, sizeof(th.last)))
			abort();
		resild_ck_free_ans(&ck);
	}
	cl_hosts_parse(&c, r);
}

/* hiredis allocates what an array's or a string's header declares before
 * its elements come: a header past 2^16 (no reply of the scripts is that
 * long) is hiredis' allocation, not a parser's question */
static bool headers_small(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = 0;

		if (p[i] != '*' && p[i] != '$')
			continue;
		for (size_t j = i + 1; j < n && p[j] >= '0' && p[j] <= '9'; j++)
			if ((v = v * 10 + (p[j] - '0')) > 1u << 16)
				return false;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReader *rd;
	void *reply = NULL;

	if (!headers_small(data, size))
		return 0;
	rd = redisReaderCreate();
	if (!rd)
		abort();
	redisReaderFeed(rd, (const char *)data, size);
	while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
		check(reply);
		freeReplyObject(reply);
		reply = NULL;
	}
	redisReaderFree(rd);
	return 0;
}

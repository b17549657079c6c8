/* SPDX-License-Identifier: MIT */
/*
 * seg_event.c - the event ring of the state segment and the daemon's own
 * event queue. Any process appends to the ring: it takes an index with
 * fetch_add (relaxed) on event_head, stores the entry's seq = 0, a
 * release fence, the fields, then seq = idx + 1 with release; the daemon
 * reads each entry as a seqlock (seq with acquire before the copy, an
 * acquire fence, seq again after it). A writer killed between the two
 * stores leaves seq 0: the reader skips the entry after a grace period
 * (daemon/events.c). The daemon's own events go to a queue in its private
 * memory under a mutex instead (the loop and the cluster exchange push,
 * the loop takes). Design: docs/internals/seg.md, "The event ring".
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "seg_priv.h"

void resil_event_push(const struct resil_seg *s, uint32_t type, uint32_t slot, uint32_t gen,
		      uint32_t a, uint32_t b, uint32_t reason, uint64_t value, int64_t now)
{
	resil_event_push_by(s, 0, 0, type, slot, gen, a, b, reason, value, now);
}

int resil_seg_own_events(struct resil_seg *s, uint32_t cap)
{
	struct resil_evq *q = calloc(1, sizeof(*q) + (size_t)cap * sizeof(q->ev[0]));

	if (!q || !cap) {
		free(q);
		return -ENOMEM;
	}
	pthread_mutex_init(&q->lock, NULL);
	q->cap = cap;
	s->own_events = q;
	return 0;
}

static void own_push(struct resil_evq *q, const struct resil_event *e)
{
	pthread_mutex_lock(&q->lock);
	if (q->n == q->cap)
		q->dropped++;
	else
		memcpy(&q->ev[(q->head + q->n++) % q->cap], e, sizeof(*e));
	pthread_mutex_unlock(&q->lock);
}

int resil_seg_own_event_take(const struct resil_seg *s, struct resil_event *out, uint64_t *dropped)
{
	struct resil_evq *q = s->own_events;
	int r = -EAGAIN;

	*dropped = 0;
	if (!q)
		return r;
	pthread_mutex_lock(&q->lock);
	if (q->n) {
		memcpy(out, &q->ev[q->head], sizeof(*out));
		q->head = (q->head + 1) % q->cap;
		q->n--;
		r = 0;
	}
	*dropped = q->dropped;
	q->dropped = 0;
	pthread_mutex_unlock(&q->lock);
	return r;
}

void resil_event_push_by(const struct resil_seg *s, uint32_t client_id, uint32_t pid, uint32_t type,
			 uint32_t slot, uint32_t gen, uint32_t a, uint32_t b, uint32_t reason,
			 uint64_t value, int64_t now)
{
	struct resil_event *e;
	uint64_t idx;

	if (s && s->own_events) {
		struct resil_event own = {.time_ns = now,
					  .type = type,
					  .slot = slot,
					  .gen = gen,
					  .a = a,
					  .b = b,
					  .reason = reason,
					  .pid = pid,
					  .client_id = client_id,
					  .value = value};

		own_push(s->own_events, &own);
		return;
	}
	if (!s || !s->st || !s->geo.event_cap)
		return;
	idx = faa_relaxed(&s->st->event_head, 1);
	e = resil_seg_event(s, idx);
	/* in progress: a reader that copies now sees seq change */
	st_relaxed(&e->seq, 0);
	atomic_thread_fence(memory_order_release);
	e->time_ns = now;
	e->type = type;
	e->slot = slot;
	e->gen = gen;
	e->a = a;
	e->b = b;
	e->reason = reason;
	e->pid = pid;
	e->client_id = client_id;
	e->value = value;
	/* CRASH WINDOW: killed here, seq stays 0: the reader skips the entry
	 * after its grace period. */
	st_release(&e->seq, idx + 1);
}

int resil_event_read(const struct resil_seg *s, uint64_t idx, struct resil_event *out)
{
	struct resil_event *e = resil_seg_event(s, idx);
	uint64_t s1 = ld_acquire(&e->seq), s2;

	if (s1 != idx + 1)
		return s1 > idx + 1 ? -ESTALE : -EAGAIN;
	out->time_ns = e->time_ns;
	out->type = e->type;
	out->slot = e->slot;
	out->gen = e->gen;
	out->a = e->a;
	out->b = e->b;
	out->reason = e->reason;
	out->pid = e->pid;
	out->client_id = e->client_id;
	out->value = e->value;
	atomic_thread_fence(memory_order_acquire);
	s2 = ld_relaxed(&e->seq);
	if (s2 != s1)
		return s2 > idx + 1 || s2 == 0 ? -ESTALE : -EAGAIN;
	st_relaxed(&out->seq, s1);
	return 0;
}

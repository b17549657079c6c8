/* SPDX-License-Identifier: MIT */
/*
 * events.h - draining the event ring: log each event, stream it to
 * subscribers.
 */
#ifndef RESILD_EVENTS_H
#define RESILD_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct resild;
struct resil_event;

/* Start consuming: from the ring's current head on fresh segments, from
 * the stored consumer position on adopted ones. */
void resild_events_init(struct resild *d);
/* Each tick: everything complete since the last drain. */
void resild_events_drain(struct resild *d);

/* One event in words, e.g. "policy payments: closed -> open". */
size_t resild_event_format(struct resild *d, const struct resil_event *e, char *buf, size_t len);

#endif

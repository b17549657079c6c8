/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - the control protocol's message handling, without sockets.
 *
 * resild_handle() takes one request datagram and writes one response
 * datagram (and the fds to pass with it): a pure function of the daemon
 * state and the peer's credentials, so the loop, the tests and a fuzzer
 * drive the same code.
 */
#ifndef RESILD_CTL_H
#define RESILD_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "resild.h"

#define RESILD_HANDLE_CLOSE 1 /* send the reply, then close the connection */
#define RESILD_HANDLE_LATER                                                                        \
	2		      /* no reply yet: handle the same request again at                    \
			       * peer->later_ns (a define waiting for space) */
#define RESILD_HANDLE_FDS   2 /* at most this many fds per reply */

/*
 * Handle one request of len bytes. out has room for *outlen bytes (at
 * least RESILD_MSG_MAX) and gets the packed Response; fds (room for
 * RESILD_HANDLE_FDS) get descriptors to send with it (SCM_RIGHTS), owned
 * by the caller, who closes them after sending.
 * Returns 0 (reply, keep serving), RESILD_HANDLE_CLOSE (a malformed or
 * oversized request: reply with the error, then close),
 * RESILD_HANDLE_LATER (no reply yet: the same bytes handled again from
 * peer->later_ns on; the loop keeps them and reads nothing more from the
 * peer meanwhile), or -errno when no reply could be built at all.
 */
int resild_handle(struct resild *d, struct resild_peer *peer, const uint8_t *msg, size_t len,
		  uint8_t *out, size_t *outlen, int *fds, int *nfds);

/* An error Response (id as given) for a request that cannot be read, such
 * as one over RESILD_MSG_MAX: the loop sends it and closes. */
int resild_error_reply(uint64_t id, int err, const char *msg, uint8_t *out, size_t *outlen);

/* Does a subscriber want events of this policy (name filter)? */
bool resild_peer_wants(const struct resild_peer *peer, const char *policy);

/* Drop what subscription state the peer holds (the loop calls it on close). */
void resild_peer_gone(struct resild *d, struct resild_peer *peer);

/* Is the peer exempt from per-uid quotas (root, the daemon's own uid, a
 * member of the admin group)? */
bool resild_peer_exempt(const struct resild *d, const struct resild_peer *p);

/* The loop's numbers as of now, for the HTTP thread (every tick). */
void resild_metrics_publish(struct resild *d);
/* The same families for the HTTP thread: the numbers last published and
 * the segments as they are; snprintf semantics (the length it needs).
 * Safe on any thread. */
size_t resild_metrics_http_text(const struct resil_seg *seg, char *buf, size_t len);

#endif

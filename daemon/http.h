/* SPDX-License-Identifier: MIT */
/*
 * http.h - `resild --metrics-listen ADDR:PORT`: GET /metrics over HTTP
 * (libmicrohttpd), for Prometheus to scrape.
 *
 * One server per daemon, on its own thread (libmicrohttpd's internal
 * polling thread): the io_uring loop is never blocked by a slow scraper.
 * The text callback therefore runs on that thread: it must only read the
 * segments (resil_metrics_text does), never touch the daemon's
 * single-threaded structures.
 */
#ifndef RESILD_HTTP_H
#define RESILD_HTTP_H

#include <stddef.h>

/* Produce the exposition into buf with snprintf semantics: return the
 * whole length (without the NUL); when it is >= len the caller retries
 * with a bigger buffer. buf is NULL when len is 0. */
typedef size_t (*resild_http_text_fn)(char *buf, size_t len, void *ctx);

/*
 * Listen on addr ("127.0.0.1:9464", "[::1]:9464", "localhost:9464"; port 0
 * picks a free one) and serve GET /metrics with fn's text. 0, or -errno
 * with the reason logged: -EINVAL bad address, -EALREADY already started,
 * -ENOTSUP built without libmicrohttpd, -EADDRINUSE and friends from bind.
 */
int resild_http_start(const char *addr, resild_http_text_fn fn, void *ctx);
/* Serve on fd, a listening socket: TCP bound by someone else (a socket
 * systemd passed, bound outside the unit's PrivateNetwork=), or a unix
 * socket (--metrics-socket); where names it in the log. The server owns
 * fd from here on, also on failure. */
int resild_http_start_fd(int fd, const char *where, resild_http_text_fn fn, void *ctx);
/* The port actually bound (useful with port 0), 0 when not started. */
int resild_http_port(void);
/* Stop serving and join the thread; a no-op when not started. */
void resild_http_stop(void);

#endif

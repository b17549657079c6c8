/* SPDX-License-Identifier: MIT */
/*
 * http.c - GET /metrics over HTTP with libmicrohttpd (--metrics-listen).
 *
 * What: a small HTTP server on its own thread (libmicrohttpd's internal
 * polling thread) answering GET and HEAD of /metrics with the Prometheus
 * text exposition, 404 elsewhere, 405 for other methods.
 *
 * Why a thread: the daemon is one io_uring loop; a scraper that reads
 * slowly must not stall it. The thread only calls the text callback, which
 * reads the shared segments the same way any other process does (atomics,
 * records immutable once published) and the daemon's own numbers from the
 * copy the loop publishes at each tick (ctl_status.c, resild_metrics_publish:
 * one short mutex around a copy), never the loop's structures; so the
 * answer has the same families as `resilctl metrics`.
 *
 * Caps on what a peer can make us allocate: 16 connections (4 per
 * address), a 10 s idle timeout, 32 KiB of connection memory, and a
 * response of at most HTTP_MAX_BODY (larger answers 500). The body is
 * built per request (malloc, freed by libmicrohttpd after sending).
 *
 * Started once by main.c before the loop, stopped after it: start and stop
 * are not thread-safe with each other, and need not be.
 */
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "log.h"

#define HTTP_MAX_BODY	  (64u << 20)
#define HTTP_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Split "host:port" / "[v6]:port" and resolve it (numeric port). */
static int resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[256];
	const char *port, *end;
	struct addrinfo hints = {0}, *res = NULL;
	size_t n;
	int r;

	if (!addr || !*addr)
		return -EINVAL;
	if (addr[0] == '[') {
		end = strchr(addr, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		n = (size_t)(end - addr - 1);
		if (n >= sizeof(host))
			return -EINVAL;
		memcpy(host, addr + 1, n);
		port = end + 2;
	} else {
		end = strrchr(addr, ':');
		if (!end)
			return -EINVAL;
		n = (size_t)(end - addr);
		if (n >= sizeof(host) || memchr(addr, ':', n))
			return -EINVAL; /* a bare IPv6 address needs brackets */
		memcpy(host, addr, n);
		port = end + 1;
	}
	host[n] = '\0';
	if (!n || !*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
	    atoi(port) > 65535)
		return -EINVAL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
	r = getaddrinfo(host, port, &hints, &res);
	if (r || !res)
		return r == EAI_SYSTEM ? -errno : -EINVAL;
	if (res->ai_addrlen > sizeof(*ss)) {
		freeaddrinfo(res);
		return -EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

#ifdef RESIL_HAVE_MHD
#include <microhttpd.h>

static struct MHD_Daemon *httpd;
static resild_http_text_fn text_fn;
static void *text_ctx;
static int bound_port;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text,
			     const char *allow)
{
	struct MHD_Response *rsp;
	enum MHD_Result r;

	rsp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!rsp)
		return MHD_NO;
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(rsp, MHD_HTTP_HEADER_ALLOW, allow);
	r = MHD_queue_response(c, status, rsp);
	MHD_destroy_response(rsp);
	return r;
}

/* The exposition in a malloc'ed buffer: the callback says the length it
 * needs; the text can grow between two calls (a policy created), so retry
 * a few times with room to spare. */
static char *build(size_t *len)
{
	size_t cap = 1 << 16;

	for (int tries = 0; tries < 4; tries++) {
		char *buf = malloc(cap);
		size_t n;

		if (!buf)
			return NULL;
		n = text_fn(buf, cap, text_ctx);
		if (n < cap) {
			*len = n;
			return buf;
		}
		free(buf);
		if (n >= HTTP_MAX_BODY)
			return NULL;
		cap = n + n / 4 + 4096;
	}
	return NULL;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct MHD_Response *rsp;
	enum MHD_Result r;
	size_t len = 0;
	char *body;

	(void)cls;
	(void)version;
	(void)upload_data;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		if (*upload_data_size) {
			*upload_data_size = 0; /* discard a body */
			return MHD_YES;
		}
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", "GET, HEAD");
	}
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", NULL);
	body = build(&len);
	if (!body)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "metrics unavailable\n", NULL);
	rsp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!rsp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_CONTENT_TYPE);
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	r = MHD_queue_response(c, MHD_HTTP_OK, rsp);
	MHD_destroy_response(rsp);
	return r;
}

int resild_http_start(const char *addr, resild_http_text_fn fn, void *ctx)
{
	struct sockaddr_storage ss;
	socklen_t sslen = 0;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
	const union MHD_DaemonInfo *info;
	int r;

	if (httpd)
		return log_error_errno(-EALREADY, "metrics server already started");
	if (!fn)
		return -EINVAL;
	r = resolve(addr, &ss, &sslen);
	if (r < 0)
		return log_error_errno(r, "--metrics-listen %s: expected HOST:PORT or [V6]:PORT",
				       addr ? addr : "(null)");
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	text_fn = fn;
	text_ctx = ctx;
	httpd = MHD_start_daemon(flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &ss,
				 MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
				 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)4,
				 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
	if (!httpd) {
		r = errno ? -errno : -EADDRNOTAVAIL;
		return log_error_errno(r, "cannot serve metrics on %s: %m", addr);
	}
	info = MHD_get_daemon_info(httpd, MHD_DAEMON_INFO_BIND_PORT);
	bound_port = info ? info->port : 0;
	log_info("serving metrics on http://%s/metrics (port %d)", addr, bound_port);
	return 0;
}

int resild_http_start_fd(int fd, const char *where, resild_http_text_fn fn, void *ctx)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
	const union MHD_DaemonInfo *info;
	int r;

	if (httpd || !fn) {
		close(fd);
		return httpd ? -EALREADY : -EINVAL;
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0) {
		r = -errno;
		close(fd);
		return log_error_errno(r, "the metrics socket %s: %m", where);
	}
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	text_fn = fn;
	text_ctx = ctx;
	httpd = MHD_start_daemon(flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
				 MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
				 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)4,
				 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
	if (!httpd) {
		r = errno ? -errno : -EINVAL;
		close(fd);
		return log_error_errno(r, "cannot serve metrics on %s: %m", where);
	}
	info = MHD_get_daemon_info(httpd, MHD_DAEMON_INFO_BIND_PORT);
	bound_port = info ? info->port : 0;
	if (ss.ss_family == AF_UNIX)
		log_info("serving metrics on %s", where);
	else
		log_info("serving metrics on %s (port %d)", where, bound_port);
	return 0;
}

int resild_http_port(void)
{
	return httpd ? bound_port : 0;
}

void resild_http_stop(void)
{
	if (!httpd)
		return;
	MHD_stop_daemon(httpd);
	httpd = NULL;
	bound_port = 0;
}

#else /* !RESIL_HAVE_MHD */

int resild_http_start(const char *addr, resild_http_text_fn fn, void *ctx)
{
	struct sockaddr_storage ss;
	socklen_t sslen;

	(void)fn;
	(void)ctx;
	if (resolve(addr, &ss, &sslen) < 0)
		return log_error_errno(-EINVAL, "--metrics-listen %s: expected HOST:PORT",
				       addr ? addr : "(null)");
	return log_error_errno(-ENOTSUP, "--metrics-listen: resild was built without "
					 "libmicrohttpd");
}

int resild_http_start_fd(int fd, const char *where, resild_http_text_fn fn, void *ctx)
{
	(void)fn;
	(void)ctx;
	(void)where;
	close(fd);
	return log_error_errno(-ENOTSUP, "metrics socket: resild was built without "
					 "libmicrohttpd");
}

int resild_http_port(void)
{
	return 0;
}

void resild_http_stop(void)
{
}

#endif

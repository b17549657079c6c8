/* SPDX-License-Identifier: MIT */
/*
 * cluster_conn.c - policy.scope = global: where Redis is and the
 * connection to it (cluster.c lists the parts). Every function here runs
 * on the exchange thread but the URL's, TLS settings' and files' checks,
 * which cluster.c's init calls.
 *
 * Where Redis is. --cluster-redis names one Redis, one node of a Redis
 * Cluster (the others learned from its redirections, and again after a
 * failover), or the sentinels of a primary (asked at each connection, so
 * a failover is followed at the reconnection it causes); any of them over
 * TLS (OpenSSL beside hiredis, through a relay thread per connection).
 * Each is described where it is done, below (Redis Cluster in
 * cluster_rc.c, with the exchange round and the thread).
 *
 * Redis down, slow or garbage. The exchange has socket timeouts (ten
 * intervals, at least 2 s); any I/O error, a refused AUTH or an error of
 * the connection (NOSCRIPT, READONLY, ...) closes the connection, is
 * logged once per distinct error (and the return to service once), and
 * the thread reconnects after a jittered exponential backoff (interval ..
 * 1 s, full jitter between half and all of it); a script's error or
 * garbage is that policy's (cluster_rc.c, parsed_for). Leases run out into
 * the fallback meanwhile; no lease is believed past its expiry. Demand is
 * a rate over the last interval, so nothing piles up while Redis is away.

 * Who writes what: the connection and its scripts' digests, the thread
 * only; the error and the connected flag, under the lock (set_error).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "cluster.h"
#include "cluster_budget.h"
#include "cluster_bulkhead.h"
#include "cluster_keyed.h"
#include "cluster_priv.h"
#include "log.h"
#include "resil.h"
#include "resild.h"

/* "host[:port]" of n bytes at p into host and *port (defport when none);
 * false: not one. IPv6 in brackets: [::1]:6379. */
static bool parse_hostport(const char *p, size_t n, char *host, size_t hlen, int *port, int defport)
{
	const char *colon = NULL, *h = p;
	size_t hn;
	char num[8], *end;
	long v;

	if (n && *p == '[') {
		const char *rb = memchr(p, ']', n);

		if (!rb)
			return false;
		h = p + 1;
		hn = (size_t)(rb - h);
		if (rb + 1 < p + n) {
			if (rb[1] != ':')
				return false;
			colon = rb + 1;
		}
	} else {
		colon = memchr(p, ':', n);
		hn = colon ? (size_t)(colon - p) : n;
	}
	if (hn == 0 || hn >= hlen)
		return false;
	memcpy(host, h, hn);
	host[hn] = '\0';
	*port = defport;
	if (colon) {
		size_t pn = (size_t)(p + n - colon - 1);

		if (pn == 0 || pn >= sizeof(num))
			return false;
		memcpy(num, colon + 1, pn);
		num[pn] = '\0';
		v = strtol(num, &end, 10);
		if (*end || v < 1 || v > 65535)
			return false;
		*port = (int)v;
	}
	return true;
}

/* "/DB" (or nothing) at p into c->db; false: not a number. */
static bool parse_db(struct resild_cluster *c, const char *p)
{
	char *end;
	long v;

	if (!*p || (*p == '/' && !p[1]))
		return true;
	if (*p != '/')
		return false;
	v = strtol(p + 1, &end, 10);
	if (end == p + 1 || *end || v < 0 || v > 1000000)
		return false;
	c->db = (int)v;
	return true;
}

/* sentinel://h:p[,h:p...]/MASTER[/DB]: the sentinels and the master's name */
static int parse_sentinel(struct resild_cluster *c, const char *url)
{
	const char *p = url + 11, *slash = strchr(p, '/'), *name, *e;

	if (!slash || slash == p)
		goto bad;
	while (p < slash) {
		const char *comma = memchr(p, ',', (size_t)(slash - p));
		size_t n = comma ? (size_t)(comma - p) : (size_t)(slash - p);
		struct cl_node *s = &c->sentinels[c->nsentinels];

		if (c->nsentinels == SENTINELS_MAX)
			return log_error_errno(-EINVAL, "--cluster-redis %s: at most %d sentinels",
					       url, SENTINELS_MAX);
		if (!parse_hostport(p, n, s->addr, sizeof(s->addr), &s->port, 26379))
			goto bad;
		c->nsentinels++;
		p += n + (comma ? 1 : 0);
	}
	name = slash + 1;
	e = strchr(name, '/');
	if (e == name || !*name || (size_t)(e ? e - name : (long)strlen(name)) >= sizeof(c->master))
		goto bad;
	snprintf(c->master, sizeof(c->master), "%.*s", (int)(e ? e - name : (long)strlen(name)),
		 name);
	if (e && !parse_db(c, e))
		return log_error_errno(-EINVAL, "--cluster-redis %s: the database is not a number",
				       url);
	c->sentinel = true;
	return 0;
bad:
	return log_error_errno(-EINVAL,
			       "--cluster-redis %s: expected "
			       "sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]",
			       url);
}

/* redis://host[:port][/db], rediss:// (TLS), unix:/path (unix:///path too)
 * or sentinel://host:port[,host:port...]/master[/db] */
int cl_parse_url(struct resild_cluster *c, const char *url)
{
	const char *p, *rb;
	size_t n;

	if (strlen(url) >= sizeof(c->addr))
		return log_error_errno(-EINVAL, "--cluster-redis: the URL is too long");
	if (strchr(url, '@'))
		return log_error_errno(-EINVAL,
				       "--cluster-redis: no credentials in the URL (the command "
				       "line is visible to every user); use "
				       "--cluster-password-file");
	if (strncmp(url, "unix:", 5) == 0) {
		p = url + 5;
		if (strncmp(p, "//", 2) == 0)
			p += 2;
		if (*p != '/')
			return log_error_errno(
			    -EINVAL, "--cluster-redis %s: expected unix:/absolute/path", url);
		c->unix_sock = true;
		snprintf(c->addr, sizeof(c->addr), "%s", p);
		return 0;
	}
	if (strncmp(url, "sentinel://", 11) == 0)
		return parse_sentinel(c, url);
	if (strncmp(url, "rediss://", 9) == 0) {
		c->tls = true;
		p = url + 9;
	} else if (strncmp(url, "redis://", 8) == 0) {
		p = url + 8;
	} else {
		return log_error_errno(-EINVAL,
				       "--cluster-redis %s: expected redis://HOST[:PORT][/DB], "
				       "rediss://..., unix:/PATH or "
				       "sentinel://HOST[:PORT][,...]/MASTER[/DB]",
				       url);
	}
	/* [v6]:port: its colons are not the port's */
	rb = *p == '[' ? strchr(p, ']') : NULL;
	n = rb ? (size_t)(rb - p) + strcspn(rb, "/") : strcspn(p, "/");
	if (!parse_hostport(p, n, c->addr, sizeof(c->addr), &c->port, 6379))
		return log_error_errno(-EINVAL,
				       "--cluster-redis %s: expected a host name and a port "
				       "1..65535",
				       url);
	if (!parse_db(c, p + n))
		return log_error_errno(-EINVAL, "--cluster-redis %s: the database is not a number",
				       url);
	return 0;
}

int cl_read_line_file(const char *path, char *buf, size_t len, const char *what)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return log_error_errno(-errno, "%s %s: cannot read: %m", what, path);
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return log_error_errno(-EINVAL, "%s %s: empty", what, path);
	}
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	if (n == 0)
		return log_error_errno(-EINVAL, "%s %s: empty first line", what, path);
	return 0;
}

int64_t mono_ns(void)
{
	return resil_clock_monotonic(NULL);
}

uint64_t rnd_next(struct resild_cluster *c)
{
	/* xorshift64*: jitter only, seeded from the clock and the pid */
	c->rnd ^= c->rnd >> 12;
	c->rnd ^= c->rnd << 25;
	c->rnd ^= c->rnd >> 27;
	return c->rnd * 0x2545F4914F6CDD1DULL;
}

const char *io_error(const redisContext *rc, char *buf, size_t len)
{
	if (rc->err == REDIS_ERR_IO &&
	    (rc->errstr[0] == '\0' || strstr(rc->errstr, "temporarily unavailable"))) {
		snprintf(buf, len, "no answer within the timeout (Redis stalled or too slow)");
		return buf;
	}
	return rc->errstr[0] ? rc->errstr : "connection lost";
}

/* Log an error once per distinct text (a Redis that stays away would
 * otherwise fill the journal at every backoff). */
void set_error(struct resild_cluster *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	bool same;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&c->lock);
	same = strcmp(msg, c->last_error) == 0 && !c->connected;
	snprintf(c->last_error, sizeof(c->last_error), "%s", msg);
	c->connected = false;
	c->errors++;
	pthread_mutex_unlock(&c->lock);
	if (!same)
		log_error("cluster: %s; leases run out into --cluster-fallback %s", msg,
			  resil_fallback_name((uint32_t)c->fallback));
}

static void drop_pending(struct resild_cluster *c)
{
	for (uint32_t i = c->rpend; i < c->npend; i++)
		redisFreeCommand(c->pend[i].cmd);
	c->npend = c->rpend = 0;
}

void disconnect(struct resild_cluster *c)
{
	drop_pending(c);
	/* the nodes' connections go with the seed's: the slot map is learned
	 * again from the seed's redirections (the addresses stay, a seed to
	 * fall back on when the first one is gone) */
	for (uint32_t i = 0; i < c->nnodes; i++) {
		if (c->nodes[i].rc)
			redisFree(c->nodes[i].rc);
		c->nodes[i].rc = NULL;
	}
	memset(c->slot_node, 0, sizeof(c->slot_node));
	if (c->rc)
		redisFree(c->rc);
	c->rc = NULL;
	c->cur = NULL;
	c->sha[0] = '\0';
	c->bk_sha[0] = '\0';
	c->cb_sha[0] = '\0';
	c->cf_sha[0] = '\0';
	c->bh_sha[0] = '\0';
	c->ck_sha[0] = '\0';
	c->hs_sha[0] = '\0';
}

const char *where(const struct resild_cluster *c, char *buf, size_t len)
{
	if (c->unix_sock)
		snprintf(buf, len, "unix:%s", c->addr);
	else if (c->sentinel && !c->addr[0])
		snprintf(buf, len, "%s", c->url);
	else
		snprintf(buf, len, "%s:%d%s", c->addr, c->port, c->sentinel ? " (sentinel)" : "");
	return buf;
}

/*
 * TLS. Debian's hiredis (0.14) has no TLS of its own, so OpenSSL does the
 * session and hiredis speaks plain RESP through a socketpair: the
 * handshake (the server's certificate checked against --cluster-tls-ca,
 * and its name or address against the node's host or
 * --cluster-tls-server-name) runs in the exchange thread under the socket
 * timeouts, so a refused certificate is an error of that connection like
 * any other; then a relay thread per connection owns the SSL session and
 * the TCP socket and copies bytes both ways until either side closes:
 * redisFree closing hiredis' end ends the relay, Redis closing the TCP
 * connection closes hiredis' end (an I/O error there). The relay never
 * blocks on one direction while the other waits: it reads only what poll
 * says is there (SSL_MODE_AUTO_RETRY off: a TLS record that is not data,
 * a session ticket, returns to the poll), and the TCP socket keeps the
 * exchange's timeouts, so a peer that stops reading ends it.
 */
struct relay {
	SSL *ssl;
	int tcp, sp;
};

/* all of p to the socket fd; false: its reader is gone (no SIGPIPE) */
static bool send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	char buf[16384];

	for (;;) {
		struct pollfd pf[2] = {{.fd = r->sp, .events = POLLIN},
				       {.fd = r->tcp, .events = POLLIN}};
		int n;

		if (SSL_pending(r->ssl) > 0)
			pf[1].revents = POLLIN;
		else if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents) {
			ssize_t k = read(r->sp, buf, sizeof(buf));

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			n = SSL_write(r->ssl, buf, (int)k);
			if (n <= 0)
				break;
		}
		if (pf[1].revents) {
			n = SSL_read(r->ssl, buf, sizeof(buf));
			if (n > 0) {
				if (!send_all(r->sp, buf, (size_t)n))
					break;
			} else {
				int e = SSL_get_error(r->ssl, n);

				if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
					break;
			}
		}
	}
	SSL_free(r->ssl);
	close(r->tcp);
	close(r->sp);
	free(r);
	return NULL;
}

/* Why OpenSSL refused the last call: its reason, else errno's. */
static const char *ssl_why(void)
{
	int e = errno;
	unsigned long f = ERR_peek_error(), l = ERR_peek_last_error();
	const char *r = ERR_reason_error_string(l);

	ERR_clear_error();
	if (f && ERR_GET_LIB(f) == ERR_LIB_SYS) /* "system lib": its reason is an errno */
		return strerror(ERR_GET_REASON(f));
	return r ? r : e ? strerror(e) : "unknown reason";
}

int cl_tls_init(struct resild_cluster *c, const struct resild_opts *o)
{
	const char *const files[][2] = {{"--cluster-tls-ca", o->cluster_tls_ca},
					{"--cluster-tls-cert", o->cluster_tls_cert},
					{"--cluster-tls-key", o->cluster_tls_key}};

	if (!o->cluster_tls_cert != !o->cluster_tls_key)
		return log_error_errno(-EINVAL,
				       "--cluster-tls-cert and --cluster-tls-key go together");
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (files[i][1] && access(files[i][1], R_OK) < 0)
			return log_error_errno(-errno, "%s %s: cannot read: %m", files[i][0],
					       files[i][1]);
	c->ssl = SSL_CTX_new(TLS_client_method());
	if (!c->ssl)
		return log_error_errno(-ENOMEM, "cluster: TLS: out of memory");
	SSL_CTX_set_min_proto_version(c->ssl, TLS1_2_VERSION);
	SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
	errno = 0;
	if (o->cluster_tls_ca ? SSL_CTX_load_verify_locations(c->ssl, o->cluster_tls_ca, NULL) != 1
			      : SSL_CTX_set_default_verify_paths(c->ssl) != 1)
		return log_error_errno(-EINVAL, "--cluster-tls-ca %s: cannot load: %s",
				       o->cluster_tls_ca ? o->cluster_tls_ca : "(system default)",
				       ssl_why());
	if (o->cluster_tls_cert &&
	    SSL_CTX_use_certificate_chain_file(c->ssl, o->cluster_tls_cert) != 1)
		return log_error_errno(-EINVAL, "--cluster-tls-cert %s: cannot load: %s",
				       o->cluster_tls_cert, ssl_why());
	if (o->cluster_tls_key &&
	    (SSL_CTX_use_PrivateKey_file(c->ssl, o->cluster_tls_key, SSL_FILETYPE_PEM) != 1 ||
	     SSL_CTX_check_private_key(c->ssl) != 1))
		return log_error_errno(-EINVAL, "--cluster-tls-key %s: cannot load: %s",
				       o->cluster_tls_key, ssl_why());
	if (o->cluster_tls_server_name) {
		if (!*o->cluster_tls_server_name ||
		    strlen(o->cluster_tls_server_name) >= sizeof(c->tls_name))
			return log_error_errno(-EINVAL, "--cluster-tls-server-name: 1 to %zu bytes",
					       sizeof(c->tls_name) - 1);
		snprintf(c->tls_name, sizeof(c->tls_name), "%s", o->cluster_tls_server_name);
	}
	return 0;
}

/* A TCP connection to host:port under the timeouts; -1 (err set). */
static int tcp_open(const char *host, int port, struct timeval tv, char *err, size_t elen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai, *a;
	char ps[8];
	int fd = -1, e, one = 1;

	snprintf(ps, sizeof(ps), "%d", port);
	e = getaddrinfo(host, ps, &hints, &ai);
	if (e) {
		snprintf(err, elen, "%s", gai_strerror(e));
		return -1;
	}
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		/* connect() honours SO_SNDTIMEO */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		snprintf(err, elen, "%s", strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* hiredis over a TLS session with host:port; NULL (err set). */
static redisContext *tls_connect(struct resild_cluster *c, const char *host, int port,
				 struct timeval tv, char *err, size_t elen)
{
	const char *name = c->tls_name[0] ? c->tls_name : host;
	struct in6_addr ip;
	struct relay *r = NULL;
	redisContext *rc;
	pthread_t t;
	SSL *ssl;
	int fd, sp[2] = {-1, -1};
	long v;

	fd = tcp_open(host, port, tv, err, elen);
	if (fd < 0)
		return NULL;
	ssl = SSL_new(c->ssl);
	if (!ssl) {
		snprintf(err, elen, "TLS: out of memory");
		close(fd);
		return NULL;
	}
	SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
	SSL_set_fd(ssl, fd);
	if (inet_pton(AF_INET, name, &ip) == 1 || inet_pton(AF_INET6, name, &ip) == 1) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
	} else {
		SSL_set_tlsext_host_name(ssl, name);
		SSL_set1_host(ssl, name);
	}
	ERR_clear_error();
	errno = 0;
	if (SSL_connect(ssl) != 1) {
		v = SSL_get_verify_result(ssl);
		if (v != X509_V_OK)
			snprintf(err, elen, "TLS: the server's certificate is refused: %s (%s)",
				 X509_verify_cert_error_string(v),
				 v == X509_V_ERR_HOSTNAME_MISMATCH ||
					 v == X509_V_ERR_IP_ADDRESS_MISMATCH
				     ? "--cluster-tls-server-name"
				     : "--cluster-tls-ca");
		else if (ERR_peek_error()) {
			const char *why = ssl_why();

			/* a plain Redis answers a ClientHello with RESP */
			snprintf(err, elen, "TLS handshake: %s%s", why,
				 strstr(why, "wrong version number") || strstr(why, "packet length")
				     ? " (a plain port? redis:// without --cluster-tls-*)"
				     : "");
		} else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT)
			/* a plain Redis reads a ClientHello as the start of an
			 * inline command and waits for its end: no answer */
			snprintf(err, elen,
				 "TLS handshake: no answer within the timeout (a plain port? "
				 "redis:// without --cluster-tls-*; or Redis stalled)");
		else
			snprintf(err, elen, "TLS handshake: %s",
				 errno ? strerror(errno) : "the server closed the connection");
		goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 ||
	    !(r = malloc(sizeof(*r)))) {
		snprintf(err, elen, "TLS: socketpair: %s", strerror(errno ? errno : ENOMEM));
		goto fail;
	}
	*r = (struct relay){.ssl = ssl, .tcp = fd, .sp = sp[1]};
	/* the relay inherits this thread's mask: every signal blocked */
	if (pthread_create(&t, NULL, relay_main, r) != 0) {
		snprintf(err, elen, "TLS: cannot start a relay thread");
		free(r);
		close(sp[1]);
		sp[1] = -1;
		goto fail;
	}
	pthread_detach(t);
	rc = redisConnectFd(sp[0]);
	if (!rc || rc->err) {
		snprintf(err, elen, "%s", rc ? rc->errstr : "out of memory");
		if (rc)
			redisFree(rc); /* closes sp[0]: the relay ends */
		else
			close(sp[0]);
		return NULL;
	}
	return rc;
fail:
	if (sp[0] >= 0)
		close(sp[0]);
	if (sp[1] >= 0)
		close(sp[1]);
	SSL_free(ssl);
	close(fd);
	return NULL;
}

/* A connection to host:port, TLS when configured; NULL (err set). */
redisContext *tcp_connect(struct resild_cluster *c, const char *host, int port, struct timeval tv,
			  char *err, size_t elen)
{
	redisContext *rc;

	if (c->tls)
		rc = tls_connect(c, host, port, tv, err, elen);
	else {
		rc = redisConnectWithTimeout(host, port, tv);
		if (!rc || rc->err) {
			snprintf(err, elen, "%s", rc ? rc->errstr : "out of memory");
			if (rc)
				redisFree(rc);
			rc = NULL;
		}
	}
	if (rc)
		redisSetTimeout(rc, tv);
	return rc;
}

/*
 * Sentinel. The primary is whatever the sentinels name for the master:
 * asked (SENTINEL get-master-addr-by-name, the first sentinel that
 * answers) at each connection; the node it names must say it is a
 * primary (ROLE). After a failover the old primary's connection fails, or
 * it answers -READONLY once it is back as a replica: both close the
 * connection (next_reply), and the reconnection asks the sentinels again.
 * The backoff is capped at SENTINEL_BACKOFF_MAX_NS there: a failover takes
 * seconds, and asking a sentinel is cheap.
 * A failover by hand (SENTINEL FAILOVER) leaves the old primary up and
 * taking writes until the sentinels reconfigure it, 10 s later: its
 * connection never fails. So while connected the thread asks the
 * sentinels again every SENTINEL_RECHECK_NS (sentinel_recheck) and moves
 * to the primary they name. What it wrote meanwhile on the old one is
 * lost with that node's resync; the reports are totals since the host
 * started (cluster_budget.c), so the next report to the new primary puts
 * it back.
 */
static bool sentinel_discover(struct resild_cluster *c, struct timeval tv, char *err, size_t elen)
{
	snprintf(err, elen, "no sentinel answered");
	for (uint32_t i = 0; i < c->nsentinels; i++) {
		const struct cl_node *s = &c->sentinels[i];
		char e[200];
		redisContext *rc = tcp_connect(c, s->addr, s->port, tv, e, sizeof(e));
		redisReply *r;
		long port;

		if (!rc) {
			snprintf(err, elen, "sentinel %s:%d: %s", s->addr, s->port, e);
			continue;
		}
		r = redisCommand(rc, "SENTINEL get-master-addr-by-name %s", c->master);
		if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING &&
		    r->element[0]->len < (int)sizeof(c->addr) &&
		    (port = strtol(r->element[1]->str, NULL, 10)) >= 1 && port <= 65535) {
			snprintf(c->addr, sizeof(c->addr), "%s", r->element[0]->str);
			c->port = (int)port;
			freeReplyObject(r);
			redisFree(rc);
			return true;
		}
		snprintf(err, elen, "sentinel %s:%d: %s", s->addr, s->port,
			 !r				? rc->errstr
			 : r->type == REDIS_REPLY_ERROR ? r->str
			 : r->type == REDIS_REPLY_NIL	? "no such master"
							: "an answer that cannot be read");
		if (r)
			freeReplyObject(r);
		redisFree(rc);
	}
	return false;
}

/* While connected: do the sentinels name another primary now? Then close,
 * and the reconnection goes there. Sentinels out of reach keep the
 * connection as it is. */
void sentinel_recheck(struct resild_cluster *c)
{
	char addr[sizeof(c->addr)], err[256], w[URL_MAX + 16];
	struct timeval tv = {.tv_sec = 0, .tv_usec = 200 * 1000};
	int port = c->port;

	memcpy(addr, c->addr, sizeof(addr));
	if (!sentinel_discover(c, tv, err, sizeof(err))) {
		memcpy(c->addr, addr, sizeof(addr));
		c->port = port;
		return;
	}
	if (c->port == port && strcmp(c->addr, addr) == 0)
		return;
	log_notice("cluster: the sentinels name %s for %s now (was %s:%d): reconnecting",
		   where(c, w, sizeof(w)), c->master, addr, port);
	disconnect(c);
}

/* Is the node c->rc is connected to a primary? false: logged, closed. */
static bool sentinel_check_role(struct resild_cluster *c)
{
	redisReply *r = redisCommand(c->rc, "ROLE");
	char w[URL_MAX + 16];
	bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		  r->element[0]->type == REDIS_REPLY_STRING &&
		  strcmp(r->element[0]->str, "master") == 0;

	if (!ok) {
		set_error(c, "Redis at %s, named by the sentinels for %s, is not a primary (%s)",
			  where(c, w, sizeof(w)), c->master,
			  !r				 ? c->rc->errstr
			  : r->type == REDIS_REPLY_ERROR ? r->str
			  : r->type == REDIS_REPLY_ARRAY && r->elements &&
				  r->element[0]->type == REDIS_REPLY_STRING
			      ? r->element[0]->str
			      : "an answer that cannot be read");
		disconnect(c);
	}
	if (r)
		freeReplyObject(r);
	return ok;
}

/* A command whose reply must not be an error; false: logged, closed. */
static bool simple(struct resild_cluster *c, const char *what, redisReply **out, int argc,
		   const char **argv)
{
	redisReply *r = redisCommandArgv(c->rc, argc, argv, NULL);
	char w[URL_MAX + 16], e[96];

	if (!r) {
		/* a connection that fails at its first words: a TLS port
		 * spoken to in plain drops it */
		set_error(c, "Redis at %s: %s: %s%s", where(c, w, sizeof(w)), what,
			  io_error(c->rc, e, sizeof(e)),
			  c->tls || c->unix_sock ? ""
						 : " (a TLS port? rediss:// or --cluster-tls-ca)");
		disconnect(c);
		return false;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		set_error(c, "Redis at %s refused %s: %s", where(c, w, sizeof(w)), what, r->str);
		freeReplyObject(r);
		disconnect(c);
		return false;
	}
	if (out)
		*out = r;
	else
		freeReplyObject(r);
	return true;
}

static bool load_script(struct resild_cluster *c, const char *lua, char *sha)
{
	const char *argv[] = {"SCRIPT", "LOAD", lua};
	redisReply *r;
	char w[URL_MAX + 16];

	if (!simple(c, "SCRIPT LOAD", &r, 3, argv))
		return false;
	if (r->type != REDIS_REPLY_STRING || r->len >= (long)sizeof(c->sha)) {
		set_error(c, "Redis at %s answered SCRIPT LOAD with garbage (type %d)",
			  where(c, w, sizeof(w)), r->type);
		freeReplyObject(r);
		disconnect(c);
		return false;
	}
	memcpy(sha, r->str, (size_t)r->len);
	sha[r->len] = '\0';
	freeReplyObject(r);
	return true;
}

bool connect_redis(struct resild_cluster *c)
{
	/* Generous: only this thread waits, and a late answer is still worth
	 * applying (its expiry counts from the request). Closing on a short
	 * timeout would turn a slow moment into a reconnect and a backoff,
	 * and leases into fallbacks for seconds. */
	int64_t to = resil_max64(10 * c->interval_ns, 2 * RESIL_NS_PER_S);
	struct timeval tv = {.tv_sec = to / RESIL_NS_PER_S,
			     .tv_usec = (to % RESIL_NS_PER_S) / 1000};
	char w[URL_MAX + 16], db[16], err[256], e2[256];
	const struct cl_node *via = NULL; /* the node reached when the seed is not */
	int64_t t0;

	if (c->sentinel && !sentinel_discover(c, tv, err, sizeof(err))) {
		set_error(c, "no primary for %s from the sentinels: %s", c->master, err);
		return false;
	}
	if (c->unix_sock) {
		c->rc = redisConnectUnixWithTimeout(c->addr, tv);
		if (c->rc && c->rc->err) {
			snprintf(err, sizeof(err), "%s", c->rc->errstr);
			redisFree(c->rc);
			c->rc = NULL;
		} else if (!c->rc) {
			snprintf(err, sizeof(err), "out of memory");
		} else {
			redisSetTimeout(c->rc, tv);
		}
	} else {
		c->rc = tcp_connect(c, c->addr, c->port, tv, err, sizeof(err));
	}
	/* a Redis Cluster whose seed node is gone: the nodes it named */
	for (uint32_t i = 0; !c->rc && i < c->nnodes; i++)
		if ((c->rc =
			 tcp_connect(c, c->nodes[i].addr, c->nodes[i].port, tv, e2, sizeof(e2))))
			via = &c->nodes[i];
	if (!c->rc) {
		set_error(c, "cannot connect to Redis at %s: %s", where(c, w, sizeof(w)), err);
		disconnect(c);
		return false;
	}
	if (c->sentinel && !sentinel_check_role(c))
		return false;
	if (c->have_password) {
		const char *argv[] = {"AUTH", c->password};

		if (!simple(c, "AUTH (--cluster-password-file)", NULL, 2, argv))
			return false;
	}
	if (c->db) {
		const char *argv[] = {"SELECT", db};

		snprintf(db, sizeof(db), "%d", c->db);
		if (!simple(c, "SELECT", NULL, 2, argv))
			return false;
	}
	if (!load_script(c, LEASE_LUA, c->sha) || !load_script(c, BREAKER_LUA, c->bk_sha) ||
	    !load_script(c, resild_cb_budget_lua, c->cb_sha) ||
	    !load_script(c, resild_cb_conf_lua, c->cf_sha) ||
	    !load_script(c, resild_cbh_lua, c->bh_sha) || !load_script(c, resild_ck_lua, c->ck_sha))
		return false;
	/* one round trip timed: the first leases fit it already */
	t0 = mono_ns();
	if (!load_script(c, HOSTS_LUA, c->hs_sha))
		return false;
	cl_rtt_note(c, mono_ns() - t0);
	pthread_mutex_lock(&c->lock);
	bool was = c->last_error[0] != '\0';

	c->connected = true;
	c->last_error[0] = '\0';
	if (via)
		snprintf(c->reached, sizeof(c->reached), "%s:%d", via->addr, via->port);
	else
		c->reached[0] = '\0';
	pthread_mutex_unlock(&c->lock);
	if (via)
		log_notice("cluster: connected to Redis Cluster node %s:%d (the seed %s is out of "
			   "reach: %s)",
			   via->addr, via->port, where(c, w, sizeof(w)), err);
	else if (was)
		log_notice("cluster: connected to Redis at %s again", where(c, w, sizeof(w)));
	else
		log_info("cluster: connected to Redis at %s as host %s (run %s)",
			 where(c, w, sizeof(w)), c->host, c->run);
	return true;
}

/* SPDX-License-Identifier: MIT */
/*
 * socket.c - resil_bench's naive policy server: one Get request to resild
 * per decision.
 */
#include "bench.h"

/* ---------------------------------------------------------------------- */
/* A naive policy server: one Get request to resild per decision */

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

/* One request, one response: pack, send, receive, unpack, as a client of
 * a policy server would for every decision. */
static int ctl_roundtrip(int fd, Resil__Request *req, uint8_t *buf, size_t cap)
{
	size_t len = resil__request__get_packed_size(req);
	Resil__Response *resp;
	ssize_t n;
	int ret = 0;

	if (len > cap)
		return -EMSGSIZE;
	resil__request__pack(req, buf);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -errno;
	n = recv(fd, buf, cap, 0);
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	resp = resil__response__unpack(NULL, (size_t)n, buf);
	if (!resp)
		return -EPROTO;
	if (resp->error)
		ret = -(int)resp->error->errno_value;
	resil__response__free_unpacked(resp, NULL);
	return ret;
}

void run_socket(resil_t *r)
{
	Resil__Request req = RESIL__REQUEST__INIT;
	Resil__Hello hello = RESIL__HELLO__INIT;
	Resil__Get get = RESIL__GET__INIT;
	int n = opt.smoke ? 200 : 20000, fd, ret, i;
	static uint8_t buf[65536];
	char name[64];
	double *lat;

	if (!selected("socket", "get_roundtrip") || !mkpol(r, "sock", "breaker.window = count:100"))
		return;
	fprintf(stderr, "socket\n");
	snprintf(name, sizeof(name), "bench-sock-%d", (int)getpid());
	fd = ctl_connect(opt.socket);
	if (fd < 0) {
		fprintf(stderr, "resil_bench: connect %s: %s\n", opt.socket, strerror(-fd));
		return;
	}
	hello.min_version = 1;
	hello.max_version = 1;
	hello.client = "resil_bench";
	req.id = 1;
	req.body_case = RESIL__REQUEST__BODY_HELLO;
	req.hello = &hello;
	ret = ctl_roundtrip(fd, &req, buf, sizeof(buf));
	if (ret < 0)
		fprintf(stderr, "resil_bench: hello: %s (going on)\n", strerror(-ret));

	lat = calloc(n, sizeof(*lat));
	get.name = name;
	req.body_case = RESIL__REQUEST__BODY_GET;
	req.get = &get;
	for (int warm = 0; warm < 2 && lat; warm++) {
		pid_t spin = warm ? spinner_start() : -1;

		for (i = 0; i < n; i++) {
			int64_t t = mono_ns();

			req.id = (uint64_t)i + 2;
			ret = ctl_roundtrip(fd, &req, buf, sizeof(buf));
			if (ret < 0) {
				fprintf(stderr, "resil_bench: get %s: %s\n", name, strerror(-ret));
				break;
			}
			lat[i] = (double)(mono_ns() - t);
		}
		spinner_stop(spin);
		if (i == n)
			emit_latency("socket", "get_roundtrip", lat, n, warm);
	}
	free(lat);
	close(fd);
}

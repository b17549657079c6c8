/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ctl.c - the daemon's control-message handler on arbitrary bytes.
 *
 * The handler is a pure function of the daemon state and the peer's
 * credentials (daemon/ctl.h), so the fuzzer drives the same code the loop
 * does. Every input gets a reply no bigger than a message, or a refusal;
 * the daemon state stays valid (resil_seg_check) whatever was asked, by
 * root or by an unprivileged peer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "resild.h"
#include "seg_records.h"

static struct resild d;
static uint8_t out[RESILD_MSG_MAX];

static void setup(void)
{
	struct resil_seg_params p = { .slots = 64, .clients = 16, .events = 64,
				      .state_size = 4 << 20 };

	memset(&d, 0, sizeof(d));
	d.opts.policies = 64;
	d.opts.clients = 16;
	d.listen_fd = -1;
	/* a Reload reads the files: a directory that does not exist fails it
	 * at once, with the error in the answer */
	d.opts.config_dir = "/nonexistent/resild-fuzz";
	if (resil_seg_create(&d.seg, &p) < 0)
		abort();
	d.have_seg = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resild_peer peer = {.rx_fd = -1};
	gid_t groups[2] = { 100, 1000 };
	int fds[RESILD_HANDLE_FDS], nfds = 0, r;
	size_t outlen = sizeof(out);
	char err[256];

	if (!d.have_seg)
		setup();
	/* the first byte picks who asks: root, the creator, a stranger */
	if (size && (data[0] & 3)) {
		peer.uid = (data[0] & 1) ? 1000 : 65534;
		peer.gid = peer.uid;
		peer.groups = groups;
		peer.ngroups = 2;
	}
	peer.pid = 4242;
	r = resild_handle(&d, &peer, data, size, out, &outlen, fds, &nfds);
	if (r >= 0 && outlen > RESILD_MSG_MAX)
		abort();
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	resild_peer_gone(&d, &peer);
	if (resil_seg_check(&d.seg, err, sizeof(err)) != 0)
		abort();
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * loop.c - resild's single-threaded io_uring event loop: the ring, the
 * signals, the tick, the pidfd and eventfd watches, and the dispatch of
 * every completion; the control socket's connections are loop_conn.c's
 * (the two share loop_priv.h).
 *
 * Everything the daemon waits for is one io_uring operation:
 *   accept    multishot accept on the listening socket (plain accept,
 *             re-armed each time, on kernels without multishot);
 *   recvmsg   one outstanding per connection, into a buffer of
 *             RESILD_MSG_MAX + 1 bytes; MSG_TRUNC or a longer datagram
 *             marks an oversized request;
 *   sendmsg   one outstanding per connection, from its queue of packed
 *             Responses, with SCM_RIGHTS when the reply carries fds;
 *   read      on a signalfd for SIGTERM, SIGINT (stop) and SIGHUP (reload);
 *   timeout   the maintenance tick (RESILD_TICK_NS);
 *   read      on the cluster thread's eventfd (its answers are ready);
 *   poll      POLLIN on the pidfd of each client row (the process exited).
 * user_data packs the operation, a connection or row index and a cookie
 * (a connection's generation, a watch's cookie), so a completion that
 * arrives for a connection or watch that was closed and reused meanwhile
 * is recognised and dropped.
 *
 * Nothing here touches shared memory except through the modules the tick
 * calls (policy maintenance, the client registry, the event drain).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "clients.h"
#include "cluster.h"
#include "events.h"
#include "log.h"
#include "loop.h"
#include "notify.h"
#include "policy.h"
#include "segmove.h"

#include "loop_priv.h"

struct io_uring_sqe *get_sqe(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* A test's injected failure of the arm of kind k (0 accept, 1 signal,
 * 2 tick): see fail_kind. */
static bool arm_fails(struct resild_loop *l, unsigned k)
{
	static const char *const kinds[] = {"accept", "signal", "tick"};
	unsigned n = ++l->arms[k];

	return l->fail_n && strcmp(l->fail_kind, kinds[k]) == 0 && n >= l->fail_from &&
	       n < l->fail_from + l->fail_n;
}

/*
 * Re-arming. Every operation that completes once (the tick's timeout, the
 * signalfd and eventfd reads, a plain accept) is queued again by its
 * handler; a queue that fails (no submission entry: the ring is full of
 * replies and pidfd polls even after a submit) would stop maintenance,
 * shutdown or accepting for good. So each keeps an armed flag, and a
 * failed arm is tried again at the next tick (on_tick) and, for the tick
 * itself, before each wait of the loop, which then waits at most a tick
 * and runs on_tick itself when nothing else wakes it.
 */
int arm_accept(struct resild *d)
{
	struct resild_loop *l = d->loop;
	struct io_uring_sqe *sqe = arm_fails(l, 0) ? NULL : get_sqe(l);

	if (!sqe)
		return -EBUSY;
	if (l->multishot)
		io_uring_prep_multishot_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	else
		io_uring_prep_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, ud(OP_ACCEPT, 0, 0));
	l->accept_armed = true;
	return 0;
}

static int arm_signal(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = arm_fails(l, 1) ? NULL : get_sqe(l);

	if (!sqe) {
		log_warning(
		    "cannot queue the signal read (ring full): tried again at the next tick");
		return -EBUSY;
	}
	io_uring_prep_read(sqe, l->sigfd, &l->sig, sizeof(l->sig), 0);
	io_uring_sqe_set_data64(sqe, ud(OP_SIGNAL, 0, 0));
	l->signal_armed = true;
	return 0;
}

static int arm_tick(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = arm_fails(l, 2) ? NULL : get_sqe(l);

	if (!sqe) {
		log_warning("cannot queue the tick (ring full): the loop ticks by its own wait");
		return -EBUSY;
	}
	l->tick.tv_sec = RESILD_TICK_NS / RESIL_NS_PER_S;
	l->tick.tv_nsec = RESILD_TICK_NS % RESIL_NS_PER_S;
	io_uring_prep_timeout(sqe, &l->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, ud(OP_TICK, 0, 0));
	l->tick_armed = true;
	return 0;
}

static int arm_wake(struct resild_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, l->wakefd, &l->wake, sizeof(l->wake), 0);
	io_uring_sqe_set_data64(sqe, ud(OP_WAKE, 0, 0));
	l->wake_armed = true;
	return 0;
}

int resild_loop_watch_wake(struct resild *d, int fd)
{
	d->loop->wakefd = fd;
	return fd >= 0 ? arm_wake(d->loop) : 0;
}

/* The cluster thread's answers are ready: apply them now. A read that
 * fails leaves them to the tick (logged once). */
static void on_wake(struct resild *d, int res)
{
	d->loop->wake_armed = false;
	if (res == -EINTR || res == -EAGAIN || res > 0) {
		if (res > 0)
			resild_cluster_woken(d);
		if (!d->stopping)
			arm_wake(d->loop);
		return;
	}
	log_error_errno(res, "cluster eventfd: %m; answers wait for the tick");
}

int resild_loop_watch_pid(struct resild *d, int fd, uint32_t row, uint32_t cookie)
{
	struct io_uring_sqe *sqe;

	/* no loop (the modules driven in-process, as fuzz_live does): nothing
	 * polls, an exit is only learnt through resild_clients_exited */
	if (!d->loop)
		return 0;
	sqe = get_sqe(d->loop);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	io_uring_sqe_set_data64(sqe, ud(OP_PIDFD, row, cookie));
	return 0;
}

void resild_loop_unwatch_pid(struct resild *d, uint32_t row, uint32_t cookie)
{
	struct io_uring_sqe *sqe;

	if (!d->loop)
		return;
	sqe = get_sqe(d->loop);
	if (!sqe)
		return;
	io_uring_prep_poll_remove(sqe, ud(OP_PIDFD, row, cookie));
	io_uring_sqe_set_data64(sqe, ud(OP_IGNORE, 0, 0));
}

/* A state word found out of range and repaired: counted (the daemon's
 * private count, which the metrics show from seg.repairs; st->state_repairs
 * is a copy for observers) and an event naming the policy and the word. */
void resild_state_repaired(struct resild *d, uint32_t slot, uint32_t gen, uint32_t word, uint32_t n)
{
	d->state_repairs += n;
	st_relaxed(&d->seg.repairs, d->state_repairs);
	st_relaxed(&d->seg.st->state_repairs, d->state_repairs);
	resil_event_push(&d->seg, RESIL_EV_REPAIRED, slot, gen, word, n, 0, n,
			 resil_clock_monotonic(NULL));
}

static int maintain_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			void *ctx)
{
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};

	resil_policy_maintain(&x, rec);
	if (x.repairs)
		resild_state_repaired(ctx, slot, rec->gen, x.repair_word, x.repairs);
	return 0;
}

/* Slot words are written by this daemon only (it is the configuration's
 * one writer), so a relaxed load sees our own stores. */
static uint32_t count_policies(struct resild *d)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < d->seg.cfg->slot_cap; i++)
		if (ld_relaxed(&resil_seg_slots(&d->seg)[i]))
			n++;
	return n;
}

static void update_status(struct resild *d)
{
	char s[128];

	snprintf(s, sizeof(s), "%u policies, %u clients", count_policies(d),
		 resild_clients_live(d));
	if (strcmp(s, d->loop->status)) {
		snprintf(d->loop->status, sizeof(d->loop->status), "%s", s);
		resild_notify_status(s);
	}
}

static int reload(struct resild *d, bool retry);

static void on_tick(struct resild *d)
{
	struct resild_loop *l = d->loop;
	int64_t now;

	l->tick_armed = false;
	/* what failed to re-arm since the last tick (see "Re-arming") */
	if (!l->accept_armed && !d->stopping)
		arm_accept(d);
	if (!l->signal_armed && !d->stopping)
		arm_signal(l);
	/* the heartbeat clients read on their periodic check (seg.h): a
	 * relaxed store, it orders nothing; stale means "daemon gone" */
	st_relaxed(&d->seg.st->daemon_beat_ns, (uint64_t)resil_clock_monotonic(NULL));
	/* the state header's copy of the geometry, for dumps (nothing
	 * addresses memory through it) */
	uint32_t fixed = resil_seg_repair_header(&d->seg);

	if (fixed)
		resild_state_repaired(d, UINT32_MAX, 0, RESIL_W_HEADER, fixed);
	st_relaxed(&d->seg.st->state_repairs, d->state_repairs);
	resil_seg_foreach(&d->seg, maintain_one, d);
	resil_seg_reclaim(&d->seg, resil_clock_monotonic(NULL));
	resild_seg_move_tick(d);
	if (d->reload_retry_until)
		(void)reload(d, true);
	answer_later(d, resil_clock_monotonic(NULL));
	resild_cluster_tick(d);
	resild_clients_scan(d);
	resild_events_drain(d);
	scan_conns(d, resil_clock_monotonic(NULL));
	(void)resild_notify_flush(); /* what a full notify queue kept */
	update_status(d);
	resild_metrics_publish(d);
	if (l->watchdog_ns) {
		now = resil_clock_monotonic(NULL);
		if ((uint64_t)(now - l->last_watchdog) >= l->watchdog_ns / 2) {
			resild_notify_watchdog();
			l->last_watchdog = now;
		}
	}
	if (!d->stopping && !l->tick_armed)
		arm_tick(l);
}

/* A reload, or (retry) its next try while it waits for configuration
 * records to come free: counted once, when it applied or failed; -EAGAIN
 * while it waits (the next tick tries again). */
static int reload(struct resild *d, bool retry)
{
	int64_t now = resil_clock_monotonic(NULL);
	int r = resild_config_load(d, false);

	if (r == -EAGAIN) {
		if (!retry || d->reload_retry_until == 0)
			d->reload_retry_until = now + RESILD_SPACE_WAIT_NS;
		if (now < d->reload_retry_until)
			return -EAGAIN; /* the next tick tries again */
		log_error("configuration not reloaded: the records it needs did not come free");
	}
	d->reload_retry_until = 0;
	if (r < 0)
		d->reload_errors++;
	else
		d->reloads++;
	if (d->loop) {
		update_status(d);
		resild_notify_ready(d->loop->status); /* ends RELOADING=1 */
	}
	return r;
}

int resild_reload(struct resild *d)
{
	resild_notify_reloading();
	return reload(d, false);
}

static void on_signal(struct resild *d, int res)
{
	d->loop->signal_armed = false;
	if (res == (int)sizeof(d->loop->sig)) {
		switch (d->loop->sig.ssi_signo) {
		case SIGHUP:
			log_info("SIGHUP: reloading %s", d->opts.config_dir);
			resild_reload(d);
			break;
		case SIGTERM:
		case SIGINT:
			log_info("%s: stopping", strsignal((int)d->loop->sig.ssi_signo));
			d->stopping = true;
			break;
		default:
			break;
		}
	} else if (res < 0 && res != -EINTR && res != -EAGAIN) {
		log_error_errno(res, "signalfd: %m");
		d->stopping = true;
	}
	if (!d->stopping)
		arm_signal(d->loop);
}

int resild_loop_init(struct resild *d)
{
	struct resild_loop *l;
	sigset_t mask;
	int r;

	l = calloc(1, sizeof(*l));
	if (!l)
		return log_error_errno(-ENOMEM, "cannot start the loop: %m");
	d->loop = l;
	l->sigfd = -1;
	l->wakefd = -1;
	l->cap = d->opts.max_conns ? d->opts.max_conns : RESILD_CONNS_DEFAULT;
	{
		/* as many descriptors as we may have: connections, pidfds and
		 * replies in flight all take some */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			if (rl.rlim_cur < rl.rlim_max) {
				rlim_t was = rl.rlim_cur;

				rl.rlim_cur = rl.rlim_max;
				if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
					log_debug("RLIMIT_NOFILE raised from %llu to %llu",
						  (unsigned long long)was,
						  (unsigned long long)rl.rlim_max);
				else
					rl.rlim_cur = was;
			}
			l->fd_max = rl.rlim_cur > INT32_MAX ? INT32_MAX : (int)rl.rlim_cur;
		}
	}
	l->conns = calloc(l->cap, sizeof(*l->conns));
	l->obuf = malloc(RESILD_MSG_MAX);
	if (!l->conns || !l->obuf)
		return log_error_errno(-ENOMEM, "cannot start the loop: %m");
	for (uint32_t i = 0; i < l->cap; i++)
		l->conns[i].fd = -1;

	r = io_uring_queue_init(RING_ENTRIES, &l->ring, 0);
	if (r < 0)
		return log_error_errno(r, "io_uring_queue_init: %m");

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return log_error_errno(-errno, "sigprocmask: %m");
	l->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (l->sigfd < 0)
		return log_error_errno(-errno, "signalfd: %m");
	signal(SIGPIPE, SIG_IGN);

	l->multishot = true;
	{
		const char *e = getenv("RESILD_TEST_ARM_FAIL");

		if (e && sscanf(e, "%7[a-z]:%u:%u", l->fail_kind, &l->fail_from, &l->fail_n) != 3)
			l->fail_n = 0;
	}
	l->watchdog_ns = resild_notify_watchdog_ns();
	l->last_watchdog = resil_clock_monotonic(NULL);
	if (arm_accept(d) < 0 || arm_signal(l) < 0 || arm_tick(l) < 0)
		return log_error_errno(-EBUSY, "cannot queue the first operations: %m");
	r = io_uring_submit(&l->ring);
	if (r < 0)
		return log_error_errno(r, "io_uring_submit: %m");
	return 0;
}

int resild_loop_run(struct resild *d)
{
	struct resild_loop *l = d->loop;

	/* listening since resild_loop_init: READY=1 with the first status */
	update_status(d);
	resild_notify_ready(l->status);
	while (!d->stopping) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		int r;

		if (!l->tick_armed)
			(void)arm_tick(l);
		if (l->tick_armed) {
			r = io_uring_submit_and_wait(&l->ring, 1);
		} else {
			/* no tick queued: wait a tick at most, and tick */
			struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = RESILD_TICK_NS};

			r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
			if (r == -ETIME) {
				on_tick(d);
				continue;
			}
		}
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME)
			return log_error_errno(r, "io_uring_submit_and_wait: %m");
		io_uring_for_each_cqe(&l->ring, head, cqe)
		{
			uint64_t u = io_uring_cqe_get_data64(cqe);
			uint32_t idx = ud_idx(u);
			struct conn *c = NULL;

			n++;
			switch (ud_op(u)) {
			case OP_ACCEPT:
				on_accept(d, cqe->res, cqe->flags);
				break;
			case OP_RECV:
			case OP_SEND:
				if (idx < l->cap && l->conns[idx].gen == ud_cookie(u) &&
				    l->conns[idx].fd >= 0)
					c = &l->conns[idx];
				if (!c)
					break;
				if (ud_op(u) == OP_RECV)
					on_recv(d, c, cqe->res);
				else
					on_send(d, c, cqe->res);
				break;
			case OP_SIGNAL:
				on_signal(d, cqe->res);
				break;
			case OP_TICK:
				on_tick(d);
				break;
			case OP_WAKE:
				on_wake(d, cqe->res);
				break;
			case OP_PIDFD:
				if (cqe->res > 0)
					resild_clients_exited(d, idx, ud_cookie(u));
				break;
			default:
				break;
			}
		}
		io_uring_cq_advance(&l->ring, n);
	}
	return 0;
}

void resild_loop_fini(struct resild *d)
{
	struct resild_loop *l = d->loop;

	if (!l)
		return;
	d->stopping = true; /* conn_free queues nothing more */
	if (l->ring.ring_fd > 0)
		io_uring_queue_exit(&l->ring);
	if (l->conns)
		for (uint32_t i = 0; i < l->cap; i++)
			if (l->conns[i].fd >= 0) {
				l->conns[i].recv_armed = l->conns[i].send_armed = false;
				resild_peer_gone(d, &l->conns[i].peer);
				conn_free(d, &l->conns[i]);
			}
	if (l->sigfd >= 0)
		close(l->sigfd);
	free(l->conns);
	free(l->obuf);
	free(l);
	d->loop = NULL;
}

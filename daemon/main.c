/* SPDX-License-Identifier: MIT */
/*
 * main.c - resild: start, stop.
 *
 * Start: options (options.c: the settings file, then the flags over it);
 * segments (adopted from systemd's fd store when a
 * previous daemon of this unit stored them and they validate, else new
 * sealed memfds); the configuration files (a bad file on fresh segments
 * is fatal, with FILE:LINE on stderr and exit status 78, EX_CONFIG, on
 * which the units do not restart; on adopted ones it is a failed reload:
 * the live policies keep running); the control socket (passed by
 * systemd, or created with mode 0660 after removing a stale file nothing
 * listens on); the HTTP metrics listener (the socket of
 * resild-metrics.socket, else metrics_listen; one that cannot serve is
 * logged and kept for `resilctl status`, never an exit); the loop;
 * READY=1. Stop (SIGTERM, SIGINT): the loop ends,
 * connections close, the socket file we created is removed. Clients keep
 * deciding on the segments they mapped: a daemon that stops stops
 * nothing.
 *
 * resild never daemonizes itself: systemd, containers, the demo and the
 * tests run it in the foreground (--foreground is accepted for clarity).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "cfgfile.h"
#include "clients.h"
#include "conf.h"
#include "ctl.h"
#include "events.h"
#include "cluster.h"
#include "cluster_keyed.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "notify.h"
#include "options.h"
#include "owners.h"
#include "policy.h"
#include "resild.h"
#include "segmove.h"
#include "seg_records.h"

/*
 * Is a daemon serving path? 1 yes, 0 no (stale: nothing listens), <0 error.
 * A socket whose daemon was killed can still accept connections for a
 * moment (its io_uring is torn down after the process), so a connection
 * alone proves nothing: a live daemon answers a hello. We probe for up to
 * 5 s; a listener that accepts but never answers in that time is left
 * alone (-EBUSY) rather than stolen.
 */
static int socket_alive(const struct sockaddr_un *sa, socklen_t len)
{
	/* Request{id 1, hello{min 1, max 1}} */
	static const unsigned char hello[] = {0x08, 0x01, 0x52, 0x04, 0x08, 0x01, 0x10, 0x01};

	for (int i = 0; i < 25; i++) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;
		struct pollfd p;
		char buf[256];

		if (fd < 0)
			return -errno;
		r = connect(fd, (const struct sockaddr *)sa, len) == 0 ? 0 : -errno;
		if (r == -ECONNREFUSED || r == -ENOENT) {
			close(fd);
			return 0;
		}
		if (r == -EPROTOTYPE) {
			close(fd);
			return 1; /* some other kind of socket: not ours to remove */
		}
		if (r < 0) {
			close(fd);
			return r;
		}
		p.fd = fd;
		p.events = POLLIN;
		if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello) &&
		    poll(&p, 1, 200) == 1 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
			close(fd);
			return 1;
		}
		close(fd);
	}
	return -EBUSY;
}

static int socket_open(struct resild *d)
{
	const char *path = d->opts.socket_path;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t len;
	struct stat st;
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "socket path %s is longer than %zu bytes",
				       path, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);

	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return log_error_errno(-EEXIST, "%s exists and is not a socket", path);
		r = socket_alive(&sa, len);
		if (r > 0)
			return log_error_errno(-EADDRINUSE, "another resild is listening on %s",
					       path);
		if (r == -EBUSY)
			return log_error_errno(r,
					       "%s accepts connections but nothing answers: "
					       "not removed",
					       path);
		if (r < 0)
			return log_error_errno(r, "cannot probe %s: %m", path);
		if (unlink(path) < 0)
			return log_error_errno(-errno, "cannot remove the stale socket %s: %m",
					       path);
		log_info("removed stale socket %s", path);
	} else {
		/* the parent of the default path may not exist outside systemd */
		char dir[sizeof(sa.sun_path)], *slash;

		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = '\0';
			if (mkdir(dir, 0755) == 0)
				log_info("created %s", dir);
		}
	}

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error_errno(-errno, "socket: %m");
	/* born 0660 or tighter: never a moment where others could connect */
	old = umask(0117);
	r = bind(fd, (struct sockaddr *)&sa, len) < 0 ? -errno : 0;
	umask(old);
	if (r < 0) {
		close(fd);
		return log_error_errno(r, "cannot bind %s: %m", path);
	}
	d->socket_created = true;
	if (chmod(path, 0660) < 0)
		r = log_error_errno(-errno, "cannot chmod %s: %m", path);
	else if (d->opts.socket_group && chown(path, (uid_t)-1, d->socket_gid) < 0)
		r = log_error_errno(-errno, "cannot give %s to group %s: %m", path,
				    d->opts.socket_group);
	else if (listen(fd, SOMAXCONN) < 0)
		r = log_error_errno(-errno, "cannot listen on %s: %m", path);
	if (r < 0) {
		close(fd);
		return r;
	}
	d->listen_fd = fd;
	return 0;
}

/* Segments of another ABI major, kept by systemd from an older or newer
 * daemon: mark them retired in both headers (clients see it on their next
 * slow path and reconnect) before we start fresh ones. Only the flags word
 * is written, at the offset every ABI keeps (static_asserted in seg.h). */
static void retire(int fd)
{
	struct stat st;
	void *m;

	if (fstat(fd, &st) < 0 || st.st_size < RESIL_HDR_SIZE)
		return;
	m = mmap(NULL, RESIL_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return;
	atomic_fetch_or_explicit((ra32 *)((char *)m + offsetof(struct resil_cfg_hdr, flags)),
				 RESIL_SEG_RETIRED, memory_order_release);
	munmap(m, RESIL_HDR_SIZE);
}

/* An adopted policy's state blocks, checked as the tick checks them, and
 * those beyond repair reset (resil_policy_adopt): counted, and an event
 * each (the first tick drains and logs them). */
static int adopt_one(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
		     void *ctx)
{
	struct resil_ctx x = {.seg = s, .rec = rec, .pid = (uint32_t)getpid()};

	resil_policy_adopt(&x, rec);
	if (x.resets)
		resild_state_repaired(ctx, slot, rec->gen, RESIL_W_BLOCK_RESET, x.resets);
	if (x.repairs)
		resild_state_repaired(ctx, slot, rec->gen, x.repair_word, x.repairs);
	return 0;
}

static int segments_open(struct resild *d, struct resild_passed *p)
{
	struct resil_seg_params sp = {
	    .slots = d->opts.policies,
	    .clients = d->opts.clients,
	    .state_size = d->opts.state_size,
	};
	char err[256] = "";
	int r;

	if (p->cfg_fd >= 0 && p->st_fd >= 0) {
		r = resil_seg_map(&d->seg, p->cfg_fd, p->st_fd, true, true, err, sizeof(err));
		/* headers, then every record and directory entry: the config
		 * segment is ours, but it outlived a daemon (another build may
		 * have written it); then every state block (adopt_one), before
		 * the configuration files carry anything over from them */
		if (r == 0) {
			r = resil_seg_check(&d->seg, err, sizeof(err));
			if (r < 0) {
				/* the fds go back to the caller's handling below */
				munmap(d->seg.cfg, d->seg.cfg_size);
				munmap(d->seg.st, d->seg.st_size);
				memset(&d->seg, 0, sizeof(d->seg));
				d->seg.cfg_fd = d->seg.st_fd = -1;
			}
		}
		if (r == 0) {
			d->adopted = true;
			resil_seg_foreach(&d->seg, adopt_one, d);
			log_notice("adopted the segments kept by systemd (epoch %016llx): "
				   "policies and their state continue",
				   (unsigned long long)d->seg.cfg->epoch);
			/* a restart to apply new sizes: the live state moves
			 * into segments of those sizes, or (too small) stays
			 * where it is, said in the log */
			if (!d->options_error[0] && resild_seg_sizes_differ(d) &&
			    resild_seg_move(d) < 0)
				return -ENOMEM; /* logged */
		} else {
			log_warning("segments kept by systemd not adopted (%s): starting fresh",
				    err[0] ? err : strerror(-r));
			if (r == -EPROTO) {
				retire(p->cfg_fd);
				retire(p->st_fd);
			}
			sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=config");
			sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=state");
			close(p->cfg_fd);
			close(p->st_fd);
		}
	} else {
		if (p->cfg_fd >= 0)
			close(p->cfg_fd);
		if (p->st_fd >= 0)
			close(p->st_fd);
	}
	if (!d->adopted) {
		r = resil_seg_create(&d->seg, &sp);
		if (r < 0)
			return log_error_errno(r,
					       "cannot create the segments (--state-size %llu, "
					       "--policies %u, --clients %u): %m",
					       (unsigned long long)sp.state_size, sp.slots,
					       sp.clients);
	}
	d->have_seg = true;
	/* policy.scope = global, keyed: one key, one fingerprint on every host */
	resild_ck_seg_key(d, d->adopted);
	/* from here on the arena's bump pointer is the daemon's own */
	resil_seg_own_arena(&d->seg);
	/* the metrics show the daemon's count of repairs, not the shared copy */
	d->seg.repairs_own = true;
	st_relaxed(&d->seg.repairs, d->state_repairs);
	/* and its events are its own, never in the ring clients write
	 * (events.c): what the ring holds is shown as a client's report */
	r = resil_seg_own_events(&d->seg, RESILD_OWN_EVENTS);
	if (r < 0)
		return log_error_errno(r, "cannot set up the daemon's event queue: %m");
	/* and so are the free lists: rebuilt from the slot words (what no
	 * live record names waits out a grace period, as after a delete) */
	r = resil_seg_reuse_init(&d->seg, resil_clock_monotonic(NULL));
	if (r < 0)
		return log_error_errno(r, "cannot set up the reuse of records and state: %m");
	/* clients get an O_RDONLY reopen of the config memfd: mode 0440 makes
	 * a reopen for writing fail for other uids */
	if (fchmod(d->seg.cfg_fd, 0440) < 0)
		return log_error_errno(-errno, "fchmod of the config segment: %m");
	/* daemon_pid: written by the daemon only, once it owns the segments
	 * (release: a reader that sees our pid sees the headers we set up);
	 * read by observers for display, and by nobody to decide anything */
	st_release(&d->seg.st->daemon_pid, (uint32_t)getpid());
	st_relaxed(&d->seg.st->daemon_beat_ns, (uint64_t)resil_clock_monotonic(NULL));
	if (!d->adopted || d->moved)
		resild_notify_store_fds(d->seg.cfg_fd, d->seg.st_fd);
	return 0;
}

/*
 * resild --check-config (nginx -t): the configuration directory is parsed
 * and applied as a start would apply it, to a private pair of segments
 * sized by the same options, so what only applying finds (a shared retry
 * budget that no section defines, a state segment too small for the keyed
 * tables) is found too. Nothing is touched: no socket, no fd store, no
 * running daemon. Errors go to stderr with FILE:LINE.
 */
static int check_config(struct resild *d)
{
	struct resil_seg_params sp = {
	    .slots = d->opts.policies,
	    .clients = d->opts.clients,
	    .state_size = d->opts.state_size,
	};
	struct resild_cfgset *set = resild_cfgset_new();
	char err[1024] = "";
	int r, failed;

	log_set_plain();
	if (!set) {
		log_error_errno(-ENOMEM, "cannot check the configuration: %m");
		return 1;
	}
	r = resild_cfgset_load_dir(set, d->opts.config_dir, d->optfile.path, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err[0] ? err : "cannot load the configuration");
		resild_cfgset_free(set);
		return RESILD_EXIT_CONFIG;
	}
	r = resil_seg_create(&d->seg, &sp);
	if (r < 0) {
		resild_cfgset_free(set);
		log_error_errno(r, "cannot create segments to check against: %m");
		return 1;
	}
	log_set_max_level(LOG_WARNING); /* errors only, not "policy X: created" */
	failed = resild_cfgset_apply(d, set);
	resil_seg_unmap(&d->seg);
	if (failed < 0) {
		resild_cfgset_free(set);
		return 1; /* logged */
	}
	if (failed) {
		log_error("%s: %d of %zu policies cannot be defined (see above)",
			  d->opts.config_dir, failed, set->n);
		resild_cfgset_free(set);
		return RESILD_EXIT_CONFIG;
	}
	if (d->optfile.path[0])
		printf("%s: settings OK, %zu given\n", d->optfile.path, d->optfile.n);
	printf("%s: configuration OK, %zu policies\n", d->opts.config_dir, set->n);
	resild_cfgset_free(set);
	return 0;
}

/* The HTTP thread's text: the segments (read as any observer does) and
 * the daemon's numbers the loop last published, never the loop's
 * structures. */
static size_t http_text(char *buf, size_t len, void *ctx)
{
	const struct resil_seg *s = ctx;

	return resild_metrics_http_text(s, buf, len);
}

/* A unix listener for HTTP /metrics (--metrics-socket): the units' way
 * out of a sandbox without network, proxied to TCP by
 * resild-metrics.service. A file left by a previous run of the unit is
 * replaced. The listener fd, or -errno. */
static int metrics_socket_open(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		(void)unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static void metrics_result(struct resild *d, int r, const char *where)
{
	if (r >= 0) {
		d->metrics_state = RESILD_METRICS_LISTENING;
		return;
	}
	d->metrics_state = RESILD_METRICS_FAILED;
	snprintf(d->metrics_error, sizeof(d->metrics_error), "cannot serve metrics on %s: %s",
		 where, strerror(-r));
	log_warning("not serving HTTP metrics (resilctl status says why; resilctl metrics "
		    "still answers)");
}

int main(int argc, char **argv)
{
	struct resild d = {.listen_fd = -1};
	struct resild_passed passed;
	char status[128];
	int r, exit_code = 1;

	sigset_t mask;

	/* SIGTERM, SIGINT and SIGHUP go to the loop's signalfd: blocked before
	 * any thread exists (the metrics thread inherits the mask), so none
	 * is ever delivered the default way */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	log_open();
	d.uid = getuid();
	{
		/* connections and client pidfds need fds: as many as allowed
		 * (under systemd, LimitNOFILE= decides and this may be refused) */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	r = resild_options_parse(&d, argc, argv);
	if (r) {
		resild_optfile_clear(&d.optfile);
		return r;
	}
	if (d.check_config) {
		r = check_config(&d);
		resild_optfile_clear(&d.optfile);
		return r;
	}
	d.started = time(NULL);
	d.started_ns = resil_clock_monotonic(NULL);

	resild_notify_listen_fds(&passed);
	r = segments_open(&d, &passed);
	if (r < 0)
		goto out;
	if (d.options_error[0] && !d.adopted) {
		/* left out for stored segments that did not validate: a fresh
		 * start on a bad settings file, logged by options.c */
		exit_code = RESILD_EXIT_CONFIG;
		r = -EINVAL;
		goto out;
	}
	r = resild_config_load(&d, true);
	if (d.options_error[0]) {
		/* the settings file's error first (status, resilctl reload) */
		snprintf(d.reload_msg, sizeof(d.reload_msg), "%s", d.options_error);
		d.reload_ok = false;
		if (r >= 0)
			r = -EINVAL;
	}
	if (r < 0 && d.adopted) {
		/* a restart on memory that already holds every policy and its
		 * live state: the files' error must not throw that away (under
		 * systemd an exit would empty the fd store). The adopted
		 * policies keep running, as after a failed reload; the error is
		 * the last reload's, in status and resil_reloads_total */
		log_error("configuration files not applied (%s): the adopted policies keep "
			  "running; fix the files and reload",
			  d.reload_msg[0] ? d.reload_msg : strerror(-r));
		d.reload_errors++;
		r = 0;
	} else if (r < 0) {
		exit_code = RESILD_EXIT_CONFIG;
		goto out;
	}
	if (passed.listen_fd >= 0) {
		d.listen_fd = passed.listen_fd;
		d.socket_activated = true;
		log_info("using the socket passed by systemd");
	} else {
		r = socket_open(&d);
		if (r < 0)
			goto out;
	}
	r = resild_clients_init(&d);
	if (r < 0) {
		log_error_errno(r, "cannot start the client registry: %m");
		goto out;
	}
	resild_events_init(&d);
	r = resild_loop_init(&d);
	if (r < 0)
		goto out;
	r = resild_cluster_init(&d);
	if (r < 0) {
		exit_code = RESILD_EXIT_CONFIG;
		goto out;
	}
	r = resild_loop_watch_wake(&d, resild_cluster_wake_fd(&d));
	if (r < 0)
		goto out;
	if (passed.metrics_fd >= 0) {
		/* resild-metrics.socket: bound by systemd outside the unit's
		 * PrivateNetwork=, served here; it wins over metrics_listen */
		d.metrics_activated = true;
		if (d.opts.metrics_listen)
			log_notice("metrics_listen %s ignored: serving the socket passed by "
				   "systemd",
				   d.opts.metrics_listen);
		r = resild_http_start_fd(passed.metrics_fd, "the socket passed by systemd",
					 http_text, &d.seg);
		metrics_result(&d, r, "the socket passed by systemd");
		r = 0;
	} else if (d.opts.metrics_socket) {
		/* the units' (their sandbox has no network): a metrics_listen
		 * of the settings file could not bind there anyway */
		static char where[128];

		if (d.opts.metrics_listen)
			log_notice("metrics_listen %s ignored: serving metrics on %s "
				   "(resild-metrics.socket serves them on TCP)",
				   d.opts.metrics_listen, d.opts.metrics_socket);
		snprintf(where, sizeof(where), "unix:%s", d.opts.metrics_socket);
		d.opts.metrics_listen = where; /* what status shows */
		resild_metrics_publish(&d);
		r = metrics_socket_open(d.opts.metrics_socket);
		if (r >= 0) {
			d.metrics_socket_created = true;
			r = resild_http_start_fd(r, d.opts.metrics_socket, http_text, &d.seg);
		}
		metrics_result(&d, r, d.opts.metrics_socket);
		r = 0;
	} else if (d.opts.metrics_listen) {
		/* a malformed address is a configuration error; a listener that
		 * cannot bind (the port taken, a unit's PrivateNetwork=) is not
		 * worth stopping every policy's daemon for: logged, shown by
		 * `resilctl status`, and `resilctl metrics` serves the same text */
		resild_metrics_publish(&d);
		r = resild_http_start(d.opts.metrics_listen, http_text, &d.seg);
		if (r == -EINVAL) {
			exit_code = RESILD_EXIT_CONFIG;
			goto out; /* logged */
		}
		metrics_result(&d, r, d.opts.metrics_listen);
		r = 0;
	}
	/* rows claimed while no daemon ran (or before a restart) */
	resild_clients_scan(&d);

	snprintf(status, sizeof(status), "%zu policies from files, listening on %s",
		 d.files ? d.files->n : (size_t)0,
		 d.socket_activated ? "the socket passed by systemd" : d.opts.socket_path);
	log_info("resild %s ready: %s", RESILD_VERSION, status);

	r = resild_loop_run(&d);
	resild_notify_stopping();
out:
	resild_http_stop();
	resild_cluster_fini(&d);
	resild_loop_fini(&d);
	resild_clients_fini(&d);
	resild_seg_move_fini(&d);
	resild_owners_fini(&d);
	if (d.listen_fd >= 0 && !d.socket_activated)
		close(d.listen_fd);
	if (d.socket_created)
		unlink(d.opts.socket_path);
	if (d.metrics_socket_created)
		unlink(d.opts.metrics_socket);
	resild_cfgset_free(d.files);
	resild_optfile_clear(&d.optfile);
	if (d.have_seg) {
		/* a clean stop: clients' next periodic check asks the socket
		 * at once instead of waiting for the heartbeat to go stale */
		st_relaxed(&d.seg.st->daemon_beat_ns, 0);
		resil_seg_unmap(&d.seg);
	}
	return r < 0 ? exit_code : 0;
}

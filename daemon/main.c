/* SPDX-License-Identifier: MIT */
/*
 * main.c - resild: options, start, stop.
 *
 * Start: options; segments (adopted from systemd's fd store when a
 * previous daemon of this unit stored them and they validate, else new
 * sealed memfds); the configuration files (a bad file is fatal here, with
 * FILE:LINE on stderr and exit status 78, EX_CONFIG, on which the units do
 * not restart); the control socket (passed by
 * systemd, or created with mode 0660 after removing a stale file nothing
 * listens on); the loop; READY=1. Stop (SIGTERM, SIGINT): the loop ends,
 * connections close, the socket file we created is removed. Clients keep
 * deciding on the segments they mapped: a daemon that stops stops
 * nothing.
 *
 * resild never daemonizes itself: systemd, containers, the demo and the
 * tests run it in the foreground (--foreground is accepted for clarity).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
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
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "cfgfile.h"
#include "clients.h"
#include "conf.h"
#include "events.h"
#include "cluster.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "notify.h"
#include "resild.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: resild [OPTIONS]\n"
		"Owns the shared-memory resilience policies of this host and serves\n"
		"the control socket.\n\n"
		"  --foreground          run in the foreground (always the case)\n"
		"  --socket PATH         control socket (default $RESIL_SOCKET, then\n"
		"                        " RESILD_DEFAULT_SOCKET ")\n"
		"  --config DIR          configuration directory, every *.conf in it\n"
		"                        (default " RESILD_DEFAULT_CONFIG "; --config-dir too)\n"
		"  --state-size SIZE     state segment size, K/M/G suffixes (default 256M,\n"
		"                        sparse: untouched pages cost nothing)\n"
		"  --policies N          policy slots (default %d)\n"
		"  --clients N           client table rows (default %d)\n"
		"  --max-connections N   control connections at once (default %d)\n"
		"  --max-connections-per-uid N  of those, from one uid (default a quarter;\n"
		"                        root and the admin group exempt)\n"
		"  --max-policies-per-uid N  policies one uid may create (default a quarter\n"
		"                        of --policies; root and the admin group exempt)\n"
		"  --idle-timeout DURATION  close a connection (not a subscriber) silent\n"
		"                        this long (default 60s; 0: never)\n"
		"  --admin-group NAME    members may change any policy\n"
		"  --socket-group NAME   group of the socket file (default: our group)\n"
		"  --metrics-listen ADDR:PORT  serve GET /metrics over HTTP (Prometheus)\n"
		"  --cluster-redis URL   share policy.scope = global policies with the\n"
		"                        hosts of the fleet through Redis:\n"
		"                        redis://HOST[:PORT][/DB] or unix:/PATH\n"
		"  --cluster-name NAME   key prefix of the fleet in Redis (default resil)\n"
		"  --cluster-host ID     this host's id (default /etc/machine-id)\n"
		"  --cluster-interval DURATION  exchange period (default 100ms)\n"
		"  --cluster-fallback share|local|reject  past a lease's expiry: the\n"
		"                        rate divided by the hosts last seen (default),\n"
		"                        the whole rate here, or reject\n"
		"  --cluster-password-file PATH  Redis AUTH password (first line)\n"
		"  --verbose             log debug messages too\n"
		"  --check-config        check the configuration directory and exit: 0 if\n"
		"                        it would load, else 78 with FILE:LINE errors\n"
		"  --help, --version\n"
		"\n"
		"Exit status: 0 stopped cleanly; 2 bad options; 78 (EX_CONFIG) a\n"
		"configuration error (the units do not restart on it); 1 other errors.\n",
		RESIL_SLOTS_DEFAULT, RESIL_CLIENTS_DEFAULT, RESILD_CONNS_DEFAULT);
}

/* "256M", "1G", "65536", "64KiB" */
static int parse_size(const char *s, uint64_t *ret)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	case 't':
	case 'T':
		shift = 40;
		end++;
		break;
	default:
		break;
	}
	if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*ret = (uint64_t)v << shift;
	return 0;
}

static int parse_count(const char *s, uint32_t *ret)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v == 0 || v > (1u << 24))
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

static int group_gid(const char *name, gid_t *ret)
{
	struct group *g;
	char *end;
	unsigned long v;

	errno = 0;
	g = getgrnam(name);
	if (g) {
		*ret = g->gr_gid;
		return 0;
	}
	v = strtoul(name, &end, 10);
	if (*name && !*end) {
		*ret = (gid_t)v;
		return 0;
	}
	return -ENOENT;
}

static int parse_args(struct resild *d, int argc, char **argv)
{
	enum {
		O_SOCKET = 256,
		O_CONFIG,
		O_STATE,
		O_POLICIES,
		O_CLIENTS,
		O_CONNS,
		O_ADMIN,
		O_SOCKGRP,
		O_FG,
		O_VERSION,
		O_VERBOSE,
		O_METRICS,
		O_CONNS_UID,
		O_IDLE,
		O_POL_UID,
		O_CHECK,
		O_CL_REDIS,
		O_CL_NAME,
		O_CL_HOST,
		O_CL_INTERVAL,
		O_CL_FALLBACK,
		O_CL_PASSWORD
	};
	static const struct option opts[] = {
	    {"foreground", no_argument, NULL, O_FG},
	    {"socket", required_argument, NULL, O_SOCKET},
	    {"config", required_argument, NULL, O_CONFIG},
	    {"config-dir", required_argument, NULL, O_CONFIG},
	    {"state-size", required_argument, NULL, O_STATE},
	    {"policies", required_argument, NULL, O_POLICIES},
	    {"clients", required_argument, NULL, O_CLIENTS},
	    {"max-connections", required_argument, NULL, O_CONNS},
	    {"max-connections-per-uid", required_argument, NULL, O_CONNS_UID},
	    {"idle-timeout", required_argument, NULL, O_IDLE},
	    {"max-policies-per-uid", required_argument, NULL, O_POL_UID},
	    {"admin-group", required_argument, NULL, O_ADMIN},
	    {"socket-group", required_argument, NULL, O_SOCKGRP},
	    {"verbose", no_argument, NULL, O_VERBOSE},
	    {"metrics-listen", required_argument, NULL, O_METRICS},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, O_VERSION},
	    {"check-config", no_argument, NULL, O_CHECK},
	    {"cluster-redis", required_argument, NULL, O_CL_REDIS},
	    {"cluster-name", required_argument, NULL, O_CL_NAME},
	    {"cluster-host", required_argument, NULL, O_CL_HOST},
	    {"cluster-interval", required_argument, NULL, O_CL_INTERVAL},
	    {"cluster-fallback", required_argument, NULL, O_CL_FALLBACK},
	    {"cluster-password-file", required_argument, NULL, O_CL_PASSWORD},
	    {}};
	const char *env = getenv("RESIL_SOCKET");
	int c;

	d->opts.socket_path = env && *env ? env : RESILD_DEFAULT_SOCKET;
	d->opts.config_dir = RESILD_DEFAULT_CONFIG;
	d->opts.state_size = RESIL_STATE_SIZE_DEFAULT;
	d->opts.policies = RESIL_SLOTS_DEFAULT;
	d->opts.clients = RESIL_CLIENTS_DEFAULT;
	d->opts.max_conns = RESILD_CONNS_DEFAULT;
	d->opts.idle_timeout_ns = RESILD_IDLE_DEFAULT_NS;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		switch (c) {
		case O_FG:
			break;
		case O_SOCKET:
			d->opts.socket_path = optarg;
			break;
		case O_CONFIG:
			d->opts.config_dir = optarg;
			break;
		case O_STATE:
			if (parse_size(optarg, &d->opts.state_size) < 0) {
				log_error("--state-size %s: expected a size like 64M or 1G",
					  optarg);
				return -EINVAL;
			}
			break;
		case O_POLICIES:
			if (parse_count(optarg, &d->opts.policies) < 0) {
				log_error("--policies %s: expected a number from 1 to %u", optarg,
					  1u << 24);
				return -EINVAL;
			}
			break;
		case O_CLIENTS:
			if (parse_count(optarg, &d->opts.clients) < 0) {
				log_error("--clients %s: expected a number from 1 to %u", optarg,
					  1u << 20);
				return -EINVAL;
			}
			break;
		case O_CONNS:
			if (parse_count(optarg, &d->opts.max_conns) < 0 ||
			    d->opts.max_conns > 65536) {
				log_error("--max-connections %s: expected a number from 1 to 65536",
					  optarg);
				return -EINVAL;
			}
			break;
		case O_CONNS_UID:
			if (parse_count(optarg, &d->opts.max_conns_per_uid) < 0) {
				log_error("--max-connections-per-uid %s: expected a number from 1 "
					  "to %u",
					  optarg, 1u << 24);
				return -EINVAL;
			}
			break;
		case O_POL_UID:
			if (parse_count(optarg, &d->opts.max_policies_per_uid) < 0) {
				log_error("--max-policies-per-uid %s: expected a number from 1 to "
					  "%u",
					  optarg, 1u << 24);
				return -EINVAL;
			}
			break;
		case O_IDLE:
			if (resil_parse_duration(optarg, &d->opts.idle_timeout_ns) < 0 ||
			    d->opts.idle_timeout_ns < 0) {
				log_error("--idle-timeout %s: expected a duration like 60s or 5m "
					  "(0: never)",
					  optarg);
				return -EINVAL;
			}
			break;
		case O_ADMIN:
			d->opts.admin_group = optarg;
			break;
		case O_SOCKGRP:
			d->opts.socket_group = optarg;
			break;
		case O_VERBOSE:
			log_set_max_level(LOG_DEBUG);
			break;
		case O_METRICS:
			d->opts.metrics_listen = optarg;
			break;
		case O_CHECK:
			d->check_config = true;
			break;
		case O_CL_REDIS:
			d->opts.cluster_redis = optarg;
			break;
		case O_CL_NAME:
			d->opts.cluster_name = optarg;
			break;
		case O_CL_HOST:
			d->opts.cluster_host = optarg;
			break;
		case O_CL_PASSWORD:
			d->opts.cluster_password_file = optarg;
			break;
		case O_CL_INTERVAL:
			if (resil_parse_duration(optarg, &d->opts.cluster_interval_ns) < 0 ||
			    d->opts.cluster_interval_ns < 10 * RESIL_NS_PER_MS ||
			    d->opts.cluster_interval_ns > 60 * RESIL_NS_PER_S) {
				log_error("--cluster-interval %s: expected a duration from 10ms "
					  "to 60s",
					  optarg);
				return -EINVAL;
			}
			break;
		case O_CL_FALLBACK:
			if (resild_cluster_parse_fallback(optarg, &d->opts.cluster_fallback) < 0) {
				log_error("--cluster-fallback %s: expected share, local or reject",
					  optarg);
				return -EINVAL;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case O_VERSION:
			printf("resild " RESILD_VERSION " (protocol %d, segment ABI %d.%d)\n",
			       RESILD_PROTO_VERSION, RESIL_ABI_MAJOR, RESIL_ABI_MINOR);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument \"%s\" (see --help)", argv[optind]);
		return -EINVAL;
	}
	if (!d->opts.max_policies_per_uid)
		d->opts.max_policies_per_uid = d->opts.policies > 4 ? d->opts.policies / 4 : 1;
	if (!d->opts.max_conns_per_uid)
		d->opts.max_conns_per_uid = d->opts.max_conns > 4 ? d->opts.max_conns / 4 : 1;
	if (d->opts.max_conns_per_uid > d->opts.max_conns) {
		log_error("--max-connections-per-uid %u: above --max-connections %u (one uid "
			  "could take every connection)",
			  d->opts.max_conns_per_uid, d->opts.max_conns);
		return -EINVAL;
	}
	if (d->opts.admin_group) {
		if (group_gid(d->opts.admin_group, &d->admin_gid) < 0) {
			log_error("--admin-group %s: no such group", d->opts.admin_group);
			return -EINVAL;
		}
		d->has_admin_gid = true;
	}
	d->socket_gid = getgid();
	if (d->opts.socket_group && group_gid(d->opts.socket_group, &d->socket_gid) < 0) {
		log_error("--socket-group %s: no such group", d->opts.socket_group);
		return -EINVAL;
	}
	return 0;
}

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
		 * have written it); the state blocks are checked and repaired
		 * word by word by the first tick (resil_policy_maintain) */
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
			log_notice("adopted the segments kept by systemd (epoch %016llx): "
				   "policies and their state continue",
				   (unsigned long long)d->seg.cfg->epoch);
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
	/* from here on the arena's bump pointer is the daemon's own */
	resil_seg_own_arena(&d->seg);
	/* clients get an O_RDONLY reopen of the config memfd: mode 0440 makes
	 * a reopen for writing fail for other uids */
	if (fchmod(d->seg.cfg_fd, 0440) < 0)
		return log_error_errno(-errno, "fchmod of the config segment: %m");
	/* daemon_pid: written by the daemon only, once it owns the segments
	 * (release: a reader that sees our pid sees the headers we set up);
	 * read by observers for display, and by nobody to decide anything */
	st_release(&d->seg.st->daemon_pid, (uint32_t)getpid());
	st_relaxed(&d->seg.st->daemon_beat_ns, (uint64_t)resil_clock_monotonic(NULL));
	if (!d->adopted)
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
	r = resild_cfgset_load_dir(set, d->opts.config_dir, err, sizeof(err));
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
	printf("%s: configuration OK, %zu policies\n", d->opts.config_dir, set->n);
	resild_cfgset_free(set);
	return 0;
}

/* The HTTP thread's text: the segments only (resil_metrics_text reads
 * them as any observer does), never the loop's structures. */
static size_t http_text(char *buf, size_t len, void *ctx)
{
	const struct resil_seg *s = ctx;

	return resil_metrics_text(s, buf, len);
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
	if (parse_args(&d, argc, argv) < 0)
		return 2;
	if (d.check_config)
		return check_config(&d);

	resild_notify_listen_fds(&passed);
	r = segments_open(&d, &passed);
	if (r < 0)
		goto out;
	r = resild_config_load(&d, true);
	if (r < 0) {
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
	if (d.opts.metrics_listen) {
		/* a malformed address is a configuration error; a listener that
		 * cannot bind (the port taken, a unit's PrivateNetwork=) is not
		 * worth stopping every policy's daemon for: logged, and the
		 * control socket's `resilctl metrics` still serves the same text */
		r = resild_http_start(d.opts.metrics_listen, http_text, &d.seg);
		if (r == -EINVAL) {
			exit_code = RESILD_EXIT_CONFIG;
			goto out; /* logged */
		}
		if (r < 0)
			log_warning("--metrics-listen %s: not serving HTTP metrics; "
				    "resilctl metrics still answers",
				    d.opts.metrics_listen);
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
	if (d.listen_fd >= 0 && !d.socket_activated)
		close(d.listen_fd);
	if (d.socket_created)
		unlink(d.opts.socket_path);
	resild_cfgset_free(d.files);
	if (d.have_seg) {
		/* a clean stop: clients' next periodic check asks the socket
		 * at once instead of waiting for the heartbeat to go stale */
		st_relaxed(&d.seg.st->daemon_beat_ns, 0);
		resil_seg_unmap(&d.seg);
	}
	return r < 0 ? exit_code : 0;
}

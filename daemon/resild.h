/* SPDX-License-Identifier: MIT */
/*
 * resild.h - the daemon's one state object, shared by its modules.
 *
 * resild is single-threaded around one io_uring loop (loop.c); every
 * module works on struct resild from that thread only, so nothing here is
 * locked. What other processes see lives in the segments (d->seg): the
 * daemon is their only writer of configuration, directory and arena.
 */
#ifndef RESILD_RESILD_H
#define RESILD_RESILD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cfgfile.h"
#include "resil.h"
#include "seg.h"

#define RESILD_VERSION	       RESIL_VERSION_STRING /* resil.h */
#define RESILD_PROTO_VERSION   1	   /* the highest control protocol version spoken */
#define RESILD_PROTO_MIN       1	   /* the lowest */
#define RESILD_EXIT_CONFIG     78	   /* EX_CONFIG: RestartPreventExitStatus= in the units */
#define RESILD_MSG_MAX	       (64 * 1024) /* one request or response */
#define RESILD_CONNS_DEFAULT   1024
#define RESILD_IDLE_DEFAULT_NS (60 * RESIL_NS_PER_S) /* a non-subscriber's silence */
/* replies carrying descriptors a peer may leave unread before it is cut off */
#define RESILD_FD_REPLIES_UNREAD_MAX 2
#define RESILD_SUBSCRIBERS_MAX 64
#define RESILD_LIST_MAX	       256 /* policies in one list page */
#define RESILD_TICK_NS	       (100 * RESIL_NS_PER_MS)
#define RESILD_OWN_EVENTS	     4096 /* the daemon's own events queued between drains */
/* How long a reload, a create or an update waits for configuration
 * records or state space that earlier changes left in their grace period
 * (docs/internals/seg.md, "Reuse") before it fails. */
#define RESILD_SPACE_WAIT_NS   (2 * RESIL_REUSE_GRACE_NS + RESILD_TICK_NS)
#define RESILD_DEFAULT_SOCKET  "/run/resild/control.sock"
#define RESILD_DEFAULT_CONFIG  "/etc/resild"

struct resild_cfgset;
struct resild_clients;
struct resild_cluster;
struct resild_loop;
struct resild_moved;
struct resild_owners;

struct resild_opts {
	const char *socket_path;
	const char *config_dir;
	uint64_t state_size;
	uint32_t policies;
	uint32_t clients;
	uint32_t max_conns;
	uint32_t max_conns_per_uid;    /* root and the admin group exempt */
	uint32_t max_policies_per_uid; /* policies one uid may own, 0: no limit */
	uint64_t max_state_per_uid;    /* state segment bytes one uid's policies may take */
	uint32_t max_clients_per_uid;  /* client rows one uid may hold (exempt as above) */
	int64_t idle_timeout_ns;       /* non-subscribers silent this long are closed */
	const char *admin_group; /* NULL: root and creators only */
	const char *socket_group;
	const char *metrics_listen; /* ADDR:PORT for GET /metrics, NULL: none */
	const char *metrics_socket; /* a unix socket for the same, NULL: none */
	const char *options_file;   /* --options FILE, NULL: CONFIG_DIR/resild.conf */
	/* policy.scope = global (cluster.c); no cluster_redis: none */
	const char *cluster_redis;	   /* redis://HOST[:PORT][/DB] or unix:/PATH */
	const char *cluster_name;	   /* key prefix (resil) */
	const char *cluster_host;	   /* this host's id (/etc/machine-id) */
	const char *cluster_password_file; /* AUTH password, first line */
	const char *cluster_tls_ca;	   /* TLS to Redis: the CAs (PEM); NULL: plain */
	const char *cluster_tls_cert;	   /* a client certificate (PEM), its key */
	const char *cluster_tls_key;
	const char *cluster_tls_server_name; /* checked in the certificate (the URL's host) */
	int64_t cluster_interval_ns;	   /* exchange period (100ms) */
	int cluster_fallback;		   /* enum resild_cluster_fallback */
	int64_t cluster_fallback_for_ns;   /* a silent host's share held this long (60s) */
	uint32_t cluster_hosts;		   /* the fleet's size (0: learned) */
};

/* The HTTP metrics listener, for `resilctl status`. */
enum resild_metrics_state {
	RESILD_METRICS_OFF,	  /* neither --metrics-listen nor a socket from systemd */
	RESILD_METRICS_LISTENING, /* serving GET /metrics */
	RESILD_METRICS_FAILED,	  /* configured but not serving: metrics_error says why */
};

struct resild {
	struct resild_opts opts;
	struct resil_seg seg;
	bool have_seg;
	bool adopted; /* segments came back from the fd store */
	struct resild_moved *moved; /* adopted, then moved to new sizes (segmove.c) */
	bool check_config; /* --check-config: check the files and exit */

	uid_t uid; /* the daemon's own uid (owner of file policies) */
	gid_t admin_gid;
	bool has_admin_gid;
	gid_t socket_gid;

	int listen_fd;
	bool socket_activated; /* the socket belongs to systemd: never unlink */
	bool socket_created;   /* we created the file: unlink on exit */

	struct resild_cfgset *files; /* the configuration applied last */
	struct resild_optfile optfile; /* the settings read at start */
	char options_error[512];       /* a restart left a bad settings file out */
	bool options_changed;	       /* a reload found the settings file changed */
	struct resild_clients *clients;
	struct resild_counts *counts; /* the clients' count tables (counts.c) */
	struct resild_loop *loop;
	struct resild_cluster *cluster; /* NULL: no --cluster-redis */
	struct resild_owners *owners;	/* who owns each configuration (owners.c) */

	uint32_t nsubscribers;
	uint32_t nconns;
	uint64_t events_seen; /* events drained since start */
	uint64_t events_delivered; /* the seq of the last event delivered (events.c) */
	uint64_t reloads;
	uint64_t reload_errors;
	int64_t reload_ok_time; /* wall clock (s) of the last load that applied */
	int64_t reload_time;	/* wall clock (s) of the last load, applied or not */
	bool reload_ok;		/* did it apply? */
	char reload_msg[512];	/* its first error (FILE:LINE: ...) or a summary */
	int64_t started;	/* wall clock (s) at start */
	int64_t started_ns;	/* monotonic, for the uptime */
	enum resild_metrics_state metrics_state;
	bool metrics_activated;	 /* the listener came from systemd (resild-metrics.socket) */
	bool metrics_socket_created; /* --metrics-socket: the file is ours to unlink */
	char metrics_error[256]; /* why the listener is not serving */
	uint64_t reclaims;
	uint64_t conns_refused; /* past the per-uid connection limit */
	uint64_t conns_idle;	/* closed after opts.idle_timeout_ns of silence */
	uint64_t clients_over_quota; /* segments refused: the uid's client rows */
	int64_t reload_retry_until;  /* a reload waiting for records to come free
				      * (CLOCK_MONOTONIC deadline), 0: none */
	uint64_t conns_cut;	/* cut off for leaving descriptors unread */
	uint64_t state_repairs; /* state words found out of range and repaired, blocks reset */
	uint64_t requests[RESILD_PROTO_VERSION + 1]; /* control requests by version (loop thread) */
	bool stopping;
};

/* Count a repair of `n` state words (enum resil_word `word`) of the policy
 * in slot (UINT32_MAX: the header) and push the event naming them. */
void resild_state_repaired(struct resild *d, uint32_t slot, uint32_t gen, uint32_t word,
			   uint32_t n);

/* A connected peer as the message handler sees it. */
#define RESILD_SUB_NAMES 16
struct resild_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	const gid_t *groups; /* supplementary groups (SO_PEERGROUPS) */
	int ngroups;
	bool subscriber;
	/* set by the loop for each request: a define that needs space still
	 * in its grace period may be answered later (ctl_policy.c), no later than
	 * wait_until (CLOCK_MONOTONIC; 0: answer now whatever it finds);
	 * later_ns: when the handler would try it again */
	int64_t wait_until;
	int64_t later_ns;
	/* a descriptor the request carried (-1: none): a handler that keeps
	 * it sets -1, the loop closes what is left */
	int rx_fd;
	uint32_t nsub_names; /* 0: every policy */
	char sub_names[RESILD_SUB_NAMES][RESIL_NAME_MAX];
};

/* Apply the configuration files of opts.config_dir (cfgfile.c):
 * at start (fail on error) and on SIGHUP (keep the old one on error). */
int resild_config_load(struct resild *d, bool initial);

/* Read the settings file again (options.c) and check every value as a start
 * would; the settings themselves apply at the next start. 0, or -errno
 * with "FILE:LINE: ..." in err. Sets d->options_changed on a change. */
int resild_options_reread(struct resild *d, char *err, size_t errlen);

/* A reload (SIGHUP or a Reload request, loop.c): the files again, counted,
 * systemd told RELOADING=1 then READY=1. 0 when it applied. */
int resild_reload(struct resild *d);

#endif

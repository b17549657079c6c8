/* SPDX-License-Identifier: MIT */
/*
 * options.c - resild's settings: the flags, and the [daemon] section of
 * the settings file (--options FILE, by default resild.conf in the
 * configuration directory).
 *
 * One table names every setting once: its long option and its key in the
 * file (the option with '_' for '-'), so a flag without a key, or a key
 * without a flag, cannot happen by accident. The file is read first and
 * the flags are applied over it: a flag wins. A value is checked by the
 * same code from either source; a bad flag is a usage error (exit 2), a
 * bad line of the file a configuration error (exit 78, FILE:LINE), the
 * status the units do not restart on. The settings apply at start; a
 * reload checks the file again (an error fails the reload) and says when
 * it changed, for the next start.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfgfile.h"
#include "conf.h"
#include "log.h"
#include "parse.h"
#include "cluster.h"
#include "options.h"
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
		"  --options FILE        the daemon's settings, [daemon] KEY = VALUE for\n"
		"                        these options (default DIR/" RESILD_OPTIONS_NAME
		", optional);\n"
		"                        options given here win over the file\n"
		"  --state-size SIZE     state segment size, K/M/G suffixes (default 256M,\n"
		"                        sparse: untouched pages cost nothing)\n"
		"  --policies N          policy slots (default %d)\n"
		"  --clients N           client table rows (default %d)\n"
		"  --max-connections N   control connections at once (default %d)\n"
		"  --max-connections-per-uid N  of those, from one uid (default a quarter;\n"
		"                        root and the admin group exempt)\n"
		"  --max-policies-per-uid N  policies one uid may create (default a quarter\n"
		"                        of --policies; root and the admin group exempt)\n"
		"  --max-clients-per-uid N  client rows one uid may hold (default half of\n"
		"                        --clients; root and the admin group exempt)\n"
		"  --max-state-per-uid SIZE  state segment bytes the policies of one uid\n"
		"                        may take (default a quarter of --state-size;\n"
		"                        root and the admin group exempt)\n"
		"  --idle-timeout DURATION  close a connection (not a subscriber) silent\n"
		"                        this long (default 60s; 0: never)\n"
		"  --cluster-redis URL   share policy.scope = global policies with the\n"
		"                        hosts of the fleet through Redis:\n"
		"                        redis://HOST[:PORT][/DB], rediss://... (TLS),\n"
		"                        unix:/PATH or\n"
		"                        sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]\n"
		"  --cluster-name NAME   key prefix of the fleet in Redis (default resil)\n"
		"  --cluster-host ID     this host's id (default /etc/machine-id)\n"
		"  --cluster-interval DURATION  exchange period (default 100ms)\n"
		"  --cluster-fallback share|local|reject  past a lease's expiry: the\n"
		"                        host's last share, held for it by the fleet\n"
		"                        (default), the whole rate here, or reject\n"
		"  --cluster-fallback-for DURATION  how long the fleet holds a silent\n"
		"                        host's last share, and the host runs on it\n"
		"                        (default 60s); then the rate / the fleet's size\n"
		"  --cluster-hosts N     the fleet's size: hosts not seen keep rate / N\n"
		"                        reserved (the bound holds through any outage)\n"
		"  --cluster-password-file PATH  Redis AUTH password (first line)\n"
		"  --cluster-tls-ca FILE  speak TLS to Redis, its certificate checked\n"
		"                        against these CAs (PEM)\n"
		"  --cluster-tls-cert FILE, --cluster-tls-key FILE  a client certificate\n"
		"  --cluster-tls-server-name NAME  the name the certificate must carry\n"
		"                        (default: the host of the URL)\n"
		"  --admin-group NAME    members may change any policy\n"
		"  --socket-group NAME   group of the socket file (default: our group)\n"
		"  --metrics-listen ADDR:PORT  serve GET /metrics over HTTP (Prometheus)\n"
		"  --metrics-socket PATH  the same on a unix socket (the units': a proxy\n"
		"                        started by resild-metrics.socket serves it on TCP)\n"
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
	O_METRICS_SOCK,
	O_CONNS_UID,
	O_IDLE,
	O_POL_UID,
	O_CLI_UID,
	O_STATE_UID,
	O_CL_REDIS,
	O_CL_NAME,
	O_CL_HOST,
	O_CL_INTERVAL,
	O_CL_FALLBACK,
	O_CL_FALLBACK_FOR,
	O_CL_HOSTS,
	O_CL_PASSWORD,
	O_CL_TLS_CA,
	O_CL_TLS_CERT,
	O_CL_TLS_KEY,
	O_CL_TLS_NAME,
	O_CHECK,
	O_OPTIONS,
	O_END
};

/* Every setting: its long option and its key in the [daemon] section of
 * the settings file (the option's name with '_' for '-'); NULL: a flag
 * only (what to do now, not how to run). */
static const struct setting {
	const char *flag;
	const char *key;
	int has_arg;
	int code;
} settings[] = {
    {"foreground", NULL, no_argument, O_FG},
    {"socket", "socket", required_argument, O_SOCKET},
    {"config", "config_dir", required_argument, O_CONFIG},
    {"config-dir", NULL, required_argument, O_CONFIG},
    {"options", NULL, required_argument, O_OPTIONS},
    {"state-size", "state_size", required_argument, O_STATE},
    {"policies", "policies", required_argument, O_POLICIES},
    {"clients", "clients", required_argument, O_CLIENTS},
    {"max-connections", "max_connections", required_argument, O_CONNS},
    {"max-connections-per-uid", "max_connections_per_uid", required_argument, O_CONNS_UID},
    {"idle-timeout", "idle_timeout", required_argument, O_IDLE},
    {"max-policies-per-uid", "max_policies_per_uid", required_argument, O_POL_UID},
    {"max-clients-per-uid", "max_clients_per_uid", required_argument, O_CLI_UID},
    {"max-state-per-uid", "max_state_per_uid", required_argument, O_STATE_UID},
    {"admin-group", "admin_group", required_argument, O_ADMIN},
    /* [cluster] KEY: the setting cluster_KEY (cfgfile.c) */
    {"cluster-redis", "cluster_redis", required_argument, O_CL_REDIS},
    {"cluster-name", "cluster_name", required_argument, O_CL_NAME},
    {"cluster-host", "cluster_host", required_argument, O_CL_HOST},
    {"cluster-interval", "cluster_interval", required_argument, O_CL_INTERVAL},
    {"cluster-fallback", "cluster_fallback", required_argument, O_CL_FALLBACK},
    {"cluster-fallback-for", "cluster_fallback_for", required_argument, O_CL_FALLBACK_FOR},
    {"cluster-hosts", "cluster_hosts", required_argument, O_CL_HOSTS},
    {"cluster-password-file", "cluster_password_file", required_argument, O_CL_PASSWORD},
    {"cluster-tls-ca", "cluster_tls_ca", required_argument, O_CL_TLS_CA},
    {"cluster-tls-cert", "cluster_tls_cert", required_argument, O_CL_TLS_CERT},
    {"cluster-tls-key", "cluster_tls_key", required_argument, O_CL_TLS_KEY},
    {"cluster-tls-server-name", "cluster_tls_server_name", required_argument, O_CL_TLS_NAME},
    {"socket-group", "socket_group", required_argument, O_SOCKGRP},
    {"verbose", "verbose", no_argument, O_VERBOSE},
    {"metrics-listen", "metrics_listen", required_argument, O_METRICS},
    {"metrics-socket", "metrics_socket", required_argument, O_METRICS_SOCK},
    {"help", NULL, no_argument, 'h'},
    {"version", NULL, no_argument, O_VERSION},
    {"check-config", NULL, no_argument, O_CHECK},
};

static const char *setting_keys[RESIL_ARRAY_SIZE(settings) + 1];

static void settings_init(struct option *opts)
{
	size_t nk = 0;

	for (size_t i = 0; i < RESIL_ARRAY_SIZE(settings); i++) {
		opts[i] =
		    (struct option){settings[i].flag, settings[i].has_arg, NULL, settings[i].code};
		if (settings[i].key)
			setting_keys[nk++] = settings[i].key;
	}
	opts[RESIL_ARRAY_SIZE(settings)] = (struct option){0};
	setting_keys[nk] = NULL;
}

static const struct setting *setting_of_key(const char *key)
{
	for (size_t i = 0; i < RESIL_ARRAY_SIZE(settings); i++)
		if (settings[i].key && strcmp(settings[i].key, key) == 0)
			return &settings[i];
	return NULL;
}

static int parse_bool(const char *s, bool *ret)
{
	if (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "on") || !strcmp(s, "1"))
		*ret = true;
	else if (!strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "off") || !strcmp(s, "0"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

/*
 * One setting's value, from a flag or from the file (val NULL: a flag
 * without argument). 0, or -EINVAL with what was expected in why.
 */
static int setting_apply(struct resild *d, int code, const char *val, char *why, size_t wlen)
{
	bool b;

	switch (code) {
	case O_SOCKET:
		d->opts.socket_path = val;
		break;
	case O_CONFIG:
		d->opts.config_dir = val;
		break;
	case O_STATE:
		if (parse_size(val, &d->opts.state_size) < 0)
			goto bad_fmt;
		break;
	case O_STATE_UID:
		if (parse_size(val, &d->opts.max_state_per_uid) < 0)
			goto bad_fmt;
		break;
	case O_POLICIES:
	case O_CLIENTS:
	case O_CONNS_UID:
	case O_POL_UID:
	case O_CLI_UID: {
		uint32_t *to = code == O_POLICIES    ? &d->opts.policies
			       : code == O_CLIENTS   ? &d->opts.clients
			       : code == O_CONNS_UID ? &d->opts.max_conns_per_uid
			       : code == O_CLI_UID   ? &d->opts.max_clients_per_uid
						     : &d->opts.max_policies_per_uid;

		if (parse_count(val, to) < 0) {
			snprintf(why, wlen, "expected a number from 1 to %u", 1u << 24);
			return -EINVAL;
		}
		break;
	}
	case O_CONNS:
		if (parse_count(val, &d->opts.max_conns) < 0 || d->opts.max_conns > 65536) {
			snprintf(why, wlen, "expected a number from 1 to 65536");
			return -EINVAL;
		}
		break;
	case O_IDLE:
		if (resil_parse_duration(val, &d->opts.idle_timeout_ns) < 0 ||
		    d->opts.idle_timeout_ns < 0) {
			snprintf(why, wlen, "expected a duration like 60s or 5m (0: never)");
			return -EINVAL;
		}
		break;
	case O_ADMIN:
		d->opts.admin_group = val;
		break;
	case O_SOCKGRP:
		d->opts.socket_group = val;
		break;
	case O_VERBOSE:
		if (!val)
			b = true;
		else if (parse_bool(val, &b) < 0) {
			snprintf(why, wlen, "expected yes or no");
			return -EINVAL;
		}
		log_set_max_level(b ? LOG_DEBUG : LOG_INFO);
		break;
	case O_METRICS:
		d->opts.metrics_listen = val;
		break;
	case O_METRICS_SOCK:
		if (val[0] != '/' || strlen(val) >= 108) {
			snprintf(why, wlen, "expected an absolute path of at most 107 bytes");
			return -EINVAL;
		}
		d->opts.metrics_socket = val;
		break;
	case O_CL_REDIS:
		d->opts.cluster_redis = val;
		break;
	case O_CL_NAME:
		d->opts.cluster_name = val;
		break;
	case O_CL_HOST:
		d->opts.cluster_host = val;
		break;
	case O_CL_PASSWORD:
		d->opts.cluster_password_file = val;
		break;
	case O_CL_TLS_CA:
		d->opts.cluster_tls_ca = val;
		break;
	case O_CL_TLS_CERT:
		d->opts.cluster_tls_cert = val;
		break;
	case O_CL_TLS_KEY:
		d->opts.cluster_tls_key = val;
		break;
	case O_CL_TLS_NAME:
		d->opts.cluster_tls_server_name = val;
		break;
	case O_CL_INTERVAL:
		if (resil_parse_duration(val, &d->opts.cluster_interval_ns) < 0 ||
		    d->opts.cluster_interval_ns < 10 * RESIL_NS_PER_MS ||
		    d->opts.cluster_interval_ns > 60 * RESIL_NS_PER_S) {
			snprintf(why, wlen, "expected a duration from 10ms to 60s");
			return -EINVAL;
		}
		break;
	case O_CL_FALLBACK:
		if (resild_cluster_parse_fallback(val, &d->opts.cluster_fallback) < 0) {
			snprintf(why, wlen, "expected share, local or reject");
			return -EINVAL;
		}
		break;
	case O_CL_FALLBACK_FOR:
		if (resil_parse_duration(val, &d->opts.cluster_fallback_for_ns) < 0 ||
		    d->opts.cluster_fallback_for_ns < RESIL_NS_PER_S ||
		    d->opts.cluster_fallback_for_ns > 86400 * RESIL_NS_PER_S) {
			snprintf(why, wlen, "expected a duration from 1s to 1d");
			return -EINVAL;
		}
		break;
	case O_CL_HOSTS: {
		char *end;
		unsigned long n = strtoul(val, &end, 10);

		if (!*val || *end || n < 1 || n > RESILD_CLUSTER_HOSTS_MAX) {
			snprintf(why, wlen, "expected a number of hosts from 1 to %d",
				 RESILD_CLUSTER_HOSTS_MAX);
			return -EINVAL;
		}
		d->opts.cluster_hosts = (uint32_t)n;
		break;
	}
	default:
		break;
	}
	return 0;
bad_fmt:
	snprintf(why, wlen, "expected a size like 64M or 1G");
	return -EINVAL;
}

/* Where each setting came from, for the messages of the checks made once
 * all are known: a flag (line 0) or a line of the settings file. */
struct origin {
	int line[O_END];
	bool from_file[O_END];
};

static int origin_fail(const struct resild *d, const struct origin *o, int code, const char *flag,
		       const char *key, const char *val, const char *why)
{
	if (o->from_file[code]) {
		log_error("%s:%d: %s = %s: %s", d->optfile.path, o->line[code], key, val, why);
		return RESILD_EXIT_CONFIG;
	}
	log_error("--%s %s: %s", flag, val, why);
	return 2;
}

/* The default settings file: resild.conf in the configuration directory
 * named by --config, else in the default one. */
static void options_path(const struct resild *d, const char *config_flag, char *buf, size_t len)
{
	if (d->opts.options_file)
		snprintf(buf, len, "%s", d->opts.options_file);
	else
		snprintf(buf, len, "%s/" RESILD_OPTIONS_NAME,
			 config_flag ? config_flag : RESILD_DEFAULT_CONFIG);
}

/* Does systemd hand this process back stored segments? (a restart: the
 * settings file's error must not cost them, main.c) */
static bool segments_passed(void)
{
	const char *pid = getenv("LISTEN_PID"), *names = getenv("LISTEN_FDNAMES");

	return pid && names && strtol(pid, NULL, 10) == (long)getpid() && strstr(names, "config") &&
	       strstr(names, "state");
}

static void opts_defaults(struct resild *d)
{
	const char *env = getenv("RESIL_SOCKET");

	d->opts.socket_path = env && *env ? env : RESILD_DEFAULT_SOCKET;
	d->opts.config_dir = RESILD_DEFAULT_CONFIG;
	d->opts.state_size = RESIL_STATE_SIZE_DEFAULT;
	d->opts.policies = RESIL_SLOTS_DEFAULT;
	d->opts.clients = RESIL_CLIENTS_DEFAULT;
	d->opts.max_conns = RESILD_CONNS_DEFAULT;
	d->opts.idle_timeout_ns = RESILD_IDLE_DEFAULT_NS;
}

/* A bad settings file. On a fresh start: 78. On a restart that is handed
 * stored segments: the file is left out (defaults and flags only, the
 * adopted segments keep their sizes), the error kept for main.c to show
 * as a failed reload; 0. */
static int optfile_failed(struct resild *d, const char *err, struct origin *org)
{
	const char *options_file = d->opts.options_file;

	log_error("%s", err);
	if (!segments_passed())
		return RESILD_EXIT_CONFIG;
	snprintf(d->options_error, sizeof(d->options_error), "%s", err);
	resild_optfile_clear(&d->optfile);
	opts_defaults(d);
	d->opts.options_file = options_file;
	memset(org, 0, sizeof(*org));
	return 0;
}

/*
 * Options: the settings file first, then the flags over it. 0, or the
 * exit status: 2 for a bad flag, 78 (EX_CONFIG) for a bad settings file
 * (but on a restart handed stored segments: optfile_failed).
 */
int resild_options_parse(struct resild *d, int argc, char **argv)
{
	static struct option opts[RESIL_ARRAY_SIZE(settings) + 1];
	const char *config_flag = NULL;
	struct origin org = {0};
	char path[4096], err[1024] = "", why[256];
	int c, r;

	settings_init(opts);
	opts_defaults(d);

	/* first pass: what decides which file to read, and the flags that
	 * answer at once */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		switch (c) {
		case O_OPTIONS:
			d->opts.options_file = optarg;
			break;
		case O_CONFIG:
			config_flag = optarg;
			break;
		case O_CHECK:
			d->check_config = true;
			log_set_plain();
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case O_VERSION:
			printf("resild " RESILD_VERSION " (protocol %d, segment ABI %d.%d)\n",
			       RESILD_PROTO_VERSION, RESIL_ABI_MAJOR, RESIL_ABI_MINOR);
			exit(0);
		case '?':
			usage(stderr);
			return 2;
		default:
			break;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument \"%s\" (see --help)", argv[optind]);
		return 2;
	}

	options_path(d, config_flag, path, sizeof(path));
	r = resild_optfile_load(&d->optfile, path, d->opts.options_file != NULL, setting_keys, err,
				sizeof(err));
	if (r < 0 && optfile_failed(d, err, &org))
		return RESILD_EXIT_CONFIG;
	for (size_t i = 0; i < d->optfile.n; i++) {
		const struct resild_optent *e = &d->optfile.ent[i];
		const struct setting *st = setting_of_key(e->key);

		why[0] = '\0';
		if (setting_apply(d, st->code, e->value, why, sizeof(why)) < 0) {
			snprintf(err, sizeof(err), "%s:%d: %s = %s: %s", d->optfile.path, e->line,
				 e->key, e->value, why);
			if (optfile_failed(d, err, &org))
				return RESILD_EXIT_CONFIG;
			break;
		}
		org.line[st->code] = e->line;
		org.from_file[st->code] = true;
	}

	/* second pass: every flag, over what the file said */
	optind = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		if (c < O_SOCKET || c >= O_END)
			continue;
		why[0] = '\0';
		if (setting_apply(d, c, optarg, why, sizeof(why)) < 0) {
			for (size_t i = 0; i < RESIL_ARRAY_SIZE(settings); i++)
				if (settings[i].code == c) {
					log_error("--%s %s: %s", settings[i].flag, optarg, why);
					break;
				}
			return 2;
		}
		org.from_file[c] = false;
	}

	if (!d->opts.max_policies_per_uid)
		d->opts.max_policies_per_uid = d->opts.policies > 4 ? d->opts.policies / 4 : 1;
	if (!d->opts.max_state_per_uid)
		d->opts.max_state_per_uid = d->opts.state_size / 4;
	if (!d->opts.max_clients_per_uid) {
		uint32_t n = d->opts.clients ? d->opts.clients : RESIL_CLIENTS_DEFAULT;

		d->opts.max_clients_per_uid = n > 2 ? n / 2 : 1;
	}
	if (!d->opts.max_conns_per_uid)
		d->opts.max_conns_per_uid = d->opts.max_conns > 4 ? d->opts.max_conns / 4 : 1;
	if (d->opts.max_conns_per_uid > d->opts.max_conns) {
		snprintf(why, sizeof(why),
			 "above max-connections %u (one uid could take every connection)",
			 d->opts.max_conns);
		snprintf(path, sizeof(path), "%u", d->opts.max_conns_per_uid);
		return origin_fail(d, &org, O_CONNS_UID, "max-connections-per-uid",
				   "max_connections_per_uid", path, why);
	}
	if (d->opts.admin_group) {
		if (group_gid(d->opts.admin_group, &d->admin_gid) < 0)
			return origin_fail(d, &org, O_ADMIN, "admin-group", "admin_group",
					   d->opts.admin_group, "no such group");
		d->has_admin_gid = true;
	}
	d->socket_gid = getgid();
	if (d->opts.socket_group && group_gid(d->opts.socket_group, &d->socket_gid) < 0)
		return origin_fail(d, &org, O_SOCKGRP, "socket-group", "socket_group",
				   d->opts.socket_group, "no such group");
	return 0;
}

int resild_options_reread(struct resild *d, char *err, size_t errlen)
{
	struct resild_optfile f = {0};
	struct resild scratch = {.opts = d->opts};
	int level = log_get_max_level();
	char path[4096], why[256];
	bool changed;
	int r;

	d->options_changed = false;
	/* the file read at start, or where it would have been */
	if (d->optfile.path[0])
		snprintf(path, sizeof(path), "%s", d->optfile.path);
	else
		options_path(d, d->opts.config_dir, path, sizeof(path));
	r = resild_optfile_load(&f, path, d->opts.options_file != NULL, setting_keys, err, errlen);
	if (r < 0)
		return r;
	for (size_t i = 0; i < f.n; i++) {
		const struct setting *st = setting_of_key(f.ent[i].key);

		why[0] = '\0';
		if (setting_apply(&scratch, st->code, f.ent[i].value, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s:%d: %s = %s: %s", path, f.ent[i].line,
				 f.ent[i].key, f.ent[i].value, why);
			resild_optfile_clear(&f);
			log_set_max_level(level);
			return -EINVAL;
		}
	}
	log_set_max_level(level); /* verbose = applies at the next start, as the rest */
	changed = f.n != d->optfile.n;
	for (size_t i = 0; !changed && i < f.n; i++)
		changed = f.ent[i].key != d->optfile.ent[i].key ||
			  strcmp(f.ent[i].value, d->optfile.ent[i].value) != 0;
	d->options_changed = changed;
	if (changed)
		log_notice("%s changed: its settings apply at the next start", path);
	resild_optfile_clear(&f);
	return 0;
}

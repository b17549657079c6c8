/* SPDX-License-Identifier: MIT */
/*
 * cfgfile.h - configuration files: INI, one [policy NAME] section per
 * policy, "key = value" lines passed to resil_conf_set.
 *
 *	# /etc/resild/payments.conf
 *	[policy payments]
 *	breaker.failure_rate = 50
 *	limit.rate = 100/s
 *
 * Every *.conf file of the directory is read in name order; a policy may
 * be defined in one section only. Errors read "FILE:LINE: what is wrong".
 */
#ifndef RESILD_CFGFILE_H
#define RESILD_CFGFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"
#include "seg.h"

struct resild;

struct resild_cfgent {
	char name[RESIL_NAME_MAX];
	char file[256];
	int line; /* of the section header */
	struct resil_conf conf;
};

/* A parsed set of files: what the files define, by name. */
struct resild_cfgset {
	size_t n;
	size_t cap;
	struct resild_cfgent *ent;
};

struct resild_cfgset *resild_cfgset_new(void);
void resild_cfgset_free(struct resild_cfgset *set);
const struct resild_cfgent *resild_cfgset_find(const struct resild_cfgset *set, const char *name);

/* Parse one file's text (label names it in messages). Pure: no I/O, for
 * the fuzzer too. 0 or -EINVAL with "LABEL:LINE: what is wrong" in err. */
int resild_cfgset_parse_string(struct resild_cfgset *set, const char *label, const char *text,
			       char *err, size_t errlen);
/* Every *.conf file of dir, sorted, but the daemon's settings file (any
 * file named RESILD_OPTIONS_NAME, and skip when given: the options file
 * actually read, by device and inode). A missing dir is an error naming
 * it (-ENOENT). */
int resild_cfgset_load_dir(struct resild_cfgset *set, const char *dir, const char *skip, char *err,
			   size_t errlen);

/* Names of policies: 1..63 characters of [A-Za-z0-9_.:@-], not starting
 * with '.' or '-'. 0 or -EINVAL with the reason in err. */
int resild_name_check(const char *name, char *err, size_t errlen);

/* Apply what changed from the running configuration (old, may be NULL) to
 * set: unchanged policies untouched, changed ones through
 * resil_seg_define, file policies that disappeared deleted. Counts the
 * policies whose define failed (logged), 0 if none. */
int resild_cfgset_apply(struct resild *d, const struct resild_cfgset *set);

/* Is name declared by a [policy NAME] header in a file of dir, as the
 * files are now (read again, not as last applied)? 1 with "FILE:LINE" in
 * where, else 0. Names in the files are reserved: only root and the admin
 * group may create them through the socket before a reload does. */
int resild_name_in_files(const char *dir, const char *name, char *where, size_t wlen);

/*
 * The daemon's settings file (resild --options FILE, by default
 * resild.conf in the configuration directory):
 *
 *	[daemon]
 *	state_size = 1G
 *	metrics_listen = 127.0.0.1:9464
 *
 * One [daemon] section of KEY = VALUE lines (keys are the long options
 * with '_' for '-'); [cluster] is reserved for settings between hosts and
 * this version knows none of them. The parser knows the sections and the
 * syntax; which keys exist is the caller's list (keys), what a value means
 * is the caller's too, with the line kept for its messages.
 */
#define RESILD_OPTIONS_NAME "resild.conf"
#define RESILD_OPTIONS_MAX  32 /* settings in one file */

struct resild_optent {
	const char *key; /* an entry of the caller's keys */
	char *value;
	int line;
};

struct resild_optfile {
	char path[4096]; /* "" when no file was read */
	size_t n;
	struct resild_optent ent[RESILD_OPTIONS_MAX];
};

/* Parse text (label names it in messages) against the NULL-terminated
 * keys. Pure: no I/O. 0, or -EINVAL with "LABEL:LINE: what is wrong" in
 * err (then nothing of text is kept); -ENOMEM. Values are malloc'ed:
 * resild_optfile_clear frees them. */
int resild_optfile_parse_string(struct resild_optfile *f, const char *label, const char *text,
				const char *const *keys, char *err, size_t errlen);
/* Read path: a file that does not exist is an empty set unless must_exist
 * (then -ENOENT, named in err). */
int resild_optfile_load(struct resild_optfile *f, const char *path, bool must_exist,
			const char *const *keys, char *err, size_t errlen);
void resild_optfile_clear(struct resild_optfile *f);

#endif

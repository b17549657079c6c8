/* SPDX-License-Identifier: MIT */
/*
 * cfgfile.c - the configuration directory, parsed with inih, applied as a
 * difference.
 *
 * Size: above 900 lines on purpose: the policy directory and the options
 * file are read by the same helpers (read_file, trim, CFG_MAX_LINE) with
 * the same FILE:LINE errors, so a mistake in either reads the same; the
 * policy set's parse and its apply are one argument (a set is applied
 * only whole).
 *
 * Parsing is separate from applying: a whole set of files is parsed into
 * a resild_cfgset first, and only a set without a single error is applied.
 * That is what makes a failed reload harmless (the old configuration keeps
 * running untouched) and a bad file at start fatal with one precise line.
 *
 * inih reads the text through our own line reader, which counts lines, so
 * the key handler knows the exact line of every pair and a section header
 * is seen even when the section is empty. Continuation lines are turned
 * off (a value is one line); lines may be up to CFG_MAX_LINE - 1
 * characters. Debian's libinih reads into a buffer of 200 bytes whatever
 * ini_max_line says (its runtime options do not resize the stack buffer it
 * was built with), so a line that does not fit the buffer inih hands us
 * is parsed here, by the same rules (a comment line, or KEY = VALUE with
 * blanks trimmed and a " ;" inline comment cut), and inih gets an empty
 * line in its place: the line numbers stay right either way.
 *
 * Applying (resild_cfgset_apply) touches only what differs: a policy
 * whose record already holds the same configuration and the from-file
 * flag is left alone, so its live state (an OPEN breaker, a limiter's TAT)
 * is kept; a changed one goes through resil_seg_define, which keeps state
 * when the shape allows; a policy the files defined before and no longer
 * define is deleted; policies created through the API are never deleted
 * here. A file section that names a policy created through the API takes
 * it over (the file wins).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <ini.h>

#include "cfgfile.h"
#include "cluster.h"
#include "log.h"
#include "owners.h"
#include "resild.h"
#include "seg_records.h"

#define CFG_MAX_LINE  4096
#define CFG_MAX_FILE  (1 << 20) /* bytes per file */
#define CFG_MAX_FILES 1024

struct resild_cfgset *resild_cfgset_new(void)
{
	return calloc(1, sizeof(struct resild_cfgset));
}

void resild_cfgset_free(struct resild_cfgset *set)
{
	if (!set)
		return;
	free(set->ent);
	free(set);
}

const struct resild_cfgent *resild_cfgset_find(const struct resild_cfgset *set, const char *name)
{
	if (!set)
		return NULL;
	for (size_t i = 0; i < set->n; i++)
		if (strcmp(set->ent[i].name, name) == 0)
			return &set->ent[i];
	return NULL;
}

int resild_name_check(const char *name, char *err, size_t errlen)
{
	size_t n = name ? strlen(name) : 0;

	/* the verdict is resil_name_valid's; this only finds the words */
	if (resil_name_valid(name))
		return 0;
	if (n == 0)
		snprintf(err, errlen, "empty policy name");
	else if (n >= RESIL_NAME_MAX)
		snprintf(err, errlen, "policy name longer than %d characters", RESIL_NAME_MAX - 1);
	else if (name[0] == '.' || name[0] == '-')
		snprintf(err, errlen, "policy name \"%s\" starts with '%c'", name, name[0]);
	else if (strchr(name + 1, '@') || (name[0] == '@' && n == 1))
		snprintf(err, errlen, "policy name \"%s\": '@' only starts a budget's name", name);
	else
		snprintf(err, errlen,
			 "policy name has a character other than A-Z a-z 0-9 _ . : - @");
	return -EINVAL;
}

/* Parser state for one file. */
struct parse {
	struct resild_cfgset *set;
	const char *label;
	const char *text;	   /* what is left to read */
	int line;		   /* of the line last handed to inih */
	struct resild_cfgent *cur; /* the section being read, NULL outside one */
	int err_line;		   /* first error we found ourselves, 0: none */
	char err[512];
	bool too_long;
	int nseen; /* keys of the current section, to refuse one given twice */
	int seen_line[64];
	char seen[64][96];
};

static void parse_fail(struct parse *p, const char *fmt, const char *a, const char *b)
{
	if (p->err_line)
		return;
	p->err_line = p->line;
	snprintf(p->err, sizeof(p->err), fmt, a, b);
}

static struct resild_cfgent *cfgset_add(struct resild_cfgset *set)
{
	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 16;
		struct resild_cfgent *e = realloc(set->ent, cap * sizeof(*e));

		if (!e)
			return NULL;
		set->ent = e;
		set->cap = cap;
	}
	memset(&set->ent[set->n], 0, sizeof(set->ent[0]));
	return &set->ent[set->n++];
}

/* A section header line, seen by the reader before inih parses it. */
static void parse_section(struct parse *p, const char *s)
{
	char buf[CFG_MAX_LINE], name[CFG_MAX_LINE], msg[256];
	const struct resild_cfgent *dup;
	const char *e;
	size_t n;

	p->cur = NULL;
	p->nseen = 0;
	s++; /* '[' */
	e = strchr(s, ']');
	if (!e)
		return; /* inih reports the syntax error */
	n = (size_t)(e - s);
	memcpy(buf, s, n);
	buf[n] = '\0';
	e = buf + strspn(buf, " \t");
	if (strncmp(e, "policy", 6) || (e[6] != ' ' && e[6] != '\t') ||
	    sscanf(e + 6, " %4095s", name) != 1) {
		parse_fail(p, "unknown section [%.200s] (expected [policy NAME])", buf, NULL);
		return;
	}
	/* nothing but blanks after the name */
	e += 6;
	e += strspn(e, " \t") + strlen(name);
	if (e[strspn(e, " \t")] != '\0') {
		parse_fail(p, "section [%.200s]: a policy name has no blanks", buf, NULL);
		return;
	}
	if (resild_name_check(name, msg, sizeof(msg)) < 0) {
		parse_fail(p, "section [%.200s]: %s", buf, msg);
		return;
	}
	dup = resild_cfgset_find(p->set, name);
	if (dup) {
		char where[300];

		snprintf(where, sizeof(where), "%s:%d", dup->file, dup->line);
		parse_fail(p, "policy %s is already defined at %s", name, where);
		return;
	}
	p->cur = cfgset_add(p->set);
	if (!p->cur) {
		parse_fail(p, "out of memory%s%s", "", "");
		return;
	}
	snprintf(p->cur->name, sizeof(p->cur->name), "%s", name);
	snprintf(p->cur->file, sizeof(p->cur->file), "%s", p->label);
	p->cur->line = p->line;
	resil_conf_init(&p->cur->conf);
}

static int parse_handler(void *user, const char *section, const char *key, const char *value);

static char *trim(char *s)
{
	char *e;

	s += strspn(s, " \t\r\n");
	e = s + strlen(s);
	while (e > s && strchr(" \t\r\n", e[-1]))
		*--e = '\0';
	return s;
}

/* A line longer than inih's buffer, as inih would read it (see the top). */
static void parse_long_line(struct parse *p, const char *text, size_t n)
{
	char line[CFG_MAX_LINE], *s, *eq, *c;

	memcpy(line, text, n);
	line[n] = '\0';
	s = trim(line);
	if (!*s || *s == ';' || *s == '#')
		return;
	if (*s == '[') {
		/* parse_section has read it; a header this long is only a name
		 * too long, which it reported */
		if (!p->err_line && !strchr(s, ']'))
			parse_fail(p,
				   "syntax error (expected \"key = value\" or [policy NAME])%s%s",
				   "", "");
		return;
	}
	eq = strpbrk(s, "=:");
	if (!eq) {
		parse_fail(p, "syntax error (expected \"key = value\" or [policy NAME])%s%s", "",
			   "");
		return;
	}
	*eq = '\0';
	/* an inline comment: ';' after a blank, as inih cuts it */
	for (c = eq + 1; (c = strchr(c, ';')); c++)
		if (c[-1] == ' ' || c[-1] == '\t') {
			*c = '\0';
			break;
		}
	if (!p->err_line && !parse_handler(p, p->cur ? p->cur->name : "", trim(s), trim(eq + 1)))
		parse_fail(p, "%s%s", "invalid line", "");
}

/* fgets over the text: counts lines and sees section headers. */
static char *parse_reader(char *str, int num, void *stream)
{
	struct parse *p = stream;
	const char *nl, *s;
	size_t n;

	if (!*p->text)
		return NULL;
	nl = strchr(p->text, '\n');
	n = nl ? (size_t)(nl - p->text) + 1 : strlen(p->text);
	p->line++;
	if (n > CFG_MAX_LINE - 1 || (n == CFG_MAX_LINE - 1 && !nl)) {
		char what[64];

		snprintf(what, sizeof(what), "%d", CFG_MAX_LINE - 2);
		parse_fail(p, "line longer than %s characters (at most %s)", what, what);
		p->too_long = true;
		p->text += n;
		str[0] = '\n';
		str[1] = '\0';
		return str;
	}
	if (n > (size_t)num - 1) {
		/* a line inih cannot hold: parsed here, an empty one for inih */
		s = p->text + strspn(p->text, " \t\r");
		if (*s == '[') {
			char head[CFG_MAX_LINE];

			memcpy(head, s, n - (size_t)(s - p->text));
			head[n - (size_t)(s - p->text)] = '\0';
			parse_section(p, head);
		}
		parse_long_line(p, p->text, n);
		p->text += n;
		str[0] = '\n';
		str[1] = '\0';
		return str;
	}
	memcpy(str, p->text, n);
	str[n] = '\0';
	p->text += n;
	s = str + strspn(str, " \t\r");
	if (*s == '[')
		parse_section(p, s);
	return str;
}

static int parse_handler(void *user, const char *section, const char *key, const char *value)
{
	struct parse *p = user;
	char msg[400];
	int r;

	if (!p->cur) {
		/* pairs before any section, or in a section we refused */
		if (!section || !*section)
			parse_fail(p, "\"%s\" outside a [policy NAME] section%s", key, "");
		return p->err_line ? 0 : 1;
	}
	if (!value)
		value = "";
	for (int i = 0; i < p->nseen; i++)
		if (strcmp(p->seen[i], key) == 0) {
			char first[32];

			snprintf(first, sizeof(first), "%d", p->seen_line[i]);
			parse_fail(p, "key %s given twice in this section (first on line %s)", key,
				   first);
			return 0;
		}
	if (p->nseen < (int)RESIL_ARRAY_SIZE(p->seen) && strlen(key) < sizeof(p->seen[0])) {
		snprintf(p->seen[p->nseen], sizeof(p->seen[0]), "%s", key);
		p->seen_line[p->nseen++] = p->line;
	}
	msg[0] = '\0';
	r = resil_conf_set(&p->cur->conf, key, value, msg, sizeof(msg));
	if (r < 0) {
		if (!msg[0])
			snprintf(msg, sizeof(msg), "%s: %s", key, strerror(-r));
		parse_fail(p, "%s%s", msg, "");
		return 0;
	}
	return 1;
}

int resild_cfgset_parse_string(struct resild_cfgset *set, const char *label, const char *text,
			       char *err, size_t errlen)
{
	struct parse p = {.set = set, .label = label, .text = text};
	size_t first = set->n;
	int r;

	ini_allow_multiline = false;
	ini_use_stack = false;
	ini_allow_realloc = false;
	ini_max_line = CFG_MAX_LINE;
	ini_stop_on_first_error = true;

	r = ini_parse_stream(parse_reader, &p, parse_handler, &p);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot parse (out of memory)", label);
		goto fail;
	}
	if (r > 0 || p.err_line) {
		if (p.err_line && (r == 0 || p.err_line <= r))
			snprintf(err, errlen, "%s:%d: %s", label, p.err_line, p.err);
		else
			snprintf(err, errlen,
				 "%s:%d: syntax error (expected \"key = value\" or [policy NAME])",
				 label, r);
		goto fail;
	}
	/* cross-key checks, reported at the section header */
	for (size_t i = first; i < set->n; i++) {
		char msg[400] = "";

		if (resil_conf_check(&set->ent[i].conf, msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "%s:%d: policy %s: %s", label, set->ent[i].line,
				 set->ent[i].name, msg[0] ? msg : "invalid configuration");
			goto fail;
		}
	}
	return 0;
fail:
	set->n = first;
	return -EINVAL;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_file(const char *path, char **ret, char *err, size_t errlen)
{
	struct stat st;
	char *buf;
	ssize_t n;
	size_t got = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CFG_MAX_FILE) {
		snprintf(err, errlen, "%s: not a regular file of at most %d bytes", path,
			 CFG_MAX_FILE);
		close(fd);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	if (strlen(buf) != got) {
		snprintf(err, errlen, "%s: contains a NUL byte", path);
		free(buf);
		return -EINVAL;
	}
	*ret = buf;
	return 0;
}

int resild_cfgset_load_dir(struct resild_cfgset *set, const char *dir, const char *skip, char *err,
			   size_t errlen)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	struct stat skip_st;
	bool have_skip = skip && *skip && stat(skip, &skip_st) == 0;
	DIR *dp;
	int r = 0;

	dp = opendir(dir);
	if (!dp) {
		r = -errno;
		if (r == -ENOENT)
			snprintf(err, errlen,
				 "configuration directory %s does not exist (create it, or name "
				 "another with --config DIR or config_dir)",
				 dir);
		else
			snprintf(err, errlen, "%s: cannot open directory: %s", dir, strerror(-r));
		return r;
	}
	while ((de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		struct stat st;

		if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".conf"))
			continue;
		/* the daemon's settings, not policies */
		if (strcmp(de->d_name, RESILD_OPTIONS_NAME) == 0 ||
		    (have_skip && fstatat(dirfd(dp), de->d_name, &st, 0) == 0 &&
		     st.st_dev == skip_st.st_dev && st.st_ino == skip_st.st_ino))
			continue;
		if (n == CFG_MAX_FILES) {
			snprintf(err, errlen, "%s: more than %d configuration files", dir,
				 CFG_MAX_FILES);
			r = -E2BIG;
			goto out;
		}
		if (n == cap) {
			char **nn;

			cap = cap ? cap * 2 : 16;
			nn = realloc(names, cap * sizeof(*nn));
			if (!nn) {
				r = -ENOMEM;
				goto out;
			}
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n && r == 0; i++) {
		char path[4096];
		char *text = NULL;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		r = read_file(path, &text, err, errlen);
		if (r < 0)
			break;
		r = resild_cfgset_parse_string(set, path, text, err, errlen);
		free(text);
	}
out:
	if (r == -ENOMEM)
		snprintf(err, errlen, "%s: out of memory", dir);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(dp);
	return r;
}

/* Does text declare [policy name]? Its line, or 0. */
static int declares(const char *text, const char *name)
{
	size_t nl = strlen(name);
	int line = 1;

	for (const char *p = text; *p; line++) {
		const char *e = strchr(p, '\n'), *s = p + strspn(p, " \t");

		if (*s == '[') {
			s++;
			s += strspn(s, " \t");
			if (strncmp(s, "policy", 6) == 0 && (s[6] == ' ' || s[6] == '\t')) {
				s += 6;
				s += strspn(s, " \t");
				if (strncmp(s, name, nl) == 0 && strchr(" \t]", s[nl]))
					return line;
			}
		}
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

int resild_name_in_files(const char *dir, const char *name, char *where, size_t wlen)
{
	struct dirent *de;
	DIR *dp = dir ? opendir(dir) : NULL;
	int found = 0;

	if (!dp)
		return 0;
	while (!found && (de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		char path[4096], err[256], *text = NULL;
		int line;

		if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".conf") ||
		    strcmp(de->d_name, RESILD_OPTIONS_NAME) == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (read_file(path, &text, err, sizeof(err)) < 0)
			continue;
		line = declares(text, name);
		if (line) {
			snprintf(where, wlen, "%s:%d", path, line);
			found = 1;
		}
		free(text);
	}
	closedir(dp);
	return found;
}

static void load_note(struct resild *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct gone {
	char (*names)[RESIL_NAME_MAX];
	size_t n;
	const struct resild_cfgset *set;
};

static int collect_gone(const struct resil_seg *s, uint32_t slot, const struct resil_rec *rec,
			void *ctx)
{
	struct gone *g = ctx;

	if (!(rec->flags & RESIL_REC_FROM_FILE))
		return 0;
	if (resild_cfgset_find(g->set, rec->name))
		return 0;
	snprintf(g->names[g->n++], RESIL_NAME_MAX, "%s", rec->name);
	return 0;
}

/* Is there room for every define of set at once? 0, or -ENOSPC with the
 * reason in err: then nothing of set is applied. */
static int cfgset_fits(struct resild *d, const struct resild_cfgset *set, char *err, size_t errlen)
{
	struct resil_define_cost need = {0}, room, c;

	for (size_t i = 0; i < set->n; i++) {
		if (resil_seg_define_cost(&d->seg, set->ent[i].name, &set->ent[i].conf,
					  RESIL_REC_FROM_FILE, &c) < 0)
			continue; /* resil_seg_define says why */
		need.records += c.records;
		need.slots += c.slots;
		need.arena += c.arena;
	}
	resil_seg_room(&d->seg, &room);
	if (need.records > room.records && need.slots <= room.slots && need.arena <= room.arena) {
		struct resil_seg_usage u;

		/* records retired by earlier changes come free within the grace
		 * period: the reload waits for them (the loop retries it) */
		resil_seg_usage(&d->seg, &u);
		if (need.records <= room.records + u.records_waiting) {
			snprintf(err, errlen,
				 "%u policies change and need a configuration record each, %u are "
				 "left and %u more come free within %lld ms",
				 need.records, room.records, u.records_waiting,
				 (long long)(RESIL_REUSE_GRACE_NS / 1000000));
			return -EAGAIN;
		}
	}
	if (need.records > room.records)
		snprintf(err, errlen,
			 "%u policies change and need a configuration record each, %u are left "
			 "(raise --policies)",
			 need.records, room.records);
	else if (need.slots > room.slots)
		snprintf(err, errlen,
			 "%u new policies need a slot each, %u are free (raise --policies)",
			 need.slots, room.slots);
	else if (need.arena > room.arena)
		snprintf(err, errlen,
			 "the new state needs %llu bytes of the state segment, %llu are free "
			 "(raise --state-size)",
			 (unsigned long long)need.arena, (unsigned long long)room.arena);
	else
		return 0;
	return -ENOSPC;
}

int resild_cfgset_apply(struct resild *d, const struct resild_cfgset *set)
{
	int64_t now = resil_clock_monotonic(NULL);
	struct gone g = {.set = set};
	char why[512];
	int failed = 0;

	/* what has waited out its grace period counts as room */
	resil_seg_reclaim(&d->seg, now);
	failed = cfgset_fits(d, set, why, sizeof(why));
	if (failed == -EAGAIN) {
		log_info("configuration from %s waits: %s", d->opts.config_dir, why);
		return -EAGAIN;
	}
	if (failed < 0) {
		log_error("configuration from %s not applied: %s", d->opts.config_dir, why);
		load_note(d, "configuration from %s not applied: %s", d->opts.config_dir, why);
		return -ENOSPC;
	}

	for (size_t i = 0; i < set->n; i++) {
		const struct resild_cfgent *e = &set->ent[i];
		const struct resil_rec *rec = NULL;
		uint64_t word;
		uint32_t slot;
		char err[512] = "";
		int r;

		if (resil_seg_lookup(&d->seg, e->name, &slot, &word) == 0)
			rec = resil_seg_rec_of(&d->seg, word);
		/* unchanged: live state untouched; a runtime change over it
		 * goes (the file wins at a reload) */
		if (rec &&
		    (rec->flags & (RESIL_REC_FROM_FILE | RESIL_REC_RUNTIME)) ==
			RESIL_REC_FROM_FILE &&
		    resil_seg_conf_same(rec, &e->conf))
			continue;
		r = resil_seg_define(&d->seg, e->name, &e->conf, (uint32_t)d->uid,
				     RESIL_REC_FROM_FILE, now, err, sizeof(err));
		if (r < 0) {
			if (!err[0])
				snprintf(err, sizeof(err), "%s", strerror(-r));
			log_error("%s:%d: policy %s: %s", e->file, e->line, e->name, err);
			load_note(d, "%s:%d: policy %s: %s", e->file, e->line, e->name, err);
			failed++;
			continue;
		}
		log_info("policy %s: %s from %s:%d", e->name, rec ? "changed" : "created", e->file,
			 e->line);
	}
	/* the global policies' fallback words at once (a reload: not a tick
	 * later; at start the cluster's init does it) */
	resild_cluster_woken(d);

	g.names = calloc(d->seg.cfg->slot_cap ? d->seg.cfg->slot_cap : 1, RESIL_NAME_MAX);
	if (!g.names)
		return log_error_errno(-ENOMEM, "cannot apply configuration: %m");
	resil_seg_foreach(&d->seg, collect_gone, &g);
	for (size_t i = 0; i < g.n; i++) {
		struct resil_conf c;
		char err[512] = "";
		int r;

		/* a policy processes declared goes back to their declaration
		 * (owners.c), else away */
		if (resild_owners_declaration(d, g.names[i], &c) &&
		    resil_seg_define(&d->seg, g.names[i], &c, (uint32_t)d->uid, 0, now, err,
				     sizeof(err)) >= 0) {
			log_info("policy %s: no longer in the configuration files: back to its "
				 "declaration",
				 g.names[i]);
			continue;
		}
		r = resil_seg_delete(&d->seg, g.names[i]);
		if (r < 0 && r != -ENOENT) {
			log_error_errno(r, "policy %s: cannot delete: %m", g.names[i]);
		} else {
			resild_owners_forget(d, g.names[i]);
			log_info("policy %s: deleted (no longer in the configuration files)",
				 g.names[i]);
		}
	}
	free(g.names);
	return failed;
}

/* The first error of a load, for `resilctl reload` and `status`. */
static void load_note(struct resild *d, const char *fmt, ...)
{
	va_list ap;

	if (d->reload_msg[0])
		return;
	va_start(ap, fmt);
	vsnprintf(d->reload_msg, sizeof(d->reload_msg), fmt, ap);
	va_end(ap);
}

int resild_config_load(struct resild *d, bool initial)
{
	struct resild_cfgset *set;
	char err[1024] = "";
	int r;

	d->reload_msg[0] = '\0';
	d->reload_ok = false;
	d->reload_time = time(NULL);
	if (!initial) {
		/* the settings file: an error fails the reload; a change is
		 * for the next start (sockets, sizes and limits are set once) */
		r = resild_options_reread(d, err, sizeof(err));
		if (r < 0) {
			log_error("%s; configuration not reloaded, the previous one keeps running",
				  err);
			load_note(d, "%s", err);
			return r;
		}
	}
	set = resild_cfgset_new();
	if (!set) {
		load_note(d, "out of memory");
		return log_error_errno(-ENOMEM, "cannot load configuration: %m");
	}
	r = resild_cfgset_load_dir(set, d->opts.config_dir, d->optfile.path, err, sizeof(err));
	if (r < 0) {
		if (!err[0])
			snprintf(err, sizeof(err), "cannot load configuration: %s", strerror(-r));
		if (initial)
			log_error("%s", err);
		else
			log_error("%s; configuration not reloaded, the previous one keeps running",
				  err);
		load_note(d, "%s", err);
		resild_cfgset_free(set);
		return r;
	}
	r = resild_cfgset_apply(d, set);
	for (int i = 0; r == -EAGAIN && initial && i < 200; i++) {
		/* at start (adopted segments): what waits comes free within
		 * the grace period; nothing else runs yet */
		struct timespec ts = {0, 10 * 1000 * 1000};

		nanosleep(&ts, NULL);
		r = resild_cfgset_apply(d, set);
	}
	if (r == -EAGAIN && !initial) {
		/* nothing applied yet: the loop tries again (resild_reload_retry) */
		resild_cfgset_free(set);
		return r;
	}
	if (r < 0) {
		/* nothing applied: the previous configuration keeps running */
		if (!initial)
			log_error("configuration not reloaded, the previous one keeps running");
		resild_cfgset_free(set);
		return r;
	}
	resild_cfgset_free(d->files);
	d->files = set;
	if (r > 0) {
		/* a policy the files need could not be defined: at start fatal;
		 * on reload a failure (counted so), though the others applied */
		if (!initial)
			log_error("configuration reloaded from %s with %d policies failed (see "
				  "above): counted as a failed reload",
				  d->opts.config_dir, r);
		return -EINVAL;
	}
	d->reload_ok = true;
	d->reload_ok_time = d->reload_time;
	snprintf(d->reload_msg, sizeof(d->reload_msg), "%zu policies from files in %s%s", set->n,
		 d->opts.config_dir,
		 d->options_changed ? "; the settings file changed: restart to apply it" : "");
	if (!initial)
		log_notice("configuration reloaded from %s: %zu policies from files",
			   d->opts.config_dir, set->n);
	return 0;
}

/* ---- the daemon's settings file ---- */

void resild_optfile_clear(struct resild_optfile *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->ent[i].value);
	f->n = 0;
	f->path[0] = '\0';
}

static int optfile_parse(struct resild_optfile *f, const char *label, const char *text,
			 const char *const *keys, char *err, size_t errlen)
{
	enum { NONE, DAEMON, CLUSTER } sect = NONE;
	int line = 0;

	for (const char *p = text; *p; p++) {
		char buf[CFG_MAX_LINE], *s, *eq, *key, *val;
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		const char *known = NULL;
		char cluster_key[128];

		line++;
		if (n >= sizeof(buf)) {
			snprintf(err, errlen, "%s:%d: line longer than %d characters", label, line,
				 CFG_MAX_LINE - 1);
			return -EINVAL;
		}
		memcpy(buf, p, n);
		buf[n] = '\0';
		p += n;
		if (!*p)
			p--; /* the loop's p++ lands on the NUL */
		s = trim(buf);
		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *e = strchr(s, ']');

			if (!e || *trim(e + 1)) {
				snprintf(err, errlen, "%s:%d: syntax error (expected [daemon])",
					 label, line);
				return -EINVAL;
			}
			*e = '\0';
			s = trim(s + 1);
			if (strcmp(s, "daemon") == 0) {
				sect = DAEMON;
			} else if (strcmp(s, "cluster") == 0) {
				sect = CLUSTER;
			} else {
				snprintf(
				    err, errlen,
				    "%s:%d: unknown section [%.200s] (the daemon's settings go "
				    "in [daemon]; policies in other files of the configuration "
				    "directory)",
				    label, line, s);
				return -EINVAL;
			}
			continue;
		}
		eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: syntax error (expected \"key = value\")",
				 label, line);
			return -EINVAL;
		}
		*eq = '\0';
		key = trim(s);
		val = eq + 1;
		/* an inline comment: '#' or ';' after a blank */
		for (char *c = val; *c; c++)
			if ((*c == '#' || *c == ';') && c > val &&
			    (c[-1] == ' ' || c[-1] == '\t')) {
				*c = '\0';
				break;
			}
		val = trim(val);
		if (sect == NONE) {
			snprintf(err, errlen, "%s:%d: \"%.100s\" outside the [daemon] section",
				 label, line, key);
			return -EINVAL;
		}
		if (sect == CLUSTER) {
			/* [cluster] KEY is the setting cluster_KEY (--cluster-KEY) */
			char *ck = cluster_key;

			snprintf(cluster_key, sizeof(cluster_key), "cluster_%.100s", key);
			key = ck;
		} else if (strncmp(key, "cluster_", 8) == 0) {
			snprintf(err, errlen, "%s:%d: %.100s goes in [cluster], as %.100s", label,
				 line, key, key + 8);
			return -EINVAL;
		}
		for (const char *const *k = keys; *k; k++)
			if (strcmp(*k, key) == 0)
				known = *k;
		if (!known) {
			char list[1024] = "";

			for (const char *const *k = keys; *k; k++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
					 k == keys ? "" : ", ", *k);
			snprintf(err, errlen, "%s:%d: unknown setting %.100s (known: %s)", label,
				 line, key, list);
			return -EINVAL;
		}
		if (!*val) {
			snprintf(err, errlen, "%s:%d: %s has no value", label, line, known);
			return -EINVAL;
		}
		for (size_t i = 0; i < f->n; i++)
			if (f->ent[i].key == known) {
				snprintf(err, errlen, "%s:%d: %s given twice (first on line %d)",
					 label, line, known, f->ent[i].line);
				return -EINVAL;
			}
		if (f->n == RESILD_OPTIONS_MAX) {
			snprintf(err, errlen, "%s:%d: more than %d settings", label, line,
				 RESILD_OPTIONS_MAX);
			return -EINVAL;
		}
		f->ent[f->n].value = strdup(val);
		if (!f->ent[f->n].value) {
			snprintf(err, errlen, "%s: out of memory", label);
			return -ENOMEM;
		}
		f->ent[f->n].key = known;
		f->ent[f->n].line = line;
		f->n++;
	}
	return 0;
}

int resild_optfile_parse_string(struct resild_optfile *f, const char *label, const char *text,
				const char *const *keys, char *err, size_t errlen)
{
	size_t first = f->n;
	int r = optfile_parse(f, label, text, keys, err, errlen);

	if (r < 0) {
		/* nothing of a bad text is kept */
		for (size_t i = first; i < f->n; i++)
			free(f->ent[i].value);
		f->n = first;
	}
	return r;
}

int resild_optfile_load(struct resild_optfile *f, const char *path, bool must_exist,
			const char *const *keys, char *err, size_t errlen)
{
	char *text = NULL;
	int r;

	resild_optfile_clear(f);
	if (access(path, F_OK) < 0 && errno == ENOENT) {
		if (!must_exist)
			return 0;
		snprintf(err, errlen, "options file %s does not exist", path);
		return -ENOENT;
	}
	r = read_file(path, &text, err, errlen);
	if (r < 0)
		return r;
	r = resild_optfile_parse_string(f, path, text, keys, err, errlen);
	free(text);
	if (r < 0) {
		resild_optfile_clear(f);
		return r;
	}
	snprintf(f->path, sizeof(f->path), "%s", path);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * owners.c - who owns a policy's configuration, and what lies beneath.
 *
 * Three owners, and the operator wins:
 *   1. the files (resild's configuration directory): a record with
 *      RESIL_REC_FROM_FILE. A reload puts the file's configuration back
 *      (cfgfile.c: the file wins at the next reload); a policy the files
 *      no longer define goes back to its declaration, if any;
 *   2. runtime changes (a Define without declare: resilctl create, apply,
 *      update): the record gets RESIL_REC_RUNTIME, which stays until
 *      Revert (resilctl revert) or a reload of the policy's file;
 *   3. declarations from code (Define with declare: resil_define, each
 *      worker at its start): they define the policy only when neither of
 *      the above owns it. Beneath one of them the newest declaration is
 *      kept here, for Revert (a runtime change over a declared policy
 *      goes back to it).
 * Among declarations, the one from the newest process wins: each carries
 * its process's start time (/proc/PID/stat, the peer's pid), and one from
 * a process that started before the declaration in force changes nothing
 * (counted). So a rolling deploy, whose old and new workers declare
 * different values while both generations run, moves the policy once, to
 * the new value, and never back: an old worker that declares after a new
 * one started is older than it. (Two processes that started within one
 * clock tick are equals: the later declaration wins.)
 *
 * What is kept where. The record's flags (in the configuration segment,
 * so in the fd store) say which owner holds the live configuration, so a
 * restarted resild that adopted its segments still lets no declaration
 * undo a runtime change. Who made a runtime change, who declared what and
 * the declaration beneath live here, in the daemon's memory: after such a
 * restart they are unknown ("before resild started"), Revert goes back
 * to a file's configuration only, and the first declaration of a policy
 * nobody owns defines it. Pending decisions (what workers decided by
 * their policy.fallback before they reached resild, as they tell it with
 * their declarations) are added up per policy.
 *
 * One entry per name that has something to remember, in a table of
 * buckets by the name's hash; an entry goes when its policy is deleted.
 * An entry is only made for a policy that exists (the callers make it
 * after a define or for a live record), so a peer cannot grow the table
 * past the policies it may create.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cfgfile.h"
#include "owners.h"
#include "seg.h"
#include "seg_records.h"

#define OWNER_BUCKETS 256
#define EXE_MAX	      256

struct owner {
	struct owner *next;
	char name[RESIL_NAME_MAX];
	/* the runtime change in force (when the record says RESIL_REC_RUNTIME) */
	bool rt;
	uint32_t rt_uid, rt_pid;
	int64_t rt_time; /* wall clock, s */
	/* the newest declaration */
	bool decl;
	uint64_t decl_start; /* its process's start time, clock ticks since boot */
	uint32_t decl_pid, decl_uid;
	int64_t decl_time;
	char decl_exe[EXE_MAX];
	struct resil_conf decl_conf;
	/* what processes decided before they reached resild, as they said */
	uint64_t pend_admitted, pend_rejected;
	uint32_t pend_reports;
	uint64_t superseded; /* declarations from older processes */
};

struct resild_owners {
	struct owner *b[OWNER_BUCKETS];
};

static unsigned bucket(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h % OWNER_BUCKETS;
}

/* NAME's entry; made when make (NULL without memory: nothing is kept). */
static struct owner *entry(struct resild *d, const char *name, bool make)
{
	struct owner *o;
	unsigned i = bucket(name);

	if (!d->owners) {
		if (!make)
			return NULL;
		d->owners = calloc(1, sizeof(*d->owners));
		if (!d->owners)
			return NULL;
	}
	for (o = d->owners->b[i]; o; o = o->next)
		if (strcmp(o->name, name) == 0)
			return o;
	if (!make)
		return NULL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	snprintf(o->name, sizeof(o->name), "%s", name);
	o->next = d->owners->b[i];
	d->owners->b[i] = o;
	return o;
}

/* The executable of pid, in words: /proc/PID/exe when we may read it (the
 * same uid, or root), else the first word of its command line, else its
 * comm in brackets; "" when it is gone. */
static void exe_of(uint32_t pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/exe", pid);
	n = readlink(path, buf, len - 1);
	if (n > 0) {
		buf[n] = '\0';
		return;
	}
	snprintf(path, sizeof(path), "/proc/%u/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0'; /* argv[0] ends at its NUL */
		if (buf[0])
			return;
	}
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char comm[32];

		n = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		if (n > 0) {
			comm[n] = '\0';
			comm[strcspn(comm, "\n")] = '\0';
			snprintf(buf, len, "[%s]", comm);
		}
	}
}

enum resild_decl resild_owners_judge(struct resild *d, const struct resild_peer *p,
				     const char *name, const struct resil_rec *rec, uint64_t *start)
{
	struct owner *o = entry(d, name, false);

	*start = 0;
	/* unknown (gone already): the oldest of all */
	(void)resil_proc_stat((uint32_t)p->pid, start, NULL);
	if (o && o->decl && *start < o->decl_start) {
		o->superseded++;
		return RESILD_DECL_OLDER;
	}
	if (rec && (rec->flags & (RESIL_REC_FROM_FILE | RESIL_REC_RUNTIME)))
		return RESILD_DECL_KEEP;
	return RESILD_DECL_APPLY;
}

void resild_owners_declared(struct resild *d, const struct resild_peer *p, const char *name,
			    const struct resil_conf *c, uint64_t start)
{
	struct owner *o = entry(d, name, true);

	if (!o)
		return;
	o->decl = true;
	o->decl_start = start;
	o->decl_pid = (uint32_t)p->pid;
	o->decl_uid = (uint32_t)p->uid;
	o->decl_time = time(NULL);
	o->decl_conf = *c;
	exe_of(o->decl_pid, o->decl_exe, sizeof(o->decl_exe));
}

void resild_owners_pending(struct resild *d, const char *name, uint64_t admitted, uint64_t rejected)
{
	struct owner *o;

	if (!admitted && !rejected)
		return;
	o = entry(d, name, true);
	if (!o)
		return;
	o->pend_admitted += admitted;
	o->pend_rejected += rejected;
	o->pend_reports++;
}

void resild_owners_runtime(struct resild *d, const struct resild_peer *p, const char *name)
{
	struct owner *o = entry(d, name, true);

	if (!o)
		return;
	o->rt = true;
	o->rt_uid = (uint32_t)p->uid;
	o->rt_pid = (uint32_t)p->pid;
	o->rt_time = time(NULL);
}

void resild_owners_forget(struct resild *d, const char *name)
{
	struct owner **pp;

	if (!d->owners)
		return;
	for (pp = &d->owners->b[bucket(name)]; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->name, name) == 0) {
			struct owner *o = *pp;

			*pp = o->next;
			free(o);
			return;
		}
	}
}

bool resild_owners_declaration(struct resild *d, const char *name, struct resil_conf *c)
{
	struct owner *o = entry(d, name, false);

	if (!o || !o->decl)
		return false;
	*c = o->decl_conf;
	return true;
}

int resild_owners_beneath(struct resild *d, const struct resil_rec *rec, struct resil_conf *c,
			  uint32_t *flags, char *why, size_t len)
{
	const struct resild_cfgent *f =
	    (rec->flags & RESIL_REC_FROM_FILE) ? resild_cfgset_find(d->files, rec->name) : NULL;
	struct owner *o = entry(d, rec->name, false);

	if (f) {
		*c = f->conf;
		*flags = RESIL_REC_FROM_FILE;
		return 0;
	}
	if (o && o->decl) {
		*c = o->decl_conf;
		*flags = 0;
		return 0;
	}
	snprintf(why, len,
		 "nothing beneath the runtime change of policy %s: no file defines it and no "
		 "process has declared it%s (resilctl delete %s removes it)",
		 rec->name, d->adopted ? " since resild started" : "", rec->name);
	return -ENODATA;
}

void resild_owners_origin(struct resild *d, const struct resil_rec *rec,
			  struct resild_origin_buf *buf)
{
	Resil__Origin *r = &buf->o;
	struct owner *o = entry(d, rec->name, false);
	const struct resild_cfgent *f = NULL;

	resil__origin__init(r);
	r->file = (char *)"";
	r->exe = (char *)"";
	r->declared_exe = (char *)"";
	if (rec->flags & RESIL_REC_FROM_FILE) {
		f = resild_cfgset_find(d->files, rec->name);
		if (f) {
			snprintf(buf->file, sizeof(buf->file), "%s", f->file);
			r->file = buf->file;
			r->line = (uint32_t)f->line;
		}
	}
	if (rec->flags & RESIL_REC_RUNTIME) {
		r->kind = RESIL__ORIGIN_KIND__ORIGIN_RUNTIME;
		if (o && o->rt) {
			r->uid = o->rt_uid;
			r->pid = o->rt_pid;
			r->time = o->rt_time;
		}
	} else if (rec->flags & RESIL_REC_FROM_FILE) {
		r->kind = RESIL__ORIGIN_KIND__ORIGIN_FILE;
	} else if (o && o->decl) {
		r->kind = RESIL__ORIGIN_KIND__ORIGIN_DECLARED;
		r->uid = o->decl_uid;
		r->pid = o->decl_pid;
		r->time = o->decl_time;
		r->exe = o->decl_exe;
	} else {
		r->kind = RESIL__ORIGIN_KIND__ORIGIN_UNKNOWN;
	}
	if (!o)
		return;
	if (o->decl && (rec->flags & (RESIL_REC_FROM_FILE | RESIL_REC_RUNTIME))) {
		r->declared_beneath = true;
		r->declared_pid = o->decl_pid;
		r->declared_exe = o->decl_exe;
		r->declared_time = o->decl_time;
		r->declared_differs = !resil_seg_conf_same(rec, &o->decl_conf);
	}
	r->pending_admitted = o->pend_admitted;
	r->pending_rejected = o->pend_rejected;
	r->pending_processes = o->pend_reports;
	r->declarations_superseded = o->superseded;
}

void resild_owners_fini(struct resild *d)
{
	if (!d->owners)
		return;
	for (unsigned i = 0; i < OWNER_BUCKETS; i++) {
		for (struct owner *o = d->owners->b[i], *n; o; o = n) {
			n = o->next;
			free(o);
		}
	}
	free(d->owners);
	d->owners = NULL;
}

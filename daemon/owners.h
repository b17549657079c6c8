/* SPDX-License-Identifier: MIT */
/*
 * owners.h - who owns each policy's configuration: the files, then
 * runtime changes, then declarations from code (owners.c says the rules).
 */
#ifndef RESILD_OWNERS_H
#define RESILD_OWNERS_H

#include <stdbool.h>
#include <stdint.h>

#include "resil.pb-c.h"
#include "resild.h"

/* What a declaration does to the live configuration. */
enum resild_decl {
	RESILD_DECL_APPLY, /* define it: nothing above it, and the newest process */
	RESILD_DECL_KEEP,  /* kept beneath a file's configuration or a runtime change */
	RESILD_DECL_OLDER, /* from a process older than the declaration in force: nothing */
};

/* Judge a declaration of NAME (rec: the live record, NULL if none) from
 * peer p; *start: p's start time, for resild_owners_declared. Counts an
 * OLDER one. */
enum resild_decl resild_owners_judge(struct resild *d, const struct resild_peer *p,
				     const char *name, const struct resil_rec *rec,
				     uint64_t *start);
/* Remember p's declaration c of NAME (started at start) as the newest:
 * what it is, and what Revert goes back to beneath a runtime change. */
void resild_owners_declared(struct resild *d, const struct resild_peer *p, const char *name,
			    const struct resil_conf *c, uint64_t start);
/* A process told what it decided on NAME before it reached resild. */
void resild_owners_pending(struct resild *d, const char *name, uint64_t admitted,
			   uint64_t rejected);
/* A runtime change of NAME by peer p was applied. */
void resild_owners_runtime(struct resild *d, const struct resild_peer *p, const char *name);
/* NAME was deleted (by a request, or gone from the files). */
void resild_owners_forget(struct resild *d, const char *name);
/* The newest declaration of NAME into c: false when none is known. */
bool resild_owners_declaration(struct resild *d, const char *name, struct resil_conf *c);
/* What Revert goes back to for rec: its file's configuration (*flags
 * RESIL_REC_FROM_FILE) or the newest declaration (*flags 0). 0, or
 * -ENODATA with the reason in why. */
int resild_owners_beneath(struct resild *d, const struct resil_rec *rec, struct resil_conf *c,
			  uint32_t *flags, char *why, size_t len);

/* rec's origin, for a reply; the strings live in buf or in the daemon's
 * memory, valid while the request is handled. */
struct resild_origin_buf {
	Resil__Origin o;
	char file[256];
};
void resild_owners_origin(struct resild *d, const struct resil_rec *rec,
			  struct resild_origin_buf *buf);
void resild_owners_fini(struct resild *d);

#endif

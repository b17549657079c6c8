/* SPDX-License-Identifier: MIT */
/*
 * procfs.c - what /proc says about a process (see procfs.h), for the
 * client registry. Everything here reads files of /proc and keeps no
 * state but the namespace-local pid index; nothing touches the segments.
 *
 * The index: a process of another pid namespace than ours writes its
 * own namespace's pid into the row it claims. Its /proc/PID/status (in
 * our /proc, when its namespace descends from ours) has an NSpid line
 * listing its pid in each namespace from ours down to its own: the last
 * field is the pid it writes. One walk of /proc, looking only at the
 * processes whose pid namespace is one asked about (a stat of
 * /proc/PID/ns/pid first), gives the map; a lookup is a linear search of
 * it (at most RESILD_NSPID_MAX entries), and the walk is redone at most
 * once a second, when a row needs it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "procfs.h"

#define RESILD_NSPID_MAX 65536

ino_t resild_proc_pidns(const char *proc)
{
	char path[300];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%s/ns/pid", proc);
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

int resild_proc_creds(uint32_t pid, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups)
{
	char path[64], line[4096];
	unsigned long long a, b;
	int got = 0, max = *ngroups, n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Uid: %llu %llu", &a, &b) == 2) {
			*uid = (uid_t)b;
			got |= 1;
		} else if (sscanf(line, "Gid: %llu %llu", &a, &b) == 2) {
			*gid = (gid_t)b;
			got |= 2;
		} else if (strncmp(line, "Groups:", 7) == 0) {
			char *q = line + 7, *end;

			while (n < max) {
				unsigned long v = strtoul(q, &end, 10);

				if (end == q)
					break;
				groups[n++] = (gid_t)v;
				q = end;
			}
		}
	}
	fclose(f);
	*ngroups = n;
	return got == 3 ? 0 : -EIO;
}

int resild_proc_maps(uint32_t pid, dev_t dev, ino_t ino)
{
	char path[64], line[512];
	unsigned maj, min;
	unsigned long long i;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	/* address perms offset dev inode path; a line longer than the buffer
	 * (a long path) continues in the next read, whose fields do not parse */
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &i) == 3 && i == ino &&
		    makedev(maj, min) == dev)
			found = 1;
	if (ferror(f))
		found = -EIO;
	fclose(f);
	return found;
}

struct nsent {
	ino_t ns;
	uint32_t nspid, pid;
};

struct resild_nspid {
	struct nsent *e;
	uint32_t n;
	int64_t built;
	ino_t *asked; /* the namespaces the index was built for */
	uint32_t nasked;
};

struct resild_nspid *resild_nspid_new(void)
{
	return calloc(1, sizeof(struct resild_nspid));
}

void resild_nspid_free(struct resild_nspid *x)
{
	if (!x)
		return;
	free(x->e);
	free(x->asked);
	free(x);
}

static bool asked(const ino_t *ns, uint32_t n, ino_t v)
{
	for (uint32_t i = 0; i < n; i++)
		if (ns[i] == v)
			return true;
	return false;
}

/* The last field of the NSpid line of /proc/PID/status, 0 if none. */
static uint32_t nspid_of(const char *pid)
{
	char path[300], line[512];
	uint32_t last = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/status", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "NSpid:", 6) == 0) {
			char *q = line + 6, *end;

			for (;;) {
				unsigned long v = strtoul(q, &end, 10);

				if (end == q)
					break;
				last = (uint32_t)v;
				q = end;
			}
			break;
		}
	fclose(f);
	return last;
}

void resild_nspid_index(struct resild_nspid *x, const ino_t *ns, uint32_t n, int64_t now)
{
	struct dirent *de;
	ino_t *copy;
	DIR *dir;
	bool same = x->built && n == x->nasked;

	for (uint32_t i = 0; same && i < n; i++)
		same = asked(x->asked, x->nasked, ns[i]);
	if (same && now - x->built < RESILD_NSPID_REBUILD_NS)
		return;
	copy = n ? malloc(n * sizeof(*copy)) : NULL;
	if (n && !copy)
		return;
	if (n)
		memcpy(copy, ns, n * sizeof(*copy));
	free(x->asked);
	x->asked = copy;
	x->nasked = n;
	x->built = now;
	x->n = 0;
	if (!n)
		return;
	dir = opendir("/proc");
	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL && x->n < RESILD_NSPID_MAX) {
		ino_t pns;
		uint32_t nspid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pns = resild_proc_pidns(de->d_name);
		if (!pns || !asked(ns, n, pns))
			continue;
		nspid = nspid_of(de->d_name);
		if (!nspid)
			continue;
		if (!(x->n & 1023)) {
			struct nsent *g = realloc(x->e, (x->n + 1024) * sizeof(*g));

			if (!g)
				break;
			x->e = g;
		}
		x->e[x->n++] = (struct nsent){pns, nspid, (uint32_t)strtoul(de->d_name, NULL, 10)};
	}
	closedir(dir);
}

uint32_t resild_nspid_find(const struct resild_nspid *x, ino_t ns, uint32_t nspid)
{
	for (uint32_t i = 0; x && i < x->n; i++)
		if (x->e[i].ns == ns && x->e[i].nspid == nspid)
			return x->e[i].pid;
	return 0;
}

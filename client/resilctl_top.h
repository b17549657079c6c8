/* SPDX-License-Identifier: MIT */
/*
 * resilctl_top.h - `resilctl top`: a live table of every policy, read from
 * read-only mappings of the daemon's segments.
 */
#ifndef RESIL_RESILCTL_TOP_H
#define RESIL_RESILCTL_TOP_H

#include <stdbool.h>

/*
 * argv: what follows "top" on the command line (argc of them): --sort COL
 * (calls, failure, rejections, name; or c, f, r, n), --iterations N,
 * --interval MS (1000); --socket/--json are accepted here too. socket:
 * the control socket (NULL: $RESIL_SOCKET, then the default). json: one
 * JSON object per refresh instead of a table.
 *
 * On a terminal: a full-screen table refreshed every interval, keys c f r
 * n sort, q quits; the terminal is restored on exit, SIGINT and SIGTERM.
 * Otherwise (or with --json): plain tables, one per interval, until
 * --iterations or a signal. Returns the process exit code.
 */
int resilctl_top(int argc, char **argv, const char *socket, bool json);

#endif

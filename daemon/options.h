/* SPDX-License-Identifier: MIT */
/*
 * options.h - resild's flags and settings file (options.c).
 */
#ifndef RESILD_OPTIONS_H
#define RESILD_OPTIONS_H

struct resild;

/* Defaults, then the settings file, then the flags over it. 0, or the
 * status to exit with: 2 a bad flag, 78 (EX_CONFIG) a bad settings file;
 * --help and --version print and exit 0 here. */
int resild_options_parse(struct resild *d, int argc, char **argv);

#endif

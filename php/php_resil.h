/* SPDX-License-Identifier: MIT */
/*
 * php_resil.h - the PHP extension resil: what its files share.
 *
 *	resil.c		the module (ini, the process's handle, the registry of
 *			policies), Resil\Policy's declarations and lookups,
 *			the exceptions
 *	permit.c	Resil\Policy::acquire and Resil\Permit (the hot path)
 *	retry.c		Resil\Policy::call, ::retry and Resil\Retry
 *
 * One libresil handle per process, opened pending (RESIL_OPEN_PENDING) at
 * the first declare() or get() of the process and kept until the process
 * ends: a PHP-FPM worker opens it during its first request and every
 * later request of that worker reuses it. The master never runs PHP code,
 * so it opens nothing (with opcache.preload it may: libresil's fork
 * handlers then give each worker its own client row). PHP objects live
 * for one request; what they point at (the handle, each policy's
 * resil_policy_t) lives for the process.
 */
#ifndef PHP_RESIL_H
#define PHP_RESIL_H

#include <php.h>

#include "resil.h"

#define PHP_RESIL_EXTNAME "resil"
#ifndef PHP_RESIL_VERSION
#define PHP_RESIL_VERSION "0.1.0"
#endif

extern zend_module_entry resil_module_entry;

extern zend_class_entry *resil_policy_ce, *resil_permit_ce, *resil_retry_ce, *resil_exception_ce,
    *resil_rejected_ce;

/* Resil\Policy: one resil_policy_t, valid for the process's life. */
typedef struct {
	resil_policy_t *p;
	zend_object std;
} php_resil_policy;

static inline php_resil_policy *php_resil_policy_of(zend_object *o)
{
	return (php_resil_policy *)((char *)o - XtOffsetOf(php_resil_policy, std));
}

/* The process's handle (NULL until the first declare/get). */
resil_t *php_resil_handle(void);

/* Throw the rejection verdict v (a RESIL_REJECT_*) of policy p, with its
 * Retry-After from permit; previous: an exception to chain (or NULL). */
void php_resil_throw_rejected(resil_policy_t *p, int v, const resil_permit_t *permit,
			      zend_object *previous);
/* Throw Resil\ResilException for -errno err, with the library's words. */
void php_resil_throw_errno(int err, const char *what);

/* permit.c, retry.c: their classes and handlers (MINIT). */
void php_resil_permit_minit(void);
void php_resil_permit_rinit(void);
void php_resil_permit_rshutdown(void);
void php_resil_retry_minit(void);

#endif

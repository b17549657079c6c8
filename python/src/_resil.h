/* SPDX-License-Identifier: MIT */
/*
 * _resil.h - the CPython extension resil._resil: what its files share.
 *
 *	_resil.c	the module: its exceptions and the raise_* helpers
 *			that build them, its functions, PyInit__resil
 *	handle.c	Handle: one resil_t (resil.open / resil.open_embedded);
 *			owns the manual clock page of set_clock
 *	policy.c	Policy: one resil_policy_t; acquire(), the hot path
 *	permit.c	Permit: one resil_permit_t held between acquire and
 *			release; its free list
 *	retry.c		Retry: one resil_retry_t (Policy.retry_state)
 *
 * Everything declared here is used under the GIL; the calls that give it
 * up say so where they do (handle.c, policy.c).
 *
 * Lifetimes: a Policy holds a reference to its Handle and a Permit to its
 * Policy, so the resil_t outlives every handle into it unless close() is
 * called explicitly; after close() every call raises resil.Error (EBADF)
 * instead of touching freed memory, and a call that was waiting without
 * the GIL when close() came frees the resil_t when it returns (h->busy).
 */
#ifndef RESIL_PY_RESIL_H
#define RESIL_PY_RESIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#include "resil.h"

/* resil.Error and the resil.Rejected family (_resil.c's PyInit__resil) */
extern PyObject *Error, *Rejected, *CircuitOpen, *RateLimited, *BulkheadFull, *Shed,
    *BudgetExhausted;

extern PyTypeObject HandleType, PolicyType, PermitType, RetryType;

/* the manual clock page (handle.c) */
struct manual;

typedef struct {
	PyObject_HEAD
	resil_t *r;	       /* NULL: never opened, or freed after close() */
	struct manual *manual; /* MAP_SHARED page, NULL until set_clock/set_random */
	int embedded;
	int closed; /* close() was called: every call raises EBADF */
	int busy;   /* calls using r with the GIL given up (waits, round trips) */
} HandleObject;

typedef struct {
	PyObject_HEAD
	HandleObject *h;
	resil_policy_t *p;
	PyObject *classify; /* classify(exc_type, exc) -> outcome; None: failure */
	PyObject *dict;
} PolicyObject;

typedef struct {
	PyObject_HEAD
	PolicyObject *pol;
	resil_permit_t permit;
	int held;    /* acquired, not yet released */
	int entered; /* a with block took it */
	int outcome; /* -1: by how the block ends */
} PermitObject;

/* ---- errors (_resil.c): each returns NULL, for `return` ---- */

/* resil.Error(err, msg), taking msg's reference. */
PyObject *raise_words(int err, PyObject *msg);
/* resil.Error(errno, words): words are the daemon's or the library's
 * (resil_last_error), else strerror; what: a prefix, or NULL. */
PyObject *raise_errno(int err, const char *what);
/* resil.Error(EBADF): the handle is closed. */
PyObject *raise_closed(void);
/* The rejection verdict v of po as its Rejected subclass. */
PyObject *raise_rejected(PolicyObject *po, int v, const resil_permit_t *permit);

/* ---- Handle (handle.c) ---- */

/* The handle can be used: opened, and close() not called. */
#define HANDLE_LIVE(h) ((h)->r && !(h)->closed)

#define HANDLE_OPEN(h)                                                                             \
	do {                                                                                       \
		if (!HANDLE_LIVE(h))                                                               \
			return raise_closed();                                                     \
	} while (0)

/* Around a use of h->r with the GIL given up: handle_enter before letting
 * go, handle_leave once it is back (handle.c says why). */
resil_t *handle_enter(HandleObject *h);
void handle_leave(HandleObject *h);

/* ---- Permit (permit.c) ---- */

/*
 * Permits come and go once per decision: a small free list (under the
 * GIL) saves the allocator's round trip on the hot path. Permit_dealloc
 * fills it, permit_alloc (inline in acquire) empties it.
 */
#define PERMIT_FREE_MAX 32
extern PermitObject *permit_free[PERMIT_FREE_MAX];
extern int permit_nfree;

static inline PermitObject *permit_alloc(void)
{
	if (permit_nfree > 0)
		return (PermitObject *)PyObject_Init((PyObject *)permit_free[--permit_nfree],
						     &PermitType);
	return PyObject_New(PermitObject, &PermitType);
}

/* ---- Retry (retry.c) ---- */

/* Policy.retry_state(deadline_ns=0) -> Retry */
PyObject *Policy_retry_state(PolicyObject *po, PyObject *args);

#endif

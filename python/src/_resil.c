/* SPDX-License-Identifier: MIT */
/*
 * _resil.c - the CPython extension module under the `resil` package: a thin
 * layer of C types over libresil (resil.h), so that a decision from Python
 * costs one C call and not a foreign-function trip.
 *
 * Size: above 900 lines on purpose: a CPython extension is one
 * translation unit whose types refer to one another's static type objects
 * (a Policy makes Permits and Retries, a Permit keeps its Policy, the
 * module readies them all); each type's code is a section of its own.
 *
 *	Handle	one resil_t (resil.open / resil.open_embedded); owns the
 *		manual clock page of set_clock
 *	Policy	one resil_policy_t; acquire() returns a Permit or raises a
 *		rejection (a resil.Rejected subclass) or a resil.Error
 *	Permit	one resil_permit_t held between acquire and release; a
 *		context manager whose __exit__ reports the outcome
 *	Retry	one resil_retry_t: the policy's retry decisions, step by step
 *
 * The GIL. Decisions that cannot block (the hot path: a few atomics) keep
 * it: giving it up and taking it back costs more than the decision. An
 * acquire that may sleep (bulkhead.wait, limit.wait: resil_policy_may_wait
 * says so, before each acquire since a configuration changes live) gives
 * it up around the call, so other threads run while this one waits.
 *
 * The manual clock (set_clock) reads a 64-bit word in a MAP_SHARED page:
 * children forked afterwards see the time the test sets, and the clock
 * function never needs the GIL (libresil calls it from any thread). With
 * set_clock_file the page is a file's first bytes instead, so processes
 * that are not forked from one another (a prefork server's workers that
 * each open their own handle) and the test that moves the time all read
 * one clock. The word is written by set_clock/advance_ns (relaxed: it is a
 * reading, nothing else is published with it) and read by the clock
 * function of every process mapping it.
 *
 * Lifetimes: a Policy holds a reference to its Handle and a Permit to its
 * Policy, so the resil_t outlives every handle into it unless close() is
 * called explicitly; after close() every call raises resil.Error (EBADF)
 * instead of touching freed memory, and a call that was waiting without
 * the GIL when close() came frees the resil_t when it returns (h->busy).
 * A Permit dropped while held is released as IGNORED: a forgotten permit
 * never leaks a bulkhead slot.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resil.h"

static PyObject *Error, *Rejected, *CircuitOpen, *RateLimited, *BulkheadFull, *Shed,
    *BudgetExhausted;

/* ---- errors ---- */

/* resil.Error(err, msg), taking msg's reference. Returns NULL. */
static PyObject *raise_words(int err, PyObject *msg)
{
	PyObject *exc;

	if (!msg)
		return NULL;
	exc = PyObject_CallFunction(Error, "iO", err, msg);
	Py_DECREF(msg);
	if (exc) {
		PyErr_SetObject(Error, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* resil.Error(errno, words): words are the daemon's or the library's
 * (resil_last_error), else strerror. Returns NULL for `return`. */
static PyObject *raise_errno(int err, const char *what)
{
	const char *words = resil_last_error();

	if (err < 0)
		err = -err;
	if (!words || !*words)
		words = strerror(err);
	return raise_words(err, what ? PyUnicode_FromFormat("%s: %s", what, words)
				     : PyUnicode_FromString(words));
}

static PyObject *raise_closed(void)
{
	return raise_words(EBADF, PyUnicode_FromString("resil handle is closed"));
}

/* ---- Handle ---- */

/* The manual page: anonymous (set_clock) or a file's (set_clock_file).
 * Its layout is shared by every process mapping the file: an int64
 * reading in ns, then the fixed random draw, native byte order. */
struct manual {
	int64_t now_ns;
	uint64_t random;
	int random_fixed;
};

typedef struct {
	PyObject_HEAD
	resil_t *r;	       /* NULL: never opened, or freed after close() */
	struct manual *manual; /* MAP_SHARED page, NULL until set_clock/set_random */
	int embedded;
	int closed; /* close() was called: every call raises EBADF */
	int busy;   /* calls using r with the GIL given up (waits, round trips) */
} HandleObject;

static int64_t manual_clock(void *ctx)
{
	return __atomic_load_n(&((struct manual *)ctx)->now_ns, __ATOMIC_RELAXED);
}

static uint64_t manual_random(void *ctx)
{
	return __atomic_load_n(&((struct manual *)ctx)->random, __ATOMIC_RELAXED);
}

static int handle_manual(HandleObject *h)
{
	void *m;

	if (h->manual)
		return 0;
	m = mmap(NULL, sizeof(struct manual), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		 -1, 0);
	if (m == MAP_FAILED) {
		PyErr_SetFromErrno(Error);
		return -1;
	}
	h->manual = m;
	return 0;
}

/* The manual page from the file at path (created 0600 if missing, grown
 * with zeros to the page's size, never shrunk). */
static int handle_manual_file(HandleObject *h, PyObject *path)
{
	struct stat st;
	void *m;
	int fd;

	if (h->manual) {
		PyErr_SetString(PyExc_RuntimeError, "set_clock_file: this handle already has a "
						    "manual clock (set_clock_file comes first)");
		return -1;
	}
	fd = open(PyBytes_AS_STRING(path), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) < 0 || (st.st_size < (off_t)sizeof(struct manual) &&
				   ftruncate(fd, (off_t)sizeof(struct manual)) < 0))
		goto fail;
	m = mmap(NULL, sizeof(struct manual), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto fail;
	close(fd);
	h->manual = m;
	return 0;
fail:
	PyErr_SetFromErrnoWithFilename(Error, PyBytes_AS_STRING(path));
	if (fd >= 0)
		close(fd);
	return -1;
}

static PyObject *Handle_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket",  "embedded",	  "pending", "slots",
				 "clients", "state_size", NULL};
	const char *socket = NULL;
	int embedded = 0, pending = 0;
	unsigned int slots = 0, clients = 0;
	unsigned long long state_size = 0;
	HandleObject *h;
	int err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$ppIIK", kwlist, &socket, &embedded, &pending,
					 &slots, &clients, &state_size))
		return NULL;
	h = (HandleObject *)type->tp_alloc(type, 0);
	if (!h)
		return NULL;
	h->embedded = embedded;
	if (embedded) {
		struct resil_embedded_opts o = {
		    .slots = slots, .clients = clients, .state_size = state_size};

		Py_BEGIN_ALLOW_THREADS
		err = resil_open_embedded(&h->r, &o);
		Py_END_ALLOW_THREADS
	} else {
		/* pending: succeeds whether resild runs or not, deciding by
		 * each policy's fallback until it attaches */
		struct resil_open_opts o = {.size = sizeof(o),
					    .socket_path = socket,
					    .flags = pending ? RESIL_OPEN_PENDING : 0};

		/* bounded (-ETIMEDOUT), but a connect and a handshake: no GIL */
		Py_BEGIN_ALLOW_THREADS
		err = resil_open_ex(&h->r, &o);
		Py_END_ALLOW_THREADS
	}
	if (err < 0) {
		h->r = NULL;
		Py_DECREF(h);
		return raise_errno(err, embedded ? "open_embedded" : "open");
	}
	return (PyObject *)h;
}

static void Handle_dealloc(HandleObject *h)
{
	resil_close(h->r);
	if (h->manual)
		munmap(h->manual, sizeof(struct manual));
	Py_TYPE(h)->tp_free((PyObject *)h);
}

/* The handle can be used: opened, and close() not called. */
#define HANDLE_LIVE(h) ((h)->r && !(h)->closed)

#define HANDLE_OPEN(h)                                                                             \
	do {                                                                                       \
		if (!HANDLE_LIVE(h))                                                               \
			return raise_closed();                                                     \
	} while (0)

/*
 * A call that gives the GIL up while it uses h->r (a wait for a permit, a
 * round trip to resild) is counted in h->busy from before it lets go to
 * after it has it back, so that close() from another thread meanwhile
 * does not free r under it: close() marks the handle closed, and the last
 * such call to come back frees r. Both run under the GIL.
 */
static resil_t *handle_enter(HandleObject *h)
{
	h->busy++;
	return h->r;
}

static void handle_free(HandleObject *h)
{
	resil_t *r = h->r;

	h->r = NULL;
	Py_BEGIN_ALLOW_THREADS
	resil_close(r);
	Py_END_ALLOW_THREADS
}

static void handle_leave(HandleObject *h)
{
	if (--h->busy == 0 && h->closed && h->r)
		handle_free(h);
}

static PyObject *Handle_close(HandleObject *h, PyObject *unused)
{
	h->closed = 1;
	if (!h->busy && h->r)
		handle_free(h);
	Py_RETURN_NONE;
}

static PyObject *Handle_define(HandleObject *h, PyObject *args)
{
	const char *name, *config;
	resil_t *r;
	int err;

	if (!PyArg_ParseTuple(args, "ss:define", &name, &config))
		return NULL;
	HANDLE_OPEN(h);
	r = handle_enter(h);
	Py_BEGIN_ALLOW_THREADS
	err = resil_define(r, name, config);
	Py_END_ALLOW_THREADS
	handle_leave(h);
	if (err < 0)
		return raise_errno(err, name);
	Py_RETURN_NONE;
}

static PyObject *Handle_delete(HandleObject *h, PyObject *args)
{
	const char *name;
	resil_t *r;
	int err;

	if (!PyArg_ParseTuple(args, "s:delete", &name))
		return NULL;
	HANDLE_OPEN(h);
	r = handle_enter(h);
	Py_BEGIN_ALLOW_THREADS
	err = resil_delete(r, name);
	Py_END_ALLOW_THREADS
	handle_leave(h);
	if (err < 0)
		return raise_errno(err, name);
	Py_RETURN_NONE;
}

static PyObject *Handle_force_state(HandleObject *h, PyObject *args)
{
	const char *name;
	resil_t *r;
	int state, err;

	if (!PyArg_ParseTuple(args, "si:force_state", &name, &state))
		return NULL;
	HANDLE_OPEN(h);
	r = handle_enter(h);
	Py_BEGIN_ALLOW_THREADS
	err = resil_force_state(r, name, state);
	Py_END_ALLOW_THREADS
	handle_leave(h);
	if (err < 0)
		return raise_errno(err, name);
	Py_RETURN_NONE;
}

static PyObject *Handle_reset(HandleObject *h, PyObject *args)
{
	const char *name;
	resil_t *r;
	int err;

	if (!PyArg_ParseTuple(args, "s:reset", &name))
		return NULL;
	HANDLE_OPEN(h);
	r = handle_enter(h);
	Py_BEGIN_ALLOW_THREADS
	err = resil_reset(r, name);
	Py_END_ALLOW_THREADS
	handle_leave(h);
	if (err < 0)
		return raise_errno(err, name);
	Py_RETURN_NONE;
}

static PyObject *Handle_now_ns(HandleObject *h, PyObject *unused)
{
	HANDLE_OPEN(h);
	return PyLong_FromLongLong(resil_now(h->r));
}

/* set_clock(ns): a manual clock standing at ns (monotonic nanoseconds);
 * set_clock(None): the real clock again. */
static PyObject *Handle_set_clock(HandleObject *h, PyObject *arg)
{
	long long ns;
	int err;

	HANDLE_OPEN(h);
	if (arg == Py_None) {
		err = resil_set_clock(h->r, NULL, NULL);
	} else {
		ns = PyLong_AsLongLong(arg);
		if (ns == -1 && PyErr_Occurred())
			return NULL;
		if (ns < 0) {
			PyErr_SetString(PyExc_ValueError, "a clock reading is >= 0 ns");
			return NULL;
		}
		if (handle_manual(h) < 0)
			return NULL;
		__atomic_store_n(&h->manual->now_ns, (int64_t)ns, __ATOMIC_RELAXED);
		err = resil_set_clock(h->r, manual_clock, h->manual);
	}
	if (err < 0)
		return raise_errno(err, "set_clock");
	Py_RETURN_NONE;
}

/* set_clock_file(path, ns=None): the manual clock in the file at path,
 * shared by every process that maps it; ns: set it there first, else it
 * keeps the file's reading (0 in a new file). A test facility. */
static PyObject *Handle_set_clock_file(HandleObject *h, PyObject *args)
{
	PyObject *path = NULL, *nso = Py_None;
	long long ns = 0;
	int err;

	if (!PyArg_ParseTuple(args, "O&|O:set_clock_file", PyUnicode_FSConverter, &path, &nso))
		return NULL;
	if (!HANDLE_LIVE(h)) {
		Py_DECREF(path);
		return raise_closed();
	}
	if (nso != Py_None) {
		ns = PyLong_AsLongLong(nso);
		if (ns < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "a clock reading is >= 0 ns");
			Py_DECREF(path);
			return NULL;
		}
	}
	err = handle_manual_file(h, path);
	Py_DECREF(path);
	if (err < 0)
		return NULL;
	if (nso != Py_None)
		__atomic_store_n(&h->manual->now_ns, (int64_t)ns, __ATOMIC_RELAXED);
	err = resil_set_clock(h->r, manual_clock, h->manual);
	if (err < 0)
		return raise_errno(err, "set_clock_file");
	Py_RETURN_NONE;
}

/* advance_ns(ns): move the manual clock forward (every process forked
 * after set_clock sees it, and every process mapping set_clock_file's). */
static PyObject *Handle_advance_ns(HandleObject *h, PyObject *arg)
{
	long long ns = PyLong_AsLongLong(arg);

	if (ns == -1 && PyErr_Occurred())
		return NULL;
	if (!h->manual) {
		PyErr_SetString(PyExc_RuntimeError, "no manual clock: call set_clock first");
		return NULL;
	}
	if (ns < 0) {
		PyErr_SetString(PyExc_ValueError, "time does not go backwards");
		return NULL;
	}
	return PyLong_FromLongLong(
	    __atomic_add_fetch(&h->manual->now_ns, (int64_t)ns, __ATOMIC_RELAXED));
}

static PyObject *Handle_manual_clock(HandleObject *h, void *unused)
{
	return PyBool_FromLong(h->manual != NULL && HANDLE_LIVE(h));
}

/* attached: decisions are made in resild's segments (False: pending,
 * embedded, or closed). */
static PyObject *Handle_attached(HandleObject *h, void *unused)
{
	return PyBool_FromLong(HANDLE_LIVE(h) && resil_attached(h->r) == 1);
}

/* set_random(u64): every draw returns it (exact jitter in tests);
 * set_random(None): the library's generator again. */
static PyObject *Handle_set_random(HandleObject *h, PyObject *arg)
{
	unsigned long long v;
	int err;

	HANDLE_OPEN(h);
	if (arg == Py_None) {
		err = resil_set_random(h->r, NULL, NULL);
	} else {
		v = PyLong_AsUnsignedLongLong(arg);
		if (v == (unsigned long long)-1 && PyErr_Occurred())
			return NULL;
		if (handle_manual(h) < 0)
			return NULL;
		__atomic_store_n(&h->manual->random, (uint64_t)v, __ATOMIC_RELAXED);
		err = resil_set_random(h->r, manual_random, h->manual);
	}
	if (err < 0)
		return raise_errno(err, "set_random");
	Py_RETURN_NONE;
}

static PyMethodDef Handle_methods[] = {
    {"close", (PyCFunction)Handle_close, METH_NOARGS, "Close the handle (idempotent)."},
    {"define", (PyCFunction)Handle_define, METH_VARARGS,
     "define(name, config): create or update a policy (\"key = value; ...\")."},
    {"delete", (PyCFunction)Handle_delete, METH_VARARGS, "delete(name): delete a policy."},
    {"force_state", (PyCFunction)Handle_force_state, METH_VARARGS,
     "force_state(name, state): force a breaker state (STATE_*)."},
    {"reset", (PyCFunction)Handle_reset, METH_VARARGS, "reset(name): reset a policy's state."},
    {"now_ns", (PyCFunction)Handle_now_ns, METH_NOARGS,
     "The time base of every decision, in monotonic nanoseconds."},
    {"set_clock", (PyCFunction)Handle_set_clock, METH_O,
     "set_clock(ns): a manual clock at ns; set_clock(None): the real clock."},
    {"set_clock_file", (PyCFunction)Handle_set_clock_file, METH_VARARGS,
     "set_clock_file(path, ns=None): a manual clock in a file every process maps "
     "(tests of fleets whose workers open their own handle)."},
    {"advance_ns", (PyCFunction)Handle_advance_ns, METH_O,
     "advance_ns(ns): move the manual clock forward; returns the new reading."},
    {"set_random", (PyCFunction)Handle_set_random, METH_O,
     "set_random(u64): a fixed random draw (exact jitter); None: the real one."},
    {NULL}};

static PyGetSetDef Handle_getset[] = {
    {"manual_clock", (getter)Handle_manual_clock, NULL, "True under a manual clock.", NULL},
    {"attached", (getter)Handle_attached, NULL,
     "True when decisions are made in resild's segments (False: pending, embedded, closed).", NULL},
    {NULL}};

static PyMemberDef Handle_members[] = {
    {"embedded", T_INT, offsetof(HandleObject, embedded), READONLY, "Opened without a daemon."},
    {NULL}};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Handle",
    .tp_basicsize = sizeof(HandleObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Handle(socket=None, *, embedded=False): one connection to resild, or an "
	      "embedded segment pair.",
    .tp_new = Handle_new,
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_methods = Handle_methods,
    .tp_getset = Handle_getset,
    .tp_members = Handle_members,
};

/* ---- Policy ---- */

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

static PyTypeObject PermitType;

/*
 * Permits come and go once per decision: a small free list (under the
 * GIL) saves the allocator's round trip on the hot path.
 */
#define PERMIT_FREE_MAX 32
static PermitObject *permit_free[PERMIT_FREE_MAX];
static int permit_nfree;

static PermitObject *permit_alloc(void)
{
	if (permit_nfree > 0)
		return (PermitObject *)PyObject_Init((PyObject *)permit_free[--permit_nfree],
						     &PermitType);
	return PyObject_New(PermitObject, &PermitType);
}

static PyObject *Policy_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	HandleObject *h;
	const char *name;
	PolicyObject *po;
	resil_policy_t *p;
	int err;

	if (PyTuple_GET_SIZE(args) < 2) {
		PyErr_SetString(PyExc_TypeError, "Policy(handle, name, ...)");
		return NULL;
	}
	h = (HandleObject *)PyTuple_GET_ITEM(args, 0);
	if (!PyObject_TypeCheck(h, &HandleType)) {
		PyErr_SetString(PyExc_TypeError, "Policy: the first argument is a resil handle");
		return NULL;
	}
	name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 1));
	if (!name)
		return NULL;
	HANDLE_OPEN(h);
	err = resil_policy(h->r, name, &p);
	if (err < 0) /* the library's words name the policy */
		return raise_errno(err, *resil_last_error() ? NULL : name);
	po = (PolicyObject *)type->tp_alloc(type, 0);
	if (!po)
		return NULL;
	Py_INCREF(h);
	po->h = h;
	po->p = p;
	po->classify = NULL;
	return (PyObject *)po;
}

static int Policy_traverse(PolicyObject *po, visitproc visit, void *arg)
{
	Py_VISIT(po->h);
	Py_VISIT(po->classify);
	Py_VISIT(po->dict);
	return 0;
}

static int Policy_clear(PolicyObject *po)
{
	Py_CLEAR(po->classify);
	Py_CLEAR(po->dict);
	Py_CLEAR(po->h);
	return 0;
}

static void Policy_dealloc(PolicyObject *po)
{
	PyObject_GC_UnTrack(po);
	Policy_clear(po);
	Py_TYPE(po)->tp_free((PyObject *)po);
}

/* A rejection as its exception: the class by verdict, with .policy (the
 * name), .verdict, and .retry_after: seconds until the policy expects to
 * admit again, as resil_permit_wait_ns reports it for every verdict that
 * knows it (a limiter's next permit, an open breaker's next probe), else
 * None (a full bulkhead frees at no known time); a RateLimited always
 * carries a float. */
static PyObject *raise_rejected(PolicyObject *po, int v, const resil_permit_t *permit)
{
	const char *name = resil_policy_name(po->p);
	PyObject *cls, *exc, *ra, *pname, *verdict;
	int64_t wait_ns;

	switch (v) {
	case RESIL_REJECT_OPEN:
		cls = CircuitOpen;
		break;
	case RESIL_REJECT_FULL:
		cls = BulkheadFull;
		break;
	case RESIL_REJECT_LIMITED:
		cls = RateLimited;
		break;
	case RESIL_REJECT_SHED:
		cls = Shed;
		break;
	case RESIL_REJECT_BUDGET:
		cls = BudgetExhausted;
		break;
	default:
		cls = Rejected;
	}
	wait_ns = resil_permit_wait_ns(permit);
	if (wait_ns > 0 || cls == RateLimited)
		ra = PyFloat_FromDouble(wait_ns > 0 ? (double)wait_ns / 1e9 : 0.0);
	else
		ra = Py_NewRef(Py_None);
	if (!ra)
		return NULL;
	exc = PyObject_CallFunction(cls, "s", resil_strverdict(v));
	pname = PyUnicode_FromString(name);
	verdict = PyLong_FromLong(v);
	if (exc && pname && verdict && PyObject_SetAttrString(exc, "policy", pname) == 0 &&
	    PyObject_SetAttrString(exc, "verdict", verdict) == 0 &&
	    PyObject_SetAttrString(exc, "retry_after", ra) == 0)
		PyErr_SetObject(cls, exc);
	Py_XDECREF(exc);
	Py_XDECREF(pname);
	Py_XDECREF(verdict);
	Py_DECREF(ra);
	return NULL;
}

/* acquire(key=None, *, critical=False) -> Permit, or raises. */
static PyObject *Policy_acquire(PolicyObject *po, PyObject *const *args, Py_ssize_t nargs,
				PyObject *kwnames)
{
	struct resil_req req = {.key = NULL};
	PyObject *key = nargs > 0 ? args[0] : NULL;
	PermitObject *pm;
	int v, wait;

	if (nargs > 1) {
		PyErr_SetString(PyExc_TypeError, "acquire(key=None, *, critical=False)");
		return NULL;
	}
	if (kwnames) {
		for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
			const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
			PyObject *val = args[nargs + i];

			if (!k)
				return NULL;
			if (strcmp(k, "key") == 0 && !key) {
				key = val;
			} else if (strcmp(k, "critical") == 0) {
				int c = PyObject_IsTrue(val);

				if (c < 0)
					return NULL;
				req.priority = c ? RESIL_PRIO_CRITICAL : RESIL_PRIO_NORMAL;
			} else {
				PyErr_Format(PyExc_TypeError, "acquire: unexpected argument '%s'",
					     k);
				return NULL;
			}
		}
	}
	if (key == Py_None)
		key = NULL;
	if (key) {
		if (PyUnicode_Check(key)) {
			Py_ssize_t n;

			req.key = PyUnicode_AsUTF8AndSize(key, &n);
			if (!req.key)
				return NULL;
			req.key_len = (size_t)n;
		} else if (PyBytes_Check(key)) {
			req.key = PyBytes_AS_STRING(key);
			req.key_len = (size_t)PyBytes_GET_SIZE(key);
		} else {
			PyErr_SetString(PyExc_TypeError, "acquire: a key is str or bytes");
			return NULL;
		}
	}
	HANDLE_OPEN(po->h);
	pm = permit_alloc();
	if (!pm)
		return NULL;
	pm->pol = NULL;
	pm->held = 0;
	pm->entered = 0;
	pm->outcome = -1;
	wait = resil_policy_may_wait(po->p);
	if (wait > 0) {
		/* the key's bytes stay valid: `key` is referenced by the caller */
		handle_enter(po->h);
		Py_BEGIN_ALLOW_THREADS
		v = resil_acquire_ex(po->p, &req, &pm->permit);
		Py_END_ALLOW_THREADS
		if (po->h->closed) {
			/* closed while this call waited: what it got goes back
			 * before the handle can be freed */
			if (v == RESIL_ADMIT)
				resil_release(po->p, &pm->permit, RESIL_IGNORED);
			handle_leave(po->h);
			Py_DECREF(pm);
			return raise_closed();
		}
		handle_leave(po->h);
	} else {
		v = resil_acquire_ex(po->p, key || req.priority ? &req : NULL, &pm->permit);
	}
	if (v != RESIL_ADMIT) {
		if (v > 0)
			raise_rejected(po, v, &pm->permit);
		else if (v == -EINVAL)
			/* the hot path says no words: the call's mistake is
			 * its key, which this call knows */
			raise_words(EINVAL,
				    PyUnicode_FromFormat(
					key ? "%s: a key, but the policy has no keyed limiter "
					      "(limit.keys)"
					    : "%s: no key, but the policy's limiter is keyed (give "
					      "a key, or set limit.default_key)",
					resil_policy_name(po->p)));
		else
			raise_errno(v, resil_policy_name(po->p));
		Py_DECREF(pm);
		return NULL;
	}
	Py_INCREF(po);
	pm->pol = po;
	pm->held = 1;
	return (PyObject *)pm;
}

static PyObject *Policy_state(PolicyObject *po, PyObject *unused)
{
	int s;

	HANDLE_OPEN(po->h);
	s = resil_policy_state(po->p);
	if (s < 0)
		return raise_errno(s, resil_policy_name(po->p));
	return PyLong_FromLong(s);
}

/* pending_stats() -> (admitted, rejected): the calls this process decided
 * on the policy by its fallback while it was pending. */
static PyObject *Policy_pending_stats(PolicyObject *po, PyObject *unused)
{
	struct resil_pending_stats st;
	int err;

	HANDLE_OPEN(po->h);
	err = resil_policy_pending_stats(po->p, &st);
	if (err < 0)
		return raise_errno(err, resil_policy_name(po->p));
	return Py_BuildValue("(KK)", (unsigned long long)st.admitted,
			     (unsigned long long)st.rejected);
}

static PyObject *Policy_may_wait(PolicyObject *po, PyObject *unused)
{
	int w;

	HANDLE_OPEN(po->h);
	w = resil_policy_may_wait(po->p);
	if (w < 0)
		return raise_errno(w, resil_policy_name(po->p));
	return PyBool_FromLong(w);
}

static PyObject *Policy_outcome_http(PolicyObject *po, PyObject *arg)
{
	long status = PyLong_AsLong(arg);

	if (status == -1 && PyErr_Occurred())
		return NULL;
	HANDLE_OPEN(po->h);
	return PyLong_FromLong(resil_outcome_http(po->p, (int)status));
}

static PyObject *Policy_outcome_errno(PolicyObject *po, PyObject *arg)
{
	long err = PyLong_AsLong(arg);

	if (err == -1 && PyErr_Occurred())
		return NULL;
	HANDLE_OPEN(po->h);
	return PyLong_FromLong(resil_outcome_errno(po->p, (int)err));
}

static PyObject *Policy_name(PolicyObject *po, void *unused)
{
	return PyUnicode_FromString(resil_policy_name(po->p));
}

static PyObject *Policy_handle(PolicyObject *po, void *unused)
{
	return Py_NewRef((PyObject *)po->h);
}

/* ---- Retry ---- */

typedef struct {
	PyObject_HEAD
	PolicyObject *pol;
	resil_retry_t rt;
} RetryObject;

static PyTypeObject RetryType;

/* retry_state(deadline_ns=0) -> Retry: begin a retry loop (deadline
 * absolute on the policy's clock, 0: none). */
static PyObject *Policy_retry_state(PolicyObject *po, PyObject *args)
{
	long long deadline = 0;
	RetryObject *ro;

	if (!PyArg_ParseTuple(args, "|L:retry_state", &deadline))
		return NULL;
	HANDLE_OPEN(po->h);
	ro = PyObject_New(RetryObject, &RetryType);
	if (!ro)
		return NULL;
	Py_INCREF(po);
	ro->pol = po;
	resil_retry_begin(po->p, &ro->rt, deadline);
	return (PyObject *)ro;
}

static void Retry_dealloc(RetryObject *ro)
{
	Py_XDECREF(ro->pol);
	PyObject_Free(ro);
}

/* next(error_class, retry_after_ns=0) -> delay in ns (>= 0) or -1 to stop */
static PyObject *Retry_next(RetryObject *ro, PyObject *args)
{
	int cls;
	long long ra = 0;
	int64_t d;

	if (!PyArg_ParseTuple(args, "i|L:next", &cls, &ra))
		return NULL;
	HANDLE_OPEN(ro->pol->h);
	d = resil_retry_next(&ro->rt, cls, ra);
	return PyLong_FromLongLong(d < 0 ? -1 : d);
}

static PyObject *Retry_reason(RetryObject *ro, void *unused)
{
	return PyUnicode_FromString(resil_retry_reason(&ro->rt));
}

static PyMethodDef Retry_methods[] = {
    {"next", (PyCFunction)Retry_next, METH_VARARGS,
     "next(error_class, retry_after_ns=0): report an attempt (ERR_NONE for a success); "
     "the delay in ns before the next one, or -1 to stop."},
    {NULL}};

static PyGetSetDef Retry_getset[] = {
    {"reason", (getter)Retry_reason, NULL, "Why the loop stopped, in words.", NULL}, {NULL}};

static PyTypeObject RetryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Retry",
    .tp_basicsize = sizeof(RetryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A retry loop's state (Policy.retry_state()).",
    .tp_dealloc = (destructor)Retry_dealloc,
    .tp_methods = Retry_methods,
    .tp_getset = Retry_getset,
};

static PyMethodDef Policy_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Policy_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(key=None, *, critical=False) -> Permit: admit one call or raise a "
     "resil.Rejected subclass. Use it in a with block, or call permit.release()."},
    {"state", (PyCFunction)Policy_state, METH_NOARGS, "The breaker's state (STATE_*)."},
    {"pending_stats", (PyCFunction)Policy_pending_stats, METH_NOARGS,
     "(admitted, rejected): calls decided by the policy's fallback while pending."},
    {"may_wait", (PyCFunction)Policy_may_wait, METH_NOARGS,
     "True if an acquire may sleep (bulkhead.wait, limit.wait)."},
    {"outcome_http", (PyCFunction)Policy_outcome_http, METH_O,
     "outcome_http(status): the outcome an HTTP status maps to (breaker.record)."},
    {"outcome_errno", (PyCFunction)Policy_outcome_errno, METH_O,
     "outcome_errno(err): the outcome an errno maps to."},
    {"retry_state", (PyCFunction)Policy_retry_state, METH_VARARGS,
     "retry_state(deadline_ns=0) -> Retry: the policy's retry decisions for one call."},
    {NULL}};

static PyGetSetDef Policy_getset[] = {
    {"name", (getter)Policy_name, NULL, "The policy's name.", NULL},
    {"handle", (getter)Policy_handle, NULL, "The handle it belongs to.", NULL},
    {NULL}};

static PyMemberDef Policy_members[] = {
    {"_classify", T_OBJECT, offsetof(PolicyObject, classify), 0,
     "classify(exc_type, exc) -> outcome for an exception leaving a with block."},
    {NULL}};

static PyTypeObject PolicyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Policy",
    .tp_basicsize = sizeof(PolicyObject),
    .tp_dictoffset = offsetof(PolicyObject, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Policy(handle, name): one named policy.",
    .tp_new = Policy_new,
    .tp_traverse = (traverseproc)Policy_traverse,
    .tp_clear = (inquiry)Policy_clear,
    .tp_dealloc = (destructor)Policy_dealloc,
    .tp_methods = Policy_methods,
    .tp_getset = Policy_getset,
    .tp_members = Policy_members,
};

/* ---- Permit ---- */

static void Permit_dealloc(PermitObject *pm)
{
	/* a permit dropped while held gives back what it holds, counting
	 * nothing: a forgotten release never leaks a bulkhead slot */
	if (pm->held && pm->pol && HANDLE_LIVE(pm->pol->h))
		resil_release(pm->pol->p, &pm->permit, RESIL_IGNORED);
	Py_CLEAR(pm->pol);
	if (permit_nfree < PERMIT_FREE_MAX)
		permit_free[permit_nfree++] = pm;
	else
		PyObject_Free(pm);
}

static PyObject *permit_used(void)
{
	return raise_words(EALREADY, PyUnicode_FromString("permit already used"));
}

/* an outcome from an int (RESIL_SUCCESS/FAILURE/IGNORED), a bool (True:
 * success) or a word */
static int outcome_of(PyObject *o)
{
	if (PyBool_Check(o))
		return o == Py_True ? RESIL_SUCCESS : RESIL_FAILURE;
	if (PyLong_Check(o)) {
		long v = PyLong_AsLong(o);

		if (v == RESIL_SUCCESS || v == RESIL_FAILURE || v == RESIL_IGNORED)
			return (int)v;
	} else if (PyUnicode_Check(o)) {
		const char *s = PyUnicode_AsUTF8(o);

		if (!s)
			return -1;
		if (strcmp(s, "success") == 0)
			return RESIL_SUCCESS;
		if (strcmp(s, "failure") == 0)
			return RESIL_FAILURE;
		if (strcmp(s, "ignored") == 0)
			return RESIL_IGNORED;
	}
	PyErr_SetString(PyExc_ValueError,
			"an outcome is SUCCESS, FAILURE, IGNORED (or 'success', 'failure', "
			"'ignored', or a bool)");
	return -1;
}

static PyObject *permit_release(PermitObject *pm, int outcome)
{
	if (!pm->held)
		return permit_used();
	pm->held = 0;
	HANDLE_OPEN(pm->pol->h);
	resil_release(pm->pol->p, &pm->permit, outcome);
	Py_RETURN_NONE;
}

static PyObject *Permit_enter(PermitObject *pm, PyObject *unused)
{
	if (!pm->held || pm->entered)
		return permit_used();
	pm->entered = 1;
	return Py_NewRef((PyObject *)pm);
}

static PyObject *Permit_exit(PermitObject *pm, PyObject *const *args, Py_ssize_t nargs)
{
	int outcome = pm->outcome;

	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "__exit__(exc_type, exc, tb)");
		return NULL;
	}
	if (outcome < 0) {
		if (args[0] == Py_None) {
			outcome = RESIL_SUCCESS;
		} else if (pm->pol->classify && pm->pol->classify != Py_None) {
			PyObject *o =
			    PyObject_CallFunctionObjArgs(pm->pol->classify, args[0], args[1], NULL);

			if (!o) {
				/* the classifier failed: still give the permit back */
				if (pm->held) {
					pm->held = 0;
					if (HANDLE_LIVE(pm->pol->h))
						resil_release(pm->pol->p, &pm->permit,
							      RESIL_FAILURE);
				}
				return NULL;
			}
			outcome = outcome_of(o);
			Py_DECREF(o);
			if (outcome < 0)
				outcome = RESIL_FAILURE, PyErr_Clear();
		} else {
			outcome = RESIL_FAILURE;
		}
	}
	if (!permit_release(pm, outcome))
		return NULL;
	Py_RETURN_FALSE;
}

/* release(outcome=SUCCESS) */
static PyObject *Permit_release(PermitObject *pm, PyObject *const *args, Py_ssize_t nargs)
{
	int outcome = pm->outcome >= 0 ? pm->outcome : RESIL_SUCCESS;

	if (nargs > 1) {
		PyErr_SetString(PyExc_TypeError, "release(outcome=SUCCESS)");
		return NULL;
	}
	if (nargs == 1 && (outcome = outcome_of(args[0])) < 0)
		return NULL;
	return permit_release(pm, outcome);
}

/* outcome(o): what the with block reports, whatever the way it ends */
static PyObject *Permit_outcome(PermitObject *pm, PyObject *arg)
{
	int o = outcome_of(arg);

	if (o < 0)
		return NULL;
	if (!pm->held)
		return permit_used();
	pm->outcome = o;
	Py_RETURN_NONE;
}

/* outcome_http(status): the outcome by the policy's mapping of statuses */
static PyObject *Permit_outcome_http(PermitObject *pm, PyObject *arg)
{
	long status = PyLong_AsLong(arg);

	if (status == -1 && PyErr_Occurred())
		return NULL;
	if (!pm->held)
		return permit_used();
	HANDLE_OPEN(pm->pol->h);
	pm->outcome = resil_outcome_http(pm->pol->p, (int)status);
	Py_RETURN_NONE;
}

static PyObject *Permit_held(PermitObject *pm, void *unused)
{
	return PyBool_FromLong(pm->held);
}

static PyObject *Permit_policy(PermitObject *pm, void *unused)
{
	return Py_NewRef(pm->pol ? (PyObject *)pm->pol : Py_None);
}

static PyMethodDef Permit_methods[] = {
    {"__enter__", (PyCFunction)Permit_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Permit_exit, METH_FASTCALL, NULL},
    {"release", (PyCFunction)(void (*)(void))Permit_release, METH_FASTCALL,
     "release(outcome=SUCCESS): report the outcome and give the permit back (once)."},
    {"outcome", (PyCFunction)Permit_outcome, METH_O,
     "outcome(o): the outcome to report, whatever way the with block ends."},
    {"outcome_http", (PyCFunction)Permit_outcome_http, METH_O,
     "outcome_http(status): the outcome an HTTP status maps to under the policy."},
    {NULL}};

static PyGetSetDef Permit_getset[] = {
    {"held", (getter)Permit_held, NULL, "True until released.", NULL},
    {"policy", (getter)Permit_policy, NULL, "The policy that granted it.", NULL},
    {NULL}};

static PyTypeObject PermitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Permit",
    .tp_basicsize = sizeof(PermitObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One admitted call: a context manager reporting its outcome on exit.",
    .tp_dealloc = (destructor)Permit_dealloc,
    .tp_methods = Permit_methods,
    .tp_getset = Permit_getset,
};

/* ---- module ---- */

/* The empty builtin the benchmark sets against a decision. */
static PyObject *mod_noop(PyObject *m, PyObject *unused)
{
	Py_RETURN_NONE;
}

/* bench_c(policy, n, keys=None) -> ns per acquire+release made in C (same
 * process, same policy; keyed: the keys of the list, in turn): the floor
 * a Python call adds to. */
static PyObject *mod_bench_c(PyObject *m, PyObject *args)
{
	PolicyObject *po;
	PyObject *keys = NULL;
	long long n;
	Py_ssize_t nkeys = 0;
	resil_permit_t permit;
	struct timespec a, b;

	if (!PyArg_ParseTuple(args, "O!L|O!", &PolicyType, &po, &n, &PyList_Type, &keys))
		return NULL;
	HANDLE_OPEN(po->h);
	if (keys) {
		nkeys = PyList_GET_SIZE(keys);
		for (Py_ssize_t i = 0; i < nkeys; i++) {
			if (!PyUnicode_Check(PyList_GET_ITEM(keys, i)) ||
			    !PyUnicode_AsUTF8(PyList_GET_ITEM(keys, i)))
				return PyErr_Format(PyExc_TypeError, "bench_c: keys are str");
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long long i = 0; i < n; i++) {
		int v;

		if (nkeys) {
			Py_ssize_t len;
			const char *k =
			    PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(keys, i % nkeys), &len);

			v = resil_acquire_key(po->p, k, (size_t)len, &permit);
		} else {
			v = resil_acquire(po->p, &permit);
		}
		if (v == RESIL_ADMIT)
			resil_release(po->p, &permit, RESIL_SUCCESS);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	return PyFloat_FromDouble(((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) /
				  (double)(n > 0 ? n : 1));
}

static PyObject *mod_strverdict(PyObject *m, PyObject *arg)
{
	long v = PyLong_AsLong(arg);

	if (v == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(resil_strverdict((int)v));
}

static PyObject *mod_strstate(PyObject *m, PyObject *arg)
{
	long v = PyLong_AsLong(arg);

	if (v == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(resil_strstate((int)v));
}

static PyMethodDef module_methods[] = {
    {"noop", (PyCFunction)mod_noop, METH_NOARGS, "An empty builtin (benchmark floor)."},
    {"bench_c", (PyCFunction)mod_bench_c, METH_VARARGS,
     "bench_c(policy, n, keys=None): ns per acquire+release decided in C."},
    {"strverdict", (PyCFunction)mod_strverdict, METH_O, "Words for a verdict."},
    {"strstate", (PyCFunction)mod_strstate, METH_O, "Words for a breaker state."},
    {NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_resil", "libresil's C API for Python (see the resil package).", -1,
    module_methods,
};

static int add_exc(PyObject *m, PyObject **slot, const char *name, PyObject *base, const char *doc)
{
	char full[64];

	snprintf(full, sizeof(full), "resil.%s", name);
	*slot = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
	if (!*slot)
		return -1;
	Py_INCREF(*slot);
	return PyModule_AddObject(m, name, *slot);
}

PyMODINIT_FUNC PyInit__resil(void)
{
	PyObject *m;

	if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&PolicyType) < 0 ||
	    PyType_Ready(&PermitType) < 0 || PyType_Ready(&RetryType) < 0)
		return NULL;
	m = PyModule_Create(&moduledef);
	if (!m)
		return NULL;
	if (add_exc(m, &Error, "Error", PyExc_OSError,
		    "A resil call failed: .errno and the daemon's or the library's words.") < 0 ||
	    add_exc(m, &Rejected, "Rejected", NULL,
		    "The policy refused the call (.policy, .verdict, .retry_after).") < 0 ||
	    add_exc(m, &CircuitOpen, "CircuitOpen", Rejected, "The circuit breaker is open.") < 0 ||
	    add_exc(m, &RateLimited, "RateLimited", Rejected,
		    "Rate limited: .retry_after is the wait in seconds (float).") < 0 ||
	    add_exc(m, &BulkheadFull, "BulkheadFull", Rejected,
		    "The bulkhead (or adaptive limit) is full.") < 0 ||
	    add_exc(m, &Shed, "Shed", Rejected, "Load shedding refused the call.") < 0 ||
	    add_exc(m, &BudgetExhausted, "BudgetExhausted", Rejected,
		    "The retry budget is exhausted.") < 0)
		goto fail;
	Py_INCREF(&HandleType);
	Py_INCREF(&PolicyType);
	Py_INCREF(&PermitType);
	Py_INCREF(&RetryType);
	if (PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0 ||
	    PyModule_AddObject(m, "Policy", (PyObject *)&PolicyType) < 0 ||
	    PyModule_AddObject(m, "Permit", (PyObject *)&PermitType) < 0 ||
	    PyModule_AddObject(m, "Retry", (PyObject *)&RetryType) < 0)
		goto fail;
	if (PyModule_AddStringConstant(m, "__version__", RESIL_VERSION_STRING) < 0)
		goto fail;
#define C(n) PyModule_AddIntConstant(m, #n, RESIL_##n)
	if (C(ADMIT) || C(REJECT_OPEN) || C(REJECT_FULL) || C(REJECT_LIMITED) || C(REJECT_SHED) ||
	    C(REJECT_BUDGET) || C(SUCCESS) || C(FAILURE) || C(IGNORED) || C(ERR_NONE) ||
	    C(ERR_TRANSIENT) || C(ERR_THROTTLED) || C(ERR_TIMEOUT) || C(ERR_PERMANENT) ||
	    C(ERR_USER) || C(STATE_CLOSED) || C(STATE_OPEN) || C(STATE_HALF_OPEN) ||
	    C(STATE_DISABLED) || C(STATE_FORCED_OPEN) || C(STATE_METRICS_ONLY))
		goto fail;
#undef C
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}

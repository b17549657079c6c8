/* SPDX-License-Identifier: MIT */
/*
 * handle.c - resil.Handle: one resil_t (resil.open / resil.open_embedded),
 * its policies' definitions (define, delete, force_state, reset), and the
 * manual clock and random draw of tests.
 *
 * The GIL is given up around the calls that may block: the open (a
 * connect and a handshake, bounded), the round trips to resild (define,
 * delete, force_state, reset) and the close. A round trip, like a wait in
 * acquire, counts itself in h->busy meanwhile, so that close() from
 * another thread never frees the resil_t under it.
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
 */
#include "_resil.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The manual page: anonymous (set_clock) or a file's (set_clock_file).
 * Its layout is shared by every process mapping the file: an int64
 * reading in ns, then the fixed random draw, native byte order. */
struct manual {
	int64_t now_ns;
	uint64_t random;
	int random_fixed;
};

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

/*
 * A call that gives the GIL up while it uses h->r (a wait for a permit, a
 * round trip to resild) is counted in h->busy from before it lets go to
 * after it has it back, so that close() from another thread meanwhile
 * does not free r under it: close() marks the handle closed, and the last
 * such call to come back frees r. Both run under the GIL.
 */
resil_t *handle_enter(HandleObject *h)
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

void handle_leave(HandleObject *h)
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

PyTypeObject HandleType = {
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

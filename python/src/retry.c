/* SPDX-License-Identifier: MIT */
/*
 * retry.c - resil.Retry: one resil_retry_t, the policy's retry decisions
 * for one call, step by step (Policy.retry_state() begins one). A Retry
 * holds a reference to its Policy; it never gives the GIL up.
 */
#include "_resil.h"

typedef struct {
	PyObject_HEAD
	PolicyObject *pol;
	resil_retry_t rt;
} RetryObject;

/* retry_state(deadline_ns=0) -> Retry: begin a retry loop (deadline
 * absolute on the policy's clock, 0: none). */
PyObject *Policy_retry_state(PolicyObject *po, PyObject *args)
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

PyTypeObject RetryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Retry",
    .tp_basicsize = sizeof(RetryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A retry loop's state (Policy.retry_state()).",
    .tp_dealloc = (destructor)Retry_dealloc,
    .tp_methods = Retry_methods,
    .tp_getset = Retry_getset,
};

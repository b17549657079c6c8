/* SPDX-License-Identifier: MIT */
/*
 * _resil.c - the CPython extension module under the `resil` package: a thin
 * layer of C types over libresil (resil.h), so that a decision from Python
 * costs one C call and not a foreign-function trip.
 *
 * This file is the module: its exceptions (resil.Error and the Rejected
 * family) and the raise_* helpers every type raises them with, its
 * functions (the benchmark's floor, verdicts and states in words) and
 * PyInit__resil, which readies the types of handle.c, policy.c, permit.c
 * and retry.c (_resil.h lists what they share).
 */
#include "_resil.h"

#include <errno.h>
#include <string.h>
#include <time.h>

PyObject *Error, *Rejected, *CircuitOpen, *RateLimited, *BulkheadFull, *Shed, *BudgetExhausted;

/* ---- errors ---- */

/* resil.Error(err, msg), taking msg's reference. Returns NULL. */
PyObject *raise_words(int err, PyObject *msg)
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
PyObject *raise_errno(int err, const char *what)
{
	const char *words = resil_last_error();

	if (err < 0)
		err = -err;
	if (!words || !*words)
		words = strerror(err);
	return raise_words(err, what ? PyUnicode_FromFormat("%s: %s", what, words)
				     : PyUnicode_FromString(words));
}

PyObject *raise_closed(void)
{
	return raise_words(EBADF, PyUnicode_FromString("resil handle is closed"));
}

/* A rejection as its exception: the class by verdict, with .policy (the
 * name), .verdict, and .retry_after: seconds until the policy expects to
 * admit again, as resil_permit_wait_ns reports it for every verdict that
 * knows it (a limiter's next permit, an open breaker's next probe), else
 * None (a full bulkhead frees at no known time); a RateLimited always
 * carries a float. */
PyObject *raise_rejected(PolicyObject *po, int v, const resil_permit_t *permit)
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

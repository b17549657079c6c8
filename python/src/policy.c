/* SPDX-License-Identifier: MIT */
/*
 * policy.c - resil.Policy: one resil_policy_t of a Handle; acquire()
 * returns a Permit (permit.c) or raises a rejection (a resil.Rejected
 * subclass) or a resil.Error.
 *
 * The GIL. Decisions that cannot block (the hot path: a few atomics) keep
 * it: giving it up and taking it back costs more than the decision. An
 * acquire that may sleep (bulkhead.wait, limit.wait: resil_policy_may_wait
 * says so, before each acquire since a configuration changes live) gives
 * it up around the call, so other threads run while this one waits.
 */
#include "_resil.h"

#include <errno.h>
#include <string.h>

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

PyTypeObject PolicyType = {
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

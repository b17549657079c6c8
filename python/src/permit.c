/* SPDX-License-Identifier: MIT */
/*
 * permit.c - resil.Permit: one resil_permit_t held between acquire and
 * release; a context manager whose __exit__ reports the outcome (by the
 * policy's classify for an exception), and the free list acquire takes
 * its permits from. A Permit holds a reference to its Policy. A Permit
 * dropped while held is released as IGNORED: a forgotten permit never
 * leaks a bulkhead slot.
 */
#include "_resil.h"

#include <errno.h>
#include <string.h>

PermitObject *permit_free[PERMIT_FREE_MAX];
int permit_nfree;

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

PyTypeObject PermitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "resil._resil.Permit",
    .tp_basicsize = sizeof(PermitObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One admitted call: a context manager reporting its outcome on exit.",
    .tp_dealloc = (destructor)Permit_dealloc,
    .tp_methods = Permit_methods,
    .tp_getset = Permit_getset,
};

/* SPDX-License-Identifier: MIT */
/*
 * permit.c - Resil\Policy::acquire and Resil\Permit: the decision from
 * PHP. One C call into libresil per decision, one small object per
 * admitted call; nothing else is allocated, nothing is looked up by name.
 *
 * The outcome of a permit nobody reported. A Permit released by neither
 * success() nor failure() reports, when PHP destroys it:
 *   - a failure if an exception is unwinding the frame that held it
 *     (EG(exception) is set while a throwing function's variables are
 *     destroyed), or if the script died: an uncaught exception (reported
 *     as a fatal error before the globals are destroyed) or a fatal error
 *     (PHP then skips destructors: free_obj releases what is still held);
 *   - a success otherwise (the scope that held it ended normally).
 * So a permit is never leaked: a bulkhead slot comes back with the
 * request that took it, whatever way the request ends, and a worker
 * killed while holding one is resild's to reclaim (its client row).
 *
 * The objects are recycled. A decision makes one Permit and the previous
 * one dies (`$permit = $policy->acquire()` in a loop, a request's next
 * call): allocating, registering, destroying and freeing it cost more
 * than the decision. So the extension keeps a reference to a permit once
 * it has nothing left to do: when success(), failure(), ignore() or
 * release() reports it (it sits in a small per-request pool while its
 * holder still has it, and the holder letting it go is then one
 * decrement: no destructor, no free), or when it dies unreported (its
 * dtor_obj reports it and takes a reference back: PHP frees an object
 * only if nothing referenced it again during its destructor). acquire()
 * hands out again a pooled permit whose only reference is the pool's, as
 * a new object (its destructor armed again); one still held elsewhere is
 * never handed out, so a released permit its holder keeps stays released
 * (its methods throw). Permits hold no properties and reference nothing,
 * so they cannot be part of a cycle (GC_NOT_COLLECTABLE: the engine
 * never considers them as garbage roots). Not pooled: a permit something
 * holds a WeakReference to (its holder must see it die: one weakly
 * referenced once pooled is let go instead of handed out), and any
 * permit once the request is shutting down; RSHUTDOWN lets the pool go
 * while the request's object store still exists, and nothing is pooled
 * after it (the engine frees what is left of the request later).
 */
#include <php.h>
#include <zend_exceptions.h>

#include "php_resil.h"

typedef struct {
	resil_policy_t *p; /* while held; NULL once released (or never admitted) */
	resil_permit_t permit;
	zend_object std;
} php_resil_permit;

static zend_object_handlers permit_handlers;

static inline php_resil_permit *permit_of(zend_object *o)
{
	return (php_resil_permit *)((char *)o - XtOffsetOf(php_resil_permit, std));
}

static zend_object *permit_create(zend_class_entry *ce)
{
	php_resil_permit *pm = zend_object_alloc(sizeof(*pm), ce);

	zend_object_std_init(&pm->std, ce);
	pm->std.handlers = &permit_handlers;
	GC_ADD_FLAGS(&pm->std, GC_NOT_COLLECTABLE);
	return &pm->std;
}

/* Permits of this request that acquire() may hand out again, each holding
 * one reference (ours): released ones maybe still held elsewhere, and dead
 * ones (destructor called). Reusable once ours is the only reference. */
#define PERMIT_POOL 8
ZEND_TLS zend_object *pool[PERMIT_POOL];
ZEND_TLS int npool;
/* between RINIT and RSHUTDOWN: a permit that dies later (the engine frees
 * what is left after the modules' RSHUTDOWN) must not outlive its
 * request's object store in the pool */
ZEND_TLS bool pool_open;

static zend_object *permit_new(void)
{
	/* oldest first: the permit reported last is usually still in its
	 * variable (`$permit = $p->acquire()` replaces it after this call),
	 * the one before it free */
	for (int i = 0; i < npool;) {
		zend_object *o = pool[i];

		if (GC_REFCOUNT(o) != 1) {
			i++;
			continue;
		}
		/* the top moves into i, to be looked at next */
		pool[i] = pool[--npool];
		if (UNEXPECTED(GC_FLAGS(o) & IS_OBJ_WEAKLY_REFERENCED)) {
			/* a WeakReference was made to it after it was pooled:
			 * let it die, its WeakReference sees it */
			OBJ_RELEASE(o);
			continue;
		}
		/* a new life: its destructor is armed again */
		GC_DEL_FLAGS(o, IS_OBJ_DESTRUCTOR_CALLED);
		return o;
	}
	return permit_create(resil_permit_ce);
}

/* Keep a permit with nothing left to do for a later acquire (see above):
 * one just reported by its holder, or a dying one from its dtor_obj
 * (where the engine holds it at refcount 1). */
static zend_always_inline void permit_keep(zend_object *o)
{
	if (pool_open && npool < PERMIT_POOL && !(EG(flags) & EG_FLAGS_IN_SHUTDOWN) &&
	    !(GC_FLAGS(o) & IS_OBJ_WEAKLY_REFERENCED)) {
		GC_ADDREF(o);
		pool[npool++] = o;
	}
}

void php_resil_permit_rinit(void)
{
	pool_open = true;
}

void php_resil_permit_rshutdown(void)
{
	pool_open = false;
	while (npool > 0)
		OBJ_RELEASE(pool[--npool]);
}

/* Is the permit being destroyed because the code that held it failed? */
static bool dying(void)
{
	if (EG(exception) || CG(unclean_shutdown))
		return true;
	/* an uncaught exception or a fatal error was reported in this
	 * request: the script is over, its globals are being destroyed */
	return (PG(last_error_type) & (E_ERROR | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR |
				       E_RECOVERABLE_ERROR | E_PARSE)) != 0;
}

static void permit_give_back(php_resil_permit *pm, int outcome)
{
	resil_policy_t *p = pm->p;

	pm->p = NULL;
	resil_release(p, &pm->permit, outcome);
}

static void permit_dtor(zend_object *o)
{
	php_resil_permit *pm = permit_of(o);

	if (pm->p)
		permit_give_back(pm, dying() ? RESIL_FAILURE : RESIL_SUCCESS);
	permit_keep(o);
}

static void permit_free(zend_object *o)
{
	php_resil_permit *pm = permit_of(o);

	/* destructors were skipped (a fatal error): the request died */
	if (pm->p)
		permit_give_back(pm, RESIL_FAILURE);
	zend_object_std_dtor(o);
}

/* A refused or failed decision: throw what it says; o goes back. */
static zend_never_inline void acquire_refused(resil_policy_t *p, zend_object *o, int v, bool keyed)
{
	if (v > 0)
		php_resil_throw_rejected(p, v, &permit_of(o)->permit, NULL);
	else if (v == -EINVAL)
		/* the decision says no words: the call's mistake is its key */
		zend_throw_exception_ex(
		    resil_exception_ce, EINVAL,
		    keyed ? "%s: a key, but the policy has no keyed limiter "
			    "(limit.keys; Policy::keyed() says which)"
			  : "%s: no key, but the policy's limiter is keyed (give a "
			    "key, or set limit.default_key)",
		    resil_policy_name(p));
	else
		php_resil_throw_errno(v, resil_policy_name(p));
	OBJ_RELEASE(o);
}

/* acquire($key): a key, or null as no argument */
static zend_never_inline void acquire_keyed(INTERNAL_FUNCTION_PARAMETERS)
{
	zend_string *key = NULL;
	resil_policy_t *p;
	zend_object *o;
	int v;

	ZEND_PARSE_PARAMETERS_START(0, 1)
	Z_PARAM_OPTIONAL
	Z_PARAM_STR_OR_NULL(key)
	ZEND_PARSE_PARAMETERS_END();
	p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	o = permit_new();
	if (key)
		v = resil_acquire_key(p, ZSTR_VAL(key), ZSTR_LEN(key), &permit_of(o)->permit);
	else
		v = resil_acquire(p, &permit_of(o)->permit);
	if (EXPECTED(v == RESIL_ADMIT)) {
		permit_of(o)->p = p;
		RETURN_OBJ(o);
	}
	acquire_refused(p, o, v, key != NULL);
	RETURN_THROWS();
}

ZEND_METHOD(Resil_Policy, acquire)
{
	resil_policy_t *p;
	zend_object *o;
	int v;

	if (ZEND_NUM_ARGS() > 0) {
		acquire_keyed(INTERNAL_FUNCTION_PARAM_PASSTHRU);
		return;
	}
	p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	o = permit_new();
	/* the decision is made into the object's own permit: no copy */
	v = resil_acquire(p, &permit_of(o)->permit);
	if (EXPECTED(v == RESIL_ADMIT)) {
		permit_of(o)->p = p;
		RETURN_OBJ(o);
	}
	acquire_refused(p, o, v, false);
	RETURN_THROWS();
}

ZEND_METHOD(Resil_Permit, __construct)
{
	ZEND_PARSE_PARAMETERS_NONE();
}

static void permit_report(zend_execute_data *execute_data, int outcome)
{
	php_resil_permit *pm = permit_of(Z_OBJ_P(ZEND_THIS));

	if (UNEXPECTED(!pm->p)) {
		zend_throw_error(NULL, "Resil\\Permit: already released");
		return;
	}
	permit_give_back(pm, outcome);
	permit_keep(&pm->std);
}

ZEND_METHOD(Resil_Permit, success)
{
	ZEND_PARSE_PARAMETERS_NONE();
	permit_report(execute_data, RESIL_SUCCESS);
}

ZEND_METHOD(Resil_Permit, failure)
{
	ZEND_PARSE_PARAMETERS_NONE();
	permit_report(execute_data, RESIL_FAILURE);
}

ZEND_METHOD(Resil_Permit, ignore)
{
	ZEND_PARSE_PARAMETERS_NONE();
	permit_report(execute_data, RESIL_IGNORED);
}

ZEND_METHOD(Resil_Permit, release)
{
	zend_long outcome;

	ZEND_PARSE_PARAMETERS_START(1, 1)
	Z_PARAM_LONG(outcome)
	ZEND_PARSE_PARAMETERS_END();
	if (outcome != RESIL_SUCCESS && outcome != RESIL_FAILURE && outcome != RESIL_IGNORED) {
		zend_argument_value_error(1, "must be Resil\\Permit::SUCCESS, "
					     "Resil\\Permit::FAILURE or Resil\\Permit::IGNORED");
		RETURN_THROWS();
	}
	permit_report(execute_data, (int)outcome);
}

ZEND_METHOD(Resil_Permit, releaseHttp)
{
	php_resil_permit *pm = permit_of(Z_OBJ_P(ZEND_THIS));
	zend_long status;

	ZEND_PARSE_PARAMETERS_START(1, 1)
	Z_PARAM_LONG(status)
	ZEND_PARSE_PARAMETERS_END();
	if (status < 100 || status > 999) {
		zend_argument_value_error(1, "must be an HTTP status (100 to 999)");
		RETURN_THROWS();
	}
	if (!pm->p) {
		zend_throw_error(NULL, "Resil\\Permit: already released");
		RETURN_THROWS();
	}
	permit_give_back(pm, resil_outcome_http(pm->p, (int)status));
	permit_keep(&pm->std);
}

void php_resil_permit_minit(void)
{
	resil_permit_ce->create_object = permit_create;
	memcpy(&permit_handlers, zend_get_std_object_handlers(), sizeof(permit_handlers));
	permit_handlers.offset = XtOffsetOf(php_resil_permit, std);
	permit_handlers.dtor_obj = permit_dtor;
	permit_handlers.free_obj = permit_free;
	permit_handlers.clone_obj = NULL;
}

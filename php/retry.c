/* SPDX-License-Identifier: MIT */
/*
 * retry.c - Resil\Policy::call, Resil\Policy::retry and Resil\Retry: the
 * policy's retry.* rules and retry budget from PHP, decided by libresil's
 * resil_retry_begin/_next (the state in the object, as on a C caller's
 * stack).
 *
 * call($fn, ...$args) runs each attempt under a permit of the policy and
 * classifies how it ended:
 *   - a return: the permit's success, and the loop's (which refunds the
 *     retry budget);
 *   - an \Error (TypeError, a programming mistake) or a Resil\Rejected
 *     (another policy refused): the dependency never judged the call, so
 *     the permit is released as ignored and nothing is retried;
 *   - any other exception: a failure; retried as a transient error, or as
 *     throttled with the dependency's Retry-After when its class declares
 *     a public property $retryAfter holding seconds.
 * The delays are the ones resil_retry_next gives; the last exception is
 * rethrown when the rules stop, or a Resil\BudgetExhausted (with it as
 * previous) when the retry budget refused. A rejection of a later attempt
 * is thrown with the last failure as previous.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <php.h>
#include <zend_exceptions.h>
#include <zend_interfaces.h>

#include "php_resil.h"

typedef struct {
	resil_policy_t *p;
	resil_retry_t rt;
	zend_object std;
} php_resil_retry;

static zend_object_handlers retry_handlers;

static inline php_resil_retry *retry_of(zend_object *o)
{
	return (php_resil_retry *)((char *)o - XtOffsetOf(php_resil_retry, std));
}

static zend_object *retry_create(zend_class_entry *ce)
{
	php_resil_retry *ro = zend_object_alloc(sizeof(*ro), ce);

	zend_object_std_init(&ro->std, ce);
	ro->std.handlers = &retry_handlers;
	return &ro->std;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};

	while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The seconds a failed attempt's exception asks to wait: its class's
 * public property $retryAfter (int or float), read without running any
 * PHP code; 0 when it has none. */
static int64_t retry_after_of(zend_object *ex)
{
	zend_string *n = zend_string_init("retryAfter", sizeof("retryAfter") - 1, 0);
	zend_property_info *info = zend_get_property_info(ex->ce, n, 1);
	double s = 0;
	zval *v;

	zend_string_release(n);
	if (!info || info == ZEND_WRONG_PROPERTY_INFO || (info->flags & ZEND_ACC_STATIC) ||
	    !(info->flags & ZEND_ACC_PUBLIC))
		return 0;
	v = OBJ_PROP(ex, info->offset);
	ZVAL_DEREF(v);
	if (Z_TYPE_P(v) == IS_LONG)
		s = (double)Z_LVAL_P(v);
	else if (Z_TYPE_P(v) == IS_DOUBLE)
		s = Z_DVAL_P(v);
	if (!(s > 0))
		return 0;
	return s > 86400.0 ? 86400LL * 1000000000 : (int64_t)(s * 1e9);
}

ZEND_METHOD(Resil_Policy, call)
{
	zend_fcall_info fci;
	zend_fcall_info_cache fcc;
	resil_policy_t *p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	zend_object *last = NULL; /* the last attempt's exception, ours */
	resil_permit_t permit;
	resil_retry_t rt;

	ZEND_PARSE_PARAMETERS_START(1, -1)
	Z_PARAM_FUNC(fci, fcc)
	Z_PARAM_VARIADIC_WITH_NAMED(fci.params, fci.param_count, fci.named_params)
	ZEND_PARSE_PARAMETERS_END();

	resil_retry_begin(p, &rt, 0);
	for (;;) {
		zend_object *ex;
		int64_t ra = 0, d;
		int v, cls = RESIL_ERR_TRANSIENT, outcome = RESIL_FAILURE;
		zval rv;

		v = resil_acquire(p, &permit);
		if (v != RESIL_ADMIT) {
			if (v > 0)
				php_resil_throw_rejected(p, v, &permit, last);
			else
				php_resil_throw_errno(v, resil_policy_name(p));
			RETURN_THROWS();
		}
		fci.retval = &rv;
		if (zend_call_function(&fci, &fcc) == SUCCESS && !EG(exception)) {
			resil_release(p, &permit, RESIL_SUCCESS);
			resil_retry_next(&rt, RESIL_ERR_NONE, 0);
			if (last)
				OBJ_RELEASE(last);
			RETURN_COPY_VALUE(&rv);
		}
		if (Z_TYPE(rv) != IS_UNDEF)
			zval_ptr_dtor(&rv);
		ex = EG(exception);
		if (!ex || instanceof_function(ex->ce, zend_ce_error) ||
		    instanceof_function(ex->ce, resil_rejected_ce)) {
			/* not the dependency's answer: nothing to count or retry */
			resil_release(p, &permit, RESIL_IGNORED);
			if (last)
				OBJ_RELEASE(last);
			RETURN_THROWS();
		}
		ra = retry_after_of(ex);
		if (ra > 0)
			cls = RESIL_ERR_THROTTLED;
		resil_release(p, &permit, outcome);
		/* keep the exception across the next attempt, as our own */
		GC_ADDREF(ex);
		zend_clear_exception();
		if (last)
			OBJ_RELEASE(last);
		last = ex;
		d = resil_retry_next(&rt, cls, ra);
		if (d < 0) {
			if (strcmp(resil_retry_reason(&rt), "retry budget exhausted") == 0) {
				resil_permit_t none = {{0}};

				/* the previous takes our reference */
				php_resil_throw_rejected(p, RESIL_REJECT_BUDGET, &none, last);
			} else {
				zval zv;

				/* rethrown: the engine takes our reference */
				ZVAL_OBJ(&zv, last);
				zend_throw_exception_object(&zv);
			}
			RETURN_THROWS();
		}
		sleep_ns(d);
	}
}

ZEND_METHOD(Resil_Policy, retry)
{
	resil_policy_t *p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	double timeout = 0;
	bool no_timeout = true;
	int64_t deadline = 0;
	zend_object *o;

	ZEND_PARSE_PARAMETERS_START(0, 1)
	Z_PARAM_OPTIONAL
	Z_PARAM_DOUBLE_OR_NULL(timeout, no_timeout)
	ZEND_PARSE_PARAMETERS_END();
	if (!no_timeout) {
		resil_t *r;

		if (!(timeout > 0) || timeout > 1e9) {
			zend_argument_value_error(1, "must be greater than 0 (seconds)");
			RETURN_THROWS();
		}
		r = php_resil_handle();
		if (!r)
			RETURN_THROWS();
		deadline = resil_now(r) + (int64_t)(timeout * 1e9);
	}
	o = retry_create(resil_retry_ce);
	retry_of(o)->p = p;
	resil_retry_begin(p, &retry_of(o)->rt, deadline);
	RETURN_OBJ(o);
}

ZEND_METHOD(Resil_Retry, __construct)
{
	ZEND_PARSE_PARAMETERS_NONE();
}

ZEND_METHOD(Resil_Retry, next)
{
	php_resil_retry *ro = retry_of(Z_OBJ_P(ZEND_THIS));
	zend_long cls = RESIL_ERR_TRANSIENT;
	double ra = 0;
	bool no_ra = true;
	int64_t d;

	ZEND_PARSE_PARAMETERS_START(0, 2)
	Z_PARAM_OPTIONAL
	Z_PARAM_LONG(cls)
	Z_PARAM_DOUBLE_OR_NULL(ra, no_ra)
	ZEND_PARSE_PARAMETERS_END();
	if (!(cls >= RESIL_ERR_TRANSIENT && cls <= RESIL_ERR_PERMANENT) &&
	    !(cls >= RESIL_ERR_USER && cls <= INT32_MAX)) {
		zend_argument_value_error(1, "must be a Resil\\Retry class constant or a user "
					     "class from 100 up");
		RETURN_THROWS();
	}
	if (!no_ra && !(ra >= 0 && ra <= 86400)) {
		zend_argument_value_error(2, "must be between 0 and 86400 (seconds)");
		RETURN_THROWS();
	}
	d = resil_retry_next(&ro->rt, (int)cls, no_ra ? 0 : (int64_t)(ra * 1e9));
	if (d < 0)
		RETURN_NULL();
	RETURN_DOUBLE((double)d / 1e9);
}

ZEND_METHOD(Resil_Retry, success)
{
	ZEND_PARSE_PARAMETERS_NONE();
	resil_retry_next(&retry_of(Z_OBJ_P(ZEND_THIS))->rt, RESIL_ERR_NONE, 0);
}

ZEND_METHOD(Resil_Retry, reason)
{
	ZEND_PARSE_PARAMETERS_NONE();
	RETURN_STRING(resil_retry_reason(&retry_of(Z_OBJ_P(ZEND_THIS))->rt));
}

void php_resil_retry_minit(void)
{
	resil_retry_ce->create_object = retry_create;
	memcpy(&retry_handlers, zend_get_std_object_handlers(), sizeof(retry_handlers));
	retry_handlers.offset = XtOffsetOf(php_resil_retry, std);
	retry_handlers.clone_obj = NULL;
}

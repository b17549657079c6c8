/* SPDX-License-Identifier: MIT */
/*
 * resil.c - the PHP extension resil: the module, the process's handle,
 * Resil\Policy's declarations and lookups, the exceptions. The hot path
 * (acquire and the Permit) is permit.c's; call() and retries, retry.c's.
 *
 * The handle. One per process, opened pending (RESIL_OPEN_PENDING) by the
 * first declare() or get(): it succeeds whether resild runs or not, and a
 * policy decides by its policy.fallback until libresil finds resild (it
 * looks in the background of a decision, at most once a second). It is
 * never opened per request: a PHP-FPM worker opens it in its first
 * request and keeps it until it exits (MSHUTDOWN closes it).
 *
 * The registry. NAME -> resil_policy_t, per process (persistent memory),
 * with the configuration text this process last declared for NAME: a
 * script declares its policies at the top of every request, and the
 * second identical declaration of a process is no round trip to resild.
 * A different text is declared again (the owners' rule decides: files and
 * operators win, among declarations the newest process's). While the
 * handle is pending, an identical declaration is made again at most once
 * a second: libresil looks for resild when a policy is declared, so a
 * worker attaches at its next request once resild is there, whatever its
 * traffic (between declarations, the library looks in the background of
 * its decisions).
 *
 * Threads: PHP-FPM and the CLI are one thread per process; a ZTS build's
 * threads share the handle and the registry, so both are taken under one
 * mutex (never on the hot path: acquire reads only its Policy object).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <php.h>
#include <php_ini.h>
#include <ext/spl/spl_exceptions.h>
#include <ext/standard/info.h>
#include <zend_exceptions.h>
#include <zend_interfaces.h>

#include "php_resil.h"
#include "resil_arginfo.h"

zend_class_entry *resil_policy_ce, *resil_permit_ce, *resil_retry_ce, *resil_exception_ce,
    *resil_rejected_ce;
static zend_class_entry *rejected_ce[RESIL_REJECT_BUDGET + 1];
static zend_object_handlers policy_handlers;

/* ---- ini ---- */

static const char *ini_socket;	 /* resil.socket: "" -> $RESIL_SOCKET, then the default */
static const char *ini_fallback; /* resil.fallback: local, admit, reject */

static ZEND_INI_MH(on_socket)
{
	ini_socket = ZSTR_VAL(new_value);
	return SUCCESS;
}

static ZEND_INI_MH(on_fallback)
{
	const char *v = ZSTR_VAL(new_value);

	if (strcmp(v, "local") && strcmp(v, "admit") && strcmp(v, "reject")) {
		php_error_docref(NULL, E_WARNING,
				 "resil.fallback = '%s': the fallback is local, admit or reject",
				 v);
		return FAILURE;
	}
	ini_fallback = v;
	return SUCCESS;
}

PHP_INI_BEGIN()
PHP_INI_ENTRY("resil.socket", "", PHP_INI_SYSTEM, on_socket)
PHP_INI_ENTRY("resil.fallback", "local", PHP_INI_SYSTEM, on_fallback)
PHP_INI_END()

/* ---- the handle and the registry ---- */

struct reg {
	resil_policy_t *p;
	zend_string *declared; /* persistent: the text declared last, NULL: looked up only */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static resil_t *handle;	   /* under lock until set; never changed after */
static HashTable registry; /* name -> struct reg *, persistent, under lock */
static int64_t next_look;  /* pending: when a declaration looks for resild again, under lock */

/* Pending, and time to look for resild again (see above)? Under lock. */
static bool look_again(resil_t *r)
{
	int64_t now;

	if (resil_attached(r) != 0)
		return false;
	now = resil_now(r);
	if (now < next_look)
		return false;
	next_look = now + 1000000000LL;
	return true;
}

static void reg_free(zval *zv)
{
	struct reg *g = Z_PTR_P(zv);

	if (g->declared)
		zend_string_release(g->declared);
	pefree(g, 1);
}

void php_resil_throw_errno(int err, const char *what)
{
	const char *words = resil_last_error();

	if (err < 0)
		err = -err;
	if (!words || !*words)
		words = strerror(err);
	zend_throw_exception_ex(resil_exception_ce, err, "%s: %s", what, words);
}

/* Called under lock. */
static resil_t *handle_open(void)
{
	struct resil_open_opts o = {
	    .size = sizeof(o),
	    .socket_path = ini_socket && *ini_socket ? ini_socket : NULL,
	    .flags = RESIL_OPEN_PENDING,
	};
	resil_t *r;
	int err;

	if (handle)
		return handle;
	err = resil_open_ex(&r, &o);
	if (err < 0) {
		php_resil_throw_errno(err, o.socket_path ? o.socket_path : "resil");
		return NULL;
	}
	handle = r;
	return r;
}

resil_t *php_resil_handle(void)
{
	resil_t *r;

	pthread_mutex_lock(&lock);
	r = handle_open();
	pthread_mutex_unlock(&lock);
	return r;
}

/* A policy name: what resild accepts, checked here so that PHP's own
 * ValueError says which argument is wrong. */
static int name_check(const zend_string *name, uint32_t arg)
{
	if (ZSTR_LEN(name) == 0) {
		zend_argument_value_error(arg, "must not be empty");
		return -1;
	}
	if (strlen(ZSTR_VAL(name)) != ZSTR_LEN(name)) {
		zend_argument_value_error(arg, "must not contain any null bytes");
		return -1;
	}
	if (ZSTR_LEN(name) >= 64) {
		zend_argument_value_error(arg, "must be at most 63 bytes long");
		return -1;
	}
	for (size_t i = 0; i < ZSTR_LEN(name); i++) {
		char c = ZSTR_VAL(name)[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || (i > 0 && (c == '.' || c == ':' || c == '-')) ||
		    (i == 0 && c == '@'))
			continue;
		zend_argument_value_error(arg,
					  "must hold only letters, digits, '_', and after the "
					  "first '.', ':' or '-' (a budget's name: a leading '@')");
		return -1;
	}
	return 0;
}

/* The text to declare: config, with the process's resil.fallback when the
 * declaration names none and it is not the default. */
static zend_string *declared_text(zend_string *config)
{
	if (!ini_fallback || strcmp(ini_fallback, "local") == 0 ||
	    strstr(ZSTR_VAL(config), "policy.fallback"))
		return zend_string_copy(config);
	return zend_strpprintf(0, "%s\npolicy.fallback = %s", ZSTR_VAL(config), ini_fallback);
}

/* The registry's entry for name (created, resolved), under lock; with
 * config, declared first unless this process declared that text last.
 * NULL with an exception thrown. */
static struct reg *reg_get(zend_string *name, zend_string *config)
{
	struct reg *g = zend_hash_find_ptr(&registry, name);
	resil_t *r = handle_open();
	resil_policy_t *p;
	int err;

	if (!r)
		return NULL;
	if (config &&
	    (!(g && g->declared && zend_string_equals(g->declared, config)) || look_again(r))) {
		zend_string *text = declared_text(config);

		err = resil_define(r, ZSTR_VAL(name), ZSTR_VAL(text));
		zend_string_release(text);
		if (err == -EINVAL) {
			const char *words = resil_last_error();

			/* resild's words name the policy by themselves; the
			 * pending handle's begin with "policy NAME:" */
			if (strncmp(words, "policy ", 7) == 0)
				zend_value_error("Resil\\Policy::declare(): %s", words);
			else
				zend_value_error("Resil\\Policy::declare(): %s: %s", ZSTR_VAL(name),
						 words);
			return NULL;
		}
		if (err < 0) {
			php_resil_throw_errno(err, ZSTR_VAL(name));
			return NULL;
		}
	}
	if (!g) {
		err = resil_policy(r, ZSTR_VAL(name), &p);
		if (err == -ENOENT && !*resil_last_error()) {
			zend_throw_exception_ex(resil_exception_ce, ENOENT,
						"policy '%s' does not exist (declare it with "
						"Resil\\Policy::declare(), or resilctl create)",
						ZSTR_VAL(name));
			return NULL;
		}
		if (err < 0) {
			php_resil_throw_errno(err, ZSTR_VAL(name));
			return NULL;
		}
		g = pemalloc(sizeof(*g), 1);
		g->p = p;
		g->declared = NULL;
		zend_hash_str_add_new_ptr(&registry, ZSTR_VAL(name), ZSTR_LEN(name), g);
	}
	if (config && !(g->declared && zend_string_equals(g->declared, config))) {
		if (g->declared)
			zend_string_release(g->declared);
		g->declared = zend_string_init(ZSTR_VAL(config), ZSTR_LEN(config), 1);
	}
	return g;
}

/* ---- Resil\Policy ---- */

static zend_object *policy_create(zend_class_entry *ce)
{
	php_resil_policy *po = zend_object_alloc(sizeof(*po), ce);

	zend_object_std_init(&po->std, ce);
	object_properties_init(&po->std, ce);
	po->std.handlers = &policy_handlers;
	/* its one property is a string: no cycle can go through it */
	GC_ADD_FLAGS(&po->std, GC_NOT_COLLECTABLE);
	return &po->std;
}

static void policy_return(zval *rv, resil_policy_t *p, zend_string *name)
{
	zend_object *o = policy_create(resil_policy_ce);

	php_resil_policy_of(o)->p = p;
	/* the readonly $name, initialized here as its class would */
	ZVAL_STR_COPY(OBJ_PROP_NUM(o, 0), name);
	ZVAL_OBJ(rv, o);
}

static void policy_lookup(INTERNAL_FUNCTION_PARAMETERS, zend_string *name, zend_string *config)
{
	struct reg *g;
	resil_policy_t *p = NULL;

	pthread_mutex_lock(&lock);
	g = reg_get(name, config);
	if (g)
		p = g->p;
	pthread_mutex_unlock(&lock);
	if (!p)
		RETURN_THROWS();
	policy_return(return_value, p, name);
}

ZEND_METHOD(Resil_Policy, __construct)
{
	ZEND_PARSE_PARAMETERS_NONE();
}

ZEND_METHOD(Resil_Policy, declare)
{
	zend_string *name, *config;
	const char *s;

	ZEND_PARSE_PARAMETERS_START(2, 2)
	Z_PARAM_STR(name)
	Z_PARAM_STR(config)
	ZEND_PARSE_PARAMETERS_END();
	if (name_check(name, 1) < 0)
		RETURN_THROWS();
	if (strlen(ZSTR_VAL(config)) != ZSTR_LEN(config)) {
		zend_argument_value_error(2, "must not contain any null bytes");
		RETURN_THROWS();
	}
	/* a declaration that says nothing is a mistake (a variable never
	 * set), not a request for every default */
	s = ZSTR_VAL(config);
	if (!s[strspn(s, " \t\r\n;")]) {
		zend_argument_value_error(2, "must hold at least one key = value");
		RETURN_THROWS();
	}
	policy_lookup(INTERNAL_FUNCTION_PARAM_PASSTHRU, name, config);
}

ZEND_METHOD(Resil_Policy, get)
{
	zend_string *name;

	ZEND_PARSE_PARAMETERS_START(1, 1)
	Z_PARAM_STR(name)
	ZEND_PARSE_PARAMETERS_END();
	if (name_check(name, 1) < 0)
		RETURN_THROWS();
	policy_lookup(INTERNAL_FUNCTION_PARAM_PASSTHRU, name, NULL);
}

ZEND_METHOD(Resil_Policy, state)
{
	resil_policy_t *p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	int s;

	ZEND_PARSE_PARAMETERS_NONE();
	s = resil_policy_state(p);
	if (s < 0) {
		php_resil_throw_errno(s, resil_policy_name(p));
		RETURN_THROWS();
	}
	RETURN_STRING(resil_strstate(s));
}

ZEND_METHOD(Resil_Policy, outcomeHttp)
{
	zend_long status;

	ZEND_PARSE_PARAMETERS_START(1, 1)
	Z_PARAM_LONG(status)
	ZEND_PARSE_PARAMETERS_END();
	if (status < 100 || status > 999) {
		zend_argument_value_error(1, "must be an HTTP status (100 to 999)");
		RETURN_THROWS();
	}
	RETURN_LONG(resil_outcome_http(php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p, (int)status));
}

ZEND_METHOD(Resil_Policy, keyed)
{
	ZEND_PARSE_PARAMETERS_NONE();
	RETURN_BOOL(resil_policy_keyed(php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p) == 1);
}

ZEND_METHOD(Resil_Policy, pendingStats)
{
	resil_policy_t *p = php_resil_policy_of(Z_OBJ_P(ZEND_THIS))->p;
	struct resil_pending_stats st;
	int err;

	ZEND_PARSE_PARAMETERS_NONE();
	err = resil_policy_pending_stats(p, &st);
	if (err < 0) {
		php_resil_throw_errno(err, resil_policy_name(p));
		RETURN_THROWS();
	}
	array_init_size(return_value, 2);
	add_assoc_long(return_value, "admitted", (zend_long)st.admitted);
	add_assoc_long(return_value, "rejected", (zend_long)st.rejected);
}

/* ---- the rejections ---- */

void php_resil_throw_rejected(resil_policy_t *p, int v, const resil_permit_t *permit,
			      zend_object *previous)
{
	zend_class_entry *ce = v > 0 && v <= RESIL_REJECT_BUDGET ? rejected_ce[v] : NULL;
	int64_t wait_ns = resil_permit_wait_ns(permit);
	const char *name = resil_policy_name(p);
	zend_object *ex;
	zval ra;

	if (!ce)
		ce = rejected_ce[RESIL_REJECT_OPEN];
	/* seconds until the policy expects to admit again, as the library
	 * knows it (a limiter's next permit, an open breaker's next probe),
	 * else null: a full bulkhead frees at no known time; a RateLimited
	 * always carries one */
	if (wait_ns > 0 || v == RESIL_REJECT_LIMITED)
		ZVAL_DOUBLE(&ra, wait_ns > 0 ? (double)wait_ns / 1e9 : 0.0);
	else
		ZVAL_NULL(&ra);
	if (Z_TYPE(ra) == IS_DOUBLE)
		ex = zend_throw_exception_ex(ce, 0, "%s: %s (retry after %.3f s)", name,
					     resil_strverdict(v), Z_DVAL(ra));
	else
		ex = zend_throw_exception_ex(ce, 0, "%s: %s", name, resil_strverdict(v));
	zend_update_property_string(resil_rejected_ce, ex, "policy", sizeof("policy") - 1, name);
	zend_update_property(resil_rejected_ce, ex, "retryAfter", sizeof("retryAfter") - 1, &ra);
	if (previous)
		zend_exception_set_previous(ex, previous);
}

/* ---- functions ---- */

ZEND_FUNCTION(Resil_attached)
{
	ZEND_PARSE_PARAMETERS_NONE();
	RETURN_BOOL(handle && resil_attached(handle) == 1);
}

ZEND_FUNCTION(Resil_noop)
{
	ZEND_PARSE_PARAMETERS_NONE();
}

ZEND_FUNCTION(Resil_bench_c)
{
	zend_object *po;
	zend_long n;
	resil_permit_t permit;
	struct timespec a, b;

	ZEND_PARSE_PARAMETERS_START(2, 2)
	Z_PARAM_OBJ_OF_CLASS(po, resil_policy_ce)
	Z_PARAM_LONG(n)
	ZEND_PARSE_PARAMETERS_END();
	if (n < 1) {
		zend_argument_value_error(2, "must be greater than 0");
		RETURN_THROWS();
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (zend_long i = 0; i < n; i++)
		if (resil_acquire(php_resil_policy_of(po)->p, &permit) == RESIL_ADMIT)
			resil_release(php_resil_policy_of(po)->p, &permit, RESIL_SUCCESS);
	clock_gettime(CLOCK_MONOTONIC, &b);
	RETURN_DOUBLE(((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
}

/* ---- the module ---- */

static PHP_MINIT_FUNCTION(resil)
{
	REGISTER_INI_ENTRIES();
	zend_hash_init(&registry, 16, NULL, reg_free, 1);

	resil_policy_ce = register_class_Resil_Policy();
	resil_policy_ce->create_object = policy_create;
	memcpy(&policy_handlers, zend_get_std_object_handlers(), sizeof(policy_handlers));
	policy_handlers.offset = XtOffsetOf(php_resil_policy, std);
	policy_handlers.clone_obj = NULL;

	resil_exception_ce = register_class_Resil_ResilException(spl_ce_RuntimeException);
	resil_rejected_ce = register_class_Resil_Rejected(spl_ce_RuntimeException);
	rejected_ce[RESIL_REJECT_LIMITED] = register_class_Resil_RateLimited(resil_rejected_ce);
	rejected_ce[RESIL_REJECT_OPEN] = register_class_Resil_CircuitOpen(resil_rejected_ce);
	rejected_ce[RESIL_REJECT_FULL] = register_class_Resil_BulkheadFull(resil_rejected_ce);
	rejected_ce[RESIL_REJECT_SHED] = register_class_Resil_Shed(resil_rejected_ce);
	rejected_ce[RESIL_REJECT_BUDGET] = register_class_Resil_BudgetExhausted(resil_rejected_ce);

	/* registered here, with the arginfo; their handlers are their files' */
	resil_permit_ce = register_class_Resil_Permit();
	php_resil_permit_minit();
	resil_retry_ce = register_class_Resil_Retry();
	php_resil_retry_minit();
	return SUCCESS;
}

static PHP_MSHUTDOWN_FUNCTION(resil)
{
	/* the process ends (a worker exits, the CLI returns): its client row
	 * goes back to resild now rather than when resild sees it gone.
	 * libresil stays mapped after PHP unloads this module (it is linked
	 * with -z nodelete). */
	resil_close(handle);
	handle = NULL;
	zend_hash_destroy(&registry);
	UNREGISTER_INI_ENTRIES();
	return SUCCESS;
}

static PHP_RINIT_FUNCTION(resil)
{
	php_resil_permit_rinit();
	return SUCCESS;
}

static PHP_RSHUTDOWN_FUNCTION(resil)
{
	php_resil_permit_rshutdown();
	return SUCCESS;
}

static PHP_MINFO_FUNCTION(resil)
{
	php_info_print_table_start();
	php_info_print_table_row(2, "resil support", "enabled");
	php_info_print_table_row(2, "version", PHP_RESIL_VERSION);
	php_info_print_table_row(2, "libresil handle",
				 !handle		       ? "not opened in this process"
				 : resil_attached(handle) == 1 ? "attached to resild"
							       : "pending (deciding by fallbacks)");
	php_info_print_table_end();
	DISPLAY_INI_ENTRIES();
}

/* clang-format off: one field a line, as the structure declares them */
/* one field a line, in the order the structure has them */
/* clang-format off */
zend_module_entry resil_module_entry = {
    STANDARD_MODULE_HEADER,
    PHP_RESIL_EXTNAME,
    ext_functions,
    PHP_MINIT(resil),
    PHP_MSHUTDOWN(resil),
    PHP_RINIT(resil),
    PHP_RSHUTDOWN(resil),
    PHP_MINFO(resil),
    PHP_RESIL_VERSION,
    STANDARD_MODULE_PROPERTIES,
};
/* clang-format on */
/* clang-format on */

#ifdef COMPILE_DL_RESIL
ZEND_GET_MODULE(resil)
#endif

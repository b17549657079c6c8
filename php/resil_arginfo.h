/* This is a generated file, edit the .stub.php file instead.
 * Stub hash: cd2086dc38392381a167613430d20a9afe3c38fa */

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_Resil_attached, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_Resil_noop, 0, 0, IS_VOID, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_Resil_bench_c, 0, 2, IS_DOUBLE, 0)
	ZEND_ARG_OBJ_INFO(0, policy, Resil\\Policy, 0)
	ZEND_ARG_TYPE_INFO(0, iterations, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_INFO_EX(arginfo_class_Resil_Policy___construct, 0, 0, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_class_Resil_Policy_declare, 0, 2, Resil\\Policy, 0)
	ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
	ZEND_ARG_TYPE_INFO(0, config, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_class_Resil_Policy_get, 0, 1, Resil\\Policy, 0)
	ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_class_Resil_Policy_acquire, 0, 0, Resil\\Permit, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, key, IS_STRING, 1, "null")
ZEND_END_ARG_INFO()

#define arginfo_class_Resil_Policy_keyed arginfo_Resil_attached

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Policy_call, 0, 1, IS_MIXED, 0)
	ZEND_ARG_TYPE_INFO(0, fn, IS_CALLABLE, 0)
	ZEND_ARG_VARIADIC_TYPE_INFO(0, args, IS_MIXED, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_class_Resil_Policy_retry, 0, 0, Resil\\Retry, 0)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, timeout, IS_DOUBLE, 1, "null")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Policy_state, 0, 0, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Policy_outcomeHttp, 0, 1, IS_LONG, 0)
	ZEND_ARG_TYPE_INFO(0, status, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Policy_pendingStats, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

#define arginfo_class_Resil_Permit___construct arginfo_class_Resil_Policy___construct

#define arginfo_class_Resil_Permit_success arginfo_Resil_noop

#define arginfo_class_Resil_Permit_failure arginfo_Resil_noop

#define arginfo_class_Resil_Permit_ignore arginfo_Resil_noop

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Permit_release, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, outcome, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Permit_releaseHttp, 0, 1, IS_VOID, 0)
	ZEND_ARG_TYPE_INFO(0, status, IS_LONG, 0)
ZEND_END_ARG_INFO()

#define arginfo_class_Resil_Retry___construct arginfo_class_Resil_Policy___construct

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_Resil_Retry_next, 0, 0, IS_DOUBLE, 1)
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, errorClass, IS_LONG, 0, "Resil\\Retry::TRANSIENT")
	ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, retryAfter, IS_DOUBLE, 1, "null")
ZEND_END_ARG_INFO()

#define arginfo_class_Resil_Retry_success arginfo_Resil_noop

#define arginfo_class_Resil_Retry_reason arginfo_class_Resil_Policy_state


ZEND_FUNCTION(Resil_attached);
ZEND_FUNCTION(Resil_noop);
ZEND_FUNCTION(Resil_bench_c);
ZEND_METHOD(Resil_Policy, __construct);
ZEND_METHOD(Resil_Policy, declare);
ZEND_METHOD(Resil_Policy, get);
ZEND_METHOD(Resil_Policy, acquire);
ZEND_METHOD(Resil_Policy, keyed);
ZEND_METHOD(Resil_Policy, call);
ZEND_METHOD(Resil_Policy, retry);
ZEND_METHOD(Resil_Policy, state);
ZEND_METHOD(Resil_Policy, outcomeHttp);
ZEND_METHOD(Resil_Policy, pendingStats);
ZEND_METHOD(Resil_Permit, __construct);
ZEND_METHOD(Resil_Permit, success);
ZEND_METHOD(Resil_Permit, failure);
ZEND_METHOD(Resil_Permit, ignore);
ZEND_METHOD(Resil_Permit, release);
ZEND_METHOD(Resil_Permit, releaseHttp);
ZEND_METHOD(Resil_Retry, __construct);
ZEND_METHOD(Resil_Retry, next);
ZEND_METHOD(Resil_Retry, success);
ZEND_METHOD(Resil_Retry, reason);


static const zend_function_entry ext_functions[] = {
	ZEND_NS_FALIAS("Resil", attached, Resil_attached, arginfo_Resil_attached)
	ZEND_NS_FALIAS("Resil", noop, Resil_noop, arginfo_Resil_noop)
	ZEND_NS_FALIAS("Resil", bench_c, Resil_bench_c, arginfo_Resil_bench_c)
	ZEND_FE_END
};


static const zend_function_entry class_Resil_Policy_methods[] = {
	ZEND_ME(Resil_Policy, __construct, arginfo_class_Resil_Policy___construct, ZEND_ACC_PRIVATE)
	ZEND_ME(Resil_Policy, declare, arginfo_class_Resil_Policy_declare, ZEND_ACC_PUBLIC|ZEND_ACC_STATIC)
	ZEND_ME(Resil_Policy, get, arginfo_class_Resil_Policy_get, ZEND_ACC_PUBLIC|ZEND_ACC_STATIC)
	ZEND_ME(Resil_Policy, acquire, arginfo_class_Resil_Policy_acquire, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, keyed, arginfo_class_Resil_Policy_keyed, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, call, arginfo_class_Resil_Policy_call, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, retry, arginfo_class_Resil_Policy_retry, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, state, arginfo_class_Resil_Policy_state, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, outcomeHttp, arginfo_class_Resil_Policy_outcomeHttp, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Policy, pendingStats, arginfo_class_Resil_Policy_pendingStats, ZEND_ACC_PUBLIC)
	ZEND_FE_END
};


static const zend_function_entry class_Resil_Permit_methods[] = {
	ZEND_ME(Resil_Permit, __construct, arginfo_class_Resil_Permit___construct, ZEND_ACC_PRIVATE)
	ZEND_ME(Resil_Permit, success, arginfo_class_Resil_Permit_success, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Permit, failure, arginfo_class_Resil_Permit_failure, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Permit, ignore, arginfo_class_Resil_Permit_ignore, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Permit, release, arginfo_class_Resil_Permit_release, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Permit, releaseHttp, arginfo_class_Resil_Permit_releaseHttp, ZEND_ACC_PUBLIC)
	ZEND_FE_END
};


static const zend_function_entry class_Resil_Retry_methods[] = {
	ZEND_ME(Resil_Retry, __construct, arginfo_class_Resil_Retry___construct, ZEND_ACC_PRIVATE)
	ZEND_ME(Resil_Retry, next, arginfo_class_Resil_Retry_next, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Retry, success, arginfo_class_Resil_Retry_success, ZEND_ACC_PUBLIC)
	ZEND_ME(Resil_Retry, reason, arginfo_class_Resil_Retry_reason, ZEND_ACC_PUBLIC)
	ZEND_FE_END
};


static const zend_function_entry class_Resil_ResilException_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_Rejected_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_RateLimited_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_CircuitOpen_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_BulkheadFull_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_Shed_methods[] = {
	ZEND_FE_END
};


static const zend_function_entry class_Resil_BudgetExhausted_methods[] = {
	ZEND_FE_END
};

static zend_class_entry *register_class_Resil_Policy(void)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "Policy", class_Resil_Policy_methods);
	class_entry = zend_register_internal_class_ex(&ce, NULL);
	class_entry->ce_flags |= ZEND_ACC_FINAL|ZEND_ACC_NO_DYNAMIC_PROPERTIES|ZEND_ACC_NOT_SERIALIZABLE;

	zval property_name_default_value;
	ZVAL_UNDEF(&property_name_default_value);
	zend_string *property_name_name = zend_string_init("name", sizeof("name") - 1, 1);
	zend_declare_typed_property(class_entry, property_name_name, &property_name_default_value, ZEND_ACC_PUBLIC|ZEND_ACC_READONLY, NULL, (zend_type) ZEND_TYPE_INIT_MASK(MAY_BE_STRING));
	zend_string_release(property_name_name);

	return class_entry;
}

static zend_class_entry *register_class_Resil_Permit(void)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "Permit", class_Resil_Permit_methods);
	class_entry = zend_register_internal_class_ex(&ce, NULL);
	class_entry->ce_flags |= ZEND_ACC_FINAL|ZEND_ACC_NO_DYNAMIC_PROPERTIES|ZEND_ACC_NOT_SERIALIZABLE;

	zval const_SUCCESS_value;
	ZVAL_LONG(&const_SUCCESS_value, RESIL_SUCCESS);
	zend_string *const_SUCCESS_name = zend_string_init_interned("SUCCESS", sizeof("SUCCESS") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_SUCCESS_name, &const_SUCCESS_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_SUCCESS_name);

	zval const_FAILURE_value;
	ZVAL_LONG(&const_FAILURE_value, RESIL_FAILURE);
	zend_string *const_FAILURE_name = zend_string_init_interned("FAILURE", sizeof("FAILURE") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_FAILURE_name, &const_FAILURE_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_FAILURE_name);

	zval const_IGNORED_value;
	ZVAL_LONG(&const_IGNORED_value, RESIL_IGNORED);
	zend_string *const_IGNORED_name = zend_string_init_interned("IGNORED", sizeof("IGNORED") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_IGNORED_name, &const_IGNORED_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_IGNORED_name);

	return class_entry;
}

static zend_class_entry *register_class_Resil_Retry(void)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "Retry", class_Resil_Retry_methods);
	class_entry = zend_register_internal_class_ex(&ce, NULL);
	class_entry->ce_flags |= ZEND_ACC_FINAL|ZEND_ACC_NO_DYNAMIC_PROPERTIES|ZEND_ACC_NOT_SERIALIZABLE;

	zval const_TRANSIENT_value;
	ZVAL_LONG(&const_TRANSIENT_value, RESIL_ERR_TRANSIENT);
	zend_string *const_TRANSIENT_name = zend_string_init_interned("TRANSIENT", sizeof("TRANSIENT") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_TRANSIENT_name, &const_TRANSIENT_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_TRANSIENT_name);

	zval const_THROTTLED_value;
	ZVAL_LONG(&const_THROTTLED_value, RESIL_ERR_THROTTLED);
	zend_string *const_THROTTLED_name = zend_string_init_interned("THROTTLED", sizeof("THROTTLED") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_THROTTLED_name, &const_THROTTLED_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_THROTTLED_name);

	zval const_TIMEOUT_value;
	ZVAL_LONG(&const_TIMEOUT_value, RESIL_ERR_TIMEOUT);
	zend_string *const_TIMEOUT_name = zend_string_init_interned("TIMEOUT", sizeof("TIMEOUT") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_TIMEOUT_name, &const_TIMEOUT_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_TIMEOUT_name);

	zval const_PERMANENT_value;
	ZVAL_LONG(&const_PERMANENT_value, RESIL_ERR_PERMANENT);
	zend_string *const_PERMANENT_name = zend_string_init_interned("PERMANENT", sizeof("PERMANENT") - 1, 1);
	zend_declare_class_constant_ex(class_entry, const_PERMANENT_name, &const_PERMANENT_value, ZEND_ACC_PUBLIC, NULL);
	zend_string_release(const_PERMANENT_name);

	return class_entry;
}

static zend_class_entry *register_class_Resil_ResilException(zend_class_entry *class_entry_RuntimeException)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "ResilException", class_Resil_ResilException_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_RuntimeException);

	return class_entry;
}

static zend_class_entry *register_class_Resil_Rejected(zend_class_entry *class_entry_RuntimeException)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "Rejected", class_Resil_Rejected_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_RuntimeException);
	class_entry->ce_flags |= ZEND_ACC_ABSTRACT;

	zval property_policy_default_value;
	ZVAL_UNDEF(&property_policy_default_value);
	zend_string *property_policy_name = zend_string_init("policy", sizeof("policy") - 1, 1);
	zend_declare_typed_property(class_entry, property_policy_name, &property_policy_default_value, ZEND_ACC_PUBLIC|ZEND_ACC_READONLY, NULL, (zend_type) ZEND_TYPE_INIT_MASK(MAY_BE_STRING));
	zend_string_release(property_policy_name);

	zval property_retryAfter_default_value;
	ZVAL_UNDEF(&property_retryAfter_default_value);
	zend_string *property_retryAfter_name = zend_string_init("retryAfter", sizeof("retryAfter") - 1, 1);
	zend_declare_typed_property(class_entry, property_retryAfter_name, &property_retryAfter_default_value, ZEND_ACC_PUBLIC|ZEND_ACC_READONLY, NULL, (zend_type) ZEND_TYPE_INIT_MASK(MAY_BE_DOUBLE|MAY_BE_NULL));
	zend_string_release(property_retryAfter_name);

	return class_entry;
}

static zend_class_entry *register_class_Resil_RateLimited(zend_class_entry *class_entry_Resil_Rejected)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "RateLimited", class_Resil_RateLimited_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_Resil_Rejected);
	class_entry->ce_flags |= ZEND_ACC_FINAL;

	return class_entry;
}

static zend_class_entry *register_class_Resil_CircuitOpen(zend_class_entry *class_entry_Resil_Rejected)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "CircuitOpen", class_Resil_CircuitOpen_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_Resil_Rejected);
	class_entry->ce_flags |= ZEND_ACC_FINAL;

	return class_entry;
}

static zend_class_entry *register_class_Resil_BulkheadFull(zend_class_entry *class_entry_Resil_Rejected)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "BulkheadFull", class_Resil_BulkheadFull_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_Resil_Rejected);
	class_entry->ce_flags |= ZEND_ACC_FINAL;

	return class_entry;
}

static zend_class_entry *register_class_Resil_Shed(zend_class_entry *class_entry_Resil_Rejected)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "Shed", class_Resil_Shed_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_Resil_Rejected);
	class_entry->ce_flags |= ZEND_ACC_FINAL;

	return class_entry;
}

static zend_class_entry *register_class_Resil_BudgetExhausted(zend_class_entry *class_entry_Resil_Rejected)
{
	zend_class_entry ce, *class_entry;

	INIT_NS_CLASS_ENTRY(ce, "Resil", "BudgetExhausted", class_Resil_BudgetExhausted_methods);
	class_entry = zend_register_internal_class_ex(&ce, class_entry_Resil_Rejected);
	class_entry->ce_flags |= ZEND_ACC_FINAL;

	return class_entry;
}

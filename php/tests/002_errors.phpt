--TEST--
resil: bad arguments are TypeError, ValueError, ArgumentCountError; misuse is \Error
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* Bad arguments get PHP's own errors: TypeError, ValueError,
 * ArgumentCountError; misuse gets \Error. */
function t(callable $f): void
{
    try {
        $f();
        echo "no error\n";
    } catch (Throwable $e) {
        echo get_class($e), ": ", $e->getMessage(), "\n";
    }
}
$p = Resil\Policy::declare('phpt_errors', 'bulkhead.max = 2');
t(fn() => Resil\Policy::declare('phpt_errors'));
t(fn() => Resil\Policy::declare([], 'bulkhead.max = 1'));
t(fn() => Resil\Policy::declare('', 'bulkhead.max = 1'));
t(fn() => Resil\Policy::declare("a\0b", 'bulkhead.max = 1'));
t(fn() => Resil\Policy::declare(str_repeat('n', 64), 'bulkhead.max = 1'));
t(fn() => Resil\Policy::declare('phpt_errors', ''));
t(fn() => Resil\Policy::declare('phpt_errors', " ;\n "));
t(fn() => Resil\Policy::declare('phpt_errors', "bulkhead.max = 1\0"));
t(fn() => Resil\Policy::declare('phpt_errors', 'bulkhead.maxx = 1'));
t(fn() => Resil\Policy::declare('phpt_errors', 'breaker.failure_rate = 150'));
t(fn() => Resil\Policy::get(''));
t(fn() => Resil\Policy::get('phpt_never_declared'));
t(fn() => $p->acquire([]));
t(fn() => $p->acquire(new stdClass));
$k = Resil\Policy::declare('phpt_errors_keyed', 'limit.rate = 10/s; limit.keys = 8');
echo "keyed: ", var_export($p->keyed(), true), " ", var_export($k->keyed(), true), "\n";
t(fn() => $p->acquire('10.0.0.1'));
t(fn() => $k->acquire());
t(fn() => $p->outcomeHttp(42));
t(fn() => $p->retry(0.0));
t(fn() => $p->retry(-1.0));
t(fn() => $p->retry('soon'));
t(fn() => $p->call('no_such_function'));
t(fn() => $p->call());
t(fn() => new Resil\Policy());
t(fn() => new Resil\Permit());
t(fn() => new Resil\Retry());
t(fn() => new Resil\Rejected('x'));
t(fn() => clone $p);
t(fn() => serialize($p));
$permit = $p->acquire();
t(fn() => clone $permit);
t(fn() => serialize($permit));
t(fn() => $permit->release(7));
t(fn() => $permit->releaseHttp(1000));
t(fn() => $permit->success());
t(fn() => $permit->success());
t(fn() => $permit->failure());
t(fn() => $permit->ignore());
$rt = $p->retry();
t(fn() => $rt->next(0));
t(fn() => $rt->next(5));
t(fn() => $rt->next(Resil\Retry::TRANSIENT, -1.0));
t(fn() => $rt->next(Resil\Retry::TRANSIENT, 'later'));
t(fn() => $p->name = 'other');
t(fn() => $p->other = 1);
echo "the policy still decides: ", get_class($p->acquire()), "\n";
--EXPECTF--
ArgumentCountError: Resil\Policy::declare() expects exactly 2 arguments, 1 given
TypeError: Resil\Policy::declare(): Argument #1 ($name) must be of type string, array given
ValueError: Resil\Policy::declare(): Argument #1 ($name) must not be empty
ValueError: Resil\Policy::declare(): Argument #1 ($name) must not contain any null bytes
ValueError: Resil\Policy::declare(): Argument #1 ($name) must be at most 63 bytes long
ValueError: Resil\Policy::declare(): Argument #2 ($config) must hold at least one key = value
ValueError: Resil\Policy::declare(): Argument #2 ($config) must hold at least one key = value
ValueError: Resil\Policy::declare(): Argument #2 ($config) must not contain any null bytes
ValueError: Resil\Policy::declare(): phpt_errors: in 'bulkhead.maxx = 1': unknown key 'bulkhead.maxx': did you mean bulkhead.max?
ValueError: Resil\Policy::declare(): phpt_errors: in 'breaker.failure_rate = 150': breaker.failure_rate: '150' is not a percent in (0, 100]
ValueError: Resil\Policy::get(): Argument #1 ($name) must not be empty
Resil\ResilException: phpt_never_declared: no policy named phpt_never_declared in resild on %s: resil_define declares it, resilctl list shows what exists
TypeError: Resil\Policy::acquire(): Argument #1 ($key) must be of type ?string, array given
TypeError: Resil\Policy::acquire(): Argument #1 ($key) must be of type ?string, stdClass given
keyed: false true
Resil\ResilException: phpt_errors: a key, but the policy has no keyed limiter (limit.keys; Policy::keyed() says which)
Resil\ResilException: phpt_errors_keyed: no key, but the policy's limiter is keyed (give a key, or set limit.default_key)
ValueError: Resil\Policy::outcomeHttp(): Argument #1 ($status) must be an HTTP status (100 to 999)
ValueError: Resil\Policy::retry(): Argument #1 ($timeout) must be greater than 0 (seconds)
ValueError: Resil\Policy::retry(): Argument #1 ($timeout) must be greater than 0 (seconds)
TypeError: Resil\Policy::retry(): Argument #1 ($timeout) must be of type ?float, string given
TypeError: Resil\Policy::call(): Argument #1 ($fn) must be a valid callback, function "no_such_function" not found or invalid function name
ArgumentCountError: Resil\Policy::call() expects at least 1 argument, 0 given
Error: Call to private Resil\Policy::__construct() from global scope
Error: Call to private Resil\Permit::__construct() from global scope
Error: Call to private Resil\Retry::__construct() from global scope
Error: Cannot instantiate abstract class Resil\Rejected
Error: Trying to clone an uncloneable object of class Resil\Policy
Exception: Serialization of 'Resil\Policy' is not allowed
Error: Trying to clone an uncloneable object of class Resil\Permit
Exception: Serialization of 'Resil\Permit' is not allowed
ValueError: Resil\Permit::release(): Argument #1 ($outcome) must be Resil\Permit::SUCCESS, Resil\Permit::FAILURE or Resil\Permit::IGNORED
ValueError: Resil\Permit::releaseHttp(): Argument #1 ($status) must be an HTTP status (100 to 999)
no error
Error: Resil\Permit: already released
Error: Resil\Permit: already released
Error: Resil\Permit: already released
ValueError: Resil\Retry::next(): Argument #1 ($errorClass) must be a Resil\Retry class constant or a user class from 100 up
ValueError: Resil\Retry::next(): Argument #1 ($errorClass) must be a Resil\Retry class constant or a user class from 100 up
ValueError: Resil\Retry::next(): Argument #2 ($retryAfter) must be between 0 and 86400 (seconds)
TypeError: Resil\Retry::next(): Argument #2 ($retryAfter) must be of type ?float, string given
Error: Cannot modify readonly property Resil\Policy::$name
Error: Cannot create dynamic property Resil\Policy::$other
the policy still decides: Resil\Permit

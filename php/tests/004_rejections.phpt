--TEST--
resil: each refusal is a Resil\Rejected with the policy and its Retry-After
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* Each verdict is its own Resil\Rejected, with the policy's name and a
 * Retry-After where the policy knows one. */
$l = Resil\Policy::declare('phpt_rej_limit', 'limit.rate = 2/s; limit.burst = 2');
$b = Resil\Policy::declare('phpt_rej_bulkhead', 'bulkhead.max = 2');
$o = Resil\Policy::declare('phpt_rej_open', 'breaker.window = consecutive:1; breaker.wait = 30s');
$k = Resil\Policy::declare('phpt_rej_keyed', 'limit.rate = 1/m; limit.burst = 1; limit.keys = 64');
function rejected(callable $f): ?Resil\Rejected
{
    try {
        $f();
    } catch (Resil\Rejected $e) {
        return $e;
    }
    return null;
}
$held = [$l->acquire(), $l->acquire()];
$e = rejected(fn() => $l->acquire());
echo get_class($e), " ", $e->policy, "\n";
var_dump(is_float($e->retryAfter) && $e->retryAfter > 0 && $e->retryAfter <= 0.5);
var_dump(str_starts_with($e->getMessage(), 'phpt_rej_limit: '), $e instanceof RuntimeException);

$held = [$b->acquire(), $b->acquire()];
$e = rejected(fn() => $b->acquire());
echo get_class($e), " ", $e->policy, "\n";
var_dump($e->retryAfter);
$held = [];
echo "after the holders are gone: ", get_class($b->acquire()), "\n";

$b1 = $b->acquire();
$b2 = $b->acquire();
$b1->success();
echo "a released permit frees its slot: ", get_class($b->acquire()), "\n";

$o->acquire()->failure();
echo "breaker: ", $o->state(), "\n";
$e = rejected(fn() => $o->acquire());
echo get_class($e), " ", $e->policy, "\n";
/* an OPEN breaker's Retry-After is the time to its next probe */
var_dump($e->retryAfter === null || ($e->retryAfter > 0 && $e->retryAfter <= 30));

/* keyed: one key's limit does not touch another's */
$k->acquire('10.0.0.1')->success();
$e = rejected(fn() => $k->acquire('10.0.0.1'));
echo get_class($e), "\n";
var_dump($e->retryAfter > 1 && $e->retryAfter <= 60);
echo "another key: ", get_class($k->acquire('10.0.0.2')), "\n";
echo "a binary key: ", get_class($k->acquire("\x00\xff\x10")), "\n";
--EXPECT--
Resil\RateLimited phpt_rej_limit
bool(true)
bool(true)
bool(true)
Resil\BulkheadFull phpt_rej_bulkhead
NULL
after the holders are gone: Resil\Permit
a released permit frees its slot: Resil\Permit
breaker: open
Resil\CircuitOpen phpt_rej_open
bool(true)
Resil\RateLimited
bool(true)
another key: Resil\Permit
a binary key: Resil\Permit

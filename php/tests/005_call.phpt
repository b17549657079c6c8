--TEST--
resil: Policy::call retries by the policy's rules and budget
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* call($fn, ...$args): the policy's retries (delays from resil_retry_next)
 * and retry budget; what is retried and what is not. */
require __DIR__ . '/resil.inc';
$p = Resil\Policy::declare('phpt_call', 'retry.max_attempts = 3; retry.base = 1ms; retry.max_delay = 1s; ' .
    'retry.jitter = none; breaker.window = count:100; breaker.min_calls = 100');
$n = 0;
echo "a success: ", $p->call(function (int $a, int $b) use (&$n) { $n++; return $a + $b; }, 2, 3), " after $n attempt\n";
echo "named arguments: ", $p->call(fn(int $a, int $b) => $a - $b, b: 1, a: 10), "\n";
echo "a method: ", $p->call([new ArrayObject([1, 2, 3]), 'count']), "\n";

$n = 0;
echo "fails twice, then succeeds: ", $p->call(function () use (&$n) {
    if (++$n < 3) {
        throw new RuntimeException("attempt $n failed");
    }
    return "ok";
}), " after $n attempts\n";

$n = 0;
try {
    $p->call(function () use (&$n) { throw new RuntimeException('attempt ' . ++$n . ' failed'); });
} catch (RuntimeException $e) {
    echo "always failing: ", $e->getMessage(), " (the last attempt's exception)\n";
}

$n = 0;
try {
    $p->call(function () use (&$n) { $n++; throw new TypeError('a programming error'); });
} catch (TypeError $e) {
    echo "an \\Error is not retried: $n attempt\n";
}
$inner = Resil\Policy::declare('phpt_call_inner', 'bulkhead.max = 1');
$hold = $inner->acquire();
$n = 0;
try {
    $p->call(function () use (&$n, $inner) { $n++; $inner->acquire(); });
} catch (Resil\BulkheadFull $e) {
    echo "another policy's rejection is not retried: $n attempt\n";
}
$hold = null;

class Throttled extends RuntimeException
{
    public function __construct(public float $retryAfter) { parent::__construct('throttled'); }
}
$n = 0;
$t0 = hrtime(true);
$r = $p->call(function () use (&$n) {
    if (++$n == 1) {
        throw new Throttled(0.2);
    }
    return 'done';
});
$waited = (hrtime(true) - $t0) / 1e9;
echo "a Retry-After is honoured: $r after $n attempts, waited at least 0.2 s: ", var_export($waited >= 0.2, true), "\n";
$c = counters('phpt_call');
printf("counted: success %d, failure %d, ignored %d\n", $c['success'], $c['failure'], $c['ignored']);

/* a budget: aws:30 tokens, 14 per retry after a transient error: two retries, then it refuses */
$b = Resil\Policy::declare('phpt_call_budget', 'retry.max_attempts = 10; retry.base = 1ms; retry.jitter = none; retry.budget = aws:30');
$n = 0;
try {
    $b->call(function () use (&$n) { throw new RuntimeException('attempt ' . ++$n); });
} catch (Resil\BudgetExhausted $e) {
    echo get_class($e), " after $n attempts; previous: ", $e->getPrevious()->getMessage(), "\n";
}
/* a rejected later attempt carries the failure before it */
$o = Resil\Policy::declare('phpt_call_open', 'breaker.window = consecutive:1; breaker.wait = 30s; retry.max_attempts = 3; retry.base = 1ms');
try {
    $o->call(function () { throw new RuntimeException('the first failure'); });
} catch (Resil\CircuitOpen $e) {
    echo get_class($e), "; previous: ", $e->getPrevious()->getMessage(), "\n";
}
--EXPECT--
a success: 5 after 1 attempt
named arguments: 9
a method: 3
fails twice, then succeeds: ok after 3 attempts
always failing: attempt 3 failed (the last attempt's exception)
an \Error is not retried: 1 attempt
another policy's rejection is not retried: 1 attempt
a Retry-After is honoured: done after 2 attempts, waited at least 0.2 s: true
counted: success 5, failure 6, ignored 2
Resil\BudgetExhausted after 3 attempts; previous: attempt 3
Resil\CircuitOpen; previous: the first failure

--TEST--
resil: Resil\Retry, a retry loop decided by the policy
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* Resil\Retry: a retry loop written in PHP (the Guzzle middleware's),
 * decided by the policy: delays, the attempts' limit, Retry-After, the
 * deadline, the reasons. */
$p = Resil\Policy::declare('phpt_retry', 'retry.max_attempts = 3; retry.base = 100ms; retry.multiplier = 2; ' .
    'retry.max_delay = 10s; retry.jitter = none; retry.on.permanent = never');
$rt = $p->retry();
var_dump($rt->next(), $rt->next(Resil\Retry::TIMEOUT), $rt->next());
echo $rt->reason(), "\n";
$rt = $p->retry();
echo "a Retry-After replaces the delay: ", $rt->next(Resil\Retry::THROTTLED, 1.5), "\n";
$rt = $p->retry();
var_dump($rt->next(Resil\Retry::PERMANENT));
echo $rt->reason(), "\n";
$rt = $p->retry();
$rt->success();
echo "after a success: ", $rt->reason(), "\n";
/* a deadline: no attempt starts past it */
$rt = $p->retry(0.05);
var_dump($rt->next());
echo $rt->reason(), "\n";
$rt = $p->retry(0.05);
var_dump($rt->next(Resil\Retry::THROTTLED, 2.0));
echo $rt->reason(), "\n";
--EXPECTF--
float(0.1)
float(0.2)
NULL
3 attempts made (retry.max_attempts)
a Retry-After replaces the delay: 1.5
NULL
permanent error, never retried (retry.on rule 1)
after a success: attempt 1 succeeded
NULL
attempt 2 would start at 100 ms, after the %s ms deadline
NULL
attempt 2 would start at 2 s, after the %s ms deadline

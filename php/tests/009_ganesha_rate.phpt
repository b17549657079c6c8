--TEST--
resil: ganesha's Rate strategy cases on resil's breaker
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* The behaviour cases of ganesha's Rate strategy tests (failure rate over
 * a time window, minimum requests, interval to half-open), ported to
 * resil's breaker with the keys docs/php.md maps them to:
 *   timeWindow T          breaker.window = time:T
 *   failureRateThreshold  breaker.failure_rate
 *   minimumRequests       breaker.min_calls
 *   intervalToHalfOpen    breaker.wait (one probe: breaker.half_open_calls = 1)
 * isAvailable() is acquire() admitting, success()/failure() the permit's.
 * The cases that do not map are listed in docs/php.md with the reason. */
require __DIR__ . '/resil.inc';
function available(Resil\Policy $p): bool
{
    try {
        $p->acquire()->ignore();
        return true;
    } catch (Resil\CircuitOpen $e) {
        return false;
    }
}
function rate(string $name, int $window, int $rate, int $min, string $wait): Resil\Policy
{
    return Resil\Policy::declare($name, "breaker.window = time:{$window}s; breaker.failure_rate = $rate; " .
        "breaker.min_calls = $min; breaker.wait = $wait; breaker.half_open_calls = 1");
}

echo "-- withRateStrategy: 3 failures and 2 successes over 50% trip it\n";
$g = rate('phpt_g_rate', 3, 50, 1, '10s');
var_dump(available($g));
$permits = [$g->acquire(), $g->acquire(), $g->acquire(), $g->acquire(), $g->acquire()];
$permits[0]->failure();
$permits[1]->failure();
$permits[2]->failure();
$permits[3]->success();
$permits[4]->success();
var_dump(available($g));

echo "-- recordsFailureAndTrips: it does not affect other services\n";
var_dump(available(rate('phpt_g_other', 3, 50, 1, '10s')));

echo "-- below minimumRequests nothing trips, the call that reaches it does\n";
$g = rate('phpt_g_min', 10, 50, 10, '10s');
for ($i = 0; $i < 9; $i++) {
    $g->acquire()->failure();
}
var_dump(available($g));
$g->acquire()->failure();
var_dump(available($g));

echo "-- under failureRateThreshold it stays closed, at it it trips\n";
$g = rate('phpt_g_threshold', 10, 50, 4, '10s');
$g->acquire()->failure();
$g->acquire()->success();
$g->acquire()->success();
$g->acquire()->success();
var_dump(available($g));
$g->acquire()->failure();
var_dump(available($g));
$g->acquire()->failure();
var_dump(available($g));

echo "-- withIntervalToHalfOpen: one call after the interval, none beside it; its success closes\n";
$g = rate('phpt_g_half', 10, 50, 1, '1s');
$g->acquire()->failure();
var_dump(available($g));
usleep(1100000);
$probe = $g->acquire();
echo "half-open: ", $g->state(), "\n";
var_dump(available($g));
$probe->success();
echo "after the probe's success: ", $g->state(), "\n";
var_dump(available($g));

echo "-- outdatedCountsShouldBeEvicted: failures older than the window do not count\n";
$g = rate('phpt_g_window', 1, 50, 3, '10s');
$g->acquire()->failure();
$g->acquire()->failure();
usleep(1200000);
$g->acquire()->success();
var_dump(available($g));

echo "-- disable: a disabled breaker admits (resilctl disable)\n";
$g = rate('phpt_g_disable', 3, 50, 1, '10s');
$g->acquire()->failure();
var_dump(available($g));
resilctl('disable', 'phpt_g_disable');
var_dump(available($g));

echo "-- reset: available again (resilctl reset)\n";
$g = rate('phpt_g_reset', 3, 50, 1, '10s');
$g->acquire()->failure();
var_dump(available($g));
resilctl('reset', 'phpt_g_reset');
var_dump(available($g));

echo "-- validate: an invalid setting is a ValueError\n";
foreach (['breaker.failure_rate = 0', 'breaker.failure_rate = 101', 'breaker.window = time:0s', 'breaker.wait = soon'] as $bad) {
    try {
        Resil\Policy::declare('phpt_g_invalid', $bad);
    } catch (ValueError $e) {
        echo "ValueError: $bad\n";
    }
}
--EXPECT--
-- withRateStrategy: 3 failures and 2 successes over 50% trip it
bool(true)
bool(false)
-- recordsFailureAndTrips: it does not affect other services
bool(true)
-- below minimumRequests nothing trips, the call that reaches it does
bool(true)
bool(false)
-- under failureRateThreshold it stays closed, at it it trips
bool(true)
bool(true)
bool(false)
-- withIntervalToHalfOpen: one call after the interval, none beside it; its success closes
bool(false)
half-open: half-open
bool(false)
after the probe's success: closed
bool(true)
-- outdatedCountsShouldBeEvicted: failures older than the window do not count
bool(true)
-- disable: a disabled breaker admits (resilctl disable)
bool(false)
bool(true)
-- reset: available again (resilctl reset)
bool(false)
bool(true)
-- validate: an invalid setting is a ValueError
ValueError: breaker.failure_rate = 0
ValueError: breaker.failure_rate = 101
ValueError: breaker.window = time:0s
ValueError: breaker.wait = soon

<?php
/*
 * A PHP CLI worker (a queue consumer, cron): one bulkhead for every
 * process of the host that talks to the mail relay, and the relay's own
 * retries with a budget shared by all of them.
 *
 *   php -d extension=resil.so worker.php
 */
declare(strict_types=1);

$relay = Resil\Policy::declare('mail-relay',
    'bulkhead.max = 8; retry.max_attempts = 4; retry.base = 200ms; retry.budget = aws:500');

function send(string $to): void
{
    /* talk to the relay; throw on failure */
}

foreach (['a@example.org', 'b@example.org'] as $to) {
    try {
        /* acquire, call, report, retry by the policy: one line */
        $relay->call('send', $to);
    } catch (Resil\BulkheadFull $e) {
        /* eight sends in flight on this host already: requeue */
    } catch (Resil\BudgetExhausted $e) {
        /* the relay fails for everyone: stop retrying, requeue */
    }
}

/* by hand: the permit's outcome is reported once, or by its destructor */
$permit = $relay->acquire();
try {
    send('c@example.org');
    $permit->success();
} catch (Throwable $e) {
    $permit->failure();
    throw $e;
}

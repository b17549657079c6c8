<?php
/*
 * A PHP-FPM front controller using resil (docs/php.md): every worker of
 * every pool of the host shares these policies through resild.
 *
 *   - at most 100 requests a minute per client address (bursts of 20),
 *     429 with Retry-After beyond, the address taken from X-Forwarded-For
 *     only when the peer is our own proxy;
 *   - the payments API behind a breaker, a limiter and retries of its
 *     own, called with Guzzle.
 *
 * The declarations run on every request: after a worker's first, an
 * identical declaration costs nothing (no round trip to resild), and
 * operators' settings (files, resilctl) win over them.
 */
declare(strict_types=1);

require 'GuzzleHttp/autoload.php';   /* Debian: php-guzzlehttp-guzzle */
require 'Resil/autoload.php';        /* Debian: php-resil */

$perIp = Resil\Policy::declare('web-per-ip', 'limit.rate = 100/m; limit.burst = 20; limit.keys = 100000');
$client = (new Resil\Http\ClientIp(['10.0.0.0/8']))->of($_SERVER['REMOTE_ADDR'] ?? '',
    $_SERVER['HTTP_X_FORWARDED_FOR'] ?? '');
try {
    $request = $perIp->acquire($client);
} catch (Resil\RateLimited $e) {
    http_response_code(429);
    header('Retry-After: ' . max(1, (int)ceil($e->retryAfter)));
    exit;
}

$stack = GuzzleHttp\HandlerStack::create();
$stack->push(new Resil\Http\GuzzleMiddleware('payments:{host}',
    'breaker.window = count:50; breaker.min_calls = 20; breaker.failure_rate = 50; breaker.wait = 10s; ' .
    'limit.rate = 200/s; limit.burst = 50; retry.max_attempts = 3; retry.base = 100ms; retry.budget = ratio:10'));
$payments = new GuzzleHttp\Client(['handler' => $stack, 'timeout' => 2.0, 'http_errors' => false,
    'base_uri' => 'http://payments.internal']);

try {
    $r = $payments->get('/v1/balance');
    header('Content-Type: application/json');
    echo $r->getBody();
} catch (Resil\CircuitOpen $e) {
    /* the payments API is down for the whole host: answer from what we have */
    http_response_code(503);
    header('Retry-After: ' . max(1, (int)ceil($e->retryAfter ?? 10)));
    echo "payments are unavailable, try again later\n";
} catch (Resil\Rejected $e) {
    http_response_code(503);
    echo "busy\n";
}
/* $request is released when the script ends: a success, or a failure if
 * an exception ended it */

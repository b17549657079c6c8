<?php
/*
 * The application the PHP-FPM tests call through nginx: each path is one
 * use of the extension and of its PHP layer, as an application writes it
 * (declarations at the top of the request; a worker declares them again
 * on every request, which costs nothing after its first).
 */
declare(strict_types=1);

require 'GuzzleHttp/autoload.php';
require getenv('RESIL_PHP_SRC') . '/autoload.php';
require __DIR__ . '/../psr15.php';

use GuzzleHttp\Psr7\HttpFactory;
use GuzzleHttp\Psr7\Response;
use GuzzleHttp\Psr7\ServerRequest;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Server\RequestHandlerInterface;

function emit(ResponseInterface $r): void
{
    http_response_code($r->getStatusCode());
    foreach ($r->getHeaders() as $name => $values) {
        foreach ($values as $v) {
            header("$name: $v", false);
        }
    }
    echo $r->getBody();
}

function answer(int $status, array $body): void
{
    http_response_code($status);
    header('Content-Type: application/json');
    echo json_encode($body + ['pid' => getmypid(), 'attached' => Resil\attached()]);
}

$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
switch ($path) {
case '/limit':
    /* a per-client limit for the whole pool (PSR-15) */
    $limit = Resil\Policy::declare('php_fpm_per_ip', 'limit.rate = 20/s; limit.burst = 5; limit.keys = 1024');
    $app = new class implements RequestHandlerInterface {
        public function handle(ServerRequestInterface $request): ResponseInterface
        {
            return new Response(200, ['X-Worker' => (string)getmypid()], "ok\n");
        }
    };
    emit((new Resil\Http\RateLimitMiddleware(new HttpFactory(), $limit))->process(ServerRequest::fromGlobals(), $app));
    break;

case '/upstream':
    /* a breaker per upstream host around Guzzle; the timeout bounds the
     * retries and the Retry-After honoured */
    $stack = GuzzleHttp\HandlerStack::create();
    $retrying = isset($_GET['retry']);
    $stack->push(new Resil\Http\GuzzleMiddleware($retrying ? 'php_fpm_retry:{host}' : 'php_fpm_up:{host}',
        getenv($retrying ? 'RESIL_TEST_RETRY_POLICY' : 'RESIL_TEST_POLICY')));
    $client = new GuzzleHttp\Client(['handler' => $stack, 'timeout' => (float)($_GET['timeout'] ?? 5),
        'http_errors' => false]);
    /* ?serial: the pool's workers call one at a time (a lock file), so
     * that each acquires its permit only once the previous call's outcome
     * is recorded: no call is ever in flight when the breaker opens */
    $serial = isset($_GET['serial']) ? fopen(getenv('RESIL_TEST_TMP') . '/serial.lock', 'c') : null;
    if ($serial) {
        flock($serial, LOCK_EX);
    }
    $t = hrtime(true);
    try {
        $r = $client->get('http://127.0.0.1:' . getenv('RESIL_TEST_UPSTREAM') . ($_GET['path'] ?? '/'));
        answer(200, ['upstream' => $r->getStatusCode(), 'seconds' => (hrtime(true) - $t) / 1e9]);
    } catch (Resil\Rejected $e) {
        answer(503, ['rejected' => get_class($e), 'retryAfter' => $e->retryAfter]);
    } catch (GuzzleHttp\Exception\TransferException $e) {
        answer(502, ['error' => $e->getMessage()]);
    } finally {
        if ($serial) {
            flock($serial, LOCK_UN);
        }
    }
    break;

case '/hold':
case '/try':
    /* one call at a time for the whole pool */
    $b = Resil\Policy::declare('php_fpm_bulkhead', 'bulkhead.max = 1');
    try {
        $permit = $b->acquire();
    } catch (Resil\BulkheadFull $e) {
        answer(503, ['rejected' => get_class($e)]);
        break;
    }
    if ($path === '/hold') {
        file_put_contents(getenv('RESIL_TEST_TMP') . '/holder', (string)getmypid());
        sleep(100);
    }
    answer(200, ['admitted' => true]);
    break;

case '/fallback':
    /* declared before resild runs: decided by the worker's own copy */
    $p = Resil\Policy::declare('php_fpm_fallback', 'limit.rate = 1/h; limit.burst = 2');
    try {
        $p->acquire()->success();
        answer(200, ['admitted' => true, 'pending' => $p->pendingStats()]);
    } catch (Resil\Rejected $e) {
        answer(429, ['admitted' => false, 'rejected' => get_class($e), 'pending' => $p->pendingStats()]);
    }
    break;

default:
    answer(404, ['error' => "no route $path"]);
}

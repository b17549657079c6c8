<?php

declare(strict_types=1);

namespace Resil\Http;

use GuzzleHttp\Exception\ConnectException;
use GuzzleHttp\Exception\RequestException;
use GuzzleHttp\Promise\Create;
use GuzzleHttp\Promise\PromiseInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\UriInterface;
use Resil\Policy;
use Resil\Rejected;
use Resil\Retry;

/**
 * A Guzzle middleware: a resil policy per upstream host (its breaker, its
 * limiter, its retries and retry budget), shared by every PHP worker of
 * the host through resild:
 *
 *   $stack = GuzzleHttp\HandlerStack::create();
 *   $stack->push(new Resil\Http\GuzzleMiddleware('upstream:{host}',
 *       'breaker.window = count:20; breaker.min_calls = 10; breaker.wait = 10s; retry.max_attempts = 3'));
 *   $client = new GuzzleHttp\Client(['handler' => $stack, 'timeout' => 5]);
 *
 * Each attempt takes a permit of the host's policy: a refusal rejects the
 * request with the Resil\Rejected (CircuitOpen, RateLimited, ...) before
 * anything is sent. The permit is released with the answer's status by
 * the policy's breaker.record rules (5xx, 408 and 429 fail, other 4xx are
 * ignored), a transport error (refused, reset, timed out) as a failure.
 * Failed idempotent requests (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; any
 * method with $retryAll) are retried by the policy's retry.* rules and
 * budget: 429 and 503 as throttling, other 5xx, 408 and transport errors
 * as transient, a timeout as a timeout. An answer's Retry-After replaces
 * the computed delay, within the request's 'timeout': no attempt starts
 * past it, so a Retry-After longer than the time left returns the answer
 * at once instead of sleeping past the caller's deadline.
 */
final class GuzzleMiddleware
{
    private const IDEMPOTENT = ['GET' => true, 'HEAD' => true, 'OPTIONS' => true, 'TRACE' => true,
        'PUT' => true, 'DELETE' => true];

    /** @var array<string, Policy> by host */
    private array $policies = [];

    /**
     * @param string $name the policy of an upstream; "{host}" stands for its host[:port]
     * @param ?string $config declared for each upstream's policy; null: the policies exist (files, resilctl)
     * @param bool $retryAll retry requests of any method, not only the idempotent ones
     */
    public function __construct(
        private string $name = 'http:{host}',
        private ?string $config = null,
        private bool $retryAll = false,
    ) {
    }

    /** The policy of an upstream. */
    public function policyFor(UriInterface $uri): Policy
    {
        $host = $uri->getHost() . ($uri->getPort() !== null ? ':' . $uri->getPort() : '');
        if (!isset($this->policies[$host])) {
            $name = str_replace('{host}', preg_replace('/[^A-Za-z0-9_.:-]/', '_', $host), $this->name);
            if (strlen($name) > 63) {
                $name = substr($name, 0, 54) . '-' . hash('crc32b', $name);
            }
            $this->policies[$host] = $this->config !== null ? Policy::declare($name, $this->config) : Policy::get($name);
        }
        return $this->policies[$host];
    }

    public function __invoke(callable $handler): callable
    {
        return function (RequestInterface $request, array $options) use ($handler): PromiseInterface {
            $policy = $this->policyFor($request->getUri());
            $timeout = (float)($options['timeout'] ?? 0);
            $call = new \stdClass();
            $call->handler = $handler;
            $call->policy = $policy;
            $call->retry = $policy->retry($timeout > 0 ? $timeout : null);
            $call->deadline = $timeout > 0 ? hrtime(true) + (int)($timeout * 1e9) : null;
            $call->retryable = $this->retryAll || isset(self::IDEMPOTENT[strtoupper($request->getMethod())]);
            return $this->attempt($call, $request, $options);
        };
    }

    private function attempt(\stdClass $call, RequestInterface $request, array $options): PromiseInterface
    {
        try {
            $permit = $call->policy->acquire();
        } catch (Rejected $e) {
            return Create::rejectionFor($e);
        }
        if ($call->deadline !== null) {
            /* what is left of the request's timeout, after the delay */
            $left = ($call->deadline - hrtime(true)) / 1e9 - ($options['delay'] ?? 0) / 1000;
            $options['timeout'] = max(0.001, $left);
        }
        try {
            $promise = ($call->handler)($request, $options);
        } catch (\Throwable $e) {
            $permit->failure();
            throw $e;
        }
        return $promise->then(
            function (ResponseInterface $response) use ($call, $request, $options, $permit) {
                $permit->releaseHttp($response->getStatusCode());
                return $this->answered($call, $request, $options, $response, null);
            },
            function ($reason) use ($call, $request, $options, $permit) {
                $response = $reason instanceof RequestException ? $reason->getResponse() : null;
                if ($response !== null) {
                    $permit->releaseHttp($response->getStatusCode());
                    return $this->answered($call, $request, $options, $response, $reason);
                }
                $permit->failure();
                $timedOut = $reason instanceof ConnectException && stripos($reason->getMessage(), 'timed out') !== false;
                return $this->again($call, $request, $options, $timedOut ? Retry::TIMEOUT : Retry::TRANSIENT, null,
                    Create::rejectionFor($reason));
            }
        );
    }

    /** After an answer (a response, or the rejection http_errors made of it). */
    private function answered(\stdClass $call, RequestInterface $request, array $options,
                              ResponseInterface $response, mixed $reason): mixed
    {
        $status = $response->getStatusCode();
        $final = $reason !== null ? Create::rejectionFor($reason) : $response;
        if ($status < 500 && $status !== 408 && $status !== 429) {
            $call->retry->success();
            return $final;
        }
        $class = $status === 429 || $status === 503 ? Retry::THROTTLED : Retry::TRANSIENT;
        return $this->again($call, $request, $options, $class, self::retryAfter($response), $final);
    }

    private function again(\stdClass $call, RequestInterface $request, array $options, int $class,
                           ?float $retryAfter, mixed $final): mixed
    {
        $delay = $call->retryable ? $call->retry->next($class, $retryAfter) : null;
        if ($delay === null) {
            return $final;
        }
        $options['delay'] = $delay * 1000;
        return $this->attempt($call, $request, $options);
    }

    /** Retry-After in seconds: delta-seconds or an HTTP date; null without one. */
    public static function retryAfter(ResponseInterface $response): ?float
    {
        $v = trim($response->getHeaderLine('Retry-After'));
        if ($v === '') {
            return null;
        }
        if (preg_match('/^[0-9]+$/', $v)) {
            return min(86400.0, (float)$v);
        }
        $t = strtotime($v);
        return $t === false ? null : (float)min(86400, max(0, $t - time()));
    }
}

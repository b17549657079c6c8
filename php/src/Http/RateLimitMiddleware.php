<?php

declare(strict_types=1);

namespace Resil\Http;

use Psr\Http\Message\ResponseFactoryInterface;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Server\MiddlewareInterface;
use Psr\Http\Server\RequestHandlerInterface;
use Resil\Policy;
use Resil\RateLimited;
use Resil\Rejected;

/**
 * A PSR-15 middleware that admits each request through a resil policy,
 * keyed per client (the client's address through trusted proxies, or an
 * API key header), one limit for every worker of every pool of the host:
 *
 *   $limit = Resil\Policy::declare('api-per-ip', 'limit.rate = 100/m; limit.burst = 20; limit.keys = 100000');
 *   $mw = new Resil\Http\RateLimitMiddleware($responseFactory, $limit, trustedProxies: ['10.0.0.0/8']);
 *
 * A rate-limited request gets 429 with Retry-After (whole seconds, at
 * least 1); another refusal (an open breaker, a full bulkhead) 503, with
 * Retry-After when the policy knows it. An admitted request's permit is
 * released with the handler's status (the policy's breaker.record rules:
 * 5xx fail, other 4xx are ignored), or as a failure when the handler
 * throws.
 */
final class RateLimitMiddleware implements MiddlewareInterface
{
    private Policy $policy;
    private ClientIp $clientIp;

    /**
     * @param Policy|string $policy the policy, or the name of one declared elsewhere
     * @param ?string $keyHeader key by this header (an API key); requests without it are keyed by address
     * @param list<string> $trustedProxies addresses or networks whose X-Forwarded-For is believed
     */
    public function __construct(
        private ResponseFactoryInterface $responses,
        Policy|string $policy,
        private ?string $keyHeader = null,
        array $trustedProxies = [],
        private int $limitedStatus = 429,
        private int $rejectedStatus = 503,
    ) {
        $this->policy = is_string($policy) ? Policy::get($policy) : $policy;
        $this->clientIp = new ClientIp($trustedProxies);
    }

    /** The key a request is counted under: "key:" and the header's value, or "ip:" and the address. */
    public function keyOf(ServerRequestInterface $request): string
    {
        if ($this->keyHeader !== null) {
            $key = $request->getHeaderLine($this->keyHeader);
            if ($key !== '') {
                return 'key:' . $key;
            }
        }
        return 'ip:' . $this->clientIp->ofRequest($request);
    }

    public function process(ServerRequestInterface $request, RequestHandlerInterface $handler): ResponseInterface
    {
        try {
            // a key for a keyed limiter only: any other policy refuses one
            $permit = $this->policy->acquire($this->policy->keyed() ? $this->keyOf($request) : null);
        } catch (Rejected $e) {
            $status = $e instanceof RateLimited ? $this->limitedStatus : $this->rejectedStatus;
            $response = $this->responses->createResponse($status);
            if ($e->retryAfter !== null) {
                $response = $response->withHeader('Retry-After', (string)max(1, (int)ceil($e->retryAfter)));
            }
            return $response;
        }
        try {
            $response = $handler->handle($request);
        } catch (\Throwable $e) {
            $permit->failure();
            throw $e;
        }
        $permit->releaseHttp($response->getStatusCode());
        return $response;
    }
}

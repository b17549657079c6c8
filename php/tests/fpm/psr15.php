<?php
/* The PSR-15 interfaces (psr/http-server-handler and
 * psr/http-server-middleware, as published by PHP-FIG): Debian packages
 * PSR-7 and PSR-17 but not these two, so the test harness declares them;
 * an application gets them from Composer. */
namespace Psr\Http\Server;

use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;

if (!interface_exists(RequestHandlerInterface::class)) {
    interface RequestHandlerInterface
    {
        public function handle(ServerRequestInterface $request): ResponseInterface;
    }
}

if (!interface_exists(MiddlewareInterface::class)) {
    interface MiddlewareInterface
    {
        public function process(ServerRequestInterface $request, RequestHandlerInterface $handler): ResponseInterface;
    }
}

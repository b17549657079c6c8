"""resil for httpx: transports that put every request to an upstream host
under that host's policy (breaker, limiter, bulkhead, retries, budget),
shared by every process on the host through resild.

    import httpx, resil, resil.httpx

    r = resil.open()
    r.define("payments", "breaker.window = consecutive:5; breaker.wait = 30s;"
                         "retry.max_attempts = 3; retry.budget = grpc:10:0.1")
    client = httpx.Client(transport=resil.httpx.ResilTransport(
        policies={"payments.internal": r.policy("payments")}))

An answer is a failure or a success for the breaker by its status (the
policy's breaker.record mapping: 5xx, 408 and 429 fail by default); a
transport exception is a failure. Idempotent methods (GET, HEAD, OPTIONS,
PUT, DELETE, TRACE) are retried by the policy's retry.* rules and budget,
others only with retry_methods=...; 429 and 503 count as throttling and
their Retry-After (seconds or an HTTP date) is honoured. A refusal raises
the resil.Rejected subclass (CircuitOpen, RateLimited, ...) to the caller.
"""

from __future__ import annotations

import email.utils
import time
from typing import Callable, Iterable, Mapping, Optional, Union

import httpx

import resil

__all__ = ["ResilTransport", "AsyncResilTransport", "IDEMPOTENT"]

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
THROTTLING = frozenset({429, 503})

PolicySpec = Union[resil.Policy, str]


def retry_after_ns(response: httpx.Response) -> int:
    """Retry-After of an answer in ns (seconds or an HTTP date), 0 if none."""
    v = response.headers.get("retry-after")
    if not v:
        return 0
    try:
        return max(0, int(float(v) * 1e9))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError):
        return 0
    return max(0, int((when - time.time()) * 1e9))


class _Base:
    def __init__(self, transport, *, policy: Optional[PolicySpec] = None,
                 policies: Optional[Mapping[str, PolicySpec]] = None,
                 handle: Optional[resil.Resil] = None,
                 policy_for: Optional[Callable[[str], Optional[PolicySpec]]] = None,
                 retry_methods: Iterable[str] = IDEMPOTENT) -> None:
        """transport: the one to wrap. The policy of a request: `policy_for(host)`,
        else `policies[host]`, else `policy`, else none (passed through).
        Names are resolved through `handle`. retry_methods: the methods
        retried ("*": all)."""
        self._transport = transport
        self._handle = handle
        self._default = policy
        self._policies = dict(policies or {})
        self._policy_for = policy_for
        self._retry_all = retry_methods == "*"
        self._retry_methods = frozenset(m.upper() for m in retry_methods) \
            if not self._retry_all else frozenset()
        self._cache: dict = {}

    def _resolve(self, spec: Optional[PolicySpec]) -> Optional[resil.Policy]:
        if spec is None or isinstance(spec, resil.Policy):
            return spec
        p = self._cache.get(spec)
        if p is None:
            if self._handle is None:
                raise ValueError(f"policy {spec!r} named without a handle=")
            p = self._cache[spec] = self._handle.policy(spec)
        return p

    def policy_of(self, request: httpx.Request) -> Optional[resil.Policy]:
        host = request.url.host
        spec = self._policy_for(host) if self._policy_for else None
        if spec is None:
            spec = self._policies.get(host, self._default)
        return self._resolve(spec)

    def _retries(self, request: httpx.Request) -> bool:
        return self._retry_all or request.method.upper() in self._retry_methods

    @staticmethod
    def _answer_class(status: int) -> int:
        if status in THROTTLING:
            return resil.ERR_THROTTLED
        if status >= 500 or status == 408:
            return resil.ERR_TRANSIENT
        return resil.ERR_NONE


class ResilTransport(_Base, httpx.BaseTransport):
    """A synchronous transport wrapping `transport` (default
    httpx.HTTPTransport()) under a policy per upstream host."""

    def __init__(self, transport: Optional[httpx.BaseTransport] = None, **kw) -> None:
        super().__init__(transport or httpx.HTTPTransport(), **kw)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        p = self.policy_of(request)
        if p is None:
            return self._transport.handle_request(request)
        rt = p._retry()
        again = self._retries(request)
        while True:
            permit = p.acquire()
            try:
                response = self._transport.handle_request(request)
            except Exception as exc:
                permit.release(p.outcome_of(type(exc), exc))
                d = rt.next(p.error_class(exc), 0) if again else -1
                if d < 0:
                    raise
                p.handle.sleep_ns(d)
                continue
            permit.release(p.outcome_http(response.status_code))
            cls = self._answer_class(response.status_code)
            if cls == resil.ERR_NONE or not again:
                if cls == resil.ERR_NONE:
                    rt.next(resil.ERR_NONE)
                return response
            d = rt.next(cls, retry_after_ns(response))
            if d < 0:
                return response
            response.close()
            p.handle.sleep_ns(d)

    def close(self) -> None:
        self._transport.close()


class AsyncResilTransport(_Base, httpx.AsyncBaseTransport):
    """The asyncio twin of ResilTransport (default httpx.AsyncHTTPTransport())."""

    def __init__(self, transport: Optional[httpx.AsyncBaseTransport] = None, **kw) -> None:
        super().__init__(transport or httpx.AsyncHTTPTransport(), **kw)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        p = self.policy_of(request)
        if p is None:
            return await self._transport.handle_async_request(request)
        rt = p._retry()
        again = self._retries(request)
        while True:
            permit = p.acquire()
            try:
                response = await self._transport.handle_async_request(request)
            except Exception as exc:
                permit.release(p.outcome_of(type(exc), exc))
                d = rt.next(p.error_class(exc), 0) if again else -1
                if d < 0:
                    raise
                await p.handle.asleep_ns(d)
                continue
            permit.release(p.outcome_http(response.status_code))
            cls = self._answer_class(response.status_code)
            if cls == resil.ERR_NONE or not again:
                if cls == resil.ERR_NONE:
                    rt.next(resil.ERR_NONE)
                return response
            d = rt.next(cls, retry_after_ns(response))
            if d < 0:
                return response
            await response.aclose()
            await p.handle.asleep_ns(d)

    async def aclose(self) -> None:
        await self._transport.aclose()

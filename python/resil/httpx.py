"""resil for httpx: transports that put every request to an upstream host
under that host's policy (breaker, limiter, bulkhead, retries, budget),
shared by every process on the host through resild.

    import httpx, resil, resil.httpx

    r = resil.open()
    r.define("payments", "breaker.window = consecutive:5; breaker.wait = 30s;"
                         "retry.max_attempts = 3; retry.budget = grpc:10:0.1")
    client = httpx.Client(transport=resil.httpx.ResilTransport(
        policies={"payments.internal": r.policy("payments")}), timeout=5)

An answer is a failure or a success for the breaker by its status (the
policy's breaker.record mapping: 5xx, 408 and 429 fail by default); a
transport exception is a failure. Idempotent methods (GET, HEAD, OPTIONS,
PUT, DELETE, TRACE) are retried by the policy's retry.* rules and budget,
others only with retry_methods=...; 429 and 503 count as throttling and
their Retry-After (seconds or an HTTP date) is honoured. A refusal raises
the resil.Rejected subclass (CircuitOpen, RateLimited, ...) to the caller.

Time: a request never takes longer than its timeout (the longest of
httpx's connect, read, write and pool timeouts, counted from the start of
the request) nor the policy's `deadline`, waits included: a wait for a
permit (bulkhead.wait, limit.wait) longer than what is left raises
httpx.PoolTimeout; each attempt's own timeouts shrink to what is left; a
Retry-After longer than what is left raises resil.Throttled at once,
carrying the dependency's `retry_after` and its answer.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Union, cast

import httpx

import resil

__all__ = ["ResilTransport", "AsyncResilTransport", "IDEMPOTENT", "retry_after_ns"]

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


def _budget(request: httpx.Request) -> Optional[float]:
    """The request's time in seconds: the longest of its timeouts (None:
    unbounded)."""
    t = request.extensions.get("timeout")
    if not isinstance(t, dict):
        return None
    vals = [v for v in t.values() if isinstance(v, (int, float))]
    return max(vals) if vals else None


class _Attempts:
    """The bounds of one request's attempts: its end on the policy's clock
    (the request's timeout and the policy's deadline, whichever ends
    first), and the retry loop that ends there."""

    def __init__(self, p: resil.Policy, request: httpx.Request) -> None:
        self.p, self.request = p, request
        budget = _budget(request)
        if p.deadline is not None and (budget is None or p.deadline < budget):
            budget = p.deadline
        self.budget = budget
        self.h = p.handle
        self.end_ns = None if budget is None else self.h.now_ns() + int(budget * 1e9)
        self.rt = p._retry(budget)
        self.timeouts = request.extensions.get("timeout")

    def left(self) -> Optional[float]:
        """Seconds left (None: unbounded)."""
        if self.end_ns is None:
            return None
        return max(0.0, (self.end_ns - self.h.now_ns()) / 1e9)

    def acquire(self) -> resil.Permit:
        try:
            return self.p.acquire_within(self.left())
        except TimeoutError as e:
            raise httpx.PoolTimeout(f"{self.p.name}: {e}", request=self.request) from None

    async def acquire_async(self) -> resil.Permit:
        try:
            return await self.p.acquire_async(timeout=self.left())
        except TimeoutError:
            raise httpx.PoolTimeout(f"{self.p.name}: no permit within the request's time",
                                    request=self.request) from None

    def shrink(self) -> None:
        """This attempt's own timeouts: at most what is left."""
        left = self.left()
        if left is None or not isinstance(self.timeouts, dict):
            return
        cast(Dict[str, Any], self.request.extensions)["timeout"] = {
            k: (left if v is None or (isinstance(v, (int, float)) and v > left) else v)
            for k, v in self.timeouts.items()}

    def after_answer(self, response: httpx.Response, cls: int) -> int:
        """The delay before the next attempt after a throttling or failing
        answer (ns), or -1: answer with it. Raises Throttled when the
        dependency asks for longer than the request has left."""
        ra = retry_after_ns(response)
        d = self.rt.next(cls, ra)
        if d < 0 and ra > 0 and self.end_ns is not None and \
                self.h.now_ns() + ra >= self.end_ns:
            raise resil.Throttled(self.p.name, ra / 1e9, response.status_code, response)
        return d


class _Base:
    def __init__(self, transport: Any, *, policy: Optional[PolicySpec] = None,
                 policies: Optional[Mapping[str, PolicySpec]] = None,
                 handle: Optional[resil.Resil] = None,
                 policy_for: Optional[Callable[[str], Optional[PolicySpec]]] = None,
                 retry_methods: Union[Iterable[str], str] = IDEMPOTENT) -> None:
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
        self._cache: Dict[str, resil.Policy] = {}

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

    def __init__(self, transport: Optional[httpx.BaseTransport] = None, **kw: Any) -> None:
        super().__init__(transport or httpx.HTTPTransport(), **kw)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        inner: httpx.BaseTransport = self._transport
        p = self.policy_of(request)
        if p is None:
            return inner.handle_request(request)
        at = _Attempts(p, request)
        again = self._retries(request)
        while True:
            permit = at.acquire()
            at.shrink()
            try:
                response = inner.handle_request(request)
            except Exception as exc:
                permit.release(p.outcome_of(type(exc), exc))
                d = at.rt.next(p.error_class(exc), 0) if again else -1
                if d < 0:
                    raise
                at.h.sleep_ns(d)
                continue
            permit.release(p.outcome_http(response.status_code))
            cls = self._answer_class(response.status_code)
            if cls == resil.ERR_NONE or not again:
                if cls == resil.ERR_NONE:
                    at.rt.next(resil.ERR_NONE)
                return response
            try:
                d = at.after_answer(response, cls)
            except resil.Throttled:
                response.close()
                raise
            if d < 0:
                return response
            response.close()
            at.h.sleep_ns(d)

    def close(self) -> None:
        self._transport.close()


class AsyncResilTransport(_Base, httpx.AsyncBaseTransport):
    """The asyncio twin of ResilTransport (default httpx.AsyncHTTPTransport()):
    a wait for a permit never blocks the loop (Policy.acquire_async)."""

    def __init__(self, transport: Optional[httpx.AsyncBaseTransport] = None,
                 **kw: Any) -> None:
        super().__init__(transport or httpx.AsyncHTTPTransport(), **kw)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        inner: httpx.AsyncBaseTransport = self._transport
        p = self.policy_of(request)
        if p is None:
            return await inner.handle_async_request(request)
        at = _Attempts(p, request)
        again = self._retries(request)
        while True:
            permit = await at.acquire_async()
            at.shrink()
            try:
                response = await inner.handle_async_request(request)
            except Exception as exc:
                permit.release(p.outcome_of(type(exc), exc))
                d = at.rt.next(p.error_class(exc), 0) if again else -1
                if d < 0:
                    raise
                await at.h.asleep_ns(d)
                continue
            except BaseException:  # cancelled: the dependency never judged it
                permit.release(resil.IGNORED)
                raise
            permit.release(p.outcome_http(response.status_code))
            cls = self._answer_class(response.status_code)
            if cls == resil.ERR_NONE or not again:
                if cls == resil.ERR_NONE:
                    at.rt.next(resil.ERR_NONE)
                return response
            try:
                d = at.after_answer(response, cls)
            except resil.Throttled:
                await response.aclose()
                raise
            if d < 0:
                return response
            await response.aclose()
            await at.h.asleep_ns(d)

    async def aclose(self) -> None:
        await self._transport.aclose()

"""resil for Django: a rate-limit middleware and view decorators, with the
limit shared by every worker of the host (gunicorn, uwsgi, uvicorn)
through resild.

settings.py:

    MIDDLEWARE = [..., "resil.django.RateLimitMiddleware", ...]
    RESIL = {"socket": "/run/resild/control.sock"}   # or {"embedded": True}; {} = default socket
                                                     # tests: "clock_file": PATH (set_clock_file)
    RESIL_RATELIMIT = {
        "policy": "per-ip",
        "config": "limit.rate = 100/60s; limit.burst = 100; limit.keys = 65536",
        "key": "ip",              # "ip", "header:X-Api-Key", or a callable(request) -> str
        "exempt": ["/health"],    # path prefixes never limited
        "methods": ["POST"],      # only these methods are limited (default: all)
        "block": True,            # False: let a refused request through, marked
        "response": None,         # callable(request, rejection) -> response, or its dotted path
    }
    RESIL_TRUSTED_PROXIES = ["10.0.0.0/8"]   # X-Forwarded-For counts only from these

A refused request gets 429 with `Retry-After` (whole seconds, rounded up)
and a JSON body {"error": "rate limited", "retry_after": seconds}, or what
the "response" hook answers. With "block": False it reaches the view with
`request.resil_limited` True (every request the middleware sees carries
the attribute) and `request.resil_rejection` the refusal. A `resil.Rejected`
that a view lets escape (a breaker open on a dependency, a full bulkhead)
becomes 503 with `Retry-After` when the policy knows it (429 for a
`RateLimited`), not a 500.

The middleware is sync and async in one class: under ASGI it awaits the
view on the server's loop, and a wait for a permit (bulkhead.wait,
limit.wait) never blocks the loop.

The client IP is REMOTE_ADDR unless REMOTE_ADDR is a trusted proxy: then
X-Forwarded-For is read from the right, skipping trusted proxies, and the
first address no trusted proxy claims to be is the client. A client that
talks to the server directly cannot choose its key by sending the header.
"""

from __future__ import annotations

import functools
import inspect
import ipaddress
import json
import math
import threading
from typing import Any, Awaitable, Callable, Dict, FrozenSet, List, Optional, Tuple, Union, cast

try:
    from asgiref.sync import iscoroutinefunction, markcoroutinefunction
except ImportError:  # asgiref < 3.6 (Django 3.2's own time): the marker it reads
    import asyncio

    iscoroutinefunction = asyncio.iscoroutinefunction

    def markcoroutinefunction(func: Any) -> Any:
        func._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
        return func
from django.conf import settings  # type: ignore[import]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import]
from django.http import HttpRequest, HttpResponse  # type: ignore[import]
from django.utils.module_loading import import_string  # type: ignore[import]

import resil

__all__ = ["RateLimitMiddleware", "ratelimit", "breaker", "client_ip", "handle", "policy",
           "refusal"]

KeySpec = Union[str, Callable[[HttpRequest], Optional[str]]]
View = Callable[..., Any]
ResponseHook = Callable[[HttpRequest, resil.Rejected], HttpResponse]

_lock = threading.Lock()
_handle: Optional[resil.Resil] = None
_policies: Dict[str, resil.Policy] = {}


def handle() -> resil.Resil:
    """This process's resil handle, opened from settings.RESIL on first use
    ({"socket": PATH} or {"embedded": True}; default: $RESIL_SOCKET, then
    /run/resild/control.sock). The handle is pending (resil.open): a
    worker booting while resild is away boots, and its policies decide by
    their policy.fallback until it attaches; {"pending": False} makes the
    boot fail instead. Opened before a fork (gunicorn --preload), it serves
    the workers too. A test facility: {"clock_file": PATH} puts the handle
    on the manual clock in that file (Resil.set_clock_file), so the test
    moves the time of every worker."""
    global _handle
    with _lock:
        if _handle is None:
            conf = getattr(settings, "RESIL", {}) or {}
            if conf.get("embedded"):
                h = resil.open_embedded()
            else:
                h = resil.open(conf.get("socket"), pending=conf.get("pending", True))
            if conf.get("clock_file"):
                h.set_clock_file(conf["clock_file"])
            _handle = h
        return _handle


def policy(name: str, config: Optional[str] = None, **options: Any) -> resil.Policy:
    """The policy `name`, defined with `config` first when given (workers
    declaring the same configuration is fine: an identical define is a
    no-op)."""
    p = _policies.get(name)
    if p is None:
        h = handle()
        if config:
            h.define(name, config)
        p = h.policy(name, **options)
        _policies[name] = p
    return p


# ---- the client's address ----
#
# Whether an address is one of RESIL_TRUSTED_PROXIES, without parsing it
# on every request (ipaddress costs microseconds): an IPv4 address that
# does not begin with the dotted text of a trusted network's whole octets
# ("10." for 10.0.0.0/8, "127.0.0.1" for 127.0.0.1/32) is not in it; one
# that does, and any IPv6 address when an IPv6 network is trusted, is
# checked with ipaddress once and the answer kept. The kept answers are
# about proxies (and addresses inside trusted networks), not about every
# client; the table is emptied when it reaches _TRUST_MAX entries.

_TRUST_MAX = 8192
_nets: Optional[List[Any]] = None
_prefixes: Tuple[str, ...] = ()   # dotted text each trusted IPv4 address begins with
_v6 = False                       # an IPv6 network is trusted
_trust: Dict[str, bool] = {}      # address checked: a trusted proxy?


def _trusted_networks() -> List[Any]:
    global _nets, _prefixes, _v6
    if _nets is None:
        nets = []
        for n in getattr(settings, "RESIL_TRUSTED_PROXIES", []) or []:
            try:
                nets.append(ipaddress.ip_network(n, strict=False))
            except ValueError as e:
                raise ImproperlyConfigured(f"RESIL_TRUSTED_PROXIES: {n!r}: {e}") from e
        prefixes = []
        for net in nets:
            if net.version == 6:
                _v6 = True
            elif net.prefixlen == 32:
                prefixes.append(str(net.network_address))
            else:
                whole = str(net.network_address).split(".")[:net.prefixlen // 8]
                prefixes.append("".join(o + "." for o in whole))
        _trust.clear()
        _prefixes = tuple(prefixes)
        _nets = nets
    return _nets


def _is_trusted(addr: str) -> bool:
    t = _trust.get(addr)
    if t is not None:
        return t
    if _nets is None:
        _trusted_networks()
    if ":" in addr:
        if not _v6:
            return False
    elif not addr.startswith(_prefixes):
        return False
    try:
        ip = ipaddress.ip_address(addr)
        t = any(ip in n for n in cast(List[Any], _nets))
    except ValueError:
        t = False
    if len(_trust) >= _TRUST_MAX:
        _trust.clear()
    _trust[addr] = t
    return t


def client_ip(request: HttpRequest) -> str:
    """The client's address: X-Forwarded-For only through trusted proxies
    (RESIL_TRUSTED_PROXIES), read from the right; when every hop is a
    trusted proxy, the farthest one."""
    meta = request.META
    peer: str = meta.get("REMOTE_ADDR") or ""
    if not _is_trusted(peer):
        return peer
    rest = meta.get("HTTP_X_FORWARDED_FOR")
    hop = peer
    while rest:
        rest, _, h = rest.rpartition(",")
        h = h.strip()
        if h:
            if not _is_trusted(h):
                return cast(str, h)
            hop = h
    return hop


def _key_func(spec: KeySpec) -> Callable[[HttpRequest], Optional[str]]:
    if callable(spec):
        return spec
    if spec == "ip":
        return client_ip
    if isinstance(spec, str) and spec.startswith("header:"):
        meta = "HTTP_" + spec[len("header:"):].strip().upper().replace("-", "_")
        return lambda request: request.META.get(meta) or client_ip(request)
    if isinstance(spec, str) and "." in spec:
        return cast(Callable[[HttpRequest], Optional[str]], import_string(spec))
    raise ImproperlyConfigured(f"resil: key {spec!r}: 'ip', 'header:NAME' or a callable")


# ---- refusals ----

def too_many(retry_after: Optional[float], what: str = "rate limited",
             status: int = 429) -> HttpResponse:
    """A refusal: `status` with Retry-After in whole seconds, rounded up."""
    secs = max(1, math.ceil(retry_after)) if retry_after else None
    body: Dict[str, Any] = {"error": what}
    if secs is not None:
        body["retry_after"] = secs
    resp = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    if secs is not None:
        resp["Retry-After"] = str(secs)
    return resp


_WORDS = {resil.CircuitOpen: "circuit open", resil.BulkheadFull: "too busy",
          resil.Shed: "overloaded", resil.BudgetExhausted: "retry budget exhausted",
          resil.Throttled: "upstream throttled"}


def refusal(e: resil.Rejected) -> HttpResponse:
    """The answer to a refusal: 429 for a rate limit, 503 for the others,
    with Retry-After when the rejection knows it."""
    if isinstance(e, resil.RateLimited):
        return too_many(e.retry_after)
    return too_many(e.retry_after, _WORDS.get(type(e), "refused"), status=503)


def _hook(spec: Union[None, str, ResponseHook]) -> ResponseHook:
    if spec is None:
        return lambda request, e: refusal(e)
    if isinstance(spec, str):
        return cast(ResponseHook, import_string(spec))
    if callable(spec):
        return spec
    raise ImproperlyConfigured(f"resil: response {spec!r}: a callable or its dotted path")


class RateLimitMiddleware:
    """Limits requests by the key of settings.RESIL_RATELIMIT ("policy",
    "config", "key", "exempt", "methods", "block", "response"); a refused
    request gets 429 + Retry-After + JSON (or the hook's answer). Sync and
    async: Django calls it the way the rest of the chain runs."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        conf = getattr(settings, "RESIL_RATELIMIT", None)
        if not conf or "policy" not in conf:
            raise ImproperlyConfigured("RESIL_RATELIMIT = {'policy': NAME, ...} is required")
        self.get_response = get_response
        self.policy = policy(conf["policy"], conf.get("config"))
        self.key = _key_func(conf.get("key", "ip"))
        exempt = conf.get("exempt") or ()
        if isinstance(exempt, str):
            exempt = (exempt,)
        self.exempt: Tuple[str, ...] = tuple(exempt)
        methods = conf.get("methods")
        self.methods: Optional[FrozenSet[str]] = (
            frozenset(m.upper() for m in methods) if methods else None)
        self.block = bool(conf.get("block", True))
        self.respond = _hook(conf.get("response"))
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _limited(self, request: HttpRequest) -> bool:
        if self.exempt and request.path_info.startswith(self.exempt):
            return False
        return self.methods is None or request.method in self.methods

    def _refused(self, request: HttpRequest, e: resil.Rejected) -> Optional[HttpResponse]:
        """The answer to a refused request, or None to let it through."""
        request.resil_limited = True
        request.resil_rejection = e
        return self.respond(request, e) if self.block else None

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        request.resil_limited = False
        if not self._limited(request):
            return self.get_response(request)
        try:
            permit = self.policy.acquire(self.key(request))
        except resil.Rejected as e:
            refused = self._refused(request, e)
            return refused if refused is not None else self.get_response(request)
        with permit:
            response = self.get_response(request)
            permit.outcome(self.policy.outcome_http(response.status_code))
        return response

    async def __acall__(self, request: HttpRequest) -> Any:
        request.resil_limited = False
        get_response = cast(Callable[[HttpRequest], Awaitable[Any]], self.get_response)
        if not self._limited(request):
            return await get_response(request)
        try:
            permit = await self.policy.acquire_async(self.key(request))
        except resil.Rejected as e:
            refused = self._refused(request, e)
            return refused if refused is not None else await get_response(request)
        with permit:
            response = await get_response(request)
            permit.outcome(self.policy.outcome_http(response.status_code))
        return response

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> Optional[HttpResponse]:
        """A refusal a view let escape answers 503 (429 for a rate limit)
        with Retry-After, through the response hook; anything else is
        Django's to answer."""
        if isinstance(exception, resil.Rejected):
            return self.respond(request, exception)
        return None


# ---- view decorators ----

def _guarded(view: View, p_of: Callable[[], resil.Policy],
             key: Optional[Callable[[HttpRequest], Optional[str]]],
             refused: Callable[..., Any]) -> View:
    """view under the policy p_of() returns, sync or async as the view is:
    a refusal answers refused(exc, request, *a, **kw)."""
    if iscoroutinefunction(view):
        @functools.wraps(view)
        async def aw(request: HttpRequest, *a: Any, **kw: Any) -> Any:
            p = p_of()
            try:
                permit = await p.acquire_async(key(request) if key else None)
            except resil.Rejected as e:
                r = refused(e, request, *a, **kw)
                return await r if inspect.isawaitable(r) else r
            with permit:
                resp = await view(request, *a, **kw)
                permit.outcome(p.outcome_http(resp.status_code))
            return resp
        return aw

    @functools.wraps(view)
    def w(request: HttpRequest, *a: Any, **kw: Any) -> Any:
        p = p_of()
        try:
            permit = p.acquire(key(request) if key else None)
        except resil.Rejected as e:
            return refused(e, request, *a, **kw)
        with permit:
            resp = view(request, *a, **kw)
            permit.outcome(p.outcome_http(resp.status_code))
        return resp
    return w


def ratelimit(policy_name: str, config: Optional[str] = None,
              key: KeySpec = "ip") -> Callable[[View], View]:
    """View decorator (sync or async view): the view under a (keyed) rate
    limit; 429 when refused."""
    kf = _key_func(key)

    def deco(view: View) -> View:
        return _guarded(view, lambda: policy(policy_name, config), kf,
                        lambda e, request, *a, **kw: refusal(e))
    return deco


def breaker(policy_name: str, config: Optional[str] = None,
            fallback: Optional[Callable[..., Any]] = None,
            **options: Any) -> Callable[[View], View]:
    """View decorator (sync or async view): the view behind a circuit
    breaker (and whatever else the policy holds). A 5xx answer or an
    exception is a failure (by the policy's breaker.record); when refused,
    `fallback(request, ...)` answers (awaited if it is a coroutine), else
    503 with Retry-After when known."""
    def refused(e: resil.Rejected, request: HttpRequest, *a: Any, **kw: Any) -> Any:
        return fallback(request, *a, **kw) if fallback is not None else refusal(e)

    def deco(view: View) -> View:
        return _guarded(view, lambda: policy(policy_name, config, **options), None, refused)
    return deco

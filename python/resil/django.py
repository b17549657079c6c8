"""resil for Django: a rate-limit middleware and view decorators, with the
limit shared by every worker of the host (gunicorn, uwsgi) through resild.

settings.py:

    MIDDLEWARE = [..., "resil.django.RateLimitMiddleware", ...]
    RESIL = {"socket": "/run/resild/control.sock"}   # or {"embedded": True}; {} = default socket
                                                     # tests: "clock_file": PATH (set_clock_file)
    RESIL_RATELIMIT = {
        "policy": "per-ip",
        "config": "limit.rate = 100/60s; limit.burst = 100; limit.keys = 65536",
        "key": "ip",              # "ip", "header:X-Api-Key", or a callable(request) -> str
    }
    RESIL_TRUSTED_PROXIES = ["10.0.0.0/8"]   # X-Forwarded-For counts only from these

A refused request gets 429 with `Retry-After` (whole seconds, rounded up)
and a JSON body {"error": "rate limited", "retry_after": seconds}.

The client IP is REMOTE_ADDR unless REMOTE_ADDR is a trusted proxy: then
X-Forwarded-For is read from the right, skipping trusted proxies, and the
first address no trusted proxy claims to be is the client. A client that
talks to the server directly cannot choose its key by sending the header.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import threading
from typing import Any, Callable, Dict, List, Optional, Union

import resil

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

__all__ = ["RateLimitMiddleware", "ratelimit", "breaker", "client_ip", "handle", "policy"]

KeySpec = Union[str, Callable[[HttpRequest], Optional[str]]]

_lock = threading.Lock()
_handle: Optional[resil.Resil] = None
_policies: Dict[str, resil.Policy] = {}
_trusted: Optional[List[Any]] = None


def handle() -> resil.Resil:
    """This process's resil handle, opened from settings.RESIL on first use
    ({"socket": PATH} or {"embedded": True}; default: $RESIL_SOCKET, then
    /run/resild/control.sock). Opened before a fork (gunicorn --preload),
    it serves the workers too. A test facility: {"clock_file": PATH} puts
    the handle on the manual clock in that file (Resil.set_clock_file), so
    the test moves the time of every worker."""
    global _handle
    with _lock:
        if _handle is None:
            conf = getattr(settings, "RESIL", {}) or {}
            if conf.get("embedded"):
                h = resil.open_embedded()
            else:
                h = resil.open(conf.get("socket"))
            if conf.get("clock_file"):
                h.set_clock_file(conf["clock_file"])
            _handle = h
        return _handle


def policy(name: str, config: Optional[str] = None, **options: Any) -> resil.Policy:
    """The policy `name`, defined with `config` first when given (workers
    declaring the same configuration is fine: an identical define is a
    no-op)."""
    key = name
    p = _policies.get(key)
    if p is None:
        h = handle()
        if config:
            h.define(name, config)
        p = h.policy(name, **options)
        _policies[key] = p
    return p


def _trusted_networks() -> List[Any]:
    global _trusted
    if _trusted is None:
        nets = []
        for n in getattr(settings, "RESIL_TRUSTED_PROXIES", []) or []:
            try:
                nets.append(ipaddress.ip_network(n, strict=False))
            except ValueError as e:
                raise ImproperlyConfigured(f"RESIL_TRUSTED_PROXIES: {n!r}: {e}") from e
        _trusted = nets
    return _trusted


def _is_trusted(addr: str, nets: List[Any]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in n for n in nets)


def client_ip(request: HttpRequest) -> str:
    """The client's address: X-Forwarded-For only through trusted proxies
    (RESIL_TRUSTED_PROXIES), read from the right."""
    peer = request.META.get("REMOTE_ADDR", "") or ""
    nets = _trusted_networks()
    if not nets or not _is_trusted(peer, nets):
        return peer
    xff = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [h.strip() for h in xff.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, nets):
            return hop
    return hops[0] if hops else peer


def _key_func(spec: KeySpec) -> Callable[[HttpRequest], Optional[str]]:
    if callable(spec):
        return spec
    if spec == "ip":
        return client_ip
    if isinstance(spec, str) and spec.startswith("header:"):
        meta = "HTTP_" + spec[len("header:"):].strip().upper().replace("-", "_")
        return lambda request: request.META.get(meta) or client_ip(request)
    if isinstance(spec, str) and "." in spec:
        from django.utils.module_loading import import_string
        return import_string(spec)
    raise ImproperlyConfigured(f"resil: key {spec!r}: 'ip', 'header:NAME' or a callable")


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


def _refusal(e: resil.Rejected) -> HttpResponse:
    if isinstance(e, resil.RateLimited):
        return too_many(e.retry_after)
    words = {resil.CircuitOpen: "circuit open", resil.BulkheadFull: "too busy",
             resil.Shed: "overloaded", resil.BudgetExhausted: "retry budget exhausted"}
    return too_many(e.retry_after, words.get(type(e), "refused"), status=503)


class RateLimitMiddleware:
    """Limits requests by the key of settings.RESIL_RATELIMIT ("policy",
    "config", "key"); a refused request gets 429 + Retry-After + JSON."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        conf = getattr(settings, "RESIL_RATELIMIT", None)
        if not conf or "policy" not in conf:
            raise ImproperlyConfigured("RESIL_RATELIMIT = {'policy': NAME, ...} is required")
        self.get_response = get_response
        self.policy = policy(conf["policy"], conf.get("config"))
        self.key = _key_func(conf.get("key", "ip"))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            permit = self.policy.acquire(self.key(request))
        except resil.Rejected as e:
            return _refusal(e)
        with permit:
            response = self.get_response(request)
            permit.outcome(self.policy.outcome_http(response.status_code))
        return response


def ratelimit(policy_name: str, config: Optional[str] = None, key: KeySpec = "ip") -> Callable:
    """View decorator: the view under a (keyed) rate limit; 429 when refused."""
    def deco(view: Callable) -> Callable:
        kf = _key_func(key)

        @functools.wraps(view)
        def wrapped(request: HttpRequest, *a: Any, **kw: Any) -> HttpResponse:
            p = policy(policy_name, config)
            try:
                permit = p.acquire(kf(request))
            except resil.Rejected as e:
                return _refusal(e)
            with permit:
                resp = view(request, *a, **kw)
                permit.outcome(p.outcome_http(resp.status_code))
            return resp
        return wrapped
    return deco


def breaker(policy_name: str, config: Optional[str] = None,
            fallback: Optional[Callable[..., HttpResponse]] = None, **options: Any) -> Callable:
    """View decorator: the view behind a circuit breaker (and whatever else
    the policy holds). A 5xx answer or an exception is a failure (by the
    policy's breaker.record); when refused, `fallback(request, ...)` answers,
    else 503 with Retry-After when known."""
    def deco(view: Callable) -> Callable:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *a: Any, **kw: Any) -> HttpResponse:
            p = policy(policy_name, config, **options)
            try:
                permit = p.acquire()
            except resil.Rejected as e:
                if fallback is not None:
                    return fallback(request, *a, **kw)
                return _refusal(e)
            with permit:
                resp = view(request, *a, **kw)
                permit.outcome(p.outcome_http(resp.status_code))
            return resp
        return wrapped
    return deco

"""resil: one circuit breaker, rate limit, bulkhead and retry budget per
dependency for a whole fleet of processes, decided in shared memory.

    import resil

    r = resil.open()                      # $RESIL_SOCKET or /run/resild/control.sock
    r.define("payments", "breaker.window = count:100; limit.rate = 200/s")
    payments = r.policy("payments")

    with payments.acquire() as permit:    # raises a resil.Rejected subclass
        charge(card)                      # an exception records a failure

    @payments.guard(fallback=lambda *a, **kw: cached())
    def charge(card): ...

    result = payments.call(charge, card)  # the policy's retries and budget

Decisions keep the GIL (they cost a few atomics); waits (bulkhead.wait,
limit.wait, retry sleeps) release it. A handle opened before a fork
(gunicorn --preload) serves the children: each claims its own client row.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import (Any, Awaitable, Callable, Dict, Mapping, Optional, Tuple, Type, TypeVar,
                    Union)

from . import _resil
from ._resil import (ADMIT, ERR_NONE, ERR_PERMANENT, ERR_THROTTLED, ERR_TIMEOUT, ERR_TRANSIENT,
                     ERR_USER, FAILURE, IGNORED, REJECT_BUDGET, REJECT_FULL, REJECT_LIMITED,
                     REJECT_OPEN, REJECT_SHED, STATE_CLOSED, STATE_DISABLED, STATE_FORCED_OPEN,
                     STATE_HALF_OPEN, STATE_METRICS_ONLY, STATE_OPEN, SUCCESS, BudgetExhausted,
                     BulkheadFull, CircuitOpen, Error, Permit, RateLimited, Rejected, Shed,
                     strstate, strverdict)

__version__: str = _resil.__version__

__all__ = [
    "open", "open_embedded", "Resil", "Policy", "Permit", "Error", "Rejected", "CircuitOpen",
    "RateLimited", "BulkheadFull", "Shed", "BudgetExhausted", "SUCCESS", "FAILURE", "IGNORED",
    "ERR_NONE", "ERR_TRANSIENT", "ERR_THROTTLED", "ERR_TIMEOUT", "ERR_PERMANENT", "ERR_USER",
    "STATE_CLOSED", "STATE_OPEN", "STATE_HALF_OPEN", "STATE_DISABLED", "STATE_FORCED_OPEN",
    "STATE_METRICS_ONLY", "HTTPStatus", "status_of", "__version__", "ADMIT", "REJECT_OPEN",
    "REJECT_FULL", "REJECT_LIMITED", "REJECT_SHED", "REJECT_BUDGET", "strverdict", "strstate",
]

F = TypeVar("F", bound=Callable[..., Any])
ExcTypes = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
Outcome = Union[int, str, bool]

_OUTCOMES = {"success": SUCCESS, "failure": FAILURE, "ignored": IGNORED}
_CLASSES = {"transient": ERR_TRANSIENT, "throttled": ERR_THROTTLED, "timeout": ERR_TIMEOUT,
            "permanent": ERR_PERMANENT}


class HTTPStatus(Exception):
    """An HTTP answer as an exception: raise it inside a with block (or from
    a guarded function) to report the status; the policy's breaker.record
    mapping decides the outcome, and 429/503 with `retry_after` (seconds)
    are retried as throttling."""

    def __init__(self, status: int, retry_after: Optional[float] = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.retry_after = retry_after


def status_of(exc: BaseException) -> Optional[int]:
    """The HTTP status an exception carries, if any: `.status_code`
    (resil.HTTPStatus, Django's Http404 has none), or `.response.status_code`
    (httpx.HTTPStatusError, requests.HTTPError)."""
    s = getattr(exc, "status_code", None)
    if isinstance(s, int):
        return s
    resp = getattr(exc, "response", None)
    s = getattr(resp, "status_code", None)
    return s if isinstance(s, int) else None


def _retry_after_of(exc: BaseException) -> float:
    ra = getattr(exc, "retry_after", None)
    if isinstance(ra, (int, float)) and ra > 0:
        return float(ra)
    resp = getattr(exc, "response", None)
    headers = getattr(resp, "headers", None)
    if headers is not None:
        v = headers.get("retry-after")
        if v:
            try:
                return max(0.0, float(v))
            except ValueError:
                return 0.0
    return 0.0


def _as_outcome(o: Outcome) -> int:
    if isinstance(o, bool):
        return SUCCESS if o else FAILURE
    if isinstance(o, str):
        return _OUTCOMES[o]
    if o in (SUCCESS, FAILURE, IGNORED):
        return o
    raise ValueError(f"not an outcome: {o!r}")


def _as_class(c: Union[int, str]) -> int:
    return _CLASSES[c] if isinstance(c, str) else int(c)


class Policy(_resil.Policy):
    """One named policy. Obtain it with `Resil.policy(name, ...)`.

    ignore:  exception types that record nothing (outcome IGNORED)
    record:  {exception type: outcome} ('success', 'failure', 'ignored',
             or SUCCESS/FAILURE/IGNORED), first match in order wins
    errors:  {exception type: error class} for retries ('transient',
             'throttled', 'timeout', 'permanent' or ERR_*); unmatched
             exceptions are transient, TimeoutError a timeout, an HTTP
             status 429 or 503 throttled, other 5xx and 408 transient,
             other 4xx permanent
    deadline: seconds a `call` may take in all, retries included (None)

    An exception carrying an HTTP status (see `status_of`) and not
    classified otherwise is mapped by the policy's breaker.record rules.
    """

    def __init__(self, handle: "Resil", name: str, *, ignore: ExcTypes = (),
                 record: Optional[Mapping[ExcTypes, Outcome]] = None,
                 errors: Optional[Mapping[ExcTypes, Union[int, str]]] = None,
                 deadline: Optional[float] = None) -> None:
        self.ignore: Tuple[Type[BaseException], ...] = (
            ignore if isinstance(ignore, tuple) else (ignore,))
        self.record: Dict[ExcTypes, int] = {k: _as_outcome(v) for k, v in (record or {}).items()}
        self.errors: Dict[ExcTypes, int] = {k: _as_class(v) for k, v in (errors or {}).items()}
        self.deadline = deadline
        self._classify = self.outcome_of

    def __repr__(self) -> str:
        return f"<resil.Policy {self.name!r}>"

    # -- classification --

    def outcome_of(self, exc_type: Type[BaseException], exc: Optional[BaseException]) -> int:
        """The outcome an exception leaving a with block reports."""
        if self.ignore and issubclass(exc_type, self.ignore):
            return IGNORED
        for types, outcome in self.record.items():
            if issubclass(exc_type, types):
                return outcome
        if issubclass(exc_type, Rejected):
            # a downstream policy refused: this call did not fail
            return IGNORED
        if exc is not None:
            s = status_of(exc)
            if s is not None:
                return self.outcome_http(s)
        return FAILURE

    def error_class(self, exc: BaseException) -> int:
        """The retry class of an exception (see the class docstring)."""
        for types, cls in self.errors.items():
            if isinstance(exc, types):
                return cls
        if self.ignore and isinstance(exc, self.ignore):
            return ERR_PERMANENT
        s = status_of(exc)
        if s is not None:
            if s in (429, 503):
                return ERR_THROTTLED
            if s == 408 or s >= 500:
                return ERR_TRANSIENT
            return ERR_PERMANENT if s >= 400 else ERR_TRANSIENT
        if isinstance(exc, TimeoutError) or isinstance(exc, asyncio.TimeoutError):
            return ERR_TIMEOUT
        if isinstance(exc, Rejected):
            return ERR_PERMANENT
        return ERR_TRANSIENT

    # -- retries --

    def _retry(self) -> "_resil.Retry":
        h: Resil = self.handle  # type: ignore[assignment]
        deadline_ns = 0
        if self.deadline is not None:
            deadline_ns = h.now_ns() + int(self.deadline * 1e9)
        return self.retry_state(deadline_ns)

    def _give_up(self, rt: "_resil.Retry", exc: BaseException) -> BaseException:
        if rt.reason == "retry budget exhausted":
            b = BudgetExhausted(f"{self.name}: retry budget exhausted")
            b.policy, b.verdict, b.retry_after = self.name, REJECT_BUDGET, None
            b.__cause__ = exc
            return b
        return exc

    def _failed(self, permit: Permit, exc: BaseException) -> int:
        """Release an attempt's permit after exc; its retry class. As
        resil_call does, a permanent error is no evidence against the
        dependency: the breaker ignores it unless `record`/`ignore` say
        otherwise."""
        cls = self.error_class(exc)
        outcome = self.outcome_of(type(exc), exc)
        if outcome == FAILURE and cls == ERR_PERMANENT and not any(
                isinstance(exc, t) for t in self.record):
            outcome = IGNORED
        permit.release(outcome)
        return cls

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) under the whole policy: each attempt acquires
        (a rejection raises), reports its outcome (a permanent error is
        ignored by the breaker, as resil_call does), and failures are retried
        by the policy's retry.* rules, budget and deadline, sleeping the
        delays resil_retry_next gives (the GIL released; a manual clock
        advances instead). Raises the last error (BudgetExhausted when the
        retry budget refused)."""
        rt = self._retry()
        h: Resil = self.handle  # type: ignore[assignment]
        while True:
            permit = self.acquire()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                cls = self._failed(permit, exc)
                d = rt.next(cls, int(_retry_after_of(exc) * 1e9))
                if d < 0:
                    raise self._give_up(rt, exc) from exc
                h.sleep_ns(d)
                continue
            except BaseException:
                permit.release(IGNORED)
                raise
            permit.release(SUCCESS)
            rt.next(ERR_NONE)
            return result

    async def acall(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """`call` for a coroutine function: awaits fn and asyncio.sleep
        between attempts (a manual clock advances instead)."""
        rt = self._retry()
        h: Resil = self.handle  # type: ignore[assignment]
        while True:
            permit = self.acquire()
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                cls = self._failed(permit, exc)
                d = rt.next(cls, int(_retry_after_of(exc) * 1e9))
                if d < 0:
                    raise self._give_up(rt, exc) from exc
                await h.asleep_ns(d)
                continue
            except BaseException:  # cancelled: the dependency never judged it
                permit.release(IGNORED)
                raise
            permit.release(SUCCESS)
            rt.next(ERR_NONE)
            return result

    # -- decorators --

    def guard(self, fn: Optional[F] = None, *, fallback: Optional[Callable[..., Any]] = None,
              key: Optional[Callable[..., Optional[str]]] = None, retry: bool = False) -> Any:
        """Decorate a function or an `async def` function: each call runs
        under the policy (retried if retry=True). With `fallback`, a
        rejection or a failure returns fallback(*args, **kwargs) instead
        (async fallbacks are awaited): the seed's graceful degradation.
        `key(*args, **kwargs)` chooses a keyed limiter's key."""

        def deco(f: F) -> F:
            if inspect.iscoroutinefunction(f):
                @functools.wraps(f)
                async def aw(*a: Any, **kw: Any) -> Any:
                    try:
                        if retry:
                            return await self.acall(f, *a, **kw)
                        with self.acquire(key(*a, **kw) if key else None):
                            return await f(*a, **kw)
                    except Exception:
                        if fallback is None:
                            raise
                        r = fallback(*a, **kw)
                        return await r if inspect.isawaitable(r) else r
                return aw  # type: ignore[return-value]

            @functools.wraps(f)
            def w(*a: Any, **kw: Any) -> Any:
                try:
                    if retry:
                        return self.call(f, *a, **kw)
                    with self.acquire(key(*a, **kw) if key else None):
                        return f(*a, **kw)
                except Exception:
                    if fallback is None:
                        raise
                    return fallback(*a, **kw)
            return w  # type: ignore[return-value]

        return deco(fn) if fn is not None else deco

    def retrying(self, fn: Optional[F] = None, *,
                 fallback: Optional[Callable[..., Any]] = None) -> Any:
        """`guard(retry=True)`: every call goes through `call`/`acall`."""
        return self.guard(fn, fallback=fallback, retry=True)

    __call__ = guard


class Resil(_resil.Handle):
    """A connection to resild (or an embedded segment pair): the policies
    of this host. One per process is enough; it is thread-safe and
    survives fork (children claim their own client row)."""

    def policy(self, name: str, **options: Any) -> Policy:
        """A handle to the policy `name` (resil.Error ENOENT if unknown);
        options: see `Policy`."""
        return Policy(self, name, **options)

    def set_clock(self, now: Optional[float]) -> None:  # type: ignore[override]
        """A manual clock standing at `now` seconds (tests, simulations; the
        children forked afterwards share it), or None for the real clock.
        Under a manual clock, retry sleeps advance it instead of sleeping."""
        super().set_clock(None if now is None else int(now * 1e9))

    def set_clock_file(self, path: str,  # type: ignore[override]
                       now: Optional[float] = None) -> None:
        """A test facility: the manual clock kept in the file at `path`
        (created if missing), read by every process that maps it, so a
        test moves the time of a whole fleet whose workers each open their
        own handle (gunicorn without --preload, uwsgi with lazy-apps).
        `now` seconds: set the clock there; None: keep the file's reading.
        Call it before set_clock/set_random on this handle."""
        super().set_clock_file(path, None if now is None else int(now * 1e9))

    def advance(self, seconds: float) -> None:
        """Move the manual clock forward."""
        self.advance_ns(int(seconds * 1e9))

    def now(self) -> float:
        """The policies' clock, in seconds."""
        return self.now_ns() / 1e9

    def sleep_ns(self, ns: int) -> None:
        """Sleep ns (GIL released), or advance the manual clock."""
        if self.manual_clock:
            self.advance_ns(ns)
        elif ns > 0:
            time.sleep(ns / 1e9)

    async def asleep_ns(self, ns: int) -> None:
        """Await ns, or advance the manual clock."""
        if self.manual_clock:
            self.advance_ns(ns)
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(ns / 1e9)

    def __enter__(self) -> "Resil":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open(socket: Optional[str] = None) -> Resil:  # noqa: A001 (the API's name)
    """Connect to resild: `socket`, else $RESIL_SOCKET, else
    /run/resild/control.sock. resil.Error (ECONNREFUSED, ENOENT, ETIMEDOUT)
    with the reason when the daemon is not there."""
    return Resil(socket)


def open_embedded(*, slots: int = 0, clients: int = 0, state_size: int = 0) -> Resil:
    """No daemon: private segments, shared with the children forked later.
    Decides exactly as daemon mode does."""
    return Resil(None, embedded=True, slots=slots, clients=clients, state_size=state_size)


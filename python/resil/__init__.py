"""resil: one circuit breaker, rate limit, bulkhead and retry budget per
dependency for a whole fleet of processes, decided in shared memory.

    import resil

    r = resil.open()                      # $RESIL_SOCKET or /run/resild/control.sock
    r.define("payments", "breaker.window = count:100; limit.rate = 200/s")
    payments = r.policy("payments")

    with payments.acquire() as permit:    # raises a resil.Rejected subclass
        charge(card)                      # an exception records a failure

    async with payments.acquire_async():  # asyncio: a wait never blocks the loop
        await charge_async(card)

    @payments.guard(fallback=lambda *a, **kw: cached())
    def charge(card): ...

    result = payments.call(charge, card)  # the policy's retries and budget

Decisions keep the GIL (they cost a few atomics); waits (bulkhead.wait,
limit.wait, retry sleeps) release it. A handle opened before a fork
(gunicorn --preload) serves the children: each claims its own client row.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
import threading
import time
from types import TracebackType
from typing import (Any, Awaitable, Callable, Dict, Generator, Literal, Mapping, Optional,
                    ParamSpec, Tuple, Type, TypeVar, Union, cast, overload)

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
    "RateLimited", "BulkheadFull", "Shed", "BudgetExhausted", "Throttled", "SUCCESS", "FAILURE",
    "IGNORED", "ERR_NONE", "ERR_TRANSIENT", "ERR_THROTTLED", "ERR_TIMEOUT", "ERR_PERMANENT",
    "ERR_USER", "STATE_CLOSED", "STATE_OPEN", "STATE_HALF_OPEN", "STATE_DISABLED",
    "STATE_FORCED_OPEN", "STATE_METRICS_ONLY", "HTTPStatus", "status_of", "__version__", "ADMIT",
    "REJECT_OPEN", "REJECT_FULL", "REJECT_LIMITED", "REJECT_SHED", "REJECT_BUDGET", "strverdict",
    "strstate", "AsyncAcquire",
]

P = ParamSpec("P")
R = TypeVar("R")
ExcTypes = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
Outcome = Union[int, str, bool]
Key = Union[str, bytes, None]

_OUTCOMES = {"success": SUCCESS, "failure": FAILURE, "ignored": IGNORED}
_CLASSES = {"transient": ERR_TRANSIENT, "throttled": ERR_THROTTLED, "timeout": ERR_TIMEOUT,
            "permanent": ERR_PERMANENT}


class Throttled(Rejected):
    """A dependency asked to be called again later than the caller can
    wait (429 or 503 with a Retry-After past the request's deadline):
    raised at once instead of sleeping out the wait. `.retry_after` is the
    dependency's wait in seconds, `.status_code` its status, `.response`
    its answer (closed) when there is one."""

    policy: str
    verdict: int
    retry_after: Optional[float]

    def __init__(self, policy: str, retry_after: float, status_code: int,
                 response: Any = None) -> None:
        super().__init__(f"{policy}: the dependency asks for {retry_after:g} s more than "
                         "the request has left")
        self.policy, self.verdict, self.retry_after = policy, REJECT_LIMITED, retry_after
        self.status_code, self.response = status_code, response


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


# ---- waits outside the caller's thread ----
#
# An acquire that may sleep (bulkhead.wait, limit.wait) is made in a thread
# of this pool when the caller cannot sleep in it: an event loop, whose
# holders must keep running to release what the waiter waits for, or a
# caller with a deadline shorter than the policy's wait. The thread waits
# in libresil itself (a futex woken by the release, in FIFO order with the
# process's and the fleet's other waiters, the GIL given up), so the
# admission comes the moment a permit frees and the policy's own bounds
# hold. A bulkhead lets at most 64 waiters wait, and a limiter's
# reservations are bounded by limit.wait: the pool's threads are enough
# for several such policies at once, and are made only when waits happen.

_WAIT_THREADS = 256
_pool_lock = threading.Lock()
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _forget_pool() -> None:
    # a forked child has none of its parent's threads
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _wait_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(_WAIT_THREADS,
                                                          thread_name_prefix="resil-wait")
        return _pool


def _drop(f: "concurrent.futures.Future[Permit]") -> None:
    """A wait its caller gave up on: a permit it still gets is given back,
    counting nothing."""
    if not f.cancelled() and f.exception() is None:
        f.result().release(IGNORED)


def _ready(v: R) -> Generator[Any, None, R]:
    """An awaitable's iterator that is done at once."""
    return v
    yield  # pragma: no cover (makes this a generator)


class AsyncAcquire:
    """What `Policy.acquire_async` returns: `await` it for the Permit, or
    use it in `async with` (the outcome reported as a with block's)."""

    __slots__ = ("_policy", "_key", "_critical", "_timeout", "_permit")

    def __init__(self, policy: "Policy", key: Key, critical: bool,
                 timeout: Optional[float]) -> None:
        self._policy, self._key, self._critical, self._timeout = policy, key, critical, timeout
        self._permit: Optional[Permit] = None

    def __await__(self) -> Generator[Any, None, Permit]:
        p = self._policy
        if not p.may_wait():
            # decided on the loop: a few atomics, nothing to wait for
            return _ready(p.acquire(self._key, critical=self._critical))
        return self._wait().__await__()

    async def _wait(self) -> Permit:
        p = self._policy
        f = _wait_pool().submit(p.acquire, self._key, critical=self._critical)
        try:
            if self._timeout is None:
                return await asyncio.wrap_future(f)
            return await asyncio.wait_for(asyncio.wrap_future(f), self._timeout)
        except BaseException:
            # cancelled, or out of time: the thread may still be admitted
            f.add_done_callback(_drop)
            raise

    async def __aenter__(self) -> Permit:
        self._permit = await self
        return self._permit.__enter__()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Literal[False]:
        assert self._permit is not None
        return self._permit.__exit__(exc_type, exc, tb)


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

    @property
    def handle(self) -> "Resil":
        """The handle the policy belongs to."""
        return cast(Resil, _resil.Policy.handle.__get__(self))

    # -- waits --

    def acquire_async(self, key: Key = None, *, critical: bool = False,
                      timeout: Optional[float] = None) -> AsyncAcquire:
        """`acquire` for asyncio: `async with p.acquire_async(key):` or
        `permit = await p.acquire_async(key)`. A policy that never waits
        decides on the loop at once; one that may (bulkhead.wait,
        limit.wait) waits in a thread, so the loop keeps running (the
        holders it waits for among them). `timeout` seconds: TimeoutError
        if no permit came by then (None: the policy's own wait bounds it)."""
        return AsyncAcquire(self, key, critical, timeout)

    def acquire_within(self, timeout: Optional[float], key: Key = None, *,
                       critical: bool = False) -> Permit:
        """`acquire`, with any wait bounded by `timeout` seconds as well as
        by the policy's own wait: TimeoutError when no permit came by then.
        A policy that never waits, or timeout None: `acquire` itself."""
        if timeout is None or not self.may_wait():
            return self.acquire(key, critical=critical)
        if timeout <= 0:
            raise TimeoutError(f"{self.name}: no time left to wait for a permit")
        f = _wait_pool().submit(self.acquire, key, critical=critical)
        try:
            return f.result(timeout)
        except concurrent.futures.TimeoutError:
            f.add_done_callback(_drop)
            raise TimeoutError(f"{self.name}: no permit within {timeout:g} s") from None
        except BaseException:
            f.add_done_callback(_drop)
            raise

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

    def _retry(self, within: Optional[float] = None) -> "_resil.Retry":
        """A retry loop bounded by the policy's deadline and by `within`
        seconds from now, whichever ends first."""
        limit = self.deadline
        if within is not None and (limit is None or within < limit):
            limit = within
        deadline_ns = 0
        if limit is not None:
            deadline_ns = self.handle.now_ns() + max(1, int(limit * 1e9))
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

    def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """fn(*args, **kwargs) under the whole policy: each attempt acquires
        (a rejection raises), reports its outcome (a permanent error is
        ignored by the breaker, as resil_call does), and failures are retried
        by the policy's retry.* rules, budget and deadline, sleeping the
        delays resil_retry_next gives (the GIL released; a manual clock
        advances instead). Raises the last error (BudgetExhausted when the
        retry budget refused)."""
        rt = self._retry()
        h = self.handle
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

    async def acall(self, fn: Callable[P, Awaitable[R]], *args: P.args,
                    **kwargs: P.kwargs) -> R:
        """`call` for a coroutine function: each attempt acquires with
        `acquire_async` (a wait never blocks the loop), awaits fn, and
        awaits asyncio.sleep between attempts (a manual clock advances
        instead)."""
        rt = self._retry()
        h = self.handle
        while True:
            permit = await self.acquire_async()
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

    @overload
    def guard(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def guard(self, fn: None = None, /, *, fallback: Optional[Callable[..., Any]] = None,
              key: Optional[Callable[..., Key]] = None,
              retry: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def guard(self, fn: Optional[Callable[P, R]] = None, /, *,
              fallback: Optional[Callable[..., Any]] = None,
              key: Optional[Callable[..., Key]] = None,
              retry: bool = False) -> Union[Callable[P, R],
                                            Callable[[Callable[P, R]], Callable[P, R]]]:
        """Decorate a function or an `async def` function (its signature
        kept): each call runs under the policy (retried if retry=True); a
        coroutine acquires with `acquire_async`, so a wait never blocks the
        loop. With `fallback`, a rejection or a failure returns
        fallback(*args, **kwargs) instead (async fallbacks are awaited): the
        seed's graceful degradation. `key(*args, **kwargs)` chooses a keyed
        limiter's key."""

        def deco(f: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(f):
                af = cast(Callable[P, Awaitable[Any]], f)

                @functools.wraps(f)
                async def aw(*a: P.args, **kw: P.kwargs) -> Any:
                    try:
                        if retry:
                            return await self.acall(af, *a, **kw)
                        async with self.acquire_async(key(*a, **kw) if key else None):
                            return await af(*a, **kw)
                    except Exception:
                        if fallback is None:
                            raise
                        r = fallback(*a, **kw)
                        return await r if inspect.isawaitable(r) else r
                return cast(Callable[P, R], aw)

            @functools.wraps(f)
            def w(*a: P.args, **kw: P.kwargs) -> R:
                try:
                    if retry:
                        return self.call(f, *a, **kw)
                    with self.acquire(key(*a, **kw) if key else None):
                        return f(*a, **kw)
                except Exception:
                    if fallback is None:
                        raise
                    return cast(R, fallback(*a, **kw))
            return w

        return deco(fn) if fn is not None else deco

    @overload
    def retrying(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def retrying(self, fn: None = None, /, *, fallback: Optional[Callable[..., Any]] = None
                 ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def retrying(self, fn: Optional[Callable[P, R]] = None, /, *,
                 fallback: Optional[Callable[..., Any]] = None
                 ) -> Union[Callable[P, R], Callable[[Callable[P, R]], Callable[P, R]]]:
        """`guard(retry=True)`: every call goes through `call`/`acall`."""
        if fn is not None:
            return self.guard(fallback=fallback, retry=True)(fn)
        return self.guard(fallback=fallback, retry=True)

    __call__ = guard


class Resil(_resil.Handle):
    """A connection to resild (or an embedded segment pair): the policies
    of this host. One per process is enough; it is thread-safe and
    survives fork (children claim their own client row)."""

    def policy(self, name: str, **options: Any) -> Policy:
        """A handle to the policy `name` (resil.Error ENOENT if unknown to
        an attached handle; a pending handle admits on a name it was not
        given until it attaches); options: see `Policy`."""
        return Policy(self, name, **options)

    def set_clock(self, now: Optional[float]) -> None:
        """A manual clock standing at `now` seconds (tests, simulations; the
        children forked afterwards share it), or None for the real clock.
        Under a manual clock, retry sleeps advance it instead of sleeping."""
        super().set_clock(None if now is None else int(now * 1e9))

    def set_clock_file(self, path: Union[str, "os.PathLike[str]"],
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


def open(socket: Optional[str] = None, *,  # noqa: A001 (the API's name)
         pending: bool = True) -> Resil:
    """A handle on resild at `socket`, else $RESIL_SOCKET, else
    /run/resild/control.sock.

    pending=True (the default): succeeds whether resild runs or not, so a
    worker that starts while the daemon is away starts. Until the process
    reaches resild, `define` is remembered and each policy decides by its
    `policy.fallback` (local: the process's own copy of the declared
    policy; admit; reject); the library finds resild in the background of
    a decision (a connect attempt at most once a second), then declares
    what was remembered and every policy moves to the fleet's shared state
    by itself. `Resil.attached` says which. resil.Error only for what
    waiting cannot mend (EACCES: the socket's group).

    pending=False: resil.Error (ECONNREFUSED, ENOENT, ETIMEDOUT) with the
    reason when the daemon is not there."""
    return Resil(socket, pending=pending)


def open_embedded(*, slots: int = 0, clients: int = 0, state_size: int = 0) -> Resil:
    """No daemon: private segments, shared with the children forked later.
    Decides exactly as daemon mode does."""
    return Resil(None, embedded=True, slots=slots, clients=clients, state_size=state_size)

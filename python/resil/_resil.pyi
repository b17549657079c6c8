"""Type stubs of resil._resil, the C extension (see python/src/_resil.c)."""

import os
from types import TracebackType
from typing import Any, Callable, List, Literal, Optional, Type, Union

__version__: str

ADMIT: int
REJECT_OPEN: int
REJECT_FULL: int
REJECT_LIMITED: int
REJECT_SHED: int
REJECT_BUDGET: int
SUCCESS: int
FAILURE: int
IGNORED: int
ERR_NONE: int
ERR_TRANSIENT: int
ERR_THROTTLED: int
ERR_TIMEOUT: int
ERR_PERMANENT: int
ERR_USER: int
STATE_CLOSED: int
STATE_OPEN: int
STATE_HALF_OPEN: int
STATE_DISABLED: int
STATE_FORCED_OPEN: int
STATE_METRICS_ONLY: int

Outcome = Union[int, bool, Literal["success", "failure", "ignored"]]


class Error(OSError): ...


class Rejected(Exception):
    policy: str
    verdict: int
    retry_after: Optional[float]


class CircuitOpen(Rejected): ...


class RateLimited(Rejected):
    retry_after: float


class BulkheadFull(Rejected): ...


class Shed(Rejected): ...


class BudgetExhausted(Rejected): ...


class Handle:
    embedded: int
    manual_clock: bool

    def __init__(self, socket: Optional[str] = ..., *, embedded: bool = ..., slots: int = ...,
                 clients: int = ..., state_size: int = ...) -> None: ...
    def close(self) -> None: ...
    def define(self, name: str, config: str) -> None: ...
    def delete(self, name: str) -> None: ...
    def force_state(self, name: str, state: int) -> None: ...
    def reset(self, name: str) -> None: ...
    def now_ns(self) -> int: ...
    def set_clock(self, ns: Optional[int]) -> None: ...
    def set_clock_file(self, path: Union[str, "os.PathLike[str]"],
                       ns: Optional[int] = ...) -> None: ...
    def advance_ns(self, ns: int) -> int: ...
    def set_random(self, value: Optional[int]) -> None: ...


class Permit:
    held: bool
    policy: "Policy"

    def __enter__(self) -> "Permit": ...
    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool: ...
    def release(self, outcome: Outcome = ...) -> None: ...
    def outcome(self, outcome: Outcome) -> None: ...
    def outcome_http(self, status: int) -> None: ...


class Retry:
    reason: str

    def next(self, error_class: int, retry_after_ns: int = ...) -> int: ...


class Policy:
    name: str
    handle: Handle
    _classify: Optional[Callable[[Type[BaseException], Optional[BaseException]], Outcome]]

    def __init__(self, handle: Handle, name: str, **options: Any) -> None: ...
    def acquire(self, key: Union[str, bytes, None] = ..., *, critical: bool = ...) -> Permit: ...
    def state(self) -> int: ...
    def may_wait(self) -> bool: ...
    def outcome_http(self, status: int) -> int: ...
    def outcome_errno(self, err: int) -> int: ...
    def retry_state(self, deadline_ns: int = ...) -> Retry: ...


def noop() -> None: ...
def bench_c(policy: Policy, n: int, keys: Optional[List[str]] = ...) -> float: ...
def strverdict(verdict: int) -> str: ...
def strstate(state: int) -> str: ...

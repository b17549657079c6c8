"""resil in embedded mode on a manual clock: verdicts as exceptions, outcome
classification, retries, decorators, async, GIL release, bad input."""

import asyncio
import errno
import os
import threading
import time

import pytest

import resil

T0 = 1000.0  # seconds on the manual clock


@pytest.fixture
def r():
    h = resil.open_embedded()
    h.set_clock(T0)
    yield h
    h.close()


def pol(r, name, config, **kw):
    r.define(name, config)
    return r.policy(name, **kw)


def test_version():
    assert resil.__version__ == "1.0.0"
    assert resil._resil.__version__ == resil.__version__


# ---- bad input: a clear resil.Error, never a crash ----

def test_daemon_not_running(tmp_path):
    """pending=False keeps the error; the default, a pending handle,
    decides by each policy's fallback instead (local: the process's own
    copy of what it declared)."""
    sock = str(tmp_path / "no-such.sock")
    with pytest.raises(resil.Error) as e:
        resil.open(sock, pending=False)
    assert e.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    assert e.value.strerror
    h = resil.open(sock)
    assert not h.attached
    h.define("away", "limit.rate = 1/1h; limit.burst = 2")
    p = h.policy("away")
    p.acquire().release()
    with p.acquire():
        pass
    with pytest.raises(resil.RateLimited) as e:
        p.acquire()
    assert e.value.retry_after > 0
    assert p.pending_stats() == (2, 1)

    @h.policy("away-too").guard   # declared nowhere: admitted until attached
    def work(x):
        return x * 2
    assert work(21) == 42
    with pytest.raises(resil.Error) as e:
        h.define("away", "")
    assert e.value.errno == errno.EINVAL
    h.close()
    assert not h.attached


def test_unknown_policy(r):
    with pytest.raises(resil.Error) as e:
        r.policy("nope")
    assert e.value.errno == errno.ENOENT
    assert "no policy named nope" in str(e.value)   # the library's words
    assert "No such file" not in str(e.value)


def test_empty_config_refused(r):
    for empty in ("", "  ", " ;\n; "):
        with pytest.raises(resil.Error) as e:
            r.define("e", empty)
        assert e.value.errno == errno.EINVAL
        assert "empty configuration" in str(e.value)
    with pytest.raises(resil.Error):
        r.policy("e")   # nothing was defined


def test_bad_config(r):
    with pytest.raises(resil.Error) as e:
        r.define("bad", "breaker.windw = count:10")
    assert e.value.errno == errno.EINVAL
    # the library's words name the key (and the nearest valid one)
    assert "breaker.windw" in str(e.value)
    with pytest.raises(resil.Error):
        r.define("bad", "limit.rate = fast")
    with pytest.raises(TypeError):
        r.define("bad", None)


def test_bad_arguments(r):
    p = pol(r, "b", "bulkhead.max = 1")
    with pytest.raises(TypeError):
        p.acquire(12)
    with pytest.raises(TypeError):
        p.acquire(nokey=1)
    permit = p.acquire()
    with pytest.raises(ValueError):
        permit.outcome("maybe")
    permit.release()


def test_closed_handle():
    h = resil.open_embedded()
    h.define("x", "bulkhead.max = 1")
    p = h.policy("x")
    h.close()
    h.close()
    with pytest.raises(resil.Error) as e:
        p.acquire()
    assert e.value.errno == errno.EBADF


def test_close_while_a_thread_waits():
    """close() from one thread while another waits for a permit without
    the GIL: the waiter comes back with EBADF when its wait ends, and only
    then is the handle's memory freed (not under it)."""
    h = resil.open_embedded()
    h.define("cw", "bulkhead.max = 1; bulkhead.wait = 1s")
    p = h.policy("cw")
    held = p.acquire()
    got = []

    def waiter():
        try:
            p.acquire()
            got.append("admitted")
        except resil.Error as e:
            got.append(e.errno)

    t = threading.Thread(target=waiter)
    t.start()
    # nothing shows a wait in progress from here: the pause makes close()
    # during the wait the likely order; the outcome is EBADF either way
    time.sleep(0.2)
    h.close()
    t.join(10)
    assert got == [errno.EBADF]
    with pytest.raises(resil.Error):
        held.release()   # the handle is closed


def test_permit_used_twice(r):
    p = pol(r, "b", "bulkhead.max = 1")
    permit = p.acquire()
    permit.release()
    with pytest.raises(resil.Error) as e:
        permit.release()
    assert e.value.errno == errno.EALREADY
    with pytest.raises(resil.Error):
        with permit:
            pass
    with p.acquire() as q:
        pass
    with pytest.raises(resil.Error):
        with q:
            pass
    # the slot came back each time
    p.acquire().release()


def test_dropped_permit_gives_back(r):
    p = pol(r, "b", "bulkhead.max = 1")
    permit = p.acquire()
    with pytest.raises(resil.BulkheadFull):
        p.acquire()
    del permit
    p.acquire().release()


# ---- every rejection ----

def test_bulkhead_full(r):
    p = pol(r, "b", "bulkhead.max = 2")
    a, b = p.acquire(), p.acquire()
    with pytest.raises(resil.BulkheadFull) as e:
        p.acquire()
    assert isinstance(e.value, resil.Rejected)
    assert e.value.policy == "b" and e.value.verdict == resil.REJECT_FULL
    assert e.value.retry_after is None
    a.release()
    with p.acquire():
        pass
    b.release()
    assert not p.may_wait()


def test_rate_limited_retry_after(r):
    p = pol(r, "l", "limit.rate = 10/s; limit.burst = 2")
    p.acquire().release()
    p.acquire().release()
    with pytest.raises(resil.RateLimited) as e:
        p.acquire()
    ra = e.value.retry_after
    assert isinstance(ra, float)
    assert 0 < ra <= 0.1 + 1e-9
    r.advance(ra)
    with p.acquire():
        pass


def test_keyed_limit(r):
    p = pol(r, "k", "limit.rate = 100/60s; limit.burst = 100; limit.keys = 64")
    for _ in range(100):
        p.acquire("10.0.0.1").release()
    with pytest.raises(resil.RateLimited) as e:
        p.acquire(key="10.0.0.1")
    assert 0 < e.value.retry_after <= 0.6 + 1e-9
    p.acquire(b"10.0.0.2").release()


def test_circuit_open_retry_after(r):
    """An open breaker's refusal says when its next probe is due."""
    p = pol(r, "cra", "breaker.window = consecutive:2; breaker.wait = 10s")
    for _ in range(2):
        with pytest.raises(ZeroDivisionError):
            with p.acquire():
                1 / 0
    with pytest.raises(resil.CircuitOpen) as e:
        p.acquire()
    assert e.value.retry_after == pytest.approx(10.0)
    r.advance(4)
    with pytest.raises(resil.CircuitOpen) as e:
        p.acquire()
    assert e.value.retry_after == pytest.approx(6.0)


def test_key_rules(r):
    """A keyed limiter called without a key refuses (pooling every such
    caller in one bucket would limit them together) unless it names a
    default key; a key given to a policy without a keyed limiter is a
    mistake, not a key to ignore."""
    k = pol(r, "kr", "limit.rate = 1/1h; limit.burst = 1; limit.keys = 16")
    with pytest.raises(resil.Error) as e:
        k.acquire()
    assert e.value.errno == errno.EINVAL
    assert "limit.default_key" in str(e.value)
    k.acquire("10.0.0.1").release()
    d = pol(r, "kd", "limit.rate = 1/1h; limit.burst = 1; limit.keys = 16;"
            "limit.default_key = anonymous")
    d.acquire().release()
    with pytest.raises(resil.RateLimited):
        d.acquire()                      # the default key's bucket
    d.acquire("10.0.0.1").release()      # another key's
    u = pol(r, "ku", "limit.rate = 1/1h; limit.burst = 5")
    with pytest.raises(resil.Error) as e:
        u.acquire("10.0.0.1")
    assert e.value.errno == errno.EINVAL
    assert "no keyed limiter" in str(e.value)
    u.acquire().release()


def test_circuit_open_and_probe(r):
    p = pol(r, "c", "breaker.window = consecutive:3; breaker.wait = 10s;"
            "breaker.half_open_calls = 1")
    for _ in range(3):
        with pytest.raises(ZeroDivisionError):
            with p.acquire():
                1 / 0
    assert p.state() == resil.STATE_OPEN
    with pytest.raises(resil.CircuitOpen) as e:
        p.acquire()
    assert e.value.verdict == resil.REJECT_OPEN
    r.advance(10)
    with p.acquire():  # the probe succeeds
        pass
    assert p.state() == resil.STATE_CLOSED


def test_shed(r):
    p = pol(r, "s", "shed.k = 1.1; shed.window = 2m")
    r.set_random(0)  # every draw the lowest: shed whenever p > 0
    shed = 0
    for _ in range(60):  # a failing dependency, one call a second
        try:
            with p.acquire():
                raise OSError("down")
        except OSError:
            pass
        except resil.Shed as e:
            assert e.verdict == resil.REJECT_SHED
            shed += 1
        r.advance(1)
    assert shed > 0
    with pytest.raises(resil.Shed):
        p.acquire()


def test_budget_exhausted(r):
    p = pol(r, "rb", "retry.max_attempts = 3; retry.base = 10ms; retry.jitter = none;"
            "retry.budget = aws:10")
    calls = 0

    def down():
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    raised = []
    for _ in range(10):
        try:
            p.call(down)
        except (ConnectionError, resil.BudgetExhausted) as e:
            raised.append(type(e))
    assert resil.BudgetExhausted in raised
    assert calls < 10 * 3  # the budget stopped some retries


# ---- outcome classification ----

def consecutive(r, name, **kw):
    return pol(r, name, "breaker.window = consecutive:2; breaker.wait = 10s", **kw)


def fail_twice(p, exc):
    for _ in range(2):
        with pytest.raises(type(exc)):
            with p.acquire():
                raise exc


def test_exception_records_failure(r):
    p = consecutive(r, "f")
    fail_twice(p, KeyError("x"))
    assert p.state() == resil.STATE_OPEN


def test_ignore(r):
    p = consecutive(r, "i", ignore=(KeyError,))
    fail_twice(p, KeyError("x"))
    assert p.state() == resil.STATE_CLOSED
    fail_twice(p, ValueError("x"))
    assert p.state() == resil.STATE_OPEN


def test_record_mapping(r):
    p = consecutive(r, "m", record={LookupError: "success", ValueError: resil.IGNORED})
    fail_twice(p, KeyError("x"))       # a LookupError: success
    fail_twice(p, ValueError("x"))     # ignored
    assert p.state() == resil.STATE_CLOSED
    fail_twice(p, OSError("x"))
    assert p.state() == resil.STATE_OPEN


def test_http_status(r):
    p = consecutive(r, "h")
    assert p.outcome_http(200) == resil.SUCCESS
    assert p.outcome_http(503) == resil.FAILURE
    fail_twice(p, resil.HTTPStatus(404))
    assert p.state() == resil.STATE_CLOSED
    fail_twice(p, resil.HTTPStatus(503))
    assert p.state() == resil.STATE_OPEN
    q = consecutive(r, "h2")
    for _ in range(2):
        with q.acquire() as permit:
            permit.outcome_http(502)
    assert q.state() == resil.STATE_OPEN


def test_outcome_override(r):
    p = consecutive(r, "o")
    for _ in range(2):
        with p.acquire() as permit:
            permit.outcome("failure")   # a normal exit, reported as failure
    assert p.state() == resil.STATE_OPEN
    q = consecutive(r, "o2")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            with q.acquire() as permit:
                permit.outcome(resil.SUCCESS)
                raise RuntimeError("handled upstream")
    assert q.state() == resil.STATE_CLOSED


def test_raw_release_outcomes(r):
    p = consecutive(r, "raw")
    p.acquire().release(resil.FAILURE)
    p.acquire().release(resil.IGNORED)
    assert p.state() == resil.STATE_CLOSED
    p.acquire().release(False)
    assert p.state() == resil.STATE_OPEN


# ---- retries ----

def failing(n, exc=ConnectionError):
    """fails n times, then returns the attempt number"""
    state = {"calls": 0}

    def fn():
        state["calls"] += 1
        if state["calls"] <= n:
            raise exc("attempt %d" % state["calls"])
        return state["calls"]
    return fn, state


def test_retry_delays_exact(r):
    p = pol(r, "r", "retry.max_attempts = 4; retry.base = 100ms; retry.multiplier = 2;"
            "retry.jitter = none")
    fn, st = failing(10)
    t = r.now_ns()
    with pytest.raises(ConnectionError, match="attempt 4"):
        p.call(fn)
    assert st["calls"] == 4
    assert r.now_ns() - t == 700_000_000  # 100 + 200 + 400 ms


def test_retry_full_jitter_exact(r):
    p = pol(r, "rj", "retry.max_attempts = 3; retry.base = 100ms; retry.multiplier = 2;"
            "retry.jitter = full")
    r.set_random(1 << 63)  # the middle of each range
    fn, st = failing(1)
    t = r.now_ns()
    assert p.call(fn) == 2
    d = r.now_ns() - t
    assert 49_000_000 < d < 51_000_000  # half of 100 ms


def test_retry_success_and_permanent(r):
    p = pol(r, "rs", "retry.max_attempts = 5; retry.base = 1ms; retry.jitter = none;"
            "breaker.window = consecutive:3; breaker.wait = 10s",
            errors={ValueError: "permanent"})
    fn, st = failing(2)
    assert p.call(fn) == 3
    for _ in range(3):
        fn, st = failing(2, ValueError)
        with pytest.raises(ValueError):
            p.call(fn)
        assert st["calls"] == 1  # permanent: never retried
    # and no evidence against the dependency (as resil_call)
    assert p.state() == resil.STATE_CLOSED
    fn, st = failing(2)
    assert p.call(fn) == 3
    fn, st = failing(9)
    with pytest.raises(resil.CircuitOpen):   # the fourth attempt is refused
        p.call(fn)
    assert st["calls"] == 3 and p.state() == resil.STATE_OPEN


def test_retry_deadline(r):
    p = pol(r, "rd", "retry.max_attempts = 10; retry.base = 100ms; retry.multiplier = 2;"
            "retry.jitter = none", deadline=0.25)
    fn, st = failing(10)
    with pytest.raises(ConnectionError):
        p.call(fn)
    assert st["calls"] == 2  # the third would start at 300 ms, past 250 ms


def test_retry_after_honoured(r):
    p = pol(r, "ra", "retry.max_attempts = 2; retry.base = 1ms; retry.jitter = none")
    calls = []

    def throttled():
        calls.append(r.now_ns())
        if len(calls) == 1:
            raise resil.HTTPStatus(429, retry_after=3)
        return "ok"
    assert p.call(throttled) == "ok"
    assert calls[1] - calls[0] >= 3_000_000_000


def test_rejection_not_retried(r):
    p = pol(r, "rr", "bulkhead.max = 1; retry.max_attempts = 5")
    held = p.acquire()
    with pytest.raises(resil.BulkheadFull):
        p.call(lambda: 1)
    held.release()
    assert p.call(lambda: 1) == 1


# ---- decorators and async ----

def test_guard_fallback(r):
    p = consecutive(r, "g")

    @p.guard(fallback=lambda x: ("cached", x))
    def fetch(x):
        raise OSError("down")

    assert fetch(1) == ("cached", 1)
    assert fetch(2) == ("cached", 2)
    assert p.state() == resil.STATE_OPEN
    assert fetch(3) == ("cached", 3)  # CircuitOpen -> fallback

    @p.guard
    def bare():
        return 1
    with pytest.raises(resil.CircuitOpen):
        bare()


def test_guard_key(r):
    p = pol(r, "gk", "limit.rate = 1/60s; limit.burst = 1; limit.keys = 16")

    @p.guard(key=lambda user: user)
    def hello(user):
        return user

    assert hello("a") == "a"
    assert hello("b") == "b"
    with pytest.raises(resil.RateLimited):
        hello("a")


def test_async_guard_and_acall(r):
    p = pol(r, "a", "breaker.window = consecutive:3; breaker.wait = 10s;"
            "retry.max_attempts = 3; retry.base = 100ms; retry.jitter = none")

    async def cached():
        return "cached"

    @p.guard(fallback=cached)
    async def down():
        await asyncio.sleep(0)
        raise OSError("down")

    st = {"n": 0}

    async def flaky():
        st["n"] += 1
        if st["n"] < 3:
            raise ConnectionError()
        return "fresh"

    async def main():
        t = r.now_ns()
        assert await p.acall(flaky) == "fresh"   # 2 failures, 2 retries
        assert r.now_ns() - t == 300_000_000
        for _ in range(3):
            assert await down() == "cached"
        assert p.state() == resil.STATE_OPEN
        with pytest.raises(resil.CircuitOpen):
            await p.acall(flaky)

    asyncio.run(main())


def test_async_retrying_decorator(r):
    p = pol(r, "ar", "retry.max_attempts = 3; retry.base = 10ms; retry.jitter = none")
    st = {"n": 0}

    @p.retrying
    async def once_flaky():
        st["n"] += 1
        if st["n"] == 1:
            raise ConnectionError()
        return st["n"]

    assert asyncio.run(once_flaky()) == 2


# ---- the GIL ----

def test_gil_released_while_waiting():
    """A bulkhead wait gives the GIL up: another Python thread runs and
    releases the permit the waiter is waiting for. If the wait held the
    GIL, that thread could not run and the wait would end BulkheadFull."""
    h = resil.open_embedded()
    h.define("w", "bulkhead.max = 1; bulkhead.wait = 8s")
    p = h.policy("w")
    assert p.may_wait()
    held = p.acquire()
    started = threading.Event()
    ran = []

    def other():
        started.wait()
        for i in range(1000):
            ran.append(i)   # Python code: needs the GIL
        held.release()

    t = threading.Thread(target=other)
    t.start()
    started.set()
    with p.acquire():       # waits, GIL released
        assert len(ran) == 1000
    t.join()
    h.close()


# ---- asyncio ----

def done_at_once(aw):
    """The result of an awaitable that completes without suspending: the
    decision was made on the loop, no thread involved."""
    it = aw.__await__()
    with pytest.raises(StopIteration) as e:
        it.send(None)
    return e.value.value


def test_acquire_async_decides_on_the_loop(r):
    p = pol(r, "an", "limit.rate = 10/s; limit.burst = 1")
    assert not p.may_wait()
    permit = done_at_once(p.acquire_async())
    assert permit.held
    permit.release()
    with pytest.raises(resil.RateLimited) as e:
        done_at_once(p.acquire_async())
    assert 0 < e.value.retry_after <= 0.1 + 1e-9


class Ticker:
    """A task ticking every 2 ms on the loop: its count moves only while
    the loop runs."""

    def __init__(self):
        self.ticks = 0
        self.task = asyncio.ensure_future(self._run())

    async def _run(self):
        while True:
            await asyncio.sleep(0.002)
            self.ticks += 1

    async def after(self, n):
        """Returns once the loop has run n more ticks."""
        end = self.ticks + n
        while self.ticks < end:
            await asyncio.sleep(0.001)

    def stop(self):
        self.task.cancel()


def test_async_wait_leaves_the_loop_running():
    """bulkhead.wait under asyncio: the holder, on the same loop, can only
    release after the loop has ticked 20 times past the waiter's start; if
    the waiter's acquire blocked the loop, the holder would never release
    and the wait would end BulkheadFull after 8 s. limit.wait too: the
    second permit is reserved 100 ms ahead and slept for off the loop."""
    h = resil.open_embedded()
    h.define("aw", "bulkhead.max = 1; bulkhead.wait = 8s")
    h.define("lw", "limit.rate = 10/s; limit.burst = 1; limit.wait = 1s")
    p, lim = h.policy("aw"), h.policy("lw")
    assert p.may_wait() and lim.may_wait()
    order = []

    @p.guard
    async def hold(ticker, waiting):
        order.append("held")
        await waiting.wait()
        await ticker.after(20)
        order.append("released")

    @p.guard
    async def wait():
        order.append("admitted")

    async def main():
        ticker = Ticker()
        waiting = asyncio.Event()
        holder = asyncio.ensure_future(hold(ticker, waiting))
        await ticker.after(1)
        assert order == ["held"]
        waiter = asyncio.ensure_future(wait())
        await asyncio.sleep(0)   # the waiter is off to its thread
        waiting.set()
        await asyncio.gather(holder, waiter)
        async with lim.acquire_async():
            pass
        t, before = time.monotonic(), ticker.ticks
        async with lim.acquire_async():
            waited = time.monotonic() - t
        ticks = ticker.ticks - before
        ticker.stop()
        return waited, ticks

    waited, ticks = asyncio.run(main())
    assert order == ["held", "released", "admitted"]
    assert waited >= 0.05 and ticks > 0   # reserved ahead; the loop ticked meanwhile
    h.close()


def eventually_free(p):
    end = time.monotonic() + 10
    while True:
        try:
            p.acquire_within(0.01).release()
            return
        except (resil.BulkheadFull, TimeoutError):
            assert time.monotonic() < end, "an abandoned wait kept its permit"
            time.sleep(0.01)


def test_async_wait_timeout_and_cancel_give_back():
    """A wait given up (timeout=, or its task cancelled) keeps nothing: the
    permit its thread obtains once the holder releases is given back."""
    h = resil.open_embedded()
    h.define("at", "bulkhead.max = 1; bulkhead.wait = 30s")
    p = h.policy("at")
    held = p.acquire()

    async def main():
        with pytest.raises(TimeoutError):
            await p.acquire_async(timeout=0.05)
        t = asyncio.ensure_future(p.acquire_async())
        await asyncio.sleep(0.05)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    with pytest.raises(TimeoutError):
        p.acquire_within(0.05)
    held.release()
    eventually_free(p)
    h.close()


def test_acquire_within_no_wait_policy(r):
    p = pol(r, "nw", "bulkhead.max = 1")
    held = p.acquire_within(0.01)
    with pytest.raises(resil.BulkheadFull):
        p.acquire_within(5)   # fails fast: the policy never waits
    held.release()


def test_fork_shares_policy(r):
    p = pol(r, "fk", "bulkhead.max = 1")
    held = p.acquire()
    pid = os.fork()
    if pid == 0:
        try:
            p.acquire()
            os._exit(1)
        except resil.BulkheadFull:
            os._exit(0)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    held.release()


def test_clock_file_shared_by_unrelated_processes(tmp_path):
    """set_clock_file: handles that were never forked from one another read
    one manual clock, and their decisions follow it."""
    path = str(tmp_path / "clock")
    a, b = resil.open_embedded(), resil.open_embedded()
    try:
        a.set_clock_file(path, T0)
        b.set_clock_file(path)          # keeps the file's reading
        assert b.manual_clock and b.now() == T0
        a.advance(5)
        assert b.now() == T0 + 5
        p = pol(b, "cf", "limit.rate = 1/10s; limit.burst = 1")
        p.acquire().release()
        with pytest.raises(resil.RateLimited) as e:
            p.acquire()
        assert e.value.retry_after == pytest.approx(10.0)
        a.advance(10)                   # b's limiter earns its permit on a's move
        p.acquire().release()
        # another interpreter, started on its own, reads the same time
        import subprocess
        import sys
        out = subprocess.run(
            [sys.executable, "-c", "import resil, sys; h = resil.open_embedded(); "
             "h.set_clock_file(sys.argv[1]); h.advance(1); print(h.now_ns())", path],
            check=True, capture_output=True, text=True).stdout
        assert int(out) == int((T0 + 16) * 1e9) == a.now_ns()
    finally:
        a.close()
        b.close()


def test_clock_file_bad_input(tmp_path):
    h = resil.open_embedded()
    try:
        with pytest.raises(resil.Error) as e:
            h.set_clock_file(str(tmp_path))          # a directory
        assert e.value.errno == errno.EISDIR and e.value.filename == str(tmp_path)
        with pytest.raises(ValueError):
            h.set_clock_file(str(tmp_path / "c"), -1.0)
        h.set_clock(T0)
        with pytest.raises(RuntimeError):            # already on an anonymous page
            h.set_clock_file(str(tmp_path / "c"))
        assert h.now() == T0
    finally:
        h.close()
    with pytest.raises(resil.Error) as e:
        h.set_clock_file(str(tmp_path / "c"))
    assert e.value.errno == errno.EBADF

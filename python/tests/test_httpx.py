"""resil.httpx against a real local HTTP server whose answers the test
scripts: breaker outcomes from statuses and exceptions, retries of
idempotent methods only, Retry-After, the async twin, a policy per host,
and the request's time bounding every wait. Embedded mode on a manual
clock (retry sleeps advance it), except where the bound is on real time."""

import asyncio
import http.server
import socket
import threading
import time

import httpx
import pytest

import resil
import resil.httpx


class Upstream(http.server.ThreadingHTTPServer):
    """Answers with the statuses queued in `script` (then 200); records the
    methods it saw."""
    daemon_threads = True

    def __init__(self):
        self.script = []
        self.seen = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            def answer(h):
                with self.lock:
                    self.seen.append(h.command)
                    status, headers = self.script.pop(0) if self.script else (200, {})
                if status == "stall":   # never answers (until the server stops)
                    self.stop.wait(30)
                    return
                n = int(h.headers.get("Content-Length") or 0)
                if n:
                    h.rfile.read(n)
                h.send_response(status)
                for k, v in headers.items():
                    h.send_header(k, v)
                h.send_header("Content-Length", "2")
                h.end_headers()
                h.wfile.write(b"ok")

            do_GET = do_POST = do_PUT = answer

            def log_message(h, *a):
                pass
        super().__init__(("127.0.0.1", 0), H)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/x"


@pytest.fixture
def up():
    s = Upstream()
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.stop.set()
    s.shutdown()
    s.server_close()


@pytest.fixture
def r():
    h = resil.open_embedded()
    h.set_clock(1000.0)
    yield h
    h.close()


CONF = ("breaker.window = consecutive:3; breaker.wait = 30s; retry.max_attempts = 3;"
        "retry.base = 100ms; retry.multiplier = 2; retry.jitter = none")


def client(r, name="up", conf=CONF, timeout=5.0, **kw):
    r.define(name, conf)
    return httpx.Client(transport=resil.httpx.ResilTransport(policy=r.policy(name), **kw),
                        timeout=timeout)


def test_get_retried_then_success(r, up):
    up.script = [(503, {}), (500, {})]
    t = r.now_ns()
    with client(r) as c:
        resp = c.get(up.url)
    assert resp.status_code == 200
    assert up.seen == ["GET"] * 3
    assert r.now_ns() - t == 300_000_000   # 100 + 200 ms


def test_post_not_retried_unless_told(r, up):
    up.script = [(503, {})]
    with client(r) as c:
        assert c.post(up.url, content=b"pay").status_code == 503
    assert up.seen == ["POST"]
    up.seen.clear()
    up.script = [(503, {})]
    with client(r, "all", retry_methods="*") as c:
        assert c.post(up.url, content=b"pay").status_code == 200
    assert up.seen == ["POST", "POST"]


def test_retry_after_honoured(r, up):
    up.script = [(429, {"Retry-After": "7"})]
    t = r.now_ns()
    with client(r, timeout=10) as c:
        assert c.get(up.url).status_code == 200
    assert r.now_ns() - t >= 7_000_000_000


def test_retry_after_past_the_timeout_fails_fast(up):
    """503 with Retry-After: 25 to a client with timeout=5, on the real
    clock: no sleep, resil.Throttled at once with the dependency's value
    and answer, sync and async."""
    h = resil.open_embedded()
    h.define("slow", "retry.max_attempts = 3; retry.base = 10ms")
    p = h.policy("slow")
    up.script = [(503, {"Retry-After": "25"})] * 2
    t = time.monotonic()
    with httpx.Client(transport=resil.httpx.ResilTransport(policy=p), timeout=5) as c:
        with pytest.raises(resil.Throttled) as e:
            c.get(up.url)
    assert time.monotonic() - t < 5
    assert e.value.retry_after == 25 and e.value.status_code == 503
    assert e.value.policy == "slow" and e.value.response.status_code == 503
    assert isinstance(e.value, resil.Rejected)

    async def main():
        tr = resil.httpx.AsyncResilTransport(policy=p)
        async with httpx.AsyncClient(transport=tr, timeout=5) as c:
            await c.get(up.url)

    t = time.monotonic()
    with pytest.raises(resil.Throttled) as e:
        asyncio.run(main())
    assert time.monotonic() - t < 5
    assert e.value.retry_after == 25
    assert up.seen == ["GET", "GET"]   # one attempt each
    h.close()


def test_policy_deadline_bounds_retry_after(r, up):
    """The policy's deadline bounds the waits too: Retry-After 3 fits a
    10 s timeout but not a 2 s deadline."""
    r.define("dl", CONF)
    p = r.policy("dl", deadline=2.0)
    up.script = [(429, {"Retry-After": "3"})]
    with httpx.Client(transport=resil.httpx.ResilTransport(policy=p), timeout=10) as c:
        with pytest.raises(resil.Throttled) as e:
            c.get(up.url)
    assert e.value.retry_after == 3 and e.value.status_code == 429


def test_attempt_timeouts_shrink_to_what_is_left(r, up):
    """Retry-After 3 within a 5 s timeout (manual clock: the sleep advances
    it at once), then an upstream that never answers: the second attempt
    may wait 2 s (real), not 5."""
    up.script = [(503, {"Retry-After": "3"}), ("stall", {})]
    t = time.monotonic()
    with client(r, conf=CONF.replace("max_attempts = 3", "max_attempts = 2"), timeout=5) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.get(up.url)
    assert time.monotonic() - t < 4.5
    assert up.seen == ["GET", "GET"]


def test_permit_wait_bounded_by_the_timeout(r, up):
    """A full bulkhead with bulkhead.wait = 30s and a 0.5 s client: the
    request gives up with httpx.PoolTimeout; the permit its wait obtains
    after the holder releases is given back, not leaked."""
    r.define("bh", "bulkhead.max = 1; bulkhead.wait = 30s; retry.max_attempts = 1")
    p = r.policy("bh")
    held = p.acquire()
    t = time.monotonic()
    with httpx.Client(transport=resil.httpx.ResilTransport(policy=p), timeout=0.5) as c:
        with pytest.raises(httpx.PoolTimeout):
            c.get(up.url)
    assert time.monotonic() - t < 10
    assert up.seen == []
    held.release()

    def free():
        try:
            p.acquire_within(0.01).release()   # the abandoned wait gave it back
            return True
        except (resil.BulkheadFull, TimeoutError):
            return False
    end = time.monotonic() + 10
    while not free():
        assert time.monotonic() < end, "the abandoned wait kept the permit"
        time.sleep(0.01)


def test_breaker_opens_on_5xx(r, up):
    up.script = [(500, {})] * 20
    with client(r, conf="breaker.window = consecutive:3; breaker.wait = 30s;"
                "retry.max_attempts = 1") as c:
        for _ in range(3):
            assert c.get(up.url).status_code == 500
        with pytest.raises(resil.CircuitOpen):
            c.get(up.url)
        assert len(up.seen) == 3
        r.advance(30)
        assert c.get(up.url).status_code == 500   # the probe
        with pytest.raises(resil.CircuitOpen):
            c.get(up.url)
    assert len(up.seen) == 4


def test_4xx_is_not_a_failure(r, up):
    up.script = [(404, {})] * 5
    with client(r) as c:
        for _ in range(5):
            assert c.get(up.url).status_code == 404
    assert r.policy("up").state() == resil.STATE_CLOSED
    assert len(up.seen) == 5   # not retried either


def test_connection_errors_fail_and_retry(r):
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with client(r) as c:
        with pytest.raises(httpx.ConnectError):
            c.get(f"http://127.0.0.1:{port}/")
        assert r.policy("up").state() == resil.STATE_OPEN   # 3 attempts, 3 failures
        with pytest.raises(resil.CircuitOpen):
            c.get(f"http://127.0.0.1:{port}/")


def test_policy_per_host(r, up):
    r.define("a", "breaker.window = consecutive:1; breaker.wait = 30s; retry.max_attempts = 1")
    r.define("b", "bulkhead.max = 10")
    port = up.server_address[1]
    t = resil.httpx.ResilTransport(handle=r, policies={"127.0.0.1": "a", "localhost": "b"})
    up.script = [(500, {})]
    with httpx.Client(transport=t) as c:
        assert c.get(f"http://127.0.0.1:{port}/").status_code == 500
        with pytest.raises(resil.CircuitOpen):
            c.get(f"http://127.0.0.1:{port}/")
        assert c.get(f"http://localhost:{port}/").status_code == 200


def test_async_transport(r, up):
    r.define("as", CONF)
    up.script = [(503, {"Retry-After": "2"}), (502, {})]

    async def main():
        t = r.now_ns()
        tr = resil.httpx.AsyncResilTransport(policy=r.policy("as"))
        async with httpx.AsyncClient(transport=tr) as c:
            resp = await c.get(up.url)
        assert resp.status_code == 200
        return r.now_ns() - t

    waited = asyncio.run(main())
    assert up.seen == ["GET"] * 3
    assert waited >= 2_000_000_000 + 200_000_000

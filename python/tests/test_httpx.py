"""resil.httpx against a real local HTTP server whose answers the test
scripts: breaker outcomes from statuses and exceptions, retries of
idempotent methods only, Retry-After, the async twin, a policy per host.
Embedded mode on a manual clock: retry sleeps advance it."""

import asyncio
import http.server
import socket
import threading

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

        class H(http.server.BaseHTTPRequestHandler):
            def answer(h):
                with self.lock:
                    self.seen.append(h.command)
                    status, headers = self.script.pop(0) if self.script else (200, {})
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


def client(r, name="up", conf=CONF, **kw):
    r.define(name, conf)
    return httpx.Client(transport=resil.httpx.ResilTransport(policy=r.policy(name), **kw))


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
    with client(r) as c:
        assert c.get(up.url).status_code == 200
    assert r.now_ns() - t >= 7_000_000_000


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

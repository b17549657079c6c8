"""The documented Python examples run as written: the README's quick start
and each ```python block of docs/python.md, against a resild this test
starts ($RESIL_SOCKET is how the examples find it). The asyncio example
waits for a bulkhead on one loop; the Django settings block configures a
real Django whose middleware then limits a client seen through a trusted
proxy; the httpx example calls a local server."""

import http.server
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import resil

SRC = os.environ.get("SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
RESILD = os.environ.get("RESILD")


def blocks():
    text = open(os.path.join(SRC, "docs", "python.md")).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def quick_start():
    text = open(os.path.join(SRC, "README.md")).read()
    sec = text.split("\n<!-- readme-python: begin", 1)[1].split("\n<!-- readme-python: end", 1)[0]
    return re.findall(r"```python\n(.*?)```", sec, re.S)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not RESILD:
        pytest.skip("RESILD (the resild binary) not set")
    d = tmp_path_factory.mktemp("readme")
    sock = str(d / "control.sock")
    (d / "conf").mkdir()
    p = subprocess.Popen([RESILD, "--foreground", "--socket", sock, "--config", str(d / "conf")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 10
    while True:
        try:
            resil.open(sock, pending=False).close()
            break
        except resil.Error:
            assert time.monotonic() < end, "resild does not answer"
            time.sleep(0.05)
    yield sock
    p.send_signal(signal.SIGTERM)
    p.wait(10)


def run(code, sock, **env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, RESIL_SOCKET=sock, **env), timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_four_examples():
    assert len(blocks()) == 4
    assert len(quick_start()) == 1


def test_quick_start(daemon):
    assert run(quick_start()[0], daemon) == "charged\n"


def test_usage_example(daemon):
    out = run(blocks()[0], daemon)
    assert "{'card': '4242', 'ok': True}" in out
    assert "refused" not in out


def test_asyncio_example(daemon):
    assert run(blocks()[1], daemon) == "[1, 2]\n"


def test_django_settings(daemon):
    code = blocks()[2] + textwrap.dedent("""
        import django, json
        from django.conf import settings
        settings.configure(SECRET_KEY="x", ALLOWED_HOSTS=["*"], MIDDLEWARE=MIDDLEWARE,
                           RESIL=RESIL, RESIL_RATELIMIT=RESIL_RATELIMIT,
                           RESIL_TRUSTED_PROXIES=RESIL_TRUSTED_PROXIES)
        django.setup()
        from django.http import HttpResponse
        from django.test import RequestFactory
        import resil.django
        mw = resil.django.RateLimitMiddleware(lambda request: HttpResponse("ok"))
        rf = RequestFactory()
        codes = [mw(rf.get("/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.9"))
                 for _ in range(101)]
        last = codes[-1]
        print(sum(c.status_code == 200 for c in codes), last.status_code,
              last["Retry-After"], json.loads(last.content)["error"])
    """)
    n, status, ra, *err = run(code, daemon).split()
    assert (int(n), status, " ".join(err)) == (100, "429", "rate limited")
    assert int(ra) >= 1


def test_httpx_example(daemon):
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"[]")

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = run(blocks()[3], daemon,
                  INVENTORY_URL=f"http://127.0.0.1:{srv.server_address[1]}/items")
    finally:
        srv.shutdown()
        srv.server_close()
    assert out.strip() == "200"
    assert seen == ["/items"]

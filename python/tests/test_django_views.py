"""resil.django in one process (embedded mode, manual clock): the view
decorators, the key choices of the middleware, client_ip's reading of
X-Forwarded-For through trusted proxies only."""

import django
from django.conf import settings

settings.configure(
    SECRET_KEY="t", ALLOWED_HOSTS=["*"], DATABASES={}, INSTALLED_APPS=[],
    RESIL={"embedded": True},
    RESIL_TRUSTED_PROXIES=["10.0.0.0/8", "127.0.0.1"],
    RESIL_RATELIMIT={"policy": "mw", "config": "limit.rate = 2/1h; limit.burst = 2;"
                     "limit.keys = 64", "key": "header:X-Api-Key"},
)
django.setup()

import json  # noqa: E402

import pytest  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.test import RequestFactory  # noqa: E402

import resil  # noqa: E402
import resil.django as rd  # noqa: E402

rf = RequestFactory()


@pytest.fixture(autouse=True, scope="module")
def clock():
    rd.handle().set_clock(5000.0)


def req(peer="192.0.2.1", xff=None, **headers):
    extra = {"REMOTE_ADDR": peer}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    for k, v in headers.items():
        extra["HTTP_" + k.upper()] = v
    return rf.get("/", **extra)


def test_client_ip():
    assert rd.client_ip(req("192.0.2.1", "1.2.3.4")) == "192.0.2.1"      # untrusted peer
    assert rd.client_ip(req("10.1.1.1", "1.2.3.4")) == "1.2.3.4"         # trusted proxy
    assert rd.client_ip(req("10.1.1.1", "6.6.6.6, 1.2.3.4, 10.2.2.2")) == "1.2.3.4"
    assert rd.client_ip(req("127.0.0.1", "")) == "127.0.0.1"
    assert rd.client_ip(req("10.1.1.1", "10.3.3.3")) == "10.3.3.3"       # all trusted


def test_ratelimit_decorator():
    @rd.ratelimit("dec", "limit.rate = 3/1h; limit.burst = 3; limit.keys = 64")
    def view(request):
        return HttpResponse("ok")

    codes = [view(req("192.0.2.7")).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    r = view(req("192.0.2.7"))
    assert int(r["Retry-After"]) >= 1200            # 20 min, in whole seconds
    assert json.loads(r.content)["error"] == "rate limited"
    assert view(req("192.0.2.8")).status_code == 200   # another key


def test_breaker_decorator_and_fallback():
    calls = []

    @rd.breaker("brk", "breaker.window = consecutive:2; breaker.wait = 30s",
                fallback=lambda request: HttpResponse("cached", status=200))
    def view(request):
        calls.append(1)
        return HttpResponse("down", status=502)

    assert view(req()).status_code == 502
    assert view(req()).status_code == 502
    r = view(req())
    assert r.status_code == 200 and r.content == b"cached"
    assert len(calls) == 2

    @rd.breaker("brk")
    def bare(request):
        return HttpResponse("never")
    r = bare(req())
    assert r.status_code == 503 and json.loads(r.content)["error"] == "circuit open"


def test_middleware_header_key():
    mw = rd.RateLimitMiddleware(lambda request: HttpResponse("ok"))
    assert [mw(req(X_API_KEY="k1")).status_code for _ in range(3)] == [200, 200, 429]
    assert mw(req(X_API_KEY="k2")).status_code == 200
    r = mw(req(X_API_KEY="k1"))
    assert r.status_code == 429 and r["Content-Type"] == "application/json"


def test_misconfigured():
    from django.core.exceptions import ImproperlyConfigured
    with pytest.raises(ImproperlyConfigured):
        rd._key_func(42)
    with pytest.raises(resil.Error):
        rd.policy("broken", "limit.rate = soon")

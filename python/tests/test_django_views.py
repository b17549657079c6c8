"""resil.django in one process (embedded mode, manual clock): the view
decorators (sync and async views), the middleware's options (key, exempt
paths, methods, block=False, the response hook), Rejected escaping a view
mapped to 503/429 with Retry-After, the middleware in Django's sync and
async handler chains, client_ip's reading of X-Forwarded-For through
trusted proxies only."""

import asyncio
import threading

import django
from django.conf import settings

settings.configure(
    SECRET_KEY="t", ALLOWED_HOSTS=["*"], DATABASES={}, INSTALLED_APPS=[],
    ROOT_URLCONF=__name__, MIDDLEWARE=["resil.django.RateLimitMiddleware"],
    RESIL={"embedded": True},
    RESIL_TRUSTED_PROXIES=["10.0.0.0/8", "127.0.0.1"],
    RESIL_RATELIMIT={"policy": "mw", "config": "limit.rate = 2/1h; limit.burst = 2;"
                     "limit.keys = 64", "key": __name__ + ".api_key"},
)
django.setup()

import json  # noqa: E402

import pytest  # noqa: E402
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.test import AsyncClient, Client, RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

import resil  # noqa: E402
import resil.django as rd  # noqa: E402

rf = RequestFactory()


# ---- the app the handler-chain tests call ----

key_threads = []


def api_key(request):
    """The middleware's key: the X-Api-Key header; notes the thread the
    middleware decides in."""
    key_threads.append(threading.get_ident())
    return request.META.get("HTTP_X_API_KEY")


def v_ok(request):
    return JsonResponse({"limited": request.resil_limited})


async def v_aok(request):
    await asyncio.sleep(0)
    return JsonResponse({"limited": request.resil_limited,
                         "loop": id(asyncio.get_running_loop())})


def rejected(kind):
    if kind == "open":   # one failure opens it for 30 s (the clock stands still)
        p = rd.policy("v-down", "breaker.window = consecutive:1; breaker.wait = 30s")
        p.acquire().release(resil.FAILURE)
    else:
        p = rd.policy("v-lim", "limit.rate = 1/10s; limit.burst = 1")
    while True:
        p.acquire().release()   # raises once refused


def v_raise(request, kind):
    rejected(kind)


async def v_araise(request, kind):
    rejected(kind)


urlpatterns = [path("ok", v_ok), path("aok", v_aok), path("raise/<kind>", v_raise),
               path("araise/<kind>", v_araise)]


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


# ---- the middleware's options ----

def mw_with(conf, view=None):
    conf = dict({"policy": "opt", "config": "limit.rate = 1/1h; limit.burst = 1;"
                 "limit.keys = 64", "key": "ip"}, **conf)
    with override_settings(RESIL_RATELIMIT=conf):
        return rd.RateLimitMiddleware(view or (lambda request: HttpResponse("ok")))


def test_middleware_exempt_and_methods():
    mw = mw_with({"exempt": ["/health"], "methods": ["post"]})
    peer = {"REMOTE_ADDR": "192.0.2.30"}
    for _ in range(3):
        assert mw(rf.get("/health/live", **peer)).status_code == 200   # exempt path
        assert mw(rf.get("/page", **peer)).status_code == 200          # GET not limited
    assert mw(rf.post("/page", **peer)).status_code == 200
    r = mw(rf.post("/page", **peer))
    assert r.status_code == 429 and int(r["Retry-After"]) >= 3599
    assert mw(rf.post("/health", **peer)).status_code == 200


def test_middleware_block_false_marks_the_request():
    seen = []

    def view(request):
        seen.append((request.resil_limited, getattr(request, "resil_rejection", None)))
        return HttpResponse("served")

    mw = mw_with({"policy": "mark", "block": False}, view)
    for _ in range(2):
        assert mw(req("192.0.2.31")).status_code == 200
    assert seen[0] == (False, None)
    assert seen[1][0] is True and isinstance(seen[1][1], resil.RateLimited)


def hook(request, e):
    return JsonResponse({"mine": type(e).__name__, "ra": round(e.retry_after or 0)}, status=418)


def test_middleware_response_hook():
    for spec in (hook, __name__ + ".hook"):
        mw = mw_with({"policy": "hook-" + str(id(spec)), "response": spec})
        assert mw(req("192.0.2.32")).status_code == 200
        r = mw(req("192.0.2.32"))
        assert r.status_code == 418
        assert json.loads(r.content) == {"mine": "RateLimited", "ra": 3600}


# ---- the handler chains: sync (WSGI) and async (ASGI) ----

def test_sync_chain_and_rejection_escaping_a_view():
    c = Client()
    r = c.get("/ok", HTTP_X_API_KEY="sync-1")
    assert r.status_code == 200 and r.json() == {"limited": False}
    r = c.get("/raise/open", HTTP_X_API_KEY="sync-2")
    assert r.status_code == 503 and r.json()["error"] == "circuit open"
    assert r["Retry-After"] == "30"   # the open breaker's next probe
    r = c.get("/raise/limit", HTTP_X_API_KEY="sync-3")
    assert r.status_code == 429 and r["Retry-After"] == "10"
    assert r.json() == {"error": "rate limited", "retry_after": 10}


def test_async_chain_runs_on_the_loop():
    """Under the ASGI handler the middleware is async: it decides on the
    loop's thread, and the view runs on the test's own loop (a sync-only
    middleware would be run by Django in a thread of sync_to_async's)."""
    def key(k):   # Django 3.2's AsyncClient: extra arguments are headers
        return {"x-api-key": k}

    async def main():
        c = AsyncClient()
        del key_threads[:]
        r = await c.get("/aok", **key("async-1"))
        assert key_threads == [threading.get_ident()]
        assert r.status_code == 200
        assert r.json() == {"limited": False, "loop": id(asyncio.get_running_loop())}
        r = await c.get("/araise/open", **key("async-2"))
        assert r.status_code == 503 and r.json()["error"] == "circuit open"
        assert r["Retry-After"] == "30"
        r = await c.get("/araise/limit", **key("async-3"))
        assert r.status_code == 429 and r["Retry-After"] == "10"
        for _ in range(2):
            r = await c.get("/aok", **key("async-4"))
        assert r.status_code == 200
        r = await c.get("/aok", **key("async-4"))
        assert r.status_code == 429

    asyncio.run(main())


def test_async_view_decorators():
    @rd.ratelimit("adec", "limit.rate = 1/1h; limit.burst = 1; limit.keys = 64")
    async def view(request):
        return HttpResponse("ok")

    async def fallback(request):
        return HttpResponse("cached")

    @rd.breaker("abrk", "breaker.window = consecutive:1; breaker.wait = 30s",
                fallback=fallback)
    async def down(request):
        return HttpResponse("down", status=502)

    async def main():
        codes = [(await view(req("192.0.2.40"))).status_code for _ in range(2)]
        assert codes == [200, 429]
        assert (await down(req())).status_code == 502
        r = await down(req())
        assert r.status_code == 200 and r.content == b"cached"

    asyncio.run(main())

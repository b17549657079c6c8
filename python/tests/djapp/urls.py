import os
import time

import httpx
from django.http import HttpResponse, JsonResponse
from django.urls import path

import resil
import resil.django
import resil.httpx

_client = None


def client():
    """One httpx client per worker, every call to the dependency under the
    fleet's breaker (policy "dep")."""
    global _client
    if _client is None:
        h = resil.django.handle()
        h.define("dep", os.environ.get("DJAPP_DEP", "breaker.window = consecutive:5;"
                                       "breaker.wait = 60s; breaker.half_open_calls = 1;"
                                       "retry.max_attempts = 1"))
        _client = httpx.Client(transport=resil.httpx.ResilTransport(policy=h.policy("dep")),
                               timeout=5)
    return _client


def whoami(request):
    # a request takes a little while, as real ones do: concurrent clients
    # then find the other workers accepting (sync workers serve one at a time)
    time.sleep(0.005)
    return JsonResponse({"pid": os.getpid(), "ip": resil.django.client_ip(request)})


def ping(request):
    return HttpResponse("ok")


def dep(request):
    try:
        r = client().get(os.environ["DJAPP_DEP_URL"])
    except resil.CircuitOpen:
        return JsonResponse({"dep": "open"}, status=503)
    except httpx.HTTPError:
        return JsonResponse({"dep": "error"}, status=502)
    return JsonResponse({"dep": r.status_code}, status=200 if r.status_code < 500 else 502)


def hold(request):
    """Holds a permit of the bulkhead "slot" until killed (the test SIGKILLs
    this worker)."""
    p = resil.django.policy("slot", "bulkhead.max = 1")
    permit = p.acquire()
    with open(os.environ["DJAPP_HOLD_FILE"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    permit.release()
    return HttpResponse("released")


def slot(request):
    p = resil.django.policy("slot", "bulkhead.max = 1")
    try:
        with p.acquire():
            return HttpResponse("got it")
    except resil.BulkheadFull:
        return HttpResponse("full", status=503)


urlpatterns = [path("ping", ping), path("whoami", whoami), path("dep", dep), path("hold", hold),
               path("slot", slot)]

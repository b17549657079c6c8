import os
import time

import httpx
from django.http import HttpResponse, JsonResponse
from django.urls import path

import resil
import resil.django
import resil.httpx

from . import aviews

DEP_CONFIG = ("breaker.window = consecutive:5; breaker.wait = 60s; breaker.half_open_calls = 1;"
              "retry.max_attempts = 1")
_clients = {}


def client(name="dep"):
    """One httpx client per worker and policy: every call to the dependency
    under the breaker of policy `name` ("dep": the fleet's; "dep-local-PID":
    this worker's own, as an in-process breaker would be)."""
    c = _clients.get(name)
    if c is None:
        h = resil.django.handle()
        h.define(name, os.environ.get("DJAPP_DEP", DEP_CONFIG))
        c = httpx.Client(transport=resil.httpx.ResilTransport(policy=h.policy(name)), timeout=5)
        _clients[name] = c
    return c


def whoami(request):
    # a request takes a little while, as real ones do: concurrent clients
    # then find the other workers accepting (sync workers serve one at a time)
    time.sleep(0.005)
    return JsonResponse({"pid": os.getpid(), "ip": resil.django.client_ip(request),
                         "attached": resil.django.handle().attached})


def ping(request):
    return HttpResponse("ok")


def call_dep(name):
    pid = os.getpid()
    try:
        r = client(name).get(os.environ["DJAPP_DEP_URL"])
    except resil.CircuitOpen:
        return JsonResponse({"dep": "open", "pid": pid}, status=503)
    except httpx.HTTPError:
        return JsonResponse({"dep": "error", "pid": pid}, status=502)
    return JsonResponse({"dep": r.status_code, "pid": pid},
                        status=200 if r.status_code < 500 else 502)


def dep(request):
    return call_dep("dep")


def dep_local(request):
    return call_dep(f"dep-local-{os.getpid()}")


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


urlpatterns = [path("ping", ping), path("whoami", whoami), path("dep", dep),
               path("dep-local", dep_local), path("hold", hold), path("slot", slot),
               path("async-dep", aviews.async_dep), path("contend", aviews.contend)]

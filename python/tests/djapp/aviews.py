"""The app's async views, for its runs under uvicorn workers (ASGI): a
module-level httpx.AsyncClient through resil.httpx, and a bulkhead with
waiters contended on one loop."""
import asyncio
import os
import time

import httpx
from django.http import JsonResponse

import resil
import resil.django
import resil.httpx

# declared when the module loads, as an application does
ADEP = resil.django.policy("adep", "breaker.window = consecutive:50; retry.max_attempts = 2")
CLIENT = httpx.AsyncClient(transport=resil.httpx.AsyncResilTransport(policy=ADEP), timeout=10)


async def async_dep(request):
    """One call to the dependency through the module-level client."""
    r = await CLIENT.get(os.environ["DJAPP_DEP_URL"])
    return JsonResponse({"dep": r.status_code, "pid": os.getpid()})


async def contend(request):
    """A holder and a waiter of a one-permit bulkhead with waiters, both
    guarded coroutines on this loop. The holder releases once the file
    DJAPP_RELEASE_FILE exists (the test creates it when resild reports the
    waiter waiting), polling for it on the loop; a ticker task measures the
    loop's largest gap between two ticks meanwhile."""
    p = resil.django.policy("contend", "bulkhead.max = 1; bulkhead.wait = 20s")
    release = os.environ["DJAPP_RELEASE_FILE"]
    order, gaps, done = [], [], asyncio.Event()

    async def ticker():
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    @p.guard
    async def hold():
        order.append("held")
        while not os.path.exists(release):
            await asyncio.sleep(0.005)
        order.append("released")

    @p.guard
    async def wait():
        order.append("admitted")

    ticks = asyncio.ensure_future(ticker())
    holder = asyncio.ensure_future(hold())
    while not order:
        await asyncio.sleep(0)
    try:
        await asyncio.gather(holder, wait())
    except resil.Rejected as e:
        order.append(type(e).__name__)
    done.set()
    await ticks
    return JsonResponse({"order": order, "max_gap_ms": max(gaps) * 1e3, "ticks": len(gaps),
                         "pid": os.getpid()})

"""The Django app of djapp/ under uvicorn workers (gunicorn -k
uvicorn.workers.UvicornWorker, 2 workers; ASGI) with the rate-limit
middleware on, against a resild this test starts:

- an async view calling a dependency through a module-level
  httpx.AsyncClient (resil.httpx.AsyncResilTransport): every request is
  answered (the middleware runs async, on the server's loop, so the
  client's loop is the one it was made for);
- a one-permit bulkhead with bulkhead.wait contended on one loop by two
  guarded coroutines: the waiter waits (resild reports it waiting) while
  the holder, on the same loop, keeps running and releases, then the
  waiter is admitted; the loop's largest gap between two ticks of a 5 ms
  ticker meanwhile stays under 50 ms (an acquire that blocked the loop
  would stall it for the whole wait).
"""

import concurrent.futures as cf
import json
import os
import subprocess
import sys

import pytest

from fleet import RESILCTL, Dependency, Resild, djapp_env, eventually, get, serve, stop

WORKERS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("asgi")
    daemon = Resild(d)
    dep = Dependency(status=200)
    try:
        env = djapp_env(daemon, d, DJAPP_DEP_URL=dep.url,
                        DJAPP_LIMIT="limit.rate = 1000/1s; limit.burst = 1000; limit.keys = 1024")
        gun = serve([sys.executable, "-m", "gunicorn", "-w", str(WORKERS),
                     "-k", "uvicorn.workers.UvicornWorker", "-b", "127.0.0.1:{port}",
                     "--graceful-timeout", "1", "--timeout", "60", "djapp.asgi"],
                    env, d / "gunicorn.log", "the uvicorn workers")
        try:
            yield {"base": gun.base, "sock": daemon.sock, "dir": d, "dep": dep,
                   "log": d / "gunicorn.log"}
        finally:
            stop(gun)
    finally:
        daemon.stop()
        dep.close()


def test_async_view_with_module_level_client(server):
    before = server["dep"].hits

    def one(i):
        return get(server["base"] + "/async-dep",
                   {"X-Forwarded-For": f"198.51.100.{i % 250}"}, timeout=60)

    with cf.ThreadPoolExecutor(16) as ex:
        rs = list(ex.map(one, range(100)))
    bad = [(r.status_code, r.text[:200]) for r in rs if r.status_code != 200]
    assert not bad, (bad[:3], open(server["log"]).read()[-3000:])
    assert all(r.json()["dep"] == 200 for r in rs)
    assert server["dep"].hits - before == 100


def waiters(sock):
    out = subprocess.run([RESILCTL, "--socket", sock, "--json", "show", "contend"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return 0   # not defined yet: the view defines it
    return json.loads(out.stdout)["why"]["bulkhead"]["waiters"]


def test_bulkhead_wait_leaves_the_loop_running(server):
    if not RESILCTL or not os.access(RESILCTL, os.X_OK):
        pytest.skip("RESILCTL (the resilctl binary) not set")
    with cf.ThreadPoolExecutor(1) as ex:
        answer = ex.submit(get, server["base"] + "/contend", None, "127.0.0.1", 60)
        eventually(lambda: waiters(server["sock"]) == 1, what="resild reports the waiter")
        (server["dir"] / "release").touch()
        r = answer.result(60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["order"] == ["held", "released", "admitted"], body
    assert body["ticks"] > 0
    assert body["max_gap_ms"] <= 50, body

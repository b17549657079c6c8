"""The Django app of djapp/ under uwsgi (Debian's uwsgi-core and python3
plugin): a prefork master with 4 worker processes, the app loaded once in
the master before the fork and, with lazy-apps, in each worker after it.
Either way the per-IP limit is one for the host: one client IP through the
trusted proxy gets exactly the burst (100) over every process, while a
manual clock in a file (Resil.set_clock_file), shared by the workers and
this test, stands still.
"""

import concurrent.futures as cf
import os
import shutil
import time

import pytest

import resil
from fleet import HERE, Resild, djapp_env, get, serve, stop

WORKERS = 4


def uwsgi_cmd():
    exe = shutil.which("uwsgi") or shutil.which("uwsgi-core")
    if not exe:
        pytest.skip("no uwsgi (apt-get install uwsgi-core uwsgi-plugin-python3)")
    return exe


@pytest.fixture(params=[False, True], ids=["master-loads", "lazy-apps"])
def fleet(request, tmp_path):
    exe = uwsgi_cmd()
    daemon = Resild(tmp_path)
    clock = None
    try:
        clock = resil.open(daemon.sock, pending=False)
        clock.set_clock_file(str(tmp_path / "clock"), time.monotonic() + 3600)
        env = djapp_env(daemon, tmp_path, DJAPP_CLOCK_FILE=str(tmp_path / "clock"))
        cmd = [exe, "--plugin", "python3", "--master", "--processes", str(WORKERS),
               "--http-socket", "127.0.0.1:{port}", "--chdir", HERE, "--pythonpath", HERE,
               "--module", "djapp.wsgi:application", "--need-app", "--die-on-term",
               "--disable-logging"]
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            if p:
                cmd += ["--pythonpath", p]
        if request.param:
            cmd.append("--lazy-apps")
        # its own session: the workers go with the master if it must be killed
        uw = serve(cmd, env, tmp_path / "uwsgi.log", "uwsgi", group=True)
        try:
            yield uw.base
        finally:
            stop(uw, group=True)
    finally:
        if clock is not None:
            clock.close()
        daemon.stop()


def test_one_limit_over_uwsgi_workers(fleet):
    ip = "203.0.113.7"

    def one(_):
        return get(fleet + "/whoami", {"X-Forwarded-For": ip})

    with cf.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(one, range(160)))
    ok = [r for r in rs if r.status_code == 200]
    assert len(ok) == 100
    assert all(r.json()["ip"] == ip for r in ok)
    assert len({r.json()["pid"] for r in ok}) > 1, "the requests were not spread"
    refused = [r for r in rs if r.status_code != 200]
    assert all(r.status_code == 429 and r.headers.get("retry-after") == "1" for r in refused)

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
import signal
import subprocess
import time

import pytest

import resil
from test_django import HERE, RESILD, eventually, free_port, get

WORKERS = 4


def uwsgi_cmd():
    exe = shutil.which("uwsgi") or shutil.which("uwsgi-core")
    if not exe:
        pytest.skip("no uwsgi (apt-get install uwsgi-core uwsgi-plugin-python3)")
    return exe


@pytest.fixture(params=[False, True], ids=["master-loads", "lazy-apps"])
def fleet(request, tmp_path):
    if not RESILD or not os.access(RESILD, os.X_OK):
        pytest.skip("RESILD (the resild binary) not set")
    exe = uwsgi_cmd()
    sock = str(tmp_path / "control.sock")
    (tmp_path / "conf").mkdir()
    daemon = subprocess.Popen([RESILD, "--foreground", "--socket", sock,
                               "--config", str(tmp_path / "conf")],
                              stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "resild.log", "w"))
    uw = None
    clock = None
    try:
        def up():
            try:
                resil.open(sock).close()
                return True
            except resil.Error:
                return False
        eventually(up, what="resild answers")
        clock = resil.open(sock)
        clock.set_clock_file(str(tmp_path / "clock"), time.monotonic() + 3600)
        port = free_port()
        env = dict(os.environ, RESIL_SOCKET=sock, DJANGO_SETTINGS_MODULE="djapp.settings",
                   DJAPP_DEP_URL="http://127.0.0.1:9/", DJAPP_HOLD_FILE=str(tmp_path / "hold"),
                   DJAPP_CLOCK_FILE=str(tmp_path / "clock"),
                   DJAPP_LIMIT="limit.rate = 100/60s; limit.burst = 100; limit.keys = 1024")
        cmd = [exe, "--plugin", "python3", "--master", "--processes", str(WORKERS),
               "--http-socket", f"127.0.0.1:{port}", "--chdir", HERE, "--pythonpath", HERE,
               "--module", "djapp.wsgi:application", "--need-app", "--die-on-term",
               "--disable-logging"]
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            if p:
                cmd += ["--pythonpath", p]
        if request.param:
            cmd.append("--lazy-apps")
        # its own session: the workers go with the master if it must be killed
        uw = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "uwsgi.log", "w"), start_new_session=True)
        base = f"http://127.0.0.1:{port}"

        def ready():
            try:
                return get(base + "/ping").status_code == 200
            except OSError:
                assert uw.poll() is None, open(tmp_path / "uwsgi.log").read()
                return False
        eventually(ready, 90, "uwsgi answers")
        yield base
    finally:
        if uw is not None:
            uw.send_signal(signal.SIGTERM)
            try:
                uw.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(uw.pid, signal.SIGKILL)
                uw.wait()
        if clock is not None:
            clock.close()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


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

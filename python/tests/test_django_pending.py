"""A fleet keeps serving while resild is away: gunicorn (4 sync workers,
each opening its own handle at boot, no --preload) serving djapp with the
rate-limit middleware, every worker on one manual clock (a file the test
moves: Resil.set_clock_file).

- resild stops; a worker is SIGKILLed: gunicorn respawns it and the new
  worker boots (its handle is pending: resil.open's default) and answers,
  its decisions made by the policy's fallback; every request sent
  meanwhile, to any worker, is answered (200, or 429 from a limiter);
- resild starts again: within 10 s every worker decides in the new
  daemon's segments (the respawned one attached, the others moved from
  the old daemon's), and the per-IP limit is one for the fleet again:
  exactly the burst (100) per client IP over all 4 workers.
"""

import concurrent.futures as cf
import contextlib
import os
import signal
import sys
import threading
import time

import pytest

import resil
from fleet import RESILCTL, Resild, djapp_env, eventually, get, serve, stop
from test_django import flood

WORKERS = 4


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(x) for x in f.read().split()}


@pytest.fixture
def fleet(tmp_path):
    if not RESILCTL:
        pytest.skip("RESILCTL (the resilctl binary) not set")
    daemon = Resild(tmp_path)
    clock = None
    try:
        clock = resil.open(daemon.sock, pending=False)
        clock.set_clock_file(str(tmp_path / "clock"), time.monotonic() + 3600)
        env = djapp_env(daemon, tmp_path, DJAPP_CLOCK_FILE=str(tmp_path / "clock"),
                        DJAPP_LIMIT="limit.rate = 100/60s; limit.burst = 100; limit.keys = 4096")
        gun = serve([sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-k", "sync",
                     "-b", "127.0.0.1:{port}", "--graceful-timeout", "1", "--timeout", "60",
                     "djapp.wsgi"], env, tmp_path / "gunicorn.log", "gunicorn (4 workers)")
        try:
            yield {"base": gun.base, "daemon": daemon, "gunicorn": gun, "clock": clock,
                   "log": tmp_path / "gunicorn.log"}
        finally:
            stop(gun)
    finally:
        if clock is not None:
            clock.close()
        daemon.stop()


class Load:
    """Requests from 4 threads, one after another each, until stopped:
    every answer's status and pid, or the error. paused(): while no
    request is in flight (a worker killed then is killed between two
    requests: the request a SIGKILL interrupts is lost by any server)."""

    def __init__(self, base):
        self.base, self.answers, self.errors = base, [], []
        self.stop_ = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.idle = threading.Semaphore(0)
        self.n = iter(range(10**9))
        self.threads = [threading.Thread(target=self._run) for _ in range(4)]
        for t in self.threads:
            t.start()

    @contextlib.contextmanager
    def paused(self):
        self.go.clear()
        for _ in self.threads:
            assert self.idle.acquire(timeout=120)
        try:
            yield
        finally:
            self.go.set()

    def _run(self):
        while not self.stop_.is_set():
            if not self.go.is_set():
                self.idle.release()
                self.go.wait()
            i = next(self.n)
            try:
                r = get(self.base + "/whoami",
                        {"X-Forwarded-For": f"10.9.9.9, 192.0.{i // 250 % 250}.{i % 250}"},
                        timeout=60)
                self.answers.append((r.status_code, r.json().get("pid") if
                                     r.status_code == 200 else None, r.text[:200]))
            except Exception as e:   # noqa: BLE001 (any failure to answer is the finding)
                self.errors.append(repr(e))

    def pids(self):
        return {pid for status, pid, _ in self.answers if status == 200}

    def stop(self):
        self.stop_.set()
        for t in self.threads:
            t.join(90)


def test_worker_respawned_while_resild_is_away(fleet):
    gun, base = fleet["gunicorn"], fleet["base"]
    before = children(gun.pid)
    assert len(before) == WORKERS
    fleet["daemon"].stop()
    load = Load(base)
    try:
        eventually(lambda: len(load.answers) >= 8, 30, "answers without resild")
        victim = sorted(before)[0]
        with load.paused():
            os.kill(victim, signal.SIGKILL)

        def respawned():
            assert gun.poll() is None, open(fleet["log"]).read()[-3000:]
            new = children(gun.pid) - before
            return new if new and new & load.pids() else None
        (new,) = eventually(respawned, 60, "the respawned worker answers")
        assert len(children(gun.pid)) == WORKERS
        seen = len(load.answers)
        eventually(lambda: len(load.answers) >= seen + 20, 30, "more answers")
    finally:
        load.stop()
    assert not load.errors, load.errors[:5]
    bad = [a for a in load.answers if a[0] not in (200, 429)]
    assert not bad, bad[:5]
    assert not any(a[1] == new and a[0] == 200 and '"attached": true' in a[2]
                   for a in load.answers), "attached with no resild running"

    # resild again: within 10 s every worker decides in its segments (the
    # new daemon counts a client row per worker), then one limit again.
    # Each round moves the clock a second: a process looks for a new
    # daemon at most once a second of its policies' clock.
    fleet["daemon"].start()
    workers = children(gun.pid)
    attached = set()
    n = iter(range(10**9))

    def all_attached():
        fleet["clock"].advance(1.1)

        def one(_):
            i = next(n)
            return get(base + "/whoami",
                       {"X-Forwarded-For": f"10.9.9.9, 198.18.{i // 250 % 250}.{i % 250}"})
        with cf.ThreadPoolExecutor(8) as ex:
            for r in ex.map(one, range(16)):
                assert r.status_code == 200, r.text
                body = r.json()
                if body["attached"]:
                    attached.add(body["pid"])
        return workers <= attached and fleet["daemon"].clients() == WORKERS
    eventually(all_attached, 10, "every worker attached to the new resild")
    ips = ["203.0.113.21", "203.0.113.22", "203.0.113.23"]
    admitted, pids = flood({"base": base}, ips, 300)
    assert admitted == {ip: 100 for ip in ips}
    assert len(pids) > 1

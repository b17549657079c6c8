"""A real fleet: gunicorn (sync, 4 workers), with and without --preload,
serving the Django app in djapp/ against a resild this test starts, every
worker on one manual clock (a file the test moves: Resil.set_clock_file).

- 3 client IPs through a trusted proxy (X-Forwarded-For from 127.0.0.1),
  300 requests each over all workers, under the seed's limit of 100 per
  60 s: exactly 100 admitted per IP while the clock stands still, every
  429 carries Retry-After (whole seconds) and a JSON body; 30 s later
  exactly 50 more (one permit per 0.6 s), 60 s after that 100 again;
- a spoofed X-Forwarded-For from an untrusted peer (127.0.0.2) does not
  choose the key;
- a flaky dependency called through resil.httpx, one request at a time:
  while it is down, the calls reaching it fleet-wide are at most the
  breaker's threshold plus half_open_calls per open (the opens counted from
  the daemon's events), as the C fleet demo shows; one breaker per worker
  lets each worker's own threshold through;
- a worker SIGKILLed while holding a bulkhead permit gives it back.

The manual clock starts an hour ahead of CLOCK_MONOTONIC: what the daemon
judges on its own clock (a limiter key idle, an open breaker's wait over)
then lies in its future and never moves under the test.
"""

import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import resil
from fleet import RESILCTL, Dependency, Resild, djapp_env, eventually, get, serve, stop

WORKERS = 4
# requests one_at_a_time(spread=True) may add to reach a second worker
SPREAD_MORE = 400
THRESHOLD = 5        # breaker.window = consecutive:5 (djapp/urls.py)
HALF_OPEN_CALLS = 1  # breaker.half_open_calls
WAIT = 60            # breaker.wait, seconds


@pytest.fixture(scope="module", params=[False, True], ids=["fork", "preload"])
def fleet(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    daemon = Resild(d)
    dep = Dependency()
    clock = None
    try:
        clock = resil.open(daemon.sock, pending=False)
        clock.set_clock_file(str(d / "clock"), time.monotonic() + 3600)
        env = djapp_env(daemon, d, DJAPP_DEP_URL=dep.url, DJAPP_CLOCK_FILE=str(d / "clock"))
        cmd = [sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-k", "sync",
               "-b", "127.0.0.1:{port}", "--graceful-timeout", "1", "--timeout", "60"]
        if request.param:
            cmd.append("--preload")
        gun = serve(cmd + ["djapp.wsgi"], env, d / "gunicorn.log", "gunicorn (4 workers)")
        try:
            yield {"base": gun.base, "dep": dep, "sock": daemon.sock, "dir": d, "gunicorn": gun,
                   "clock": clock}
        finally:
            stop(gun)
    finally:
        if clock is not None:
            clock.close()
        daemon.stop()
        dep.close()


def flood(fleet, ips, n):
    """n requests per IP through the trusted proxy, 12 at a time, over
    all workers: {ip: admitted}, and the pids that answered."""
    jobs = [ip for _ in range(n) for ip in ips]

    def one(ip):
        return ip, get(fleet["base"] + "/whoami", {"X-Forwarded-For": f"10.9.9.9, {ip}"})

    with cf.ThreadPoolExecutor(12) as ex:
        results = list(ex.map(one, jobs))
    admitted = {ip: 0 for ip in ips}
    pids = set()
    for ip, r in results:
        if r.status_code == 200:
            admitted[ip] += 1
            body = r.json()
            assert body["ip"] == ip
            pids.add(body["pid"])
        else:
            assert r.status_code == 429, r.text
            # the clock stands still: the next permit is one interval
            # (0.6 s) away, rounded up to whole seconds
            assert r.headers.get("retry-after") == "1", r.headers
            body = r.json()
            assert body == {"error": "rate limited", "retry_after": 1}
    return admitted, pids


def test_per_ip_limit_through_trusted_proxy(fleet):
    ips = ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
    admitted, pids = flood(fleet, ips, 300)
    assert admitted == {ip: 100 for ip in ips}
    assert len(pids) > 1, "the requests were not spread over the workers"
    # 100 per 60 s (GCRA): one permit earned every 0.6 s, the whole burst
    # back after 60 s; every worker sees the time the test sets
    fleet["clock"].advance(30)
    admitted, _ = flood(fleet, ips, 60)
    assert admitted == {ip: 50 for ip in ips}
    fleet["clock"].advance(60)
    admitted, _ = flood(fleet, ips, 110)
    assert admitted == {ip: 100 for ip in ips}


def test_spoofed_forwarded_for_ignored(fleet):
    """127.0.0.2 is not a trusted proxy: its X-Forwarded-For is ignored, so
    varying the header gives it no fresh keys."""
    def one(i):
        return get(fleet["base"] + "/whoami", {"X-Forwarded-For": f"198.51.100.{i % 250}"},
                   local="127.0.0.2")

    with cf.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(one, range(150)))
    ok = [r for r in rs if r.status_code == 200]
    assert len(ok) == 100
    assert all(r.json()["ip"] == "127.0.0.2" for r in ok)
    assert all(r.status_code == 429 for r in rs if r.status_code != 200)


class Events:
    """`resilctl --json watch` of some policies, read by a thread. mark()
    changes the policy "marker" and waits for its event: the daemon sends
    the ring's events in order, so every event pushed before the mark has
    arrived by then."""

    def __init__(self, sock, names):
        self.lines, self.marks = [], 0
        self.proc = subprocess.Popen([RESILCTL, "--socket", sock, "--json", "watch", "marker",
                                      *names], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.h = resil.open(sock, pending=False)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def _marked(self):
        return sum(e["policy"] == "marker" for e in self.lines)

    def mark(self):
        """Returns the events seen so far (the marks' excepted). The first
        call also waits for the subscription: a change made before it is
        not seen, so it changes the marker until one is."""
        seen = self._marked()
        end = time.monotonic() + 10
        while True:
            self.marks += 1
            self.h.define("marker", f"bulkhead.max = {self.marks}")
            try:
                eventually(lambda: self._marked() > seen, 1.0 if not seen else 10.0,
                           "the marker's event")
                break
            except AssertionError:
                if seen or time.monotonic() > end:
                    raise
        return [e for e in self.lines if e["policy"] != "marker"]

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.h.close()


def one_at_a_time(fleet, path, n, spread=False):
    """n requests, each on a new connection after the last one's answer
    (in flight: at most one). Distinct client IPs: the rate limit stays
    out of the way. Which worker accepts a connection is the kernel's and
    the scheduler's choice: on a loaded machine the worker that answered
    last can win every accept. spread: past n, more requests until two
    workers have answered (at most SPREAD_MORE more)."""
    rs = []
    i = 0
    while i < n or (spread and len({r["pid"] for r in rs}) < 2 and i < n + SPREAD_MORE):
        r = get(fleet["base"] + path, {"X-Forwarded-For": f"192.0.2.{1 + i % 200}"})
        assert r.status_code in (502, 503), r.text
        rs.append(r.json())
        i += 1
    return rs


def test_flaky_dependency_one_breaker(fleet):
    if not RESILCTL or not os.access(RESILCTL, os.X_OK):
        pytest.skip("RESILCTL (the resilctl binary) not set")
    dep, clock = fleet["dep"], fleet["clock"]
    ev = Events(fleet["sock"], ["dep"])
    try:
        ev.mark()   # subscribed
        before = dep.hits
        rs = one_at_a_time(fleet, "/dep", 40, spread=True)
        rounds = 3
        for _ in range(rounds):
            # the wait is over for every worker at once: the next call is
            # a probe, it fails, the breaker opens again
            clock.advance(WAIT + 1)
            rs += one_at_a_time(fleet, "/dep", 10)
        events = ev.mark()
    finally:
        ev.close()
    reached = dep.hits - before
    assert reached == sum(r["dep"] != "open" for r in rs)
    opens = sum(e["type"] == "transition" and e["to"] == "open" for e in events)
    assert opens == 1 + rounds, events
    pids = {r["pid"] for r in rs}
    assert len(pids) > 1, "the requests were not spread over the workers"
    # one breaker for the fleet: THRESHOLD failures open it, then each open
    # lets at most half_open_calls probes through when its wait is over
    assert THRESHOLD <= reached <= THRESHOLD + HALF_OPEN_CALLS * opens, (reached, opens)


def test_flaky_dependency_breaker_per_worker(fleet):
    """The contrast: a breaker per process (policy "dep-local-PID") lets
    each worker's own THRESHOLD failures through, up to WORKERS x THRESHOLD
    for the fleet, where the shared one lets THRESHOLD through."""
    dep = fleet["dep"]
    before = dep.hits
    rs = one_at_a_time(fleet, "/dep-local", 40, spread=True)
    reached = dep.hits - before
    served = {}
    for r in rs:
        n, hit = served.get(r["pid"], (0, 0))
        served[r["pid"]] = (n + 1, hit + (r["dep"] != "open"))
    assert len(served) > 1, "the requests were not spread over the workers"
    assert all(hit == min(n, THRESHOLD) for n, hit in served.values()), served
    assert reached == sum(hit for _, hit in served.values())
    assert THRESHOLD < reached <= WORKERS * THRESHOLD


def test_sigkilled_worker_gives_permit_back(fleet):
    base, hold = fleet["base"], fleet["dir"] / "hold"
    if hold.exists():
        hold.unlink()
    hdr = {"X-Forwarded-For": "192.0.2.200"}
    t = threading.Thread(target=lambda: pytest.raises(OSError, get, base + "/hold", hdr,
                                                      timeout=60), daemon=True)
    t.start()
    pid = int(eventually(lambda: hold.exists() and hold.read_text(), what="a worker holds"))
    assert get(base + "/slot", hdr).status_code == 503   # the one permit is held
    os.kill(pid, signal.SIGKILL)
    n = iter(range(10**6))   # a fresh client address per poll: no rate limit in the way
    eventually(lambda: get(base + "/slot",
                           {"X-Forwarded-For": f"10.1.{next(n) % 250}.{next(n) % 250}"}
                           ).status_code == 200,
               what="the killed worker's permit comes back")
    t.join(10)

#!/usr/bin/python3
"""python_bench.py - what a decision costs from Python, side by side in one
run (a benchmark, never a timed test).

    /usr/bin/python3 bench/python_bench.py [--build DIR] [--quick] [--write]

Cases (ns per decision over 7 runs of a loop: the median and the range; the
loop's own cost included in every case alike). The targets are judged on
each case's fastest run (as timeit advises: the others measure what else
the machine did), both reported:
  floor    two bare calls of an empty C builtin (resil._resil.noop) per
           iteration; the same decision made in C on the same policy
           (resil._resil.bench_c: acquire + release in a C loop)
  resil    raw methods (p.acquire() then permit.release()) and the with
           form, on a count-window breaker and on a keyed limiter;
  peers    an empty pure-Python context manager; a pure-Python in-process
           breaker class like the seed's; python3-limits' moving window in
           memory and on Redis; the seed's Redis sorted-set middleware logic
           (ZREMRANGEBYSCORE, ZADD, ZCARD, EXPIRE in one MULTI) on a private
           redis-server (TCP on 127.0.0.1, started and stopped here);
  gunicorn requests/s on python/tests/djapp with the rate-limit middleware
           off and on, against a private resild.
Limiters all see the seed's workload: 100 requests per 60 s per client IP,
60000 client IPs in turn, every request admitted.

Targets: raw <= 1.5 x (two bare calls + the C decision); the with form
<= 250 ns; resil.django.client_ip through a trusted proxy < 1 us. --write puts the table in BENCHMARKS.md (section
"Python", replaced if there) and bench/python.md.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)

ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.path.join(top, "build"))
ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
ap.add_argument("--write", action="store_true", help="write BENCHMARKS.md and bench/python.md")
args = ap.parse_args()
sys.path.insert(0, os.path.join(args.build, "python"))

import resil  # noqa: E402
from resil import _resil  # noqa: E402
from benchdoc import put_section  # noqa: E402

N = 20_000 if args.quick else 300_000
N_REDIS = 500 if args.quick else 5_000
RUNS = 3 if args.quick else 7
NIPS = 60_000  # every request admitted: <= 100 per IP over a whole case
IPS = [f"10.{i // 62500}.{i // 250 % 250}.{i % 250}" for i in range(NIPS)]
rows = []


def measure(name, loop, n, note=""):
    """loop(n) runs n decisions; the median ns per decision of RUNS runs"""
    loop(min(n, 2000))  # warm
    vals = []
    for _ in range(RUNS):
        t = time.perf_counter_ns()
        loop(n)
        vals.append((time.perf_counter_ns() - t) / n)
    med = statistics.median(vals)
    rows.append((name, med, min(vals), max(vals), note))
    print(f"{name:58s} {med:10.1f} ns  [{min(vals):.1f} .. {max(vals):.1f}]", flush=True)
    return min(vals)


r = resil.open_embedded()
r.define("brk", "breaker.window = count:100; breaker.min_calls = 100")
LIMIT = "limit.rate = 100/60s; limit.burst = 100; limit.keys = 131072"
r.define("ip", LIMIT)
r.define("ip2", LIMIT)
brk, ip, ip2 = r.policy("brk"), r.policy("ip"), r.policy("ip2")
noop = _resil.noop


def l_empty(n):
    for _ in range(n):
        pass


def l_noop2(n):
    for _ in range(n):
        noop()
        noop()


def l_raw(n, acq=brk.acquire):
    for _ in range(n):
        acq().release()


def l_with(n, acq=brk.acquire):
    for _ in range(n):
        with acq():
            pass


def keyed(n):
    return (IPS[i % NIPS] for i in range(n))


def l_raw_key(n, acq=ip.acquire):
    for k in keyed(n):
        acq(k).release()


def l_with_key(n, acq=ip2.acquire):
    for k in keyed(n):
        with acq(k):
            pass


def l_noop2_key(n):
    for k in keyed(n):
        noop()
        noop()


class EmptyCM:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def l_empty_cm(n, cm=EmptyCM()):
    for _ in range(n):
        with cm:
            pass


class SeedBreaker:
    """An in-process breaker as the seed writes it: closed / open /
    half-open, a failure threshold, a reset timeout, time.monotonic."""

    def __init__(self, threshold=5, reset_timeout=30.0):
        self.threshold, self.reset_timeout = threshold, reset_timeout
        self.failures, self.state, self.opened_at = 0, "closed", 0.0

    def __enter__(self):
        if self.state == "open":
            if time.monotonic() - self.opened_at < self.reset_timeout:
                raise RuntimeError("circuit open")
            self.state = "half-open"
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.failures, self.state = 0, "closed"
        else:
            self.failures += 1
            if self.state == "half-open" or self.failures >= self.threshold:
                self.state, self.opened_at = "open", time.monotonic()
        return False


def l_seed_breaker(n, b=SeedBreaker()):
    for _ in range(n):
        with b:
            pass


print(f"python {sys.version.split()[0]} ({sys.executable}), resil {resil.__version__}, "
      f"N={N}, runs={RUNS}, load {open('/proc/loadavg').read().split()[0]}")


def interleaved(cases, n):
    """The cases a target compares, run in turn RUNS times (so that a busy
    moment of the machine falls on all of them alike); rows as measure's;
    returns each case's fastest run."""
    got = {name: [] for name, _ in cases}
    for name, loop in cases:
        loop(min(n, 2000))  # warm
    for _ in range(RUNS):
        for name, loop in cases:
            got[name].append(loop(n))
    best = {}
    for name, _ in cases:
        vals = got[name]
        med = statistics.median(vals)
        rows.append((name, med, min(vals), max(vals), ""))
        print(f"{name:58s} {med:10.1f} ns  [{min(vals):.1f} .. {max(vals):.1f}]", flush=True)
        best[name] = min(vals)
    return best


def per_op(loop):
    def run(n):
        t = time.perf_counter_ns()
        loop(n)
        return (time.perf_counter_ns() - t) / n
    return run


CASES = [("empty loop iteration", per_op(l_empty)),
         ("floor: two bare calls of an empty C builtin", per_op(l_noop2)),
         ("floor: the breaker decision in C (acquire + release)",
          lambda n: _resil.bench_c(brk, n)),
         ("resil breaker: raw p.acquire() + permit.release()", per_op(l_raw)),
         ("resil breaker: with p.acquire(): pass", per_op(l_with))]
best = interleaved(CASES, N)
empty, noop2, c_brk, raw, wth = (best[name] for name, _ in CASES)
noop2k = measure("floor: two bare calls, keyed loop (60000 IPs)", l_noop2_key, N)
r.define("ip3", LIMIT)
ck_runs = [_resil.bench_c(r.policy("ip3"), N, IPS) for _ in range(RUNS)]
c_key = min(ck_runs)
rows.append(("floor: the keyed decision in C (acquire_key + release)",
             statistics.median(ck_runs), c_key, max(ck_runs), ""))
print(f"{'floor: the keyed decision in C':58s} {statistics.median(ck_runs):10.1f} ns")
raw_k = measure("resil keyed limit: raw acquire(ip) + release()", l_raw_key, N)
wth_k = measure("resil keyed limit: with acquire(ip)", l_with_key, N)
cm = measure("empty pure-Python context manager", l_empty_cm, N)
seed = measure("pure-Python in-process breaker (the seed's class)", l_seed_breaker, N)


def l_await(n, acq=brk.acquire_async):
    """await p.acquire_async() in a coroutine driven by hand: the cost of
    the awaitable on a policy that never waits (no loop in the way)"""
    async def run():
        for _ in range(n):
            (await acq()).release()
    try:
        run().send(None)
    except StopIteration:
        pass


measure("resil breaker: (await p.acquire_async()).release()", l_await, N)


def client_ip_cases():
    """resil.django.client_ip over the 60000 client IPs: a client talking
    to the server directly, and one through two proxies (X-Forwarded-For
    "CLIENT, 192.168.9.9" from the peer 127.0.0.1, both trusted)."""
    try:
        import django
        from django.conf import settings
    except ImportError:
        print("django missing: no client_ip case")
        return None
    settings.configure(RESIL_TRUSTED_PROXIES=["192.168.0.0/16", "127.0.0.1"])
    django.setup()
    import resil.django as rd

    class Req:
        __slots__ = ("META",)

        def __init__(self, meta):
            self.META = meta
    direct = [Req({"REMOTE_ADDR": ip}) for ip in IPS]
    proxied = [Req({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": ip + ", 192.168.9.9"})
               for ip in IPS]
    assert rd.client_ip(proxied[7]) == IPS[7] and rd.client_ip(direct[7]) == IPS[7]

    def loop_of(reqs):
        def run(n, f=rd.client_ip):
            for i in range(n):
                f(reqs[i % NIPS])
        return run
    measure("Django client_ip(request), direct peer", loop_of(direct), N)
    return measure("Django client_ip(request), through a trusted proxy", loop_of(proxied), N)


cip = client_ip_cases()

# python3-limits, memory
try:
    import limits
    from limits.storage import MemoryStorage, RedisStorage
    from limits.strategies import MovingWindowRateLimiter
    have_limits = True
except ImportError:
    have_limits = False
    print("python3-limits not installed: its cases are left out")

if have_limits:
    per_ip = limits.parse("100/minute")
    mem_storage = MemoryStorage()  # the limiter holds it weakly
    mem = MovingWindowRateLimiter(mem_storage)

    def l_limits_mem(n, hit=mem.hit):
        for k in keyed(n):
            hit(per_ip, k)
    measure("python3-limits moving window, memory", l_limits_mem, N // 5)

# Redis: a private redis-server
redis_server = shutil.which("redis-server")
try:
    import redis as redis_py
except ImportError:
    redis_py = None
proc = None
if redis_server and redis_py:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="resil-pybench-")
    proc = subprocess.Popen([redis_server, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = redis_py.Redis(host="127.0.0.1", port=port)
        end = time.monotonic() + 10
        while True:
            try:
                rc.ping()
                break
            except redis_py.ConnectionError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)

        def l_seed_redis(n):
            """the seed's middleware: a sorted set per IP, 100 per 60 s"""
            for k in keyed(n):
                now = time.time()
                key = "rl:" + k
                p = rc.pipeline(transaction=True)
                p.zremrangebyscore(key, 0, now - 60)
                p.zadd(key, {f"{now}": now})
                p.zcard(key)
                p.expire(key, 60)
                count = p.execute()[2]
                if count > 100:
                    raise RuntimeError("limited")
        measure("seed's Redis sorted-set logic (local redis-server, TCP)", l_seed_redis,
                N_REDIS)
        if have_limits:
            rl_storage = RedisStorage(f"redis://127.0.0.1:{port}")
            rl = MovingWindowRateLimiter(rl_storage)

            def l_limits_redis(n, hit=rl.hit):
                for k in keyed(n):
                    hit(per_ip, k)
            measure("python3-limits moving window, Redis (TCP)", l_limits_redis, N_REDIS)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
else:
    print("redis-server or python3-redis missing: the Redis cases are left out")



def gunicorn_rps():
    """gunicorn (4 sync workers) serving python/tests/djapp's /ping with the
    rate-limit middleware off and on (a keyed limit admitting everything,
    the client IP from X-Forwarded-For through a trusted proxy), against a
    private resild; the client: 8 threads of http.client, a connection per
    request (sync workers close it)."""
    import concurrent.futures as cf
    import http.client
    resild = os.path.join(args.build, "daemon", "resild")
    try:
        import django  # noqa: F401
        import gunicorn  # noqa: F401
    except ImportError:
        print("django or gunicorn missing: no requests/s")
        return []
    if not os.access(resild, os.X_OK):
        print("no resild: no requests/s")
        return []
    tmp = tempfile.mkdtemp(prefix="resil-pybench-")
    sock = os.path.join(tmp, "control.sock")
    os.mkdir(os.path.join(tmp, "conf"))
    daemon = subprocess.Popen([resild, "--foreground", "--socket", sock,
                               "--config", os.path.join(tmp, "conf")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = []
    try:
        end = time.monotonic() + 10
        while True:
            try:
                resil.open(sock, pending=False).close()
                break
            except resil.Error:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        for label, off in (("middleware off", "1"), ("middleware on", "")):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            env = dict(os.environ, RESIL_SOCKET=sock, DJAPP_NO_LIMIT=off,
                       DJAPP_LIMIT="limit.rate = 1000000/1s; limit.burst = 1000000;"
                                   "limit.keys = 4096",
                       PYTHONPATH=os.path.join(top, "python", "tests") + os.pathsep
                       + os.path.join(args.build, "python"))
            gun = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "4", "-k", "sync",
                                    "-b", f"127.0.0.1:{port}", "djapp.wsgi"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            def get(i):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    c.request("GET", "/ping",
                              headers={"X-Forwarded-For": f"10.0.{i // 250 % 250}.{i % 250}"})
                    return c.getresponse().status
                finally:
                    c.close()
            try:
                end = time.monotonic() + 90   # 4 workers import Django
                while True:
                    try:
                        if get(0) == 200:
                            break
                    except OSError:
                        pass
                    if time.monotonic() > end:
                        raise RuntimeError("gunicorn did not answer")
                    time.sleep(0.1)
                n = 500 if args.quick else 5000
                with cf.ThreadPoolExecutor(8) as ex:
                    list(ex.map(get, range(200)))  # every worker warm
                    t = time.perf_counter()
                    codes = list(ex.map(get, range(n)))
                    rps = n / (time.perf_counter() - t)
                assert codes.count(200) == n, "some requests were refused"
                print(f"{'gunicorn /ping, ' + label:58s} {rps:10.0f} req/s", flush=True)
                out.append((label, rps))
            finally:
                gun.terminate()
                gun.wait(20)
    finally:
        daemon.terminate()
        daemon.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


rps = gunicorn_rps()
bound = 1.5 * (noop2 + c_brk)
ok_raw = raw <= bound
ok_with = wth <= 250
print(f"target raw <= 1.5 x (two bare calls + C decision) = {bound:.1f} ns: "
      f"{raw:.1f} ns: {'met' if ok_raw else 'NOT met'}")
print(f"target with form <= 250 ns: {wth:.1f} ns: {'met' if ok_with else 'NOT met'}")
ok_cip = cip is not None and cip < 1000
if cip is not None:
    print(f"target client_ip through a proxy < 1000 ns: {cip:.1f} ns: "
          f"{'met' if ok_cip else 'NOT met'}")


def table():
    lines = ["## Python", "",
             "`/usr/bin/python3 bench/python_bench.py --write` (one run; "
             f"Python {sys.version.split()[0]}, resil {resil.__version__}, embedded segments, "
             f"load average {open('/proc/loadavg').read().split()[0]} at the end, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). ns per decision, the "
             f"median of {RUNS} loops (min .. max); the targets are judged on the fastest "
             f"loop of each case (the others measure what else the machine did); every Python case includes its loop's "
             f"own iteration ({empty:.1f} ns here). Limiters: the seed's workload, 100 per "
             "60 s per client IP, 60000 IPs in turn, every request admitted.", "",
             "| case | ns/decision | min .. max |", "|---|---:|---|"]
    for name, med, lo, hi, _ in rows:
        lines.append(f"| {name} | {med:.1f} | {lo:.1f} .. {hi:.1f} |")
    lines += ["",
              f"- raw methods: {raw:.1f} ns against 1.5 x ({noop2:.1f} + {c_brk:.1f}) = "
              f"{bound:.1f} ns: **{'met' if ok_raw else 'not met'}**.",
              f"- the with form: {wth:.1f} ns against 250 ns: "
              f"**{'met' if ok_with else 'not met'}** (an empty pure-Python context "
              f"manager: {cm:.1f} ns)."]
    if cip is not None:
        lines.append(f"- client_ip through a trusted proxy: {cip:.1f} ns against 1000 ns: "
                     f"**{'met' if ok_cip else 'not met'}**.")
    lines += ["",
              "![a decision from Python, log scale](bench/python.png)", ""]
    if rps:
        lines += ["gunicorn (4 sync workers, Django 3.2, `/ping`), 8 client threads of "
                  "`http.client` in one process, a connection per request (the client "
                  "is a bound of its own):", "", "| gunicorn | requests/s |", "|---|---:|"]
        lines += [f"| {label} | {v:.0f} |" for label, v in rps]
        lines.append("")
    return "\n".join(lines)


if args.write:
    text = table()
    with open(os.path.join(here, "python.md"), "w") as f:
        f.write(text)
    # the plot, from the table just written (gnuplot; none without it)
    subprocess.run([os.path.join(here, "python_plot.sh")], check=False)
    path = os.path.join(top, "BENCHMARKS.md")
    put_section(path, "Python", text)
    print("wrote", path)

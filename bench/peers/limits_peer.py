#!/usr/bin/env python3
# limits_peer.py - what python3-limits (Debian's package) costs per
# decision in memory, on this machine, in the same run as resil_bench.
#
#   /usr/bin/python3 bench/peers/limits_peer.py [--smoke] [--out FILE]
#
# Method (as resil_bench): each case is a loop calibrated to about 40 ms,
# run 7 times (1 with --smoke), cases interleaved run by run; the figure is
# the median ns per decision with the min and max of the runs. The limit
# is never reached (every hit admitted): the admission path, as resil's
# limit.admit (one key) and keyed limit (many). `bare` is the same loop calling a Python function that
# returns True: the interpreter's share of every case.
#
# Output: TSV rows group "peer", name "limits.<case>", metric ns_op,
# median, min, max, unit ns, note, on --out (appended) or stdout.
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    runs = 1 if a.smoke else 7
    target = (5 if a.smoke else 40) * 1e6

    try:
        import limits
        from limits.storage import MemoryStorage
        from limits.strategies import (FixedWindowRateLimiter, MovingWindowRateLimiter)
    except ImportError:
        print("limits_peer: python3-limits not installed (apt-get install python3-limits)",
              file=sys.stderr)
        return 0
    note = f"python3-limits {limits.__version__}, Python {sys.version.split()[0]}"
    item = limits.parse("1000000000/second")
    # the strategies hold their storage weakly: keep it referenced here
    stores = [MemoryStorage(), MemoryStorage()]
    fixed = FixedWindowRateLimiter(stores[0])
    moving = MovingWindowRateLimiter(stores[1])
    keys = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(60000)]
    per_ip = limits.parse("100/minute")

    def bare(n):
        f = lambda: True
        t = time.perf_counter_ns()
        for _ in range(n):
            f()
        return time.perf_counter_ns() - t

    def fixed_1(n, hit=fixed.hit):
        t = time.perf_counter_ns()
        for _ in range(n):
            hit(item, "one")
        return time.perf_counter_ns() - t

    def fixed_ip(n, hit=fixed.hit):
        t = time.perf_counter_ns()
        for i in range(n):
            hit(per_ip, keys[i % 60000])
        return time.perf_counter_ns() - t

    def moving_ip(n, hit=moving.hit):
        t = time.perf_counter_ns()
        for i in range(n):
            hit(per_ip, keys[i % 60000])
        return time.perf_counter_ns() - t

    # keyed cases: 100 per minute per client IP, 60000 IPs in turn (the
    # workload of bench/python_bench.py): every hit admitted, and the
    # moving window's per-key list stays short
    cases = [("limits.bare_call", bare), ("limits.fixed_window", fixed_1),
             ("limits.fixed_window_60k_keys", fixed_ip),
             ("limits.moving_window_60k_keys", moving_ip)]
    cal = []
    for name, fn in cases:
        fn(1000)
        n = 64
        while True:
            el = fn(n)
            if el >= target / 4 or n >= 1 << 24:
                break
            n *= 4
        cal.append((name, fn, max(64, int(n * target / max(el, 1))), []))
    for _ in range(runs):
        for name, fn, n, v in cal:
            v.append(fn(n) / n)
    rows = []
    for name, fn, n, v in cal:
        v.sort()
        med = v[len(v) // 2]
        print(f"  peer           {name:<34} {med:9.2f} ns/op [{v[0]:.2f}-{v[-1]:.2f}] {note}",
              file=sys.stderr)
        rows.append(f"peer\t{name}\tns_op\t{med:.2f}\t{v[0]:.2f}\t{v[-1]:.2f}\tns\t{note} n={n}")
    text = "\n".join(rows) + "\n"
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

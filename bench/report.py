#!/usr/bin/env python3
# report.py - BENCHMARKS.md and the plot data from one run's results.
#
#   report.py --plots OUTDIR          write OUTDIR/*.dat for plot.gp
#   report.py --out FILE OUTDIR       write the report from OUTDIR/results.tsv
#
# Every figure in the report comes from OUTDIR/results.tsv and
# OUTDIR/machine.txt of the same run; the only numbers written here are the
# targets and the cited reference figures of ANCHORS.md (other machine,
# other date, said so next to them).
import argparse
import math
import os
import sys

# Reference figures cited from ANCHORS.md (2026-11-30, 2-vCPU AMD EPYC
# Firecracker VM): not measured by this run.
ANCHOR_NOTE = "measured 2026-11-30 on a 2-vCPU AMD EPYC Firecracker VM (ANCHORS.md)"
ANCHORS_R4J = [
    ("CircuitBreaker.decorateSupplier, count window 100 (SYNCHRONIZED)", "81.0 [80.2-101]",
     "breaker.count100.call"),
    ("same, LOCK_FREE window", "114.7", "breaker.count100.call"),
    ("AtomicRateLimiter.acquirePermission, permitted", "44.0", "limit.admit"),
    ("AtomicRateLimiter.acquirePermission, denied", "112", "limit.reject"),
    ("SemaphoreBulkhead tryAcquirePermission + onComplete", "13.6", "bulkhead.acq_rel"),
]
# Resilience4j 2.4.0 and resil measured side by side on one host (one JVM
# per case, warmed, interleaved rounds): (case, host, Resilience4j, resil).
# Both columns come from that host; neither is this run's.
SIDE_BY_SIDE_R4J = [
    ("kvm-clock, tsc=unstable (ANCHORS.md), 2 rounds", [
        ("breaker acquire + success (no clock)", "18.9-20.5 ns", "17.7 ns (count window 100)"),
        ("breaker OPEN rejection", "97-103 ns", "16 ns"),
        ("rate limiter admit", "AtomicRateLimiter 40-46 ns",
         "GCRA 46-48 ns (precise clock), 19 ns (coarse)"),
        ("bulkhead enter + exit", "SemaphoreBulkhead 13.3-13.8 ns", "15.5 ns"),
    ]),
    ("TSC clocksource, 7 interleaved rounds (a locked add 1.88 ns there)", [
        ("count breaker acquire + release", "raw breaker 20.4 ns", "10.3-12.6 ns"),
        ("breaker through decorateSupplier / resil_call", "73.7 ns", "38 ns"),
        ("breaker OPEN rejection", "106 ns", "11.9 ns"),
        ("rate limiter admit / denied", "41.1 / 98.3 ns", "19.5 / 15.2 ns"),
        ("fail-fast bulkhead enter + exit", "SemaphoreBulkhead 7.18 ns (6.5-7.8)",
         "11.2 ns (its two CASes 4.9 ns, the empty policy 6.8-7.5 ns)"),
        ("2 on one policy: breaker / bulkhead / limiter", "2 threads: 28 / 66 / 25.6 M/s",
         "2 processes: 102 / 159 / 38.5 M/s"),
    ]),
]
ANCHORS_NODE = [
    ("opossum 9 breaker (defaults)", "+1,051 ns per call, 7.0 KB per instance"),
    ("cockatiel 3 breaker (consecutive / sampling)", "+119 / +160 ns, 1.2 / 2.0 KB"),
    ("cockatiel retry / bulkhead / retry+breaker+bulkhead", "+134 / +62 / +485 ns"),
]
ANCHORS_REDIS = [
    ("PING (transport floor), unix", "33.9 / 110 us", "22.0 k"),
    ("GCRA Lua EVALSHA, 10k keys, unix", "40.8 / 102 us", "22.6 k / 34.6 k"),
    ("sliding-window log (sorted set pipeline), unix", "50.3 / 130 us", "18.5 k / 31.3 k"),
    ("breaker record + read (Lua hash), unix", "39.3 / 97 us", "23.2 k / 37.9 k"),
]

# In-process peers measured in the same run (bench/peers): (name, label, the
# resil case it is compared with). Node cases await a promise: their own cost
# is the figure minus bare.await's; Python's minus limits.bare_call's.
PEERS_NODE = [
    ("opossum.breaker", "opossum breaker (defaults): fire()", "breaker.count100.acq_rel"),
    ("cockatiel.breaker_consecutive", "cockatiel breaker, ConsecutiveBreaker(5): execute()",
     "breaker.consecutive.acq_rel"),
    ("cockatiel.breaker_sampling", "cockatiel breaker, SamplingBreaker(0.5, 10 s): execute()",
     "breaker.time.acq_rel"),
    ("cockatiel.bulkhead", "cockatiel bulkhead(25, 0): execute()", "bulkhead.acq_rel"),
    ("cockatiel.retry_breaker_bulkhead", "cockatiel retry + breaker + bulkhead (wrap)",
     "stack.acq_rel"),
]
PEERS_PY = [
    ("limits.fixed_window", "python3-limits fixed window, memory, one key: hit()", "limit.admit"),
    ("limits.fixed_window_60k_keys", "python3-limits fixed window, memory, 60k keys: hit()",
     "limit.keyed_100k.random"),
    ("limits.moving_window_60k_keys", "python3-limits moving window, memory, 60k keys: hit()",
     "limit.keyed_100k.random"),
]

HOT = [
    ("empty.acq_rel", "policy with no component: acquire + release"),
    ("breaker.count100.acq_rel", "breaker, count window 100: acquire + release"),
    ("breaker.consecutive.acq_rel", "breaker, consecutive window: acquire + release"),
    ("breaker.time.acq_rel", "breaker, time window 10 s: acquire + release"),
    ("breaker.open_reject", "breaker OPEN: rejection"),
    ("limit.admit", "rate limiter (GCRA), unkeyed: admit + release"),
    ("limit.admit_slow_rate", "GCRA, 10/s (interval >= 16x the coarse clock resolution: coarse clock): admit + release"),
    ("limit.reject", "GCRA, unkeyed: rejection"),
    ("limit.keyed_1k.random", "keyed GCRA, 1k keys, uniform"),
    ("limit.keyed_1k.zipf", "keyed GCRA, 1k keys, Zipf 0.99"),
    ("limit.keyed_100k.random", "keyed GCRA, 100k keys, uniform"),
    ("limit.keyed_100k.zipf", "keyed GCRA, 100k keys, Zipf 0.99"),
    ("limit.keyed_1m.random", "keyed GCRA, 1M keys, uniform"),
    ("limit.keyed_1m.zipf", "keyed GCRA, 1M keys, Zipf 0.99"),
    ("limit.keyed_reject", "keyed GCRA, 1k keys: rejection"),
    ("bulkhead.acq_rel", "bulkhead: enter + exit"),
    ("bulkhead.reject", "bulkhead full: rejection"),
    ("bulkhead1000.acq_rel", "bulkhead, max 1000: enter + exit"),
    ("bulkhead1000.reject", "bulkhead, max 1000, full: rejection"),
    ("bulkhead2000.acq_rel", "bulkhead, max 2000 (packed slots): enter + exit"),
    ("bulkhead2000.reject", "bulkhead, max 2000 (packed slots), full: rejection"),
    ("bulkhead_wait.acq_rel", "bulkhead, bulkhead.wait = 100ms: enter + exit"),
    ("adaptive.acq_rel", "adaptive limit (Vegas): enter + exit"),
    ("shed.acq_rel", "load shedder: check + release"),
    ("budget.acq_rel", "retry budget policy: acquire + release"),
    ("retry.next", "retry decision, no budget (begin + next)"),
    ("budget.retry_next", "retry decision against a gRPC budget (begin + next; drained: refusals)"),
    ("breaker.count100.call", "resil_call around a breaker (count 100)"),
    ("stack.acq_rel", "breaker + limiter + bulkhead: acquire + release"),
]

# (name, label, ANCHORS.md figure on the other machine)
FLOORS = [
    ("bare_call", "the bare call (the dependency, out of line)", ""),
    ("fetch_add", "atomic fetch_add, uncontended, MAP_SHARED memfd page", "6.41 [6.00-10.8]"),
    ("load_acquire", "acquire load", "0.31"),
    ("cas", "CAS, success", "6.07"),
    ("cas_pair", "two CASes on one line (0 -> id, id -> 0): a fail-fast bulkhead's claim and "
     "release, nothing else", ""),
    ("clock_monotonic", "clock_gettime(CLOCK_MONOTONIC)", "27.9 (kvm-clock)"),
    ("clock_coarse", "clock_gettime(CLOCK_MONOTONIC_COARSE)", "3.39"),
    ("clock_fast", "the decision clock: CLOCK_MONOTONIC from the TSC (shm/clock.c)", ""),
    ("clock_cas", "GCRA floor: CLOCK_MONOTONIC read + CAS", ""),
    ("fast_cas", "the decision clock + CAS", ""),
    ("coarse_cas", "coarse GCRA floor: CLOCK_MONOTONIC_COARSE read + CAS", ""),
    ("hash_ip", "a key's hash (SipHash-1-3, the keyed table's): an IPv4 address as text, 15 bytes", ""),
    ("hash_api_key", "a key's hash: an API key, 32 bytes", ""),
    ("syscall_getppid", "one syscall (getppid)", "1,042"),
]


def load_rows(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            p = line.rstrip("\n").split("\t")
            while len(p) < 8:
                p.append("")
            try:
                v = (float(p[3]), float(p[4]), float(p[5]))
            except ValueError:
                continue
            rows[(p[0], p[1], p[2])] = (v, p[6], p[7])
    return rows


def load(outdir):
    path = os.path.join(outdir, "results.tsv")
    if not os.path.exists(path):
        raise FileNotFoundError(path)  # a run's own results: required
    rows = load_rows(path)
    machine = []
    mp = os.path.join(outdir, "machine.txt")
    if os.path.exists(mp):
        with open(mp) as f:
            machine = [l.rstrip("\n") for l in f]
    return rows, machine


def rt_p50_idle_ns(r, g, n):
    """The p50 of a round trip in ns as it comes (no spinner): how ANCHORS.md
    measures Redis and the socketpair."""
    v = r.get(g, n, "p50_us")
    return None if v is None else v * 1e3


def keys_label(n):
    n = int(n)
    if n >= 1000000 and n % 1000000 == 0:
        return f"{n // 1000000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def mem_floors(r):
    """The keyed table's memory floors of this run, {keys: (name, bytes)}:
    floor rows whose "keys" metric names the keyed case they stand for."""
    out = {}
    for (g, n, m), (v, _, _) in r.rows.items():
        if g == "floor" and m == "keys" and r.get(g, n) is not None:
            out[int(v[0])] = (n, r.get(g, n, "bytes"))
    return out


def fmt_mb(b):
    return "n/a" if b is None else f"{b / 1e6:.3g} MB"


def steady(r, other, w):
    """How much of each pass the host gave this vCPU: the bare call (a few
    instructions, no memory) median against its fastest run. The load
    average does not see the host's other tenants on the same core; this
    does (bench/untrusted.md, the cache episodes)."""
    parts = []
    for lab, rr in (("the pass on this host's clock", r), ("the other clock's pass", other)):
        f = rr.full("floor", "bare_call")
        if f and f[0][1] > 0:
            parts.append(f"{lab} {fmt(f[0][0])} ns, fastest run {fmt(f[0][1])} ns "
                         f"(+{(f[0][0] / f[0][1] - 1) * 100:.0f}%)")
    if parts:
        w("How much of its core this vCPU had, seen by the bare call's median against its")
        w("fastest run (the load average does not see the host's other tenants): "
          + "; ".join(parts) + ".")


def rt_p50_ns(r, g, n):
    """The p50 of a round trip in ns: the faster of the two timings (as it
    comes, and with the other vCPU kept busy), so ratios never flatter resil."""
    vals = [v for v in (r.get(g, n, "p50_us"), r.get(g, n, "p50_us_warm")) if v is not None]
    return min(vals) * 1e3 if vals else None


class R:
    def __init__(self, rows):
        self.rows = rows
        # the fleet's own segments; "resil-process" exists when resild ran
        self.main = "resil"

    def get(self, g, n, m="ns_op"):
        r = self.rows.get((g, n, m))
        return r[0][0] if r else None

    def full(self, g, n, m="ns_op"):
        return self.rows.get((g, n, m))

    def instr(self, n):
        for g in ("resil", "resil-process"):
            v = self.get(g, n, "instr_op")
            if v is not None:
                return v
        return None


def fmt(v, digits=None):
    if v is None:
        return "n/a"
    if digits is not None:
        return f"{v:,.{digits}f}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_instr(v):
    if v is None:
        return "n/a"
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def fmt_range(r):
    if r is None:
        return "n/a"
    (med, mn, mx), _, _ = r
    return f"{fmt(med)} [{fmt(mn)}-{fmt(mx)}]"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(x):
    if x is None:
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}x"
    return f"{x:.2f}x"


def us_to_ns(v):
    return None if v is None else v * 1e3


def verdict(ok):
    if ok is None:
        return "not measured"
    return "**met**" if ok else "**not met**"


def two_ways(as_comes, best, bound, how):
    """Verdict of a "N x cheaper than a round trip" target, from the ratios of
    the round trip as it comes and of its best case on this VM."""
    if any(x is None for x in as_comes):
        return verdict(None)
    if not all(x >= bound for x in as_comes):
        return f"{verdict(False)} {how}"
    if any(x is None for x in best):
        return f"{verdict(True)} {how}; its best case not measured"
    if all(x >= bound for x in best):
        return f"{verdict(True)} {how}, and against its best case here"
    return f"{verdict(True)} {how}; not against its best case here"


def plots(outdir):
    rows, _ = load(outdir)
    r = R(rows)
    with open(os.path.join(outdir, "cost.dat"), "w") as f:
        f.write("# label ns_op group\n")
        sel = [("floor", "fetch_add", "fetch_add"), ("floor", "cas", "CAS"),
               ("floor", "clock_monotonic", "clock MONO"),
               ("floor", "clock_coarse", "clock COARSE"),
               ("resil", "breaker.count100.acq_rel", "breaker"),
               ("resil", "breaker.open_reject", "breaker open"),
               ("resil", "limit.admit", "GCRA admit"), ("resil", "limit.reject", "GCRA reject"),
               ("resil", "limit.keyed_1m.random", "keyed 1M"),
               ("resil", "bulkhead.acq_rel", "bulkhead"),
               ("resil", "adaptive.acq_rel", "adaptive"), ("resil", "shed.acq_rel", "shed"),
               ("resil", "stack.acq_rel", "3 components"),
               ("floor", "syscall_getppid", "syscall"),
               ("socket", "get_roundtrip", "resild socket"),
               ("redis", "ping", "Redis PING"), ("redis", "gcra_evalsha", "Redis GCRA"),
               ("redis", "sliding_window_pipeline", "Redis window"),
               ("redis", "breaker_lua", "Redis breaker")]
        for g, n, label in sel:
            v = r.get(g, n)
            if g in ("socket", "redis"):  # round trips: the p50, as the targets use
                v = rt_p50_ns(r, g, n)
            if v is not None:
                kind = {"floor": 0, "resil": 1}.get(g, 2)
                f.write(f"\"{label}\" {v:.4g} {kind}\n")
    with open(os.path.join(outdir, "mp.dat"), "w") as f:
        kinds = ["fetch_add", "breaker.count100", "bulkhead", "limit.admit"]
        f.write("# procs " + " ".join(f"{k}.shared {k}.separate" for k in kinds) + "\n")
        for p in (1, 2, 4):
            vals = []
            for k in kinds:
                for s in ("shared", "separate"):
                    v = r.get("mp", f"{k}.{s}.p{p}", "mops")
                    vals.append("NaN" if v is None else f"{v:.4g}")
            f.write(f"{p} " + " ".join(vals) + "\n")
    with open(os.path.join(outdir, "fleet.dat"), "w") as f:
        f.write("# label shared per_process\n")
        for m, label in (("dead_calls", "dead calls"),
                         ("probes", "probes")):
            a = r.get("fleet", "breaker.shared", m)
            b = r.get("fleet", "breaker.process", m)
            f.write(f"\"{label}\" {a if a is not None else 0} "
                    f"{b if b is not None else 0}\n")
    with open(os.path.join(outdir, "rate.dat"), "w") as f:
        f.write("# shape shared_r process_r_over_n process_r\n")
        for shape, label in (("all_busy", "4 of 4 busy"),
                             ("one_busy", "1 of 4 busy")):
            vals = []
            for c in ("shared_r", "process_r_over_n", "process_r"):
                v = r.get("fleet", f"rate.{shape}.{c}", "admitted_per_s")
                vals.append("0" if v is None else f"{v:.4g}")
            f.write(f"\"{label}\" " + " ".join(vals) + "\n")


def machine_value(machine, key):
    for l in machine:
        if l.startswith(key + ": "):
            return l.split(": ", 1)[1]
    return None


def chose_tsc(clock):
    """Does a clock's description (resil_bench --which-clock) name the TSC
    as the clock chosen? ("clock_gettime(...) (no usable TSC ...)" names
    the fallback.)"""
    return clock is not None and clock.startswith("TSC")


def clock_is_tsc(machine):
    """Did the library's decision clock run on the TSC in this run?"""
    return chose_tsc(machine_value(machine, "decision clock"))


def own_cost(r, ro, machine, w, before):
    """The library's own cost against its floors, with this run's decision
    clock and again with the other kind (bench/run.sh: RESIL_CLOCK, or the
    kernel's other clocksource)."""
    other = machine_value(machine, "other clock")
    # "RESIL_CLOCK=X: <the clock that pass chose>", or "clocksource X: ..."
    other_tsc = chose_tsc((other or "").split(": ", 1)[-1])
    runs = [(r, "this host's choice: " + ("TSC" if clock_is_tsc(machine) else "clock_gettime"))]
    if ro is not None and ro.rows:
        runs.append((ro, (other or "the other clock").split(":")[0]))

    def signed(d):
        return f"{'+' if d is not None and d >= 0 else ''}{fmt(d)}"

    def row(name, f):
        cells = []
        for rr, _ in runs:
            txt, ok = f(rr)
            cells.append(f"{txt} {verdict(ok)}")
        w(f"| {name} | " + " | ".join(cells) + " |")

    def ns(rr, case, g="resil"):
        return rr.get(g, case)

    def over(v, base, bound, what):
        """v against what (base ns) + bound ns: (text, ok)."""
        d = None if v is None or base is None else v - base
        return (f"{fmt(v)} ns: {what} {fmt(base)} ns {signed(d)} ns",
                None if d is None else d <= bound)

    def empty(rr):
        e, b = ns(rr, "empty.acq_rel"), ns(rr, "bare_call", "floor")
        txt, ok = over(e, b, 3, "the bare call")
        ins = rr.instr("empty.acq_rel")
        if ins is not None:
            txt += f"; {fmt_instr(ins)} instructions (before: {fmt_instr(before.get('empty.acq_rel'))})"
            ok = None if ok is None else ok and ins <= 80
        return txt, ok

    def breaker(rr):
        return over(ns(rr, "breaker.count100.acq_rel"), ns(rr, "empty.acq_rel"), 3,
                    "the empty policy")

    def open_reject(rr):
        bo, ad = ns(rr, "breaker.open_reject"), ns(rr, "breaker.count100.acq_rel")
        txt, ok = over(bo, ns(rr, "clock_coarse", "floor"), 2, "the coarse clock read")
        txt += f"; admission {fmt(ad)} ns"
        return txt, None if ok is None or ad is None else ok and bo <= ad

    def bulkhead(rr):
        return over(ns(rr, "bulkhead.acq_rel"), ns(rr, "cas_pair", "floor"), 2, "its two CASes")

    def bulkhead_reject(rr):
        bj, bh = ns(rr, "bulkhead.reject"), ns(rr, "bulkhead.acq_rel")
        return (f"rejection {fmt(bj)} ns, admission {fmt(bh)} ns",
                None if bj is None or bh is None else bj < bh)

    def gcra(case, floor, what):
        def f(rr):
            fl, e = ns(rr, floor, "floor"), ns(rr, "empty.acq_rel")
            base = None if fl is None or e is None else fl + e
            return over(ns(rr, case), base, 1,
                        f"{what} + CAS ({fmt(fl)} ns) + the empty policy ({fmt(e)} ns) =")
        return f

    def fallback(rr):
        cm, cf = rr.get("floor", "clock_monotonic"), rr.get("floor", "clock_fast")
        d = None if cm is None or cf is None else cf - cm
        if rr is r and clock_is_tsc(machine) or rr is not r and other_tsc:
            return (f"TSC {fmt(cf)} ns against clock_gettime {fmt(cm)} ns (no fallback)",
                    None if d is None else d < 0)
        return (f"{fmt(cf)} ns against clock_gettime {fmt(cm)} ns: {signed(d)} ns",
                None if d is None else d <= 1)

    def stack(rr):
        parts = [rr.get("resil", c) for c in
                 ("breaker.count100.acq_rel", "limit.admit", "bulkhead.acq_rel")]
        v = rr.get("resil", "stack.acq_rel")
        tot = None if v is None or None in parts else sum(parts)
        return (f"{fmt(v)} ns against {fmt(tot)} ns",
                None if tot is None else v <= tot)

    def mp(rr):
        v = rr.get("mp", "limit.admit.shared.p2", "mops")
        fl = rr.get("mp", "clock_cas.shared.p2", "mops")
        txt = f"GCRA {fmt(v)} M/s"
        if fl is not None:
            txt += f"; its floor (each the decision clock + a CAS on the word) {fmt(fl)} M/s"
        return txt, None if v is None else v >= 25

    def k1m(rr):
        v = rr.get("resil", "limit.keyed_1m.random")
        fl = mem_floors(rr).get(1000000)
        fm = rr.get("floor", fl[0]) if fl else None
        d = None if v is None or fm is None else v - fm
        return (f"{fmt(v)} ns, floor {fmt(fm)} ns: {signed(d)} ns",
                None if d is None else d <= 30)

    def k1k(rr):
        v, u = rr.get("resil", "limit.keyed_1k.random"), rr.get("resil", "limit.admit")
        x = ratio(v, u)
        return (f"{fmt(v)} ns = {fmt_ratio(x)} unkeyed", None if x is None else x <= 2)

    w("### The library's own cost per decision, with either clock")
    w("")
    w("Each target is a floor measured in the same pass plus a few nanoseconds, never a")
    w("multiple of one atomic (a locked add costs 1.9 ns on one host kind and 5.6 ns on")
    w("another while the library's instructions do not change), and the library's fixed")
    w("work per decision is budgeted in instructions. The cases whose cost depends on the")
    w("decision clock are measured again in the same run on the other kind of host: a host")
    w("without a usable TSC and a host with one, on this machine. bench/run.sh makes it with")
    w("`RESIL_CLOCK`, or, with `--switch-clocksource`, by switching the kernel's clocksource")
    w("(tsc <-> kvm-clock) for the second pass.")
    if other:
        w(f"The second pass: {other}.")
    w("")
    w("| target | " + " | ".join(lbl for _, lbl in runs) + " |")
    w("|---|" + "---|" * len(runs))
    row("the policy with no component (the library's fixed work per decision): at most "
        "80 instructions and the bare call + 3 ns", empty)
    row("count-window breaker at most the empty policy + 3 ns", breaker)
    row("OPEN rejection at most the coarse clock read + 2 ns, and never above an admission",
        open_reject)
    row("fail-fast bulkhead enter + exit at most its two CASes + 2 ns", bulkhead)
    row("full-bulkhead rejection cheaper than an admission", bulkhead_reject)
    row("the decision clock's fallback at most clock_gettime + 1 ns", fallback)
    row("GCRA admit + release at most the decision clock + CAS + the empty policy + 1 ns",
        gcra("limit.admit", "fast_cas", "the decision clock"))
    row("coarse-clock GCRA (10/s) at most the coarse clock + CAS + the empty policy + 1 ns",
        gcra("limit.admit_slow_rate", "coarse_cas", "the coarse clock"))
    row("breaker + limiter + bulkhead at most the sum of the three", stack)
    row("2 processes on one GCRA at least 25 M decisions/s", mp)
    row("keyed GCRA at 1M keys within the memory floor + 30 ns", k1m)
    row("keyed GCRA at 1k keys at most 2x unkeyed", k1k)
    w("")


def load_before():
    """bench/instr_before.tsv: each case's instructions per operation before
    the decision path became one, {case: instr}."""
    out = {}
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instr_before.tsv")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                parts = line.split("\t")
                if not line.startswith("#") and len(parts) == 2:
                    out[parts[0]] = float(parts[1])
    return out


def report(outdir, path):
    rows, machine = load(outdir)
    r = R(rows)
    daemon = any(k[0] == "resil-process" for k in rows)
    smoke = any(l.strip() == "smoke: 1" for l in machine)
    L = []
    w = L.append

    bare = r.get("floor", "bare_call")
    before = load_before()

    w("# resil benchmarks")
    w("")
    w("Generated by `bench/run.sh` from the results of one run (`bench/out/results.tsv`);")
    w("every figure below comes from that run except the cited reference figures of")
    w("`ANCHORS.md`, marked as such. Do not edit by hand: run `bench/run.sh` again.")
    if smoke:
        w("")
        w("**Smoke run**: one short run per case; the figures only show that every part runs.")
    w("")
    w("## Machine")
    w("")
    w("```")
    for l in machine:
        w(l)
    w("```")
    w("")
    cs = machine_value(machine, "clocksource")
    if cs is not None:
        w(f"This host's clock: clocksource {cs}; TSC flags: "
          f"{machine_value(machine, 'tsc flags') or 'none'}; kernel options: "
          f"{machine_value(machine, 'kernel clock options') or 'none'}; the library chose: "
          f"{machine_value(machine, 'decision clock') or 'unknown'}.")
        w("")
    w("## Commands")
    w("")
    w("```sh")
    w("cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2")
    w("bench/run.sh build      # everything, a few minutes (./run.sh bench does both steps)")
    w("bench/run.sh build --smoke   # every part in seconds; writes nothing in the tree")
    w("bench/run.sh build --switch-clocksource   # root: the second pass on the kernel's other clocksource")
    w("# parts: build/bench/resil_bench --help; build/examples/fleet_demo --help")
    w("```")
    w("")
    loadavg = [l.split(": ", 1)[1] for l in machine if l.startswith("load average")]
    if loadavg:
        txt = f"{loadavg[0]} at the start"
        if len(loadavg) > 1:
            txt += f", {loadavg[1]} at the end"
        w(f"The machine is shared (2 vCPUs, other work running): load average {txt}.")
        w("Nanosecond figures move with that load, by 2x on a busy machine;")
        w("instruction counts do not, and the ratios compare figures of the same run.")
        steady(r, R(load_rows(os.path.join(outdir, "results_other.tsv"))), w)
        w("")
    w("Method: each case is a loop calibrated to about 40 ms per run, 7 runs; the figure is")
    w("the median ns/op with [min-max] of the runs. Instructions per operation come from")
    w("`valgrind --tool=callgrind` on a fixed count of iterations between two client")
    w("requests (collection on, off), loop included, with `RESIL_CLOCK=monotonic` as")
    w("`tests/sh_callgrind_gate.sh` and `bench/instr_before.tsv` count them: the same")
    w("path on every host kind (valgrind hides the vDSO, so a clock_gettime counts as its")
    w("wrapper only; `bench/decision.md` has the counts with the TSC too). The policies are measured in " +
      ("resild's segments (`resil`), and again in an embedded segment of the process" +
       " (`per-process`, the same policy kept per process)." if daemon else
       "embedded segments (resild was not available for this run)."))
    w("The socket baseline sends one `Get` request to resild per decision and waits for its")
    w("answer (what asking a naive policy server costs); the Redis baselines use hiredis")
    w("over a unix socket to a private `redis-server` without persistence.")
    w("")

    # targets first: that is what the reader wants
    w("## Targets")
    w("")
    own_cost(r, R(load_rows(os.path.join(outdir, "results_other.tsv"))), machine, w, before)
    w("### Every other case, peers, processes and fleets")
    w("")
    w("| target | figure of this run | |")
    w("|---|---|---|")
    br = r.get("resil", "breaker.count100.acq_rel")
    la = r.get("resil", "limit.admit")
    worse = [(n, r.instr(n), before[n]) for n, _ in HOT
             if n in before and r.instr(n) is not None and r.instr(n) > before[n]]
    counted = [n for n, _ in HOT if n in before and r.instr(n) is not None]
    txt = (", ".join(f"`{n}` {fmt_instr(v)} (before {fmt_instr(b)})" for n, v, b in worse)
           if worse else f"none of the {len(counted)} cases counted costs more")
    w(f"| every case at most its instruction count before the decision path became one "
      f"(bench/instr_before.tsv) | {txt} | {verdict(None if not counted else not worse)} |")
    # Redis and the socket: ANCHORS.md times a round trip as it comes (1 client,
    # p50, no spinner), and the targets were set against that; the faster p50
    # (other vCPU kept awake) is the peer's best case on this VM.
    rg, rb = rt_p50_idle_ns(r, "redis", "gcra_evalsha"), rt_p50_idle_ns(r, "redis", "breaker_lua")
    bg, bb = rt_p50_ns(r, "redis", "gcra_evalsha"), rt_p50_ns(r, "redis", "breaker_lua")
    n1, n2 = ratio(rg, la), ratio(rb, br)
    m1, m2 = ratio(bg, la), ratio(bb, br)
    w(f"| >= 1000x cheaper than Redis (a round trip / resil median) | "
      f"as ANCHORS measures it (1 client, p50 as it comes): GCRA: Redis {fmt(rg)} ns / "
      f"resil {fmt(la)} ns = {fmt_ratio(n1)}; breaker: {fmt(rb)} / {fmt(br)} = "
      f"{fmt_ratio(n2)}; Redis's best case on this VM (faster p50, other vCPU kept awake): "
      f"GCRA {fmt(bg)} ns = {fmt_ratio(m1)}, breaker {fmt(bb)} ns = {fmt_ratio(m2)} | "
      f"{two_ways([n1, n2], [m1, m2], 1000, 'as the anchors measure Redis')} |")
    so, sb = rt_p50_idle_ns(r, "socket", "get_roundtrip"), rt_p50_ns(r, "socket", "get_roundtrip")
    n1, m1 = ratio(so, br), ratio(sb, br)
    w(f"| >= 500x cheaper than a socket round trip | as it comes (p50, as ANCHORS times "
      f"round trips): {fmt(so)} ns / breaker {fmt(br)} ns = {fmt_ratio(n1)}; best case on "
      f"this VM (faster p50, other vCPU kept awake): {fmt(sb)} ns = {fmt_ratio(m1)} | "
      f"{two_ways([n1], [m1], 500, 'as the anchors time round trips')} |")
    mpv = [(k, r.get("mp", f"{k}.shared.p2", "mops"))
           for k in ("breaker.count100", "bulkhead25", "bulkhead", "bulkhead.wait",
                     "bulkhead.critical", "bulkhead2000", "limit.admit")]
    txt = ", ".join(f"{k} {fmt(v)}" for k, v in mpv)
    met = [k for k, v in mpv if v is not None and v >= 25]
    unmet = [k for k, v in mpv if v is not None and v < 25]
    if not met and not unmet:
        vtxt = verdict(None)
    elif not unmet:
        vtxt = verdict(True)
    else:
        vtxt = (f"**met** for {', '.join(met)}; " if met else "") + \
            f"**not met** for {', '.join(unmet)}"
    w(f"| 2 processes on one policy >= 25 M decisions/s together | {txt} M/s | {vtxt} |")
    sd = r.get("fleet", "breaker.shared", "dead_calls")
    pd = r.get("fleet", "breaker.process", "dead_calls")
    bound = r.get("fleet", "breaker.shared", "dead_calls_bound")
    nw = r.get("fleet", "breaker.shared", "workers")
    x = ratio(pd, sd)
    ok = None if sd is None or bound is None else sd <= bound
    w(f"| fleet: a shared breaker lets at most threshold + probes reach the dead dependency "
      f"per open | {fmt(sd, 0)} calls in the outage; bound {fmt(bound, 0)} = 5 to open + 3 "
      f"probes per breaker.wait the outage lasted | {verdict(ok)} |")
    okp = None if pd is None or sd is None or nw is None else pd >= sd * nw * 0.5
    w(f"| fleet: per-process breakers, N times that | {fmt(pd, 0)} calls = {fmt_ratio(x)} "
      f"shared with N = {fmt(nw, 0)} | {verdict(okp)} (at least N/2 times) |")
    w("")

    # hot paths
    w("## Hot paths, one process")
    w("")
    hdr = "| operation | ns/op median [min-max] | x bare call | instr/op | instr/op before |"
    sep = "|---|---|---|---|---|"
    if daemon:
        hdr += " per-process ns/op |"
        sep += "---|"
    w(hdr)
    w(sep)
    for n, label in HOT:
        f = r.full("resil", n)
        if f is None and r.full("resil-process", n) is None:
            continue
        v = f[0][0] if f else None
        line = (f"| {label} | {fmt_range(f)} | {fmt_ratio(ratio(v, bare))} | "
                f"{fmt_instr(r.instr(n))} | {fmt_instr(before.get(n))} |")
        if daemon:
            line += f" {fmt_range(r.full('resil-process', n))} |"
        w(line)
    w("")
    mf = mem_floors(r)
    if mf:
        w("The keyed limiter against its memory floor: one random line of a shared table the")
        w("size of the case's own (limit.keys = the keys), waited for, measured in the case's")
        w("own interleaved runs (Floors, below). A keyed decision on a key no cache holds")
        w("waits for that line once (twice for the 4% of keys in their second bucket). The")
        w("benchmark loop decides independent keys back to back, so the processor overlaps")
        w("one decision's miss with the next and a case can come in under the floor; a server")
        w("that does other work between two decisions pays the floor whole. A 1k-key table")
        w("(32 KB) fits an L1 of this machine class: its floor, measured in the same rounds as")
        w("the 1k cases and `limit.admit`, shows whether it stayed there while they ran.")
        w("")
        w("| keys | table | uniform ns/op | memory floor ns/op | uniform - floor | "
          "Zipf 0.99 ns/op |")
        w("|---|---|---|---|---|---|")
        for keys, (fn, nbytes) in sorted(mf.items()):
            lab = keys_label(keys).lower()
            u = r.get("resil", f"limit.keyed_{lab}.random")
            z = r.get("resil", f"limit.keyed_{lab}.zipf")
            fv = r.get("floor", fn)
            d = None if u is None or fv is None else u - fv
            w(f"| {keys_label(keys)} | {fmt_mb(nbytes)} | {fmt(u)} | "
              f"{fmt_range(r.full('floor', fn))} | {fmt(d)} | {fmt(z)} |")
        w("")
    w("Admitted fraction per case (a rejection case must show 0, an admission case 1):")
    w("")
    notes = []
    for n, _ in HOT:
        f = r.full("resil", n)
        if f and "admitted=" in f[2]:
            notes.append(f"`{n}` {f[2].split()[0].split('=')[1]}")
    w(", ".join(notes) if notes else "n/a")
    w("")
    cgb = os.path.join(outdir, "cg_breaker.tsv")
    if os.path.exists(cgb) and os.path.getsize(cgb) > 0:
        w("Where the instructions of the breaker's acquire + release go (callgrind, per")
        w("operation, self cost of each function, this run):")
        w("")
        w("| instr/op | function |")
        w("|---|---|")
        with open(cgb) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) == 2:
                    where = p[1].split(":", 1)
                    where[0] = os.path.normpath(where[0])
                    w(f"| {fmt_instr(float(p[0]))} | `{':'.join(where)}` |")
        w("")
    w("![cost per decision, log scale](bench/cost.png)")
    w("")

    w("## Floors (same run)")
    w("")
    w("| operation | ns/op median [min-max] | instr/op | cited: ANCHORS.md, AMD EPYC |")
    w("|---|---|---|---|")
    for n, label, anchor in FLOORS:
        f = r.full("floor", n)
        if f is None:
            continue
        if n == "clock_fast" and not clock_is_tsc(machine):
            label = ("the decision clock (shm/clock.c): no usable TSC here, so its fallback, "
                     "clock_gettime in line")
        ins = fmt_instr(r.get("floor", n, "instr_op"))
        vdso = ("clock_monotonic", "clock_coarse", "clock_cas", "coarse_cas")
        if not clock_is_tsc(machine):
            vdso += ("clock_fast", "fast_cas")
        if n in vdso and ins != "n/a":
            ins += " (vDSO not counted)"
        w(f"| {label} | {fmt_range(f)} | {ins} | {anchor} |")
    for keys, (n, nbytes) in sorted(mem_floors(r).items()):
        w(f"| one random line of a {fmt_mb(nbytes)} shared table, waited for (what a keyed "
          f"decision at {keys_label(keys)} keys must wait for once) | "
          f"{fmt_range(r.full('floor', n))} | {fmt_instr(r.get('floor', n, 'instr_op'))} | |")
    w("")

    w("## Peers: a round trip per decision (same run)")
    w("")
    w("Each round trip is timed twice: as it comes, and with a spinning process at the lowest")
    w("priority keeping the other vCPU awake (on a VM, waking an idle vCPU goes through the")
    w("hypervisor and can dominate a round trip). ANCHORS.md times them as they come; the")
    w("faster p50 of the two is the peer's best case on this VM. Ratios are given for both.")
    w("")
    w("| decision | mean ns | p50 / p99 us | p50 / p99 us, other vCPU busy | "
      "decisions/s, 1 / 4 clients | memory | faster p50 / resil | p50 as it comes / resil |")
    w("|---|---|---|---|---|---|---|---|")
    peers = [("socket", "get_roundtrip", "resild control socket, Get per decision",
              "breaker.count100.acq_rel"),
             ("redis", "ping", "Redis PING (transport floor)", None),
             ("redis", "gcra_evalsha", "Redis GCRA, Lua EVALSHA, 10k keys", "limit.admit"),
             ("redis", "sliding_window_pipeline",
              "Redis sliding window (seed 004: MULTI ZREMRANGEBYSCORE ZADD ZCARD EXPIRE)",
              "limit.admit"),
             ("redis", "breaker_lua", "Redis breaker, Lua hash, record + read",
              "breaker.count100.acq_rel")]
    for g, n, label, cmp in peers:
        mean = r.get(g, n)
        if mean is None:
            continue
        p50, p99 = r.get(g, n, "p50_us"), r.get(g, n, "p99_us")
        p50w, p99w = r.get(g, n, "p50_us_warm"), r.get(g, n, "p99_us_warm")
        best = rt_p50_ns(r, g, n)
        t1 = r.get(g, f"{n}.clients1", "decisions_per_s")
        t4 = r.get(g, f"{n}.clients4", "decisions_per_s")
        mem = r.get(g, n, "bytes_per_key")
        memtxt = f"{fmt(mem, 0)} B per key" if mem is not None else ""
        if n == "sliding_window_pipeline":
            full = r.get(g, "sliding_window_full", "bytes_per_key")
            if full is not None:
                memtxt += f"; {fmt(full, 0)} B with a full window of 100"
        tp = f"{fmt(t1, 0)} / {fmt(t4, 0)}" if t1 is not None else "n/a"
        w(f"| {label} | {fmt(mean)} | {fmt(p50)} / {fmt(p99)} | {fmt(p50w)} / {fmt(p99w)} | "
          f"{tp} | {memtxt} | "
          f"{fmt_ratio(ratio(best, r.get('resil', cmp))) if cmp and best else ''} | "
          f"{fmt_ratio(ratio(us_to_ns(p50), r.get('resil', cmp))) if cmp and p50 else ''} |")
    w("")
    w("Cited for comparison, " + ANCHOR_NOTE + ":")
    w("")
    w("| Redis 7.0 decision (other machine) | p50 / p99 | decisions/s, 1 / 4 clients |")
    w("|---|---|---|")
    for a, b, c in ANCHORS_REDIS:
        w(f"| {a} | {b} | {c} |")
    w("")

    peer_rows = [k for k in rows if k[0] == "peer"]
    if peer_rows:
        w("## In-process libraries, side by side (same run)")
        w("")
        w("Measured by `bench/peers/` right after resil_bench, on this machine, in this run:")
        w("each library keeps its state per process; resil's column is a policy the whole")
        w("fleet shares (the same decision, C). A Node library wraps an async function, so")
        w("its own cost is its figure minus the bare `await` (the loop's share); a Python")
        w("one's, minus a bare Python call.")
        w("")
        w("| library (per process) | ns/call median [min-max] | its own cost, ns | resil, same "
          "decision, ns | its own cost / resil |")
        w("|---|---|---|---|---|")
        for base, table in (("bare.await", PEERS_NODE), ("limits.bare_call", PEERS_PY)):
            b = r.get("peer", base)
            f = r.full("peer", base)
            if f is None:
                continue
            note = f[2].split(" n=")[0]
            w(f"| baseline: {'a bare await' if base == 'bare.await' else 'a bare call'} "
              f"({note}) | {fmt_range(f)} | | | |")
            for n, label, cmp in table:
                f = r.full("peer", n)
                if f is None:
                    continue
                own = f[0][0] - b
                rv = r.get("resil", cmp)
                w(f"| {label} ({f[2].split(' n=')[0]}) | {fmt_range(f)} | {fmt(own)} | "
                  f"{fmt(rv)} (`{cmp}`) | {fmt_ratio(ratio(own, rv))} |")
        w("")
    w("## In-process libraries (cited, not measured here)")
    w("")
    w("Resilience4j 2.4.0 cannot be built on these machines (no Maven registry). Its")
    w("figures below come from other runs, on the host each table names; none is divided")
    w("by this run's. Each library keeps its state per process; resil's policy is shared")
    w("by the fleet.")
    w("")
    w(f"Resilience4j alone, {ANCHOR_NOTE}; beside it, the resil case that makes the same")
    w("decision, measured in this run on this machine (`resil_call` is the case matching")
    w("`decorateSupplier`: both wrap a call):")
    w("")
    w("| Resilience4j 2.4.0 (JVM 17), ns/op on the cited host | resil case | "
      "resil ns/op, this run |")
    w("|---|---|---|")
    for a, b, n in ANCHORS_R4J:
        w(f"| {a}: {b} | `{n}` | {fmt(r.get('resil', n))} |")
    w("")
    for host, cases in SIDE_BY_SIDE_R4J:
        w(f"Both measured side by side on one host, {host}:")
        w("")
        w("| case | Resilience4j 2.4.0 | resil |")
        w("|---|---|---|")
        for c, j, rv in cases:
            w(f"| {c} | {j} | {rv} |")
        w("")
    w(f"Node.js libraries, {ANCHOR_NOTE}:")
    w("")
    w("| Node.js library (per process) | overhead per call |")
    w("|---|---|")
    for a, b in ANCHORS_NODE:
        w(f"| {a} | {b} |")
    w(f"| resil_call around a shared breaker (this run) | "
      f"{fmt(r.get('resil', 'breaker.count100.call'))} ns |")
    w("")

    w("## Several processes")
    w("")
    how = next((v[2].split("; ", 1)[1] for k, v in rows.items()
                if k[0] == "mp" and "; " in v[2]), "")
    w(f"Aggregate decisions per second (millions; median of {how or 'several runs'}) of 1, 2")
    w("and 4 processes, on one shared policy and on one policy each. The machine has 2 CPUs:")
    w("4 processes share them. The rows marked threads are 1, 2 and 4 threads of one process,")
    w("on one handle and on one policy each.")
    w("")
    w("| operation | shared p1 | shared p2 | shared p4 | separate p1 | separate p2 | "
      "separate p4 |")
    w("|---|---|---|---|---|---|---|")
    for k, label in (("fetch_add", "fetch_add floor (one word / one line each)"),
                     ("clock_cas", "GCRA's floor: the decision clock + a CAS on the word "
                      "(one word / one line each)"),
                     ("breaker.count100", "breaker count 100"),
                     ("bulkhead25", "bulkhead, max 25 (fail-fast: one CAS)"),
                     ("bulkhead", "bulkhead, max 1000 (fail-fast: one CAS)"),
                     ("bulkhead.wait", "bulkhead, max 1000, wait 100 ms (scan)"),
                     ("bulkhead.critical",
                      "bulkhead, max 1000, wait 100 ms, 10% critical (scan, a partition)"),
                     ("bulkhead2000", "bulkhead, max 2000 (packed slots)"),
                     ("bulkhead.threads", "bulkhead, max 1000, threads"),
                     ("bulkhead2000.threads", "bulkhead, max 2000 (packed slots), threads"),
                     ("limit.admit", "GCRA admit"),
                     ("limit.keyed_1k", "keyed GCRA, 1k keys, uniform")):
        vals = [r.get("mp", f"{k}.{s}.p{p}", "mops")
                for s in ("shared", "separate") for p in (1, 2, 4)]
        if all(v is None for v in vals):
            continue
        w(f"| {label} | " + " | ".join(fmt(v) for v in vals) + " |")
    w("")
    w("![throughput of several processes](bench/mp.png)")
    w("")

    rw = rows.get(("reclaim", "watched", "ms"))
    ru = rows.get(("reclaim", "unwatched", "ms"))
    if rw or ru:
        w("## A worker killed holding permits")
        w("")
        w("A forked worker takes every permit of a bulkhead (max 4) and is SIGKILLed; the")
        w("time from its death (waitpid returned) until another process can take every")
        w("permit again, through resild (median [min-max] of the rounds):")
        w("")
        w("| worker | ms |")
        w("|---|---|")
        if rw:
            v = rw[0]
            w(f"| watched (alive 250 ms: resild holds its pidfd) | {fmt(v[0])} "
              f"[{fmt(v[1])}-{fmt(v[2])}] |")
        if ru:
            v = ru[0]
            w(f"| unwatched (killed at once: found by the next 100 ms scan) | {fmt(v[0])} "
              f"[{fmt(v[1])}-{fmt(v[2])}] |")
        w("")

    w("## Fleet scenarios")
    w("")
    n = r.get("fleet", "breaker.shared", "workers")
    w(f"A dependency down for a while, {fmt(n, 0)} workers each calling it every 1 ms "
      "through `breaker.window = consecutive:5; breaker.wait = 500ms; "
      "breaker.half_open_calls = 3` (`fleet_demo`, output in `bench/out/fleet_demo.txt`):")
    w("")
    w("| | shared breaker | per-process breakers |")
    w("|---|---|---|")
    for m, label in (("calls", "calls made"),
                     ("dead_calls", "calls that reached the dead dependency"),
                     ("rejected", "calls rejected"),
                     ("probes", "probes sent (admitted in half-open)"),
                     ("open_first_ms", "breaker opened: first rejection, ms into the outage"),
                     ("open_last_ms", "last worker to see it open, ms"),
                     ("recover_first_ms", "first success after the outage, ms"),
                     ("recover_last_ms", "last worker back, ms after the outage")):
        a = r.get("fleet", "breaker.shared", m)
        b = r.get("fleet", "breaker.process", m)
        d = 1 if m.endswith("_ms") else 0
        w(f"| {label} | {fmt(a, d)} | {fmt(b, d)} |")
    w("")
    w("A rate limit of R = 1000/s (burst 10) for 4 workers that honour Retry-After, admitted")
    w("per second:")
    w("")
    w("| load | one shared limiter at R | per process at R/N | per process at R |")
    w("|---|---|---|---|")
    for shape, label in (("all_busy", "all 4 workers busy"), ("one_busy", "1 worker busy")):
        vals = [r.get("fleet", f"rate.{shape}.{c}", "admitted_per_s")
                for c in ("shared_r", "process_r_over_n", "process_r")]
        w(f"| {label} | " + " | ".join(fmt(v, 0) for v in vals) + " |")
    w("")
    w("Only the shared limiter keeps R whatever the spread of the load: per process at R/N")
    w("wastes what idle workers do not use, per process at R admits N x R.")
    w("")
    w("![fleet scenarios](bench/fleet.png)")
    w("")
    # tables of record measured by runs of their own, each with its date
    # and load, kept across reports: the state arena per policy (from the
    # layout), the hot paths before and after the
    # untrusted-state work (callgrind), the global scope through Redis
    # (bench/cluster runs), the decision clock before and after
    # (bench/clock_compare.sh), Python (bench/python_bench.py --write), PHP
    # (bench/php_bench.py --write), nginx (bench/nginx_bench.py --write), the
    # figures the design comments name by bench case (design.md)
    here = os.path.dirname(os.path.abspath(__file__))
    for kept in ("decision.md", "sizes.md", "untrusted.md", "global.md", "clock.md", "python.md", "php.md",
                 "nginx.md",
                 "design.md"):
        kp = os.path.join(here, kept)
        if os.path.exists(kp):
            with open(kp) as f:
                w(f.read().rstrip("\n"))
            w("")
        if kept == "global.md":
            cluster(outdir, w)
    text = "\n".join(L) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def cluster(outdir, w):
    """bench/cluster_bench --quick's tables from this run (run.sh writes
    them to OUTDIR/cluster.md), under global.md's prose."""
    p = os.path.join(outdir, "cluster.md")
    if not os.path.exists(p):
        return
    with open(p) as f:
        text = f.read().rstrip("\n")
    if not text:
        return
    w("### This run: `cluster_bench --quick` (bench/run.sh)")
    w("")
    w(text)
    w("")
    w("Admitted per second per host through the demand shifts, the join, the")
    w("leave and the outage (`bench/cluster_rate.csv` has the figures):")
    w("")
    w("![admitted rate per host](bench/cluster_rate.svg)")
    w("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plots", action="store_true")
    ap.add_argument("--out", default="-")
    ap.add_argument("outdir")
    a = ap.parse_args()
    if a.plots:
        plots(a.outdir)
    else:
        report(a.outdir, a.out)


if __name__ == "__main__":
    main()

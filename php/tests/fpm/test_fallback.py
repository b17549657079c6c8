#!/usr/bin/env python3
"""PHP-FPM started while resild is down serves by the fallback: each
worker's pending handle decides the declared policy on its own copy
(`policy.fallback = local`: a limit of burst 2 holds per worker); once
resild starts, every worker attaches by itself (within 10 s, while it
serves) and decides in resild's shared segments: then the burst of 2
holds for the whole pool."""
import collections
import threading
import time

import harness


def burst(h, n, threads=4):
    out = []
    lock = threading.Lock()

    def client():
        for _ in range(n):
            r = h.get_json("/fallback")
            with lock:
                out.append(r)

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def body(h):
    rs = burst(h, 10)
    h.check(all(s in (200, 429) for s, _, _ in rs) and len(rs) == 40, "40 requests answered without resild")
    h.check(not any(b["attached"] for _, _, b in rs), "every worker is pending")
    served = collections.Counter(b["pid"] for _, _, b in rs)
    admitted = collections.Counter(b["pid"] for s, _, b in rs if s == 200)
    print("served per worker:", dict(served), "admitted:", dict(admitted))
    h.check(all(admitted[p] == min(2, n) for p, n in served.items()),
            "each worker admitted its own burst of 2 (a worker's copy of the policy decides)")
    h.check(sum(admitted.values()) > 2, "the pool admitted %d: more than one worker's burst"
            % sum(admitted.values()))
    last = {b["pid"]: b["pending"] for _, _, b in rs}
    h.check(all(last[p]["admitted"] == admitted[p] for p in last),
            "pendingStats counts what each worker admitted while pending")

    h.start_resild()
    seen = set()
    sent = [0]

    def all_attached():
        # light traffic: 4 requests a quarter of a second, far fewer
        # decisions than libresil's background look needs (it looks every
        # 256th decision that reads no clock): each worker's declaration
        # looks for resild, at most once a second
        for _, _, b in burst(h, 1):
            sent[0] += 1
            if b["attached"]:
                seen.add(b["pid"])
        return seen >= set(h.workers())
    t0 = time.monotonic()
    harness.eventually("every worker attached", all_attached, every=0.25)
    h.check(sent[0] < 4 * 256, "every worker attached to resild once it started: %s, after %d requests "
            "(%.1f s)" % (sorted(seen), sent[0], time.monotonic() - t0))

    show = h.resilctl("show", "php_fpm_fallback")
    h.check(show.returncode == 0 and "limit.burst = 2" in show.stdout,
            "resild has the policy the workers declared while it was away")
    rs = burst(h, 5)
    h.check(all(b["attached"] for _, _, b in rs), "20 more requests, all decided attached")
    counters = {}
    for line in h.resilctl("show", "php_fpm_fallback").stdout.splitlines():
        f = line.split()
        if len(f) == 2 and line.startswith("  ") and f[1].isdigit():
            counters[f[0]] = int(f[1])
    print("resild's counters:", {k: counters.get(k) for k in ("calls", "success", "rejected_limited")})
    h.check(counters["success"] == 2 and counters["calls"] >= 20 and
            counters["calls"] == counters["success"] + counters["rejected_limited"],
            "in resild the pool was admitted the burst of 2 in all, over %d decisions of 4 workers"
            % counters["calls"])

harness.run(3, body, resild=False)

#!/usr/bin/env python3
"""A per-client-address limit for a whole PHP-FPM pool (4 static workers
behind nginx): `limit.rate = 20/s; limit.burst = 5` keyed by the client's
address (Resil\\Http\\RateLimitMiddleware, PSR-15). Two addresses hammer
it for 3 s from 8 connections at once: each is admitted 20 x 3 + 5 times
(within 10%), by all 4 workers together; every refusal is a 429 with a
Retry-After. resild counts 4 client processes: one handle per worker,
none in the master, none per request."""
import collections
import json
import threading
import time

import harness

SECONDS = 3.0
EXPECTED = 20 * SECONDS + 5


def body(h):
    # each worker's first request opens its handle and declares
    for _ in range(3):
        ts = [threading.Thread(target=h.get, args=("/limit",), kwargs={"source": "127.0.0.3"})
              for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    results = collections.defaultdict(list)
    lock = threading.Lock()
    start = time.monotonic()

    def client(src):
        while time.monotonic() < start + SECONDS:
            status, headers, _ = h.get("/limit", source=src)
            with lock:
                results[src].append((status, headers.get("retry-after"), headers.get("x-worker")))

    ts = [threading.Thread(target=client, args=(src,)) for src in ("127.0.0.1", "127.0.0.2")
          for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    workers = set()
    for src in ("127.0.0.1", "127.0.0.2"):
        rs = results[src]
        admitted = [r for r in rs if r[0] == 200]
        refused = [r for r in rs if r[0] != 200]
        print("%s: %d requests, %d admitted, %d refused" % (src, len(rs), len(admitted), len(refused)))
        h.check(0.9 * EXPECTED <= len(admitted) <= 1.1 * EXPECTED,
                "%s admitted %d, within [0.9, 1.1] x %d" % (src, len(admitted), EXPECTED))
        h.check(all(r[0] == 429 for r in refused), "%s: every refusal is a 429" % src)
        h.check(all(r[1] is not None and r[1].isdigit() and int(r[1]) >= 1 for r in refused),
                "%s: every 429 carries Retry-After (whole seconds, at least 1)" % src)
        h.check(len(refused) > 0, "%s: the limit refused some (%d)" % (src, len(refused)))
        workers |= {r[2] for r in admitted}
    h.check(len(workers) == 4, "the admitted requests were served by all 4 workers: %s" % sorted(workers))

    clients = json.loads(h.resilctl("--json", "status").stdout)["clients"]
    h.check(clients == 4, "resild has 4 client processes (one per worker, none per request): %d" % clients)


harness.run(0, body)

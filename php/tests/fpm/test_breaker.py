#!/usr/bin/env python3
"""A breaker around a failing upstream, called with Guzzle from a PHP-FPM
pool (4 static workers behind nginx) through Resil\\Http\\GuzzleMiddleware:
one breaker for the pool (`breaker.window = consecutive:5`, one probe per
second). Two outages, 4 clients at once, so that the calls come from every
worker:
  - the workers call one at a time (a lock file in the page), each
    acquiring its permit once the previous outcome is recorded: the
    upstream sees at most threshold + probes, the 5 failures that open the
    breaker and one probe per second of outage;
  - the workers call freely: the calls other workers had already begun
    when it opened (at most 3: a worker makes one at a time) reach the
    upstream too, as with any breaker (docs/php.md, "What a breaker
    bounds"): at most threshold + 3 + probes.
Never 5 per worker (>= 20); the pool recovers when the upstream does.
Then the middleware's retries: a Retry-After shorter than the request's
timeout is waited and retried, a longer one returns the answer at once."""
import threading
import time

import harness

THRESHOLD = 5
WAIT = 1.0
POLICY = ("breaker.window = consecutive:%d; breaker.wait = 1s; breaker.half_open_calls = 1; "
          "retry.max_attempts = 1" % THRESHOLD)
RETRY_POLICY = "retry.max_attempts = 3; retry.base = 10ms; retry.max_delay = 60s"


def hammer(h, seconds, path="/upstream", threads=4):
    out = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client():
        while time.monotonic() < end:
            status, _, body = h.get_json(path)
            with lock:
                out.append((status, body))

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def outage(h, up, path, in_flight, what):
    """The upstream fails while 4 clients call the pool for 2.5 s; the
    upstream counts what reached it. in_flight: the calls other workers
    may have begun before the breaker opened."""
    up.status = 503
    before = up.counted()
    t0 = time.monotonic()
    rs = hammer(h, 2.5, path)
    seconds = time.monotonic() - t0
    calls = up.counted() - before
    rejected = [b for s, b in rs if s == 503]
    workers = len({b["pid"] for s, b in rs})
    probes = int(seconds / WAIT) + 1
    bound = THRESHOLD + in_flight + probes
    print("%s: an outage of %.1f s: %d requests to the pool (answered by %d workers), %d reached the "
          "upstream, %d refused by the breaker" % (what, seconds, len(rs), workers, calls, len(rejected)))
    h.check(workers >= 2, "%s: the calls came from %d workers of the pool" % (what, workers))
    h.check(THRESHOLD <= calls <= bound,
            "%s: the upstream saw %d calls: the %d that opened the breaker, %s at most %d probes "
            "(<= %d; a breaker per worker: >= %d)"
            % (what, calls, THRESHOLD, "at most %d begun before," % in_flight if in_flight else "none in flight,",
               probes, bound, 4 * THRESHOLD))
    h.check(len(rejected) > 0 and all(b["rejected"] == "Resil\\CircuitOpen" for b in rejected),
            "%s: the rest were refused in the pool: Resil\\CircuitOpen (%d)" % (what, len(rejected)))

    up.status = 200
    harness.eventually("a call through the pool succeeds again",
                       lambda: h.get_json("/upstream")[2].get("upstream") == 200)
    rs = [h.get_json("/upstream") for _ in range(20)]
    h.check(all(s == 200 and b["upstream"] == 200 for s, _, b in rs),
            "%s: recovered: 20 calls in a row answered 200" % what)


def body(h):
    up = harness.Upstream(h.port + 5)
    try:
        rs = hammer(h, 0.5)
        h.check(all(s == 200 and b["upstream"] == 200 for s, b in rs),
                "healthy: %d calls through the pool, all answered 200" % len(rs))
        h.check(up.counted() == len(rs), "the upstream saw each call once: %d" % up.counted())

        outage(h, up, "/upstream?serial=1", 0, "one call at a time")
        outage(h, up, "/upstream", 3, "calls at once")

        s, _, b = h.get_json("/upstream?retry=1&timeout=10&path=/retry-after/1")
        h.check(s == 200 and b["upstream"] == 200 and up.seen["/retry-after/1"] == 2 and b["seconds"] >= 1.0,
                "Retry-After: 1 within a 10 s timeout: waited %.2f s (>= 1), retried once, got 200"
                % b["seconds"])
        s, _, b = h.get_json("/upstream?retry=1&timeout=2&path=/retry-after/30")
        h.check(s == 200 and b["upstream"] == 503 and up.seen["/retry-after/30"] == 1 and b["seconds"] < 30,
                "Retry-After: 30 past a 2 s timeout: the 503 at once (%.2f s), no second attempt"
                % b["seconds"])
    finally:
        up.close()


harness.run(1, body, env={"RESIL_TEST_UPSTREAM": "18415", "RESIL_TEST_POLICY": POLICY,
                          "RESIL_TEST_RETRY_POLICY": RETRY_POLICY})

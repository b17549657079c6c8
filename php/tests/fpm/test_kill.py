#!/usr/bin/env python3
"""A PHP-FPM worker killed with SIGKILL while it holds a bulkhead permit
(`bulkhead.max = 1` for the whole pool): the permit comes back (resild
reclaims what a dead client held), within 10 s, and the pool admits again;
the master replaces the worker, whose handle is its own."""
import os
import signal
import threading

import harness


def body(h):
    s, _, b = h.get_json("/try")
    h.check(s == 200 and b["admitted"], "the bulkhead admits while nobody holds it")

    holder = os.path.join(h.tmp, "holder")
    t = threading.Thread(target=lambda: h.get("/hold", timeout=150), daemon=True)
    t.start()
    pid = int(harness.eventually("a worker holds the permit",
                                 lambda: os.path.exists(holder) and open(holder).read()))
    s, _, b = h.get_json("/try")
    h.check(s == 503 and b["rejected"] == "Resil\\BulkheadFull",
            "while worker %d holds it: Resil\\BulkheadFull" % pid)

    os.kill(pid, signal.SIGKILL)
    harness.eventually("the permit back", lambda: h.get_json("/try")[0] == 200)
    h.check(True, "after SIGKILL of worker %d the pool admits again" % pid)
    harness.eventually("4 workers again", lambda: len(h.workers()) == 4 and pid not in h.workers())
    h.check(True, "the master replaced the killed worker")
    s, _, b = h.get_json("/try")
    h.check(s == 200, "and admits again after that")
    t.join(30)


harness.run(2, body)

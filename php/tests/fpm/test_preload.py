#!/usr/bin/env python3
"""Fork safety under PHP-FPM's own forks: with opcache.preload the master
runs PHP before it forks its workers, opens its handle and declares a
bulkhead (`bulkhead.max = 1`); every worker inherits that handle. Each
worker must then decide as a client of its own (libresil's fork
handlers): resild counts the workers as processes of their own, a permit
one worker holds is the whole pool's, and when that worker is SIGKILLed
the permit comes back, which it would never do if the dead worker had
decided under the master's client row (the master lives on)."""
import json
import os
import signal
import threading

import harness


def body(h):
    master = h.procs["fpm"].pid
    with open(os.path.join(h.tmp, "preloaded")) as f:
        who, state = f.read().split()
    h.check(int(who) == master and state == "attached",
            "the master (%d) ran the preload script and opened its handle: %s" % (master, state))
    s, _, b = h.get_json("/try")
    h.check(s == 200 and b["admitted"] and b["attached"], "a worker admits, attached through the inherited handle")
    served = {b["pid"]}
    holder = os.path.join(h.tmp, "holder")
    threading.Thread(target=lambda: h.get("/hold", timeout=150), daemon=True).start()
    pid = int(harness.eventually("a worker holds the permit",
                                 lambda: os.path.exists(holder) and open(holder).read()))
    h.check(pid != master and pid in h.workers(), "the holder %d is a worker, not the master %d" % (pid, master))
    others = set()

    def refused_elsewhere():
        s, _, b = h.get_json("/try")
        served.add(b["pid"])
        if s == 503 and b["rejected"] == "Resil\\BulkheadFull" and b["pid"] != pid:
            others.add(b["pid"])
        return len(others) >= 2
    harness.eventually("two other workers refused", refused_elsewhere)
    h.check(True, "other workers (%s) see the holder's permit: one bulkhead for the pool" % sorted(others))
    served.add(pid)

    def clients():
        return json.loads(h.resilctl("--json", "status").stdout)["clients"]
    # a row a forked child claims by itself is counted by resild shortly after
    n = harness.eventually("a client process per worker", lambda: clients() >= len(served) and clients())
    h.check(n >= len(served), "resild counts %d client processes for the %d workers that decided: "
            "each its own (under the master's they would be one)" % (n, len(served)))
    os.kill(pid, signal.SIGKILL)
    harness.eventually("the permit back", lambda: h.get_json("/try")[0] == 200)
    h.check(True, "after SIGKILL of worker %d its permit came back (its own row, not the master's)" % pid)


harness.run(4, body, preload=os.path.join(harness.HERE, "preload.php"))

#!/usr/bin/env python3
# ngx_http_resil_module in Debian's real nginx (started with -p in a
# temporary directory, 4 workers, the module built by this tree) against
# real resild daemons on private sockets; the sh_nginx_*.sh tests run one
# case each:
#
#   conf     nginx -t: a bad declaration, a wait, a bad parameter, each
#            with the module's words and FILE:LINE; nginx's own limit_req
#            tests (limit_req.t, limit_req2.t, limit_req_dry_run.t), the
#            cases that map onto resil's limiter, ported
#   limit    a per-IP limit (20/s, burst 5) over 3 s from 127.0.0.1 and
#            127.0.0.2 through several workers: each admitted within
#            [0.9, 1.1] x (20 x 3 + 5); every refusal 429 with Retry-After;
#            a worker's system calls (strace -c) with a decision are the
#            ones it makes without
#   upstream a breaker on a proxied upstream that fails (5xx, a refused
#            connection, a timeout): the upstream sees at most the
#            threshold and the probes, 503 + Retry-After while OPEN,
#            closed after the upstream recovers; a bulkhead of 3 never
#            has more than 3 at a slow upstream, across the workers; the
#            permit of a worker SIGKILLed while it holds it comes back
#   pending  nginx started while resild is down serves by each policy's
#            fallback (admit, reject, local), then follows resild when it
#            starts and when it restarts; a name resild does not know and
#            a policy that waits are admitted, logged, never waited for
#   global   two nginx "hosts", two resild, one redis-server: a
#            policy.scope = global limit within rate x T + bursts
#
# Upstreams are http.server threads that count what reaches them.
# Everything is bounded by "eventually, within 10 s" or by counts; the
# 3 s spans are what the limits are measured over, not timeouts.
import collections
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NGINX = "/usr/sbin/nginx"
WORKERS = 4
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def counter(rd, name, which):
    """A policy's counter, as resilctl show prints it (0 when absent)."""
    rc, out = rd.ctl("show", name)
    for line in out.split("\n"):
        f = line.split()
        if len(f) == 2 and f[0] == which and f[1].isdigit():
            return int(f[1])
    return 0


def eventually(fn, what, timeout=10.0):
    """fn() until it is true, within timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            check(False, what + " (not within %.0f s)" % timeout)
            return v
        time.sleep(0.05)


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


class Env:
    def __init__(self):
        for v in ("RESILD", "RESILCTL", "BIN", "SRC"):
            if v not in os.environ:
                skip("run by ctest: %s is not set" % v)
        self.resild = os.environ["RESILD"]
        self.resilctl = os.environ["RESILCTL"]
        self.bin = os.environ["BIN"]
        self.module = os.path.join(self.bin, "nginx/build/ngx_http_resil_module.so")
        self.libdir = os.path.join(self.bin, "client")
        if not os.access(NGINX, os.X_OK):
            skip("no nginx (apt-get install nginx-core)")
        if not os.path.exists(self.module):
            skip("the module is not built (nginx-dev, -DRESIL_NGINX)")
        self.dir = tempfile.mkdtemp(prefix="resil-nginx-")
        self.procs = []

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def close(self):
        for p in reversed(self.procs):
            p.stop()
        if failures:
            print("kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Resild:
    def __init__(self, env, name, extra=()):
        self.env = env
        self.sock = env.path(name + ".sock")
        self.conf = env.path(name + ".conf.d")
        self.log = env.path(name + ".log")
        self.extra = list(extra)
        self.proc = None
        os.makedirs(self.conf, exist_ok=True)
        env.procs.append(self)

    def start(self):
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [self.env.resild, "--foreground", "--socket", self.sock, "--config", self.conf]
                + self.extra, stdout=log, stderr=log)
        eventually(lambda: self.ctl("list")[0] == 0, "resild %s answers" % self.sock)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def ctl(self, *args):
        p = subprocess.run([self.env.resilctl, "--socket", self.sock] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p.returncode, p.stdout


class Nginx:
    """Debian's nginx with the module, in a directory of its own."""

    def __init__(self, env, name, sock, http, workers=WORKERS):
        self.env = env
        self.dir = env.path(name)
        self.port = free_port()
        self.proc = None
        for d in ("html", "tmp", "logs"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        with open(os.path.join(self.dir, "html", "index.html"), "w") as f:
            f.write("ok\n")
        self.conf = os.path.join(self.dir, "nginx.conf")
        user = "user root;" if os.getuid() == 0 else ""
        tmp = os.path.join(self.dir, "tmp")
        self.text = f"""load_module {env.module};
worker_processes {workers};
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log info;
{user}
events {{ worker_connections 1024; }}
http {{
    log_format v '$remote_addr $status $resil_verdict $pid';
    access_log {self.dir}/logs/access.log v;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    resil_socket {sock};
    add_header X-Worker $pid always;
    root {self.dir}/html;
{http.replace("@PORT@", str(self.port))}
}}
"""
        with open(self.conf, "w") as f:
            f.write(self.text)
        env.procs.append(self)

    def line_of(self, needle):
        for i, l in enumerate(self.text.split("\n")):
            if needle in l:
                return i + 1
        return 0

    def run(self, *args):
        e = dict(os.environ, LD_LIBRARY_PATH=self.env.libdir)
        return subprocess.run([NGINX, "-p", self.dir, "-c", self.conf] + list(args), env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def test(self):
        p = self.run("-t")
        return p.returncode, p.stdout

    def start(self):
        e = dict(os.environ, LD_LIBRARY_PATH=self.env.libdir)
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", self.conf, "-g", "daemon off;"],
                                     env=e, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        eventually(lambda: self.up(), "nginx listens on %d" % self.port)
        # every worker ran init_process (its line in the error log)
        eventually(lambda: self.log().count("resil: ") >= WORKERS or self.proc.poll() is not None,
                   "every nginx worker opened its handle")
        check(self.proc.poll() is None, "nginx runs: " + self.log()[-2000:])

    def up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            return True
        except OSError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log(self):
        try:
            with open(os.path.join(self.dir, "logs", "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def access(self):
        with open(os.path.join(self.dir, "logs", "access.log")) as f:
            return f.read().splitlines()

    def get(self, path, source="127.0.0.1", headers=None, conn=None):
        """One request: (status, headers, body). A new connection (a
        worker chosen by the kernel: reuseport) unless conn is given."""
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                               source_address=(source, 0))
        h = dict(headers or {})
        if conn is None:
            h["Connection"] = "close"
        c.request("GET", path, headers=h)
        r = c.getresponse()
        body = r.read()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, body)
        if conn is None:
            c.close()
        return out

    def connections(self, n, source="127.0.0.1", workers=WORKERS):
        """n keep-alive connections from source, over at least min(n,
        workers) workers: each asks /pid (no resil) until its worker
        makes a new one, within 10 s."""
        conns, pids = [], set()
        end = time.monotonic() + 10
        while len(conns) < n and time.monotonic() < end:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                           source_address=(source, 0))
            _, h, _ = self.get("/pid", conn=c)
            pid = h.get("x-worker")
            if pid not in pids or len(pids) >= min(n, workers):
                pids.add(pid)
                conns.append(c)
            else:
                c.close()
        check(len(conns) == n, "%d connections from %s over %d workers" % (n, source, len(pids)))
        return conns, pids


class Upstream:
    """An HTTP server that counts what reaches it: hits, and the most at
    once (a request is "at the upstream" from its arrival until the
    upstream starts answering, so that nginx cannot admit the next one
    before this one has left)."""

    def __init__(self, delay=0.0):
        self.lock = threading.Lock()
        self.fail = False
        self.delay = delay
        self.gate = None  # a threading.Event every request waits for, when set
        self.hits = 0
        self.fail_hits = 0
        self.inflight = 0
        self.most = 0
        up = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with up.lock:
                    up.hits += 1
                    failing = up.fail
                    up.fail_hits += 1 if failing else 0
                    up.inflight += 1
                    up.most = max(up.most, up.inflight)
                time.sleep(up.delay)
                if up.gate is not None:
                    up.gate.wait(30)
                with up.lock:
                    up.inflight -= 1
                try:
                    body = b"upstream\n"
                    self.send_response(500 if failing else 200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # nginx gave up on it (a timeout)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()


def hammer(conns, path, seconds, headers=None):
    """Each connection in a thread of its own, requests back to back for
    `seconds`: a Counter of statuses, the Retry-After values of refusals,
    and each response's worker."""
    lock = threading.Lock()
    statuses, retry, pids = collections.Counter(), collections.Counter(), collections.Counter()
    start = threading.Barrier(len(conns) + 1)
    t = {}

    def run(c):
        start.wait()
        while time.monotonic() < t["end"]:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            r.read()
            with lock:
                statuses[r.status] += 1
                pids[r.getheader("X-Worker")] += 1
                if r.status != 200:
                    retry[r.getheader("Retry-After")] += 1

    th = [threading.Thread(target=run, args=(c,)) for c in conns]
    for x in th:
        x.start()
    t["end"] = time.monotonic() + seconds
    start.wait()
    for x in th:
        x.join()
    return statuses, retry, pids


# ---------------------------------------------------------------- cases


def case_conf(env):
    """nginx -t, and nginx's limit_req tests that map onto resil.

    Ported (the behaviour, with rates slow enough that a loaded machine
    cannot hand back a permit between two requests): limit_req.t's
    request / request rejected / request rejected status / rejects not
    counted / negative excess / key passed; limit_req2.t's fast, slow,
    both and no key (an empty key is admitted: limit.empty_key's
    default), each with its "passed" or "rejected" second request;
    limit_req_dry_run.t's dry run, not delayed, not rejected, dry run off
    and the dry run's line in the error log.

    Not mapped: limit_req.t's "delayed big request not truncated" and
    limit_req_dry_run.t's "log - delay" (limit_req delays the excess of a
    burst without nodelay in a timer; resil in nginx never delays: a
    limit.wait is refused by nginx -t and the excess is refused at once
    with Retry-After); limit_req2.t's nodelay variants (the same cases as
    the delayed ones when nothing is delayed); limit_req.t's "overlong key
    rejected" (a TODO of nginx's own suite: limit_req's zone cannot hold
    a key over 65535 bytes, while resil keeps a fingerprint of a key of
    any length, so no key is too long).
    """
    bad = [
        ('resil_policy bad "limit.rate = fast";', "limit.rate"),
        ('resil_policy waits "bulkhead.max = 3; bulkhead.wait = 10ms";', "bulkhead.wait"),
        ('resil_policy waits "limit.rate = 5/s; limit.wait = 1s";', "limit.wait"),
        ('resil_policy twice "limit.rate = 1/s"; resil_policy twice "limit.rate = 2/s";',
         "declared twice"),
        ('server { listen @PORT@; location / { resil p key=$binary_remote_addr color=red; } }',
         'invalid parameter "color=red"'),
        ('server { listen @PORT@; location / { resil p key=plain; } }', "has no variable"),
        ('server { listen @PORT@; location / { resil %s; } }' % ("n" * 64), "policy name"),
        ('server { listen @PORT@; location / { resil p; resil p; } }', "given twice"),
        ('resil_status_limited 200;', "must be between 400 and 599"),
    ]
    for i, (text, words) in enumerate(bad):
        n = Nginx(env, "t%d" % i, env.path("none.sock"), text)
        env.procs.remove(n)
        rc, out = n.test()
        line = n.line_of(text.split(";")[0] if "server" not in text else "location /")
        where = "in %s:%d" % (n.conf, line)
        check(rc != 0, "nginx -t refuses %s" % text)
        check(words in out and where in out,
              "nginx -t says '%s' %s for %s: %s" % (words, where, text, out.strip()))
    good = Nginx(env, "tgood", env.path("none.sock"),
                 'resil_policy ok "limit.rate = 1/s; limit.burst = 2";\n'
                 'server { listen @PORT@; location / { resil ok key=$binary_remote_addr; } }')
    env.procs.remove(good)
    rc, out = good.test()
    check(rc == 0, "nginx -t takes a good configuration: " + out)

    # docs/nginx.md's migration table: each row's directives pass nginx -t
    src = os.environ["SRC"]
    with open(os.path.join(src, "docs/nginx.md")) as f:
        doc = f.read()
    table = doc.split("<!-- nginx-mappings: begin")[1].split("<!-- nginx-mappings: end")[0]
    rows = 0
    for row in table.splitlines():
        cells = row.split(" | ")
        if len(cells) < 2 or not row.startswith("| `"):
            continue
        snippets = [x for x in cells[1].split("`")[1::2] if x.startswith("resil")]
        if not snippets:
            continue
        http = "\n".join(x for x in snippets if x.startswith("resil_policy"))
        loc = "\n".join(x for x in snippets if not x.startswith("resil_policy"))
        for name in set(w.split()[1].rstrip(";") for w in snippets if w.startswith("resil ")):
            if "resil_policy " + name not in http:
                http += '\nresil_policy %s "limit.rate = 1/s; limit.keys = 8";' % name
        t = Nginx(env, "map%d" % rows, env.path("none.sock"),
                  http + "\nserver { listen @PORT@; location / { %s } }" % loc)
        rc, out = t.test()
        check(rc == 0, "docs/nginx.md's row %s: %s" % (cells[1], out.strip()))
        rows += 1
    check(rows >= 8, "docs/nginx.md's migration table has its rows: %d" % rows)
    # examples/nginx/resil.conf
    with open(os.path.join(src, "examples/nginx/resil.conf")) as f:
        ex = f.read()
    ex = ex.replace("listen 80;", "listen 127.0.0.1:@PORT@;")
    ex = ex.replace("resil_socket /run/resild/control.sock;", "")  # the test's own
    ex = ex.replace("/var/log/nginx/", env.path("") + "/")
    t = Nginx(env, "example", env.path("none.sock"), ex)
    rc, out = t.test()
    check(rc == 0, "nginx -t on examples/nginx/resil.conf: " + out.strip())

    rd = Resild(env, "resild")
    rd.start()
    lim = """
    resil_policy one  "limit.rate = 2/m; limit.burst = 2; limit.keys = 64";
    resil_policy rej  "limit.rate = 1/2s; limit.keys = 64";
    resil_policy fast "limit.rate = 1000/s; limit.keys = 64";
    resil_policy key  "limit.rate = 1000/s; limit.burst = 100; limit.keys = 64";
    resil_policy slow2 "limit.rate = 1/m; limit.keys = 64";
    resil_policy fast2 "limit.rate = 1000/s; limit.keys = 64";
    resil_policy strict "limit.rate = 1/m; limit.keys = 64; limit.empty_key = reject";
    resil_policy dry  "limit.rate = 1/m; limit.keys = 64";
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /pid { return 200 "$pid"; }
        location /test1 { resil one key=$binary_remote_addr; try_files /index.html =404; }
        location /status { resil one key=$binary_remote_addr; resil_status_limited 501;
                           try_files /index.html =404; }
        location /rej { resil rej key=$binary_remote_addr; try_files /index.html =404; }
        location /fast { resil fast key=$binary_remote_addr; try_files /index.html =404; }
        location /keyreq { resil key key=$http_x_key; try_files /index.html =404; }
        location /t1 { resil fast2 key=$arg_b; resil slow2 key=$arg_a;
                       try_files /index.html =404; }
        location /strict { resil strict key=$arg_a; try_files /index.html =404; }
    }
    server {
        listen 127.0.0.1:@PORT2@ reuseport;
        resil_dry_run on;
        location /delay { resil dry key=$binary_remote_addr; try_files /index.html =404; }
        location /reject { resil dry key=$binary_remote_addr; try_files /index.html =404;
            location /reject/off { resil dry key=$binary_remote_addr; resil_dry_run off;
                                   try_files /index.html =404; }
        }
    }
"""
    port2 = free_port()
    n = Nginx(env, "limitreq", rd.sock, lim.replace("@PORT2@", str(port2)))
    n.start()
    st = lambda path, **kw: n.get(path, **kw)[0]

    # limit_req.t: "request", "request rejected" (burst=1 nodelay at
    # 2r/s is burst 2 here, at 2/m so that a loaded machine cannot give
    # back a permit between the requests), "request rejected status"
    check(st("/test1") == 200, "limit_req.t request")
    check(st("/test1") == 200, "limit_req.t request, the burst's second")
    s, h, _ = n.get("/test1")
    check(s == 429 and h.get("retry-after", "").isdigit(),
          "limit_req.t request rejected: %d, Retry-After %s" % (s, h.get("retry-after")))
    check(st("/status") == 501, "limit_req.t request rejected status")
    # "rejects not counted": refusals take nothing; the next permit comes
    # at the same time as without them
    t0 = time.monotonic()
    check(st("/rej") == 200, "limit_req.t rejects not counted: the first")
    refused = 0
    for _ in range(4):
        if time.monotonic() - t0 < 1.9:
            refused += st("/rej") == 429
    check(refused > 0, "limit_req.t rejects not counted: refusals within the interval")
    time.sleep(max(0.0, t0 + 2.1 - time.monotonic()))
    check(st("/rej") == 200, "limit_req.t rejects not counted: admitted 1/rate after the first")
    # "negative excess": a fast limit after idle admits
    check(st("/fast") == 200, "limit_req.t negative excess: first")
    time.sleep(0.1)
    check(st("/fast") == 200, "limit_req.t negative excess")
    # "key passed"
    check(st("/keyreq", headers={"X-Key": "short"}) == 200, "limit_req.t key passed")

    # limit_req2.t: two limits in one location, each by its own key
    check(st("/t1?b=1") == 200, "limit_req2.t fast")
    time.sleep(0.1)
    check(st("/t1?b=1") == 200, "limit_req2.t fast - passed")
    check(st("/t1?a=1") == 200, "limit_req2.t slow")
    check(st("/t1?a=1") == 429, "limit_req2.t slow - rejected")
    check(st("/t1?a=2&b=2") == 200, "limit_req2.t both")
    check(st("/t1?a=2&b=2") == 429, "limit_req2.t both - rejected")
    check(st("/t1") == 200, "limit_req2.t no key")
    check(st("/t1") == 200, "limit_req2.t no key - passed")
    # and the empty key refused when the policy says so
    check(st("/strict") == 429, "limit.empty_key = reject refuses a request without the key")
    check(st("/strict?a=1") == 200, "limit.empty_key = reject admits a request with the key")

    # limit_req_dry_run.t: decided and counted, never refused
    n.port, port1 = port2, n.port
    check(st("/delay") == 200, "limit_req_dry_run.t dry run")
    check(st("/delay") == 200, "limit_req_dry_run.t dry run - not delayed")
    check(st("/reject") == 200, "limit_req_dry_run.t dry run - not rejected")
    check(st("/reject/off") == 429, "limit_req_dry_run.t dry run off - rejected")
    n.port = port1
    eventually(lambda: 'would refuse the request (limited), dry run' in n.log(),
               "limit_req_dry_run.t log - reject")
    verdicts = collections.Counter(l.split()[2] for l in n.access())
    check(verdicts["dry-run:limited"] == 2 and verdicts["limited"] >= 5,
          "$resil_verdict says admit, limited, dry-run:limited: %s" % dict(verdicts))
    rc, out = rd.ctl("show", "dry")
    check("rejected_limited             3" in out,
          "resild counts the dry run's refusals: %s" % out)
    print("nginx -t: %d refusals with FILE:LINE; limit_req cases: %s" % (len(bad), dict(verdicts)))


def case_limit(env):
    rd = Resild(env, "resild")
    rd.start()
    n = Nginx(env, "ip", rd.sock, """
    resil_policy ip "limit.rate = 20/s; limit.burst = 5; limit.keys = 1000";
    resil_policy wide "limit.rate = 100000/s; limit.burst = 100000; limit.keys = 1000";
    resil_policy few "limit.rate = 1/m; limit.burst = 2; limit.keys = 64";
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        listen [::1]:@PORT@ reuseport;
        location = /pid { return 200 "$pid"; }
        location / { resil ip key=$binary_remote_addr outcome=none; try_files /index.html =404; }
        location /few { resil few key=$binary_remote_addr outcome=none; try_files /index.html =404; }
        location /plain { try_files /index.html =404; }
        location /wide { resil wide key=$binary_remote_addr outcome=none; try_files /index.html =404; }
        location /held { resil wide key=$binary_remote_addr; try_files /index.html =404; }
    }""")
    n.start()
    syscalls(n)
    conns, workers = [], {}
    for src in ("127.0.0.1", "127.0.0.2"):
        c, pids = n.connections(4, source=src)
        conns.append(c)
        workers[src] = pids
    res = {}

    def run(i, src):
        res[src] = hammer(conns[i], "/", 3.0)

    th = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(("127.0.0.1", "127.0.0.2"))]
    for x in th:
        x.start()
    for x in th:
        x.join()
    want = 20 * 3 + 5
    for src, (statuses, retry, pids) in res.items():
        adm = statuses[200]
        print("%s: %d admitted (want %d +- 10%%), %d refused, over workers %s" %
              (src, adm, want, statuses[429], sorted(pids)))
        check(0.9 * want <= adm <= 1.1 * want,
              "%s admitted %d, outside [%.1f, %.1f]" % (src, adm, 0.9 * want, 1.1 * want))
        check(set(statuses) <= {200, 429}, "%s: only 200 and 429: %s" % (src, dict(statuses)))
        check(statuses[429] > 0, "%s: refusals" % src)
        check(sum(retry.values()) == statuses[429] and
              all(v is not None and v.isdigit() and int(v) >= 1 for v in retry),
              "%s: every refusal has Retry-After: %s" % (src, dict(retry)))
        check(len([p for p in pids if pids[p]]) >= 2,
              "%s: the requests went through several workers: %s" % (src, dict(pids)))

    # $binary_remote_addr of an IPv6 client: its 16 bytes, a key of its own
    def until_refused(host):
        c = http.client.HTTPConnection(host, n.port, timeout=30)
        admitted = 0
        for _ in range(10):
            c.request("GET", "/few")
            r = c.getresponse()
            r.read()
            if r.status != 200:
                break
            admitted += 1
        c.close()
        return admitted, r.status

    v4, v6, again = until_refused("127.0.0.1"), until_refused("::1"), until_refused("127.0.0.1")
    print("/few (1/m, burst 2): 127.0.0.1 %s, then ::1 %s, then 127.0.0.1 %s" % (v4, v6, again))
    check(v4[1] == 429 and v4[0] >= 1, "127.0.0.1 is refused once its allowance is spent: %s"
          % (v4,))
    check(v6 == v4, "::1 has its own key, the same allowance: %s against %s" % (v6, v4))
    check(again == (0, 429), "127.0.0.1 stays refused: %s" % (again,))


def ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def syscalls(n, requests=300):
    """A worker's system calls over `requests` keep-alive requests (strace
    -c): a decision (released at once, or held to the request's end) makes
    none beyond what nginx makes for the same request without one."""
    if not shutil.which("strace"):
        print("no strace: system calls not counted")
        return
    c = http.client.HTTPConnection("127.0.0.1", n.port, timeout=30)
    pid = n.get("/pid", conn=c)[1]["x-worker"]
    counts = {}
    for path in ("/plain", "/wide", "/held"):
        out = os.path.join(n.dir, "strace" + path.replace("/", "_") + ".txt")
        st = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", pid],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # strace says it attached on stderr; requests before that are not seen
        st.stderr.readline()
        for _ in range(requests):
            check(n.get(path, conn=c)[0] == 200, "%s admits (for the count)" % path)
        st.send_signal(signal.SIGINT)
        st.wait(10)
        calls = {}
        with open(out) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[3].isdigit() and parts[-1] != "total":
                    calls[parts[-1]] = int(parts[3])
        counts[path] = calls
    c.close()
    plain = counts["/plain"]
    for path in ("/wide", "/held"):
        extra = {k: v - plain.get(k, 0) for k, v in counts[path].items() if v > plain.get(k, 0) + 2}
        check(not extra, "%s: system calls beyond nginx's own over %d requests: %s (without: %s)" %
              (path, requests, extra, plain))
    print("system calls over %d requests: without resil %s; released at once %s; held %s" %
          (requests, plain, counts["/wide"], counts["/held"]))


def case_upstream(env):
    rd = Resild(env, "resild")
    rd.start()
    up = Upstream()
    slow = Upstream(delay=0.3)
    hang = Upstream(delay=3.0)
    gated = Upstream()
    dead = free_port()
    n = Nginx(env, "up", rd.sock, f"""
    resil_policy brk "breaker.window = consecutive:5; breaker.wait = 1s; breaker.half_open_calls = 1";
    resil_policy gone "breaker.window = consecutive:3; breaker.wait = 60s";
    resil_policy late "breaker.window = consecutive:2; breaker.wait = 60s";
    resil_policy three "bulkhead.max = 3";
    resil_policy one "bulkhead.max = 1";
    server {{
        listen 127.0.0.1:@PORT@ reuseport;
        location = /pid {{ return 200 "$pid"; }}
        location /b {{ resil brk; proxy_pass http://127.0.0.1:{up.port}; }}
        location /gone {{ resil gone; proxy_pass http://127.0.0.1:{dead}; }}
        location /late {{ resil late; proxy_read_timeout 300ms; proxy_pass http://127.0.0.1:{hang.port}; }}
        location /slow {{ resil three; proxy_pass http://127.0.0.1:{slow.port}; }}
        location /one {{ resil one; proxy_pass http://127.0.0.1:{gated.port}; }}
    }}""")
    n.start()

    # the breaker: healthy, then failing, then healthy again
    for _ in range(10):
        check(n.get("/b")[0] == 200, "the healthy upstream answers")
    up.fail = True
    t0 = time.monotonic()
    seen, pids, retry_ok = collections.Counter(), set(), True
    # long enough for probes (breaker.wait = 1s): each one fails and opens again
    while sum(seen.values()) < 60 or time.monotonic() - t0 < 2.5:
        time.sleep(0.01)
        s, h, _ = n.get("/b")
        seen[s] += 1
        if s == 500:
            pids.add(h.get("x-worker"))
        if s == 503:
            retry_ok &= h.get("retry-after", "").isdigit()
    elapsed = time.monotonic() - t0
    # threshold + one probe per breaker.wait gone by, at most
    bound = 5 + 1 * (1 + int(elapsed / 1.0))
    print("outage: upstream saw %d in %.1f s (bound %d); answers %s; failures through workers %s" %
          (up.fail_hits, elapsed, bound, dict(seen), sorted(pids)))
    check(seen[500] >= 6 and up.fail_hits >= 6,
          "the first five failures and at least a probe reach the upstream")
    check(up.fail_hits <= bound, "upstream saw %d in the outage, more than %d" % (up.fail_hits, bound))
    check(seen[500] == up.fail_hits, "every request the upstream saw failed back to the client")
    check(seen[503] > 0 and retry_ok, "503 with Retry-After while OPEN: %s" % dict(seen))
    check(set(seen) <= {500, 503}, "only the upstream's 500s and the breaker's 503s")
    check(len(pids) >= 2, "the failures came through several workers: %s" % pids)
    up.fail = False
    run = [0]

    def closed():
        run[0] = run[0] + 1 if n.get("/b")[0] == 200 else 0
        return run[0] >= 20

    eventually(closed, "the breaker closes after the upstream recovers")
    rc, out = rd.ctl("show", "brk")
    check("closed" in out.split("\n")[1], "resilctl says brk is closed: " + out[:200])

    # a refused connection (502) and a timeout (504) are failures too
    s = []
    for _ in range(6):
        s.append(n.get("/gone"))
        fails = [x[0] for x in s].count(502)
        eventually(lambda: counter(rd, "gone", "failure") >= fails,
                   "the refused connection is recorded as a failure")
    check([x[0] for x in s] == [502, 502, 502, 503, 503, 503] and
          all(x[1].get("retry-after", "").isdigit() for x in s[3:]),
          "three refused connections open the breaker: %s" % [x[0] for x in s])
    # the log phase records a request's outcome after its answer went out:
    # each timeout is awaited in the counters before the next request
    s = []
    for _ in range(4):
        s.append(n.get("/late")[0])
        fails = s.count(504)
        eventually(lambda: counter(rd, "late", "failure") >= fails,
                   "the timeout is recorded as a failure")
    check(s == [504, 504, 503, 503], "two timeouts open the breaker: %s" % s)

    # the bulkhead: 12 clients at once at a slow upstream
    out = collections.Counter()
    admitted_by = set()
    lock = threading.Lock()

    def client():
        for _ in range(3):
            st, h, _ = n.get("/slow")
            with lock:
                out[st] += 1
                if st == 200:
                    admitted_by.add(h.get("x-worker"))

    th = [threading.Thread(target=client) for _ in range(12)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    print("bulkhead of 3: at most %d at the upstream at once; answers %s; admitted through "
          "workers %s" % (slow.most, dict(out), sorted(admitted_by)))
    check(1 <= slow.most <= 3, "at most 3 at the slow upstream at once: %d" % slow.most)
    check(out[200] > 0 and out[503] > 0 and set(out) <= {200, 503},
          "the bulkhead admits and refuses: %s" % dict(out))
    check(slow.hits == out[200], "every admitted request reached the upstream")
    check(len(admitted_by) >= 2, "the slow upstream's requests came through several workers: %s" %
          admitted_by)
    verdicts = collections.Counter(l.split()[2] for l in n.access())
    check(verdicts["full"] == out[503] and verdicts["open"] >= 6,
          "$resil_verdict: %s" % dict(verdicts))

    # a worker SIGKILLed while a request holds its bulkhead's one permit:
    # resild gives the permit back, and the respawned workers are admitted
    gated.gate = threading.Event()
    def hold():
        try:
            n.get("/one")
        except (OSError, http.client.HTTPException):
            pass  # its worker is killed under it

    held = threading.Thread(target=hold, daemon=True)
    held.start()
    eventually(lambda: gated.inflight == 1, "the request holding the permit reaches the upstream")
    check(n.get("/one")[0] == 503, "the one permit is held")
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and ppid(int(p)) == n.proc.pid]
    for w in workers:
        os.kill(w, signal.SIGKILL)
    gated.gate.set()
    eventually(lambda: n.get("/one")[0] == 200,
               "the permit of a SIGKILLed worker comes back (%d workers killed)" % len(workers))


def case_pending(env):
    rd = Resild(env, "resild")  # not started yet
    n = Nginx(env, "pending", rd.sock, """
    resil_policy adm "limit.rate = 1/m; policy.fallback = admit";
    resil_policy rej "breaker.window = consecutive:5; policy.fallback = reject";
    resil_policy loc "limit.rate = 1/m; limit.burst = 2; policy.fallback = local";
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /pid { return 200 "$pid"; }
        location /adm { resil adm; try_files /index.html =404; }
        location /rej { resil rej; try_files /index.html =404; }
        location /loc { resil loc; try_files /index.html =404; }
        location /ghost { resil ghost; try_files /index.html =404; }
        location /waiter { resil waiter; try_files /index.html =404; }
    }""")
    n.start()
    check("resild is not reachable yet" in n.log(), "the workers start pending")
    # pending: admit admits everything, reject refuses everything, local
    # decides on each worker's own copy (burst 2 each, at most)
    a = collections.Counter(n.get("/adm")[0] for _ in range(20))
    r = [n.get("/rej") for _ in range(20)]
    loc = collections.Counter()
    for _ in range(40):
        s, h, _ = n.get("/loc")
        loc[(s, h.get("x-worker"))] += 1
    per_worker = collections.Counter(w for (s, w), k in loc.items() if s == 200 for _ in range(k))
    print("pending: admit %s, reject %s, local admitted per worker %s" %
          (dict(a), collections.Counter(x[0] for x in r), dict(per_worker)))
    check(a == {200: 20}, "policy.fallback = admit admits while resild is away: %s" % dict(a))
    check(all(x[0] == 503 for x in r), "policy.fallback = reject refuses while resild is away")
    check(all(v <= 2 for v in per_worker.values()) and sum(per_worker.values()) >= 2,
          "policy.fallback = local: each worker its own limit: %s" % dict(per_worker))
    check(n.get("/ghost")[0] == 200, "an undeclared name admits while pending")

    # resild starts: every worker follows it (the reject fallback gives way
    # to the shared breaker, CLOSED), and the shared limiter is one
    rd.start()
    run = [0, set()]

    def attached():
        s, h, _ = n.get("/rej")
        run[0] = run[0] + 1 if s == 200 else 0
        run[1].add(h.get("x-worker")) if s == 200 else run[1].clear()
        return run[0] >= 20 and len(run[1]) >= WORKERS

    eventually(attached, "every worker follows resild once it starts")
    adm = sum(n.get("/adm")[0] == 200 for _ in range(20))
    check(adm <= 1, "attached, the 1/m limit is one for every worker: %d admitted" % adm)
    rc, out = rd.ctl("list")
    check(all(p in out for p in ("adm", "rej", "loc")), "the declarations reached resild: " + out)

    # a name resild does not know, and a policy that waits (noticed by
    # each worker's tick within a second): admitted at once, said in the
    # error log, never asked
    rd.ctl("create", "waiter", "bulkhead.max = 1; bulkhead.wait = 5s")
    check(n.get("/ghost")[0] == 200, "a name resild does not know is admitted")
    eventually(lambda: n.get("/ghost") and 'policy "ghost" did not decide' in n.log(),
               "the error log names ghost")
    eventually(lambda: n.get("/waiter")[0] == 200 and
               'policy "waiter" waits for a permit' in n.log(), "the error log names waiter")
    s = [n.get("/waiter", conn=c)[0] for c in n.connections(4)[0]]
    check(s == [200] * 4, "a policy that waits is admitted without asking it: %s" % s)

    # resild restarts: the workers follow the new one (forced open there)
    rd.stop()
    rd.start()
    # a worker that finds the new resild declares its policies there
    eventually(lambda: n.get("/rej") and rd.ctl("force-open", "rej")[0] == 0,
               "the workers declare rej to the new resild")
    run = [0]

    def follows():
        s, h, _ = n.get("/rej")
        run[0] = run[0] + 1 if s == 503 else 0
        return run[0] >= 20

    eventually(follows, "every worker follows resild's restart")


def case_global(env):
    if not shutil.which("redis-server"):
        skip("no redis-server")
    rsock = env.path("redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", rsock, "--save", "",
                              "--appendonly", "no", "--dir", env.dir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    class Stop:
        def stop(self):
            redis.kill()
            redis.wait()

    env.procs.append(Stop())
    eventually(lambda: os.path.exists(rsock), "redis-server listens")
    rate, burst, hosts = 40, 5, []
    for h in ("A", "B"):
        rd = Resild(env, "resild" + h, ["--state-size", "16M", "--cluster-redis", "unix:" + rsock,
                                        "--cluster-host", "host" + h, "--cluster-name",
                                        "nginx-" + os.path.basename(env.dir),
                                        "--cluster-hosts", "2", "--cluster-fallback", "reject"])
        rd.start()
        n = Nginx(env, "nginx" + h, rd.sock, f"""
    resil_policy g "policy.scope = global; limit.rate = {rate}/s; limit.burst = {burst}";
    server {{
        listen 127.0.0.1:@PORT@ reuseport;
        location = /pid {{ return 200 "$pid"; }}
        location / {{ resil g outcome=none; try_files /index.html =404; }}
    }}""")
        n.start()
        hosts.append((rd, n))
    # each host admits once it holds a lease
    for rd, n in hosts:
        eventually(lambda: n.get("/")[0] == 200, "host %s admits" % rd.sock)
        eventually(lambda: "lease" in rd.ctl("show", "g")[1], "host %s holds a lease" % rd.sock)
    conns = [n.connections(4)[0] for _, n in hosts]
    res = [None, None]

    def run(i):
        res[i] = hammer(conns[i], "/", 3.0)

    t0 = time.monotonic()
    th = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    span = time.monotonic() - t0
    adm = [r[0][200] for r in res]
    # rate x T + each host's burst + one permit per host at the edges
    bound = rate * span + 2 * burst + 2
    print("global %d/s: hosts admitted %s in %.2f s (bound %.0f); refusals %s" %
          (rate, adm, span, bound, [r[0][429] for r in res]))
    check(sum(adm) <= bound, "the fleet admitted %d, over rate x T + bursts = %.0f" % (sum(adm), bound))
    check(all(a > 0 for a in adm), "each host admitted: %s" % adm)
    check(sum(adm) >= rate * 3.0 * 0.5, "the fleet used its rate: %s" % adm)


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    fn = globals().get("case_" + case)
    if not fn:
        print("usage: nginx_test.py conf|limit|upstream|pending|global")
        return 2
    env = Env()
    try:
        fn(env)
    finally:
        env.close()
    if failures:
        print("%d failed" % len(failures))
        return 1
    print("ok: " + case)
    return 0


if __name__ == "__main__":
    sys.exit(main())

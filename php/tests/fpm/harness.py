"""The real thing, in a temporary directory: resild on a private socket,
Debian's php-fpm8.2 with a pool of 4 static workers loading the extension
built in the tree, nginx in front of it (fastcgi), and an upstream (a
counting http.server) for the Guzzle tests. Each test file (test_*.py
beside this one) is one ctest; it prints "N passed, 0 failed" when every
check held and exits 1 at the first that did not.

Ports: 184xx (this suite's range), a block of 10 per test file, so that
files run by ctest -j never meet. Every process started here is stopped by
its pid at the end (Harness.close), whatever happened.
"""

import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHP_FPM = os.environ.get("PHP_FPM") or shutil.which("php-fpm8.2") or "/usr/sbin/php-fpm8.2"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def eventually(what, fn, within=10.0, every=0.05):
    """fn() until it returns something true, at most `within` seconds."""
    end = time.monotonic() + within
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("not within %g s: %s" % (within, what))
        time.sleep(every)


class Upstream:
    """A counting HTTP server: GET / answers `status` (503 while failing,
    200 when healthy); GET /retry-after/N answers 503 with Retry-After: N
    on its first call and 200 on the next; every request is counted."""

    def __init__(self, port):
        self.port = port
        self.status = 200
        self.count = 0
        self.seen = {}
        self.lock = threading.Lock()
        up = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with up.lock:
                    up.count += 1
                    n = up.seen[self.path] = up.seen.get(self.path, 0) + 1
                    status = up.status
                headers = {}
                if self.path.startswith("/retry-after/"):
                    status = 503 if n == 1 else 200
                    if status == 503:
                        headers["Retry-After"] = self.path.rsplit("/", 1)[1]
                body = b"upstream %d\n" % status
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def counted(self):
        with self.lock:
            return self.count

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Harness:
    def __init__(self, block, env=None):
        if not os.path.exists(PHP_FPM):
            skip("no php-fpm8.2 (apt-get install php8.2-fpm)")
        if not os.path.exists(NGINX):
            skip("no nginx (apt-get install nginx)")
        for var in ("RESILD", "RESILCTL", "RESIL_PHP_EXT", "SRC"):
            if not os.environ.get(var):
                skip("%s not set (run through ctest)" % var)
        self.port = 18400 + 10 * block
        self.tmp = tempfile.mkdtemp(prefix="resil-php-fpm.")
        self.sock = os.path.join(self.tmp, "control.sock")
        self.procs = {}
        self.env = env or {}
        self.checks = 0
        # php-fpm as nobody (opcache.preload then runs in the master
        # itself: as root PHP preloads in a child of its own)
        self.unprivileged = False
        os.mkdir(os.path.join(self.tmp, "conf"))

    # -- processes --

    def start_resild(self):
        log = open(os.path.join(self.tmp, "resild.log"), "ab")
        group = ["--socket-group", "nogroup"] if self.unprivileged else []
        self.procs["resild"] = subprocess.Popen(
            [os.environ["RESILD"], "--foreground", "--socket", self.sock, "--config",
             os.path.join(self.tmp, "conf"), "--state-size", "16M", "--policies", "256",
             "--clients", "64", *group], stdout=log, stderr=log)
        eventually("resild's socket", lambda: os.path.exists(self.sock))

    def start_fpm(self, preload=None):
        conf = os.path.join(self.tmp, "fpm.conf")
        env_lines = "".join('env[%s] = "%s"\n' % kv for kv in self.env.items())
        with open(conf, "w") as f:
            f.write(f"""[global]
pid = {self.tmp}/fpm.pid
error_log = {self.tmp}/fpm.log
daemonize = no
[pool]
user = root
group = root
listen = {self.tmp}/fpm.sock
listen.mode = 0666
pm = static
pm.max_children = 4
request_terminate_timeout = 120
catch_workers_output = yes
php_admin_value[resil.socket] = {self.sock}
php_admin_value[include_path] = .:/usr/share/php
env[RESIL_PHP_SRC] = {os.environ["SRC"]}/php/src
env[RESIL_TEST_TMP] = {self.tmp}
{env_lines}""")
        log = open(os.path.join(self.tmp, "fpm.out"), "ab")
        drop = []
        if self.unprivileged:
            os.chmod(self.tmp, 0o777)
            drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
        self.procs["fpm"] = subprocess.Popen(
            [*drop, PHP_FPM, "-n", "-R", "-F", "-y", conf, "-d", "extension=" + os.environ["RESIL_PHP_EXT"],
             "-d", "zend_extension=opcache", "-d", "opcache.enable=1", "-d", "display_errors=stderr",
             "-d", "log_errors=1", "-d", "resil.socket=" + self.sock,
             *(["-d", "opcache.preload=" + preload] if preload else [])],
            stdout=log, stderr=log)
        eventually("php-fpm's socket", lambda: os.path.exists(os.path.join(self.tmp, "fpm.sock")))
        eventually("4 workers", lambda: len(self.workers()) == 4)

    def start_nginx(self):
        conf = os.path.join(self.tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""user root;
worker_processes 1;
daemon off;
pid {self.tmp}/nginx.pid;
error_log {self.tmp}/nginx.err;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {self.tmp}/nginx_body;
    fastcgi_temp_path {self.tmp}/nginx_fastcgi;
    proxy_temp_path {self.tmp}/nginx_proxy;
    uwsgi_temp_path {self.tmp}/nginx_uwsgi;
    scgi_temp_path {self.tmp}/nginx_scgi;
    server {{
        listen 127.0.0.1:{self.port};
        root {HERE}/www;
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root/index.php;
            fastcgi_read_timeout 120s;
            fastcgi_pass unix:{self.tmp}/fpm.sock;
        }}
    }}
}}
""")
        self.procs["nginx"] = subprocess.Popen(
            [NGINX, "-p", self.tmp, "-c", conf, "-e", os.path.join(self.tmp, "nginx.err")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        eventually("nginx listening", self._listening)

    def _listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def workers(self):
        """The pids of the pool's workers (the children of the master)."""
        fpm = self.procs.get("fpm")
        if not fpm:
            return []
        try:
            with open("/proc/%d/task/%d/children" % (fpm.pid, fpm.pid)) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def close(self):
        for name in ("nginx", "fpm", "resild"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if os.environ.get("RESIL_TEST_KEEP"):
            print("kept", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def logs(self):
        for f in ("resild.log", "fpm.log", "fpm.out", "nginx.err"):
            p = os.path.join(self.tmp, f)
            if os.path.exists(p):
                with open(p, errors="replace") as fh:
                    tail = fh.read()[-3000:]
                print("---- %s ----\n%s" % (f, tail))

    # -- requests --

    def get(self, path, source="127.0.0.1", headers=None, timeout=30):
        """GET path through nginx from the address `source`: (status,
        headers as a dict of lower-case names, body)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                       source_address=(source, 0))
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            c.close()

    def get_json(self, path, **kw):
        status, headers, body = self.get(path, **kw)
        try:
            return status, headers, json.loads(body)
        except ValueError:
            raise AssertionError("%s: %d %r" % (path, status, body[:500]))

    def resilctl(self, *args):
        return subprocess.run([os.environ["RESILCTL"], "--socket", self.sock, *args],
                              capture_output=True, text=True, timeout=30)

    # -- checks --

    def check(self, cond, what):
        if not cond:
            raise AssertionError(what)
        self.checks += 1
        print("ok:", what)


def run(block, body, env=None, resild=True, preload=None):
    """Start everything (resild unless told not to; php-fpm with an
    opcache.preload script if given), run body(h), stop everything; exit
    0 with a passed line, 1 with the logs."""
    h = Harness(block, env)
    h.unprivileged = preload is not None
    try:
        if resild:
            h.start_resild()
        h.start_fpm(preload)
        h.start_nginx()
        body(h)
    except AssertionError as e:
        print("FAIL:", e)
        h.logs()
        print("%d passed, 1 failed" % h.checks)
        h.close()
        sys.exit(1)
    except BaseException:
        h.logs()
        h.close()
        raise
    h.close()
    print("%d passed, 0 failed" % h.checks)

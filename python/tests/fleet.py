"""What the real-process tests of the package share: a resild of the
test's own, a prefork server (gunicorn, uwsgi) serving djapp/, a
dependency that counts what reaches it, and a client cheap enough to send
hundreds of requests from threads on a busy machine."""

import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

import resil

HERE = os.path.dirname(os.path.abspath(__file__))
RESILD = os.environ.get("RESILD")
RESILCTL = os.environ.get("RESILCTL")


def eventually(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Answer:
    def __init__(self, status, headers, body):
        self.status_code, self.headers, self.text = status, headers, body

    def json(self):
        return json.loads(self.text)


def get(url, headers=None, local="127.0.0.1", timeout=120):
    """One GET on a fresh connection from address `local` (http.client:
    cheap enough to send hundreds from threads on a busy machine). The
    timeout only catches a server that never answers: a loaded machine may
    stall a worker for seconds."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout,
                                   source_address=(local, 0))
    try:
        c.request("GET", u.path, headers=headers or {})
        r = c.getresponse()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()},
                      r.read().decode())
    finally:
        c.close()


class Dependency(http.server.ThreadingHTTPServer):
    """A dependency answering `status` (500: down) on a thread of its own
    (close() stops it), counting what reaches it."""
    daemon_threads = True

    def __init__(self, status=500):
        self.hits = 0
        self.lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(h):
                with self.lock:
                    self.hits += 1
                h.send_response(status)
                h.send_header("Content-Length", "0")
                h.end_headers()

            def log_message(h, *a):
                pass
        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def close(self):
        self.shutdown()
        self.server_close()


def stop(proc, group=False):
    """SIGTERM, then SIGKILL (the whole process group: group=True) if it
    has not exited within 10 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()


class Resild:
    """resild on DIR/control.sock with its configuration in DIR/conf,
    started at once; stop() and start() again on the same socket."""

    def __init__(self, d):
        if not RESILD or not os.access(RESILD, os.X_OK):
            pytest.skip("RESILD (the resild binary) not set")
        self.d, self.sock, self.proc = d, str(d / "control.sock"), None
        (d / "conf").mkdir(exist_ok=True)
        self.start()

    def start(self):
        self.proc = subprocess.Popen([RESILD, "--foreground", "--socket", self.sock,
                                      "--config", str(self.d / "conf")],
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(self.d / "resild.log", "a"))

        def up():
            try:
                resil.open(self.sock, pending=False).close()
                return True
            except resil.Error:
                assert self.proc.poll() is None, open(self.d / "resild.log").read()
                return False
        eventually(up, what="resild answers")

    def stop(self):
        if self.proc is not None:
            stop(self.proc)
            self.proc = None

    def clients(self):
        """The processes with a client row in the daemon's segments."""
        out = subprocess.run([RESILCTL, "--socket", self.sock, "--json", "status"],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["clients"]


def serve(cmd, env, log, what, group=False):
    """Start a server of djapp/ (cwd: this folder) and return it once
    /ping answers (within 90 s: workers importing Django on a loaded
    machine), with its base URL as .base; group: in a session of its own
    (stop(group=True) can then kill its workers with it)."""
    port = free_port()
    cmd = [a.replace("{port}", str(port)) for a in cmd]
    proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL,
                            stderr=open(log, "w"), start_new_session=group)
    proc.base = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return get(proc.base + "/ping").status_code == 200
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"{what} exited: " + open(log).read()[-3000:])
            return False
    try:
        eventually(ready, 90, what + " answers")
    except BaseException:
        stop(proc, group)
        raise
    return proc


def djapp_env(daemon, d, **more):
    """The environment djapp reads: resild's socket, the files it uses,
    the package on PYTHONPATH."""
    env = dict(os.environ, RESIL_SOCKET=daemon.sock, DJANGO_SETTINGS_MODULE="djapp.settings",
               DJAPP_DEP_URL="http://127.0.0.1:9/", DJAPP_HOLD_FILE=str(d / "hold"),
               DJAPP_RELEASE_FILE=str(d / "release"),
               DJAPP_LIMIT="limit.rate = 100/60s; limit.burst = 100; limit.keys = 1024",
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(more)
    return env

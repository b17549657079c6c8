#!/usr/bin/env python3
"""Requests per second through Debian's nginx (2 workers) with resil's
module, with nginx's own limit_req, and with neither, in one run.

    /usr/bin/python3 bench/nginx_bench.py [--build DIR] [--seconds S] [--rounds N] [--write]

Four nginx instances run side by side (each with -p in a temporary
directory, 2 workers, a private resild for the module), answering every
request from the content phase (empty_gif: no file, no upstream), so the
decision is the only thing that differs:

  neither      nothing decides;
  limit_req    limit_req_zone $binary_remote_addr, a rate and a burst no
               client reaches (every request admitted): the zone's mutex,
               its tree lookup;
  resil        resil per_ip key=$binary_remote_addr outcome=none: the
               same limit in resil (keyed, every request admitted);
  resil held   resil with a breaker, outcome=upstream: the permit held in
               the request's context until its end (the pool cleanup).

wrk (2 threads, 32 keep-alive connections) runs against each in turn,
round after round, so that what else the machine does falls on every
variant alike; each variant's figure is the median of its rounds, with
min .. max. Besides requests/s, the workers' CPU time per request
(utime + stime of the master's children, from /proc, over the requests
wrk counted): a decision's cost is what its variant adds to it over
"neither", the figure the machine's other load moves least.
The target: resil costs at most what limit_req costs. Under callgrind,
each variant's instructions per request, and where a resil variant's go
(the module, libresil, nginx's calls). --write puts the tables in
bench/nginx.md (which bench/report.py includes in BENCHMARKS.md) and in
BENCHMARKS.md's section "nginx".
"""
import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchdoc import put_section

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.path.join(top, "build"))
ap.add_argument("--seconds", type=int, default=5)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--write", action="store_true")
ap.add_argument("--requests", type=int, default=4000,
                help="requests per variant under callgrind (0: none)")
args = ap.parse_args()

NGINX = "/usr/sbin/nginx"
module = os.path.join(args.build, "nginx/build/ngx_http_resil_module.so")
libdir = os.path.join(args.build, "client")
resild = os.path.join(args.build, "daemon/resild")
resilctl = os.path.join(args.build, "client/resilctl")
for need in (NGINX, module, resild):
    if not os.path.exists(need):
        sys.exit("missing %s (nginx-core, nginx-dev and a build with the module)" % need)
if not shutil.which("wrk"):
    sys.exit("missing wrk (apt-get install wrk)")

VARIANTS = [
    ("neither", "", "empty_gif;"),
    ("limit_req",
     "limit_req_zone $binary_remote_addr zone=ip:10m rate=1000000r/s;",
     "limit_req zone=ip burst=1000000 nodelay; empty_gif;"),
    ("resil",
     'resil_policy per_ip "limit.rate = 1000000/s; limit.burst = 1000000; limit.keys = 1000";',
     "resil per_ip key=$binary_remote_addr outcome=none; empty_gif;"),
    ("resil held",
     'resil_policy brk "breaker.window = count:100";',
     "resil brk; empty_gif;"),
]

tmp = tempfile.mkdtemp(prefix="resil-nginx-bench-")
procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(fn, what):
    end = time.monotonic() + 10
    while not fn():
        if time.monotonic() > end:
            sys.exit("no " + what)
        time.sleep(0.05)


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


def nginx(d, what, http_conf, loc, sock, head, connections, run):
    """An nginx in the directory d (made here) for one variant: its
    http-level lines and its location, resil's module on sock, head (the
    process model) and connections per worker; run(conf) starts it and
    returns its Popen. Returns (port, Popen) once it accepts connections."""
    os.makedirs(os.path.join(d, "tmp"))
    port = free_port()
    conf = os.path.join(d, "nginx.conf")
    user = "user root;" if os.getuid() == 0 else ""
    with open(conf, "w") as f:
        f.write(f"""load_module {module};
{head}
pid {d}/nginx.pid;
error_log {d}/error.log warn;
{user}
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    resil_socket {sock};
    {http_conf}
    server {{
        listen 127.0.0.1:{port};
        location / {{ {loc} }}
    }}
}}
""")
    p = run(conf)
    procs.append(p)
    wait_for(lambda: listening(port), what)
    return port, p


def start():
    sock = os.path.join(tmp, "resild.sock")
    os.makedirs(os.path.join(tmp, "conf.d"))
    procs.append(subprocess.Popen([resild, "--foreground", "--socket", sock, "--config",
                                   os.path.join(tmp, "conf.d")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_for(lambda: subprocess.run([resilctl, "--socket", sock, "list"],
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL).returncode == 0, "resild")
    ports = {}
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    for i, (name, http_conf, loc) in enumerate(VARIANTS):
        d = os.path.join(tmp, "n%d" % i)
        port, p = nginx(d, "nginx for " + name, http_conf, loc, sock, "worker_processes 2;", 1024,
                        lambda conf: subprocess.Popen([NGINX, "-p", d, "-c", conf,
                                                       "-g", "daemon off;"],
                                                      env=env, stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL))
        ports[name] = (port, p.pid)
    return ports


TICK = os.sysconf("SC_CLK_TCK")


def workers_cpu(master):
    """CPU seconds (user + system) the master's children have used."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(st[1]) == master:  # field 4, ppid
            total += int(st[11]) + int(st[12])  # fields 14, 15: utime, stime
    return total / TICK


def wrk(port, seconds, master=None):
    """requests/s, and the workers' CPU microseconds per request."""
    cpu0 = workers_cpu(master) if master else 0
    out = subprocess.run(["wrk", "-t2", "-c32", "-d%ds" % seconds, "http://127.0.0.1:%d/" % port],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    cpu = (workers_cpu(master) - cpu0) if master else 0
    m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if not m or not n or bad:
        sys.exit("wrk: " + out)
    return float(m.group(1)), cpu * 1e6 / int(n.group(1))


def instructions(i, name, http_conf, loc, sock, n):
    """Instructions per request of one nginx process (master_process off)
    under callgrind, counted inside ngx_process_events_and_timers (the
    event loop: reading, deciding, answering), over n keep-alive requests:
    what the machine's load does not change at all."""
    d = os.path.join(tmp, "cg%d" % i)
    out = os.path.join(d, "cg.out")
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    port, p = nginx(d, "nginx under callgrind for " + name, http_conf, loc, sock,
                    "master_process off;\ndaemon off;", 64,
                    lambda conf: subprocess.Popen(
                        ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                         "--toggle-collect=ngx_process_events_and_timers",
                         "--callgrind-out-file=" + out, NGINX, "-p", d, "-c", conf],
                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(n):
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit("%s answered %d under callgrind" % (name, r.status))
    c.close()
    # SIGQUIT, again until it exits: one that lands between nginx's look
    # at its flags and its epoll_wait (a window valgrind widens) leaves it
    # asleep until an event, and with no timer set none comes
    for _ in range(30):
        p.send_signal(signal.SIGQUIT)
        try:
            p.wait(2)
            break
        except subprocess.TimeoutExpired:
            pass
    else:
        p.kill()
        sys.exit("%s under callgrind did not exit" % name)
    with open(out) as f:
        ir = [int(l.split()[1]) for l in f if l.startswith(("summary:", "totals:"))]
    return ir[0] / n, where(out, n)


def where(path, n):
    """Where a variant's instructions go, per request, from callgrind's
    profile: the module's own code (self cost of ngx_http_resil_module.so),
    what it calls in libresil (inclusive: the decision and the release),
    what it calls in nginx and libc (variables, pool allocations), and the
    decision clock's re-anchoring (resil_tsc_anchor, inclusive: under
    valgrind the TSC's extrapolation never holds, see shm/clock.c, so every
    reading takes it; natively a reading extrapolates in line)."""
    names, cur_ob, cur_fn, call_ob, call_fn, pos = {}, None, None, None, None, [0, 0]
    sums = {"module": 0, "libresil": 0, "nginx": 0, "anchor": 0}
    in_call = False

    def is_module(ob):
        return ob is not None and ob.endswith("ngx_http_resil_module.so")

    with open(path) as f:
        for line in f:
            m = re.match(r"^(c?)(ob|fn|fl|fi|fe)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                c, kind, i, name = m.groups()
                kind = "fl" if kind in ("fi", "fe") else kind
                if name:
                    names[(kind, i)] = name
                name = names.get((kind, i))
                if kind == "ob":
                    if c:
                        call_ob = name
                    else:
                        cur_ob = name
                elif kind == "fn":
                    if c:
                        call_fn = name
                    else:
                        cur_fn, call_ob = name, None
                continue
            if line.startswith("calls="):
                in_call = True
                continue
            if not line[:1] or line[0] not in "0123456789+-*":
                continue
            parts = line.split()  # position(s), then Ir (the one event)
            if len(parts) < 2:
                in_call = False
                continue
            cost = int(parts[-1])
            if in_call:
                in_call = False
                target, call_ob = call_ob or cur_ob, None
                if call_fn and call_fn.startswith("resil_tsc_anchor"):
                    sums["anchor"] += cost
                if is_module(cur_ob) and not is_module(target):
                    sums["libresil" if target and "libresil" in target else "nginx"] += cost
            elif is_module(cur_ob):
                sums["module"] += cost
    return {k: v / n for k, v in sums.items()}


def main():
    ports = start()
    for name, (port, _) in ports.items():
        wrk(port, 1)  # warm: connections, the policies declared, the workers attached
    rps = {name: [] for name, _, _ in VARIANTS}
    cpu = {name: [] for name, _, _ in VARIANTS}
    for r in range(args.rounds):
        for name, _, _ in VARIANTS:
            v, c = wrk(ports[name][0], args.seconds, ports[name][1])
            rps[name].append(v)
            cpu[name].append(c)
        print("round %d: %s" % (r + 1, ", ".join("%s %.0f/s %.2f us" % (n, rps[n][-1], cpu[n][-1])
                                                  for n in rps)), flush=True)
    instr, parts = {}, {}
    if args.requests and shutil.which("valgrind"):
        sock = os.path.join(tmp, "resild.sock")
        for i, (name, http_, loc) in enumerate(VARIANTS):
            instr[name], parts[name] = instructions(i, name, http_, loc, sock, args.requests)
            print("%s: %.0f instructions a request" % (name, instr[name]), flush=True)
    load = os.getloadavg()[0]
    base = statistics.median(cpu["neither"])
    lines = ["## nginx", "",
             "`/usr/bin/python3 bench/nginx_bench.py --write` (Debian's nginx %s, 2 workers, "
             "empty_gif; wrk -t2 -c32 keep-alive, %d s per run, %d rounds interleaved; load "
             "average %.2f at the end, %s). Requests/s and the workers' CPU time per request "
             "(user + system, from /proc: what the machine's other load changes least), each the "
             "median of the rounds (min .. max); a decision's cost is what its variant adds to "
             "the CPU time of a request over \"neither\"." %
             (nginx_version(), args.seconds, args.rounds, load,
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
             "", "| variant | requests/s | min .. max | CPU us/request | min .. max | cost |",
             "|---|---:|---|---:|---|---:|"]
    cost = {}
    for name, _, _ in VARIANTS:
        v, c = rps[name], cpu[name]
        cost[name] = (statistics.median(c) - base) * 1000
        lines.append("| %s | %.0f | %.0f .. %.0f | %.2f | %.2f .. %.2f | %s |" %
                     (name, statistics.median(v), min(v), max(v), statistics.median(c), min(c),
                      max(c), "-" if name == "neither" else "%.0f ns" % cost[name]))
    if instr:
        lines += ["", "Instructions per request of one nginx process under callgrind, counted in "
                  "its event loop (ngx_process_events_and_timers) over %d keep-alive requests "
                  "on one connection, and what each variant adds to \"neither\":" % args.requests,
                  "", "| variant | instructions/request | added |", "|---|---:|---:|"]
        for name, _, _ in VARIANTS:
            lines.append("| %s | %.0f | %s |" % (name, instr[name], "-" if name == "neither"
                                                 else "%+.0f" % (instr[name] - instr["neither"])))
        added = {n: instr[n] - instr["neither"] for n in instr}
        lines += ["", "Where a resil variant's added instructions go, per request (from the same "
                  "profiles): the module's own code; what it calls in libresil (the decision "
                  "and the release), of which the decision clock's re-anchoring "
                  "(resil_tsc_anchor: under valgrind the TSC's extrapolation never holds, so "
                  "every reading of the clock takes it, where natively a reading extrapolates "
                  "in line); what it calls in nginx and libc (a key variable, the held permits' "
                  "context and pool cleanup); and the rest, outside the module: nginx calling "
                  "one more phase handler (limit_req's, compiled into nginx, is called in "
                  "\"neither\" too) and the timer tree holding the module's once-a-second "
                  "tick (one more node where the bench's one connection keeps one):",
                  "", "| variant | added | module | libresil | of which clock re-anchor "
                  "| nginx, libc | rest |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name in ("resil", "resil held"):
            w = parts[name]
            rest = added[name] - w["module"] - w["libresil"] - w["nginx"]
            lines.append("| %s | %+.0f | %.0f | %.0f | %.0f | %.0f | %.0f |" %
                         (name, added[name], w["module"], w["libresil"], w["anchor"],
                          w["nginx"], rest))
        verdict = "met" if added["resil"] <= added["limit_req"] else "not met"
        lines += ["", "- The target, resil costs at most what limit_req costs: in instructions, "
                  "resil's keyed limit adds %.0f a request against limit_req's %.0f: **%s**." %
                  (added["resil"], added["limit_req"], verdict)]
    if not instr:
        lines.append("")
    a, b = rps["resil"], rps["limit_req"]
    overlap = max(min(a), min(b)) <= min(max(a), max(b))
    lines += ["- In requests/s, resil %.0f against limit_req %.0f (%s); in CPU time per request, "
              "%.0f ns against %.0f ns over \"neither\"." %
              (statistics.median(a), statistics.median(b),
               "their ranges overlap: within what the machine's other load moves"
               if overlap else "ranges apart", cost["resil"], cost["limit_req"]), ""]
    if not instr:
        verdict = "met" if cost["resil"] <= cost["limit_req"] else "not met"
        lines += ["- The target, in CPU time (no callgrind here): **%s**." % verdict, ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        with open(os.path.join(here, "nginx.md"), "w") as f:
            f.write(text)
        path = os.path.join(top, "BENCHMARKS.md")
        put_section(path, "nginx", text, before="Figures behind the design comments")
        print("wrote", path)


def nginx_version():
    out = subprocess.run([NGINX, "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True).stdout
    m = re.search(r"nginx/([0-9.]+)", out)
    return m.group(1) if m else "?"


try:
    main()
finally:
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if os.environ.get("RESIL_BENCH_KEEP"):
        print("kept", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)

#!/usr/bin/env bash
# label: integration
# resilctl for operators, against a private resild and a real client
# process that opens a breaker and holds bulkhead permits:
#   - configuration errors give the nearest key, ask for a unit, name the
#     pair (never "line 1"), and come as JSON on stderr with --json;
#   - show says why: an open breaker's since (past) and next probe (in the
#     future), the window's failure rate against its threshold, a
#     half-open breaker's probes in flight, the bulkhead's permits in use,
#     the limiter's permits available now, the retry budget's tokens;
#   - watch prints UTC times, the rate in %, the pid of the process that
#     opened the breaker, and after a daemon restart says it reconnects
#     and prints a later event;
#   - every command's --json parses and has the shape resilctl(1) states.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${RESILD:?}" "${RESILCTL:?}" "${SRC:?}" "${BIN:?}"
# the system's python3 when there is one (a version manager's shim costs
# seconds a call on a loaded machine); every JSON check runs in one call
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "no python3: skipped"; exit 77; }
command -v cc >/dev/null || { echo "no cc: skipped"; exit 77; }
tmp=$(mktemp -d)
pid= wpid= jpid= dpid=
cleanup() {
	exec 3>&- 2>/dev/null || true
	for p in $wpid $jpid $dpid $pid; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$tmp/resild.log" ] && tail -20 "$tmp/resild.log"
	exit 1
}
ctl() { "$RESILCTL" --socket "$tmp/sock" "$@"; }
eventually() { # poll a command every 0.1 s for up to 10 s
	for _ in $(seq 100); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}
start_daemon() {
	"$RESILD" --foreground --socket "$tmp/sock" --config "$tmp/conf" 2>>"$tmp/resild.log" &
	pid=$!
	eventually ctl list >/dev/null 2>&1 || fail "resild did not answer within 10 s"
}
# jcheck FILE 'assertions on d' (FILE's JSON; now: the time FILE was
# written, in Unix ms): collected, run together at the end by check_all
checks=
jcheck() {
	local n=${#checks}
	printf '%s' "$(date +%s%3N)" >"$1.now"
	checks+="
def check_$n():
    d = json.load(open('$1'))
    now = int(open('$1.now').read())
$(sed 's/^/    /' <<<"$2")
check('$1', check_$n)
"
}
check_all() {
	"$py" -c "import json, sys
bad = 0
def check(f, fn):
    global bad
    try:
        fn()
    except Exception as e:
        print('FAIL: %s: %r: %s' % (f, e, open(f).read()[:2000]))
        bad = 1
$checks
sys.exit(bad)" || fail "the JSON checks above"
}

mkdir "$tmp/conf"
start_daemon

# ---- configuration errors ----
set +e
err=$(ctl create pay 'breaker.windwo = count:10' 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" = 1 ] || fail "unknown key: exit $rc"
grep -qF "unknown key 'breaker.windwo': did you mean breaker.window?" <<<"$err" ||
	fail "unknown key said: $err"
err=$(ctl create pay 'breaker.wait = 30' 2>&1 >/dev/null || true)
grep -qF "'30' is not a duration: add a unit, e.g. 30s" <<<"$err" || fail "duration said: $err"
err=$(ctl create pay 'bulkhead.max = 3; breaker.window = x' 2>&1 >/dev/null || true)
grep -qF "in 'breaker.window = x'" <<<"$err" || fail "the pair is not named: $err"
grep -q "line 1" <<<"$err" && fail "a one-line configuration said line 1: $err"
# --json: the error on stderr as an object, nothing on stdout
set +e
ctl --json create pay 'breaker.windwo = count:10' >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "--json error: exit $rc"
[ ! -s "$tmp/out" ] || fail "--json error wrote on stdout: $(cat "$tmp/out")"
jcheck "$tmp/err" 'assert d["errno"] == 22 and d["error"] == "EINVAL", d
assert "did you mean breaker.window?" in d["message"], d'
ctl --json show nosuch >"$tmp/out" 2>"$tmp/err2" && fail "show of an unknown policy succeeded"
[ ! -s "$tmp/out" ] || fail "--json error wrote on stdout: $(cat "$tmp/out")"
jcheck "$tmp/err2" 'assert d["error"] == "ENOENT" and d["errno"] == 2 and "nosuch" in d["message"], d'
# top's errors too: a bad option, and a daemon that is not there
set +e
ctl top --sort nosuch --json >"$tmp/out" 2>"$tmp/err4"
rc=$?
"$RESILCTL" --socket "$tmp/nosuch.sock" --json top >"$tmp/out5" 2>"$tmp/err5"
rc5=$?
set -e
[ "$rc" = 2 ] && [ "$rc5" = 1 ] || fail "top --json errors: exit $rc and $rc5"
jcheck "$tmp/err4" 'assert d["error"] == "EINVAL" and "--sort" in d["message"], d'
jcheck "$tmp/err5" 'assert d["error"] == "ENOENT" and "nosuch.sock" in d["message"], d'
set +e
ctl --json frobnicate >"$tmp/out" 2>"$tmp/err3"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--json usage error: exit $rc"
jcheck "$tmp/err3" 'assert d["error"] == "EINVAL" and "frobnicate" in d["message"], d'

# ---- a client process opens pay's breaker and holds two of pool's permits ----
ctl create pay 'breaker.window = count:10; breaker.min_calls = 5; breaker.failure_rate = 50;
breaker.wait = 1m' >/dev/null || fail "create pay"
ctl create pool 'bulkhead.max = 4; limit.rate = 1/h; limit.burst = 10' >/dev/null ||
	fail "create pool"
ctl create probe 'breaker.window = consecutive:1; breaker.wait = 100ms; breaker.half_open_calls = 2;
retry.budget = aws:500' >/dev/null || fail "create probe"
cat >"$tmp/drive.c" <<'EOF'
#include <resil.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	resil_t *r;
	resil_policy_t *p, *q, *pr;
	resil_permit_t pm, h1, h2, probe;
	char c;
	int i;

	if (argc != 2 || resil_open(&r, argv[1]) < 0)
		return 1;
	if (resil_policy(r, "pay", &p) < 0 || resil_policy(r, "pool", &q) < 0 ||
	    resil_policy(r, "probe", &pr) < 0)
		return 1;
	for (int i = 0; i < 10; i++)
		if (resil_acquire(p, &pm) == RESIL_ADMIT)
			resil_release(p, &pm, RESIL_FAILURE);
	if (resil_acquire(q, &h1) != RESIL_ADMIT || resil_acquire(q, &h2) != RESIL_ADMIT)
		return 2;
	/* probe: one failure opens it; the first call after its 100 ms wait is
	 * a half-open probe, held until stdin closes (10 s at most) */
	if (resil_acquire(pr, &pm) != RESIL_ADMIT)
		return 3;
	resil_release(pr, &pm, RESIL_FAILURE);
	for (i = 0; resil_acquire(pr, &probe) != RESIL_ADMIT; i++) {
		if (i == 1000)
			return 4;
		usleep(10000);
	}
	printf("held\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	resil_release(q, &h1, RESIL_SUCCESS);
	resil_release(q, &h2, RESIL_SUCCESS);
	resil_release(pr, &probe, RESIL_SUCCESS);
	resil_close(r);
	return 0;
}
EOF
# a sanitized build's library wants its runtime first: built the same way
san=
ldd "$BIN/client/libresil.so" 2>/dev/null | grep -q libasan && san=-fsanitize=address,undefined
cc -std=gnu11 $san -I"$SRC/client" "$tmp/drive.c" -o "$tmp/drive" -L"$BIN/client" -lresil \
	-Wl,-rpath,"$BIN/client" || fail "the client program did not build"

# (not through ctl: $! must be resilctl's own pid, for kill)
"$RESILCTL" --socket "$tmp/sock" watch >"$tmp/watch.txt" 2>"$tmp/watch.err" &
wpid=$!
"$RESILCTL" --socket "$tmp/sock" --json watch pay marker >"$tmp/watch.json" 2>/dev/null &
jpid=$!
# both subscribed once a configuration event reaches both (re-defined
# until it does: a subscription is not there the moment watch starts)
n=0
both_see_marker() {
	n=$((n + 1))
	ctl apply marker "bulkhead.max = $n" >/dev/null
	grep -q " marker config" "$tmp/watch.txt" && grep -q '"policy":"marker"' "$tmp/watch.json"
}
eventually both_see_marker ||
	fail "watch printed nothing: $(cat "$tmp/watch.txt" "$tmp/watch.err" "$tmp/watch.json")"

mkfifo "$tmp/in"
"$tmp/drive" "$tmp/sock" <"$tmp/in" >"$tmp/drive.out" &
dpid=$!
exec 3>"$tmp/in"
eventually grep -q held "$tmp/drive.out" || fail "the client did not open the breaker and hold permits"

# ---- show: why ----
ctl show pay >"$tmp/show.txt"
grep -qE "^  breaker +open since [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z" \
	"$tmp/show.txt" || fail "show: no open since: $(cat "$tmp/show.txt")"
grep -qE "^  next probe +[0-9T:.-]+Z \(in [0-9.]+ (s|ms)\)" "$tmp/show.txt" ||
	fail "show: no next probe in the future: $(cat "$tmp/show.txt")"
grep -qE "^  failure rate 100\.00% \(opens at 50\.00%\)" "$tmp/show.txt" ||
	fail "show: no failure rate against its threshold: $(cat "$tmp/show.txt")"
ctl --json show pay >"$tmp/pay.json"
jcheck "$tmp/pay.json" '
b = d["why"]["breaker"]
assert d["state"] == "open" and b["state"] == "open", d
assert now - 60000 < b["since_unix_ms"] <= now + 1000, (b, now)
assert b["next_probe_unix_ms"] > now, (b, now)
assert 0 < b["next_probe_in_ms"] <= 60000, b
assert b["since"].endswith("Z") and b["next_probe"].endswith("Z"), b
w = b["window"]
assert w["calls"] == 5 and w["failures"] == 5 and w["min_calls"] == 5, w
assert w["failure_rate_pct"] == 100 and w["failure_threshold_pct"] == 50, w
c = d["config"]
assert c["breaker.window"] == "count:10" and c["breaker.wait"] == "1m", c
assert c["breaker.failure_rate"] == 50 and c["breaker.min_calls"] == 5, c
assert isinstance(d["stats"]["calls"], int), d["stats"]' 
ctl show pool | grep -qE "^  bulkhead +2 in use of 4, 0 waiting" ||
	fail "show: bulkhead in use: $(ctl show pool)"
ctl show pool | grep -qE "^  limiter +8 permits pass now" ||
	fail "show: limiter available: $(ctl show pool)"
ctl --json show pool >"$tmp/pool.json"
jcheck "$tmp/pool.json" '
w = d["why"]
assert w["bulkhead"] == {"in_use": 2, "max": 4, "waiters": 0}, w
assert w["limit"]["available"] == 8, w
assert "breaker" not in w, w'
ctl show probe | grep -qE "^  probes +1 in flight, 0 of 2 answered" ||
	fail "show: probes in flight: $(ctl show probe)"
ctl show probe | grep -qE "^  retry budget 500\.000 tokens" ||
	fail "show: budget tokens: $(ctl show probe)"
ctl --json show probe >"$tmp/probe.json"
jcheck "$tmp/probe.json" '
b = d["why"]["breaker"]
assert d["state"] == "half-open" and b["probes"] == {"in_flight": 1, "answered": 0, "max": 2}, b
assert "next_probe" not in b, b
assert d["why"]["budget"] == {"tokens": 500.0}, d["why"]
assert d["config"]["retry.budget"] == "aws:500", d["config"]' 

# ---- watch: UTC time, %, the pid of the process that opened the breaker
# (a client's report: its pid and uid as resild knows them) ----
line=$(grep " pay transition closed -> open" "$tmp/watch.txt" || true)
[ -n "$line" ] || fail "watch: no transition: $(cat "$tmp/watch.txt")"
grep -qE "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z pay transition closed -> open \(failure rate 100\.00%\) \[reported by client pid $dpid uid $(id -u)\] seq [0-9]+$" <<<"$line" ||
	fail "watch line (pid $dpid): $line"
eventually grep -q '"to":"open"' "$tmp/watch.json" || fail "watch --json: no transition"
grep '"to":"open"' "$tmp/watch.json" | head -1 >"$tmp/event.json"
jcheck "$tmp/event.json" "
assert d['pid'] == $dpid and d['policy'] == 'pay' and d['type'] == 'transition', d
assert d['source'] == 'client' and d['uid'] == $(id -u), d
assert d['value'] == 100 and d['unit'] == '%' and d['reason'] == 'failure rate', d
assert d['time'].endswith('Z') and abs(d['time_unix_ms'] - now) < 120000, d"

exec 3>&-
wait "$dpid" || fail "the client exited $?"
dpid=

# ---- every command's --json ----
ctl --json list >"$tmp/list.json"
jcheck "$tmp/list.json" '
assert isinstance(d, list) and {p["name"] for p in d} >= {"pay", "pool", "marker"}, d
assert all(isinstance(p["slot"], int) and p["state"] for p in d), d'
i=0
for c in "create j1 bulkhead.max=2" "apply j1 bulkhead.max=3" "update j1 bulkhead.max=4" \
	"force-open pay" "force-closed pay" "disable pay" "reset pay" "delete j1"; do
	i=$((i + 1))
	# shellcheck disable=SC2086
	ctl --json $c >"$tmp/cmd$i.json"
	jcheck "$tmp/cmd$i.json" "assert d['ok'] is True and d['policy'] == '${c#* }'.split()[0], d"
done
ctl --json top --iterations 1 --interval 100 </dev/null >"$tmp/top.json"
jcheck "$tmp/top.json" '
assert {p["name"] for p in d["policies"]} >= {"pay", "pool"}, d'
ctl --json metrics >"$tmp/metrics.json"
jcheck "$tmp/metrics.json" '
s = d["samples"]
assert len(s) > 10, s
for x in s:
    assert isinstance(x["name"], str) and isinstance(x["labels"], dict), x
    assert isinstance(x["value"], (int, float)) or x["value"] in ("+Inf", "-Inf", "NaN"), x
assert any(x["name"] == "resil_bulkhead_max" and x["labels"] == {"policy": "pool"}
           and x["value"] == 4 for x in s), s' 

# ---- watch across a daemon restart ----
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
eventually grep -q "closed the connection: reconnecting" "$tmp/watch.err" ||
	fail "watch did not notice the daemon leave: $(cat "$tmp/watch.err")"
kill -0 "$wpid" || fail "watch exited with the daemon"
start_daemon
eventually grep -q "is back: watching again" "$tmp/watch.err" ||
	fail "watch did not reconnect: $(cat "$tmp/watch.err")"
ctl create later 'bulkhead.max = 1' >/dev/null
eventually grep -qE "Z later config created" "$tmp/watch.txt" ||
	fail "watch printed no event after the restart: $(cat "$tmp/watch.txt")"
kill "$wpid"
wait "$wpid" || fail "watch exited $? on SIGTERM"
wpid=
"$py" -c 'import json, sys
[json.loads(l) for l in open(sys.argv[1])]' "$tmp/watch.json" || fail "watch --json lines"
check_all
echo "errors hint and name the pair; show says why; watch has UTC, %, pid, and reconnects; --json parses"

#!/usr/bin/env bash
# label: integration
# resild's settings file and what an operator asks the daemon:
#   - [daemon] KEY = VALUE in DIR/resild.conf (or --options FILE) sets
#     what the flags set; a flag wins over the file; the file is not read
#     as policies;
#   - a bad line (unknown key, bad value, outside [daemon], a key in the
#     a [cluster] key, a key twice) is FILE:LINE and exit 78, in
#     --check-config and at start; a missing configuration directory or
#     --options file is an error naming it;
#   - `resilctl reload` prints the first error with FILE:LINE and exits 1
#     when the reload did not apply (the daemon serves on, the previous
#     policies run), 0 when it did;
#   - `resilctl status` (text and --json) shows the settings file, the
#     last reload's result and a metrics listener that could not bind,
#     which is logged and not an exit.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${RESILD:?}" "${RESILCTL:?}"
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$tmp/resild.log" ] && tail -20 "$tmp/resild.log"
	exit 1
}
ctl() { "$RESILCTL" --socket "$tmp/sock" "$@"; }
conf=$tmp/conf
mkdir "$conf"

# expect STATUS PATTERN CMD...: the command exits STATUS and prints PATTERN
expect() {
	local want=$1 pat=$2 out rc
	shift 2
	set +e
	out=$("$@" 2>&1)
	rc=$?
	set -e
	[ "$rc" = "$want" ] || fail "$*: exit $rc, want $want ($out)"
	grep -qE -- "$pat" <<<"$out" || fail "$*: no \"$pat\" in: $out"
	echo "  exit $rc: $(head -n1 <<<"$out")"
}

echo "== errors in the settings file: FILE:LINE, exit 78"
bad() { printf "$1" >"$conf/resild.conf"; expect 78 "$conf/resild.conf:$2: $3" "$RESILD" --check-config --config "$conf"; }
bad '[daemon]\npolicies = 64\nstate_sise = 16M\n' 3 'unknown setting state_sise \(known: socket, '
bad '# comment\n[daemon]\nstate_size = 16Q\n' 3 'state_size = 16Q: expected a size like 64M'
bad 'policies = 64\n' 1 '"policies" outside the \[daemon\] section'
bad '[daemon]\n[cluster]\npeers = a,b\n' 3 'unknown setting cluster_peers'
bad '[daemon]\ncluster_name = x\n' 2 'cluster_name goes in \[cluster\], as name'
bad '[cluster]\ninterval = 1ms\n' 2 'cluster_interval = 1ms: expected a duration from 10ms to 60s'
bad '[daemon]\npolicies = 64\npolicies = 65\n' 3 'policies given twice \(first on line 2\)'
bad '[deamon]\n' 1 'unknown section \[deamon\]'
bad '[daemon]\nidle_timeout = 30\n' 2 'idle_timeout = 30: expected a duration'
bad '[daemon]\nadmin_group = no-such-group-here\n' 2 'admin_group = no-such-group-here: no such group'
bad '[daemon]\nverbose = maybe\n' 2 'verbose = maybe: expected yes or no'
# a start on it: 78 too, before any socket exists
expect 78 "$conf/resild.conf:2: verbose = maybe" "$RESILD" --foreground --config "$conf" --socket "$tmp/sock"
[ ! -e "$tmp/sock" ] || fail "a start on a bad settings file created the socket"
# the file is bad even where a flag would override it: the file is checked whole
bad '[daemon]\nstate_size = 16Q\n' 2 'state_size = 16Q'

echo "== missing directory and file: named"
expect 78 "configuration directory $tmp/nowhere does not exist" "$RESILD" --check-config --config "$tmp/nowhere"
expect 78 "configuration directory $tmp/nowhere does not exist" "$RESILD" --foreground --config "$tmp/nowhere" --socket "$tmp/sock"
expect 78 "options file $tmp/none.conf does not exist" "$RESILD" --check-config --config "$conf" --options "$tmp/none.conf"
# config_dir from the file names the directory in the message too
printf '[daemon]\nconfig_dir = %s\n' "$tmp/gone" >"$tmp/opts.conf"
expect 78 "configuration directory $tmp/gone does not exist" "$RESILD" --check-config --options "$tmp/opts.conf"

echo "== precedence: the file, then the flags over it"
cat >"$conf/resild.conf" <<C
# settings, not policies: never read as a policy file
[daemon]
policies = 100          # slots
state_size = 8M
idle_timeout = 5m
metrics_listen = 192.0.2.1:9
[cluster]
C
printf '[policy pay]\nbulkhead.max = 4\n' >"$conf/10-pay.conf"
expect 0 "$conf/resild.conf: settings OK, 4 given" "$RESILD" --check-config --config "$conf"
echo "== --cluster-redis and --cluster-tls-*: a bad value is named, exit 78"
cl() { expect 78 "$1" "$RESILD" --foreground --config "$conf" --socket "$tmp/sock" --cluster-host x "${@:2}"; }
cl 'sentinel://h:99999/m: expected sentinel://HOST' --cluster-redis sentinel://h:99999/m
cl 'sentinel://h:1: expected sentinel://HOST' --cluster-redis sentinel://h:1
cl 'sentinel://h/m/x: the database is not a number' --cluster-redis sentinel://h/m/x
cl 'rediss://: expected a host name and a port 1..65535' --cluster-redis rediss://
cl '--cluster-redis: no credentials in the URL' --cluster-redis redis://u:p@h
cl "--cluster-tls-ca $tmp/none.pem: cannot read: No such file or directory" --cluster-redis rediss://h --cluster-tls-ca "$tmp/none.pem"
cl '--cluster-tls-cert and --cluster-tls-key go together' --cluster-redis redis://h --cluster-tls-cert "$tmp/none.pem"
cl '--cluster-tls-\*: not over a unix socket' --cluster-redis unix:/x --cluster-tls-server-name h
"$RESILD" --foreground --socket "$tmp/sock" --config "$conf" --policies 200 2>"$tmp/resild.log" &
pid=$!
for _ in $(seq 100); do ctl status >/dev/null 2>&1 && break; sleep 0.1; done
ctl status >/dev/null || fail "resild did not answer within 10 s"
st=$(ctl status)
echo "$st"
grep -q '^policies   1 of 200 slots$' <<<"$st" || fail "--policies 200 did not win over the file's 100"
grep -qE '^arena      [0-9]+ of [0-9]+ bytes' <<<"$st" || fail "no arena line"
arena=$(sed -n 's/^arena      [0-9]* of \([0-9]*\) bytes.*/\1/p' <<<"$st")
[ "$arena" -lt $((8 << 20)) ] || fail "state_size = 8M from the file not applied (arena $arena bytes)"
grep -q "^config     $conf, settings $conf/resild.conf$" <<<"$st" || fail "status does not name the settings file"
# the metrics address from the file cannot be bound here: logged, shown, no exit
grep -q '^metrics    FAILED: cannot serve metrics on 192.0.2.1:9: ' <<<"$st" || fail "status does not show the metrics bind error"
grep -q 'cannot serve metrics on 192.0.2.1:9' "$tmp/resild.log" || fail "the metrics bind error is not logged"
kill -0 "$pid" || fail "resild exited"
js=$(ctl --json status)
python3 - "$js" <<'P' || fail "status --json: $js"
import json, sys
s = json.loads(sys.argv[1])
assert s["policy_slots"] == 200 and s["policies"] == 1, s
assert s["reload"]["ok"] is True and "1 policies" in s["reload"]["message"], s
assert s["metrics"]["state"] == "failed" and s["metrics"]["listen"] == "192.0.2.1:9", s
assert s["metrics"]["error"].startswith("cannot serve metrics on 192.0.2.1:9: "), s
assert s["options_file"].endswith("/resild.conf") and s["uptime_s"] >= 0, s
P
echo "status: flags over the file, the settings file named, the metrics bind error shown"

echo "== resilctl reload"
printf '[policy pay]\nbulkhead.max = 6\n\n[policy new]\nbulkhead.max = -1\n' >"$conf/10-pay.conf"
expect 1 "reload failed, the previous configuration keeps running: $conf/10-pay.conf:5: " ctl reload
kill -0 "$pid" || fail "a failed reload stopped resild"
ctl show pay | grep -q 'bulkhead.max = 4' || fail "a failed reload changed pay"
ctl list | grep -q '^new' && fail "a failed reload applied part of the file"
ctl status | grep -q "^reload     FAILED at .*: $conf/10-pay.conf:5: " || fail "status does not show the failed reload"
# JSON answer of a failed reload
set +e
js=$(ctl --json reload 2>/dev/null)
rc=$?
set -e
[ "$rc" = 1 ] || fail "reload --json of a bad file: exit $rc"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["applied"] is False and ":5: " in r["message"], r' "$js" ||
	fail "reload --json: $js"
# an error in the settings file fails a reload too
cp "$conf/resild.conf" "$tmp/good.conf"
printf '[policy pay]\nbulkhead.max = 6\n' >"$conf/10-pay.conf"
printf '[daemon]\npolicies = none\n' >"$conf/resild.conf"
expect 1 "$conf/resild.conf:2: policies = none" ctl reload
ctl show pay | grep -q 'bulkhead.max = 4' || fail "a reload with a bad settings file applied the policies"
cp "$tmp/good.conf" "$conf/resild.conf"
expect 0 "^reloaded: 1 policies from files in $conf$" ctl reload
ctl show pay | grep -q 'bulkhead.max = 6' || fail "a good reload did not apply"
# a changed settings file: reloaded policies, settings for the next start
printf '[daemon]\npolicies = 300\n' >"$conf/resild.conf"
expect 0 "the settings file changed: restart to apply it" ctl reload
ctl status | grep -q '^policies   1 of 200 slots$' || fail "a reload changed the slots of a running daemon"
ctl status | grep -qE '^reload     ok at .*\(2 reloads, 3 failed\)$' || fail "reload counts: $(ctl status)"
# a configuration directory that went away: a failed reload naming it
mv "$conf" "$tmp/moved"
expect 1 "configuration directory $conf does not exist" ctl reload
mv "$tmp/moved" "$conf"
kill -0 "$pid" || fail "resild exited"
echo "sh_options: settings file with FILE:LINE errors, flags over it, reload and status as shown"

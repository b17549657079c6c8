#!/usr/bin/env bash
# label: integration
# A resilctl of protocol version 2 against a resild that speaks version 1
# only (RESILD_TEST_MAX_PROTOCOL=1: it answers as a daemon of version 1
# does, refusing a v2 hello, v2 requests and Define). The client's hello
# offers 1..2, the daemon chooses 1, and every request version 1 has
# works: create (sent as Create), a second create refused, force-open
# (ForceState with its word), show and status (words read back as the
# enums), metrics (the daemon's text), reset (sent as Reset), --json show.
# The daemon counts version 1 requests only.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${RESILD:?}" "${RESILCTL:?}"
tmp=$(mktemp -d)
dpid=
cleanup() {
	if [ -n "$dpid" ]; then
		kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	fi
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

mkdir -p "$tmp/conf"
RESILD_TEST_MAX_PROTOCOL=1 "$RESILD" --foreground --socket "$tmp/sock" --config "$tmp/conf" \
	>"$tmp/resild.log" 2>&1 &
dpid=$!
eventually ctl list >/dev/null 2>&1 || fail "resild did not answer within 10 s"

out=$(ctl create inv 'breaker.window = count:10; bulkhead.max = 3' 2>&1) ||
	fail "create against a v1 daemon: $out"
[ "$out" = "inv: created" ] || fail "create said: $out"
if out=$(ctl create inv 'bulkhead.max = 3' 2>&1); then
	fail "a second create of inv succeeded: $out"
fi
echo "$out" | grep -q 'policy inv exists' || fail "a second create said: $out"

out=$(ctl force-open inv 2>&1) || fail "force-open: $out"
out=$(ctl show inv 2>&1) || fail "show: $out"
echo "$out" | grep -q '^state *forced-open$' || fail "show after force-open: $out"
out=$(ctl --json show inv 2>&1) || fail "show --json: $out"
echo "$out" | grep -q '"state":"forced-open"' || fail "show --json after force-open: $out"

out=$(ctl status 2>&1) || fail "status: $out"
echo "$out" | grep -q '^policies *1 of ' || fail "status: $out"
echo "$out" | grep -q '^metrics *off' || fail "status, metrics listener: $out"

out=$(ctl metrics 2>&1) || fail "metrics: $out"
echo "$out" | grep -q '^resil_breaker_state{policy="inv",state="forced_open"} 1$' ||
	fail "metrics: $(echo "$out" | grep breaker_state)"
echo "$out" | grep -q '^resil_control_requests_total{version="2"} 0$' ||
	fail "the daemon saw version 2 requests: $(echo "$out" | grep control_requests)"

out=$(ctl reset inv 2>&1) || fail "reset: $out"
out=$(ctl show inv 2>&1) || fail "show: $out"
echo "$out" | grep -q '^state *closed$' || fail "show after reset: $out"
echo "sh_ctl_v1: ok"

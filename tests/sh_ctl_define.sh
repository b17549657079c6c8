#!/usr/bin/env bash
# label: integration
# resilctl create refuses a name that exists (a forced-open breaker must
# not vanish under a typo'd create); apply creates or re-defines, keeping
# state where the shape allows; update changes an existing policy only.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${RESILD:?}" "${RESILCTL:?}"
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
ctl() { "$RESILCTL" --socket "$tmp/sock" "$@"; }

mkdir "$tmp/conf"
"$RESILD" --foreground --socket "$tmp/sock" --config "$tmp/conf" 2>"$tmp/resild.log" &
pid=$!
for _ in $(seq 100); do ctl list >/dev/null 2>&1 && break; sleep 0.1; done
ctl list >/dev/null || fail "resild did not answer within 10 s"

ctl create pay 'breaker.window = count:10' | grep -q "pay: created" || fail "create"
ctl force-open pay >/dev/null
set +e
err=$(ctl create pay 'breaker.window = count:20' 2>&1)
rc=$?
set -e
[ "$rc" = 1 ] || fail "create of an existing name: exit $rc, want 1"
grep -q "exists" <<<"$err" || fail "create of an existing name said: $err"
ctl show pay | grep -q "^state *forced-open" || fail "the refused create changed pay: $(ctl show pay)"

ctl apply pay 'breaker.window = count:10; breaker.failure_rate = 30' | grep -q "pay: changed" ||
	fail "apply of an existing policy"
ctl show pay | grep -q "^state *forced-open" ||
	fail "apply with the same shape dropped the forced state: $(ctl show pay)"
ctl apply fresh 'bulkhead.max = 3' | grep -q "fresh: created" || fail "apply of a new name"
ctl apply fresh 'bulkhead.max = 3' | grep -q "fresh: unchanged" || fail "apply, the same again"
ctl list | grep -q fresh || fail "apply did not create fresh"
set +e
ctl update nosuch 'bulkhead.max = 3' >/dev/null 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "update of an unknown name: exit $rc"
echo "create refuses an existing name; apply creates or re-defines; update needs the name"

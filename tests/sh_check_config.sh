#!/usr/bin/env bash
# label: integration
# resild --check-config (nginx -t): exit 0 and a summary for a directory
# that would load; 78 (EX_CONFIG) with FILE:LINE for one that would not,
# including what only applying finds (a shared retry budget nobody
# defines); it creates no socket and touches no running daemon. A start
# on a bad directory exits 78 too, the status the units do not restart on.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${RESILD:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
conf=$tmp/conf
mkdir "$conf"
fail() { echo "FAIL: $*"; exit 1; }

cat >"$conf/10-good.conf" <<'C'
[policy payments]
breaker.window = count:20
limit.rate = 100/s

[policy @shared]
retry.budget = grpc:10:0.1

[policy search]
retry.budget = @shared
C
out=$("$RESILD" --check-config --config "$conf" --socket "$tmp/sock" 2>&1) ||
	fail "a good directory: exit $? ($out)"
echo "$out"
echo "$out" | grep -q "configuration OK, 3 policies" || fail "no summary: $out"
[ ! -e "$tmp/sock" ] || fail "--check-config created the socket"

# a parse error: FILE:LINE, status 78
printf '[policy a]\nbreaker.failure_rate = 50\nbreaker.failure_rate = 250\n' >"$conf/20-bad.conf"
set +e
out=$("$RESILD" --check-config --config "$conf" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" = 78 ] || fail "a bad value: exit $rc, want 78"
echo "$out" | grep -q "$conf/20-bad.conf:3: " || fail "no FILE:LINE: $out"

# an error only applying finds: a budget nobody defines
printf '[policy b]\nretry.budget = @nobody\n' >"$conf/20-bad.conf"
set +e
out=$("$RESILD" --check-config --config "$conf" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" = 78 ] || fail "an undefined budget: exit $rc, want 78"
echo "$out" | grep -q "20-bad.conf:1: policy b: .*@nobody" || fail "no FILE:LINE for the budget: $out"

# a start on the same directory: 78, no socket left behind
set +e
out=$(timeout 20 "$RESILD" --foreground --config "$conf" --socket "$tmp/sock" 2>&1)
rc=$?
set -e
[ "$rc" = 78 ] || fail "a start on a bad directory: exit $rc, want 78 ($out)"
[ ! -e "$tmp/sock" ] || fail "a failed start left its socket"
echo "check-config: 0 for a good directory, 78 with FILE:LINE for a bad one; a bad start exits 78"

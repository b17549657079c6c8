#!/bin/bash
# label: unit build
#
# The systemd units as the build generates them for its prefix
# (ExecStart= names the installed resild; a configuration error, exit 78,
# is not restarted) and the resild@ tenant template, as an instance,
# pass `systemd-analyze verify` (with ExecStart pointing at the built
# resild and resilctl, in a temporary copy), resild-metrics.socket and
# its relay resild-metrics.service (systemd-socket-proxyd to resild's unix
# metrics socket, so it starts beside a running resild) with
# them (the HTTP listener under the sandbox), and their hardening is shown
# with `systemd-analyze security --offline=true` (printed, and its exposure
# must stay below 2.0, the "OK" bound).
# Skips (77) without systemd-analyze.
set -u
SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
RESILD=${RESILD:-$SRC/build/daemon/resild}

command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
[ -x "$RESILD" ] || { echo "no resild at $RESILD"; exit 1; }

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# the units as the build generated them for its install prefix
UNITS=${BIN:-$SRC/build}/systemd
[ -f "$UNITS/resild.service" ] || { echo "no generated units in $UNITS"; exit 1; }
fail=0
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "${BIN:-$SRC/build}/CMakeCache.txt")
for u in resild.service resild@.service; do
	grep -qE "^ExecStart=$prefix/sbin/resild( |$)" "$UNITS/$u" ||
		{ echo "FAIL: $u: ExecStart= is not $prefix/sbin/resild"; fail=1; }
	grep -q '^RestartPreventExitStatus=78$' "$UNITS/$u" ||
		{ echo "FAIL: $u: a configuration error (78) would be restarted"; fail=1; }
done
grep -q '@[A-Z_]*@' "$UNITS"/resild* && { echo "FAIL: an unsubstituted @VAR@"; fail=1; }

cp "$UNITS/resild.service" "$UNITS/resild.socket" "$UNITS/resild-metrics.socket" \
	"$UNITS/resild-metrics.service" "$T/"
# the tenant template, as an instance
cp "$UNITS/resild@.service" "$T/resild@demo.service"
cp "$UNITS/resild@.socket" "$T/resild@demo.socket"
# verify checks that ExecStart= exists: point it at the built resild
sed -i "s#^ExecStart=[^ ]*/resild#ExecStart=$RESILD#" "$T/resild.service" "$T/resild@demo.service"
grep -q "^ExecStart=$RESILD " "$T/resild.service" || { echo "ExecStart not rewritten"; exit 1; }
# a reload is `resilctl reload` (its exit status is the reload's result)
RESILCTL=${RESILCTL:-$(dirname "$RESILD")/../client/resilctl}
for u in resild.service resild@demo.service; do
	grep -qE "^ExecReload=\\+?$prefix/bin/resilctl --socket /run/resild/[^ ]+ reload$" "$T/$u" ||
		{ echo "FAIL: $u: ExecReload= is not resilctl reload"; fail=1; }
done
sed -i "s#^ExecReload=\\(+\\?\\)[^ ]*/resilctl#ExecReload=\\1$RESILCTL#" "$T/resild.service" "$T/resild@demo.service"
# a tenant's socket belongs to the group resild-NAME, which User=resild is
# not in: its reload runs as root ("+")
grep -q '^ExecReload=+' "$T/resild@demo.service" || { echo "FAIL: resild@: ExecReload= runs as User=resild"; fail=1; }
# the metrics socket starts its relay, never resild.service (a socket
# whose service runs cannot start): the relay reaches resild's unix socket
grep -q '^Service=' "$T/resild-metrics.socket" && { echo "FAIL: resild-metrics.socket: Service="; fail=1; }
grep -q '^ListenStream=' "$T/resild-metrics.socket" || { echo "FAIL: resild-metrics.socket: ListenStream="; fail=1; }
msock=$(sed -n 's/^ExecStart=.* --metrics-socket \([^ ]*\).*/\1/p' "$T/resild.service")
[ -n "$msock" ] || { echo "FAIL: resild.service: no --metrics-socket"; fail=1; }
grep -qE "^ExecStart=[^ ]*/systemd-socket-proxyd $msock\$" "$T/resild-metrics.service" ||
	{ echo "FAIL: resild-metrics.service does not relay to $msock"; fail=1; }
grep -q "^ReadWritePaths=-$(dirname "$msock")\$" "$T/resild.service" ||
	{ echo "FAIL: resild.service cannot write $(dirname "$msock")"; fail=1; }
grep -q "^d $(dirname "$msock") 0750 resild resild" "$SRC/systemd/resild-tmpfiles.conf" ||
	{ echo "FAIL: tmpfiles do not make $(dirname "$msock")"; fail=1; }

echo "== systemd-analyze verify"
# --man=no: the units' Documentation= pages are installed with the package,
# not necessarily on this machine
if ! systemd-analyze verify --man=no "$T/resild.service" "$T/resild.socket" "$T/resild-metrics.socket" \
	"$T/resild-metrics.service" \
	"$T/resild@demo.service" "$T/resild@demo.socket"; then
	echo "FAIL: verify"
	fail=1
fi

# the rules the units must keep
grep -q '^Type=notify$' "$T/resild.service" || { echo "FAIL: Type=notify"; fail=1; }
grep -q '^RuntimeDirectory=' "$T/resild.service" && { echo "FAIL: RuntimeDirectory= removes the socket's directory"; fail=1; }
grep -q '^PrivateUsers=' "$T/resild.service" && { echo "FAIL: PrivateUsers= breaks SO_PEERCRED"; fail=1; }
grep -q '^SocketMode=0660$' "$T/resild.socket" || { echo "FAIL: SocketMode=0660"; fail=1; }
grep -q '^ListenSequentialPacket=' "$T/resild.socket" || { echo "FAIL: ListenSequentialPacket="; fail=1; }
grep -q '^RuntimeDirectory=' "$T/resild@demo.service" && { echo "FAIL: RuntimeDirectory= in the template"; fail=1; }
grep -q '^PrivateUsers=' "$T/resild@demo.service" && { echo "FAIL: PrivateUsers= in the template"; fail=1; }

if command -v systemd-sysusers >/dev/null; then
	echo "== systemd-sysusers --dry-run"
	mkdir -p "$T/root/etc"
	: >"$T/root/etc/passwd"; : >"$T/root/etc/group"
	out=$(systemd-sysusers --root="$T/root" --dry-run "$SRC/systemd/resild-sysusers.conf" 2>&1)
	echo "$out"
	echo "$out" | grep -q "Creating user 'resild'" || { echo "FAIL: sysusers"; fail=1; }
fi

echo "== systemd-analyze security --offline=true"
out=$(systemd-analyze security --offline=true "$T/resild.service" 2>&1)
echo "$out" | grep -E '✗|Overall'
level=$(echo "$out" | sed -n 's/.*Overall exposure level for resild.service: \([0-9.]*\).*/\1/p')
if [ -z "$level" ]; then
	echo "FAIL: no exposure level"
	fail=1
elif ! awk -v l="$level" 'BEGIN { exit !(l <= 1.5) }'; then
	echo "FAIL: exposure $level > 1.5"
	fail=1
else
	echo "exposure $level <= 1.5"
fi
exit $fail

#!/bin/bash
# label: integration
#
# resild under socket activation: systemd-socket-activate listens on a
# SOCK_SEQPACKET socket and starts resild at the first connection, passing
# the listening socket (LISTEN_FDS); resild must serve it instead of
# creating its own, answer resilctl, apply its configuration files, and
# leave the socket file alone when it stops (it belongs to the activator).
# Skips (77) without systemd-socket-activate or resilctl.
set -u
SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
RESILD=${RESILD:-}
RESILCTL=${RESILCTL:-}

command -v systemd-socket-activate >/dev/null || { echo "no systemd-socket-activate: skipped"; exit 77; }
[ -n "$RESILD" ] && [ -x "$RESILD" ] || { echo "no resild (\$RESILD)"; exit 1; }
[ -n "$RESILCTL" ] && [ -x "$RESILCTL" ] || { echo "no resilctl (\$RESILCTL): skipped"; exit 77; }

T=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -rf "$T"
}
trap cleanup EXIT
mkdir "$T/conf"
cat > "$T/conf/10-act.conf" <<'CONF'
[policy activated]
breaker.failure_rate = 50
CONF
SOCK=$T/control.sock

systemd-socket-activate -l "$SOCK" --seqpacket \
	"$RESILD" --foreground --socket "$SOCK" --config "$T/conf" --state-size 16M \
	>"$T/log" 2>&1 &
pid=$!

# the activator listens first; resild starts at the first connection
ok=
for _ in $(seq 100); do
	[ -S "$SOCK" ] && { ok=1; break; }
	sleep 0.1
done
[ -n "$ok" ] || { echo "FAIL: no socket"; cat "$T/log"; exit 1; }

out=$(timeout 20 "$RESILCTL" --socket "$SOCK" list 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: resilctl list exited $rc"; cat "$T/log"; exit 1; }
echo "$out" | grep -q activated || { echo "FAIL: policy from the file not listed"; cat "$T/log"; exit 1; }

# a second command on a new connection: the same daemon answers
timeout 20 "$RESILCTL" --socket "$SOCK" create viaapi 'bulkhead.max = 4' >/dev/null 2>&1 ||
	{ echo "FAIL: create"; cat "$T/log"; exit 1; }
timeout 20 "$RESILCTL" --socket "$SOCK" list 2>&1 | grep -q viaapi ||
	{ echo "FAIL: created policy not listed"; cat "$T/log"; exit 1; }

grep -q "socket passed by systemd" "$T/log" || { echo "FAIL: resild did not use the passed socket"; cat "$T/log"; exit 1; }

kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { echo "FAIL: resild did not stop on SIGTERM"; exit 1; }
wait "$pid"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: exit status $rc"; cat "$T/log"; exit 1; }
[ -S "$SOCK" ] || { echo "FAIL: resild removed the activator's socket"; exit 1; }
pid=
echo "OK"
exit 0

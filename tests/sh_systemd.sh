#!/usr/bin/env bash
# label: system
# resil under a real systemd 252 as PID 1: a container booted with
# systemd-nspawn over this machine's own tree (--volatile=overlay: every
# write lands in a tmpfs and is gone with the container), the .deb
# installed in it with dpkg -i so its maintainer scripts run there, then:
#   - sysusers and tmpfiles applied (user and group resild, /run/resild),
#     resild.socket enabled and listening; the first connection starts
#     resild.service (socket activation, Type=notify);
#   - a forced-open breaker survives `systemctl restart` and a SIGKILL
#     with Restart=always (both memfds come back from the fd store);
#   - the settings file /etc/resild/resild.conf is what the unit's resild
#     runs with, and its metrics_listen, which the sandbox refuses
#     (RestrictAddressFamilies=AF_UNIX), is an error in the journal and in
#     `resilctl status`, not an exit;
#   - a reload (ExecReload= is `resilctl reload`) with a broken file
#     fails `systemctl reload`, prints FILE:LINE, keeps the unit active and
#     the previous configuration running;
#   - resild-metrics.socket (on a free port, by a drop-in) gives the
#     sandboxed resild its HTTP listener: curl reaches /metrics;
#   - a tenant's configuration directory is created at its start;
#   - a configuration error at start exits 78 and is not restarted
#     (RestartPreventExitStatus=78): the unit fails once, NRestarts 0.
# Skipped (77) where nspawn cannot run (not root, no systemd-container,
# a sanitized build or one not configured for /usr).
set -u # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${BIN:?}"
skip() { echo "skipped: $*"; exit 77; }
grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" && skip "sanitized build"
grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$BIN/CMakeCache.txt" ||
	skip "the build is not configured with -DCMAKE_INSTALL_PREFIX=/usr"
[ "$(id -u)" = 0 ] || skip "systemd-nspawn needs root"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (Debian's systemd-container)"
command -v nsenter >/dev/null || skip "no nsenter"

tmp=$(mktemp -d)
npid=
cleanup() {
	if [ -n "$npid" ]; then
		kill "$npid" 2>/dev/null
		wait "$npid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -n "${leader:-}" ] && c journalctl -u resild.service -u resild.socket --no-pager 2>/dev/null | tail -30
	exit 1
}
eventually() { # up to 10 s of wall clock (T=SECONDS for more)
	local end=$((SECONDS + ${T:-10}))
	while [ "$SECONDS" -lt "$end" ]; do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

(cd "$tmp" && cpack -G DEB --config "$BIN/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) ||
	{ cat "$tmp/cpack.log"; exit 1; }
deb=$(basename "$(ls "$tmp"/pkg/resil_*.deb)")

# --volatile=yes: a tmpfs root with this machine's /usr; /usr, /etc and
# /var as overlays with tmpfs-backed upper directories, so dpkg finds its
# database and the groups its statoverrides name, and writes nothing here;
# booted to basic.target (sockets.target, where resild.socket is wanted, is
# in it): the services of this machine's tree (a database, redis, getty)
# would only slow the boot down on a loaded machine
name=resiltest$$
mkdir -p "$tmp/up/usr" "$tmp/up/etc" "$tmp/up/var"
systemd-nspawn -D / --volatile=yes --register=no --keep-unit --boot -M "$name" \
	--overlay="/usr:$tmp/up/usr:/usr" --overlay="/etc:$tmp/up/etc:/etc" \
	--overlay="/var:$tmp/up/var:/var" --bind-ro="$tmp/pkg:/mnt/pkg" \
	systemd.firstboot=off systemd.unit=basic.target >"$tmp/boot.log" 2>&1 </dev/null &
npid=$!
# nspawn may fork short-lived helpers before the container's init: wait
# for nspawn to have a child at all (none within 30 s: no container here),
# then take as the leader the child that has exec'd systemd, re-read on
# every try (a helper's pid would answer nothing for the whole boot)
leader=
for _ in $(seq 300); do
	[ -n "$(pgrep -P "$npid")" ] && break
	kill -0 "$npid" 2>/dev/null || break
	sleep 0.1
done
[ -n "$(pgrep -P "$npid")" ] || { cat "$tmp/boot.log"; skip "systemd-nspawn could not start a container here"; }
c() { nsenter -t "$leader" -a "$@"; }
# the container's systemd answers (a degraded system is fine: other
# units of this machine's tree may fail in a container), or
# multi-user.target is active while some unit of this machine's tree is
# still starting (that unit's job is none of this test's business)
up() {
	leader=$(pgrep -P "$npid" -x systemd | head -n1)
	[ -n "$leader" ] || return 1
	c systemctl is-system-running | grep -qE '^(running|degraded)' ||
		c systemctl is-active -q multi-user.target
}
T=180 eventually up ||
	{ tail -20 "$tmp/boot.log"; fail "the container's systemd did not come up within 180 s (leader: ${leader:-none})"; }
echo "systemd $(c systemctl --version | head -n1 | awk '{print $2}') is PID 1 of the container"

c dpkg -i "/mnt/pkg/$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i in the container"; }
c getent passwd resild >/dev/null || fail "no user resild after the maintainer scripts"
c test -d /run/resild || fail "no /run/resild after the maintainer scripts"
c systemctl is-enabled resild.socket >/dev/null || fail "resild.socket not enabled"
eventually c systemctl is-active resild.socket || fail "resild.socket not listening"
c systemctl is-active resild.service >/dev/null && fail "resild.service runs before any connection"

# the settings file, in place before the first start
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
c sh -c "printf '[daemon]\npolicies = 500\nmetrics_listen = 127.0.0.1:$port\n' >/etc/resild/resild.conf"

# socket activation: the first connection starts the daemon
c resilctl create pay 'breaker.window = count:10; bulkhead.max = 4' >/dev/null ||
	fail "resilctl through the activated socket"
c systemctl is-active resild.service >/dev/null || fail "resild.service not active after a connection"
c resilctl force-open pay >/dev/null || fail "force-open"
forced() { c resilctl show pay | grep -q '^state *forced-open'; }
forced || fail "pay is not forced open"
echo "socket activation started resild; pay is forced open"

st=$(c resilctl status)
echo "$st"
grep -q '^policies   1 of 500 slots$' <<<"$st" || fail "the unit's resild did not use /etc/resild/resild.conf"
grep -q '^config     /etc/resild, settings /etc/resild/resild.conf$' <<<"$st" || fail "status does not name the settings file"
grep -q "^metrics    FAILED: cannot serve metrics on 127.0.0.1:$port: " <<<"$st" ||
	fail "status does not show why metrics_listen failed under the sandbox"
c journalctl -u resild.service --no-pager | grep -q "cannot serve metrics on 127.0.0.1:$port" ||
	fail "the journal does not say why metrics_listen failed"
echo "the unit runs with /etc/resild/resild.conf; a refused metrics_listen is in the journal and in status"

# restart and SIGKILL: the fd store gives the memory back
c systemctl restart resild.service || fail "systemctl restart"
eventually forced || fail "systemctl restart lost pay's forced-open state"
pid=$(c systemctl show -p MainPID --value resild.service)
c kill -KILL "$pid"
eventually sh -c "nsenter -t $leader -a systemctl show -p MainPID --value resild.service | grep -vqE '^(0|$pid)\$'" ||
	fail "resild was not restarted after SIGKILL"
eventually forced || fail "a SIGKILL and Restart=always lost pay's forced-open state"
echo "restart and SIGKILL kept the forced-open breaker (fd store)"

# reload with a broken file: `systemctl reload` (resilctl reload) fails
# with FILE:LINE, the unit stays up, the old configuration runs
c sh -c 'printf "[policy filed]\nbulkhead.max = 3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service || fail "systemctl reload"
c resilctl list | grep -q filed || fail "a good reload did not apply"
c sh -c 'printf "[policy filed]\nbulkhead.max = -3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service >/dev/null 2>&1 && fail "systemctl reload of a broken file succeeded"
c journalctl -u resild.service --no-pager | grep -q 'reload failed, .*10-filed.conf:2' ||
	fail "the journal does not show resilctl's FILE:LINE for the failed reload"
out=$(c resilctl reload 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "resilctl reload of a broken file: exit $rc ($out)"
grep -q '/etc/resild/10-filed.conf:2: ' <<<"$out" || fail "resilctl reload does not print FILE:LINE: $out"
c systemctl is-active resild.service >/dev/null || fail "a broken reload stopped the unit"
c resilctl list | grep -q filed || fail "a broken reload dropped the previous configuration"
c resilctl show filed | grep -q 'bulkhead.max = 3' || fail "a broken reload changed filed"
c resilctl status | grep -q '^reload     FAILED at .*10-filed.conf:2: ' || fail "status does not show the failed reload"
echo "a broken reload fails systemctl reload with FILE:LINE; the unit and the previous configuration stay"

# the metrics listener under the sandbox: resild-metrics.socket
c sh -c 'printf "[policy filed]\nbulkhead.max = 3\n" >/etc/resild/10-filed.conf'
c mkdir -p /etc/systemd/system/resild-metrics.socket.d
c sh -c "printf '[Socket]\nListenStream=\nListenStream=127.0.0.1:$port\n' >/etc/systemd/system/resild-metrics.socket.d/port.conf"
c systemctl daemon-reload
# systemd starts a socket only while its service is stopped
c systemctl stop resild.service
c systemctl enable --now resild-metrics.socket >/dev/null 2>&1 ||
	{ c systemctl status resild-metrics.socket --no-pager; fail "resild-metrics.socket did not start"; }
c systemctl start resild.service || fail "start with the metrics socket"
eventually sh -c "nsenter -t $leader -a curl -sf http://127.0.0.1:$port/metrics | grep -q '^resil_'" ||
	fail "curl does not reach /metrics through resild-metrics.socket"
c resilctl status | grep -q '^metrics    listening on socket-activated$' || fail "status: $(c resilctl status)"
echo "resild-metrics.socket: the sandboxed resild serves /metrics on 127.0.0.1:$port"

# a tenant's configuration directory: created at its start
c groupadd resild-t1
c systemctl start resild@t1.socket || fail "resild@t1.socket"
c resilctl --socket /run/resild/t1.sock status | grep -q '^config     /etc/resild/tenants/t1' ||
	fail "the tenant resild@t1 did not start on its own directory"
c test -d /etc/resild/tenants/t1 || fail "no /etc/resild/tenants/t1"
c systemctl stop resild@t1.service resild@t1.socket
echo "resild@t1 started on /etc/resild/tenants/t1, created for it"

# a configuration error at start: 78, not restarted
c sh -c 'printf "[policy filed]\nbulkhead.max = -3\n" >/etc/resild/10-filed.conf'
c systemctl stop resild.service resild.socket resild-metrics.socket
c systemctl start resild.service
eventually sh -c "nsenter -t $leader -a systemctl show -p ActiveState --value resild.service | grep -qx failed" ||
	fail "a start on a broken file did not fail"
st=$(c systemctl show -p ExecMainStatus --value resild.service)
[ "$st" = 78 ] || fail "a start on a broken file exited $st, want 78"
sleep 2 # RestartSec=100ms: a restart would have happened by now
nr=$(c systemctl show -p NRestarts --value resild.service)
[ "$nr" = 0 ] || fail "a configuration error was restarted $nr times"
echo "a configuration error at start exits 78 and is not restarted"
echo "systemd: package, settings file, socket activation, restarts, reload, metrics socket, tenants and exit 78 all as documented"

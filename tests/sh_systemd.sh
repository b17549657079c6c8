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
#   - a reload (ExecReload) with a broken file keeps the unit active and
#     the previous configuration running, and the journal says why;
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
eventually() { # up to 10 s (30 s for a boot)
	local n=${N:-100}
	for _ in $(seq "$n"); do
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
# database and the groups its statoverrides name, and writes nothing here
name=resiltest$$
mkdir -p "$tmp/up/usr" "$tmp/up/etc" "$tmp/up/var"
systemd-nspawn -D / --volatile=yes --register=no --keep-unit --boot -M "$name" \
	--overlay="/usr:$tmp/up/usr:/usr" --overlay="/etc:$tmp/up/etc:/etc" \
	--overlay="/var:$tmp/up/var:/var" --bind-ro="$tmp/pkg:/mnt/pkg" \
	systemd.firstboot=off >"$tmp/boot.log" 2>&1 </dev/null &
npid=$!
leader=
for _ in $(seq 300); do
	leader=$(pgrep -P "$npid" | head -n1)
	[ -n "$leader" ] && break
	sleep 0.1
done
[ -n "$leader" ] || { cat "$tmp/boot.log"; skip "systemd-nspawn could not start a container here"; }
c() { nsenter -t "$leader" -a "$@"; }
# the container's systemd answers (a degraded system is fine: other
# units of this machine's tree may fail in a container)
N=300 eventually sh -c "nsenter -t $leader -a systemctl is-system-running | grep -qE '^(running|degraded)'" ||
	{ tail -20 "$tmp/boot.log"; fail "the container's systemd did not come up within 30 s"; }
echo "systemd $(c systemctl --version | head -n1 | awk '{print $2}') is PID 1 of the container"

c dpkg -i "/mnt/pkg/$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i in the container"; }
c getent passwd resild >/dev/null || fail "no user resild after the maintainer scripts"
c test -d /run/resild || fail "no /run/resild after the maintainer scripts"
c systemctl is-enabled resild.socket >/dev/null || fail "resild.socket not enabled"
eventually c systemctl is-active resild.socket || fail "resild.socket not listening"
c systemctl is-active resild.service >/dev/null && fail "resild.service runs before any connection"

# socket activation: the first connection starts the daemon
c resilctl create pay 'breaker.window = count:10; bulkhead.max = 4' >/dev/null ||
	fail "resilctl through the activated socket"
c systemctl is-active resild.service >/dev/null || fail "resild.service not active after a connection"
c resilctl force-open pay >/dev/null || fail "force-open"
forced() { c resilctl show pay | grep -q '^state *forced-open'; }
forced || fail "pay is not forced open"
echo "socket activation started resild; pay is forced open"

# restart and SIGKILL: the fd store gives the memory back
c systemctl restart resild.service || fail "systemctl restart"
eventually forced || fail "systemctl restart lost pay's forced-open state"
pid=$(c systemctl show -p MainPID --value resild.service)
c kill -KILL "$pid"
eventually sh -c "nsenter -t $leader -a systemctl show -p MainPID --value resild.service | grep -vqE '^(0|$pid)\$'" ||
	fail "resild was not restarted after SIGKILL"
eventually forced || fail "a SIGKILL and Restart=always lost pay's forced-open state"
echo "restart and SIGKILL kept the forced-open breaker (fd store)"

# reload with a broken file: the unit stays up, the old configuration runs
c sh -c 'printf "[policy filed]\nbulkhead.max = 3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service || fail "systemctl reload"
eventually sh -c "nsenter -t $leader -a resilctl list | grep -q filed" || fail "a good reload did not apply"
c sh -c 'printf "[policy filed]\nbulkhead.max = -3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service || fail "systemctl reload with a broken file"
eventually sh -c "nsenter -t $leader -a journalctl -u resild.service --no-pager | grep -q '10-filed.conf:2'" ||
	fail "the journal does not name the broken line"
c systemctl is-active resild.service >/dev/null || fail "a broken reload stopped the unit"
c resilctl list | grep -q filed || fail "a broken reload dropped the previous configuration"
echo "a broken reload is logged with FILE:LINE; the unit and the previous configuration stay"

# a configuration error at start: 78, not restarted
c systemctl stop resild.service resild.socket
c systemctl start resild.service
eventually sh -c "nsenter -t $leader -a systemctl show -p ActiveState --value resild.service | grep -qx failed" ||
	fail "a start on a broken file did not fail"
st=$(c systemctl show -p ExecMainStatus --value resild.service)
[ "$st" = 78 ] || fail "a start on a broken file exited $st, want 78"
sleep 2 # RestartSec=100ms: a restart would have happened by now
nr=$(c systemctl show -p NRestarts --value resild.service)
[ "$nr" = 0 ] || fail "a configuration error was restarted $nr times"
echo "a configuration error at start exits 78 and is not restarted"
echo "systemd: package, socket activation, restarts, reload and exit 78 all as documented"

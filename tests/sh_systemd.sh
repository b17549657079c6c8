#!/usr/bin/env bash
# label: system
# resil's Debian packages under a real systemd 252 as PID 1: a container
# booted with systemd-nspawn over this machine's own tree
# (--volatile=yes and overlays: every write lands in a tmpfs and is gone
# with the container), the packages (tests/deb_build.sh) installed with
# dpkg -i so their maintainer scripts run there. One boot, then in order:
#   - install under a policy-rc.d that forbids starting: resild.socket is
#     enabled, not started; user, group and /run/resild are there;
#   - socket activation (the first connection starts resild.service), the
#     settings file, the unit's unix metrics socket (a metrics_listen of
#     the file, which the sandbox could not bind, said ignored); a worker built against the
#     installed libresil-dev decides from here to the upgrade and counts
#     its errors;
#   - a forced-open breaker survives `systemctl restart` and a SIGKILL;
#   - a reload of a broken file fails with FILE:LINE, the old
#     configuration runs on;
#   - `systemctl restart` with a broken file: the adopted policies keep
#     running (the breaker stays forced open), the unit and the socket stay
#     active, the error is in status and metrics;
#   - a restart with a larger state_size and more policies applies them
#     (status shows the new sizes) and keeps the state;
#   - resild-metrics.socket enabled and started beside the running daemon
#     (its relay reaches resild's unix metrics socket): curl reaches
#     /metrics, nothing restarts;
#   - tenants: resild@t1's directory is created at its start, and
#     `systemctl reload resild@t1` applies a new file;
#   - an upgrade (dpkg -i of the package rebuilt with a newer version)
#     while the worker decides, the socket disabled by the administrator
#     before: resild.service and both running tenants restart on the new
#     binary, the state stays, the worker saw 0 errors, the socket stays
#     disabled;
#   - a configuration error at a fresh start exits 78, not restarted;
#     resilctl on the stopped socket says what to run;
#   - apt-get remove stops every tenant; the library package stays, and
#     the worker linked to it still runs;
#   - apt-get purge leaves nothing the package made (but the system user
#     and group, as Debian does).
# Skipped (77) where nspawn cannot run (not root, no systemd-container or
# debhelper, a sanitized build).
set -u # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${BIN:?}" "${SRC:?}"
skip() { echo "skipped: $*"; exit 77; }
grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" && skip "sanitized build"
[ "$(id -u)" = 0 ] || skip "systemd-nspawn needs root"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (Debian's systemd-container)"
command -v nsenter >/dev/null || skip "no nsenter"
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null || skip "no dpkg-buildpackage or debhelper"

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
	[ -n "${leader:-}" ] && c journalctl -u 'resild*' --no-pager 2>/dev/null | tail -40
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

pkgdir=$("$SRC/tests/deb_build.sh") || fail "the packages do not build"
mkdir "$tmp/pkg"
cp "$pkgdir"/*.deb "$tmp/pkg/"
rm -f "$tmp/pkg"/*-dbgsym_*.deb
# the same package rebuilt as a newer version (a binNMU's +b1): what an
# upgrade installs
ver=$(dpkg-deb -f "$tmp/pkg"/resild_*.deb Version)
dpkg-deb -R "$tmp/pkg"/resild_*.deb "$tmp/v2"
sed -i "s/^Version: .*/Version: $ver+b1/" "$tmp/v2/DEBIAN/control"
mkdir "$tmp/pkg/v2"
dpkg-deb -b "$tmp/v2" "$tmp/pkg/v2/resild_$ver+b1.deb" >/dev/null || fail "repacking resild as $ver+b1"
debs=$(cd "$tmp/pkg" && ls resild_*.deb libresil*.deb | sed 's#^#/mnt/pkg/#' | tr '\n' ' ')
# the worker: decides on one policy until SIGTERM, writes "decisions
# errors" to a file as it goes; built in the container against the
# installed libresil-dev
cat >"$tmp/pkg/w.c" <<'EOF'
#include <resil.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static void report(const char *path, long n, long errors)
{
	char tmp[256];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (f) {
		fprintf(f, "%ld %ld\n", n, errors);
		fclose(f);
		rename(tmp, path);
	}
}

int main(int argc, char **argv)
{
	resil_policy_t *p;
	resil_permit_t pm;
	resil_t *r;
	long n = 0, errors = 0;

	if (argc == 1) /* the library loads */
		return resil_strverdict(RESIL_ADMIT) ? 0 : 1;
	signal(SIGTERM, on_term);
	if (resil_open(&r, NULL) < 0 || resil_policy(r, argv[1], &p) < 0) {
		fprintf(stderr, "w: %s\n", resil_last_error());
		return 1;
	}
	while (!stop) {
		int v = resil_acquire(p, &pm);

		n++;
		if (v < 0) {
			errors++;
			fprintf(stderr, "w: %d %s\n", v, resil_last_error());
		} else if (v == RESIL_ADMIT) {
			resil_release(p, &pm, RESIL_SUCCESS);
		}
		if (n % 500 == 0)
			report(argv[2], n, errors);
		usleep(200);
	}
	report(argv[2], n, errors);
	resil_close(r);
	return 0;
}
EOF

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
# the unit's journal shows a line matching the pattern (eventually: journald
# writes what the unit logged on its own time)
journal_has() { # unit pattern
	c journalctl -u "$1" --no-pager | grep -q -- "$2"
}
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
mainpid() { c systemctl show -p MainPID --value "$1"; }
active() { c systemctl is-active -q "$1"; }

# ---- install, with a policy-rc.d that forbids starting anything
c sh -c 'printf "#!/bin/sh\nexit 101\n" >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d'
# shellcheck disable=SC2086
c dpkg -i $debs >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i in the container"; }
c getent passwd resild >/dev/null || fail "no user resild after the maintainer scripts"
c test -d /run/resild || fail "no /run/resild after the maintainer scripts"
c systemctl is-enabled resild.socket >/dev/null || fail "resild.socket not enabled"
active resild.socket && fail "resild.socket started although policy-rc.d forbids it"
c rm /usr/sbin/policy-rc.d
c systemctl start resild.socket || fail "starting resild.socket"
active resild.service && fail "resild.service runs before any connection"
echo "installed: user, group, /run/resild; resild.socket enabled, not started under policy-rc.d 101"

# the settings file, in place before the first start
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
c sh -c "printf '[daemon]\npolicies = 500\nmetrics_listen = 127.0.0.1:$port\n' >/etc/resild/resild.conf"
c sh -c 'printf "[policy up]\nbulkhead.max = 4\nlimit.rate = 1000000/s\n" >/etc/resild/20-up.conf'

# socket activation: the first connection starts the daemon
c resilctl create pay 'breaker.window = count:10; bulkhead.max = 4' >/dev/null ||
	fail "resilctl through the activated socket"
active resild.service || fail "resild.service not active after a connection"
c resilctl force-open pay >/dev/null || fail "force-open"
forced() { c resilctl show pay | grep -q '^state *forced-open'; }
forced || fail "pay is not forced open"
echo "socket activation started resild; pay is forced open"

st=$(c resilctl status)
echo "$st"
grep -q '^policies   2 of 500 slots$' <<<"$st" || fail "the unit's resild did not use /etc/resild/resild.conf"
grep -q '^config     /etc/resild, settings /etc/resild/resild.conf$' <<<"$st" || fail "status does not name the settings file"
grep -q "^metrics    listening on unix:/run/resild/http/metrics.sock$" <<<"$st" ||
	fail "status does not show the unit's unix metrics socket"
eventually journal_has resild.service "metrics_listen 127.0.0.1:$port ignored: serving metrics on /run/resild/http/metrics.sock" ||
	fail "the journal does not say metrics_listen is ignored under the unit"
echo "the unit runs with /etc/resild/resild.conf; metrics on its unix socket, a metrics_listen the sandbox could not bind said ignored"

# the worker, built against the installed libresil-dev
c sh -c 'cc -o /tmp/w /mnt/pkg/w.c $(pkg-config --cflags --libs resil)' || fail "building against libresil-dev"
c sh -c 'nohup /tmp/w up /tmp/w.out >/tmp/w.log 2>&1 & echo $! >/tmp/w.pid'
decisions() { c cat /tmp/w.out 2>/dev/null | awk '{print $1}'; }
werrors() { c cat /tmp/w.out 2>/dev/null | awk '{print $2}'; }
progress() { # the worker decided past N
	local n
	n=$(decisions)
	[ -n "$n" ] && [ "$n" -gt "$1" ]
}
worker_ok() { # the worker decides on, and has seen no error
	local n
	n=$(decisions)
	eventually progress "${n:-0}" || fail "the worker stopped deciding ($(c cat /tmp/w.log))"
	[ "$(werrors)" = 0 ] || fail "the worker saw $(werrors) errors: $(c tail -3 /tmp/w.log)"
}
eventually progress 0 || fail "the worker does not decide: $(c cat /tmp/w.log)"

# ---- restart and SIGKILL: the fd store gives the memory back
c systemctl restart resild.service || fail "systemctl restart"
eventually forced || fail "systemctl restart lost pay's forced-open state"
pid=$(mainpid resild.service)
c kill -KILL "$pid"
eventually sh -c "nsenter -t $leader -a systemctl show -p MainPID --value resild.service | grep -vqE '^(0|$pid)\$'" ||
	fail "resild was not restarted after SIGKILL"
eventually forced || fail "a SIGKILL and Restart=always lost pay's forced-open state"
worker_ok
echo "restart and SIGKILL kept the forced-open breaker (fd store); the worker saw no error"

# ---- reload with a broken file: `systemctl reload` fails with FILE:LINE
c sh -c 'printf "[policy filed]\nbulkhead.max = 3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service || fail "systemctl reload"
c resilctl list | grep -q filed || fail "a good reload did not apply"
c sh -c 'printf "[policy filed]\nbulkhead.max = -3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service >/dev/null 2>&1 && fail "systemctl reload of a broken file succeeded"
eventually journal_has resild.service 'reload failed, .*10-filed.conf:2' ||
	fail "the journal does not show resilctl's FILE:LINE for the failed reload"
out=$(c resilctl reload 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "resilctl reload of a broken file: exit $rc ($out)"
grep -q '/etc/resild/10-filed.conf:2: ' <<<"$out" || fail "resilctl reload does not print FILE:LINE: $out"
active resild.service || fail "a broken reload stopped the unit"
c resilctl show filed | grep -q 'bulkhead.max = 3' || fail "a broken reload changed filed"
echo "a broken reload fails systemctl reload with FILE:LINE; the unit and the previous configuration stay"

# ---- restart with the broken file: the adopted policies keep running
pid=$(mainpid resild.service)
c systemctl restart resild.service || fail "systemctl restart with a broken file failed"
[ "$(mainpid resild.service)" != "$pid" ] || fail "systemctl restart did not restart"
active resild.service || fail "a restart with a broken file stopped the unit"
active resild.socket || fail "a restart with a broken file failed the socket"
forced || fail "a restart with a broken file lost pay's forced-open state"
c resilctl show filed | grep -q 'bulkhead.max = 3' || fail "a restart with a broken file lost filed"
c resilctl status | grep -q '^reload     FAILED at .*10-filed.conf:2: ' || fail "status does not show the broken file"
c resilctl metrics | grep -qE '^resil_reloads_total\{result="failed"\} [1-9]' || fail "metrics do not count the broken file"
eventually journal_has resild.service 'configuration files not applied (/etc/resild/10-filed.conf:2' ||
	fail "the journal does not say the files were not applied"
c sh -c 'printf "[policy filed]\nbulkhead.max = 3\n" >/etc/resild/10-filed.conf'
c systemctl reload resild.service || fail "a reload of the fixed file"
worker_ok
echo "systemctl restart with a broken file: the unit, the socket and every policy's state stay; status and metrics say FILE:LINE"

# ---- new sizes: a restart applies them and keeps the state
c sh -c 'printf "[daemon]\npolicies = 900\nstate_size = 384M\n" >/etc/resild/resild.conf'
c systemctl restart resild.service || fail "systemctl restart with new sizes"
st=$(c resilctl status)
grep -q '^policies   3 of 900 slots$' <<<"$st" || fail "a restart did not apply policies = 900: $st"
grep -qE '^arena      [0-9]+ of 40[0-9]{7} bytes' <<<"$st" || fail "a restart did not apply state_size = 384M: $st"
forced || fail "a restart with new sizes lost pay's forced-open state"
eventually journal_has resild.service 'moved 3 policies and their state' ||
	fail "the journal does not say the policies moved"
worker_ok
echo "a restart with policies = 900, state_size = 384M applied both and kept the state; the worker followed without an error"

# ---- metrics on the running daemon: the socket starts beside it
c mkdir -p /etc/systemd/system/resild-metrics.socket.d
c sh -c "printf '[Socket]\nListenStream=\nListenStream=127.0.0.1:$port\n' >/etc/systemd/system/resild-metrics.socket.d/port.conf"
c systemctl daemon-reload
pid=$(mainpid resild.service)
c systemctl enable --now resild-metrics.socket >/dev/null 2>&1 ||
	{ c systemctl status resild-metrics.socket --no-pager; fail "resild-metrics.socket did not start beside the running resild"; }
eventually sh -c "nsenter -t $leader -a curl -sf http://127.0.0.1:$port/metrics | grep -q '^resil_calls_total{policy=\"pay\"'" ||
	fail "curl does not reach /metrics through resild-metrics.socket"
[ "$(mainpid resild.service)" = "$pid" ] || fail "turning metrics on restarted resild"
forced || fail "turning metrics on lost pay's forced-open state"
worker_ok
echo "resild-metrics.socket started beside the running resild (same pid): /metrics on 127.0.0.1:$port, nothing restarted"

# ---- tenants: a directory created at the start, a reload that applies
c groupadd resild-t1
c groupadd resild-t2
c systemctl start resild@t1.socket resild@t2.socket || fail "resild@t1.socket, resild@t2.socket"
c resilctl --socket /run/resild/t1.sock status | grep -q '^config     /etc/resild/tenants/t1' ||
	fail "the tenant resild@t1 did not start on its own directory"
c resilctl --socket /run/resild/t2.sock list >/dev/null || fail "the tenant resild@t2 does not answer"
c test -d /etc/resild/tenants/t1 || fail "no /etc/resild/tenants/t1"
c sh -c 'printf "[policy tpol]\nbulkhead.max = 2\n" >/etc/resild/tenants/t1/a.conf'
c systemctl reload resild@t1.service || { c journalctl -u resild@t1.service --no-pager | tail; fail "systemctl reload resild@t1"; }
c resilctl --socket /run/resild/t1.sock list | grep -q tpol || fail "the tenant's reload did not apply"
echo "resild@t1 started on /etc/resild/tenants/t1, created for it; systemctl reload resild@t1 applies"

# ---- upgrade while the worker decides, the socket disabled by the admin
c systemctl disable resild.socket >/dev/null 2>&1
pid=$(mainpid resild.service)
t1=$(mainpid resild@t1.service)
t2=$(mainpid resild@t2.service)
n=$(decisions)
c dpkg -i "/mnt/pkg/v2/resild_$ver+b1.deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i of $ver+b1"; }
c dpkg-query -W -f='${Version}' resild | grep -qx "$ver+b1" || fail "the upgrade did not install $ver+b1"
new=$(mainpid resild.service)
[ "$new" != "$pid" ] && [ "$new" != 0 ] || fail "the upgrade left the old resild running (pid $pid)"
c readlink "/proc/$new/exe" | grep -qx /usr/sbin/resild || fail "resild runs $(c readlink /proc/$new/exe), not the new /usr/sbin/resild"
for t in t1:$t1 t2:$t2; do
	tp=$(mainpid "resild@${t%%:*}.service")
	[ "$tp" != "${t#*:}" ] && [ "$tp" != 0 ] || fail "the upgrade did not restart resild@${t%%:*}"
	c readlink "/proc/$tp/exe" | grep -qx /usr/sbin/resild || fail "resild@${t%%:*} runs an old binary"
done
c resilctl status | grep -q "^resild [^,]*, pid $new, " || fail "resilctl status is not the new daemon's"
forced || fail "the upgrade lost pay's forced-open state"
c resilctl --socket /run/resild/t1.sock list | grep -q tpol || fail "the upgrade lost the tenant's policy"
[ "$(c systemctl is-enabled resild.socket)" = disabled ] || fail "the upgrade enabled the disabled resild.socket again"
worker_ok
echo "the upgrade to $ver+b1 restarted resild and both tenants on the new binary while the worker decided ($(decisions) decisions, 0 errors; $n before); state kept; resild.socket stays disabled"
c sh -c 'kill -TERM $(cat /tmp/w.pid)'
c systemctl enable resild.socket >/dev/null 2>&1

# ---- a configuration error at a fresh start: 78, not restarted
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
echo "a configuration error at a fresh start exits 78 and is not restarted"
# a socket that is stopped (or failed): resilctl says what to run
c systemctl stop resild.socket
out=$(c resilctl list 2>&1)
grep -q 'nothing listens on /run/resild/control.sock: resild.socket is stopped or failed' <<<"$out" &&
	grep -q 'systemctl reset-failed resild.socket resild.service; systemctl start resild.socket' <<<"$out" ||
	fail "resilctl on a stopped socket does not say what to run: $out"
echo "resilctl on a stopped socket names the commands that start it again"
# what the test made as the administrator goes; the rest is the package's
c rm -r /etc/resild/10-filed.conf /etc/resild/20-up.conf /etc/resild/tenants/t1/a.conf \
	/etc/systemd/system/resild-metrics.socket.d
c systemctl reset-failed resild.service
c systemctl start resild.socket

# ---- removal stops every tenant; the library stays
c apt-get remove -y resild >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get remove resild"; }
c pgrep -x resild >/dev/null && fail "resild processes run after apt-get remove: $(c pgrep -a -x resild)"
for u in resild.socket resild.service resild-metrics.socket resild-metrics.service resild@t1.service resild@t2.service resild@t1.socket resild@t2.socket; do
	active "$u" && fail "$u is active after apt-get remove"
done
c /tmp/w || fail "a program linked to libresil does not run after resild's removal"
echo "apt-get remove stopped resild and both tenants; libresil stays for the programs linked to it"

# ---- purge: nothing the package made is left
c apt-get purge -y resild >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get purge resild"; }
left=$(c sh -c 'ls -d /etc/resild /run/resild 2>/dev/null;
	find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
		/var/lib/systemd/deb-systemd-helper-masked -name "*resild*" 2>/dev/null;
	dpkg-query -W -f="\${Status}\n" resild 2>/dev/null | grep -v "not-installed"')
[ -z "$left" ] || fail "apt-get purge left: $left"
echo "apt-get purge left nothing of resild's (the user and group resild stay, as Debian keeps system users)"
echo "systemd: install, activation, restarts, broken files, new sizes, metrics, tenants, upgrade, exit 78, remove and purge all as documented"

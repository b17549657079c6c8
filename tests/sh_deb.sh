#!/usr/bin/env bash
# label: integration
# The Debian package: `cpack -G DEB` from the build, then `dpkg -i` on this
# machine: the maintainer scripts create the resild user and group and
# /run/resild and /etc/resild; the units sit in /usr/lib/systemd/system and
# start /usr/sbin/resild; `resild --check-config` passes on the installed
# configuration directory; the installed resild serves the installed
# resilctl; `dpkg --purge` removes it all again. Runs as root on a build
# configured for /usr (run.sh's); skipped (77) otherwise, and in sanitized
# builds, whose binaries need the sanitizer runtime.
set -eu # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${BIN:?}"
skip() { echo "skipped: $*"; exit 77; }
grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" && skip "sanitized build"
grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$BIN/CMakeCache.txt" ||
	skip "the build is not configured with -DCMAKE_INSTALL_PREFIX=/usr"
[ "$(id -u)" = 0 ] || skip "dpkg -i needs root"
command -v cpack >/dev/null && command -v dpkg >/dev/null || skip "no cpack or dpkg"
fail() { echo "FAIL: $*"; exit 1; }

# one package test at a time on this machine (two suites side by side)
exec 9>/var/lock/resil-sh-deb.lock
flock 9
# dpkg with its lock taken by someone else (an apt-get elsewhere) fails at
# once: try again while that is the reason, up to a minute
dpkg_retry() {
	local out
	for _ in $(seq 60); do
		out=$(dpkg "$@" 2>&1) && return 0
		grep -q "lock" <<<"$out" || { echo "$out"; return 1; }
		sleep 1
	done
	echo "$out"
	return 1
}

tmp=$(mktemp -d)
pid=
was_installed=$(dpkg-query -W -f='${Status}' resil 2>/dev/null | grep -c "ok installed" || true)
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ "$was_installed" = 0 ] && dpkg_retry --purge resil >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$tmp" && cpack -G DEB --config "$BIN/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) ||
	{ cat "$tmp/cpack.log"; fail "cpack"; }
deb=$(ls "$tmp"/pkg/resil_*.deb)
echo "built $(basename "$deb")"
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ./usr/sbin/resild ./usr/bin/resilctl ./usr/include/resil.h \
	./usr/lib/systemd/system/resild.service ./usr/lib/systemd/system/resild.socket \
	./usr/lib/systemd/system/resild-metrics.socket \
	./usr/lib/sysusers.d/resild.conf ./usr/lib/tmpfiles.d/resild.conf; do
	grep -q " $f\$" "$tmp/contents" || fail "$f is not in the package"
done
dpkg-deb -I "$deb" | grep -q "Depends:.*liburing" || fail "no shared-library dependencies"

dpkg_retry -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
getent passwd resild >/dev/null || fail "postinst did not create the user resild"
getent group resild >/dev/null || fail "postinst did not create the group resild"
[ -d /run/resild ] && [ -d /etc/resild ] || fail "postinst did not create /run/resild, /etc/resild"
grep -q '^ExecStart=/usr/sbin/resild ' /usr/lib/systemd/system/resild.service ||
	fail "the installed unit does not start /usr/sbin/resild"
/usr/sbin/resild --version | grep -q "^resild $(/usr/bin/resilctl --version | awk '{print $2}') " ||
	fail "resild and resilctl versions differ"
/usr/sbin/resild --check-config || fail "resild --check-config on the installed /etc/resild"

# the installed daemon, by hand (no systemd here), serves the installed CLI
/usr/sbin/resild --foreground --socket "$tmp/sock" 2>"$tmp/resild.log" &
pid=$!
for _ in $(seq 100); do
	/usr/bin/resilctl --socket "$tmp/sock" create deb_check 'bulkhead.max = 2' >/dev/null 2>&1 && break
	sleep 0.1
done
/usr/bin/resilctl --socket "$tmp/sock" list | grep -q deb_check || fail "the installed resild does not serve"
kill "$pid"
wait "$pid" || true
pid=

if [ "$was_installed" = 0 ]; then
	dpkg_retry --purge resil >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg --purge"; }
	[ ! -e /usr/sbin/resild ] || fail "dpkg --purge left /usr/sbin/resild"
	[ ! -e /usr/lib/systemd/system/resild.service ] || fail "dpkg --purge left the unit"
fi
echo "the .deb installs, creates its user and directories, serves, and purges"

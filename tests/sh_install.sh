#!/usr/bin/env bash
# label: integration build
# Link the library the usual way: `cmake --install` into a fresh prefix
# puts resil.h, libresil.so (versioned soname, symbol versions), libresil.a,
# resil.pc, resild, resilctl and the systemd units in place, and
# `cc app.c $(pkg-config --cflags --libs resil)` builds a program that runs
# (shared and static).
set -euo pipefail
: "${BIN:?}" "${SRC:?}"
if grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" 2>/dev/null; then
	echo "sanitized build: an application would need the sanitizer runtime; skipped"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# DESTDIR, not --prefix: the units name the configured prefix's resild
root=$tmp/root
cfg_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BIN/CMakeCache.txt")
prefix=$root$cfg_prefix

DESTDIR=$root cmake --install "$BIN" >"$tmp/install.log"
# nothing is written outside the prefix, whatever the prefix: an install
# into a user's directory needs no root and leaves the system alone
cmake --install "$BIN" --prefix "$tmp/user" >"$tmp/user.log"
outside=$(sed -n 's/^-- \(Installing\|Up-to-date\): //p' "$tmp/user.log" | { grep -v "^$tmp/user/" || true; })
[ -z "$outside" ] || { echo "FAIL: cmake --install --prefix $tmp/user wrote outside it:"; echo "$outside"; exit 1; }
[ -e "$tmp/user/lib/systemd/system/resild.service" ] || { echo "FAIL: no units under $tmp/user/lib/systemd/system"; exit 1; }
echo "cmake --install --prefix DIR writes only under DIR (units in DIR/lib/systemd/system)"
libdir=$(dirname "$(find "$prefix" -name resil.pc | head -n1)")/..
for f in include/resil.h sbin/resild bin/resilctl; do
	[ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# units, sysusers and tmpfiles under the prefix (PREFIX/lib/...: where
# systemd reads them for /usr and /usr/local)
sd=$prefix/lib
for f in systemd/system/resild.service systemd/system/resild.socket \
	systemd/system/resild@.service systemd/system/resild@.socket \
	systemd/system/resild-metrics.socket sysusers.d/resild.conf \
	tmpfiles.d/resild.conf; do
	[ -e "$sd/$f" ] || { echo "FAIL: $sd/$f not installed"; exit 1; }
done
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$sd/systemd/system/resild.service")
[ -x "$root$exe" ] || { echo "FAIL: the unit's ExecStart=$exe is not the installed resild"; exit 1; }
echo "units in $sd/systemd/system start $exe, which is installed"
# the nginx module, where the build made one: where nginx looks (Debian:
# PREFIX/lib/nginx/modules) and its load_module snippet
if [ -e "$BIN/nginx/build/ngx_http_resil_module.so" ]; then
	for f in lib/nginx/modules/ngx_http_resil_module.so \
		share/nginx/modules-available/mod-http-resil.conf; do
		[ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
	done
	echo "the nginx module in $prefix/lib/nginx/modules, its snippet in share/nginx/modules-available"
fi
# the soname's major is the build's (libresil.so.N), and so is the
# symbol node's (RESIL_N.M)
so=$(find "$prefix" -name 'libresil.so.[0-9]*' -type f | head -n1)
[ -n "$so" ] || { echo "FAIL: no libresil.so.N"; exit 1; }
[ -n "$(find "$prefix" -name 'libresil.a')" ] || { echo "FAIL: no libresil.a"; exit 1; }
soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
major=${soname#libresil.so.}
[[ "$major" =~ ^[0-9]+$ ]] && [ -e "$(dirname "$so")/$soname" ] || { echo "FAIL: soname $soname"; exit 1; }
# every exported symbol is versioned RESIL_N.M and public (resil_*, no resil_priv_*)
exports=$(objdump -T "$so" | grep -E ' DF \.text' | awk '{print $(NF-1), $NF}')
if echo "$exports" | grep -Ev "^RESIL_$major\\.[0-9]+ resil_" | grep -q .; then
	echo "FAIL: unexpected exports:"; echo "$exports" | grep -Ev "^RESIL_$major\\.[0-9]+ resil_"; exit 1
fi
if echo "$exports" | grep -q 'resil_priv_'; then echo "FAIL: private symbols exported"; exit 1; fi
echo "$soname exports $(echo "$exports" | wc -l) functions, all RESIL_$major.M"

export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name resil.pc | head -n1)")
cc -std=c11 -Wall -Werror "$SRC/examples/link_example.c" $(pkg-config --cflags --libs resil) \
	-Wl,-rpath,"$(dirname "$so")" -o "$tmp/app"
out=$("$tmp/app" --embedded)
[ "$out" = "payments: admitted" ] || { echo "FAIL: shared build printed '$out'"; exit 1; }
cc -std=c11 -Wall -Werror "$SRC/examples/link_example.c" $(pkg-config --cflags resil) \
	-static-libgcc "$(find "$prefix" -name libresil.a)" $(pkg-config --libs-only-l --static resil | sed 's/-lresil//') \
	-o "$tmp/app-static"
out=$("$tmp/app-static" --embedded)
[ "$out" = "payments: admitted" ] || { echo "FAIL: static build printed '$out'"; exit 1; }
echo "pkg-config build runs, shared and static"

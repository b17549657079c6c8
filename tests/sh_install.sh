#!/usr/bin/env bash
# label: integration
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
# DESTDIR, not --prefix: the units name the configured prefix's resild,
# and outside /usr they go to /etc, which --prefix would not move
root=$tmp/root
cfg_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BIN/CMakeCache.txt")
prefix=$root$cfg_prefix

DESTDIR=$root cmake --install "$BIN" >"$tmp/install.log"
libdir=$(dirname "$(find "$prefix" -name resil.pc | head -n1)")/..
for f in include/resil.h sbin/resild bin/resilctl; do
	[ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# units, sysusers and tmpfiles where systemd reads them
if [ "$cfg_prefix" = /usr ]; then sd=$root/usr/lib; else sd=$root/etc; fi
for f in systemd/system/resild.service systemd/system/resild.socket \
	systemd/system/resild@.service systemd/system/resild@.socket \
	systemd/system/resild-metrics.socket sysusers.d/resild.conf \
	tmpfiles.d/resild.conf; do
	[ -e "$sd/$f" ] || { echo "FAIL: $sd/$f not installed"; exit 1; }
done
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$sd/systemd/system/resild.service")
[ -x "$root$exe" ] || { echo "FAIL: the unit's ExecStart=$exe is not the installed resild"; exit 1; }
echo "units in $sd/systemd/system start $exe, which is installed"
so=$(find "$prefix" -name 'libresil.so.0' | head -n1)
[ -n "$so" ] || { echo "FAIL: no libresil.so.0"; exit 1; }
[ -n "$(find "$prefix" -name 'libresil.a')" ] || { echo "FAIL: no libresil.a"; exit 1; }
soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
[ "$soname" = libresil.so.0 ] || { echo "FAIL: soname $soname"; exit 1; }
# every exported symbol is versioned RESIL_0.N and public (resil_*, no resil_priv_*)
exports=$(objdump -T "$so" | grep -E ' DF \.text' | awk '{print $(NF-1), $NF}')
if echo "$exports" | grep -Ev '^RESIL_0\.[0-9]+ resil_' | grep -q .; then
	echo "FAIL: unexpected exports:"; echo "$exports" | grep -Ev '^RESIL_0\.[0-9]+ resil_'; exit 1
fi
if echo "$exports" | grep -q 'resil_priv_'; then echo "FAIL: private symbols exported"; exit 1; fi
echo "libresil.so.0 exports $(echo "$exports" | wc -l) functions, all RESIL_0.N"

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

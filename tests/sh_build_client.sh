#!/usr/bin/env bash
# label: unit build
# libresil and resilctl build with the client's dependencies alone
# (-DRESIL_DAEMON=OFF): pkg-config is shown protobuf-c and nothing else, so
# a configure or a link that still wanted liburing, libsystemd, inih,
# hiredis or microhttpd fails here. Only the two targets are built, -O0.
set -euo pipefail
src=${SRC:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pc=$(pkg-config --variable=pcfiledir libprotobuf-c 2>/dev/null) || {
	echo "skip: no libprotobuf-c.pc"
	exit 77
}
mkdir "$tmp/pc"
cp "$pc/libprotobuf-c.pc" "$tmp/pc/"
for dep in liburing libsystemd inih hiredis libmicrohttpd; do
	if PKG_CONFIG_LIBDIR="$tmp/pc" PKG_CONFIG_PATH= pkg-config --exists "$dep"; then
		echo "FAIL: the restricted pkg-config still finds $dep"
		exit 1
	fi
done
if ! PKG_CONFIG_LIBDIR="$tmp/pc" PKG_CONFIG_PATH= cmake -S "$src" -B "$tmp/b" \
	-DRESIL_DAEMON=OFF -DCMAKE_BUILD_TYPE=Debug >"$tmp/cfg.log" 2>&1; then
	echo "FAIL: configure with -DRESIL_DAEMON=OFF and the client's dependencies only:"
	tail -30 "$tmp/cfg.log"
	exit 1
fi
if ! cmake --build "$tmp/b" -j2 --target resil resil_static resilctl >"$tmp/build.log" 2>&1; then
	echo "FAIL: building libresil and resilctl without the daemon:"
	grep -E 'error|undefined' "$tmp/build.log" | head -30
	exit 1
fi
"$tmp/b/client/resilctl" --version
for f in "$tmp/b/client/libresil.so" "$tmp/b/client/resilctl"; do
	if ldd "$f" | grep -E 'liburing|libsystemd|libinih|hiredis|microhttpd'; then
		echo "FAIL: $f links a daemon dependency"
		exit 1
	fi
done
if [ -e "$tmp/b/daemon" ]; then
	echo "FAIL: daemon/ was configured with -DRESIL_DAEMON=OFF"
	exit 1
fi
echo "ok: libresil and resilctl built with protobuf-c alone"

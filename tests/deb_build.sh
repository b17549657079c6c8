#!/usr/bin/env bash
# Build resil's Debian packages the Debian way (dpkg-buildpackage -b on a
# copy of the source tree, so nothing is written into it) once per state
# of the sources, for the tests that install them (sh_deb.sh,
# sh_systemd.sh). Prints the directory holding the .deb files.
#
#   tests/deb_build.sh            with SRC (the source tree) and BIN (the
#                                 build directory, where the packages are
#                                 kept) in the environment
#
# Two tests may ask at once: a lock serialises them and the second finds
# the packages built. Rebuilt when a file the packages are made of is
# newer than the last build.
set -eu
: "${SRC:?}" "${BIN:?}"
out=$BIN/deb
mkdir -p "$out"
exec 8>"$out/.lock"
flock 8
stamp=$out/.stamp
if [ -f "$stamp" ] && ls "$out"/resild_*.deb >/dev/null 2>&1 &&
	[ -z "$(find "$SRC/CMakeLists.txt" "$SRC/client" "$SRC/shm" "$SRC/daemon" "$SRC/proto" "$SRC/php" "$SRC/nginx" \
		"$SRC/systemd" "$SRC/debian" "$SRC/docs/man" -newer "$stamp" -print -quit)" ]; then
	echo "$out"
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
# the files of the tree (tracked, and new ones not ignored), as they are now
(cd "$SRC" && git ls-files -co --exclude-standard 2>/dev/null || find . -path ./build\* -prune -o -type f -print) |
	(cd "$SRC" && tar --ignore-failed-read -cf - -T -) 2>/dev/null | tar -C "$work/src" -xf -
if ! (cd "$work/src" && dpkg-buildpackage -b -uc -us -j"$(nproc)") >"$work/build.log" 2>&1; then
	tail -40 "$work/build.log" >&2
	echo "dpkg-buildpackage failed" >&2
	exit 1
fi
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
cp "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out/"
touch "$stamp"
echo "$out"

#!/usr/bin/env bash
# label: unit build
#
# sh_version.sh - one version everywhere. client/resil.h's
# RESIL_VERSION_MAJOR.MINOR.PATCH is the one written; this checks that the
# build and the packages carry it: the CMake project, resil.h's
# RESIL_VERSION_STRING (what resild --version, resilctl --version and the
# hello print), the soname libresil.so.MAJOR, the one symbol node
# RESIL_MAJOR.MINOR of libresil.map (every exported function in it),
# resil.pc, the Python package's metadata and module, and, where the tree
# has one, debian/changelog's newest entry (MAJOR.MINOR.PATCH-N) and the
# library package's symbols file (debian/libresilMAJOR.symbols: exactly
# the exported functions).
# Needs $SRC, $BIN, $RESILD, $RESILCTL (tests/CMakeLists.txt sets them).
set -euo pipefail

fail() { echo "sh_version: FAIL: $*" >&2; exit 1; }
: "${SRC:?}" "${BIN:?}" "${RESILD:?}" "${RESILCTL:?}"

part() { sed -n "s/^#define RESIL_VERSION_$1[[:blank:]]*\([0-9][0-9]*\)\$/\1/p" "$SRC/client/resil.h"; }
major=$(part MAJOR) minor=$(part MINOR) patch=$(part PATCH)
[ -n "$major" ] && [ -n "$minor" ] && [ -n "$patch" ] || fail "no RESIL_VERSION_* in resil.h"
v=$major.$minor.$patch
node=RESIL_$major.$minor

cmake_v=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BIN/CMakeCache.txt")
[ "$cmake_v" = "$v" ] || fail "CMake project version $cmake_v, resil.h $v"

for prog in "$RESILD" "$RESILCTL"; do
	out=$("$prog" --version)
	grep -qE "^[a-z]+ $v( |\$)" <<<"$out" || fail "$(basename "$prog") --version: '$out', not $v"
done

so=$BIN/client/libresil.so
[ -e "$so" ] || fail "no $so"
soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libresil.so.$major" ] || fail "soname $soname, not libresil.so.$major"
nodes=$(sed -n 's/^\(RESIL_[0-9.]*\) {$/\1/p' "$SRC/client/libresil.map")
[ "$nodes" = "$node" ] || fail "libresil.map's nodes: $(echo $nodes), not $node alone"
exports=$(objdump -T "$so" | awk '$4 == ".text" {print $(NF-1), $NF}')
[ -n "$exports" ] || fail "libresil.so exports nothing"
if grep -v "^$node resil_" <<<"$exports" | grep -q .; then
	fail "exports outside $node: $(grep -v "^$node resil_" <<<"$exports" | tr '\n' ' ')"
fi

pc=$(sed -n 's/^Version: //p' "$BIN/resil.pc")
[ "$pc" = "$v" ] || fail "resil.pc Version $pc, not $v"

py=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/python/pyproject.toml")
[ "$py" = "$v" ] || fail "python/pyproject.toml version $py, not $v"
if compgen -G "$BIN/python/resil/_resil*.so" >/dev/null; then
	mod=$(PYTHONPATH=$BIN/python /usr/bin/python3 -c 'import resil; print(resil.__version__)')
	[ "$mod" = "$v" ] || fail "resil.__version__ $mod, not $v"
fi

if [ -f "$SRC/debian/changelog" ]; then
	deb=$(head -n1 "$SRC/debian/changelog" | sed -n 's/^resil (\([^)]*\)).*/\1/p')
	[ "${deb%-*}" = "$v" ] || fail "debian/changelog's newest entry is $deb, not $v-N"
	# the library package's symbols file: the soname's, every exported
	# function in the node (the package build checks it with
	# dpkg-gensymbols -c4; this says so before a package is built)
	sym=$SRC/debian/libresil$major.symbols
	[ -f "$sym" ] || fail "no debian/libresil$major.symbols for libresil.so.$major"
	head=$(grep -v '^#' "$sym" | head -n1)
	[ "$head" = "libresil.so.$major libresil$major #MINVER#" ] ||
		fail "debian/libresil$major.symbols begins '$head'"
	listed=$(sed -n 's/^ \([^ ]*\) .*/\1/p' "$sym" | grep -v "^$node@$node\$" | sort)
	wanted=$(awk '{print $2 "@" $1}' <<<"$exports" | sort)
	[ "$listed" = "$wanted" ] || fail "debian/libresil$major.symbols and the exports differ:" \
		"$(diff <(echo "$listed") <(echo "$wanted") | grep '^[<>]' | tr '\n' ' ')"
fi

echo "sh_version: $v everywhere (soname libresil.so.$major, node $node," \
	"$(wc -l <<<"$exports") functions)"

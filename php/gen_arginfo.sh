#!/usr/bin/env bash
# Generate resil_arginfo.h from resil.stub.php with PHP's own generator,
# build/gen_stub.php of the php-dev package, and the PHP parser it needs
# from Debian's php-parser package (gen_stub.php would download one).
#
#   php/gen_arginfo.sh [OUT_DIR]     (default: beside the stub)
#
# PHP (php-cli), gen_stub.php (php-dev) and php-parser must be installed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
php=${PHP:-php}
build=$(php-config --extension-dir)/build
gen=$build/gen_stub.php
[ -f "$gen" ] || { echo "no $gen (install php-dev)" >&2; exit 77; }
parser=/usr/share/php/PhpParser
[ -d "$parser" ] || { echo "no $parser (install php-parser)" >&2; exit 77; }
# the version of the parser gen_stub.php asks for, as the directory it
# looks in beside itself
want=$(sed -n 's/^ *\$version = "\([0-9.]*\)";.*/\1/p' "$gen" | head -n1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$gen" "$work/gen_stub.php"
mkdir -p "$work/PHP-Parser-$want"
ln -s /usr/share/php "$work/PHP-Parser-$want/lib"
cp "$here/resil.stub.php" "$work/"
"$php" -n -d extension=tokenizer.so "$work/gen_stub.php" -f "$work/resil.stub.php" >/dev/null 2>"$work/err" ||
	"$php" "$work/gen_stub.php" -f "$work/resil.stub.php" >/dev/null 2>"$work/err" ||
	{ cat "$work/err" >&2; exit 1; }
cp "$work/resil_arginfo.h" "$out/resil_arginfo.h"

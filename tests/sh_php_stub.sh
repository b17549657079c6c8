#!/usr/bin/env bash
# label: unit build
# The PHP extension's arginfo (php/resil_arginfo.h) is what PHP's own
# generator (build/gen_stub.php of php-dev, with Debian's php-parser) makes
# of php/resil.stub.php today: a changed stub without a regenerated header
# fails here. Regenerate with php/gen_arginfo.sh. Skipped (77) without
# php-dev or php-parser.
set -u
: "${SRC:?}"
command -v php >/dev/null && command -v php-config >/dev/null || { echo "skipped: no php, php-config"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$SRC/php/gen_arginfo.sh" "$tmp"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: gen_arginfo.sh failed"; exit 1; }
if ! diff -u "$SRC/php/resil_arginfo.h" "$tmp/resil_arginfo.h"; then
	echo "FAIL: php/resil_arginfo.h is not what php/resil.stub.php generates: run php/gen_arginfo.sh"
	exit 1
fi
echo "php/resil_arginfo.h is current (stub hash $(sed -n 's/.*Stub hash: //p' "$tmp/resil_arginfo.h"))"

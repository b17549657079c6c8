#!/usr/bin/env bash
# label: integration build
# The package php-resil, built with the others (tests/deb_build.sh:
# dpkg-buildpackage with debhelper and dh-php): lintian finds no error in
# it; it holds the extension in PHP's extension directory, its resil.ini
# as a conffile of every PHP version's mods-available (dh_php), enabled
# by its postinst (phpenmod) and disabled by its prerm, the PHP layer
# under /usr/share/php/Resil; it depends on PHP's extension API and on
# the library package; and the extension it ships loads in PHP with the
# library it ships beside it. Skipped (77) without dpkg-buildpackage,
# debhelper, dh-php, lintian or PHP, and in sanitized builds.
set -u # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${BIN:?}" "${SRC:?}"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" && skip "sanitized build"
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null || skip "no dpkg-buildpackage or debhelper"
command -v dh_php >/dev/null || skip "no dh-php"
command -v lintian >/dev/null || skip "no lintian"
command -v php-config >/dev/null && command -v php >/dev/null || skip "no php-dev"

pkg=$("$SRC/tests/deb_build.sh") || fail "the packages do not build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
deb=$(ls "$pkg"/php-resil_*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || fail "no php-resil package in $pkg"
echo "$(basename "$deb")"

lintian --tag-display-limit 0 "$deb" >"$tmp/lintian" 2>&1
grep -v 'running with root privileges' "$tmp/lintian"
errors=$(grep -c '^E: ' "$tmp/lintian")
warnings=$(grep -c '^W: ' "$tmp/lintian")
[ "$errors" = 0 ] || fail "lintian: $errors errors in php-resil"
[ "$warnings" = 0 ] || fail "lintian: $warnings warnings in php-resil not overridden with a reason"
echo "lintian: 0 errors, 0 warnings"

api=$(php-config --phpapi)
ver=$(php -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION;')
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/c"
for f in "usr/lib/php/$api/resil.so" "etc/php/$ver/mods-available/resil.ini" \
	usr/share/php/Resil/autoload.php usr/share/php/Resil/Http/GuzzleMiddleware.php \
	usr/share/php/Resil/Http/RateLimitMiddleware.php usr/share/php/Resil/Http/ClientIp.php \
	usr/share/doc/php-resil/copyright; do
	grep -qx "./$f" "$tmp/c" || fail "php-resil lacks $f"
done
mkdir "$tmp/ctl" "$tmp/x"
dpkg-deb -e "$deb" "$tmp/ctl"
grep -qx "/etc/php/$ver/mods-available/resil.ini" "$tmp/ctl/conffiles" || fail "resil.ini is not a conffile"
grep -q 'enmod' "$tmp/ctl/postinst" || fail "the postinst enables nothing"
grep -q 'dismod' "$tmp/ctl/prerm" "$tmp/ctl/postrm" 2>/dev/null || fail "nothing disables the module on removal"
deps=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $deps"
echo "$deps" | grep -q "phpapi-$api" || fail "no dependency on phpapi-$api"
echo "$deps" | grep -q 'libresil[0-9]' || fail "no dependency on the library package"

# the shipped extension, with the shipped library, in a PHP of its own
lib=$(ls "$pkg"/libresil[0-9]*_*.deb | grep -v dbgsym | head -n1)
dpkg-deb -x "$deb" "$tmp/x"
dpkg-deb -x "$lib" "$tmp/x"
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
out=$(LD_LIBRARY_PATH="$tmp/x/usr/lib/$ma" php -n -d "extension=$tmp/x/usr/lib/php/$api/resil.so" \
	-d resil.socket="$tmp/none.sock" -r '
	$p = Resil\Policy::declare("deb", "bulkhead.max = 1");
	$p->acquire()->success();
	echo phpversion("resil"), " ", var_export(Resil\attached(), true);' 2>&1) ||
	fail "the packaged extension does not load: $out"
echo "the packaged extension loads and decides (pending, no resild): $out"
grep -q '^extension=resil.so' "$tmp/x/etc/php/$ver/mods-available/resil.ini" || fail "resil.ini loads nothing"
echo "php-resil: the extension, its ini, the PHP layer, as Debian packages PHP modules"

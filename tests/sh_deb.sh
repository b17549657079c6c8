#!/usr/bin/env bash
# label: integration build
# resil's Debian packages, built the Debian way (tests/deb_build.sh:
# dpkg-buildpackage -b with debhelper on a copy of the tree), and what
# Debian asks of them:
#   - lintian on the .changes: no error, and no warning that is not
#     overridden in debian/ with its reason;
#   - the split: resild (daemon, resilctl, units, sysusers, tmpfiles,
#     manual pages 1, 5, 8, the settings file as a conffile), the shared
#     library alone in the package named after its soname, with a shlibs
#     file, a symbols file (dpkg-gensymbols -c4 at the build: exactly the
#     exported functions) and an ldconfig trigger, libresil-dev (header,
#     .so link, .a, .pc, libresil(3)), -dbgsym packages with the debug
#     symbols; stripped binaries; compressed manual pages;
#   - resild depends on the library package only through what it links
#     (resild and resilctl link libresil statically: no dependency);
#   - the maintainer scripts pass sh -n;
#   - libnginx-mod-http-resil: the module where Debian's nginx loads
#     modules, its mod-http-resil.conf (load_module), enabled by its
#     postinst, a dependency on the nginx ABI it was built for and on the
#     library package, and nothing of its own that nginx would not load
#     (nginx -t with its load_module line, when nginx is installed).
# Installing, upgrading, removing and purging them under a real systemd is
# tests/sh_systemd.sh's. Skipped (77) without dpkg-buildpackage and
# debhelper, and in sanitized builds.
set -u # no pipefail: "X | grep -q" would fail when grep stops reading early
: "${BIN:?}" "${SRC:?}"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
grep -q '^RESIL_SANITIZE:BOOL=ON' "$BIN/CMakeCache.txt" && skip "sanitized build"
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null || skip "no dpkg-buildpackage or debhelper"
command -v lintian >/dev/null || skip "no lintian"

pkg=$("$SRC/tests/deb_build.sh") || fail "the packages do not build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ls "$pkg"/*.deb | sed 's#.*/##'

lintian --tag-display-limit 0 "$pkg"/*.changes >"$tmp/lintian" 2>&1
grep -v 'running with root privileges' "$tmp/lintian"
errors=$(grep -c '^E: ' "$tmp/lintian")
warnings=$(grep -c '^W: ' "$tmp/lintian")
[ "$errors" = 0 ] || fail "lintian: $errors errors"
[ "$warnings" = 0 ] || fail "lintian: $warnings warnings not overridden with a reason in debian/"
echo "lintian: 0 errors, 0 warnings ($(grep -c '^[IP]: ' "$tmp/lintian") informational)"

deb() { ls "$pkg"/"$1"_*.deb 2>/dev/null | head -n1; }
has() { # package file...
	local d
	d=$(deb "$1") && [ -n "$d" ] || fail "no package $1"
	shift
	dpkg-deb -c "$d" | awk '{print $6}' >"$tmp/c"
	for f; do grep -qx "./$f" "$tmp/c" || fail "$(basename "$d") lacks $f"; done
}
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
so=$(cd "$pkg" && dpkg-deb --fsys-tarfile "$(ls libresil[0-9]*_*.deb | grep -v dbgsym)" |
	tar -tf - | sed -n "s#^\./usr/lib/$ma/\(libresil\.so\.[0-9]*\)\$#\1#p")
[ -n "$so" ] || fail "no libresil.so.N in a libresilN package"
lib=libresil${so#libresil.so.}
echo "the shared library $so is in $lib"
has resild usr/sbin/resild usr/bin/resilctl lib/systemd/system/resild.service \
	lib/systemd/system/resild.socket lib/systemd/system/resild@.service \
	lib/systemd/system/resild@.socket lib/systemd/system/resild-metrics.socket \
	usr/lib/sysusers.d/resild.conf usr/lib/tmpfiles.d/resild.conf etc/resild/resild.conf \
	usr/share/man/man8/resild.8.gz usr/share/man/man5/resild.conf.5.gz \
	usr/share/man/man1/resilctl.1.gz usr/share/doc/resild/copyright
grep -q 'libresil\.so' "$tmp/c" && fail "resild ships the shared library"
has "$lib" "usr/lib/$ma/$so" usr/share/doc/"$lib"/copyright
has libresil-dev usr/include/resil.h "usr/lib/$ma/libresil.so" "usr/lib/$ma/libresil.a" \
	"usr/lib/$ma/pkgconfig/resil.pc" usr/share/man/man3/libresil.3.gz
[ -n "$(deb resild-dbgsym)" ] && [ -n "$(deb "$lib"-dbgsym)" ] || fail "no -dbgsym packages"
has libnginx-mod-http-resil usr/lib/nginx/modules/ngx_http_resil_module.so \
	usr/share/nginx/modules-available/mod-http-resil.conf
mkdir "$tmp/n" "$tmp/nx"
dpkg-deb -e "$(deb libnginx-mod-http-resil)" "$tmp/n"
dpkg-deb -x "$(deb libnginx-mod-http-resil)" "$tmp/nx"
grep -qx 'load_module modules/ngx_http_resil_module.so;' \
	"$tmp/nx/usr/share/nginx/modules-available/mod-http-resil.conf" || fail "mod-http-resil.conf"
grep -q 'modules-enabled' "$tmp/n/postinst" || fail "libnginx-mod-http-resil's postinst enables nothing"
dep=$(dpkg-deb -f "$(deb libnginx-mod-http-resil)" Depends)
grep -q "nginx-abi-" <<<"$dep" && grep -q "$lib" <<<"$dep" ||
	fail "libnginx-mod-http-resil depends on $dep"
for s in postinst prerm postrm; do sh -n "$tmp/n/$s" || fail "libnginx-mod-http-resil's $s"; done
if [ -x /usr/sbin/nginx ]; then
	# the packaged module against this tree's library, as nginx loads it
	printf 'load_module %s;\nevents {}\n' "$tmp/nx/usr/lib/nginx/modules/ngx_http_resil_module.so" \
		>"$tmp/nx/nginx.conf"
	LD_LIBRARY_PATH=$BIN/client /usr/sbin/nginx -t -q -p "$tmp/nx" -c "$tmp/nx/nginx.conf" \
		-g "error_log stderr; pid $tmp/nx/nginx.pid;" || fail "nginx does not load the packaged module"
fi

# control data: conffile, shlibs, ldconfig trigger, dependencies
mkdir "$tmp/r" "$tmp/l"
dpkg-deb -e "$(deb resild)" "$tmp/r"
dpkg-deb -e "$(deb "$lib")" "$tmp/l"
grep -qx /etc/resild/resild.conf "$tmp/r/conffiles" || fail "/etc/resild/resild.conf is not a conffile"
grep -q "^libresil ${so#libresil.so.} $lib " "$tmp/l/shlibs" || fail "no shlibs entry: $(cat "$tmp/l/shlibs")"
grep -q 'activate-noawait ldconfig' "$tmp/l/triggers" || fail "no ldconfig trigger"
grep -q "^ resil_acquire@RESIL_" "$tmp/l/symbols" || fail "no symbols file in $lib"
dpkg-deb -f "$(deb libresil-dev)" Depends | grep -q "$lib (= " || fail "libresil-dev does not depend on $lib"
for s in postinst prerm postrm; do sh -n "$tmp/r/$s" || fail "resild's $s"; done
grep -q 'deb-systemd-invoke try-restart' "$tmp/r/postinst" || fail "postinst restarts nothing on upgrade"

# stripped, with the debug symbols in -dbgsym
dpkg-deb -x "$(deb resild)" "$tmp/x"
dpkg-deb -x "$(deb "$lib")" "$tmp/x"
for f in "$tmp/x/usr/sbin/resild" "$tmp/x/usr/bin/resilctl" "$tmp/x/usr/lib/$ma/$so".* \
	"$tmp/nx/usr/lib/nginx/modules/ngx_http_resil_module.so"; do
	readelf -S "$f" | grep -q '\.symtab' && fail "$f is not stripped"
	readelf -S "$f" | grep -q '\.debug_info' && fail "$f carries debug info"
done
id=$(readelf -n "$tmp/x/usr/sbin/resild" | sed -n 's/.*Build ID: //p')
dpkg-deb -c "$(deb resild-dbgsym)" | grep -q "usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" ||
	fail "resild's debug symbols are not in resild-dbgsym"
echo "packages: resild, $lib, libresil-dev, libnginx-mod-http-resil and their -dbgsym as Debian splits them"

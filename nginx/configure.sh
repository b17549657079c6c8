#!/usr/bin/env bash
# Configure nginx's sources for this module the way Debian builds its
# libnginx-mod-* packages: nginx's own configure, run where the sources
# are, with the flags the nginx binary was configured with (conf_flags:
# --with-compat and the rest, which make the module's signature match),
# everything it writes going into BUILD (--builddir).
#
#   configure.sh NGINX_SRC BUILD MODULE_DIR CC_OPT LD_OPT
set -eu
src=$1 build=$2 module=$3 ccopt=$4 ldopt=$5
mkdir -p "$build"
cd "$src"
# shellcheck disable=SC1091
. ./conf_flags
if ! ./configure --with-cc-opt="$ccopt" --with-ld-opt="$ldopt" "${NGX_CONF_FLAGS[@]}" \
	--add-dynamic-module="$module" --builddir="$build" >"$build/configure.log" 2>&1; then
	tail -20 "$build/configure.log" >&2
	echo "nginx's configure failed: $build/configure.log" >&2
	exit 1
fi

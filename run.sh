#!/usr/bin/env bash
# resil: set up, build, and run the demo or the tests.
#
#   ./run.sh demo    install what the demo needs, build resild, resilctl
#                    and the fleet demo (with libresil.a), start resild on
#                    a private socket, run the demo, stop the daemon
#   ./run.sh test    install what the tests need, build, run every pass:
#                    the whole suite, then ASan+UBSan, TSan and libFuzzer
#   ./run.sh build   install what the tests need and build every target
#   ./run.sh bench   build and run the benchmarks (bench/run.sh)
#
# Environment: BUILD_DIR (default ./build; the sanitizer trees are
# BUILD_DIR-asan, -tsan, -fuzz), JOBS (default: nproc), RESIL_TEST_SCALE
# (long runs), RESIL_SKIP_APT=1 (never call apt-get), RESIL_TEST_SANITIZE=0,
# RESIL_TEST_TSAN=0, RESIL_TEST_FUZZ=0 (skip a pass), RESIL_CCACHE=0 (do not
# compile through ccache even when it is installed).
set -euo pipefail
cd "$(dirname "$0")"
top=$PWD
build=${BUILD_DIR:-$top/build}
jobs=${JOBS:-$(nproc)}

# What the demo needs: a compiler, CMake, and the libraries resild and
# libresil link. Nothing else is installed for it.
demo_packages=(build-essential cmake pkg-config liburing-dev libprotobuf-c-dev protobuf-c-compiler
	libsystemd-dev libinih-dev libmicrohttpd-dev libhiredis-dev libssl-dev)
# What the tests need besides: cmocka, the real programs the tests drive
# (redis-server, systemd-nspawn, strace, valgrind, promtool, the Python
# stack, PHP-FPM and nginx with nginx-dev for the module, wrk), clang for
# the fuzzers, ccache for the sanitizer trees, debhelper, dh-php and
# lintian for the Debian packages.
test_packages=(libcmocka-dev redis-server systemd valgrind strace clang libclang-rt-14-dev
	gnuplot-nox tmux gcc-multilib python3 python3-prometheus-client prometheus scdoc man-db
	bsdextrautils systemd-container ccache
	python3-dev python3-django gunicorn python3-httpx python3-pytest python3-limits python3-redis
	python3-setuptools python3-pip uwsgi-core uwsgi-plugin-python3 python3-uvicorn mypy
	php-dev php8.2-dev php8.2-cli php8.2-fpm php-parser php-guzzlehttp-guzzle php-psr-http-message
	php8.2-apcu php8.2-redis nginx nginx-core nginx-dev wrk
	debhelper lintian dh-php)

install_deps() { # package...
	[ "${RESIL_SKIP_APT:-0}" = 1 ] && return 0
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "installing: ${missing[*]}"
	local sudo=()
	[ "$(id -u)" -ne 0 ] && sudo=(sudo)
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ccache (Debian's), when installed: the sanitizer trees and a second
# run recompile nothing that did not change.
# Paths are taken relative to the tree and the build directory is not
# hashed, so a fresh clone elsewhere finds what an earlier one compiled.
launcher=()
if [ "${RESIL_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
	launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
	export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$top} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
fi

configure() { # dir cmake-args...
	local dir=$1
	shift
	cmake -S "$top" -B "$dir" -DCMAKE_INSTALL_PREFIX=/usr "${launcher[@]}" "$@" >"$dir.cmake.log" 2>&1 ||
		{ cat "$dir.cmake.log" >&2; return 1; }
}

# The plain tree: every target (and the tests) without arguments; given
# targets, those alone, configured without the tests (no cmocka needed).
build_plain() { # [target...]
	mkdir -p "$build"
	if [ $# -eq 0 ]; then
		configure "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON
		cmake --build "$build" -j "$jobs"
	else
		configure "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF
		cmake --build "$build" -j "$jobs" --target "$@"
	fi
}

case "${1:-}" in
demo)
	install_deps "${demo_packages[@]}"
	# a build tree for the tests keeps its configuration (and its tests)
	if [ -f "$build/CMakeCache.txt" ] && grep -q '^BUILD_TESTING:BOOL=ON' "$build/CMakeCache.txt"; then
		cmake --build "$build" -j "$jobs" --target demo
	else
		build_plain demo
	fi
	shift
	exec "$top/examples/run-demo.sh" "$build" "$@"
	;;
test)
	install_deps "${demo_packages[@]}" "${test_packages[@]}"
	shift
	exec "$top/tests/ci.sh" "$build" "$jobs" "${launcher[@]}" -- "$@"
	;;
build)
	install_deps "${demo_packages[@]}" "${test_packages[@]}"
	build_plain
	;;
bench)
	install_deps "${demo_packages[@]}" "${test_packages[@]}"
	build_plain
	shift
	exec "$top/bench/run.sh" "$build" "$@"
	;;
*)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

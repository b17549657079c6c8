#!/usr/bin/env bash
# resil: set up, build, and run the demo or the tests.
#
#   ./run.sh demo    install what is missing, build, start resild on a private
#                    socket, run the fleet demo, stop the daemon
#   ./run.sh test    install what is missing, build, run the whole test suite
#   ./run.sh build   install what is missing and build only
#   ./run.sh bench   build and run the benchmarks (bench/run.sh)
#
# Environment: BUILD_DIR (default ./build), JOBS (default: nproc),
# RESIL_TEST_SCALE (long runs), RESIL_SKIP_APT=1 (never call apt-get).
set -euo pipefail
cd "$(dirname "$0")"
top=$PWD
build=${BUILD_DIR:-$top/build}
jobs=${JOBS:-$(nproc)}

packages=(build-essential cmake pkg-config liburing-dev libprotobuf-c-dev protobuf-c-compiler
	libsystemd-dev libcmocka-dev libinih-dev libmicrohttpd-dev libhiredis-dev redis-server
	systemd valgrind strace clang libclang-rt-14-dev gnuplot-nox tmux gcc-multilib)

install_deps() {
	[ "${RESIL_SKIP_APT:-0}" = 1 ] && return 0
	local missing=()
	for p in "${packages[@]}"; do
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

build() {
	install_deps
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build "$build" -j "$jobs"
}

case "${1:-}" in
demo)
	build
	shift
	exec "$top/examples/run-demo.sh" "$build" "$@"
	;;
test)
	build
	shift
	cd "$build"
	exec ctest --output-on-failure -j "$jobs" "$@"
	;;
build)
	build
	;;
bench)
	build
	shift
	exec "$top/bench/run.sh" "$build" "$@"
	;;
*)
	sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

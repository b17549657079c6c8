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
	libsystemd-dev libcmocka-dev libinih-dev libmicrohttpd-dev libhiredis-dev libssl-dev redis-server
	systemd valgrind strace clang libclang-rt-14-dev gnuplot-nox tmux gcc-multilib
	python3 python3-prometheus-client prometheus scdoc man-db bsdextrautils
	systemd-container
	python3-dev python3-django gunicorn python3-httpx python3-pytest python3-limits python3-redis
	python3-setuptools python3-pip uwsgi-core uwsgi-plugin-python3 python3-uvicorn mypy
	php-dev php8.2-dev php8.2-cli php8.2-fpm php-parser php-guzzlehttp-guzzle php-psr-http-message
	php8.2-apcu php8.2-redis nginx)
# for the tests only: building the Debian packages (dpkg-buildpackage with
# debhelper, dh-php for php-resil) and checking them (lintian); nginx's
# module sources (nginx-dev: the module is built when they are there), the
# nginx it is tested in (nginx-core) and the benchmark's client (wrk)
test_packages=(debhelper lintian dh-php nginx-core nginx-dev wrk)

install_deps() {
	[ "${RESIL_SKIP_APT:-0}" = 1 ] && return 0
	local missing=()
	for p in "${packages[@]}" "$@"; do
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
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
	cmake --build "$build" -j "$jobs"
}

case "${1:-}" in
demo)
	build
	shift
	exec "$top/examples/run-demo.sh" "$build" "$@"
	;;
test)
	install_deps "${test_packages[@]}"
	# 1. the whole suite on the normal build; 2. unit and integration
	# again under ASan+UBSan; 3. the unit tests under TSan; 4. each
	# libFuzzer target for a short run (clang). RESIL_TEST_SANITIZE=0,
	# RESIL_TEST_TSAN=0, RESIL_TEST_FUZZ=0 skip 2, 3, 4. unit_adaptive is
	# left out of 3: a single-threaded simulation (nothing for TSan to
	# see) that TSan slows past its timeout. The strace-driven
	# syscall count is left out of 2 and 3 (LeakSanitizer cannot run under
	# ptrace, and the sanitizers' runtimes make syscalls of their own); the
	# benchmark smoke run too (it measures, it does not test).
	build
	shift
	(cd "$build" && ctest --output-on-failure -j "$jobs" -LE fuzz "$@")
	if [ "${RESIL_TEST_SANITIZE:-1}" = 1 ]; then
		echo "== ASan+UBSan: unit and integration tests"
		cmake -S "$top" -B "$build-asan" -DCMAKE_BUILD_TYPE=Debug -DRESIL_SANITIZE=ON >/dev/null
		cmake --build "$build-asan" -j "$jobs" >/dev/null
		(cd "$build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
			UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
			ctest --output-on-failure -j "$jobs" -L 'unit|integration' -E 'sh_bench_smoke|sh_retry_syscalls')
	fi
	if [ "${RESIL_TEST_TSAN:-1}" = 1 ]; then
		echo "== TSan: unit tests"
		cmake -S "$top" -B "$build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESIL_TSAN=ON >/dev/null
		cmake --build "$build-tsan" -j "$jobs" >/dev/null
		(cd "$build-tsan" && TSAN_OPTIONS=halt_on_error=1 \
			ctest --output-on-failure -j "$jobs" -L unit \
				-E 'sh_bench_smoke|sh_retry_syscalls|unit_adaptive')
	fi
	if [ "${RESIL_TEST_FUZZ:-1}" = 1 ]; then
		echo "== libFuzzer smoke runs"
		CC=clang CXX=clang++ cmake -S "$top" -B "$build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DRESIL_SANITIZE=ON -DRESIL_FUZZ=ON >/dev/null
		cmake --build "$build-fuzz" -j "$jobs" --target fuzzers >/dev/null
		(cd "$build-fuzz" && ctest --output-on-failure -j "$jobs" -L fuzz)
		cat "$build-fuzz"/tests/fuzz/*.summary
	fi
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

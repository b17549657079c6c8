#!/usr/bin/env bash
# ci.sh - the passes of `./run.sh test` (run.sh installs the packages and
# calls it; .ci/run calls run.sh):
#
#   plain  RelWithDebInfo, every target; every test but the fuzzers
#   asan   Debug at -O1 (ASan's own advice: the simulations run much
#          faster than at -O0), ASan+UBSan; labels unit and integration
#   tsan   TSan; label unit
#   fuzz   clang, each libFuzzer target for RESIL_FUZZ_SECONDS (10 here)
#
# Each tree is built once, and only with what its pass runs (the
# tests_LABEL targets of tests/CMakeLists.txt; the fuzzers alone in the
# fuzz tree). The sanitizer trees build while the plain pass runs its
# tests (a test mostly waits for processes it started, so the cores the
# build takes were idle), with `nice`. After the plain pass, two lanes run
# side by side: ASan+UBSan on JOBS, and TSan then the fuzzers one at a
# time (a fuzzer runs for a set time, so it takes what the ASan lane's
# waiting tests leave and lengthens nothing). Tests labelled build
# (checks of the build and the packages) and bench run in the plain pass
# only, nosan ones never under a sanitizer, notsan ones not under TSan
# (tests/CMakeLists.txt says why for each).
#
# usage: tests/ci.sh BUILD JOBS [cmake-args...] -- [ctest-args...]
# RESIL_TEST_SANITIZE=0, RESIL_TEST_TSAN=0, RESIL_TEST_FUZZ=0 skip a pass;
# RESIL_FUZZ_SECONDS sets each fuzzer's run (10: its corpus replayed, then a
# smoke of new inputs; longer runs give it more).
# The logs of the background builds are BUILD-*.build.log; a summary of
# each pass's time and result ends the output.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$1 jobs=$2
shift 2
cmake_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	cmake_args+=("$1")
	shift
done
[ $# -gt 0 ] && shift
ctest_args=("$@")

asan=$build-asan tsan=$build-tsan fuzz=$build-fuzz
summary=() failed=0
t_start=$(date +%s)

elapsed() { echo $(($(date +%s) - t_start)); }
note() { summary+=("$(printf '%-8s %4ss  %s' "$1" "$(elapsed)" "$2")"); }

configure() { # dir cmake-args...
	local dir=$1
	shift
	mkdir -p "$dir"
	cmake -S "$top" -B "$dir" -DCMAKE_INSTALL_PREFIX=/usr "${cmake_args[@]}" "$@" \
		>"$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log" >&2; return 1; }
}

pass() { # name dir ctest-args...: a pass's tests
	local name=$1 dir=$2 r
	shift 2
	echo "== $name: tests"
	(cd "$dir" && ctest --output-on-failure -j "$jobs" "$@" "${ctest_args[@]}")
	r=$?
	if [ $r = 0 ]; then
		note "$name" "passed"
	else
		note "$name" "FAILED"
		failed=1
	fi
}

# ---- the plain tree: everything, then its tests ----------------------
echo "== plain: build"
configure "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON || exit 1
cmake --build "$build" -j "$jobs" || exit 1
note build "plain tree built"

# ---- the sanitizer trees build meanwhile, in the background -----------
san() { [ "${RESIL_TEST_SANITIZE:-1}" = 1 ]; }
tsan_on() { [ "${RESIL_TEST_TSAN:-1}" = 1 ]; }
fuzz_on() { [ "${RESIL_TEST_FUZZ:-1}" = 1 ]; }
bg_build() { # dir target...: a background build; its status in DIR.built
	local dir=$1
	shift
	rm -f "$dir.built"
	(nice -n 10 cmake --build "$dir" -j "$jobs" --target "$@" >"$dir.build.log" 2>&1
	 echo $? >"$dir.built")
}
wait_built() { # dir: 0 once built, else its log
	while [ ! -f "$1.built" ]; do sleep 1; done
	[ "$(cat "$1.built")" = 0 ] && return 0
	tail -50 "$1.build.log" >&2
	return 1
}
# (a tree whose configuration fails is marked failed, so no pass waits
# for it; a mark left by an earlier run is removed first)
rm -f "$asan.built" "$tsan.built" "$fuzz.built"
(
	if san; then
		configure "$asan" -DCMAKE_BUILD_TYPE=Debug -DRESIL_SANITIZE=ON -DBUILD_TESTING=ON \
			-DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" &&
			bg_build "$asan" tests_unit_integration || echo 1 >"$asan.built"
	fi
	if tsan_on; then
		configure "$tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESIL_TSAN=ON -DBUILD_TESTING=ON &&
			bg_build "$tsan" tests_unit || echo 1 >"$tsan.built"
	fi
	if fuzz_on; then
		CC=clang CXX=clang++ configure "$fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DRESIL_SANITIZE=ON -DRESIL_FUZZ=ON -DBUILD_TESTING=ON \
			-DRESIL_FUZZ_SECONDS="${RESIL_FUZZ_SECONDS:-10}" &&
			bg_build "$fuzz" fuzzers || echo 1 >"$fuzz.built"
	fi
) &
lane=$!

pass plain "$build" -LE '^fuzz$'

# ---- two lanes: ASan+UBSan; TSan, then the fuzzers ---------------------
# The second lane runs in a subshell, one test at a time: its log and its
# summary lines go to files, shown once both lanes are done.
lane2() {
	if tsan_on; then
		if wait_built "$tsan"; then
			TSAN_OPTIONS=halt_on_error=1 \
				pass tsan "$tsan" -L '^unit$' -LE '^(build|bench|nosan|notsan)$'
		else
			note tsan "BUILD FAILED ($tsan.build.log)"
			failed=1
		fi
	fi
	if fuzz_on; then
		if wait_built "$fuzz"; then
			pass fuzz "$fuzz" -L '^fuzz$'
			cat "$fuzz"/tests/fuzz/*.summary 2>/dev/null
		else
			note fuzz "BUILD FAILED ($fuzz.build.log)"
			failed=1
		fi
	fi
	: >"$build.lane2.summary"
	[ ${#summary[@]} -gt 0 ] && printf '%s\n' "${summary[@]}" >"$build.lane2.summary"
	return $failed
}
(summary=(); failed=0; jobs=1; lane2) >"$build.lane2.log" 2>&1 &
lane2_pid=$!

if san; then
	if wait_built "$asan"; then
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
			pass asan "$asan" -L '^(unit|integration)$' -LE '^(build|bench|nosan)$'
	else
		note asan "BUILD FAILED ($asan.build.log)"
		failed=1
	fi
fi
wait "$lane2_pid" || failed=1
cat "$build.lane2.log"
[ -f "$build.lane2.summary" ] && mapfile -t -O "${#summary[@]}" summary <"$build.lane2.summary"
wait "$lane"

echo "== summary (seconds since the start, result)"
printf '%s\n' "${summary[@]}"
exit $failed

#!/usr/bin/env bash
# run-demo.sh - the fleet demo end to end: start a private resild on a
# socket in a temporary directory, wait until it answers, run fleet_demo
# against it, stop the daemon this script started (by its pid) and clean up.
#
# usage: examples/run-demo.sh [[--build] DIR] [fleet_demo options: --workers N, --short]
# The build directory defaults to $BUILD, then ./build next to the sources.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
	exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
build=${BUILD:-$src/build}
if [[ ${1:-} == --build ]]; then
	build=$2
	shift 2
elif [[ -n ${1:-} && ${1:0:1} != - ]]; then
	build=$1 # ./run.sh demo passes the build directory first
	shift
fi
resild=${RESILD:-$build/daemon/resild}
resilctl=${RESILCTL:-$build/client/resilctl}
demo=$build/examples/fleet_demo

for f in "$resild" "$demo"; do
	if [[ ! -x $f ]]; then
		echo "run-demo.sh: $f not found; build first:" >&2
		echo "  cmake -S $src -B $build && cmake --build $build -j2" >&2
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/resil-demo.XXXXXX")
sock=$tmp/resild.sock
pid=

cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# an empty configuration directory: the demo defines its own policies
mkdir "$tmp/conf.d"
"$resild" --foreground --socket "$sock" --config "$tmp/conf.d" >"$tmp/resild.log" 2>&1 &
pid=$!

# wait until the daemon answers (resilctl list), at most 10 s
answered=0
for _ in $(seq 100); do
	if ! kill -0 "$pid" 2>/dev/null; then
		break
	fi
	if [[ -S $sock ]]; then
		if [[ ! -x $resilctl ]] || "$resilctl" --socket "$sock" list >/dev/null 2>&1; then
			answered=1
			break
		fi
	fi
	sleep 0.1
done
if [[ $answered != 1 ]]; then
	echo "run-demo.sh: resild did not answer on $sock within 10 s; its log:" >&2
	cat "$tmp/resild.log" >&2
	exit 1
fi

RESIL_SOCKET=$sock "$demo" --socket "$sock" "$@"

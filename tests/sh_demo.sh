#!/usr/bin/env bash
# label: integration
# The fleet demo, short schedule, against a private resild (run-demo.sh)
# and in embedded mode: both runs complete, and the shared breaker let
# fewer calls reach the dead dependency than one breaker per process did.
set -euo pipefail

SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${BIN:-$SRC/build}
demo=$BIN/examples/fleet_demo
if [[ ! -x $demo ]]; then
	echo "sh_demo: $demo not built" >&2
	exit 1
fi

check() {
	local what=$1 out=$2 line shared perproc
	line=$(grep '^calls that reached the dead dependency: shared ' <<<"$out" || true)
	if [[ -z $line ]]; then
		echo "sh_demo: $what: no summary line in:" >&2
		echo "$out" >&2
		return 1
	fi
	shared=$(sed -E 's/.*shared ([0-9]+), per-process ([0-9]+).*/\1/' <<<"$line")
	perproc=$(sed -E 's/.*shared ([0-9]+), per-process ([0-9]+).*/\2/' <<<"$line")
	echo "sh_demo: $what: shared $shared, per-process $perproc"
	# the outage must have been seen at all, and sharing must have helped
	if ((shared < 1 || perproc <= shared)); then
		echo "sh_demo: $what: expected 1 <= shared < per-process" >&2
		echo "$out" >&2
		return 1
	fi
}

out=$("$demo" --embedded --short --workers 4)
check embedded "$out"

out=$(RESILD=${RESILD:-$BIN/daemon/resild} RESILCTL=${RESILCTL:-$BIN/client/resilctl} \
	bash "$SRC/examples/run-demo.sh" --build "$BIN" --short --workers 4)
check daemon "$out"
echo "sh_demo: ok"

#!/usr/bin/env bash
# label: unit build
# The hot path's cost, gated: instructions per operation of resil_bench's
# cases under valgrind --tool=callgrind, each within +5% (and 3
# instructions, for the smallest) of bench/callgrind.tsv. Instruction
# counts do not depend on the load or the host kind once the clock is
# fixed: RESIL_CLOCK=monotonic (one reading is a clock_gettime on a TSC
# host and a kvm-clock one alike), and under valgrind no thread has rseq
# (glibc's registration fails there), so every host takes the same path.
# A case that got cheaper passes and says so: write the new counts with
#   tests/sh_callgrind_gate.sh --write     (BIN: the build tree)
# and say why in the commit, as for any change of a case's cost.
set -euo pipefail
src=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${BIN:-$src/build}
ref=$src/bench/callgrind.tsv
bench=$bin/bench/resil_bench
[ -x "$bench" ] || { echo "skip: no $bench (benchmarks not built)"; exit 77; }
command -v valgrind >/dev/null || { echo "skip: no valgrind"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cases=$(awk -F'\t' '!/^#/ && NF >= 2 { printf "%s%s", sep, $1; sep = "," }' "$ref")
RESIL_CLOCK=monotonic valgrind --tool=callgrind --collect-atstart=no \
	--callgrind-out-file="$tmp/cg.out" "$bench" --callgrind --only "$cases" \
	--out /dev/null 2>"$tmp/valgrind.log" || { tail -20 "$tmp/valgrind.log"; exit 1; }

# each dump names its case "group|name|iters|admitted" in its desc line
for f in "$tmp"/cg.out.*; do
	awk -F': ' '
		/^desc: Trigger: Client Request: / { split($0, a, "Client Request: "); tag = a[2] }
		/^(summary|totals): / { tot = $2 }
		END {
			if (tag != "") {
				split(tag, t, "|")
				split(tot, ir, " ")
				if (t[3] > 0)
					printf "%s\t%.1f\n", t[2], ir[1] / t[3]
			}
		}' "$f"
done | sort >"$tmp/now.tsv"

if [ "${1:-}" = --write ]; then
	{
		sed -n '/^#/p' "$ref"
		cat "$tmp/now.tsv"
	} >"$tmp/ref.tsv"
	mv "$tmp/ref.tsv" "$ref"
	cat "$ref"
	exit 0
fi

awk -F'\t' '
	NR == FNR { now[$1] = $2; next }
	/^#/ || NF < 2 { next }
	{
		name = $1; was = $2 + 0
		if (!(name in now)) {
			printf "FAIL %s: not measured (renamed? bench/callgrind.tsv names it)\n", name
			bad++
			next
		}
		v = now[name] + 0
		lim = was * 1.05
		if (lim < was + 3)
			lim = was + 3
		if (v > lim) {
			printf "FAIL %s: %.1f instructions per operation, %.1f in bench/callgrind.tsv (at most %.1f)\n", name, v, was, lim
			bad++
		} else if (v < was * 0.95) {
			printf "ok   %s: %.1f, cheaper than %.1f: tests/sh_callgrind_gate.sh --write keeps it\n", name, v, was
		} else {
			printf "ok   %s: %.1f (%.1f)\n", name, v, was
		}
	}
	END { exit bad > 0 }' "$tmp/now.tsv" "$ref"

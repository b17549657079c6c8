#!/usr/bin/env bash
# label: unit bench
# The benchmarks keep building and running: bench/run.sh --smoke runs every
# part (floors, every hot path, the socket and Redis peers when they are
# there, several processes, the fleet scenarios, callgrind, plots, the
# report) in seconds, into a temporary directory. No timed assertion: only
# that each part produced its rows and that the verdicts are the expected
# ones (an admission case admits, a rejection case rejects).
set -euo pipefail

SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${BIN:-$SRC/build}
if [[ ! -x $BIN/bench/resil_bench ]]; then
	echo "sh_bench_smoke: $BIN/bench/resil_bench not built" >&2
	exit 1
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/resil-bench-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT

bash "$SRC/bench/run.sh" --smoke --build "$BIN" --out "$out" 2>"$out/log" || {
	cat "$out/log" >&2
	exit 1
}
tsv=$out/results.tsv
fail=0
need() { # group name metric
	if ! awk -F'\t' -v g="$1" -v n="$2" -v m="$3" \
		'$1 == g && $2 == n && $3 == m { found = 1 } END { exit !found }' "$tsv"; then
		echo "sh_bench_smoke: no $1/$2 $3 row" >&2
		fail=1
	fi
}
admitted() { # group name expected-fraction
	local v
	v=$(awk -F'\t' -v g="$1" -v n="$2" '$1 == g && $2 == n && $3 == "ns_op" {
		sub(/.*admitted=/, "", $8); sub(/ .*/, "", $8); print $8 }' "$tsv")
	if [[ -z $v ]] || ! awk -v v="$v" -v e="$3" 'BEGIN { d = v - e; exit !(d < 0.01 && d > -0.01) }'; then
		echo "sh_bench_smoke: $1/$2 admitted '$v', expected $3" >&2
		fail=1
	fi
}

for n in bare_call fetch_add cas clock_monotonic clock_coarse clock_cas; do
	need floor "$n" ns_op
done
for n in breaker.count100.acq_rel breaker.time.acq_rel breaker.open_reject limit.admit \
	limit.reject bulkhead.acq_rel adaptive.acq_rel shed.acq_rel stack.acq_rel \
	limit.keyed_1k.random limit.keyed_reject; do
	need resil "$n" ns_op
done
admitted resil breaker.count100.acq_rel 1
admitted resil bulkhead.acq_rel 1
admitted resil limit.admit 1
admitted resil breaker.open_reject 0
admitted resil limit.reject 0
admitted resil limit.keyed_reject 0
need mp breaker.count100.shared.p2 mops
need fleet breaker.shared dead_calls
need fleet breaker.process dead_calls
need fleet rate.all_busy.shared_r admitted_per_s
if command -v valgrind >/dev/null; then
	need resil breaker.count100.acq_rel instr_op
fi
# the in-process peers of the same run: python3-limits (a package of the
# test command), the Node libraries where bench/peers has them installed
if /usr/bin/python3 -c 'import limits' 2>/dev/null; then
	need peer limits.bare_call ns_op
	need peer limits.fixed_window ns_op
fi
if command -v node >/dev/null && [[ -d $SRC/bench/peers/node_modules/opossum ]]; then
	need peer opossum.breaker ns_op
fi
# this host's clock: the library's choice is named
if ! grep -Eq '^decision clock: (TSC|clock_gettime)' "$out/machine.txt"; then
	echo "sh_bench_smoke: machine.txt does not name the decision clock" >&2
	fail=1
fi
# the other kind of clock, in the same run, where this host has both: its
# pass ran and the report gives its column
if grep -q '^other clock: RESIL_CLOCK=' "$out/machine.txt"; then
	if ! awk -F'\t' '$1 == "resil" && $2 == "limit.admit" && $3 == "ns_op" { f = 1 }
		END { exit !f }' "$out/results_other.tsv" 2>/dev/null; then
		echo "sh_bench_smoke: no resil/limit.admit row in the other clock's pass" >&2
		fail=1
	fi
	if [[ -s $out/BENCHMARKS.md ]] &&
		! grep -q '^| target | this host.s choice: .* | RESIL_CLOCK=' "$out/BENCHMARKS.md"; then
		echo "sh_bench_smoke: the report has no column for the other clock" >&2
		fail=1
	fi
fi
# The decision clock's fallback (no usable TSC; RESIL_CLOCK=monotonic forces
# it on any host) is clock_gettime and nothing else: in instructions
# (callgrind, load-independent; the vDSO is hidden from valgrind alike in
# both loops) it adds at most a load, a branch and the conversion to the
# bare clock_gettime loop. Reading the TSC and checking a calibration it
# will not use costs 22 more.
if command -v valgrind >/dev/null; then
	RESIL_CLOCK=monotonic valgrind --tool=callgrind --collect-atstart=no \
		--callgrind-out-file="$out/clk.cg" "$BIN/bench/resil_bench" --callgrind --smoke \
		--only floor/clock_monotonic,floor/clock_fast --out /dev/null 2>>"$out/log" || true
	declare -A ins=()
	for f in "$out"/clk.cg.*; do
		[[ -e $f ]] || continue
		read -r name v < <(awk -F': ' '
			/^desc: Trigger: Client Request: / { split($0, a, "Client Request: "); tag = a[2] }
			/^totals: / { tot = $2 }
			END { split(tag, t, "|"); if (t[3] > 0) printf "%s %d\n", t[2], tot / t[3] }' "$f")
		ins[$name]=$v
	done
	if [[ -z ${ins[clock_monotonic]:-} || -z ${ins[clock_fast]:-} ]]; then
		echo "sh_bench_smoke: no instruction counts for the clock floors" >&2
		fail=1
	elif ((ins[clock_fast] - ins[clock_monotonic] > 8)); then
		echo "sh_bench_smoke: the decision clock's fallback costs ${ins[clock_fast]} instructions" \
			"per reading against ${ins[clock_monotonic]} for clock_gettime" >&2
		fail=1
	fi
fi
if grep -q '^smoke: 1' "$out/machine.txt" &&
	{ [[ -s $out/BENCHMARKS.md ]] || ! command -v python3 >/dev/null; }; then
	:
else
	echo "sh_bench_smoke: no report" >&2
	fail=1
fi
if ((fail)); then
	cat "$out/log" >&2
	exit 1
fi
echo "sh_bench_smoke: ok ($(grep -vc '^#' "$tsv") rows)"

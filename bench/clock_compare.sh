#!/usr/bin/env bash
# clock_compare.sh - the decision clock and the GCRA before and after a
# change, in one run: bench/clock.md (bench/report.py puts it into
# BENCHMARKS.md).
#
#   bench/clock_compare.sh [BUILD-DIR] [--rev REV] [--before-build DIR] [--rounds N]
#
# Builds resil_bench at REV (default main) from `git archive` in a
# temporary directory (or takes DIR, a build of it), then measures both
# binaries on the same cases: instructions per operation under callgrind
# (load-independent), and ns/op in N rounds (default 3) that alternate the
# two binaries, each round interleaving its cases (resil_bench's method);
# the figure is the median of the rounds' medians. Writes bench/clock.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
build=$src/build
rev=main
before=
rounds=3
if [[ -n ${1:-} && ${1:0:1} != - ]]; then
	build=$1
	shift
fi
while (($#)); do
	case $1 in
	--rev) rev=$2; shift ;;
	--before-build) before=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	-h | --help)
		sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "clock_compare.sh: unknown option $1" >&2
		exit 2
		;;
	esac
	shift
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/resil-clock.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
after_bin=$build/bench/resil_bench
[[ -x $after_bin ]] || { echo "clock_compare.sh: build $after_bin first" >&2; exit 1; }
if [[ -z $before ]]; then
	mkdir -p "$tmp/src"
	git -C "$src" archive "$rev" | tar -x -C "$tmp/src"
	cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build "$tmp/build" -j2 --target resil_bench >/dev/null
	before=$tmp/build
fi
before_bin=$before/bench/resil_bench
[[ -x $before_bin ]] || { echo "clock_compare.sh: no $before_bin" >&2; exit 1; }
revname=$(git -C "$src" rev-parse --short "$rev")
here_rev=$(git -C "$src" rev-parse --short HEAD)
cases=floor/fetch_add,floor/clock_monotonic,floor/clock_fast,floor/clock_cas,floor/fast_cas
cases+=,floor/coarse_cas,resil/empty.acq_rel,resil/limit.admit,resil/limit.admit_slow_rate
cases+=,resil/limit.reject,resil/limit.keyed_1k.random
load0=$(cut -d' ' -f1-3 /proc/loadavg)

cg() { # binary label
	valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/cg.$2" \
		"$1" --callgrind --only "$cases" --out /dev/null 2>/dev/null || true
	for f in "$tmp"/cg."$2".*; do
		awk -F': ' -v v="$2" '
			/^desc: Trigger: Client Request: / { split($0, a, "Client Request: "); tag = a[2] }
			/^totals: / { tot = $2 }
			END { split(tag, t, "|"); if (t[3] > 0) printf "%s\t%s/%s\tinstr\t%.1f\n", v, t[1], t[2], tot / t[3] }' "$f"
	done
}
{
	cg "$before_bin" before
	cg "$after_bin" after
	for ((i = 0; i < rounds; i++)); do
		for v in before after; do
			b=$before_bin
			[[ $v == after ]] && b=$after_bin
			"$b" --only "$cases" --out "$tmp/ns.tsv" 2>/dev/null
			awk -F'\t' -v v="$v" '$3 == "ns_op" && ($1 == "floor" || $1 == "resil") {
				printf "%s\t%s/%s\tns\t%s\n", v, $1, $2, $4 }' "$tmp/ns.tsv"
		done
	done
} >"$tmp/all.tsv"
load1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp/all.tsv" "$here/clock.md" "$revname" "$here_rev" "$load0" "$load1" \
	"$("$after_bin" --which-clock)" "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)" "$rounds" <<'PY'
import statistics, sys, datetime
path, out, rb, ra, l0, l1, which, cs, rounds = sys.argv[1:]
d = {}
for line in open(path):
    v, case, kind, x = line.rstrip("\n").split("\t")
    d.setdefault((case, kind, v), []).append(float(x))
def get(case, kind, v):
    x = d.get((case, kind, v))
    return statistics.median(x) if x else None
def f(x):
    return "n/a" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")
labels = [
    ("floor/fetch_add", "fetch_add (floor)"),
    ("floor/clock_monotonic", "clock_gettime(CLOCK_MONOTONIC) (floor)"),
    ("floor/clock_fast", "the decision clock"),
    ("floor/clock_cas", "clock_gettime + CAS (GCRA's floor)"),
    ("floor/fast_cas", "the decision clock + CAS"),
    ("floor/coarse_cas", "CLOCK_MONOTONIC_COARSE + CAS (coarse floor)"),
    ("resil/empty.acq_rel", "policy with no component: acquire + release"),
    ("resil/limit.admit", "GCRA admit + release"),
    ("resil/limit.admit_slow_rate", "GCRA, coarse clock: admit + release"),
    ("resil/limit.reject", "GCRA rejection"),
    ("resil/limit.keyed_1k.random", "keyed GCRA, 1k keys"),
]
L = []
w = L.append
w("## The decision clock before and after (one run)")
w("")
w(f"`bench/clock_compare.sh`, {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC: resil_bench built at "
  f"{rb} (before) and at {ra} (after), measured one after the other on this host "
  f"(clocksource {cs}; the decision clock: {which}). Instructions per operation from "
  f"callgrind (valgrind hides the vDSO: a clock_gettime counts as its glibc wrapper "
  f"only); ns/op: the median of {rounds} rounds alternating the two binaries. Load "
  f"average {l0} at the start, {l1} at the end: the ns figures move with it, the "
  f"instruction counts do not.")
w("")
w("| case | instr before | instr after | ns before | ns after |")
w("|---|---:|---:|---:|---:|")
for case, label in labels:
    w(f"| {label} | {f(get(case, 'instr', 'before'))} | {f(get(case, 'instr', 'after'))} | "
      f"{f(get(case, 'ns', 'before'))} | {f(get(case, 'ns', 'after'))} |")
cm, cf = get("floor/clock_monotonic", "ns", "after"), get("floor/clock_fast", "ns", "after")
cmb, cfb = get("floor/clock_monotonic", "ns", "before"), get("floor/clock_fast", "ns", "before")
w("")
if cm is not None and cf is not None and cmb is not None and cfb is not None:
    w(f"The decision clock minus clock_gettime, same binary and round: before "
      f"{cfb - cmb:+.1f} ns, after {cf - cm:+.1f} ns.")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY

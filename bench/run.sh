#!/usr/bin/env bash
# run.sh - every benchmark in one command, and BENCHMARKS.md from its results.
#
#   bench/run.sh [BUILD-DIR] [--smoke] [--build DIR] [--out DIR] [--no-redis] [--no-callgrind]
#                [--no-peers] [--switch-clocksource]
#
# Starts a private resild and a private redis-server (unix sockets in a
# temporary directory, stopped by their own pids at the end), runs
# resil_bench (ns/op, floors, the socket and Redis peers, multi-process
# throughput, the shared rate limit), the in-process peers (bench/peers:
# opossum and cockatiel under node, python3-limits), fleet_demo (the shared
# breaker in an outage), resil_bench again under callgrind (instructions per op), draws
# the plots with gnuplot and writes BENCHMARKS.md with bench/report.py.
#
# Results: OUT/results.tsv (group, name, metric, median, min, max, unit,
# note), OUT/machine.txt, OUT/*.png. A full run without --out writes
# bench/out/, then copies the plots to bench/ and writes BENCHMARKS.md at
# the top of the tree; with --out DIR everything, the report too, stays in
# DIR. --smoke runs every part in seconds into a temporary directory (or
# --out) and touches nothing in the tree.
#
# The cases whose cost depends on the decision clock run twice: on this
# host's clock, then on the other kind of host. By default RESIL_CLOCK
# stands in for it (the library reads clock_gettime where it would read
# the TSC, or the TSC where the kernel's clocksource is not the TSC).
# --switch-clocksource (root) makes that host for real where the kernel
# offers both kinds (a VM whose available_clocksource lists tsc and
# kvm-clock): the second pass runs with the kernel's clocksource switched
# to the other one, and the first is restored after it (and at exit).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
build=${BUILD:-$src/build}
smoke=0
out=
use_redis=1
use_cg=1
use_peers=1
custom_out=0
switch_cs=0

if [[ -n ${1:-} && ${1:0:1} != - ]]; then
	build=$1 # ./run.sh bench passes the build directory first
	shift
fi
while (($#)); do
	case $1 in
	--smoke) smoke=1 ;;
	--build) build=$2; shift ;;
	--out) out=$2; custom_out=1; shift ;;
	--no-redis) use_redis=0 ;;
	--no-callgrind) use_cg=0 ;;
	--no-peers) use_peers=0 ;;
	--switch-clocksource) switch_cs=1 ;;
	-h | --help)
		sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "run.sh: unknown option $1" >&2
		exit 2
		;;
	esac
	shift
done

bench=$build/bench/resil_bench
demo=$build/examples/fleet_demo
resild=${RESILD:-$build/daemon/resild}
resilctl=${RESILCTL:-$build/client/resilctl}
for f in "$bench" "$demo"; do
	if [[ ! -x $f ]]; then
		echo "run.sh: $f not found; build first: cmake -S $src -B $build && cmake --build $build -j2" >&2
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/resil-bench.XXXXXX")
if [[ -z $out ]]; then
	if ((smoke)); then
		out=$tmp/out
	else
		out=$here/out
	fi
fi
mkdir -p "$out"
rm -f "$out"/results.tsv "$out"/results_other.tsv "$out"/*.png "$out"/cg.out*

resild_pid=
redis_pid=
stop_pid() {
	local pid=$1
	[[ -n $pid ]] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
# the kernel's clocksource, while --switch-clocksource has it switched
cs_dir=/sys/devices/system/clocksource/clocksource0
cs_saved=
restore_clocksource() {
	[[ -n $cs_saved ]] || return 0
	echo "$cs_saved" >"$cs_dir/current_clocksource" ||
		log "could not switch the clocksource back to $cs_saved"
	cs_saved=
}
cleanup() {
	restore_clocksource
	stop_pid "$redis_pid"
	stop_pid "$resild_pid"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "run.sh: $*" >&2; }

# the machine
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kernel: $(uname -r)"
	lscpu | grep -E '^(Model name|Architecture|CPU\(s\)|Thread\(s\) per core|Hypervisor vendor|L1d cache|L2 cache|L3 cache):' || true
	cs=/sys/devices/system/clocksource/clocksource0
	echo "clocksource: $(cat $cs/current_clocksource 2>/dev/null || echo unknown) (available: $(cat $cs/available_clocksource 2>/dev/null | xargs))"
	echo "tsc flags: $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
		grep -E '^(tsc|constant_tsc|nonstop_tsc|tsc_known_freq|tsc_reliable|rdtscp)$' | xargs)"
	echo "kernel clock options: $(tr ' ' '\n' </proc/cmdline 2>/dev/null |
		grep -E '^(tsc|clocksource|notsc)(=|$)' | xargs || true)"
	echo "decision clock: $("$bench" --which-clock 2>/dev/null || echo unknown)${RESIL_CLOCK:+ (RESIL_CLOCK=$RESIL_CLOCK)}"
	echo "compiler: $(${CC:-cc} --version 2>/dev/null | head -1)"
	echo "build: $(grep -E '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2)"
	lto=$(grep -o -- '-flto[^ ]*' "$build/bench/CMakeFiles/resil_bench.dir/link.txt" \
		2>/dev/null | head -1 || true)
	echo "resil_bench linked with: ${lto:-no LTO} (libresil.a, static)"
	echo "redis: $(redis-server --version 2>/dev/null | head -1 || echo none)"
	echo "valgrind: $(valgrind --version 2>/dev/null || echo none)"
	echo "smoke: $smoke"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"

# a private resild
sock=$tmp/resild.sock
if [[ -x $resild ]]; then
	mkdir -p "$tmp/conf.d" # empty: the benchmark defines its own policies
	"$resild" --foreground --socket "$sock" --config "$tmp/conf.d" >"$tmp/resild.log" 2>&1 &
	resild_pid=$!
	up=0
	for _ in $(seq 100); do
		kill -0 "$resild_pid" 2>/dev/null || break
		if [[ -S $sock ]] && { [[ ! -x $resilctl ]] ||
			"$resilctl" --socket "$sock" list >/dev/null 2>&1; }; then
			up=1
			break
		fi
		sleep 0.1
	done
	if ((!up)); then
		log "resild did not answer; going on without it (embedded segments only). Its log:"
		cat "$tmp/resild.log" >&2 || true
		stop_pid "$resild_pid"
		resild_pid=
	fi
else
	log "no resild at $resild: embedded segments only"
fi

# a private redis-server on a unix socket, no persistence
rsock=$tmp/redis.sock
if ((use_redis)) && command -v redis-server >/dev/null; then
	redis-server --port 0 --unixsocket "$rsock" --unixsocketperm 700 --save '' \
		--appendonly no --daemonize no --logfile "$tmp/redis.log" &
	redis_pid=$!
	for _ in $(seq 100); do
		[[ -S $rsock ]] && break
		kill -0 "$redis_pid" 2>/dev/null || break
		sleep 0.1
	done
	if [[ ! -S $rsock ]]; then
		log "redis-server did not start; no Redis figures"
		stop_pid "$redis_pid"
		redis_pid=
	fi
elif ((use_redis)); then
	log "redis-server not installed (apt-get install redis-server): no Redis figures"
fi

args=(--out "$out/results.tsv")
((smoke)) && args+=(--smoke)
[[ -n $resild_pid ]] && args+=(--socket "$sock")
[[ -n $redis_pid ]] && args+=(--redis "$rsock")
log "resil_bench ${args[*]}"
"$bench" "${args[@]}"

# The other kind of host, in the same run: the cases whose cost depends on
# the decision clock, again with RESIL_CLOCK=tsc (where the CPU says its
# TSC is invariant but the kernel's clocksource is not the TSC: kvm-clock
# hosts) or RESIL_CLOCK=monotonic (where the library reads the TSC), or,
# with --switch-clocksource, with the kernel's clocksource switched to the
# other kind (tsc <-> kvm-clock) and the library choosing by itself;
# results_other.tsv, the targets' second column in BENCHMARKS.md
other=
other_env=()
if ((switch_cs)); then
	cur=$(cat "$cs_dir/current_clocksource" 2>/dev/null || true)
	pick=
	for c in $(cat "$cs_dir/available_clocksource" 2>/dev/null || true); do
		if [[ $cur == tsc && $c == kvm-clock ]] || [[ $cur == kvm-clock && $c == tsc ]]; then
			pick=$c
		fi
	done
	if [[ -n $pick ]] && echo "$pick" 2>/dev/null >"$cs_dir/current_clocksource" &&
		[[ $(cat "$cs_dir/current_clocksource") == "$pick" ]]; then
		cs_saved=$cur
		other="clocksource $pick"
	else
		log "--switch-clocksource: cannot switch from ${cur:-?} (available: $(xargs <"$cs_dir/available_clocksource" 2>/dev/null); root?): RESIL_CLOCK stands in"
	fi
fi
if [[ -z $other ]]; then
	if "$bench" --which-clock 2>/dev/null | grep -q '^TSC'; then
		other=RESIL_CLOCK=monotonic
	elif grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw constant_tsc &&
		grep -m1 '^flags' /proc/cpuinfo | grep -qw nonstop_tsc; then
		other=RESIL_CLOCK=tsc
	fi
	[[ -n $other ]] && other_env=("$other")
fi
if [[ -n $other ]]; then
	oargs=(--out "$out/results_other.tsv"
		--only "floor/,resil/empty.acq_rel,resil/breaker.count100.acq_rel,resil/breaker.open_reject,resil/bulkhead.acq_rel,resil/bulkhead.reject,resil/limit.admit,resil/limit.admit_slow_rate,resil/limit.keyed_1k.random,resil/limit.keyed_1m.random,resil/stack.acq_rel,mp/limit.admit,mp/clock_cas")
	((smoke)) && oargs+=(--smoke)
	[[ -n $resild_pid ]] && oargs+=(--socket "$sock")
	echo "other clock: $other: $(env "${other_env[@]}" "$bench" --which-clock 2>/dev/null)" \
		>>"$out/machine.txt"
	log "$other: resil_bench ${oargs[*]}"
	env "${other_env[@]}" "$bench" "${oargs[@]}" || log "the pass with $other failed"
	restore_clocksource
fi

# in-process peers, side by side in this run: opossum and cockatiel under
# node (installed from the npm registry into bench/peers/node_modules, the
# versions bench/peers/package.json pins), python3-limits (Debian)
if ((use_peers)) && command -v node >/dev/null; then
	# a smoke run (the test suite) installs nothing: it runs what is there
	if [[ ! -d $here/peers/node_modules/opossum || ! -d $here/peers/node_modules/cockatiel ]] &&
		((!smoke)) && command -v npm >/dev/null; then
		log "npm install (bench/peers: opossum, cockatiel)"
		(cd "$here/peers" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >&2) ||
			log "npm install failed: no Node.js peer figures"
	fi
	pargs=(--out "$out/results.tsv")
	((smoke)) && pargs+=(--smoke)
	log "node bench/peers/node_peers.js ${pargs[*]}"
	node "$here/peers/node_peers.js" "${pargs[@]}" || log "node peers failed"
elif ((use_peers)); then
	log "node not installed (apt-get install nodejs): no Node.js peer figures"
fi
if ((use_peers)); then
	pargs=(--out "$out/results.tsv")
	((smoke)) && pargs+=(--smoke)
	log "python3 bench/peers/limits_peer.py ${pargs[*]}"
	/usr/bin/python3 "$here/peers/limits_peer.py" "${pargs[@]}" || log "python3-limits peer failed"
fi

# the fleet in an outage: shared breaker against one per process
dargs=(--tsv "$out/results.tsv")
((smoke)) && dargs+=(--short --workers 4)
if [[ -n $resild_pid ]]; then
	dargs+=(--socket "$sock")
else
	dargs+=(--embedded)
fi
log "fleet_demo ${dargs[*]}"
"$demo" "${dargs[@]}" >"$out/fleet_demo.txt"
cat "$out/fleet_demo.txt" >&2

# instructions per operation (embedded segments: the same code as resild's),
# with RESIL_CLOCK=monotonic as tests/sh_callgrind_gate.sh and
# bench/instr_before.tsv count them: the same path on every host kind
if ((use_cg)) && command -v valgrind >/dev/null; then
	cgargs=(--callgrind)
	((smoke)) && cgargs+=(--smoke --only breaker.count100.acq_rel)
	log "valgrind --tool=callgrind resil_bench ${cgargs[*]}"
	RESIL_CLOCK=monotonic valgrind --tool=callgrind --collect-atstart=no \
		--callgrind-out-file="$out/cg.out" "$bench" "${cgargs[@]}" --out "$tmp/cg.tsv" 2>"$tmp/valgrind.log" ||
		{ log "valgrind failed:"; tail -20 "$tmp/valgrind.log" >&2; }
	# every dump names its case "group|name|iters|admitted" in its desc line
	for f in "$out"/cg.out.*; do
		[[ -e $f ]] || continue
		awk -F': ' '
			/^desc: Trigger: Client Request: / { split($0, a, "Client Request: "); tag = a[2] }
			/^(summary|totals): / { tot = $2 }
			END {
				if (tag != "") {
					n = split(tag, t, "|")
					split(tot, ir, " ")
					if (t[3] > 0)
						printf "%s\t%s\tinstr_op\t%.1f\t%.1f\t%.1f\tinstr\tcallgrind n=%s admitted=%s\n",
							t[1], t[2], ir[1] / t[3], ir[1] / t[3], ir[1] / t[3], t[3], t[4]
				}
			}' "$f" >>"$out/results.tsv"
	done
	rm -f "$out"/cg.out*
	# where the breaker's instructions go, per operation and function: a run
	# of its own (callgrind_annotate attributes the later dumps of a run to
	# main as a whole)
	RESIL_CLOCK=monotonic valgrind --tool=callgrind --collect-atstart=no \
		--callgrind-out-file="$out/cg.out" "$bench" --callgrind --only resil/breaker.count100.acq_rel --out /dev/null \
		2>>"$tmp/valgrind.log" || true
	f=$(grep -l '^desc: Trigger: Client Request: resil|breaker.count100.acq_rel|' \
		"$out"/cg.out.* 2>/dev/null | head -1 || true)
	if [[ -n $f ]] && command -v callgrind_annotate >/dev/null; then
		iters=$(sed -n 's/^desc: Trigger: Client Request: [^|]*|[^|]*|\([0-9]*\)|.*/\1/p' "$f")
		callgrind_annotate --inclusive=no "$f" 2>/dev/null |
			awk -v n="$iters" -v src="$src/" '/^ *[0-9,]+ +\([ 0-9.]+%\) +[^ ]+:[^ ]+/ {
				ir = $1; gsub(",", "", ir)
				fn = $0; sub(/^ *[0-9,]+ +\([ 0-9.]+%\) +/, "", fn); sub(/ \[.*$/, "", fn)
				if (index(fn, src) == 1)
					fn = substr(fn, length(src) + 1)
				printf "%.1f\t%s\n", ir / n, fn
			}' | head -15 >"$out/cg_breaker.tsv"
	fi
	rm -f "$out"/cg.out*
elif ((use_cg)); then
	log "valgrind not installed: no instruction counts"
fi

# policy.scope = global through Redis: accuracy, script calls, a
# per-request Redis limiter side by side, the fleet one Redis core serves
# (its own redis-server and daemons; --quick: about a minute, the phases
# shortened, the capacity calls 2,000 per fleet size). Its tables go into
# BENCHMARKS.md's "Global scope" section (report.py), its plot beside it.
cluster=$build/bench/cluster_bench
if ((use_redis)) && ((!smoke)) && [[ -x $cluster ]] && command -v redis-server >/dev/null; then
	log "cluster_bench --quick --out $out"
	"$cluster" --quick --out "$out" >"$out/cluster.md" 2>"$tmp/cluster.log" ||
		{ log "cluster_bench failed:"; tail -20 "$tmp/cluster.log" >&2; rm -f "$out/cluster.md"; }
elif ((use_redis)) && ((!smoke)); then
	log "cluster_bench not built or redis-server missing: no global-scope figures"
fi

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# plots and the report
if ! command -v python3 >/dev/null; then
	log "python3 not installed: no plots, no report (results in $out/results.tsv)"
	exit 0
fi
if command -v gnuplot >/dev/null; then
	python3 "$here/report.py" --plots "$out" || log "plot data failed"
	for p in "$here"/plot*.gp; do
		[[ -e $p ]] || continue
		gnuplot -e "outdir='$out'" "$p" || log "gnuplot $p failed"
	done
else
	log "gnuplot not installed: no plots"
fi
if ((smoke)) || ((custom_out)); then
	python3 "$here/report.py" --out "$out/BENCHMARKS.md" "$out"
	log "done: $out/results.tsv ($(grep -vc '^#' "$out/results.tsv") rows), $out/BENCHMARKS.md"
else
	cp "$out"/*.png "$here"/ 2>/dev/null || true
	cp "$out"/cluster_rate.svg "$out"/cluster_rate.csv "$here"/ 2>/dev/null || true
	python3 "$here/report.py" --out "$src/BENCHMARKS.md" "$out"
	log "done: $out/results.tsv, bench/*.png, BENCHMARKS.md"
fi

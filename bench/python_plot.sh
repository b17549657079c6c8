#!/usr/bin/env bash
# python_plot.sh - bench/python.png from the table python_bench.py --write
# put in bench/python.md (the same run): one bar per case, ns per decision
# on a log scale, the fastest loop as a tick. Grey: floors; blue: resil;
# orange: in-process peers; red: peers that ask Redis.
set -euo pipefail
cd "$(dirname "$0")"
command -v gnuplot >/dev/null || { echo "gnuplot not installed: no plot" >&2; exit 0; }
dat=$(mktemp)
trap 'rm -f "$dat"' EXIT
# "| case | median | min .. max |" rows of the first table
awk -F'|' '/^\| case/ {t = 1; next} t && /^\|---/ {next} t && !/^\|/ {exit}
	t {
		name = $2; gsub(/^ +| +$/, "", name);
		med = $3 + 0; split($4, mm, /\.\./); min = mm[1] + 0;
		c = 2; if (name ~ /Redis/) c = 3; if (name ~ /^resil/) c = 1; if (name ~ /^(floor|empty)/) c = 0;
		printf "\"%s\" %s %s %d\n", name, med, min, c
	}' python.md >"$dat"
gnuplot <<GP
set terminal pngcairo noenhanced size 1100,600 font "DejaVu Sans,10"
set output "python.png"
set title "A decision from Python, ns, log scale (bar: median of 7 loops, tick: fastest)"
set border 3
set tics nomirror
set grid ytics lc rgb "#dddddd"
set logscale y
set yrange [1:*]
set ylabel "ns per decision"
set style fill solid 0.8 border -1
set boxwidth 0.7
set xtics rotate by -35 left font ",8"
set bmargin 12
set rmargin 22
unset key
plot "$dat" using 0:2:(\$4 == 0 ? 0x999999 : (\$4 == 1 ? 0x2b7bba : (\$4 == 2 ? 0xf28e2b : 0xd7301f))):xtic(1) \
	with boxes lc rgb variable, \
	"" using 0:3 with points pt 2 ps 1.2 lc rgb "black"
GP
echo "bench/python.png"

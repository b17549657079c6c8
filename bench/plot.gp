# plot.gp - the plots of BENCHMARKS.md, from the .dat files report.py --plots
# writes next to results.tsv. Run by bench/run.sh: gnuplot -e "outdir='DIR'" plot.gp
if (!exists("outdir")) outdir = "bench/out"

set terminal pngcairo noenhanced size 900,480 font "DejaVu Sans,10"
set border 3
set tics nomirror
set grid ytics lc rgb "#dddddd"
set key top left

# cost per decision, log scale: floors, resil, round-trip peers
set output outdir."/cost.png"
set title "Cost of one decision, ns, log scale (grey: floors, blue: resil, red: round trips, faster p50)"
set rmargin 10
set bmargin 7
set logscale y
set yrange [0.1:*]
set ylabel "ns per operation"
set style fill solid 0.8 border -1
set boxwidth 0.7
set xtics rotate by -40 left
unset key
plot outdir."/cost.dat" using 0:2:($3 == 0 ? 0x999999 : ($3 == 1 ? 0x2b7bba : 0xd7301f)):xtic(1) \
	with boxes lc rgb variable notitle
unset logscale y
set xtics norotate
set rmargin
set bmargin

# several processes: shared policy vs one policy each
set output outdir."/mp.png"
set title "Aggregate decisions per second (millions, log scale), 2 CPUs"
set xlabel "processes"
set ylabel "M decisions / s"
set logscale y
set yrange [1:*]
set key outside right
set logscale x 2
set xrange [0.9:4.4]
set xtics (1, 2, 4)
set key top left
plot outdir."/mp.dat" using 1:2 with linespoints lw 2 lc rgb "#999999" title "fetch_add, one word", \
	"" using 1:3 with linespoints lw 2 dt 2 lc rgb "#999999" title "fetch_add, own line", \
	"" using 1:4 with linespoints lw 2 lc rgb "#2b7bba" title "breaker, shared", \
	"" using 1:5 with linespoints lw 2 dt 2 lc rgb "#2b7bba" title "breaker, one each", \
	"" using 1:6 with linespoints lw 2 lc rgb "#1a9641" title "bulkhead, shared", \
	"" using 1:7 with linespoints lw 2 dt 2 lc rgb "#1a9641" title "bulkhead, one each", \
	"" using 1:8 with linespoints lw 2 lc rgb "#d7301f" title "GCRA, shared", \
	"" using 1:9 with linespoints lw 2 dt 2 lc rgb "#d7301f" title "GCRA, one each"
unset xlabel
unset logscale x
unset logscale y
set key inside
set xrange [*:*]

# fleet: the outage and the rate limit
set output outdir."/fleet.png"
set terminal pngcairo noenhanced size 900,420 font "DejaVu Sans,10"
set multiplot layout 1,2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set xtics auto
set xrange [-0.7:1.7]
set yrange [0:*]
set key top right
set title "Dependency down: calls that reached it, and probes"
set xtics font ",9"
set ylabel "calls"
plot outdir."/fleet.dat" using 2:xtic(1) lc rgb "#2b7bba" title "shared breaker", \
	"" using 3 lc rgb "#d7301f" title "per-process breakers"
set title "Rate limit R = 1000/s, 4 workers"
set ylabel "admitted per second"
plot outdir."/rate.dat" using 2:xtic(1) lc rgb "#2b7bba" title "shared, R", \
	"" using 3 lc rgb "#999999" title "per process, R/N", \
	"" using 4 lc rgb "#d7301f" title "per process, R"
unset multiplot

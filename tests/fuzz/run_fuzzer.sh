#!/bin/sh
# run_fuzzer.sh FUZZER NAME CORPUS SECONDS - one libFuzzer target's run in
# the fuzz pass: its seed corpus (regression inputs included) copied to
# NAME.corpus and replayed first, then SECONDS of fuzzing. The whole log
# goes to NAME.log (shown when the run fails); one line says what the run
# reached: coverage (cov), features (ft), corpus size and execs, also
# written to NAME.summary for run.sh to print.
fuzzer=$1 name=$2 corpus=$3 seconds=$4
rm -rf "$name.corpus" && cp -r "$corpus" "$name.corpus" || exit 1
"$fuzzer" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
	"$name.corpus" >"$name.log" 2>&1
rc=$?
# "#N DONE cov: C ft: F corp: K/S ..." (or the last status line when the
# run stopped early) and "stat::number_of_executed_units: N"
last=$(grep -E '^#[0-9]+' "$name.log" | tail -n 1)
cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$name.log" | tail -n 1)
summary="$name: cov ${cov:-?} ft ${ft:-?} corpus ${corp:-?} execs ${execs:-?} in ${seconds}s, exit $rc"
printf '%s\n' "$summary" | tee "$name.summary"
if [ "$rc" -ne 0 ]; then
	tail -n 60 "$name.log"
fi
exit "$rc"

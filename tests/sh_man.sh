#!/usr/bin/env bash
# label: unit build
# The man pages (docs/man/*.scd, rendered by the build with scdoc) render
# with `man -l` without a single warning, and say what the programs do:
# every option of `resild --help` is in resild(8), every command and option of
# `resilctl --help` in resilctl(1). Skipped (77) when scdoc or man is not
# installed (run.sh installs both).
set -euo pipefail
: "${BIN:?}" "${RESILD:?}" "${RESILCTL:?}"
command -v man >/dev/null || { echo "no man: skipped"; exit 77; }
[ -d "$BIN/man" ] || { echo "man pages not built (no scdoc): skipped"; exit 77; }
fail=0
for page in resild.8 resilctl.1 resild.conf.5 libresil.3; do
	f=$BIN/man/$page
	[ -s "$f" ] || { echo "FAIL: $page not built"; fail=1; continue; }
	warn=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings=all -l "$f" 2>&1 >/dev/null)
	[ -z "$warn" ] || { echo "FAIL: $page: $warn"; fail=1; }
done
text() { MANWIDTH=200 LC_ALL=C.UTF-8 man -l "$BIN/man/$1" 2>/dev/null | col -b; }
resild8=$(text resild.8)
for opt in $("$RESILD" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
	grep -qF -- "$opt" <<<"$resild8" || { echo "FAIL: resild(8) lacks $opt"; fail=1; }
done
resilctl1=$(text resilctl.1)
for cmd in $("$RESILCTL" --help | sed -n '/^commands:/,/^$/p' | awk '/^  [a-z]/ {print $1}'); do
	grep -qE "(^| )$cmd( |,|$)" <<<"$resilctl1" || { echo "FAIL: resilctl(1) lacks $cmd"; fail=1; }
done
for opt in $("$RESILCTL" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
	grep -qF -- "$opt" <<<"$resilctl1" || { echo "FAIL: resilctl(1) lacks $opt"; fail=1; }
done
[ $fail = 0 ] && echo "4 man pages render without warnings; every option and command is documented"
exit $fail

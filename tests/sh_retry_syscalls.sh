#!/bin/bash
# label: unit nosan
#
# resil_call's success path makes no syscall: N calls run between two
# getppid() markers under strace, and nothing else may appear between the
# markers in the calling thread. Once without and once with
# timeout.interrupt (arming the watchdog is a store, not a syscall; the
# watchdog's own ticks are another thread's). Skipped without strace.
set -u
command -v strace >/dev/null || exit 77
UNIT_CALL=${BIN:-build}/tests/unit_call
[ -x "$UNIT_CALL" ] || { echo "no $UNIT_CALL" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=$((10000 * ${RESIL_TEST_SCALE:-1}))
fail=0
for mode in plain interrupt; do
	# no -f: the calling thread only
	if ! strace -o "$tmp/trace" "$UNIT_CALL" --hot-loop "$n" "$mode"; then
		echo "hot loop ($mode) failed" >&2
		exit 1
	fi
	between=$(awk '/^getppid\(/ { m++; next } m == 1 { print }' "$tmp/trace")
	markers=$(grep -c '^getppid(' "$tmp/trace")
	if [ "$markers" != 2 ]; then
		echo "$mode: expected 2 markers, saw $markers" >&2
		fail=1
	elif [ -n "$between" ]; then
		echo "$mode: syscalls on the success path of $n calls:" >&2
		echo "$between" | head -20 >&2
		fail=1
	else
		echo "$mode: $n calls, 0 syscalls"
	fi
done
exit $fail

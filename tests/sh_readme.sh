#!/bin/bash
# label: integration
#
# sh_readme.sh - what README.md and docs/configuration.md show works as
# written:
#   - README's C example (between the readme-example markers) compiles with
#     -Wall -Wextra -Werror against this build, runs against a private
#     resild, prints one summary line whose numbers add up to its 1000
#     calls and match the daemon's counters, and runs again unchanged (an
#     identical definition is allowed); without a daemon it says why and
#     exits 1;
#   - every `key = value` of docs/configuration.md's mapping tables
#     (between the mappings markers) defines a policy on that resild,
#     and every key it names is one `resilctl show` prints back;
#   - nginx's burst=5 nodelay is limit.burst = 6: six calls at once from
#     idle, the seventh rejected (embedded, no daemon involved).
# Needs $RESILD, $RESILCTL, $SRC and $BIN (tests/CMakeLists.txt sets them).
set -u

fail() { echo "sh_readme: FAIL: $*" >&2; exit 1; }

[ -x "${RESILD:-}" ] || fail "RESILD not set"
[ -x "${RESILCTL:-}" ] || fail "RESILCTL not set"
[ -f "${SRC:-}/README.md" ] || fail "SRC not set"
CONF_MD=$SRC/docs/configuration.md
[ -f "$CONF_MD" ] || fail "no $CONF_MD"
[ -d "${BIN:-}/client" ] || fail "BIN not set"
LIBDIR=$(dirname "$(find "$BIN/client" -maxdepth 1 -name 'libresil.so*' | head -n1)")
[ -n "$LIBDIR" ] && [ -e "$LIBDIR/libresil.so" ] || fail "no libresil.so under $BIN/client"

DIR=$(mktemp -d /tmp/resil-readme-XXXXXX)
SOCK=$DIR/control.sock
DPID=
cleanup() {
	if [ -n "$DPID" ]; then
		kill "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

eventually() {
	for _ in $(seq 100); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

# cc FILE OUT: as a user would, with the warnings an example must not have
# (a sanitized build's library wants its runtime first: built the same way)
san=
ldd "$LIBDIR/libresil.so" 2>/dev/null | grep -q libasan && san=-fsanitize=address,undefined
cc_app() {
	cc -std=c11 -Wall -Wextra -Werror $san -I"$SRC/client" "$1" -L"$LIBDIR" -lresil \
		-Wl,-rpath,"$LIBDIR" -o "$2"
}

# ---- the example ------------------------------------------------------
sed -n '/^<!-- readme-example: begin/,/^<!-- readme-example: end/p' "$SRC/README.md" |
	sed -e '1,/^```c$/d' -e '/^```$/,$d' >"$DIR/app.c"
grep -q 'int main' "$DIR/app.c" || fail "no example between the readme-example markers"
cc_app "$DIR/app.c" "$DIR/app" 2>"$DIR/cc.log" || {
	cat "$DIR/cc.log" >&2
	fail "the README's example does not compile"
}

# no daemon: a message and exit 1
RESIL_SOCKET=$DIR/none.sock RESIL_CONNECT_TIMEOUT_MS=500 "$DIR/app" >"$DIR/none.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "without a daemon the example exited $rc: $(cat "$DIR/none.out")"
grep -q '^resil_open: ' "$DIR/none.out" || fail "without a daemon: '$(cat "$DIR/none.out")'"

mkdir -p "$DIR/conf"
"$RESILD" --foreground --socket "$SOCK" --config "$DIR/conf" >"$DIR/resild.log" 2>&1 &
DPID=$!
eventually "$RESILCTL" --socket "$SOCK" list >/dev/null 2>&1 || {
	cat "$DIR/resild.log" >&2
	fail "resild did not answer within 10 s"
}

# the summary: "payments: S succeeded, F failed[, N rejected: WHY]..."
summary() {
	local line=$1 rest n why total
	[[ $line =~ ^payments:\ ([0-9]+)\ succeeded,\ ([0-9]+)\ failed(.*)$ ]] ||
		fail "unexpected summary: '$line'"
	S=$((S + BASH_REMATCH[1]))
	F=$((F + BASH_REMATCH[2]))
	rest=${BASH_REMATCH[3]}
	total=$((BASH_REMATCH[1] + BASH_REMATCH[2]))
	while [[ $rest =~ ^,\ ([0-9]+)\ (rejected:\ [a-z ]+)(.*)$ ]]; do
		n=${BASH_REMATCH[1]}
		why=${BASH_REMATCH[2]}
		rest=${BASH_REMATCH[3]}
		total=$((total + n))
		[ "$why" = "rejected: rate limited" ] && L=$((L + n))
	done
	[ -z "$rest" ] || fail "unexpected summary tail: '$rest' in '$line'"
	[ $total = 1000 ] || fail "the summary counts $total calls, not 1000: '$line'"
}
S=0 F=0 L=0
for run in 1 2; do
	RESIL_SOCKET=$SOCK "$DIR/app" >"$DIR/app.out" 2>"$DIR/app.err" ||
		fail "run $run: the example exited $?: $(cat "$DIR/app.err")"
	[ "$(wc -l <"$DIR/app.out")" = 1 ] || fail "run $run printed: $(cat "$DIR/app.out")"
	[ -s "$DIR/app.err" ] && fail "run $run wrote to stderr: $(cat "$DIR/app.err")"
	summary "$(cat "$DIR/app.out")"
	echo "sh_readme: run $run: $(cat "$DIR/app.out")"
done
[ $S -gt 0 ] || fail "no call succeeded"
[ $L -gt 0 ] || fail "the rate limiter rejected nothing"
# what the daemon counted is what the example printed
"$RESILCTL" --socket "$SOCK" metrics >"$DIR/metrics.txt" || fail "resilctl metrics"
count() { sed -n "s/^resil_calls_total{policy=\"payments\",outcome=\"$1\"} //p" "$DIR/metrics.txt"; }
[ "$(count success)" = $S ] || fail "resild counted $(count success) successes, the example $S"
[ "$(count failure)" = $F ] || fail "resild counted $(count failure) failures, the example $F"
[ "$(count rejected_limited)" = $L ] ||
	fail "resild counted $(count rejected_limited) rate-limited, the example $L"

# ---- the mapping tables -------------------------------------------------
sed -n '/^<!-- mappings: begin/,/^<!-- mappings: end/p' "$CONF_MD" |
	grep '^| ' | cut -d'|' -f3 | grep -o '`[a-z_.]\+ = [^`]*`' | tr -d '`' >"$DIR/maps.txt"
[ "$(wc -l <"$DIR/maps.txt")" -ge 30 ] || fail "only $(wc -l <"$DIR/maps.txt") mappings found"
i=0
while IFS= read -r cfg; do
	i=$((i + 1))
	"$RESILCTL" --socket "$SOCK" create "map$i" "$cfg" >"$DIR/create.out" 2>&1 ||
		fail "docs/configuration.md maps to '$cfg', which resild refuses: $(cat "$DIR/create.out")"
	"$RESILCTL" --socket "$SOCK" show "map$i" >"$DIR/show.out" 2>&1 || fail "show map$i"
	for key in $(echo "$cfg" | tr ';' '\n' | sed -n 's/^ *\([a-z_.]*\) = .*/\1/p'); do
		grep -q "^ *$key = " "$DIR/show.out" ||
			fail "key $key (in '$cfg') is not in the configuration resilctl shows: $(cat "$DIR/show.out")"
	done
done <"$DIR/maps.txt"
echo "sh_readme: $i mapped configurations accepted"

# ---- nginx burst=5 nodelay = limit.burst = 6 ---------------------------
cat >"$DIR/burst.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <resil.h>

int main(int argc, char **argv)
{
	resil_permit_t permit;
	resil_policy_t *p;
	resil_t *r;
	int ret, n = 0;

	(void)argc;
	ret = resil_open_embedded(&r, NULL);
	if (ret == 0)
		ret = resil_define(r, "ip", argv[1]);
	if (ret == 0)
		ret = resil_policy(r, "ip", &p);
	if (ret < 0) {
		fprintf(stderr, "%s: %s\n", strerror(-ret), resil_last_error());
		return 1;
	}
	for (int i = 0; i < 20; i++) {
		if (resil_acquire(p, &permit) != RESIL_ADMIT)
			break;
		n++;
		resil_release(p, &permit, RESIL_SUCCESS);
	}
	printf("%d\n", n);
	resil_close(r);
	return 0;
}
C
cc_app "$DIR/burst.c" "$DIR/burst" || fail "burst.c does not compile"
grep -q '`limit_req zone=ip burst=5 nodelay;` | `limit.rate = 10/s; limit.burst = 6`' \
	"$CONF_MD" || fail "docs/configuration.md no longer maps burst=5 nodelay to limit.burst = 6"
# 10/m: an interval of 6 s, so no permit comes back during the loop
n=$("$DIR/burst" 'limit.rate = 10/m; limit.burst = 6') || fail "burst check"
[ "$n" = 6 ] || fail "limit.burst = 6 admitted $n at once from idle, nginx's burst=5 admits 6"

echo "sh_readme: ok"
exit 0

#!/bin/bash
# label: integration
#
# sh_top.sh - `resilctl top` against a real resild:
#   - not a terminal: plain tables (no escape sequences), --iterations,
#     --sort, --json;
#   - in tmux (80x24): the table shows the policy, the n key sorts by name,
#     q quits and the pane's process exits (polled, 10 s at most);
#   - the terminal settings are the same after top as before, after q,
#     ^C and SIGTERM.
# Needs $RESILD and $RESILCTL (tests/CMakeLists.txt sets them) and tmux
# (skipped without it).
set -u

fail() { echo "sh_top: FAIL: $*" >&2; cleanup; exit 1; }
skip() { echo "sh_top: skipped: $*" >&2; cleanup; exit 77; }

DIR=$(mktemp -d /tmp/resil-top-XXXXXX)
SOCK=$DIR/control.sock
TMUX_SOCK=resil-top-$$ # one tmux server per session: -1 .. -4
TS=$TMUX_SOCK-1
DPID=

cleanup() {
	for n in 1 2 3 4; do tmux -L "$TMUX_SOCK-$n" kill-server >/dev/null 2>&1; done
	if [ -n "$DPID" ]; then
		kill "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

# poll "$@" (a command) every 0.1 s for up to 10 s
eventually() {
	for _ in $(seq 100); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

[ -x "${RESILD:-}" ] || fail "RESILD not set"
[ -x "${RESILCTL:-}" ] || fail "RESILCTL not set"

mkdir -p "$DIR/conf"
"$RESILD" --foreground --socket "$SOCK" --config "$DIR/conf" >"$DIR/resild.log" 2>&1 &
DPID=$!
eventually "$RESILCTL" --socket "$SOCK" list >/dev/null 2>&1 || {
	cat "$DIR/resild.log" >&2
	fail "resild did not answer within 10 s"
}
"$RESILCTL" --socket "$SOCK" create checkout-api 'breaker.window = count:20; bulkhead.max = 7; histogram = on' >/dev/null ||
	fail "create checkout-api"
"$RESILCTL" --socket "$SOCK" create aaa-first 'limit.rate = 5/s' >/dev/null || fail "create aaa-first"

# ---- not a terminal ----
out=$("$RESILCTL" --socket "$SOCK" top --iterations 2 --interval 100 </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "top --iterations 2 exited $rc: $out"
grep -q 'checkout-api' <<<"$out" || fail "plain output lacks the policy: $out"
grep -q '0/7' <<<"$out" || fail "plain output lacks in-flight/limit 0/7: $out"
[ "$(grep -c '^NAME' <<<"$out")" -eq 2 ] || fail "expected 2 tables: $out"
if grep -q $'\x1b' <<<"$out"; then fail "escape sequences when stdout is not a terminal"; fi

out=$("$RESILCTL" --socket "$SOCK" top --iterations 1 --sort name </dev/null)
first=$(awk '$1 != "NAME" && NR > 2 { print $1; exit }' <<<"$out")
[ "$first" = "aaa-first" ] || fail "--sort name: first row is '$first': $out"

out=$("$RESILCTL" --socket "$SOCK" top --iterations 1 --json </dev/null)
grep -q '"name":"checkout-api"' <<<"$out" || fail "--json lacks the policy: $out"
if [ -x /usr/bin/python3 ]; then
	/usr/bin/python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); assert any(p["name"]=="checkout-api" and p["limit"]==7 for p in d["policies"])' <<<"$out" ||
		fail "--json is not the expected JSON: $out"
fi

"$RESILCTL" --socket "$SOCK" top --sort bogus </dev/null >/dev/null 2>&1 && fail "--sort bogus accepted"

# ---- a terminal: tmux 80x24 ----
command -v tmux >/dev/null || skip "tmux not installed"
T() { tmux -L "$TS" -f /dev/null "$@"; }
pane() { T capture-pane -p -t top 2>/dev/null; }
pane_has() { pane | grep -q -- "$1"; }
gone() { ! T has-session -t top 2>/dev/null; }

T new-session -d -s top -x 80 -y 24 "$RESILCTL --socket $SOCK top" || fail "tmux new-session"
eventually pane_has 'checkout-api' || fail "the table never showed the policy: $(pane)"
pane_has 'CALLS/s' || fail "no table header: $(pane)"
pane | awk 'length($0) > 80 { bad = 1 } END { exit bad }' || fail "a line wider than 80 columns"
T send-keys -t top n
eventually pane_has 'sort: name' || fail "the n key did not sort by name: $(pane)"
T send-keys -t top q
eventually gone || fail "top did not exit within 10 s of q"

# the terminal comes back as it was: after q and after ^C
n=1
hows="q C-c"
command -v pgrep >/dev/null && hows="$hows TERM"
for how in $hows; do
	n=$((n + 1))
	TS=$TMUX_SOCK-$n
	T new-session -d -s top -x 80 -y 24 "bash --norc --noprofile" || fail "tmux new-session"
	T send-keys -t top "stty -g > $DIR/before; $RESILCTL --socket $SOCK top; stty -g > $DIR/after; echo TOP-EXITED-\$?" Enter
	eventually pane_has 'checkout-api' || fail "($how) the table never showed: $(pane)"
	if [ "$how" = TERM ]; then
		# the pane's shell runs top as its child
		shell=$(T display-message -p -t top '#{pane_pid}')
		toppid=$(pgrep -P "$shell" | head -n 1)
		[ -n "$toppid" ] || fail "(TERM) no top process under the pane's shell $shell"
		kill -TERM "$toppid"
	else
		T send-keys -t top "$how"
	fi
	eventually pane_has 'TOP-EXITED-[0-9]' || fail "($how) top did not exit within 10 s: $(pane)"
	eventually test -s "$DIR/after" || fail "($how) no terminal settings after top"
	cmp -s "$DIR/before" "$DIR/after" ||
		fail "($how) terminal settings changed: $(cat "$DIR/before") -> $(cat "$DIR/after")"
	pane_has 'CALLS/s' && fail "($how) the table stayed on the normal screen: $(pane)"
	T kill-session -t top
	rm -f "$DIR/before" "$DIR/after"
done

echo "sh_top: ok"
exit 0

#!/bin/bash
# label: integration
#
# sh_metrics.sh - the Prometheus exposition of a real resild:
#   - `resilctl metrics` parses with an independent parser (python3's
#     prometheus_client, when installed) and with `promtool check metrics`
#     (when installed), and shows what was done (a forced-open breaker);
#   - `resild --metrics-listen 127.0.0.1:PORT` serves the policies' families on
#     GET /metrics with the 0.0.4 content type, 404 elsewhere, and the very
#     same families as `resilctl metrics`, the daemon's own included (when
#     this resild has the option);
#   - every metric docs/grafana/resil.json and docs/prometheus/resil.rules.yml
#     use is a family resild serves.
# Needs $RESILD, $RESILCTL and $SRC (tests/CMakeLists.txt sets them).
set -u

fail() { echo "sh_metrics: FAIL: $*" >&2; exit 1; }

DIR=$(mktemp -d /tmp/resil-metrics-XXXXXX)
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

[ -x "${RESILD:-}" ] || fail "RESILD not set"
[ -x "${RESILCTL:-}" ] || fail "RESILCTL not set"
[ -d "${SRC:-}/docs" ] || fail "SRC not set"

PY=
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null; then
	PY=/usr/bin/python3
else
	echo "sh_metrics: note: python3-prometheus-client not installed, its parser not used" >&2
fi
PROMTOOL=$(command -v promtool || true)
[ -n "$PROMTOOL" ] || echo "sh_metrics: note: promtool not installed, not used" >&2

# check FILE: parse with every parser we have, and check what we know
check() {
	local f=$1
	grep -q '^# TYPE resil_calls_total counter$' "$f" || fail "no resil_calls_total family in $f"
	# the enum convention: every state present, 1 for the current one
	grep -q '^resil_breaker_state{policy="inventory",state="forced_open"} 1$' "$f" ||
		fail "the forced-open breaker is not in $f: $(grep breaker_state "$f")"
	[ "$(grep -c '^resil_breaker_state{policy="inventory",state="[a-z_]*"} 0$' "$f")" = 5 ] ||
		fail "inventory's other states are not all 0 in $f: $(grep breaker_state "$f")"
	grep -q '^resil_breaker_transitions_total{policy="inventory",from="closed",to="forced_open"} 1$' "$f" ||
		fail "no closed -> forced_open transition in $f: $(grep breaker_transitions "$f")"
	grep -q '^resil_limit_available_permits{policy="search"} 1$' "$f" ||
		fail "search's limiter (burst 1, idle) has not 1 permit available in $f"
	grep -q '^resil_build_info{version="[0-9][^"]*"} 1$' "$f" || fail "no resil_build_info in $f"
	# the daemon's own health, on both endpoints
	grep -q '^# TYPE resil_reloads_total counter$' "$f" || fail "no daemon health families in $f"
	grep -q '^resil_connections [0-9]' "$f" || fail "no resil_connections in $f"
	# every family has its HELP and TYPE, once
	[ -z "$(grep '^# TYPE ' "$f" | awk '{print $3}' | sort | uniq -d)" ] ||
		fail "a family is typed twice in $f"
	[ "$(grep -c '^# HELP ' "$f")" = "$(grep -c '^# TYPE ' "$f")" ] ||
		fail "HELP and TYPE lines do not pair up in $f"
	grep -q '^resil_bulkhead_max{policy="inventory"} 3$' "$f" || fail "no bulkhead max in $f"
	grep -q '^resil_call_duration_seconds_count{policy="search"} 0$' "$f" ||
		fail "no histogram for search in $f"
	grep -q '^resil_limit_dry_run_rejects_total{policy="search"} 0$' "$f" ||
		fail "no dry-run count for search's limiter in $f"
	if [ -n "$PY" ]; then
		"$PY" - "$f" <<'EOF' || fail "prometheus_client rejected $f"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
assert fams["resil_calls"].type == "counter", fams["resil_calls"].type
h = fams["resil_call_duration_seconds"]
assert h.type == "histogram"
les = [float(s.labels["le"]) for s in h.samples if s.name.endswith("_bucket")]
assert les == sorted(les) and les[-1] == float("inf"), les
pols = {s.labels["policy"] for s in fams["resil_calls"].samples}
assert {"inventory", "search"} <= pols, pols
EOF
	fi
	if [ -n "$PROMTOOL" ]; then
		"$PROMTOOL" check metrics <"$f" || fail "promtool check metrics rejected $f"
	fi
}

HTTP=0
if "$RESILD" --help 2>&1 | grep -q -- '--metrics-listen'; then
	HTTP=1
	PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 19464)
	EXTRA=(--metrics-listen "127.0.0.1:$PORT")
else
	echo "sh_metrics: note: this resild has no --metrics-listen, HTTP part not run" >&2
	EXTRA=()
fi

mkdir -p "$DIR/conf"
"$RESILD" --foreground --socket "$SOCK" --config "$DIR/conf" "${EXTRA[@]}" >"$DIR/resild.log" 2>&1 &
DPID=$!
eventually "$RESILCTL" --socket "$SOCK" list >/dev/null 2>&1 || {
	cat "$DIR/resild.log" >&2
	fail "resild did not answer within 10 s"
}
"$RESILCTL" --socket "$SOCK" create inventory 'breaker.window = count:10; bulkhead.max = 3' >/dev/null ||
	fail "create inventory"
"$RESILCTL" --socket "$SOCK" create search 'histogram = on; limit.rate = 100/s' >/dev/null ||
	fail "create search"
"$RESILCTL" --socket "$SOCK" force-open inventory >/dev/null || fail "force-open inventory"

"$RESILCTL" --socket "$SOCK" metrics >"$DIR/ctl.txt" || fail "resilctl metrics"
check "$DIR/ctl.txt"

if [ $HTTP = 1 ]; then
	eventually curl -sf -o "$DIR/http.txt" -D "$DIR/http.hdr" "http://127.0.0.1:$PORT/metrics" ||
		fail "GET /metrics on port $PORT: $(cat "$DIR/resild.log")"
	grep -qi '^content-type: text/plain; version=0.0.4' "$DIR/http.hdr" ||
		fail "content type: $(cat "$DIR/http.hdr")"
	check "$DIR/http.txt"
	# the same families on both endpoints, the daemon's own health included
	diff <(grep '^# TYPE' "$DIR/ctl.txt" | sort) <(grep '^# TYPE' "$DIR/http.txt" | sort) \
		>"$DIR/families.diff" ||
		fail "resilctl metrics (<) and GET /metrics (>) serve different families: $(cat "$DIR/families.diff")"
	# rendered from the same samples at both edges (resilctl from protocol
	# v2's samples, resild's HTTP from its own): the policies' lines are
	# the same bytes, values in the same form (0.000000, 10.000, 0.000000000)
	diff <(grep '{policy="' "$DIR/ctl.txt") <(grep '{policy="' "$DIR/http.txt") \
		>"$DIR/samples.diff" ||
		fail "resilctl metrics (<) and GET /metrics (>) write the policies' samples apart: $(cat "$DIR/samples.diff")"
	grep -q '^resil_call_duration_seconds_sum{policy="search"} 0.000000000$' "$DIR/ctl.txt" ||
		fail "resilctl metrics does not write a histogram's _sum as the exposition does: $(grep _sum "$DIR/ctl.txt")"
	# the loop's numbers reach the HTTP thread within a tick: the records
	# the two definitions took
	seen() {
		curl -sf -o "$DIR/http2.txt" "http://127.0.0.1:$PORT/metrics" &&
			[ "$(sed -n 's/^resil_records_used //p' "$DIR/http2.txt")" -ge 2 ] &&
			[ "$(sed -n 's/^resil_records_used //p' "$DIR/http2.txt")" = \
				"$(sed -n 's/^resil_records_used //p' "$DIR/ctl.txt")" ]
	}
	eventually seen || fail "GET /metrics lacks the daemon's numbers"
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/other")
	[ "$code" = 404 ] || fail "GET /other answered $code"
fi

if [ $HTTP = 1 ]; then
	# the port taken (by the first resild): a second resild still serves
	# its control socket and says why it serves no HTTP
	SOCK2=$DIR/control2.sock
	mkdir -p "$DIR/conf2"
	"$RESILD" --foreground --socket "$SOCK2" --config "$DIR/conf2" "${EXTRA[@]}" \
		>"$DIR/resild2.log" 2>&1 &
	DPID2=$!
	eventually "$RESILCTL" --socket "$SOCK2" list >/dev/null 2>&1 || {
		cat "$DIR/resild2.log" >&2
		kill $DPID2 2>/dev/null
		fail "a resild whose metrics port is taken did not serve its socket"
	}
	grep -q "cannot serve metrics on 127.0.0.1:$PORT" "$DIR/resild2.log" ||
		fail "no error about the taken port: $(cat "$DIR/resild2.log")"
	kill $DPID2
	wait $DPID2 2>/dev/null
	# a malformed address is a configuration error: 78
	"$RESILD" --foreground --socket "$DIR/control3.sock" --config "$DIR/conf2" \
		--metrics-listen nonsense >"$DIR/resild3.log" 2>&1
	rc=$?
	[ $rc = 78 ] || fail "--metrics-listen nonsense: exit $rc, want 78"
fi

# every metric the dashboard and the alert rules use is a family resild serves
for doc in "$SRC/docs/grafana/resil.json" "$SRC/docs/prometheus/resil.rules.yml"; do
	[ -f "$doc" ] || fail "no $doc"
	for m in $(grep -o 'resil_[a-z_]*' "$doc" | sed -E 's/_(bucket|sum|count)$//' | sort -u); do
		grep -q "^# TYPE $m " "$DIR/ctl.txt" || fail "$doc uses $m, which resild does not serve"
	done
done

echo "sh_metrics: ok"
exit 0

#!/bin/bash
# label: unit build
#
# sh_prom_docs.sh - the monitoring files in docs/ are usable as shipped:
#   - docs/prometheus/resil.rules.yml passes `promtool check rules`, and its
#     alerts fire (and stay quiet) as tests/prometheus/resil.rules.test.yml
#     says (`promtool test rules`);
#   - docs/grafana/resil.json is JSON with panels, and every query of every
#     panel and variable is valid PromQL (promtool checks them as rules,
#     with Grafana's $variables replaced by what Grafana would put there).
# That the metric names they use exist is checked by sh_metrics.sh against
# a real resild. Needs $SRC; skips (77) without promtool.
set -u

fail() { echo "sh_prom_docs: FAIL: $*" >&2; exit 1; }

SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
PROMTOOL=$(command -v promtool) || {
	echo "sh_prom_docs: skipped: promtool not installed (Debian package prometheus)" >&2
	exit 77
}
RULES=$SRC/docs/prometheus/resil.rules.yml
DASH=$SRC/docs/grafana/resil.json
[ -f "$RULES" ] || fail "no $RULES"
[ -f "$DASH" ] || fail "no $DASH"

DIR=$(mktemp -d /tmp/resil-promdocs-XXXXXX)
trap 'rm -rf "$DIR"' EXIT

"$PROMTOOL" check rules "$RULES" >"$DIR/check.log" 2>&1 || {
	cat "$DIR/check.log" >&2
	fail "promtool check rules $RULES"
}
(cd "$SRC/tests/prometheus" && "$PROMTOOL" test rules resil.rules.test.yml) \
	>"$DIR/test.log" 2>&1 || {
	cat "$DIR/test.log" >&2
	fail "promtool test rules tests/prometheus/resil.rules.test.yml"
}

# every alert the rules define has a unit test
for a in $(sed -n 's/^ *- alert: *//p' "$RULES"); do
	grep -q "alertname: $a\$" "$SRC/tests/prometheus/resil.rules.test.yml" ||
		fail "alert $a has no test in tests/prometheus/resil.rules.test.yml"
done

# the dashboard's queries, as recording rules promtool can parse
/usr/bin/python3 - "$DASH" "$DIR/dash.rules.yml" <<'PY' || fail "$DASH is not a usable dashboard"
import json, sys
d = json.load(open(sys.argv[1]))
exprs = []
def walk(panels):
    for p in panels:
        walk(p.get("panels", []))
        for t in p.get("targets", []):
            exprs.append(t["expr"])
panels = d.get("panels", [])
walk(panels)
assert len([p for p in panels if p.get("type") != "row"]) >= 10, "too few panels"
for v in d.get("templating", {}).get("list", []):
    q = v.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    if v.get("type") == "query" and q.startswith("label_values("):
        # label_values(EXPR, label): EXPR is a selector
        exprs.append(q[len("label_values("):q.rindex(",")])
subst = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
         "$job": ".*", "$instance": ".*", "$policy": ".*"}
with open(sys.argv[2], "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        for k, v in subst.items():
            e = e.replace(k, v)
        assert "$" not in e, "unreplaced variable in " + e
        f.write("      - record: dashboard:q%d\n        expr: %s\n" % (i, json.dumps(e)))
print("sh_prom_docs: %d dashboard queries" % len(exprs))
PY
"$PROMTOOL" check rules "$DIR/dash.rules.yml" >"$DIR/dash.log" 2>&1 || {
	cat "$DIR/dash.log" >&2
	fail "a dashboard query is not valid PromQL"
}

echo "sh_prom_docs: ok"
exit 0

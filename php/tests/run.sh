#!/usr/bin/env bash
# The extension's own tests, as PHP extensions are tested: php/tests/*.phpt
# run by PHP's run-tests.php (php-dev) with the extension built in the tree
# (RESIL_PHP_EXT), against a real resild on a private socket with a
# configuration file of its own (the owners' test reads it). ctest sets
# PHP, RESIL_PHP_EXT, RESILD, RESILCTL, SRC and BIN. Exit 77 (skipped)
# only without php or run-tests.php.
set -u
: "${RESIL_PHP_EXT:?}" "${RESILD:?}" "${RESILCTL:?}"
php=${PHP:-php}
here=$(cd "$(dirname "$0")" && pwd)
command -v "$php" >/dev/null || { echo "SKIP: no $php (apt-get install php8.2-cli)"; exit 77; }
rt=$(php-config --extension-dir 2>/dev/null)/build/run-tests.php
[ -f "$rt" ] || { echo "SKIP: no run-tests.php (apt-get install php8.2-dev)"; exit 77; }

tmp=$(mktemp -d /tmp/resil-phpt.XXXXXX)
dpid=
cleanup() {
	[ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/conf" "$tmp/t"
cat >"$tmp/conf/php.conf" <<'CONF'
[policy phpt_file]
limit.rate = 5/s
limit.burst = 5
CONF
sock=$tmp/control.sock
"$RESILD" --foreground --socket "$sock" --config "$tmp/conf" --state-size 16M --policies 256 \
	--clients 64 >"$tmp/resild.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$tmp/resild.log"; echo "FAIL: resild did not start"; exit 1; }

# the examples users copy from at least parse
for f in "$SRC"/examples/php/*.php; do
	"$php" -n -l "$f" >/dev/null || { echo "FAIL: $f does not parse"; exit 1; }
done

# the tests are copied: run-tests.php writes its .php/.out/.diff files
# beside each test
cp "$here"/*.phpt "$here"/*.inc "$tmp/t/"
export RESIL_SOCKET=$sock RESILCTL RESIL_PHP_EXT TEST_PHP_EXECUTABLE=$php NO_INTERACTION=1
export RESIL_PHP_SRC=$SRC/php/src
"$php" -n "$rt" -q --no-color -n -p "$php" -d "extension=$RESIL_PHP_EXT" -d "resil.socket=$sock" \
	--show-diff "$tmp/t" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
grep -q "^Tests passed *: *[1-9]" "$tmp/out" || { echo "FAIL: no test passed"; exit 1; }
if grep -q "^Tests failed *: *[1-9]" "$tmp/out" || [ $rc -ne 0 ]; then
	echo "resild's log:"; tail -20 "$tmp/resild.log"
	exit 1
fi
n=$(sed -n 's/^Tests passed *: *\([0-9]*\).*/\1/p' "$tmp/out")
echo "$n passed, 0 failed"

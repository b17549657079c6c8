#!/usr/bin/env bash
# Run one pytest file with Debian's interpreter against the package built
# in the build tree (PYTHONPATH, set by ctest). Exit 77 (skipped) only when
# a Python dependency is missing; pytest's "no tests collected" (5) is a
# failure, never a pass.
set -u
py=${PYTHON:-/usr/bin/python3}
test=$1
need="pytest"
case "$(basename "$test")" in
test_django*) need="pytest django gunicorn httpx" ;;
test_uwsgi*)
	need="pytest django httpx"
	if ! command -v uwsgi >/dev/null || ! [ -e /usr/lib/uwsgi/plugins/python3_plugin.so ]; then
		echo "SKIP: no uwsgi with its python3 plugin (apt-get install uwsgi-core uwsgi-plugin-python3; run.sh installs them)"
		exit 77
	fi
	;;
test_httpx*) need="pytest httpx" ;;
test_typing*) need="pytest mypy" ;;
test_asgi*) need="pytest django gunicorn uvicorn httpx" ;;
esac
for mod in $need; do
	if ! "$py" -c "import $mod" 2>/dev/null; then
		echo "SKIP: $py cannot import $mod (apt-get install python3-$mod; run.sh installs it)"
		exit 77
	fi
done
if ! "$py" -c "import resil._resil" ; then
	echo "FAIL: resil._resil does not import from PYTHONPATH=${PYTHONPATH:-}"
	exit 1
fi
cd "$(dirname "$test")"
"$py" -m pytest -q -p no:cacheprovider "$test"
rc=$?
[ $rc -eq 5 ] && { echo "FAIL: no tests collected"; exit 1; }
exit $rc

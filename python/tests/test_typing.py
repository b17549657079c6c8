"""Typing, with Debian's mypy: `mypy --strict` accepts the package itself
(its stub of the C extension included) and an application's file
(typing/user_ok.py) with no error, and sees through the decorators: the
mistakes in typing/user_bad.py are reported at their lines, which it could
not do if a decorated function became Any or a bare Callable."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BAD_LINES = {19, 20, 21, 22, 23}


def test_mypy_strict(tmp_path):
    pkg = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
    if not pkg or not os.path.isdir(os.path.join(pkg, "resil")):
        pytest.skip("PYTHONPATH (set by ctest) names no built package")
    cache = os.path.join(os.environ.get("BIN") or str(tmp_path), "mypy-cache")
    env = dict(os.environ, MYPYPATH=pkg)
    env.pop("PYTHONPATH")   # the package is checked from MYPYPATH, as a user's would be
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-color-output",
                          "--cache-dir", cache, os.path.join(pkg, "resil"),
                          os.path.join(HERE, "typing", "user_ok.py"),
                          os.path.join(HERE, "typing", "user_bad.py")],
                         env=env, cwd=tmp_path, capture_output=True, text=True)
    text = out.stdout + out.stderr
    errors = [ln for ln in text.splitlines() if ": error: " in ln]
    where = {(os.path.basename(m.group(1)), int(m.group(2)))
             for m in (re.match(r"(.*?):(\d+): error:", ln) for ln in errors) if m}
    assert where == {("user_bad.py", n) for n in BAD_LINES}, text
    assert len(errors) == len(BAD_LINES), text

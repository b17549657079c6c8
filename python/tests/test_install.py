"""`pip install ./python` with Debian's Python, as docs/python.md says: into a
venv that sees the system's packages (PEP 668 keeps pip out of the system
site), without build isolation and without an index (setuptools is
Debian's), linked against this build tree's libresil.a. The installed
package then decides in embedded mode from a directory outside the tree."""

import os
import shutil
import subprocess
import sys
import tarfile

import pytest

SRC = os.environ.get("SRC")
BIN = os.environ.get("BIN")


def test_pip_install(tmp_path):
    if not SRC or not BIN:
        pytest.skip("SRC and BIN (set by ctest) are needed")
    pkg = tmp_path / "python"
    shutil.copytree(os.path.join(SRC, "python"), pkg,
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    # --without-pip: Debian's pip, seen through the system site, installs
    # into the venv (no copy of pip to install first: quicker)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    env = dict(os.environ, RESIL_BUILD_DIR=BIN)
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                          "--no-build-isolation", "--no-index", str(pkg)],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    code = ("import resil; r = resil.open_embedded(); r.define('p', 'bulkhead.max = 1');"
            "p = r.policy('p'); a = p.acquire()\n"
            "try:\n  p.acquire(); print('admitted')\n"
            "except resil.BulkheadFull: print('full', resil.__version__, resil._resil.__file__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[:2] == ["full", "1.0.0"]
    assert words[2].startswith(str(venv))


def pip_wheel(pkg, env, out):
    """pip building the package as it would to install it (a wheel: no
    install, so no venv needed)"""
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-index", "--no-deps", "-w", str(out), str(pkg)],
                          env=env, capture_output=True, text=True)


@pytest.mark.parametrize("where", ["RESIL_BUILD_DIR", "nowhere"])
def test_no_libresil_is_a_clear_error(tmp_path, where):
    """A build tree without libresil.a named by RESIL_BUILD_DIR, or none at
    all (no ../build, no pkg-config resil): pip stops with resil's words
    about what to do, not a traceback; a build tree beside ./build is
    named in them."""
    if not SRC:
        pytest.skip("SRC (set by ctest) is needed")
    repo = tmp_path / "repo"
    shutil.copytree(os.path.join(SRC, "python"), repo / "python",
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    other = repo / "build-rel" / "client"
    other.mkdir(parents=True)
    (other / "libresil.a").write_bytes(b"!<arch>\n")
    env = dict(os.environ, PKG_CONFIG_LIBDIR=str(tmp_path / "none"))
    env.pop("PYTHONPATH", None)
    env.pop("RESIL_BUILD_DIR", None)
    if where == "RESIL_BUILD_DIR":
        env["RESIL_BUILD_DIR"] = str(tmp_path / "empty-build")
    out = pip_wheel(repo / "python", env, tmp_path / "wheels")
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "Traceback" not in text, text
    if where == "RESIL_BUILD_DIR":
        assert f"resil: RESIL_BUILD_DIR={tmp_path / 'empty-build'} holds no" in text, text
        assert "--target resil_static" in text
    else:
        assert "resil: no libresil to link" in text, text
        assert f"RESIL_BUILD_DIR={repo / 'build-rel'}" in text, text


def test_sdist_holds_the_extension(tmp_path):
    """The source distribution carries every file of the extension, its
    private header too (MANIFEST.in), so that a wheel built from the sdist
    alone finds every file setup.py compiles."""
    if not SRC or not BIN:
        pytest.skip("SRC and BIN (set by ctest) are needed")
    pkg = tmp_path / "python"
    shutil.copytree(os.path.join(SRC, "python"), pkg,
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    env = dict(os.environ, RESIL_BUILD_DIR=BIN)
    out = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d",
                          str(tmp_path / "dist")], cwd=pkg, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    (sdist,) = (tmp_path / "dist").glob("resil-*.tar.gz")
    with tarfile.open(sdist) as t:
        held = {os.path.basename(n) for n in t.getnames() if "/src/" in n}
    assert held == {f for f in os.listdir(pkg / "src") if f.endswith((".c", ".h"))}, held

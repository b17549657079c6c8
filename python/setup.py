"""Build resil._resil against libresil.

Where libresil comes from, first match wins:
  RESIL_BUILD_DIR=DIR   a CMake build tree of this repository: links
                        DIR/client/libresil.a (static, nothing to install;
                        `cmake --build DIR --target resil_static` makes it)
  ../build              the same, at the repository's default place
  pkg-config resil      an installed libresil (cmake --install)
Anything else stops the build with what to do, not a traceback.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)
LIB = os.path.join("client", "libresil.a")


def fail(words):
    sys.stderr.write("resil: " + words + "\n")
    raise SystemExit(1)


def static_tree():
    d = os.environ.get("RESIL_BUILD_DIR")
    if d:
        if not os.path.exists(os.path.join(d, LIB)):
            fail(f"RESIL_BUILD_DIR={d} holds no {LIB}: build it there first "
                 f"(cmake -S {top} -B {d} && cmake --build {d} --target resil_static)")
        return os.path.abspath(d)
    d = os.path.join(top, "build")
    return d if os.path.exists(os.path.join(d, LIB)) else None


def other_trees():
    """Build trees of this repository beside ./build, to name in an error."""
    return sorted(os.path.dirname(os.path.dirname(p))
                  for p in glob.glob(os.path.join(top, "*", LIB)))


def pkgconfig(*args):
    if not shutil.which("pkg-config"):
        return None
    out = subprocess.run(["pkg-config", *args, "resil"], capture_output=True, text=True)
    return shlex.split(out.stdout) if out.returncode == 0 else None


def source_of(tree):
    """The repository a build tree was configured from (its resil.h)."""
    if os.path.exists(os.path.join(top, "client", "resil.h")):
        return top
    with open(os.path.join(tree, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return line.split("=", 1)[1].strip()
    fail("cannot find resil.h for the build tree " + tree)


# the extension's files (src/_resil.h lists what each holds); hidden
# visibility: what they share stays inside the module, PyInit__resil alone
# is exported
SOURCES = [f"src/{f}.c" for f in ("_resil", "handle", "policy", "permit", "retry")]
DEPENDS = ["src/_resil.h"]
HIDDEN = ["-fvisibility=hidden"]

tree = static_tree()
if tree:
    # libresil.a carries the shm and protobuf objects; protobuf-c and
    # pthread come from the system
    ext = Extension("resil._resil", SOURCES, depends=DEPENDS,
                    include_dirs=[os.path.join(source_of(tree), "client")],
                    extra_compile_args=HIDDEN,
                    extra_objects=[os.path.join(tree, LIB)],
                    libraries=["protobuf-c", "pthread", "m"])
else:
    cflags, libs = pkgconfig("--cflags"), pkgconfig("--libs")
    if cflags is None or libs is None:
        found = other_trees()
        hint = "".join(f"\n  found {t}: RESIL_BUILD_DIR={t}" for t in found)
        fail("no libresil to link. Build it (cmake -S . -B build && cmake --build build "
             "--target resil_static) and install from the repository, or name another "
             "build tree with RESIL_BUILD_DIR=DIR, or install libresil (cmake --install "
             "build: pkg-config resil)" + hint)
    ext = Extension("resil._resil", SOURCES, depends=DEPENDS,
                    extra_compile_args=cflags + HIDDEN, extra_link_args=libs)

setup(ext_modules=[ext])

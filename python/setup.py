"""Build resil._resil against libresil.

Where libresil comes from, first match wins:
  RESIL_BUILD_DIR=DIR   a CMake build tree of this repository: links
                        DIR/client/libresil.a (static, nothing to install)
  ../build              the same, at the repository's default place
  pkg-config resil      an installed libresil (cmake --install)
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)


def static_tree():
    for d in (os.environ.get("RESIL_BUILD_DIR"), os.path.join(top, "build")):
        if d and os.path.exists(os.path.join(d, "client", "libresil.a")):
            return os.path.abspath(d)
    return None


def pkgconfig(*args):
    out = subprocess.run(["pkg-config", *args, "resil"], check=True, capture_output=True,
                         text=True).stdout
    return shlex.split(out)


def source_of(tree):
    """The repository a build tree was configured from (its resil.h)."""
    if os.path.exists(os.path.join(top, "client", "resil.h")):
        return top
    with open(os.path.join(tree, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return line.split("=", 1)[1].strip()
    raise SystemExit("resil: cannot find resil.h for the build tree " + tree)


tree = static_tree()
if tree:
    # libresil.a carries the shm and protobuf objects; protobuf-c and
    # pthread come from the system
    ext = Extension("resil._resil", ["src/_resil.c"],
                    include_dirs=[os.path.join(source_of(tree), "client")],
                    extra_objects=[os.path.join(tree, "client", "libresil.a")],
                    libraries=["protobuf-c", "pthread", "m"],
                    define_macros=[("RESIL_PY_VERSION", '"0.1.0"')])
else:
    cflags = pkgconfig("--cflags")
    libs = pkgconfig("--libs")
    ext = Extension("resil._resil", ["src/_resil.c"], extra_compile_args=cflags,
                    extra_link_args=libs, define_macros=[("RESIL_PY_VERSION", '"0.1.0"')])

setup(ext_modules=[ext])

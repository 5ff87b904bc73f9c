"""pip install bindings/python: the tern package: the binding tern.Server
(set up through ctypes) and the native module tern._native that carries
its requests and serves ASGI and WSGI applications (python -m tern).

A setup.py rather than a pyproject.toml: pip then needs only setuptools
to install it (a PEP 517 build would need the wheel package too, which a
fresh venv of Debian's Python 3.11 lacks), so
`pip install --no-index --no-build-isolation bindings/python` works
offline. The native module needs python3-dev and libuv1-dev (the
README's set-up installs both) and is linked with the libtern found, in
order, through $TERN_LIBRARY (a path to libtern.so), the checkout the
package sits in (../../build), or pkg-config's tern (an installed one);
its headers through $TERN_INCLUDE, the checkout's include/, or
pkg-config."""
import os
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TERN_SOURCE_ROOT") or os.path.normpath(
    os.path.join(HERE, "..", ".."))


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config"] + list(args) + ["tern"],
                             capture_output=True, text=True, check=True)
        return out.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []


def where():
    lib = os.environ.get("TERN_LIBRARY")
    libdir = os.path.dirname(os.path.abspath(lib)) if lib else None
    if libdir is not None and not os.path.exists(os.path.join(libdir,
                                                              "libtern.so")):
        libdir = None  # a relative path from another directory: unusable
    if libdir is None and os.path.exists(os.path.join(ROOT, "build",
                                                      "libtern.so")):
        libdir = os.path.join(ROOT, "build")
    inc = os.environ.get("TERN_INCLUDE")
    if inc is None and os.path.exists(os.path.join(ROOT, "include",
                                                   "tern.h")):
        inc = os.path.join(ROOT, "include")
    incs = [inc] if inc else [f[2:] for f in pkg_config("--cflags-only-I")]
    libdirs = [libdir] if libdir else [f[2:] for f in
                                       pkg_config("--libs-only-L")]
    return incs, libdirs


incs, libdirs = where()
native = Extension(
    "tern._native", ["tern/_native.c", "tern/_bridge.c"],
    include_dirs=incs,
    library_dirs=libdirs,
    runtime_library_dirs=libdirs,
    libraries=["tern", "uv"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O2"])

setup(
    name="tern",
    version="0.3.0",
    description="tern, the embeddable HTTP server library, for Python: "
                "an ASGI and WSGI server (HTTP/1.1, HTTP/2, HTTP/3, "
                "WebSocket) and a binding of the library's C API",
    license="MIT",
    python_requires=">=3.9",
    packages=["tern"],
    ext_modules=[native],
    entry_points={"console_scripts": ["tern = tern.server:main"]},
)

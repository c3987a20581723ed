"""layercake's Python package: a ctypes binding over liblayercake.so.

`pip install .` at the top of the tree (pyproject.toml, scikit-build-core from
PyPI) builds the library into a wheel. This file is the other way, for a
machine without PyPI: `pip install ./python` uses only what Debian ships
(setuptools, no build isolation needed, nothing compiled here: the
library and the optional C module of post/poll/wait, python/speedups/, come
from the CMake build). Where the package finds
the shared library (layercake/_ffi.py, in this order): $LAYERCAKE_LIB; a copy
next to the package, made here at install time from $LAYERCAKE_LIB or
../build/liblayercake.so when one exists; else an installed layercake found
through pkg-config (`make install`), whose library path is written into
layercake/_paths.py; then the loader's search path.
"""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
    """project(layercake VERSION ...) of ../CMakeLists.txt: the one place it is said."""
    with open(os.path.join(HERE, "..", "CMakeLists.txt")) as f:
        return re.search(r"project\(layercake\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read()).group(1)


def _installed_library():
    """The library of an installed layercake (pkg-config), or None."""
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "layercake"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    for name in ("liblayercake.so.0", "liblayercake.so"):
        path = os.path.join(libdir, name)
        if os.path.exists(path):
            return os.path.realpath(os.path.dirname(path)) + os.sep + name
    return None


class build_py_with_lib(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("LAYERCAKE_LIB") or os.path.join(HERE, "..", "build", "liblayercake.so")
        if os.path.exists(lib):
            dst = os.path.join(self.build_lib, "layercake", "liblayercake.so")
            shutil.copyfile(os.path.realpath(lib), dst)
            # The C module of post/poll/wait, where the build made one beside
            # the library (python/speedups/): found beside the package.
            fast = os.path.join(os.path.dirname(os.path.realpath(lib)), "_speedups.abi3.so")
            if os.path.exists(fast):
                shutil.copyfile(fast, os.path.join(self.build_lib, "layercake", "_speedups.abi3.so"))
            return
        installed = _installed_library()
        if installed:
            with open(os.path.join(self.build_lib, "layercake", "_paths.py"), "w") as f:
                f.write('"""Written by setup.py: the installed library (pkg-config)."""\n'
                        f"LIBRARY = {installed!r}\n")


setup(
    name="layercake",
    version=_version(),
    description="Layer-wise KV-cache streaming from prefill to decode (ctypes binding)",
    packages=["layercake", "layercake.vllm"],
    package_data={"layercake": ["liblayercake.so", "_speedups.abi3.so"]},
    python_requires=">=3.9",
    cmdclass={"build_py": build_py_with_lib},
)

"""layercake's Python package: a ctypes binding over liblayercake.so.

Installs with `pip install ./python` using only what Debian ships (setuptools,
no build isolation needed, no compiled extension). The shared library is
found next to the package (copied in at install time when LAYERCAKE_LIB or
../build/liblayercake.so exists), through LAYERCAKE_LIB, or on the loader's
search path.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_lib(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("LAYERCAKE_LIB") or os.path.join(HERE, "..", "build", "liblayercake.so")
        if os.path.exists(lib):
            dst = os.path.join(self.build_lib, "layercake", "liblayercake.so")
            shutil.copyfile(os.path.realpath(lib), dst)


setup(
    name="layercake",
    version="0.1.0",
    description="Layer-wise KV-cache streaming from prefill to decode (ctypes binding)",
    packages=["layercake"],
    package_data={"layercake": ["liblayercake.so"]},
    python_requires=">=3.9",
    cmdclass={"build_py": build_py_with_lib},
)

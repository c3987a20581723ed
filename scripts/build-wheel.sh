#!/usr/bin/env bash
# `make wheel`: dist/layercake-<version>-cp39-abi3-manylinux_2_28_x86_64.whl,
# a wheel that needs nothing from the host but glibc 2.28 or newer:
#   1. the toolchain: a cached venv with zig, auditwheel and the build backend
#      at their pins (scripts/py-venv.sh wheel python/requirements-wheel.txt);
#   2. ZeroMQ (libsodium inside), libmicrohttpd, libcurl and json-c built by
#      zig for glibc 2.28 from Debian's source packages (scripts/wheel-deps.sh,
#      cached);
#   3. liblayercake and the C module (cp39-abi3) built by zig against them
#      (scikit-build-core, no build isolation: offline once 1 and 2 exist);
#   4. auditwheel repair: those libraries copied into layercake.libs/ with
#      their own sonames, the tag checked against manylinux_2_28.
# UCX is not linked: ucx:// loads the host's at run time (docs/python.md).
# Usage: scripts/build-wheel.sh [OUT_DIR]   (default dist/); prints the wheel.
# Build files go to build-wheel/ (in the checkout, like build/).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
venv=$(scripts/py-venv.sh wheel python/requirements-wheel.txt)
prefix=$(scripts/wheel-deps.sh "$venv")
bin=$(dirname "$prefix")/bin
tmp=build-wheel
rm -rf "$tmp/raw" "$tmp/repaired"
mkdir -p "$tmp" "$out"
echo "build-wheel: liblayercake and the C module (zig, glibc 2.28)" >&2
# The wheel's CMake sees only the prefix's pkg-config files (never the host's).
PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig PKG_CONFIG_PATH='' LDFLAGS="-Wl,--undefined-version" \
	ZIG_GLOBAL_CACHE_DIR=${LAYERCAKE_CACHE:-${HOME:-/root}/.cache/layercake}/zig-cache \
	"$venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$tmp/raw" \
	-C build-dir="$tmp/cmake" \
	-C cmake.define.CMAKE_C_COMPILER="$bin/cc" -C cmake.define.CMAKE_AR="$bin/ar" \
	-C cmake.define.CMAKE_RANLIB="$bin/ranlib" -C cmake.define.CMAKE_PREFIX_PATH="$prefix" \
	-C cmake.define.CMAKE_BUILD_RPATH="$prefix/lib" . >&2
raw=$(ls "$tmp"/raw/layercake-*.whl)
echo "build-wheel: auditwheel repair $raw" >&2
PATH=$venv/bin:$PATH LD_LIBRARY_PATH=$prefix/lib \
	"$venv/bin/auditwheel" repair --plat manylinux_2_28_x86_64 -w "$tmp/repaired" "$raw" >&2
whl=$(ls "$tmp"/repaired/layercake-*.whl)
rm -f "$out"/layercake-*.whl
cp "$whl" "$out/"
echo "$out/$(basename "$whl")"

#!/bin/sh
# The installed tree works for a C and a Python integrator (issue 15):
# install the build into a temporary prefix, build examples/prefill_decode.c
# out of tree against it twice (pkg-config alone, then find_package), run
# both, build and run README.md's P snippet with its pkg-config line as they
# are, check that make install leaves the build tree alone, and run the
# Python example against the installed package with no
# build-tree path anywhere (LAYERCAKE_LIB unset, PYTHONPATH only into the
# prefix, the example copied out of the source tree).
#   check-install.sh BUILD_DIR SOURCE_DIR [SCRATCH_DIR]
# ctest install.check; exit 77 (skipped) without a C compiler or pkg-config.
set -u
build=$(cd "$1" && pwd) || exit 1
src=$(cd "$2" && pwd) || exit 1
tmp=${3:-$(mktemp -d)}
rm -rf "$tmp" && mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
py=${LC_PYTHON:-/usr/bin/python3}
cc=${CC:-cc}
command -v pkg-config >/dev/null && command -v "$cc" >/dev/null || { echo "no pkg-config or $cc"; exit 77; }
step() { echo "== $*"; }
die() { echo "FAIL: $*"; exit 1; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; die "install"; }
pc=$(find "$prefix" -name layercake.pc | head -1)
cfg=$(find "$prefix" -name layercakeConfig.cmake | head -1)
pkgdir=$(find "$prefix" -type d -name layercake -path '*-packages/*' | head -1)
for f in "$prefix/include/layercake.h" "$prefix/include/layercake/pd.h" "$prefix/bin/layercake" \
	"$pc" "$cfg" "$pkgdir/_paths.py"; do
	[ -n "$f" ] && [ -e "$f" ] || die "not installed: ${f:-(a file)}"
done
lib=$(find "$prefix" -name 'liblayercake.so.*.*.*' | head -1)
[ -n "$lib" ] || die "no versioned liblayercake.so.X.Y.Z"
soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
[ -z "$soname" ] || [ -e "$(dirname "$lib")/$soname" ] || die "soname $soname has no link"
echo "library $lib (soname ${soname:-?}), python package $pkgdir"
"$prefix/bin/layercake" info >/dev/null 2>&1 ||
	die "the installed CLI does not run"

# 1. pkg-config alone (the .pc finds its prefix from its own place).
step "pkg-config: cc examples/prefill_decode.c \$(pkg-config --cflags --libs layercake)"
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir layercake) || die "pkg-config --variable=libdir"
mkdir -p "$tmp/pc" && cp "$src/examples/prefill_decode.c" "$tmp/pc/"
# No rpath of our own and no LD_LIBRARY_PATH: the .pc's Libs give it.
(cd "$tmp/pc" && env -u LD_LIBRARY_PATH $cc -std=c11 -D_GNU_SOURCE -Wall -Werror prefill_decode.c \
	-o prefill_decode $(pkg-config --cflags --libs layercake)) || die "pkg-config build"
env -u LD_LIBRARY_PATH ldd "$tmp/pc/prefill_decode" | grep -q "liblayercake.so.* => $libdir" ||
	die "pkg-config build does not load the prefix's library (no rpath from layercake.pc?)"
"$tmp/pc/prefill_decode" tcp://127.0.0.1:0 >"$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; die "pkg-config build run"; }
tail -1 "$tmp/pc.log"

# 1b. README.md as it is: its P snippet (between the "readme-snippet: prefill"
# markers) wrapped by tests/install/readme_app.c into app.c, built with the
# README's pkg-config line (between its "readme-snippet: pkg-config" markers)
# and run: P is the snippet, D the example's.
step "README.md: the P snippet and the pkg-config line, as they are"
snippet() { # NAME: the fenced block between README.md's markers for NAME, fences dropped
	sed -n "/<!-- readme-snippet: $1 begin -->/,/<!-- readme-snippet: $1 end -->/p" "$src/README.md" |
		sed -e '/<!-- readme-snippet/d' -e '/^```/d'
}
mkdir -p "$tmp/readme" && cd "$tmp/readme" || exit 1
snippet prefill >readme_prefill.c
snippet pkg-config >build.sh
grep -q 'lc_prefill_engine' readme_prefill.c || die "README.md: no P snippet between its markers"
grep -q 'pkg-config --cflags --libs layercake' build.sh || die "README.md: no pkg-config line between its markers"
cp "$src/tests/install/readme_app.c" app.c && cp "$src/examples/prefill_decode.c" . || exit 1
echo "$ $(cat build.sh)"
env -u LD_LIBRARY_PATH sh -e ./build.sh >"$tmp/readme.log" 2>&1 || { cat "$tmp/readme.log"; die "README.md's snippet and pkg-config line"; }
grep -q '^OK$' "$tmp/readme.log" || { cat "$tmp/readme.log"; die "README.md's app did not print OK"; }
grep 'README snippet' "$tmp/readme.log"
cd "$tmp" || exit 1

# 1c. make install from a build configured for PREFIX neither reconfigures
# nor rebuilds it (it used to rerun cmake -S . -B build with the prefix).
step "make install PREFIX=(the build's own) DESTDIR=...: the build tree is left as it is"
bprefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
before=$(cksum <"$build/CMakeCache.txt")
(unset MAKEFLAGS MFLAGS MAKELEVEL; make -C "$src" install BUILD="$build" PREFIX="$bprefix" \
	DESTDIR="$tmp/destdir" JOBS=1) >"$tmp/make-install.log" 2>&1 || { cat "$tmp/make-install.log"; die "make install"; }
[ "$(cksum <"$build/CMakeCache.txt")" = "$before" ] || die "make install changed $build/CMakeCache.txt"
! grep -E 'Building C|Linking C' "$tmp/make-install.log" || die "make install rebuilt the (up to date) build tree"
[ -e "$tmp/destdir$bprefix/include/layercake.h" ] || die "make install DESTDIR=$tmp/destdir put nothing under $bprefix"
echo "make install: installed under DESTDIR, $build not reconfigured, nothing rebuilt"

# 2. find_package(layercake) and the target layercake::layercake.
step "cmake: find_package(layercake), target_link_libraries(... layercake::layercake)"
mkdir -p "$tmp/cm" && cp "$src/examples/prefill_decode.c" "$tmp/cm/"
cat >"$tmp/cm/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(uses_layercake C)
find_package(layercake 0.1 REQUIRED)
add_executable(prefill_decode prefill_decode.c)
target_compile_definitions(prefill_decode PRIVATE _GNU_SOURCE)
target_link_libraries(prefill_decode PRIVATE layercake::layercake)
EOF
(cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release &&
	cmake --build "$tmp/cm/b") >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; die "find_package build"; }
ldd "$tmp/cm/b/prefill_decode" | grep -q "$prefix" || die "find_package build does not load the prefix's library"
"$tmp/cm/b/prefill_decode" tcp://127.0.0.1:0 >"$tmp/cmrun.log" 2>&1 || { cat "$tmp/cmrun.log"; die "find_package build run"; }
tail -1 "$tmp/cmrun.log"

# 3. The Python package from the prefix, loading the prefix's library.
step "python: PYTHONPATH=$(dirname "$pkgdir") (nothing else), examples/python_prefill_decode.py"
unset LAYERCAKE_LIB LAYERCAKE_BUILD
export PYTHONPATH="$(dirname "$pkgdir")"
cp "$src/examples/python_prefill_decode.py" "$tmp/"
cd "$tmp" || exit 1
"$py" -c '
import os, sys, layercake, layercake._ffi as f
pre = sys.argv[1]
print("layercake", layercake.version(), "from", layercake.__file__, "library", f.LIBRARY_PATH)
assert layercake.__file__.startswith(pre), "package not from the prefix"
assert os.path.realpath(f.LIBRARY_PATH).startswith(os.path.realpath(pre)), "library not from the prefix"
' "$prefix" || die "the installed package does not load the installed library"
"$py" "$tmp/python_prefill_decode.py" >"$tmp/py.log" 2>&1 || { cat "$tmp/py.log"; die "python example"; }
tail -1 "$tmp/py.log"
echo "install: pkg-config, find_package and python all work from $prefix"

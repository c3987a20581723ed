#!/usr/bin/env bash
# The pip-installable package (issue 22, acceptance 1), in a fresh venv:
#   1. `pip wheel .` builds a wheel that holds layercake/liblayercake.so and
#      links no CUDA library and no -dev package's file;
#   2. installed, `import layercake` works from another folder (/tmp) with
#      LAYERCAKE_LIB and PYTHONPATH unset and loads the wheel's own library;
#      `python -m layercake info` gives the version of CMakeLists.txt and lists
#      the transports; each runtime library it names comes from the Debian
#      package it says, none a -dev one;
#   3. with a runtime library missing, `import layercake` fails naming it and
#      its Debian package (a copy of the library whose libucp.so.0 is renamed);
#   4. `pip install .` works too; pyproject.toml's build pins equal
#      python/requirements-build.txt's; scripts/py-venv.sh is idempotent.
#   test-wheel.sh SOURCE_DIR SCRATCH_DIR
# ctest python.wheel, make test-wheel. Exit 77 (skipped) when PyPI is not
# reachable or there is no python3 but Debian's. About 30 s with a warm pip
# cache and ccache (CMAKE_C_COMPILER_LAUNCHER, when set, reaches the wheel's
# CMake build through the environment).
set -u
src=$(cd "$1" && pwd) || exit 1
tmp=${2:-$(mktemp -d)}
rm -rf "$tmp" && mkdir -p "$tmp" && tmp=$(cd "$tmp" && pwd) || exit 1
step() { echo "== $*"; }
die() { echo "FAIL: $*"; exit 1; }
unset LAYERCAKE_LIB LAYERCAKE_BUILD PYTHONPATH PIP_REQUIRE_VIRTUALENV

base=$(command -v python3 2>/dev/null) && base=$("$base" -c 'import sys; print(sys.executable)')
case "${LC_VENV_PYTHON:-$base}" in
"" | /usr/bin/python3* | /bin/python3*) echo "no python3 but Debian's on PATH: skipped"; exit 77 ;;
esac
base=${LC_VENV_PYTHON:-$base}

step "PyPI reachable? (pip download scikit-build-core, the pinned backend)"
skb=$(grep -E '^scikit-build-core==' "$src/python/requirements-build.txt") || die "no scikit-build-core pin"
"$base" -m pip download -q --no-deps -d "$tmp/probe" "$skb" >"$tmp/probe.log" 2>&1 ||
	{ cat "$tmp/probe.log"; echo "PyPI not reachable: skipped"; exit 77; }

step "pyproject.toml's build-system requires == python/requirements-build.txt's pins (and -wheel.txt's)"
"$base" - "$src" <<'EOF' || die "build pins disagree"
import re, sys, tomllib
src = sys.argv[1]
with open(f"{src}/pyproject.toml", "rb") as f:
    requires = set(tomllib.load(f)["build-system"]["requires"])
pins = {l.strip() for l in open(f"{src}/python/requirements-build.txt")
        if re.match(r"^[A-Za-z0-9_.-]+==", l) and not l.startswith("pip==")}
assert all("==" in r for r in requires), f"unpinned: {requires}"
assert requires == pins, f"pyproject {sorted(requires)} != requirements {sorted(pins)}"
# make wheel's toolchain (python/requirements-wheel.txt) holds the same backend.
wheel = {l.strip() for l in open(f"{src}/python/requirements-wheel.txt") if re.match(r"^[A-Za-z0-9_.-]+==", l)}
assert pins <= wheel, f"requirements-wheel.txt lacks {sorted(pins - wheel)}"
print("pinned:", " ".join(sorted(requires)))
EOF

step "scripts/py-venv.sh pkg python/requirements-build.txt (twice: the second leaves it alone)"
venv_pkg=$("$src/scripts/py-venv.sh" pkg "$src/python/requirements-build.txt") || die "py-venv.sh"
stamp=$(stat -c %Y "$venv_pkg/.layercake-stamp")
[ "$("$src/scripts/py-venv.sh" pkg "$src/python/requirements-build.txt")" = "$venv_pkg" ] || die "py-venv.sh again"
[ "$(stat -c %Y "$venv_pkg/.layercake-stamp")" = "$stamp" ] || die "py-venv.sh remade a current venv"
"$venv_pkg/bin/python" -c 'import scikit_build_core' || die "no scikit-build-core in $venv_pkg"

step "fresh venv from $base"
"$base" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 || { cat "$tmp/venv.log"; die "venv"; }
py=$tmp/venv/bin/python

# A fixed build folder (ccache keys on the paths it sees), emptied first so
# the CMake build is a fresh one.
step "pip wheel . (build isolation: the backend from PyPI at its pin)"
(cd "$src" && "$py" -m pip wheel --no-deps -w "$tmp/dist" -C build-dir="$tmp/build" .) \
	>"$tmp/wheel.log" 2>&1 || { tail -40 "$tmp/wheel.log"; die "pip wheel ."; }
whl=$(ls "$tmp"/dist/layercake-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || die "no wheel in $tmp/dist"
echo "$(basename "$whl") ($(stat -c %s "$whl") bytes)"
"$py" - "$whl" <<'EOF' || die "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("layercake/liblayercake.so", "layercake/__init__.py", "layercake/__main__.py",
             "layercake/_ffi.py", "layercake/_deps.py"):
    assert want in names, f"{want} not in the wheel"
assert not any(n.endswith("_paths.py") for n in names), "a make-install _paths.py in the wheel"
print(len(names), "files, layercake/liblayercake.so among them")
EOF

step "pip install the wheel; import layercake from /tmp"
"$py" -m pip install -q --no-deps "$whl" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; die "pip install wheel"; }
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
so=$site/layercake/liblayercake.so
readelf -d "$so" | grep -i -E 'NEEDED.*(cuda|nvidia|nvrtc|cublas)' && die "the wheel's library links CUDA"
cd /tmp || exit 1
"$py" - "$site" <<'EOF' || die "import layercake from /tmp"
import os, sys, layercake, layercake._ffi as f
site = sys.argv[1]
print("layercake", layercake.__version__, "from", layercake.__file__, "library", f.LIBRARY_PATH,
      f"({f.LIBRARY_SOURCE})")
assert layercake.__file__.startswith(site), "package not from the venv"
assert f.LIBRARY_PATH == os.path.join(site, "layercake", "liblayercake.so"), "not the wheel's library"
EOF

step "python -m layercake info"
"$py" -m layercake info >"$tmp/info.txt" 2>&1 || { cat "$tmp/info.txt"; die "python -m layercake info"; }
cat "$tmp/info.txt"
want=$(sed -n 's/^project(layercake VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
grep -qx "layercake $want" "$tmp/info.txt" || die "info does not say version $want (CMakeLists.txt)"
grep -E '^transports: ' "$tmp/info.txt" | grep -qw tcp || die "info lists no transports (tcp)"
grep -qF "library: $so (package)" "$tmp/info.txt" || die "info does not name the wheel's library"
"$py" -m layercake info --json >"$tmp/info.json" || die "info --json"
"$py" - "$tmp/info.json" <<'EOF' || die "runtime libraries and their Debian packages"
import json, os, subprocess, sys
info = json.load(open(sys.argv[1]))
assert {"loop", "tcp", "shm"} <= set(info["transports"]), info["transports"]
libs = info["runtime_libraries"]
assert libs and all(r["file"] for r in libs), libs
for r in libs:
    real = os.path.realpath(r["file"])
    owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
    if owner.returncode:  # a merged-/usr path: ask for /usr/lib's
        owner = subprocess.run(["dpkg", "-S", real.replace("/usr/lib/", "/lib/", 1)],
                               capture_output=True, text=True)
    pkg = owner.stdout.split(":")[0]
    assert not pkg.endswith("-dev"), f"{r['soname']} comes from {pkg}"
    assert pkg == r["debian"], f"{r['soname']}: dpkg says {pkg}, layercake/_deps.py says {r['debian']}"
    print(f"{r['soname']}: {real} from {pkg}")
EOF

step "a runtime library missing: import layercake names it and its Debian package"
mkdir -p "$tmp/broken"
"$py" - "$so" "$tmp/broken/liblayercake.so" <<'EOF' || die "making the broken copy"
import sys
data = open(sys.argv[1], "rb").read()
assert data.count(b"libzmq.so.5\0") == 1, "libzmq.so.5 not linked once"
open(sys.argv[2], "wb").write(data.replace(b"libzmq.so.5\0", b"libzmq.so.9\0"))
EOF
LAYERCAKE_LIB=$tmp/broken/liblayercake.so "$py" -m layercake info >"$tmp/broken.txt" 2>&1 &&
	die "info ran with a library that cannot load"
tail -3 "$tmp/broken.txt"
grep -q "libzmq.so.9 (Debian package libzmq5)" "$tmp/broken.txt" &&
	grep -q "apt-get install libzmq5" "$tmp/broken.txt" || die "the missing library and its package not named"

step "pip install . (into the same venv, after uninstalling the wheel)"
"$py" -m pip uninstall -q -y layercake >/dev/null 2>&1 || die "pip uninstall"
(cd "$src" && "$py" -m pip install -q --no-deps -C build-dir="$tmp/build" .) >"$tmp/pipi.log" 2>&1 ||
	{ tail -40 "$tmp/pipi.log"; die "pip install ."; }
"$py" -m layercake info | grep -E '^(library|transports):' || die "info after pip install ."

rm -rf "$tmp"
echo "OK"

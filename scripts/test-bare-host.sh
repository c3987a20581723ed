#!/usr/bin/env bash
# The wheel on a bare host (issue 46; make test-bare-host, in .ci/run):
#   scripts/test-bare-host.sh WHEEL
# A minimal Debian bookworm root (scripts/bare-root.sh: debootstrap, cached)
# holding python3 and its venv module and none of the libraries liblayercake
# links (ZeroMQ, libmicrohttpd, libcurl, json-c, UCX), no compiler. In it, in
# a mount and network namespace of its own (loopback only), with chroot:
# the wheel installs into a fresh venv (offline), `python -m layercake info`
# runs and says the C module is used, and two Python processes stream a
# request layer by layer over tcp and over shm with every byte checked
# (tests/wheel/bare_pd.py). Then, on this host when it has a UCX, the same
# wheel streams over ucx:// with that UCX, by soname and by path.
# Exit 0 passed, 1 failed, 77 skipped (not root).
# Needs root (debootstrap, chroot, unshare). 15 s to 2 min once the root is
# cached; its first run takes a few minutes more (debootstrap).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
whl=$(realpath "$1")
die() { echo "bare-host: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bare-host: SKIPPED: needs root (chroot, unshare)" >&2; exit 77; }
tar=$(scripts/bare-root.sh)
root=$(mktemp -d "${TMPDIR:-/tmp}/lc-bare.XXXXXX")
trap 'rm -rf --one-file-system "$root"' EXIT
tar -C "$root" -xf "$tar"

# The root is bare: none of the libraries, no compiler.
for lib in libzmq libmicrohttpd libcurl libjson-c libucp libucs libsodium; do
	if find "$root/usr" "$root/lib" -name "$lib.so*" 2>/dev/null | grep -q .; then
		die "the bare root holds $lib"
	fi
done
for cc in gcc cc clang tcc; do
	[ -e "$root/usr/bin/$cc" ] && die "the bare root holds a compiler ($cc)"
done

mkdir -p "$root/work"
cp "$whl" "$root/work/"
cp tests/wheel/bare_pd.py "$root/work/"
cat >"$root/work/run.sh" <<IN
set -eu
cd /work
echo "== python3 -m venv; pip install $(basename "$whl") (offline)"
python3 -m venv /work/venv
/work/venv/bin/python -m pip install -q --no-index --no-deps /work/$(basename "$whl")
echo "== python -m layercake info"
/work/venv/bin/python -m layercake info >info.txt 2>&1 || { cat info.txt; echo "python -m layercake info failed"; exit 1; }
cat info.txt
grep -q '^speedups: /work/venv/' info.txt || { echo "the C module is not used"; exit 1; }
grep -E '^transports: ' info.txt | grep -qw shm || { echo "no shm transport"; exit 1; }
for url in tcp://127.0.0.1:0 shm://auto; do
	echo "== P and D over \$url"
	timeout 120 /work/venv/bin/python bare_pd.py --url "\$url" || { echo "over \$url: FAILED"; exit 1; }
done
echo "== ucx:// without UCX: a clear error"
LAYERCAKE_LOG=warn /work/venv/bin/python - <<'PY' 2>ucx.err && { echo "ucx:// listened without UCX"; exit 1; } || true
import layercake as lc
ctx = lc.Context("d")
mem = lc.Memory(2 * 8192)
lay = lc.Layout.mha(1, 1, 8192, bases=[mem.address, mem.address + 8192])
lc.Decode(ctx, lay, [ctx.register(mem)], listen_url="ucx://127.0.0.1:0")
PY
cat ucx.err | tail -3
grep -q 'install UCX' ucx.err || { echo "ucx:// without UCX does not say what to install"; exit 1; }
IN
# A namespace of its own: loopback only, its own mounts (gone with it).
unshare --mount --net --fork -- sh -c "
	set -e
	ip link set lo up
	mount -t proc proc '$root/proc'
	mount -t tmpfs tmpfs '$root/dev/shm' 2>/dev/null || { mkdir -p '$root/dev/shm'; mount -t tmpfs tmpfs '$root/dev/shm'; }
	for d in null zero random urandom; do touch '$root/dev/'\$d 2>/dev/null || true; mount --bind /dev/\$d '$root/dev/'\$d; done
	exec chroot '$root' /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 sh /work/run.sh
" || die "see above"
echo "bare-host: OK: $(basename "$whl") installs and runs P/D over tcp and shm on a bare bookworm"

# And with a UCX: the same wheel on this host, whose UCX (Debian's libucx0, when
# there) ucx:// opens at run time, by soname and by path (LAYERCAKE_UCX_LIB).
ucp=$(/sbin/ldconfig -p | sed -n 's/.*libucp\.so\.0 .*=> //p' | head -1)
if [ -z "$ucp" ]; then
	echo "bare-host: ucx:// with this host's UCX: SKIPPED (no libucp.so.0 here)"
	exit 0
fi
mkdir -p "$root/host"
here=$PWD
/usr/bin/python3 -m venv "$root/host/venv"
"$root/host/venv/bin/python" -m pip install -q --no-index --no-deps "$whl" || die "pip install on this host"
for lib in "" "$ucp"; do
	(cd /tmp && env -u LAYERCAKE_LIB -u PYTHONPATH LAYERCAKE_UCX_LIB="$lib" UCX_TLS=tcp,self \
		timeout 120 "$root/host/venv/bin/python" "$here/tests/wheel/bare_pd.py" --url ucx://127.0.0.1:0) |
		tail -2 | grep -qx OK || die "P and D over ucx:// with this host's UCX (${lib:-libucp.so.0})"
done
echo "bare-host: OK: the wheel's ucx:// with this host's UCX ($ucp), by soname and by path"

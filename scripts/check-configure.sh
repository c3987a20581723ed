#!/bin/sh
# A missing dependency fails the configure step, naming the Debian package,
# unless the user asked to build without it (issue 13, finding 17): cmake is
# run on the source tree with pkg-config finding nothing.
#   check-configure.sh SOURCE_DIR SCRATCH_DIR
set -u
src=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp/empty" || exit 1
trap 'rm -rf "$tmp"' EXIT
run() { PKG_CONFIG_LIBDIR="$tmp/empty" PKG_CONFIG_PATH= cmake -S "$src" -B "$tmp/b$1" "$@" >"$tmp/log$1" 2>&1; }
fail=0
# 1. Everything on, nothing found: configure fails at the first dependency
#    and names the package to install.
if run 1; then
	echo "configure passed with no dependency found"; fail=1
elif ! grep -q "apt-get install libzmq3-dev" "$tmp/log1"; then
	echo "configure failed without naming libzmq3-dev:"; cat "$tmp/log1"; fail=1
fi
# 2. ZeroMQ off: now the next one (libmicrohttpd) is named.
if run 2 -DLC_WITH_ZMQ=OFF; then
	echo "configure passed without libmicrohttpd"; fail=1
elif ! grep -q "apt-get install libmicrohttpd-dev" "$tmp/log2"; then
	echo "configure failed without naming libmicrohttpd-dev:"; cat "$tmp/log2"; fail=1
fi
# 3. Everything off: configure passes and says what is left out.
if ! run 3 -DLC_WITH_ZMQ=OFF -DLC_WITH_MHD=OFF -DLC_WITH_CURL=OFF -DLC_WITH_JSONC=OFF \
	-DLC_WITH_UCX=OFF -DLC_WITH_CMOCKA=OFF -DLC_WITH_PYTHON=OFF; then
	echo "configure failed with every dependency off:"; cat "$tmp/log3"; fail=1
elif ! grep -q "built without the ucx:// transport (UCX) (LC_WITH_UCX=OFF)" "$tmp/log3"; then
	echo "no word of what was left out:"; cat "$tmp/log3"; fail=1
fi
[ $fail = 0 ] && echo "configure: missing dependencies fail, OFF builds without them"
exit $fail

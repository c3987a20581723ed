#!/bin/sh
# `layercake bench peers` without the peers' wheels (ctest cli.bench_peers):
# its --help says what it runs and that `make bench-peers` makes the venv;
# without the venv it fails with exit 3 and says how to make it; with a venv
# (here a fake one whose python prints what it was given) it execs run.py of
# the source tree with this build's library, as `make bench-peers` does.
#   check-bench-peers.sh LAYERCAKE SOURCE_DIR
set -u
cli=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
fail() { echo "FAIL: $*"; rc=1; }

help=$("$cli" bench peers --help) || fail "layercake bench peers --help exits $?"
for want in "make bench-peers" "bench/peers/run.py" "scripts/peers-venv.sh"; do
	echo "$help" | grep -qF "$want" || fail "layercake bench peers --help does not name $want"
done

# No venv: HOME is an empty folder, LAYERCAKE_CACHE unset.
mkdir "$tmp/home"
env -u LAYERCAKE_CACHE HOME="$tmp/home" "$cli" bench peers --quick >"$tmp/out" 2>"$tmp/err"
st=$?
[ $st = 3 ] || fail "without the venv: exit $st, not 3"
for want in "make bench-peers" "scripts/peers-venv.sh" "$tmp/home/.cache/layercake/venv-peers"; do
	grep -qF "$want" "$tmp/err" || fail "without the venv, stderr does not name $want: $(cat "$tmp/err")"
done
[ -s "$tmp/out" ] && fail "without the venv, stdout is not empty"
[ -z "$(ls -A "$tmp/home")" ] || fail "without the venv, it wrote under HOME"

# A fake venv under LAYERCAKE_CACHE: its python shows its arguments and env.
mkdir -p "$tmp/cache/venv-peers/bin"
cat >"$tmp/cache/venv-peers/bin/python" <<'EOF'
#!/bin/sh
printf 'arg %s\n' "$@"
echo "lib $LAYERCAKE_LIB"
echo "path $PYTHONPATH"
EOF
chmod +x "$tmp/cache/venv-peers/bin/python"
bin=$(cd "$(dirname "$cli")" && pwd)
if [ ! -e "$bin/liblayercake.so" ]; then
	# This build's library not built: refused before run.py, naming it.
	env -u LAYERCAKE_LIB LAYERCAKE_CACHE="$tmp/cache" "$cli" bench peers >"$tmp/out" 2>"$tmp/err"
	st=$?
	[ $st = 3 ] || fail "without the library: exit $st, not 3"
	grep -qF "$bin/liblayercake.so" "$tmp/err" || fail "without the library: $(cat "$tmp/err")"
	[ -s "$tmp/out" ] && fail "without the library, the venv's python ran"
	[ $rc = 0 ] && echo "layercake bench peers: help, no venv (exit 3), no library (exit 3)"
	exit $rc
fi
out=$(env -u LAYERCAKE_LIB LAYERCAKE_CACHE="$tmp/cache" PYTHONPATH=/x "$cli" bench peers --quick --pairs 1) ||
	fail "with a venv: exit $?"
want="arg $src/bench/peers/run.py
arg --out-dir
arg $bin
arg --quick
arg --pairs
arg 1
lib $bin/liblayercake.so
path $src/python:/x"
[ "$out" = "$want" ] || fail "with a venv, it ran:
$out
and not:
$want"
out=$(LAYERCAKE_LIB=/mine.so LAYERCAKE_CACHE="$tmp/cache" "$cli" bench peers | grep '^lib ')
[ "$out" = "lib /mine.so" ] || fail "LAYERCAKE_LIB given is not kept: $out"

[ $rc = 0 ] && echo "layercake bench peers: help, no venv (exit 3), exec of run.py"
exit $rc

#!/usr/bin/env bash
# The virtualenv of `make bench-peers`, cached outside the checkout so that
# every clone (and every worktree) reuses it:
#   scripts/peers-venv.sh        -> prints the venv's folder on stdout
# The venv is $LAYERCAKE_CACHE/venv-peers (default ~/.cache/layercake/venv-peers),
# made from the first python3 on PATH that is not Debian's (PEP 668) or from
# $LC_VENV_PYTHON. It holds the peers' PyPI wheels at their pins:
# bench/peers/requirements.txt with dependencies, then
# bench/peers/requirements-nodeps.txt without (nixl's metapackage pulls torch
# and CUDA, which its UCX agent never imports), and checks that both import.
# Idempotent: a venv whose stamp (both files' sha256 and the base interpreter)
# matches is left alone, in well under a second; otherwise it is made anew.
# Concurrent callers wait for each other (flock).
# Exit: 0 ready, 1 failed (pip's output on stderr: no network, a pin gone),
# 3 no usable base python3.
set -euo pipefail
# shellcheck source=scripts/venv-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv-common.sh"
here=$(cd "$(dirname "$0")/.." && pwd)
req=$here/bench/peers/requirements.txt
nodeps=$here/bench/peers/requirements-nodeps.txt

venv_base peers-venv "pyenv's 3.11"

venv_open peers "$req" "$nodeps"
echo "peers-venv: making $venv from $base (downloads about 200 MB the first time)" >&2
rm -rf "$venv"
"$base" -m venv "$venv" >&2
fail() { echo "peers-venv: $1" >&2; rm -rf "$venv"; exit 1; }
pin=$(grep -E '^pip==' "$req" || true)
if [ -n "$pin" ]; then
	"$venv/bin/python" -m pip install -q "$pin" >&2 || fail "pip install $pin failed (no network to PyPI?)"
fi
"$venv/bin/python" -m pip install -q -r "$req" >&2 || fail "pip install -r $req failed (no network to PyPI?)"
"$venv/bin/python" -m pip install -q --no-deps -r "$nodeps" >&2 || fail "pip install --no-deps -r $nodeps failed"
"$venv/bin/python" -c 'import nixl_cu12._api, mooncake.engine, zmq, numpy, libucx' >&2 || fail "the peers' modules do not import"
venv_done

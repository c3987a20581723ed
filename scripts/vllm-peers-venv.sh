#!/usr/bin/env bash
# The virtualenv of `make bench-vllm`: the pinned vLLM venv plus vLLM's own
# connectors' transfer libraries (NIXL, Mooncake TE), without modifying it:
#   scripts/vllm-peers-venv.sh        -> prints the venv's folder on stdout
# The venv is $LAYERCAKE_CACHE/venv-vllm-peers, made from the vLLM venv's
# interpreter; a .pth file in its site-packages puts the vLLM venv's
# site-packages on its path, and bench/vllm/requirements-nodeps.txt is
# installed into it with --no-deps. Idempotent and locked like the others
# (scripts/venv-common.sh): the stamp covers the pins, vLLM's pins and the
# interpreter.
# Exit: 0 ready, 1 failed (pip's output on stderr), 3 no vLLM venv.
set -euo pipefail
# shellcheck source=scripts/venv-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv-common.sh"
here=$(cd "$(dirname "$0")/.." && pwd)
nodeps=$here/bench/vllm/requirements-nodeps.txt
vllm=$("$here/scripts/vllm-venv.sh") || { echo "vllm-peers-venv: the vLLM venv could not be made" >&2; exit 3; }
base=$vllm/bin/python

venv_open vllm-peers "$nodeps" "$here/python/requirements-vllm.txt" "$here/python/requirements-vllm-nodeps.txt"
echo "vllm-peers-venv: making $venv over $vllm" >&2
rm -rf "$venv"
fail() { echo "vllm-peers-venv: $1" >&2; rm -rf "$venv"; exit 1; }
real=$("$base" -c 'import sys; print(sys.base_prefix)')/bin/python3
"$real" -m venv --without-pip "$venv" >&2 || fail "python -m venv failed"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
vsite=$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$vsite" >"$site/zz-venv-vllm.pth"
"$base" -m pip --python "$venv/bin/python" install -q --no-deps -r "$nodeps" >&2 ||
	fail "pip install --no-deps -r $nodeps failed (no network to PyPI?)"
"$venv/bin/python" -c 'import vllm, nixl._api, mooncake.engine' >&2 || fail "vllm, nixl or mooncake does not import"
venv_done

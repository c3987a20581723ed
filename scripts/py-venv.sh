#!/usr/bin/env bash
# A virtualenv with pinned packages from PyPI, cached outside the checkout so
# that every clone (and every worktree) reuses it:
#   scripts/py-venv.sh NAME REQUIREMENTS   -> prints the venv's folder on stdout
# The venv is $LAYERCAKE_CACHE/venv-NAME (default ~/.cache/layercake/venv-NAME),
# made from the first python3 on PATH that is not Debian's (/usr/bin/python3:
# PEP 668, and Debian's python3 stays as apt left it) or from $LC_VENV_PYTHON.
# Idempotent: a venv whose stamp (the requirements file's sha256 and the base
# interpreter) matches is left alone, in well under a second; otherwise it is
# made anew. Concurrent callers wait for each other (flock).
# Exit: 0 ready, 1 failed (pip's output on stderr), 2 usage, 3 no usable base
# python3.
set -euo pipefail
# shellcheck source=scripts/venv-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv-common.sh"
[ $# -eq 2 ] || { echo "usage: $0 NAME REQUIREMENTS" >&2; exit 2; }
name=$1
req=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -f "$req" ] || { echo "py-venv: no file $2" >&2; exit 2; }

venv_base py-venv "pyenv's"

venv_open "$name" "$req"
echo "py-venv: making $venv from $base with $req" >&2
rm -rf "$venv"
"$base" -m venv "$venv" >&2
# pip first (pinned in the file too), then everything at its pin.
pin=$(grep -E '^pip==' "$req" || true)
if [ -n "$pin" ]; then
	"$venv/bin/python" -m pip install -q "$pin" >&2 || { rm -rf "$venv"; exit 1; }
fi
"$venv/bin/python" -m pip install -q -r "$req" >&2 || { rm -rf "$venv"; exit 1; }
venv_done

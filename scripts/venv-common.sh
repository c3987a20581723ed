# shellcheck shell=bash
# What the cached virtualenvs of scripts/py-venv.sh, vllm-venv.sh and
# peers-venv.sh share, sourced by each (under set -euo pipefail). A venv is
# $LAYERCAKE_CACHE/venv-NAME (default ~/.cache/layercake/venv-NAME), so that
# every clone (and every worktree) reuses it. In this order:
#   venv_base TAG EXAMPLE
#     base= the interpreter to make venvs from: $LC_VENV_PYTHON, else the
#     first python3 on PATH that is not Debian's (PEP 668, and Debian's
#     python3 stays as apt left it). Exit 3 with "TAG: ..." on stderr when
#     there is none (EXAMPLE names another, e.g. "pyenv's").
#   venv_open NAME FILE...
#     cache= and venv= as above; stamp= the FILEs' sha256 and the base
#     interpreter's path and version. Waits for the lock of venv-NAME (fd 9,
#     held until the caller exits: concurrent callers wait for each other),
#     then, when $venv is a venv made with that stamp, prints $venv and exits
#     0 (in well under a second). Otherwise the caller makes it anew and ends
#     with venv_done.
#   venv_done
#     writes the stamp into the venv and prints $venv.

venv_base() {
	base=${LC_VENV_PYTHON:-}
	if [ -z "$base" ]; then
		base=$(command -v python3 || true)
		[ -n "$base" ] && base=$("$base" -c 'import sys; print(sys.executable)' 2>/dev/null || true)
	fi
	case "$base" in
	"" | /usr/bin/python3* | /bin/python3*)
		echo "$1: no python3 but Debian's on PATH (found '${base:-none}'); put another" \
			"(e.g. $2) first on PATH or set LC_VENV_PYTHON" >&2
		exit 3 ;;
	esac
}

venv_open() {
	local name=$1
	shift
	cache=${LAYERCAKE_CACHE:-${HOME:-/root}/.cache/layercake}
	venv=$cache/venv-$name
	stamp="$(cat "$@" | sha256sum | cut -d' ' -f1) $("$base" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
	mkdir -p "$cache"
	exec 9>"$cache/.venv-$name.lock"
	flock 9
	if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.layercake-stamp" 2>/dev/null)" = "$stamp" ]; then
		echo "$venv"
		exit 0
	fi
}

venv_done() {
	echo "$stamp" >"$venv/.layercake-stamp"
	echo "$venv"
}

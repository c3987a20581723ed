#!/usr/bin/env bash
# A bare Debian host for the wheel's test (scripts/test-bare-host.sh): a
# minimal bookworm root made by debootstrap (Debian's package) holding only
# python3 and its venv module - no ZeroMQ, libmicrohttpd, libcurl, json-c,
# UCX, no compiler. Cached outside the checkout as a tarball:
#   scripts/bare-root.sh   -> prints $LAYERCAKE_CACHE/bare-bookworm.tar
# (default ~/.cache/layercake). The first run downloads about 40 MB from
# deb.debian.org and takes a few minutes; later runs print the path at once.
# Needs root (debootstrap). Concurrent callers wait for each other (flock).
set -euo pipefail
cache=${LAYERCAKE_CACHE:-${HOME:-/root}/.cache/layercake}
tar=$cache/bare-bookworm.tar
mirror=${LC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the root holds; a change here makes it anew.
include=python3,python3-venv
stamp="bookworm minbase $include"
mkdir -p "$cache"
exec 9>"$cache/.bare-bookworm.lock"
flock 9
if [ -f "$tar" ] && [ "$(cat "$tar.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$tar"
	exit 0
fi
command -v debootstrap >/dev/null || {
	[ "$(id -u)" = 0 ] && apt-get install -y -q debootstrap >&2 ||
		{ echo "bare-root: debootstrap is needed (apt-get install debootstrap)" >&2; exit 1; }
}
root=$(mktemp -d "$cache/bare-bookworm.XXXXXX")
trap 'rm -rf "$root"' EXIT
echo "bare-root: debootstrap bookworm into $root (first run: a few minutes)" >&2
debootstrap --variant=minbase --include="$include" bookworm "$root" "$mirror" >&2
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -cf "$tar.tmp" .
mv "$tar.tmp" "$tar"
echo "$stamp" >"$tar.stamp"
echo "$tar"

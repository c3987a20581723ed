#!/bin/sh
# The shared library exports exactly the public API: the dynamic symbols
# liblayercake.so defines (nm -D --defined-only) must equal the functions
# declared with LC_API in include/layercake.h and include/layercake/*.h
# (layercake/testing.h included: the test hooks are exported too, tests
# link the shared library), both ways, and every one of them must carry
# the version node LAYERCAKE_0.1 of cmake/layercake.map.
# usage: check-exports.sh LIBRARY SOURCE_DIR
set -eu
lib=$1
src=$2
node=LAYERCAKE_0.1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declarations: "LC_API <type> lc_name(" on one line (clang-format keeps the
# name and its parenthesis on the LC_API line).
sed -n 's/^LC_API[^(]*[^a-z0-9_]\(lc_[a-z0-9_]*\)[[:space:]]*(.*/\1/p' \
	"$src"/include/layercake.h "$src"/include/layercake/*.h | sort -u >"$tmp/header"
# An lc_ function declared without LC_API would be missing from the
# library while its header promises it: name those too.
grep -hn '^[a-z].*[^a-z0-9_]lc_[a-z0-9_]*[[:space:]]*(' "$src"/include/layercake.h \
	"$src"/include/layercake/*.h | grep -v 'LC_API\|typedef\|(\*' >"$tmp/bare" || true

nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' >"$tmp/raw"
sed 's/@.*//' "$tmp/raw" | sort -u >"$tmp/lib"
grep -v "@@$node\$" "$tmp/raw" >"$tmp/unversioned" || true

status=0
comm -23 "$tmp/header" "$tmp/lib" >"$tmp/missing"
comm -13 "$tmp/header" "$tmp/lib" >"$tmp/extra"
if [ -s "$tmp/missing" ]; then
	echo "declared in include/layercake but not exported by $lib:"
	sed 's/^/  /' "$tmp/missing"
	status=1
fi
if [ -s "$tmp/extra" ]; then
	echo "exported by $lib but declared in no public header (make it static, or lc__, or declare it):"
	sed 's/^/  /' "$tmp/extra"
	status=1
fi
if [ -s "$tmp/unversioned" ]; then
	echo "exported without the version node $node (cmake/layercake.map):"
	sed 's/^/  /' "$tmp/unversioned"
	status=1
fi
if [ -s "$tmp/bare" ]; then
	echo "declared in a public header without LC_API (not exported under -fvisibility=hidden):"
	sed 's/^/  /' "$tmp/bare"
	status=1
fi
[ "$status" = 0 ] && echo "$(wc -l <"$tmp/lib") symbols, all $node, equal to the public headers"
exit $status

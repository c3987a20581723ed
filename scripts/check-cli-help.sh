#!/bin/sh
# The CLI's help names every benchmark of bench/ (bench/bench_<name>.c):
# `layercake --help` in its summary, `layercake bench --help` in its
# synopsis (issue 20, point 7).   check-cli-help.sh LAYERCAKE SOURCE_DIR
set -u
cli=$1
src=$2
top=$("$cli" --help) || { echo "FAIL: layercake --help"; exit 1; }
bench=$("$cli" bench --help) || { echo "FAIL: layercake bench --help"; exit 1; }
rc=0
for f in "$src"/bench/bench_*.c; do
	n=${f##*/bench_}
	n=${n%.c}
	echo "$top" | grep -Eq "benchmarks:.*\\b$n\\b" || { echo "FAIL: layercake --help does not list $n"; rc=1; }
	echo "$bench" | grep -q "layercake bench $n" || { echo "FAIL: layercake bench --help does not list $n"; rc=1; }
done
[ $rc = 0 ] && echo "every benchmark of bench/ is in both help texts"
exit $rc

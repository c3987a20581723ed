#!/bin/sh
# ctest netns.cluster: a small cluster run (scripts/netns-cluster.sh), then
# check_cluster.py reads its "cluster {json}" lines: every phase there, 0
# mismatched bytes, the healthy rounds all Success, the cut D's rooms failed
# with a reason within their deadlines while the other D's succeeded, the
# round after the link returned all Success, the killed D's rooms failed at
# P with a reason while the other D's succeeded, the round after its
# restart all Success.
#   cluster_test.sh PATH/netns-cluster.sh BUILD_DIR [more options of the script]
set -u
SCRIPT=$1 BUILD=$2
shift 2
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
# --delay where the kernel has sch_netem (the script says when it does not),
# --rate through sch_tbf likewise.
sh "$SCRIPT" --build "$BUILD" --rounds 3 --rooms 4 --layers 8 --pages 8 --item 32768 \
	--layer-ms 40 --rate 2gbit --delay 1 --checksum --cut d1:3 --kill d1 --timeout 120 "$@" >"$OUT"
rc=$?
cat "$OUT"
[ $rc = 77 ] && exit 77
/usr/bin/python3 "$(dirname "$0")/check_cluster.py" "$OUT" || exit 1
[ $rc = 0 ] || { echo "FAILED: netns-cluster.sh exited $rc"; exit 1; }
echo "ok: cluster test"

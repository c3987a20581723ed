#!/bin/sh
# Our transports against fair baselines, measured in one run, 4 MiB messages
# on both sides:
#   ucx am  (UCX_TLS=tcp, LAYERCAKE_UCX_DATA=am)   vs  ucx_perftest -t ucp_am_bw  -s 4194304
#   ucx put (UCX_TLS=tcp, LAYERCAKE_UCX_DATA=put,  vs  ucx_perftest -t ucp_put_bw -s 4194304
#            LAYERCAKE_UCX_ALLOW_SW_RMA=1)
#   tcp (ours)                                     vs  loopback TCP (bench transport's baseline)
#   ucx am over shared memory                      vs  one memcpy of the region
# ucp_put_bw over tcp is UCX's software-emulated put, the slowest path UCX
# has there: it is the baseline for put mode only, never for am. Put mode
# refuses software-emulated RMA unless LAYERCAKE_UCX_ALLOW_SW_RMA=1, which
# only this measurement sets (docs/transport-ucx.md).
#
#   bench/ucx_compare.sh [BUILD_DIR] [RUNS]      (defaults: build, 3)
#
# Our side is `layercake bench transport --transport T --block-kib 4096`
# (which measures its own baseline in the same invocation); a build whose
# CLI cannot run ucx falls back to tests/ucx/ucx_xfer, the same measurement
# (two processes, 4 MiB writes, batches in flight), and the output says
# which one ran. Loopback only; every process it starts is stopped on exit.
set -u
BUILD=${1:-build}
RUNS=${2:-3}
TOTAL_MIB=${TOTAL_MIB:-1024}
SM_TLS=${SM_TLS:-sm,self,tcp}
CLI=$BUILD/layercake
XFER=$BUILD/tests/ucx/ucx_xfer
TMP=$(mktemp -d)
PIDS=""
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)"; exit 2; }
BASELINE=$BUILD/baseline
if [ ! -x "$BASELINE" ]; then
	BASELINE=$TMP/baseline
	cc -O2 -o "$BASELINE" "$(dirname "$0")/../../shared/tools/baseline.c" 2>/dev/null ||
		{ echo "cannot build ../shared/tools/baseline.c"; exit 2; }
fi

gbps_of() { sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p' | head -1; }

# ucx_perftest bandwidth of test $2 (ucp_am_bw | ucp_put_bw) over UCX_TLS=tcp,
# 4 MiB messages, GB/s (perftest's MB is 2^20): "overall" of its Final line
# (every byte delivered, its last flush included) and the median of its
# per-interval averages (the rate messages were posted at).
perftest() {
	port=$(( 20000 + ($$ * 7 + $1) % 20000 ))
	UCX_TLS=tcp ucx_perftest -p "$port" >/dev/null 2>&1 &
	spid=$!
	PIDS="$PIDS $spid"
	sleep 0.5
	out=$(UCX_TLS=tcp timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" \
		-s 4194304 -n 500 -w 20 2>&1)
	wait "$spid" 2>/dev/null
	ov=$(echo "$out" | awk '/Final:/ { printf "%.4f", $7 * 1048576 / 1e9 }')
	md=$(echo "$out" | awk '/^\[thread 0\] *[0-9]/ { print $7 }' | sort -n |
		awk '{ v[NR] = $1 } END { if (NR) printf "%.4f", v[int((NR + 1) / 2)] * 1048576 / 1e9 }')
	echo "${ov:-0} ${md:-0}"
}

# Our transport T (tcp|ucx) with env $2, 4 MiB writes; echoes "GB/s tool".
ours() {
	tp=$1
	shift
	if [ -x "$CLI" ]; then
		j=$(env "$@" timeout 300 "$CLI" bench transport --transport "$tp" --region-mib 1024 \
			--block-kib 4096 --total-mib "$TOTAL_MIB" --json 2>"$TMP/cli.err")
		if echo "$j" | grep -q "\"transport\":\"$tp\"" && [ -n "$(echo "$j" | gbps_of)" ]; then
			b=$(echo "$j" | sed -n 's/.*"baseline_gbps":\([0-9.]*\).*/\1/p')
			echo "$(echo "$j" | gbps_of) ${b:-0} layercake-bench-transport"
			return
		fi
	fi
	info=$TMP/xfer.info
	rm -f "$info" "$info.done"
	env "$@" timeout 300 "$XFER" serve "$tp://127.0.0.1:0" "$info" "$TOTAL_MIB" >/dev/null 2>&1 &
	spid=$!
	PIDS="$PIDS $spid"
	g=$(env "$@" timeout 300 "$XFER" send "$info" "$TOTAL_MIB" 4096 16 2>/dev/null | gbps_of)
	wait "$spid" 2>/dev/null
	echo "${g:-0} 0 ucx_xfer"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

hdr="run am_pt   ucx_am  r_am  put_pt  ucx_put r_put tcp     tcp_bl  r_tcp ucx_sm  memcpy  r_sm"
echo "$hdr"
tool=none
i=1
while [ "$i" -le "$RUNS" ]; do
	set -- $(perftest "$i" ucp_am_bw); am_pt=$1
	set -- $(ours ucx UCX_TLS=tcp LAYERCAKE_UCX_DATA=am); ua=$1; tool=$3
	set -- $(perftest "$((i + 100))" ucp_put_bw); put_pt=$1
	set -- $(ours ucx UCX_TLS=tcp LAYERCAKE_UCX_DATA=put LAYERCAKE_UCX_ALLOW_SW_RMA=1); up=$1
	set -- $(ours tcp); tt=$1; tb=$2
	set -- $(ours ucx UCX_TLS="$SM_TLS" LAYERCAKE_UCX_ERR_MODE=none LAYERCAKE_UCX_DATA=am); us=$1; mc=$2
	if [ "$mc" = 0 ]; then
		mc=$("$BASELINE" memcpy 1024 2>/dev/null | sed -n 's/.*gbps=\([0-9.]*\).*/\1/p')
	fi
	printf "%-3s %-7s %-7s %-5s %-7s %-7s %-5s %-7s %-7s %-5s %-7s %-7s %s\n" "$i" \
		"$am_pt" "$ua" "$(ratio "$ua" "$am_pt")" "$put_pt" "$up" "$(ratio "$up" "$put_pt")" \
		"$tt" "$tb" "$(ratio "$tt" "$tb")" "$us" "${mc:-0}" "$(ratio "$us" "${mc:-0}")"
	i=$((i + 1))
done
echo "(GB/s = 10^9 B/s; *_pt: ucx_perftest over UCX_TLS=tcp, 4 MiB messages, its Final overall"
echo " bandwidth; ours: $tool, 4 MiB writes through 1024 MiB regions, $TOTAL_MIB MiB; r_*: ours / baseline;"
echo " tcp_bl: loopback TCP measured by bench transport in the same invocation; shared memory:"
echo " UCX_TLS=$SM_TLS LAYERCAKE_UCX_ERR_MODE=none, against one memcpy of the region)"

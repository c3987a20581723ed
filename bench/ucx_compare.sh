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
# only this measurement sets (docs/transport-ucx.md). Against perftest ours
# runs through one 4 MiB region, the one buffer perftest rewrites (bench
# transport's region = block: each lap is a new room, granted afresh), so
# that both copy from and into the same cache-sized buffer.
#
#   bench/ucx_compare.sh [BUILD_DIR] [RUNS]      (defaults: build, 3)
#
# UCX=debian (default) runs both sides on the system's UCX (Debian 12: 1.13).
# UCX=wheel and UCX=nixl run both sides on a current UCX from the peers' venv
# (scripts/peers-venv.sh; PEERS_VENV names it): `wheel` is RAPIDS' libucx-cu12
# (pinned, bench/peers/requirements-nodeps.txt), whose ucx_perftest is the
# baseline; `nixl` is the UCX bundled in the nixl-cu12 wheel, the one NIXL
# runs on in `make bench-peers`, with that same ucx_perftest binary. Our CLI is
# built against the system's headers; UCX keeps its ABI across minor versions,
# and the output names the library version each run loaded.
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
# Messages both sides of a perftest comparison stream untimed first
# (perftest's -w, our bench transport's --warmup).
WARMUP=${WARMUP:-20}
PT_ITERS=${PT_ITERS:-500}
PAIRS=${PAIRS:-5}
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

PERFTEST=ucx_perftest
case ${UCX:-debian} in
debian) ;;
wheel | nixl)
	V=${PEERS_VENV:-$(dirname "$0")/../scripts/peers-venv.sh}
	[ -d "$V" ] || V=$("$V") || { echo "no peers venv (scripts/peers-venv.sh)"; exit 2; }
	SP=$(echo "$V"/lib/python3*/site-packages)
	PERFTEST=$SP/libucx/bin/ucx_perftest
	[ -x "$PERFTEST" ] || { echo "no $PERFTEST: the venv lacks libucx-cu12"; exit 2; }
	if [ "$UCX" = wheel ]; then
		LD_LIBRARY_PATH=$SP/libucx/lib
	else
		# nixl's libraries carry hashed names (auditwheel): give them the
		# sonames our CLI and ucx_perftest ask for.
		N=$SP/nixl_cu12.libs
		mkdir -p "$TMP/lib"
		for l in ucp ucs uct ucm; do
			f=$(ls "$N"/lib$l-*.so.0.0.0 2>/dev/null | head -1)
			[ -n "$f" ] || { echo "no lib$l in $N"; exit 2; }
			ln -s "$f" "$TMP/lib/lib$l.so.0"
		done
		LD_LIBRARY_PATH=$TMP/lib:$N
		UCX_MODULE_DIR=$N/ucx
		export UCX_MODULE_DIR
	fi
	export LD_LIBRARY_PATH
	;;
*) echo "UCX=$UCX: debian, wheel or nixl"; exit 2 ;;
esac
command -v "$PERFTEST" >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)"; exit 2; }
# The UCX each side loads, as UCX itself says.
UCX_VERSION=$(python3 -c 'import ctypes; l = ctypes.CDLL("libucp.so.0"); l.ucp_get_version_string.restype = ctypes.c_char_p; print(l.ucp_get_version_string().decode())' 2>/dev/null || echo unknown)
echo "UCX ${UCX:-debian}: library $UCX_VERSION"

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
	UCX_TLS=tcp "$PERFTEST" -p "$port" >/dev/null 2>&1 &
	spid=$!
	PIDS="$PIDS $spid"
	sleep 0.5
	out=$(UCX_TLS=tcp timeout 120 "$PERFTEST" 127.0.0.1 -p "$port" -t "$2" \
		-s 4194304 -n "$PT_ITERS" -w "$WARMUP" 2>&1)
	wait "$spid" 2>/dev/null
	ov=$(echo "$out" | awk '/Final:/ { printf "%.4f", $7 * 1048576 / 1e9 }')
	md=$(echo "$out" | awk '/^\[thread 0\] *[0-9]/ { print $7 }' | sort -n |
		awk '{ v[NR] = $1 } END { if (NR) printf "%.4f", v[int((NR + 1) / 2)] * 1048576 / 1e9 }')
	echo "${ov:-0} ${md:-0}"
}

# Our transport T (tcp|ucx) through regions of R MiB, W writes untimed
# first (0: bench transport's default), M MiB timed, with the env that
# follows, 4 MiB writes; echoes "GB/s baseline-GB/s tool".
ours() {
	tp=$1
	reg=$2
	warm=$3
	mib=$4
	shift 4
	if [ -x "$CLI" ]; then
		wopt=""
		[ "$warm" -gt 0 ] && wopt="--warmup $warm"
		# shellcheck disable=SC2086
		j=$(env "$@" timeout 300 "$CLI" bench transport --transport "$tp" --region-mib "$reg" \
			--block-kib 4096 --total-mib "$mib" $wopt --json 2>"$TMP/cli.err")
		if echo "$j" | grep -q "\"transport\":\"$tp\"" && [ -n "$(echo "$j" | gbps_of)" ]; then
			b=$(echo "$j" | sed -n 's/.*"baseline_gbps":\([0-9.]*\).*/\1/p')
			echo "$(echo "$j" | gbps_of) ${b:-0} layercake-bench-transport"
			return
		fi
	fi
	info=$TMP/xfer.info
	rm -f "$info" "$info.done"
	env "$@" timeout 300 "$XFER" serve "$tp://127.0.0.1:0" "$info" "$mib" >/dev/null 2>&1 &
	spid=$!
	PIDS="$PIDS $spid"
	g=$(env "$@" timeout 300 "$XFER" send "$info" "$mib" 4096 16 2>/dev/null | gbps_of)
	wait "$spid" 2>/dev/null
	echo "${g:-0} 0 ucx_xfer"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }'; }
# PAIRS alternations of perftest's test $1 (ports from $2) and ours with
# the env words $3, the same messages (PT_ITERS of 4 MiB after WARMUP);
# echoes "perftest-median ours-median tool". One pair each way was a coin
# toss on a shared VM: single runs of either side move by 10-20%.
vs_perftest() {
	test_=$1
	port_=$2
	env_=$3
	pts=""
	ous=""
	k=1
	while [ "$k" -le "$PAIRS" ]; do
		pts="$pts $(perftest "$((port_ + k))" "$test_" | cut -d' ' -f1)"
		# shellcheck disable=SC2086
		o=$(ours ucx 4 "$WARMUP" "$((PT_ITERS * 4))" $env_)
		ous="$ous $(echo "$o" | cut -d' ' -f1)"
		k=$((k + 1))
	done
	# shellcheck disable=SC2086
	echo "$(median $pts) $(median $ous) $(echo "$o" | cut -d' ' -f3)"
}

hdr="run am_pt   ucx_am  r_am  put_pt  ucx_put r_put tcp     tcp_bl  r_tcp ucx_sm  memcpy  r_sm"
echo "$hdr"
tool=none
i=1
while [ "$i" -le "$RUNS" ]; do
	set -- $(vs_perftest ucp_am_bw "$((i * 10))" "UCX_TLS=tcp LAYERCAKE_UCX_DATA=am")
	am_pt=$1; ua=$2; tool=$3
	set -- $(vs_perftest ucp_put_bw "$((i * 10 + 100))" \
		"UCX_TLS=tcp LAYERCAKE_UCX_DATA=put LAYERCAKE_UCX_ALLOW_SW_RMA=1")
	put_pt=$1; up=$2
	set -- $(ours tcp 1024 0 "$TOTAL_MIB"); tt=$1; tb=$2
	set -- $(ours ucx 1024 0 "$TOTAL_MIB" UCX_TLS="$SM_TLS" LAYERCAKE_UCX_ERR_MODE=none LAYERCAKE_UCX_DATA=am); us=$1; mc=$2
	if [ "$mc" = 0 ]; then
		mc=$("$BASELINE" memcpy 1024 2>/dev/null | sed -n 's/.*gbps=\([0-9.]*\).*/\1/p')
	fi
	printf "%-3s %-7s %-7s %-5s %-7s %-7s %-5s %-7s %-7s %-5s %-7s %-7s %s\n" "$i" \
		"$am_pt" "$ua" "$(ratio "$ua" "$am_pt")" "$put_pt" "$up" "$(ratio "$up" "$put_pt")" \
		"$tt" "$tb" "$(ratio "$tt" "$tb")" "$us" "${mc:-0}" "$(ratio "$us" "${mc:-0}")"
	i=$((i + 1))
done
echo "(GB/s = 10^9 B/s; *_pt: ucx_perftest over UCX_TLS=tcp, 4 MiB messages, its Final overall"
echo " bandwidth; against perftest each figure is the median of $PAIRS alternating runs of each side,"
echo " $PT_ITERS messages after $WARMUP untimed, both sides; ours: $tool, 4 MiB writes: against perftest"
echo " through one 4 MiB region, the buffer perftest rewrites (room laps re-grant it), else $TOTAL_MIB MiB"
echo " through 1024 MiB regions; r_*: ours / baseline;"
echo " tcp_bl: loopback TCP measured by bench transport in the same invocation; shared memory:"
echo " UCX_TLS=$SM_TLS LAYERCAKE_UCX_ERR_MODE=none, against one memcpy of the region)"

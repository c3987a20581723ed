#!/bin/sh
# A layercake cluster on one machine: a bootstrap server, P ranks and D
# instances, each in its own network namespace with its own address, joined
# by a Linux bridge (docs/deployment.md, "A cluster on one machine").
#
#   netns-cluster.sh [options]
#
#   --build DIR          the build directory (default: build): DIR/layercake, DIR/liblayercake.so
#   --p-ranks N          P ranks of one P instance, TP N (default 2)
#   --d N                D instances, TP 1 each (default 2)
#   --transport T        tcp (default) or ucx (UCX_TLS=tcp)
#   --rounds N           healthy rounds (default 3)
#   --rooms N            rooms per D instance per round (default 4)
#   --layers N --pages N --item BYTES   geometry: layers, pages per room, bytes of one
#                        page of one buffer at D (each P rank holds BYTES / p-ranks)
#                        (default 8, 8, 32768: 4 MiB a room)
#   --layer-ms MS        P's "compute" per layer (default 50)
#   --rate RATE          tc tbf rate on every link, both ways (e.g. 1gbit); needs sch_tbf
#   --delay MS           tc netem delay on every link, each way; needs sch_netem
#   --cut NODE[:S]       after the healthy rounds, take NODE's link down (d1, p0...) while a
#                        round is in flight, for S seconds (default 4), then a round after it
#   --settle S           seconds between the link's return and the round after it (default 0)
#   --kill NODE          SIGKILL NODE (a D instance or a P rank) while a round is in flight,
#                        restart it (same session id or rank), then a round after it
#   --checksum           the room checksum (room_checksum=1) on every node
#   --knob NAME=VALUE    a LAYERCAKE_* variable for every node (repeatable)
#   --timeout S          the whole run (default 300)
#
# Needs root, ip(8) with `ip netns`, a bridge, veth pairs and /usr/bin/python3
# with numpy; exits 77 ("skipped") with the reason when one is missing.
# Results are lines "cluster {json}" on stdout (per phase: rooms, bytes
# verified, mismatched bytes, failure reasons per node; bytes and GB/s per
# link; the outcome of the cut link and the killed instance); progress and
# failures on stderr. Exit 0 only if every check held. Everything it creates
# (namespaces lcc<pid>*, links, processes, files) is removed on exit, also
# on failure, timeout or a signal.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$HERE/../build
P_RANKS=2 D_COUNT=2 TRANSPORT=tcp ROUNDS=3 ROOMS=4 LAYERS=8 PAGES=8 ITEM=32768 LAYER_MS=50
RATE='' DELAY='' CUT='' CUT_S=4 SETTLE=0 KILL='' CHECKSUM=0 KNOBS='' TIMEOUT=300

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit "$1"; }
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || case $1 in --checksum|-h|--help) ;; *) echo "$1 needs a value" >&2; usage 2 ;; esac
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--p-ranks) P_RANKS=$2; shift 2 ;;
	--d) D_COUNT=$2; shift 2 ;;
	--transport) TRANSPORT=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--rooms) ROOMS=$2; shift 2 ;;
	--layers) LAYERS=$2; shift 2 ;;
	--pages) PAGES=$2; shift 2 ;;
	--item) ITEM=$2; shift 2 ;;
	--layer-ms) LAYER_MS=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--delay) DELAY=$2; shift 2 ;;
	--cut) CUT=${2%%:*}; case $2 in *:*) CUT_S=${2#*:} ;; esac; shift 2 ;;
	--settle) SETTLE=$2; shift 2 ;;
	--kill) KILL=$2; shift 2 ;;
	--checksum) CHECKSUM=1; shift ;;
	--knob) KNOBS="$KNOBS $2"; shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	-h|--help) usage 0 ;;
	*) echo "unknown option $1" >&2; usage 2 ;;
	esac
done
for v in "$P_RANKS" "$D_COUNT" "$ROUNDS" "$ROOMS" "$LAYERS" "$PAGES" "$ITEM" "$LAYER_MS" "$CUT_S" "$SETTLE" "$TIMEOUT"; do
	case $v in ''|*[!0-9]*) echo "not a number: '$v'" >&2; exit 2 ;; esac
done
[ "$P_RANKS" -ge 1 ] && [ "$P_RANKS" -le 8 ] && [ "$D_COUNT" -ge 1 ] && [ "$D_COUNT" -le 8 ] ||
	{ echo "--p-ranks and --d: 1 to 8" >&2; exit 2; }
[ $((ITEM % (4 * P_RANKS))) = 0 ] || { echo "--item must be a multiple of 4 x p-ranks" >&2; exit 2; }
case $TRANSPORT in tcp|ucx) ;; *) echo "--transport tcp|ucx" >&2; exit 2 ;; esac
case $CUT in ''|p[0-9]|d[0-9]|b) ;; *) echo "--cut: a node name (p0, d1, b)" >&2; exit 2 ;; esac
case $KILL in ''|d[0-9]|p[0-9]) ;; *) echo "--kill: a D instance or P rank (d1, p1, ...)" >&2; exit 2 ;; esac

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip(8) (Debian: iproute2)"
ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable"
command -v timeout >/dev/null 2>&1 || skip "no timeout(1)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip "no python3"
"$PY" -c 'import numpy' 2>/dev/null || skip "python3 has no numpy (Debian: python3-numpy)"
LC=$(cd "$BUILD" 2>/dev/null && pwd)/layercake
[ -x "$LC" ] || { echo "no $BUILD/layercake: build first (make)" >&2; exit 2; }
LIB=$(dirname "$LC")/liblayercake.so
[ -f "$LIB" ] || { echo "no $LIB: build first (make)" >&2; exit 2; }
if [ "$TRANSPORT" = ucx ] && ! "$LC" info 2>/dev/null | grep -q '^transports:.*ucx'; then
	skip "this build has no ucx transport"
fi

ID=$$
PFX=lcc$ID
HUB=${PFX}h
BR=${PFX}br
TMP=$(mktemp -d)
ORCH=

cleanup() {
	trap - EXIT INT TERM
	if [ -n "$ORCH" ]; then
		kill "$ORCH" 2>/dev/null
		wait "$ORCH" 2>/dev/null
	fi
	# Whatever still runs in our namespaces (we started all of it).
	for ns in $(ip netns list 2>/dev/null | sed -n "s/^\(${PFX}[a-z][a-z0-9]*\).*/\1/p"); do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Namespaces of a run that was killed (ctest's timeout): lcc<pid>* whose
# pid is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(lcc[0-9][0-9]*[a-z][a-z0-9]*\).*/\1/p'); do
	pid=$(echo "$ns" | sed 's/^lcc\([0-9]*\).*/\1/')
	kill -0 "$pid" 2>/dev/null && continue
	for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	ip netns del "$ns" 2>/dev/null
done

NET=10.77.0
NODES="b"
i=0; while [ $i -lt "$P_RANKS" ]; do NODES="$NODES p$i"; i=$((i + 1)); done
i=0; while [ $i -lt "$D_COUNT" ]; do NODES="$NODES d$i"; i=$((i + 1)); done

ip netns add "$HUB" 2>"$TMP/err" || skip "cannot create a network namespace: $(cat "$TMP/err")"
ip -n "$HUB" link set lo up
ip -n "$HUB" link add "$BR" type bridge 2>"$TMP/err" || skip "cannot create a bridge: $(cat "$TMP/err")"
ip -n "$HUB" link set "$BR" up

# Qdiscs: say what this kernel has.
SHAPING=none NOTES=
if [ -n "$RATE$DELAY" ]; then
	ip -n "$HUB" link add "${PFX}t0" type veth peer name "${PFX}t1"
	if [ -n "$DELAY" ] && ! ip netns exec "$HUB" tc qdisc add dev "${PFX}t0" root netem delay "${DELAY}ms" 2>"$TMP/err"; then
		NOTES="delay unavailable: tc netem fails here ($(head -1 "$TMP/err" | tr -d '"\\')), links are not delayed"
		echo "$NOTES" >&2
		DELAY=
	fi
	ip netns exec "$HUB" tc qdisc del dev "${PFX}t0" root 2>/dev/null
	if [ -n "$RATE" ] && ! ip netns exec "$HUB" tc qdisc add dev "${PFX}t0" root tbf rate "$RATE" burst 256kb latency 100ms 2>"$TMP/err"; then
		NOTES="${NOTES:+$NOTES; }rate unavailable: tc tbf fails here ($(head -1 "$TMP/err" | tr -d '"\\')), links are not limited"
		echo "$NOTES" >&2
		RATE=
	fi
	ip -n "$HUB" link del "${PFX}t0"
fi
# One qdisc chain per device: netem (delay) with tbf (rate) below it, or either alone.
shape() { # ns dev
	if [ -n "$DELAY" ] && [ -n "$RATE" ]; then
		ip netns exec "$1" tc qdisc add dev "$2" root handle 1: netem delay "${DELAY}ms" &&
		ip netns exec "$1" tc qdisc add dev "$2" parent 1:1 handle 10: tbf rate "$RATE" burst 256kb latency 100ms
	elif [ -n "$DELAY" ]; then
		ip netns exec "$1" tc qdisc add dev "$2" root netem delay "${DELAY}ms"
	elif [ -n "$RATE" ]; then
		ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 100ms
	fi
}

PORTS='' IPS='' NSS=''
n=1
for node in $NODES; do
	ns=$PFX$node
	port=$PFX$node
	case $node in b) ip=$NET.2 ;; p*) ip=$NET.$((10 + ${node#p})) ;; d*) ip=$NET.$((20 + ${node#d})) ;; esac
	ip netns add "$ns" || { echo "cannot create namespace $ns" >&2; exit 1; }
	ip -n "$ns" link set lo up
	ip link add "$port" netns "$HUB" type veth peer name eth0 netns "$ns" 2>"$TMP/err" ||
		skip "cannot create a veth pair: $(cat "$TMP/err")"
	ip -n "$HUB" link set "$port" master "$BR" up
	ip -n "$ns" addr add "$ip/24" dev eth0
	ip -n "$ns" link set eth0 up
	if [ -n "$RATE$DELAY" ]; then
		shape "$HUB" "$port" && shape "$ns" eth0 || { echo "tc failed on $port" >&2; exit 1; }
	fi
	PORTS="$PORTS\"$node\": \"$port\", "
	IPS="$IPS\"$node\": \"$ip\", "
	NSS="$NSS\"$node\": \"$ns\", "
	n=$((n + 1))
done
[ -n "$RATE" ] && SHAPING="tbf rate $RATE"
[ -n "$DELAY" ] && SHAPING="${SHAPING#none}${RATE:+, }netem delay ${DELAY}ms each way"

# The bridge forwards once its ports are up (no STP): wait until every node
# answers (a TCP connect to a closed port is refused) from P rank 0's
# namespace, at most 10 s.
ALL_IPS=$(echo "$IPS" | sed 's/"[a-z0-9]*": "\([0-9.]*\)", */\1 /g')
ip netns exec "${PFX}p0" "$PY" - $ALL_IPS <<'EOF' || { echo "the nodes cannot reach each other over the bridge" >&2; exit 1; }
import socket, sys, time
end = time.monotonic() + 10
for ip in sys.argv[1:]:
    while True:
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect((ip, 9))
            break
        except ConnectionRefusedError:
            break
        except OSError:
            if time.monotonic() > end:
                print("no answer from %s" % ip, file=sys.stderr)
                sys.exit(1)
            time.sleep(0.1)
        finally:
            s.close()
EOF

# Deadlines of the nodes: short enough that a cut link or a killed peer ends
# its rooms within seconds, long enough for a loaded 2-core machine.
ENV="\"LAYERCAKE_LIB\": \"$LIB\", \"PYTHONPATH\": \"$HERE/../python\""
ENV="$ENV, \"UCX_TLS\": \"tcp\", \"UCX_WARN_UNUSED_ENV_VARS\": \"n\", \"LAYERCAKE_ROOM_CHECKSUM\": \"$CHECKSUM\""
KN="LAYERCAKE_HEARTBEAT_INTERVAL_MS=500 LAYERCAKE_HEARTBEAT_MISSES=2 LAYERCAKE_CONNECT_TIMEOUT_MS=2000
LAYERCAKE_PROGRESS_TIMEOUT_MS=2000 LAYERCAKE_TRANSFER_TIMEOUT_MS=4000 LAYERCAKE_BOOTSTRAP_TIMEOUT_MS=6000
LAYERCAKE_WAITING_TIMEOUT_MS=10000 LAYERCAKE_LAYER_TIMEOUT_MS=10000 LAYERCAKE_METADATA_TIMEOUT_MS=10000"
KNJSON=
for kv in $KN $KNOBS; do
	k=${kv%%=*} v=${kv#*=}
	case $k in LAYERCAKE_*) ;; *) k=LAYERCAKE_$(echo "$k" | tr a-z A-Z) ;; esac
	case $v in ''|*[!0-9]*) echo "--knob $kv: a number" >&2; exit 2 ;; esac
	KNJSON=$(echo "$KNJSON" | sed "s/\"$k\": [0-9]*, //")
	KNJSON="$KNJSON\"$k\": $v, "
done
KNJSON=${KNJSON%, }
ENV="$ENV, $(echo "$KNJSON" | sed 's/: \([0-9]*\)/: "\1"/g')"
DEADLINE=$(echo "$KNJSON" | sed -n 's/.*"LAYERCAKE_BOOTSTRAP_TIMEOUT_MS": \([0-9]*\).*"LAYERCAKE_WAITING_TIMEOUT_MS": \([0-9]*\).*/\1 \2/p;
	s/.*"LAYERCAKE_WAITING_TIMEOUT_MS": \([0-9]*\).*"LAYERCAKE_BOOTSTRAP_TIMEOUT_MS": \([0-9]*\).*/\2 \1/p' | head -1)
DEADLINE=$(( (${DEADLINE% *} + ${DEADLINE#* }) / 1000 + 5 ))

cat >"$TMP/cfg.json" <<EOF
{"layercake": "$LC", "python": "$PY", "hub": "$HUB", "transport": "$TRANSPORT",
 "ports": {${PORTS%, }}, "ips": {${IPS%, }}, "ns": {${NSS%, }},
 "bootstrap_port": 8998, "p_ranks": $P_RANKS, "d_count": $D_COUNT, "rounds": $ROUNDS,
 "geometry": {"layers": $LAYERS, "pages_per_room": $PAGES, "item": $ITEM, "rooms": $ROOMS},
 "layer_ms": $LAYER_MS, "cut": "$CUT", "cut_s": $CUT_S, "settle_s": $SETTLE, "kill": "$KILL",
 "room_deadline_s": $DEADLINE, "start_timeout_s": 30,
 "env": {$ENV}, "knobs": {$KNJSON}}
EOF
echo "cluster {\"event\": \"network\", \"bridge\": \"$BR\", \"hub\": \"$HUB\", \"nodes\": {${IPS%, }}, \"shaping\": \"$SHAPING\", \"shaping_notes\": \"$NOTES\", \"transport\": \"$TRANSPORT\", \"p_tp\": $P_RANKS, \"d_instances\": $D_COUNT, \"room_bytes\": $((2 * LAYERS * PAGES * ITEM)), \"knobs\": {$KNJSON}}"

timeout -k 5 "$TIMEOUT" "$PY" "$HERE/netns_cluster.py" orchestrate "$TMP/cfg.json" &
ORCH=$!
wait "$ORCH"
rc=$?
ORCH=
[ $rc = 124 ] && echo "FAILED: the whole run passed --timeout $TIMEOUT s" >&2
exit $rc

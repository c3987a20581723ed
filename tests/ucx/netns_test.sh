#!/bin/sh
# Multi-host test on one machine (issue 7): two network namespaces joined by
# a link with 1 ms delay each way; the bootstrap servers and P in NS_P, D in
# NS_D.
#
#   1. the link: a veth pair with `tc netem delay 1ms` on both ends where the
#      kernel has sch_netem, else two TUN devices joined by lc_netdelay
#      (tests/support/netdelay.c: every packet held 1 ms in userspace);
#   2. the delay is measured: the best of five TCP connects to a closed port
#      (SYN out, RST back) must take >= 2 ms, and lc_netdelay's own
#      statistics must show every packet held >= 1000 us;
#   3. ucx_xfer (where UCX is built): 256 MiB in 4 MiB writes over tcp:// and
#      ucx:// (UCX_TLS=tcp), verified byte-exact by D;
#   4. `layercake demo --quick` over tcp and over ucx (UCX_TLS=tcp):
#      orchestrator, bootstrap servers and P in NS_P (ip netns exec), D
#      enters NS_D itself (--d-netns); exit 0, every room Success, zero
#      mismatched pages.
#
#   netns_test.sh --netdelay PATH [--layercake PATH] [--xfer PATH]
#
# LC_NETNS_LINK=auto|netem|netdelay picks the link (auto: netem if it works).
# Needs root and `ip netns` (exit 77 otherwise). Everything it creates
# (namespaces, links, processes, files) is removed on exit.
set -u
NETDELAY= LC= XFER=
while [ $# -gt 0 ]; do
	case $1 in
	--netdelay) NETDELAY=$2; shift 2 ;;
	--layercake) LC=$2; shift 2 ;;
	--xfer) XFER=$2; shift 2 ;;
	*) echo "usage: netns_test.sh --netdelay PATH [--layercake PATH] [--xfer PATH]"; exit 2 ;;
	esac
done
LINK=${LC_NETNS_LINK:-auto}

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip(8)"
ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable"
command -v timeout >/dev/null 2>&1 || skip "no timeout(1)"
PY=$(command -v python3 2>/dev/null)
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

ID=$$
NS_P=lc_p_$ID
NS_D=lc_d_$ID
DEV_P=lcp$ID
DEV_D=lcd$ID
NET=10.$((ID % 200 + 20)).$((ID / 200 % 250))
IP_P=$NET.1
IP_D=$NET.2
TMP=$(mktemp -d)
PIDS=""
ND_PID=""
T0=$(date +%s)

cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	if [ -n "$ND_PID" ]; then
		kill "$ND_PID" 2>/dev/null
		wait "$ND_PID" 2>/dev/null
	fi
	ip netns del "$NS_P" 2>/dev/null
	ip netns del "$NS_D" 2>/dev/null
	ip link del "$DEV_P" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Namespaces of a run that was killed (ctest's timeout): lc_p_/lc_d_<pid>
# whose pid is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(lc_[pd]_[0-9]*\).*/\1/p'); do
	kill -0 "${ns#lc_?_}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

ip netns add "$NS_P" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$NS_D" || skip "cannot create a network namespace"
for ns in "$NS_P" "$NS_D"; do ip -n "$ns" link set lo up; done

# Addresses, MTU and up, once DEV_P is in NS_P and DEV_D in NS_D.
link_up() {
	ip -n "$NS_P" addr add "$IP_P/24" dev "$DEV_P" &&
	ip -n "$NS_D" addr add "$IP_D/24" dev "$DEV_D" &&
	ip -n "$NS_P" link set "$DEV_P" mtu "$1" up &&
	ip -n "$NS_D" link set "$DEV_D" mtu "$1" up
}

veth_link() {
	ip link add "$DEV_P" type veth peer name "$DEV_D" || return 1
	ip link set "$DEV_P" netns "$NS_P" && ip link set "$DEV_D" netns "$NS_D" && link_up 1500
}

MODE=
if [ "$LINK" != netdelay ]; then
	if ! veth_link; then
		echo "cannot create a veth pair: trying lc_netdelay"
		ip link del "$DEV_P" 2>/dev/null
		ip -n "$NS_P" link del "$DEV_P" 2>/dev/null
		[ "$LINK" = netem ] && skip "LC_NETNS_LINK=netem and no veth pair"
	elif ip netns exec "$NS_P" tc qdisc add dev "$DEV_P" root netem delay 1ms 2>"$TMP/tc.err" &&
	   ip netns exec "$NS_D" tc qdisc add dev "$DEV_D" root netem delay 1ms 2>>"$TMP/tc.err"; then
		MODE="veth + tc netem delay 1ms each way"
	else
		echo "tc netem is unavailable here ($(head -1 "$TMP/tc.err")): using lc_netdelay"
		[ "$LINK" = netem ] && skip "LC_NETNS_LINK=netem and tc netem does not work"
		ip -n "$NS_P" link del "$DEV_P" 2>/dev/null
	fi
fi
if [ -z "$MODE" ]; then
	[ -n "$NETDELAY" ] && [ -x "$NETDELAY" ] || skip "no lc_netdelay given"
	"$NETDELAY" --delay-us 1000 "$DEV_P" "$DEV_D" >"$TMP/nd.out" 2>"$TMP/nd.err" &
	ND_PID=$!
	i=0
	while ! grep -q '^ready' "$TMP/nd.out" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 "$ND_PID" 2>/dev/null; then
			cat "$TMP/nd.err"
			ND_PID=
			break
		fi
		sleep 0.05
	done
	if [ -n "$ND_PID" ] && ip link set "$DEV_P" netns "$NS_P" &&
	   ip link set "$DEV_D" netns "$NS_D" && link_up 65000; then
		MODE="TUN pair + lc_netdelay, 1 ms each way (userspace; no sch_netem in this kernel), MTU 65000"
	else
		# Keep the multi-host part running; say loudly that it is not delayed.
		[ -n "$ND_PID" ] && kill "$ND_PID" 2>/dev/null && wait "$ND_PID" 2>/dev/null
		ND_PID=
		veth_link || skip "cannot create a veth pair"
		MODE="veth, NO delay (neither tc netem nor a TUN device works here)"
	fi
fi
echo "link: $NS_P ($IP_P) <-> $NS_D ($IP_D): $MODE"

fail=0
bad() { echo "FAILED: $*"; fail=1; }

# netdelay's statistics so far (one JSON line, SIGUSR1), or "" without it.
nd_stats() {
	[ -n "$ND_PID" ] || return 0
	n=$(grep -c '^{' "$TMP/nd.out")
	kill -USR1 "$ND_PID"
	i=0
	while [ "$(grep -c '^{' "$TMP/nd.out")" -le "$n" ] && [ $i -lt 100 ]; do
		sleep 0.02
		i=$((i + 1))
	done
	grep '^{' "$TMP/nd.out" | tail -1
}

# --- the delay, measured
if [ -n "$PY" ]; then
	rtt=$(ip netns exec "$NS_P" "$PY" - "$IP_D" <<'EOF'
import socket, sys, time
best = None
for _ in range(5):
    s = socket.socket()
    s.settimeout(5)
    t = time.monotonic()
    try:
        s.connect((sys.argv[1], 9))  # closed: SYN out, RST back
    except OSError:
        pass
    dt = (time.monotonic() - t) * 1e3
    s.close()
    best = dt if best is None else min(best, dt)
print("%.3f" % best)
EOF
)
	echo "round trip: TCP connect to a closed port in $NS_D, best of 5: $rtt ms"
	case $MODE in
	*NO\ delay*) ;;
	*) "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 2.0 else 1)" "$rtt" ||
		bad "round trip $rtt ms < 2 ms: the 1 ms delay each way is not there" ;;
	esac
fi

# --- transport level: ucx_xfer over tcp:// and ucx://
if [ -n "$XFER" ]; then
	for tp in tcp ucx; do
		info="$TMP/$tp.info"
		ip netns exec "$NS_D" env UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n timeout 30 \
			"$XFER" serve "$tp://$IP_D:0" "$info" 256 >"$TMP/$tp.serve" 2>"$TMP/$tp.serve.err" &
		spid=$!
		PIDS="$PIDS $spid"
		if ip netns exec "$NS_P" env UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n timeout 30 \
			"$XFER" send "$info" 256 4096 8 >"$TMP/$tp.send" 2>"$TMP/$tp.send.err"; then
			wait "$spid"
			src=$?
		else
			echo "xfer $tp: sender failed:"
			cat "$TMP/$tp.send.err"
			kill "$spid" 2>/dev/null
			wait "$spid" 2>/dev/null
			src=1
		fi
		PIDS=$(echo "$PIDS" | sed "s/ $spid//")
		if [ "$src" = 0 ] && grep -q '"byte_exact":true' "$TMP/$tp.serve"; then
			echo "xfer $tp: ok: $(cat "$TMP/$tp.send")"
		else
			bad "xfer $tp (receiver exit $src)"
			cat "$TMP/$tp.serve" "$TMP/$tp.serve.err" "$TMP/$tp.send.err"
		fi
	done
else
	echo "xfer: skipped (no ucx_xfer given: UCX is not built)"
fi

# --- the demo: bootstrap + P in NS_P, D in NS_D
check_demo() { # transport json stderr
	if [ -z "$PY" ]; then
		grep -q '"mismatches":0,"failed_rooms":0}' "$2"
		return
	fi
	"$PY" - "$1" "$2" <<'EOF'
import json, sys
tp, path = sys.argv[1], sys.argv[2]
try:
    doc = json.load(open(path))
except ValueError as e:
    print("demo %s: stdout is not one JSON object: %s" % (tp, e))
    sys.exit(1)
ok = doc["mismatches"] == 0 and doc["failed_rooms"] == 0 and len(doc["modes"]) == 3
print("demo %s: link %.2f GB/s (calibrated), %.1f TFLOP/s, %.1f s" %
      (tp, doc["link_gbps_calibrated"] or 0, doc["tflops"] or 0, doc["wall_s"]))
for m in doc["modes"]:
    sts = {r["status"] for r in m["per_request"]}
    ok = ok and m["mismatches"] == 0 and m["failed_rooms"] == 0 and sts == {"Success"} \
        and m["bytes_verified"] > 0
    print("demo %s: %-13s TTFT p50 %8.1f ms p99 %8.1f ms, tail p50 %7.2f ms, "
          "%.2f GB/s, %d bytes verified, %d mismatches, %d failed rooms" %
          (tp, m["name"], m["ttft_p50_ms"], m["ttft_p99_ms"], m["exposed_tail_p50_ms"],
           m["stream_gbps"], m["bytes_verified"], m["mismatches"], m["failed_rooms"]))
sys.exit(0 if ok else 1)
EOF
}

if [ -n "$LC" ]; then
	DEMO_TPS=tcp
	if "$LC" info 2>/dev/null | grep -q '^transports:.*ucx'; then
		DEMO_TPS="tcp ucx"
	else
		echo "demo ucx: skipped (this build has no ucx transport: pkg-config ucx found nothing)"
	fi
	for tp in $DEMO_TPS; do
		before=$(nd_stats)
		ip netns exec "$NS_P" env UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n timeout 60 \
			"$LC" demo --quick --json --no-svg --transport "$tp" --d-netns "$NS_D" \
			--p-host "$IP_P" --d-host "$IP_D" >"$TMP/demo.$tp.json" 2>"$TMP/demo.$tp.err"
		rc=$?
		after=$(nd_stats)
		if [ $rc = 0 ] && check_demo "$tp" "$TMP/demo.$tp.json"; then
			:
		else
			bad "demo $tp (exit $rc)"
			tail -20 "$TMP/demo.$tp.err"
		fi
		if [ -n "$after" ] && [ -n "$PY" ]; then
			"$PY" -c '
import json, sys
b = json.loads(sys.argv[2])["netdelay"] if sys.argv[2] else None
a = json.loads(sys.argv[3])["netdelay"]
d = lambda k, f: a[k][f] - (b[k][f] if b else 0)
print("demo %s: through lc_netdelay: P->D %d packets %.1f MB, D->P %d packets %.1f MB" %
      (sys.argv[1], d("a_to_b", "packets"), d("a_to_b", "bytes") / 1e6,
       d("b_to_a", "packets"), d("b_to_a", "bytes") / 1e6))' "$tp" "$before" "$after"
		fi
	done
else
	echo "demo: skipped (no layercake given: the control plane's libraries are missing)"
fi

# --- netdelay's account: every packet held >= 1 ms
if [ -n "$ND_PID" ]; then
	kill -TERM "$ND_PID"
	wait "$ND_PID"
	nrc=$?
	ND_PID=
	stats=$(grep '^{' "$TMP/nd.out" | tail -1)
	echo "lc_netdelay: $stats"
	if [ $nrc != 0 ] || [ -z "$stats" ]; then
		bad "lc_netdelay exited $nrc"
		cat "$TMP/nd.err"
	elif [ -n "$PY" ]; then
		"$PY" -c '
import json, sys
s = json.loads(sys.argv[1])["netdelay"]
ok = True
for k in ("a_to_b", "b_to_a"):
    d = s[k]
    print("lc_netdelay %s: %d packets, %.1f MB, held min %.1f us avg %.1f us max %.1f us, "
          "%d dropped (queue full)" % (k, d["packets"], d["bytes"] / 1e6, d["held_min_us"],
                                       d["held_avg_us"], d["held_max_us"], d["dropped_full"]))
    ok = ok and d["packets"] > 0 and d["held_min_us"] >= 1000
sys.exit(0 if ok else 1)' "$stats" || bad "lc_netdelay held a packet less than 1000 us, or forwarded none"
	fi
fi
echo "$( [ $fail = 0 ] && echo ok || echo FAILED ): multi-host test in $(( $(date +%s) - T0 )) s ($MODE)"
exit $fail

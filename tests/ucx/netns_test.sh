#!/bin/sh
# Multi-host test on one machine: two network namespaces joined by a veth
# pair (1 ms netem delay each way where the kernel has sch_netem), the
# receiver (D) in one, the sender (P) in the other; 256 MiB streamed over
# tcp:// and over ucx:// (UCX_TLS=tcp), verified byte-exact by D.
#
#   netns_test.sh PATH/TO/ucx_xfer [transports...]
#
# Needs root and `ip netns` (exit 77 otherwise). Everything it creates
# (namespaces, veth, processes, files) is removed on exit.
set -u
XFER=${1:?usage: netns_test.sh ucx_xfer [tcp] [ucx]}
shift
TRANSPORTS=${*:-tcp ucx}

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip(8)"
ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable"

ID=$$
NS_P=lc_p_$ID
NS_D=lc_d_$ID
V_P=lcp$ID
V_D=lcd$ID
NET=10.$((ID % 200 + 20)).$((ID / 200 % 250))
TMP=$(mktemp -d)
PIDS=""

cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	ip netns del "$NS_P" 2>/dev/null
	ip netns del "$NS_D" 2>/dev/null
	ip link del "$V_P" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$NS_P" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$NS_D" || skip "cannot create a network namespace"
ip link add "$V_P" type veth peer name "$V_D" || skip "cannot create a veth pair"
ip link set "$V_P" netns "$NS_P"
ip link set "$V_D" netns "$NS_D"
ip -n "$NS_P" addr add "$NET.1/24" dev "$V_P"
ip -n "$NS_D" addr add "$NET.2/24" dev "$V_D"
for ns in "$NS_P" "$NS_D"; do ip -n "$ns" link set lo up; done
ip -n "$NS_P" link set "$V_P" up
ip -n "$NS_D" link set "$V_D" up

DELAY="1 ms netem delay each way"
if ! ip netns exec "$NS_P" tc qdisc add dev "$V_P" root netem delay 1ms 2>"$TMP/tc.err" ||
   ! ip netns exec "$NS_D" tc qdisc add dev "$V_D" root netem delay 1ms 2>>"$TMP/tc.err"; then
	DELAY="NO delay: tc netem is unavailable here ($(head -1 "$TMP/tc.err"))"
fi
echo "namespaces $NS_P ($NET.1) -> $NS_D ($NET.2), $DELAY"

fail=0
for tp in $TRANSPORTS; do
	info="$TMP/$tp.info"
	ip netns exec "$NS_D" env UCX_TLS=tcp "$XFER" serve "$tp://$NET.2:0" "$info" 256 \
		>"$TMP/$tp.serve" 2>"$TMP/$tp.serve.err" &
	spid=$!
	PIDS="$PIDS $spid"
	if ip netns exec "$NS_P" env UCX_TLS=tcp "$XFER" send "$info" 256 4096 8 \
		>"$TMP/$tp.send" 2>"$TMP/$tp.send.err"; then
		wait "$spid"
		src=$?
	else
		echo "$tp: sender failed:"
		cat "$TMP/$tp.send.err"
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		src=1
	fi
	PIDS=$(echo "$PIDS" | sed "s/ $spid//")
	if [ "$src" = 0 ] && grep -q '"byte_exact":true' "$TMP/$tp.serve"; then
		echo "$tp: ok: $(cat "$TMP/$tp.send")"
		echo "$tp:     $(cat "$TMP/$tp.serve")"
	else
		echo "$tp: FAILED (receiver exit $src)"
		cat "$TMP/$tp.serve" "$TMP/$tp.serve.err" "$TMP/$tp.send.err"
		fail=1
	fi
done
exit $fail

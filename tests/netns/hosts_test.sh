#!/bin/sh
# P and D on two hosts (issue 16): two network namespaces joined by a veth,
# the bootstrap server and P in NS_P, D in NS_D, through the whole control
# plane (tests/netns/hosts_peer.py, the Python API). D is given nothing but
# the bootstrap server's address; P nothing at all.
#
#   default_tcp / default_ucx   no address setting: every room Success, every
#                               byte checked (ucx: UCX_TLS=tcp; skipped when
#                               the build has no ucx transport)
#   p_host_wildcard             Prefill(host="0.0.0.0"): works
#   d_wildcard                  Decode(host="0.0.0.0", listen_url
#                               "tcp://0.0.0.0:0"): works
#   d_host_loopback             Decode(host="127.0.0.1"): fails within 10 s,
#                               the reason names 127.0.0.1 and D's host
#   d_listen_loopback           listen_url "tcp://127.0.0.1:0": fails within
#                               10 s, naming the URL and listen_url
#   p_advertise_unreachable     P told to advertise an address on D's link
#                               where nobody answers (LAYERCAKE_ADVERTISE_HOST):
#                               its REGISTER unanswered, D fails within 10 s
#                               (connect_timeout_ms), naming P's address and
#                               the setting
#   p_advertise_no_route        ... an address D has no route to: at once
#   d_default_bootstrap         D given no bootstrap address (the default,
#                               127.0.0.1:bootstrap_port): fails within 10 s
#                               naming the address and what to give
#   link_blip                   the veth down for 3 s mid-round with
#                               progress_timeout_ms 1000: in-flight rooms
#                               fail within 10 s, every room of the next
#                               round succeeds
#
#   hosts_test.sh [CASE ...]        (all cases by default)
#
# Needs root and `ip netns` (exit 77 otherwise). Everything it creates
# (namespaces, the veth, processes, files) is removed on exit.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip(8)"
ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c "import numpy" 2>/dev/null || skip "python3 has no numpy"
[ -n "${LAYERCAKE_LIB:-}" ] || skip "LAYERCAKE_LIB is not set (run through ctest)"

ID=$$
NS_P=lc16-$ID-p
NS_D=lc16-$ID-d
DEV_P=l16p$ID
DEV_D=l16d$ID
NET=10.$((ID % 200 + 20)).$((ID / 200 % 250))
IP_P=$NET.1
IP_D=$NET.2
TMP=$(mktemp -d)
PPID_=""

cleanup() {
	[ -n "$PPID_" ] && kill "$PPID_" 2>/dev/null && wait "$PPID_" 2>/dev/null
	ip netns del "$NS_P" 2>/dev/null
	ip netns del "$NS_D" 2>/dev/null
	ip link del "$DEV_P" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Namespaces of a run that was killed (ctest's timeout): lc16-<pid>-p/d
# whose pid is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(lc16-[0-9]*-[pd]\).*/\1/p'); do
	pid=${ns#lc16-}
	kill -0 "${pid%-?}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

ip netns add "$NS_P" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$NS_D" || skip "cannot create a network namespace"
for ns in "$NS_P" "$NS_D"; do ip -n "$ns" link set lo up; done
ip link add "$DEV_P" type veth peer name "$DEV_D" || skip "cannot create a veth pair"
ip link set "$DEV_P" netns "$NS_P"
ip link set "$DEV_D" netns "$NS_D"
ip -n "$NS_P" addr add "$IP_P/24" dev "$DEV_P"
ip -n "$NS_D" addr add "$IP_D/24" dev "$DEV_D"
ip -n "$NS_P" link set "$DEV_P" up
ip -n "$NS_D" link set "$DEV_D" up
echo "P in $NS_P at $IP_P, D in $NS_D at $IP_D (no other route)"

export PYTHONPATH="$HERE/../../python:$HERE/../python${PYTHONPATH:+:$PYTHONPATH}"
fail=0 ran=0

# run CASE "P options" "D options" [P environment] [blip]
run() {
	name=$1 popts=$2 dopts=$3 penv=${4:-} blip=${5:-}
	dir=$TMP/$name
	mkdir -p "$dir"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	env $penv ip netns exec "$NS_P" timeout 120 "$PY" "$HERE/hosts_peer.py" p "$dir" $popts \
		>"$dir/p.out" 2>"$dir/p.err" &
	PPID_=$!
	if [ -n "$blip" ]; then
		(
			while [ ! -e "$dir/d_sent.0" ]; do sleep 0.05; done
			sleep 0.3
			ip -n "$NS_D" link set "$DEV_D" down
			echo "link down" >>"$dir/blip"
			sleep 3
			ip -n "$NS_D" link set "$DEV_D" up
			echo "link up" >>"$dir/blip"
		) &
		BLIP=$!
	fi
	case " $dopts " in *" --bootstrap "*) bsopt= ;; *) bsopt="--bootstrap $IP_P" ;; esac
	# shellcheck disable=SC2086
	ip netns exec "$NS_D" timeout 120 "$PY" "$HERE/hosts_peer.py" d "$dir" \
		$bsopt $dopts >"$dir/d.out" 2>"$dir/d.err"
	rc=$?
	[ -n "$blip" ] && wait "$BLIP"
	touch "$dir/d_exit"
	wait "$PPID_" 2>/dev/null
	PPID_=""
	secs=$(($(date +%s) - t0))
	if [ $rc = 77 ]; then
		echo "skip: $name: $(head -1 "$dir/d.out")"
		return
	fi
	ran=$((ran + 1))
	if [ $rc = 0 ]; then
		echo "ok: $name ($secs s)"
		sed 's/^/    /' "$dir/d.out" | head -12
	else
		fail=1
		echo "FAILED: $name (D exit $rc, $secs s)"
		sed 's/^/    /' "$dir/d.out" "$dir/p.out"
		tail -15 "$dir/d.err" | sed 's/^/    d: /'
		tail -15 "$dir/p.err" | sed 's/^/    p: /'
	fi
}

CASES=${*:-default_tcp default_ucx p_host_wildcard d_wildcard d_host_loopback d_listen_loopback p_advertise_unreachable p_advertise_no_route d_default_bootstrap link_blip}
for c in $CASES; do
	case $c in
	default_tcp) run "$c" "" "" ;;
	default_ucx) UCX_TLS=tcp run "$c" "" "--listen ucx://0.0.0.0:0" ;;
	p_host_wildcard) run "$c" "--p-host 0.0.0.0" "" ;;
	d_wildcard) run "$c" "" "--host 0.0.0.0 --listen tcp://0.0.0.0:0" ;;
	d_host_loopback)
		run "$c" "--wait 15" "--host 127.0.0.1 --expect FAILED --within 10 \
			--reason-has 127.0.0.1 --reason-has host --reason-has LAYERCAKE_ADVERTISE_HOST" ;;
	d_listen_loopback)
		run "$c" "--wait 15" "--listen tcp://127.0.0.1:0 --expect FAILED --within 10 \
			--reason-has tcp://127.0.0.1: --reason-has listen_url --reason-has LAYERCAKE_ADVERTISE_HOST" ;;
	p_advertise_unreachable)
		# an address on D's link where nobody answers: the REGISTER is
		# never answered (connect_timeout_ms, 5 s)
		run "$c" "--wait 8 --bootstrap-local" "--expect FAILED --within 10 --reason-has $NET.3 \
			--reason-has LAYERCAKE_ADVERTISE_HOST" "LAYERCAKE_ADVERTISE_HOST=$NET.3" ;;
	p_advertise_no_route)
		run "$c" "--wait 3 --bootstrap-local" "--expect FAILED --within 10 --reason-has 10.255.255.1 \
			--reason-has LAYERCAKE_ADVERTISE_HOST" "LAYERCAKE_ADVERTISE_HOST=10.255.255.1" ;;
	d_default_bootstrap)
		# D given no bootstrap address: 127.0.0.1:<bootstrap_port>, nobody there
		run "$c" "--wait 3" "--bootstrap default --expect FAILED --within 10 \
			--reason-has 127.0.0.1 --reason-has bootstrap" ;;
	link_blip)
		run "$c" "--rounds 2 --layer-sleep 0.4 --knob progress_timeout_ms=1000" \
			"--rounds 2 --fail-ok-round 0 --within 10 --knob progress_timeout_ms=1000" "" blip ;;
	*) echo "unknown case $c"; fail=1 ;;
	esac
done
[ $ran = 0 ] && [ $fail = 0 ] && skip "no case ran"
echo "$([ $fail = 0 ] && echo ok || echo FAILED): multi-host control plane, $ran cases"
exit $fail

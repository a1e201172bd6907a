#!/usr/bin/env bash
# Several "hosts" on one machine: network namespaces rfh0..rfh(N-1), each
# with a veth link to a bridge (rfbr) and the address 10.88.0.(i+1), every
# link shaped to RATE in both directions with tc's token bucket (a NIC of
# that speed). Needs root and iproute2.
#   tools/netns_hosts.sh up N RATE     e.g. up 4 1gbit   (RATE "none": unshaped)
#   tools/netns_hosts.sh down N
#   ip netns exec rfh2 <command>       runs <command> on host 2
set -euo pipefail
action=${1:?up|down}
n=${2:?host count}
down() {
  for i in $(seq 0 $((n - 1))); do
    ip netns del "rfh$i" 2>/dev/null || true
    ip link del "rfv$i" 2>/dev/null || true
  done
  ip link del rfbr 2>/dev/null || true
}
if [[ $action == down ]]; then
  down
  exit 0
fi
rate=${3:?rate, e.g. 1gbit or none}
down
ip link add rfbr type bridge
ip link set rfbr up
for i in $(seq 0 $((n - 1))); do
  ip netns add "rfh$i"
  ip link add "rfv$i" type veth peer name eth0 netns "rfh$i"
  ip link set "rfv$i" master rfbr
  ip link set "rfv$i" up
  ip netns exec "rfh$i" ip addr add "10.88.0.$((i + 1))/24" dev eth0
  ip netns exec "rfh$i" ip link set eth0 up
  ip netns exec "rfh$i" ip link set lo up
  if [[ $rate != none ]]; then
    # Egress of the host (its uplink) and of the bridge port (its downlink).
    ip netns exec "rfh$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
    tc qdisc add dev "rfv$i" root tbf rate "$rate" burst 256kb latency 100ms
  fi
done
echo "netns_hosts: $n hosts 10.88.0.1-$n, links $rate"

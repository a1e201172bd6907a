#!/usr/bin/env bash
# Several "hosts" on one machine: network namespaces <P>h0..<P>h(N-1), each
# with a veth link to a bridge (<P>br, address <S>.254, so this namespace
# reaches them) and the address <S>.(i+1), every link shaped to RATE in both
# directions with tc's token bucket (a NIC of that speed). Each host also
# gets a PID namespace of its own, kept by a holder process: UCX uses shared
# memory only within one PID namespace, so processes started with `exec`
# share memory with the others of their host and reach the other hosts over
# TCP, as on separate machines. Needs root, iproute2 and util-linux.
#   tools/netns_hosts.sh up N RATE      e.g. up 4 1gbit   (RATE "none": unshaped)
#   tools/netns_hosts.sh exec I CMD...  runs CMD on host I (its network and
#                                       PID namespaces)
#   tools/netns_hosts.sh down N
#   ip netns exec rfh2 <command>        host 2's network only (its own PID
#                                       namespace not entered)
# Environment: TBF_LATENCY (the shaper's queue, default 100ms);
# NETNS_PREFIX <P> (default rf) and NETNS_SUBNET <S> (default 10.88.0):
# separate sets of hosts side by side (tests use their own).
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^[^#]/ { /^#/ s/^# \{0,1\}//p }' "$0"
  exit 0
fi
action=${1:?up|exec|down}
p=${NETNS_PREFIX:-rf}
subnet=${NETNS_SUBNET:-10.88.0}
run=/run/netns_hosts
holder() { echo "$run/${p}h$1.pid"; }

if [[ $action == exec ]]; then
  i=${2:?host index}
  shift 2
  pid=$(cat "$(holder "$i")" 2>/dev/null) || {
    echo "netns_hosts: host $i (prefix $p) is not up: run 'tools/netns_hosts.sh up N RATE'" >&2
    exit 2
  }
  exec nsenter --target "$pid" --net --pid -- "$@"
fi

n=${2:?host count}
down() {
  for i in $(seq 0 $((n - 1))); do
    if [[ -f $(holder "$i") ]]; then
      # The holder is its PID namespace's init: killing it ends every
      # process left in that namespace. Only if that pid is still this
      # host's holder (in its network namespace, a PID namespace of its
      # own), not a process that reused the pid.
      pid=$(cat "$(holder "$i")")
      if [[ $(ip netns identify "$pid" 2>/dev/null) == "${p}h$i" ]] &&
         [[ $(readlink "/proc/$pid/ns/pid") != $(readlink /proc/self/ns/pid) ]]; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
      rm -f "$(holder "$i")"
    fi
    ip netns del "${p}h$i" 2>/dev/null || true
    ip link del "${p}v$i" 2>/dev/null || true
  done
  ip link del "${p}br" 2>/dev/null || true
}
if [[ $action == down ]]; then
  down
  exit 0
fi
[[ $action == up ]] || { echo "netns_hosts: unknown action '$action' (up, exec, down)" >&2; exit 2; }
rate=${3:?rate, e.g. 1gbit or none}
down
mkdir -p "$run"
ip link add "${p}br" type bridge
ip addr add "$subnet.254/24" dev "${p}br"
ip link set "${p}br" up
for i in $(seq 0 $((n - 1))); do
  ip netns add "${p}h$i"
  ip link add "${p}v$i" type veth peer name eth0 netns "${p}h$i"
  ip link set "${p}v$i" master "${p}br"
  ip link set "${p}v$i" up
  ip netns exec "${p}h$i" ip addr add "$subnet.$((i + 1))/24" dev eth0
  ip netns exec "${p}h$i" ip link set eth0 up
  ip netns exec "${p}h$i" ip link set lo up
  if [[ $rate != none ]]; then
    # Egress of the host (its uplink) and of the bridge port (its downlink).
    ip netns exec "${p}h$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency "${TBF_LATENCY:-100ms}"
    tc qdisc add dev "${p}v$i" root tbf rate "$rate" burst 256kb latency "${TBF_LATENCY:-100ms}"
  fi
  # The PID namespace's init, inside the host's network namespace; its pid
  # (as this namespace sees it) is what `exec` enters.
  ip netns exec "${p}h$i" unshare --pid --fork --kill-child sleep infinity \
    </dev/null >/dev/null 2>&1 &
  parent=$!
  for _ in $(seq 1 500); do
    child=$(cat "/proc/$parent/task/$parent/children" 2>/dev/null | tr -d ' ') || true
    # ip netns exec execs unshare, whose child is the namespace's init.
    if [[ -n $child ]] && [[ $(readlink "/proc/$child/ns/pid") != $(readlink /proc/self/ns/pid) ]]; then
      echo "$child" >"$(holder "$i")"
      break
    fi
    sleep 0.01
  done
  [[ -f $(holder "$i") ]] || { echo "netns_hosts: host $i's PID namespace did not start" >&2; exit 1; }
done
echo "netns_hosts: $n hosts $subnet.1-$n (this namespace: $subnet.254), links $rate"

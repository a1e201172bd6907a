#!/usr/bin/env bash
# Hierarchical vs flat all-reduce across hosts (docs/collectives.md): HOSTS
# network-namespace hosts of PER_HOST ranks each (tools/netns_hosts.sh; needs
# root), shared memory within a host, UCX over TCP between hosts on links tc
# caps at each RATE. allreduce_bench measures rdmaflow (hierarchical: a
# reduce within each host, a ring among the hosts' leaders, a broadcast
# back) and rdmaflow-flat (one ring over every rank, consecutive ranks on one
# host as launchers place them) in the same processes, size by size. Writes
# OUT/<rate>.{json,txt}, the table OUT/hierarchical.txt (and .tsv) and
# OUT/hierarchical_busbw.png.
#   tools/bench_hierarchical.sh [OUT_DIR]   (default bench-results/hierarchical)
# Environment: RATES ("1gbit 10gbit"), HOSTS (2), PER_HOST (2), MIN_BYTES
# (4096), MAX_BYTES (67108864), BUDGET (bytes per size, 268435456),
# BENCH_FLAGS (more allreduce_bench flags, e.g. --chunk_bytes=1048576).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/hierarchical}
mkdir -p "$out"
rates=${RATES:-1gbit 10gbit}
hosts=${HOSTS:-2}
per_host=${PER_HOST:-2}
world=$((hosts * per_host))
bazel build -c opt //bench:allreduce_bench >/dev/null
bench=$PWD/bazel-bin/bench/allreduce_bench
export NETNS_PREFIX=rfb NETNS_SUBNET=10.87.0
trap 'tools/netns_hosts.sh down "$hosts" >/dev/null 2>&1 || true' EXIT
port=29800
for rate in $rates; do
  tools/netns_hosts.sh up "$hosts" "$rate"
  port=$((port + 1))
  echo "== $rate links: $hosts hosts x $per_host ranks"
  pids=()
  for r in $(seq 0 $((world - 1))); do
    # Rank 0 hosts the store on host 0.
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$((r % per_host)) LOCAL_WORLD_SIZE=$per_host \
      MASTER_ADDR=$NETNS_SUBNET.1 MASTER_PORT=$port \
      tools/netns_hosts.sh exec $((r / per_host)) "$bench" --impls=rdmaflow,rdmaflow-flat \
      --params=net_devices=eth0 --min_bytes="${MIN_BYTES:-4096}" \
      --max_bytes="${MAX_BYTES:-67108864}" --byte_budget="${BUDGET:-268435456}" \
      --json="$out/$rate.json" ${BENCH_FLAGS:-} >"$out/$rate.rank$r.txt" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [[ $status != 0 ]]; then
    tail -n 5 "$out/$rate".rank*.txt >&2
    echo "bench_hierarchical: a rank failed at $rate (logs: $out/$rate.rank*.txt)" >&2
    exit 1
  fi
  mv "$out/$rate.rank0.txt" "$out/$rate.txt"
  rm -f "$out/$rate".rank*.txt
  tools/netns_hosts.sh down "$hosts"
done
/usr/bin/python3 tools/hierarchical_report.py "$out" $rates | tee "$out/hierarchical.txt"
PLOT_TITLE="All-reduce across $hosts hosts x $per_host ranks (float32 sum)" PANEL_UNIT="Mbit/s links" \
  tools/plot_allreduce.sh "$out/hierarchical.tsv" "$out/hierarchical_busbw.png" \
  "rdmaflow hierarchical" "rdmaflow flat ring"

#!/usr/bin/env bash
# The step-time simulator's calibration of this machine, in one command
# (docs/scale.md): measures
#   - the links: transport_pingpong over UCX shared memory, and (as root,
#     with tools/netns_hosts.sh) over UCX TCP between two namespace hosts
#     whose link tc caps at 1 Gbit/s and at 100 Mbit/s; on each, the CPU a
#     rank uses while it waits (tools/wait_cpu.py), and over the network
#     links while data it sends and receives moves (wait_cpu.py --moving)
#     and how much of a read the owner's socket carries on while the owner
#     computes (transport_pingpong --owner_busy_ms);
#   - the host: bench/allreduce_bench's single-thread memcpy and reduce and
#     its group set-up time, and a c10d TCPStore round trip (store_rtt.py);
#   - the models: rdmaflow_profile's layer times (one thread, one rank);
#   - time sharing: SHARING_MODEL profiled by 2 and 4 copies a core at once;
# then writes OUT/calibration.json with `rdmaflow calibrate`.
#   tools/calibrate_sim.sh [OUT_DIR]   (default docs/scale; ~5 min)
# Environment: MODELS ("mlp lenet5 vgg"), BATCH (64), LINKS ("1gbit 100mbit";
# "" for shared memory only), SHARING_MODEL (lenet5; "" skips), SHARING
# (ranks a core: "2 4"), SHARED_RING_RANKS (4: a ring all-reduce of that
# many namespace hosts on each link, whose bus bandwidth caps the
# simulator's rings at least as crowded on their cores; "" skips),
# SHARED_RING_BYTES (4194304: the size of that all-reduce, the strategies'
# default bucket, whose calls run below a 16 MiB call's bandwidth).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,21p' "$0"
  exit 0
fi
out=${1:-docs/scale}
raw=bench-results/calibration
mkdir -p "$out" "$raw"
models=${MODELS:-mlp lenet5 vgg}
batch=${BATCH:-64}
links=${LINKS-1gbit 100mbit}
bazel build -c opt //bench:transport_pingpong //bench:allreduce_bench \
  //train:rdmaflow_profile //train:rdmaflow_train //cli:rdmaflow >/dev/null
bin=$PWD/bazel-bin
pingpong=(--max_bytes=16777216 --byte_budget=268435456 --reads=false)
ring_ranks=${SHARED_RING_RANKS-4}
ring_bytes=${SHARED_RING_BYTES:-4194304}
ring_args=""
if [[ -n $ring_ranks ]] && ! [[ $ring_ranks =~ ^[0-9]+$ && $ring_ranks -ge 2 ]]; then
  echo "calibrate_sim: SHARED_RING_RANKS=$ring_ranks: a number of ranks, 2 or more (or empty to skip)" >&2
  exit 2
fi
if ! [[ $ring_bytes =~ ^[0-9]+$ && $ring_bytes -ge 1024 ]]; then
  echo "calibrate_sim: SHARED_RING_BYTES=$ring_bytes: a size in bytes, 1024 or more" >&2
  exit 2
fi
if [[ -n $ring_ranks ]] && ((ring_ranks <= $(nproc))); then
  echo "calibrate_sim: note: SHARED_RING_RANKS=$ring_ranks does not outnumber this machine's $(nproc) cores; the simulator applies the ring's figure only to rings at least as crowded" >&2
fi

echo "== [1/5] link shm: transport_pingpong over UCX shared memory"
"$bin/bench/transport_pingpong" --transport=ucx --params=tls=shm "${pingpong[@]}" \
  --json="$raw/pp_shm.json" >"$raw/pp_shm.log" 2>&1
link_args="shm=$raw/pp_shm.json"
echo "== [1/5] link shm: the CPU a waiting rank uses (tools/wait_cpu.py)"
wait_args="shm=$(/usr/bin/python3 tools/wait_cpu.py "$bin/train/rdmaflow_train" shm)"

if [[ -n $links && $(id -u) == 0 ]]; then
  export NETNS_PREFIX=rfc NETNS_SUBNET=10.89.0
  hosts_up=$(( ${ring_ranks:-2} > 2 ? ${ring_ranks:-2} : 2 ))
  trap 'tools/netns_hosts.sh down "$hosts_up" >/dev/null 2>&1 || true' EXIT
  port=29650
  for link in $links; do
    echo "== [2/5] link $link: transport_pingpong over UCX TCP between 2 namespace hosts"
    tools/netns_hosts.sh up 2 "$link" >/dev/null
    port=$((port + 1))
    for r in 1 0; do
      tools/netns_hosts.sh exec "$r" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.89.0.1 \
        MASTER_PORT=$port "$bin/bench/transport_pingpong" --transport=ucx \
        --params=tls=tcp,net_devices=eth0 "${pingpong[@]}" --max_bytes=4194304 \
        --byte_budget=33554432 --json="$raw/pp_$link.json" >"$raw/pp_$link.rank$r.log" 2>&1 &
    done
    wait
    echo "== [2/5] link $link: reads while their owner computes (transport_pingpong --owner_busy_ms)"
    port=$((port + 1))
    for r in 1 0; do
      tools/netns_hosts.sh exec "$r" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.89.0.1 \
        MASTER_PORT=$port "$bin/bench/transport_pingpong" --transport=ucx \
        --params=tls=tcp,net_devices=eth0 --nowrites --min_bytes=8388608 --max_bytes=8388608 \
        --byte_budget=8388608 --owner_busy_ms=400 --json="$raw/pp_busy_$link.json" \
        >"$raw/pp_busy_$link.rank$r.log" 2>&1 &
    done
    wait
    unattended_args="${unattended_args:+$unattended_args,}$link=$raw/pp_busy_$link.json"
    echo "== [2/5] link $link: the CPU a waiting rank uses (tools/wait_cpu.py)"
    port=$((port + 2))
    wait_args="$wait_args,$link=$(/usr/bin/python3 tools/wait_cpu.py "$bin/train/rdmaflow_train" \
      "$link" 10.89.0.1 "$port")"
    port=$((port + 2))
    echo "== [2/5] link $link: the CPU a rank uses while its data moves (tools/wait_cpu.py --moving)"
    moving_args="${moving_args:+$moving_args,}$link=$(/usr/bin/python3 tools/wait_cpu.py --moving \
      "$bin/bench/allreduce_bench" "$link" 10.89.0.1 "$port")"
    port=$((port + 2))
    tools/netns_hosts.sh down 2 >/dev/null
    link_args="$link_args,$link=$raw/pp_$link.json"
    if [[ -n $ring_ranks ]]; then
      echo "== [2/5] link $link: a ring all-reduce of $ring_ranks ranks, one a namespace host (allreduce_bench)"
      tools/netns_hosts.sh up "$ring_ranks" "$link" >/dev/null
      port=$((port + 1))
      ring_pids=()
      for ((r = 0; r < ring_ranks; ++r)); do
        tools/netns_hosts.sh exec "$r" env RANK=$r WORLD_SIZE=$ring_ranks MASTER_ADDR=10.89.0.1 \
          MASTER_PORT=$port "$bin/bench/allreduce_bench" --ranks="$ring_ranks" --impls=rdmaflow \
          --min_bytes="$ring_bytes" --max_bytes="$ring_bytes" --max_iters=10 \
          --params=tls=tcp,net_devices=eth0 --json="$raw/ring_$link.json" \
          >"$raw/ring_$link.rank$r.log" 2>&1 &
        ring_pids+=($!)
      done
      for pid in "${ring_pids[@]}"; do
        wait "$pid" || { echo "calibrate_sim: the ring over $link failed (see $raw/ring_$link.rank*.log)" >&2; exit 1; }
      done
      tools/netns_hosts.sh down "$ring_ranks" >/dev/null
      ring_args="$ring_args${ring_args:+,}$link=$raw/ring_$link.json"
    fi
  done
elif [[ -n $links ]]; then
  echo "== [2/5] skipped: measuring $links needs root (network namespaces); presets stand in"
fi

echo "== [3/5] host: memcpy and reduce bandwidth, a group's set-up (allreduce_bench), the store"
"$bin/bench/allreduce_bench" --ranks=2 --impls=rdmaflow --min_bytes=16777216 \
  --max_bytes=16777216 --json="$raw/allreduce.json" >"$raw/allreduce.log" 2>&1
store_rtt=$("$(tools/torch_python.sh)" tools/store_rtt.py)
store_rtt=${store_rtt%.*}

profiles=""
for m in $models; do
  echo "== [4/5] model $m: layer times at batch $batch (rdmaflow_profile)"
  "$bin/train/rdmaflow_profile" --model "$m" --batch_size "$batch" \
    --json "$out/$m.profile.json" 2>&1 | tail -1
  profiles="$profiles${profiles:+,}$out/$m.profile.json"
done

# Time sharing: k copies a core of one model's profile at once, against its
# profile alone above.
sharing_model=${SHARING_MODEL-lenet5}
sharing_args=()
if [[ -n $sharing_model && ! -f $out/$sharing_model.profile.json ]]; then
  echo "== [5/5] skipped: time sharing needs SHARING_MODEL=$sharing_model in MODELS" >&2
elif [[ -n $sharing_model ]]; then
  cores=$(nproc)
  spec=""
  for k in ${SHARING:-2 4}; do
    copies=$((cores * k))
    echo "== [5/5] time sharing: $copies copies of $sharing_model's profile on $cores cores"
    files=""
    pids=()
    for ((c = 0; c < copies; c++)); do
      f=$raw/sharing_${k}_$c.json
      "$bin/train/rdmaflow_profile" --model "$sharing_model" --batch_size "$batch" \
        --iterations 20 --json "$f" >"$raw/sharing_${k}_$c.log" 2>&1 &
      pids+=($!)
      files="$files${files:+:}$f"
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || { echo "calibrate_sim: a profile copy failed (see $raw/sharing_${k}_*.log)" >&2; exit 1; }
    done
    spec="$spec${spec:+,}$k=$files"
  done
  sharing_args=(--time_sharing "$spec")
fi

"$bin/cli/rdmaflow" calibrate --links "$link_args" --allreduce "$raw/allreduce.json" \
  --profiles "$profiles" --store_rtt_us "$store_rtt" --out "$out/calibration.json" \
  --wait_cpu "$wait_args" --burst_bytes 262144 "${sharing_args[@]}" \
  ${moving_args:+--moving_cpu "$moving_args"} ${ring_args:+--shared_ring "$ring_args"} \
  ${unattended_args:+--unattended "$unattended_args"}  # burst: tools/netns_hosts.sh's tbf (256kb)

#!/usr/bin/env bash
# The simulator against real runs (docs/scale.md, "Validation"): every
# strategy on 2, 4 and 8 processes of rdmaflow_train, over UCX shared memory
# (--local) and over UCX TCP between network-namespace hosts, one rank each,
# whose links tc caps at 1 Gbit/s and 100 Mbit/s (tools/netns_hosts.sh;
# needs root, else only shared memory runs). Every host here shares this
# machine's cores, so the predictions use --shared_cores. Then
# tools/sim_validation.py predicts each run with `rdmaflow simulate` and
# writes OUT/validation.txt (the table, every row), .json and .png.
#   tools/validate_sim.sh [OUT_DIR]   (default bench-results/validation; ~20 min)
# Environment: LINKS ("shm 1gbit 100mbit"), RANKS ("2 4 8"), MODEL (lenet5),
# STEPS (40), CALIBRATION (docs/scale/calibration.json: tools/calibrate_sim.sh).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,13p' "$0"
  exit 0
fi
out=${1:-bench-results/validation}
mkdir -p "$out"
links=${LINKS:-shm 1gbit 100mbit}
rank_counts=${RANKS:-2 4 8}
model=${MODEL:-lenet5}
steps=${STEPS:-40}
calibration=${CALIBRATION:-docs/scale/calibration.json}
[[ -f $calibration ]] || { echo "validate_sim: no $calibration: run tools/calibrate_sim.sh" >&2; exit 1; }
if [[ $(id -u) != 0 ]]; then
  echo "validate_sim: not root: only shared memory runs (namespaces need root)" >&2
  links=shm
fi
bazel build -c opt //train:rdmaflow_train //cli:rdmaflow >/dev/null
train=$PWD/bazel-bin/train/rdmaflow_train
# name|trainer flags|simulator strategy
configs=(
  "ps_bsp|--strategy ps --servers 1 --sync bsp|ps:servers=1,sync=bsp"
  "ps_asp|--strategy ps --servers 1 --sync asp|ps:servers=1,sync=asp"
  "ps_ssp2|--strategy ps --servers 1 --sync ssp:2|ps:servers=1,sync=ssp:2"
  "ps_dssp14|--strategy ps --servers 1 --sync dssp:1:4|ps:servers=1,sync=dssp:1:4"
  "ps_overlap|--strategy ps --strategy_params servers=1,sync=bsp,overlap=on|ps:servers=1,sync=bsp,overlap=on"
  "ps_overlap_late|--strategy ps --strategy_params servers=1,sync=bsp,overlap=on,prefetch=off|ps:servers=1,sync=bsp,overlap=on,prefetch=off"
  "allreduce|--strategy allreduce|allreduce"
  "allreduce_no_overlap|--strategy allreduce --strategy_params overlap=off|allreduce:overlap=off"
  "allreduce_forward|--strategy allreduce --strategy_params overlap=forward|allreduce:overlap=forward"
  "layer_separated|--strategy layer_separated --strategy_params fc_ranks=1|layer_separated:fc_ranks=1"
  "layer_separated_overlap|--strategy layer_separated --strategy_params fc_ranks=1,overlap=on|layer_separated:fc_ranks=1,overlap=on"
  "gossip_pull|--strategy gossip|gossip"
  "gossip_push|--strategy gossip --strategy_params mode=push|gossip:mode=push"
  "gossip_overlap|--strategy gossip --strategy_params overlap=on|gossip:overlap=on"
  "moshpit|--strategy moshpit|moshpit"
  "moshpit_overlap|--strategy moshpit --strategy_params overlap=on|moshpit:overlap=on"
)
largest=0
for n in $rank_counts; do ((n > largest)) && largest=$n; done
export NETNS_PREFIX=rfv NETNS_SUBNET=10.90.0
trap 'tools/netns_hosts.sh down '"$largest"' >/dev/null 2>&1 || true' EXIT
total=0
for link in $links; do for n in $rank_counts; do total=$((total + ${#configs[@]})); done; done
run=0
port=29800
# Runs of links not measured now are kept (LINKS=100mbit redoes one link).
touch "$out/runs.tsv"
for link in $links; do
  grep -v "^$link"$'\t' "$out/runs.tsv" >"$out/runs.tsv.new" || true
  mv "$out/runs.tsv.new" "$out/runs.tsv"
done
for link in $links; do
  [[ $link == shm ]] || tools/netns_hosts.sh up "$largest" "$link" >/dev/null
  for n in $rank_counts; do
    for config in "${configs[@]}"; do
      IFS='|' read -r name flags strategy <<<"$config"
      run=$((run + 1))
      tag="${link}_${name}_$n"
      echo "== [$run/$total] $link, $n ranks: $name $(date +%H:%M:%S)"
      common="--model $model --steps $steps --progress=false --json $out/$tag.json $flags"
      if [[ $link == shm ]]; then
        # shellcheck disable=SC2086
        "$train" --local "$n" $common >"$out/$tag.log" 2>&1 || {
          tail -n 5 "$out/$tag.log" >&2; echo "validate_sim: $tag failed" >&2; exit 1; }
      else
        port=$((port + 1))
        pids=()
        for ((r = 0; r < n; r++)); do
          # shellcheck disable=SC2086
          RANK=$r WORLD_SIZE=$n MASTER_ADDR=$NETNS_SUBNET.1 MASTER_PORT=$port \
            tools/netns_hosts.sh exec "$r" "$train" $common \
            --transport_params tls=tcp,net_devices=eth0 >"$out/$tag.rank$r.log" 2>&1 &
          pids+=($!)
        done
        status=0
        for pid in "${pids[@]}"; do wait "$pid" || status=1; done
        if [[ $status != 0 ]]; then
          tail -n 5 "$out/$tag".rank*.log >&2
          echo "validate_sim: $tag failed" >&2
          exit 1
        fi
      fi
      printf '%s\t%s\t%s\t%s\t%s\n' "$link" "$name" "$n" "$strategy" "$out/$tag.json" >>"$out/runs.tsv"
    done
  done
  [[ $link == shm ]] || tools/netns_hosts.sh down "$largest" >/dev/null
done
/usr/bin/python3 tools/sim_validation.py "$out" "$calibration" "$model" "$steps" \
  | tee "$out/validation.txt"
tools/plot_sim_validation.sh "$out/validation.tsv" "$out/validation.png"

#!/usr/bin/env bash
# Stanza vs parameter server vs all-reduce (docs/strategies.md): the
# VGG-like net on 4 ranks, the bytes every rank puts on the wire per step and
# the step time, for
#   allreduce         4 replicas, ring all-reduce of the gradients
#   ps                1 server + 3 workers, bsp, one-sided pulls
#   ps_overlap        the same, each slice (256 KiB: slice_bytes=auto) pushed as backward completes
#                     it and the next step's pulled as soon as it is applied,
#                     during this step (overlap=on; STRATEGIES to add it)
#   ps_overlap_late   the same, the next step's slices pulled when it begins
#                     (overlap=on,prefetch=off; STRATEGIES to add it)
#   ps_ssp, ps_ssp_overlap, ps_ssp_prefetch, ps_asp, ps_asp_overlap,
#   ps_asp_prefetch   the same under ssp:3 and asp: without overlap, with
#                     it, with it and prefetch=on (STRATEGIES to add them)
#   layer_separated   3 conv ranks + 1 FC rank (fc_ranks=1)
#   layer_separated_auto  K chosen by the cost model (STRATEGIES to add it)
#   layer_separated_overlap  the same as layer_separated, pipelined: the conv
#                     ranks forward batch t+1 while the FC rank works on
#                     batch t (overlap=on; STRATEGIES to add it)
#   layer_separated_2fc, layer_separated_2fc_overlap  2 conv + 2 FC ranks,
#                     without and with the pipeline (STRATEGIES to add them)
#   allreduce_no_overlap  allreduce reducing after backward (overlap=off;
#                     STRATEGIES to add it): what overlap gains
#   allreduce_forward allreduce with the head's later buckets reduced during
#                     the next step's forward (overlap=forward; STRATEGIES
#                     to add it)
#   gossip, gossip_overlap  gossip (pull, random peers) mixing after the
#                     step, and reading during the next step's compute
#                     (overlap=on) (STRATEGIES to add them)
#   moshpit, moshpit_overlap  Moshpit on a 2x2 grid, averaging after the
#                     step, and during the next step's compute (overlap=on)
# over three links: UCX shared memory (--local), and UCX over TCP between 4
# network namespaces whose links tc caps at 1 Gbit/s and at 100 Mbit/s
# (tools/netns_hosts.sh; needs root). Writes OUT/<link>_<strategy>.json, the
# table OUT/strategies.txt (and .tsv) and OUT/strategies_step.png.
#   tools/bench_strategies.sh [OUT_DIR]   (default bench-results/strategies; ~8 min)
# Environment: LINKS ("shm 1gbit 100mbit"), STEPS (8), MODEL (vgg),
# STRATEGIES ("allreduce ps layer_separated"), TIMELINES (1: every rank's
# per-step CSV and Chrome trace as OUT/<link>_<strategy>.rank<R>.*).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/strategies}
mkdir -p "$out"
links=${LINKS:-shm 1gbit 100mbit}
steps=${STEPS:-8}
model=${MODEL:-vgg}
strategies=${STRATEGIES:-allreduce ps layer_separated}
bazel build -c opt //train:rdmaflow_train >/dev/null
train=$PWD/bazel-bin/train/rdmaflow_train
declare -A params=(
  [allreduce]="--strategy allreduce"
  [ps]="--strategy ps --strategy_params servers=1,sync=bsp"
  [ps_overlap]="--strategy ps --strategy_params servers=1,sync=bsp,overlap=on"
  [ps_overlap_late]="--strategy ps --strategy_params servers=1,sync=bsp,overlap=on,prefetch=off"
  [ps_ssp]="--strategy ps --strategy_params servers=1,sync=ssp:3"
  [ps_ssp_overlap]="--strategy ps --strategy_params servers=1,sync=ssp:3,overlap=on"
  [ps_asp]="--strategy ps --strategy_params servers=1,sync=asp"
  [ps_asp_overlap]="--strategy ps --strategy_params servers=1,sync=asp,overlap=on"
  [ps_ssp_prefetch]="--strategy ps --strategy_params servers=1,sync=ssp:3,overlap=on,prefetch=on"
  [ps_asp_prefetch]="--strategy ps --strategy_params servers=1,sync=asp,overlap=on,prefetch=on"
  [layer_separated]="--strategy layer_separated --strategy_params fc_ranks=1"
  [layer_separated_auto]="--strategy layer_separated"
  [layer_separated_overlap]="--strategy layer_separated --strategy_params fc_ranks=1,overlap=on"
  [layer_separated_2fc]="--strategy layer_separated --strategy_params fc_ranks=2"
  [layer_separated_2fc_overlap]="--strategy layer_separated --strategy_params fc_ranks=2,overlap=on"
  [allreduce_no_overlap]="--strategy allreduce --strategy_params overlap=off"
  [allreduce_forward]="--strategy allreduce --strategy_params overlap=forward"
  [gossip]="--strategy gossip"
  [gossip_overlap]="--strategy gossip --strategy_params overlap=on"
  [moshpit]="--strategy moshpit"
  [moshpit_overlap]="--strategy moshpit --strategy_params overlap=on"
)
port=29700
trap 'tools/netns_hosts.sh down 4 >/dev/null 2>&1 || true' EXIT
for link in $links; do
  if [[ $link != shm ]]; then tools/netns_hosts.sh up 4 "$link"; fi
  for strategy in $strategies; do
    json="$out/${link}_${strategy}.json"
    echo "== $link: $strategy ($model, 4 ranks, $steps steps)"
    common="--model $model --steps $steps --progress=false --json $json ${params[$strategy]}"
    if [[ ${TIMELINES:-0} == 1 ]]; then common+=" --log_prefix $out/${link}_${strategy}"; fi
    if [[ $link == shm ]]; then
      # shellcheck disable=SC2086
      "$train" --local 4 $common >"$out/${link}_${strategy}.log" 2>&1
    else
      port=$((port + 1))
      pids=()
      for r in 0 1 2 3; do
        # shellcheck disable=SC2086
        ip netns exec "rfh$r" env RANK=$r WORLD_SIZE=4 MASTER_ADDR=10.88.0.1 \
          MASTER_PORT=$port "$train" $common --transport_params tls=tcp,net_devices=eth0 \
          >"$out/${link}_${strategy}.rank$r.log" 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid"; done
    fi
    tail -c 400 "$json"
  done
  if [[ $link != shm ]]; then tools/netns_hosts.sh down 4; fi
done
/usr/bin/python3 tools/strategies_report.py "$out" "$links" | tee "$out/strategies.txt"
tools/plot_strategies.sh "$out/strategies.tsv" "$out/strategies_step.png"

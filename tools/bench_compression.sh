#!/usr/bin/env bash
# Gradient codecs against none (docs/compression.md): the allreduce strategy
# on 4 ranks, one per network-namespace host (tools/netns_hosts.sh; needs
# root), UCX over TCP on links tc caps at each LINK rate. Every run trains
# with evaluations on the test set (--eval_every) and reports its wire bytes
# per step and codec time; the report finds when each run first reached the
# uncompressed run's accuracy (its best, less TARGET_SLACK), and how much
# sooner the codecs got there. Writes OUT/<link>_<model>_<codec>.{json,rank0.csv},
# the table OUT/compression.txt (and .json) and OUT/compression_<model>_<link>.png.
#   tools/bench_compression.sh [OUT_DIR]   (default bench-results/compression; ~25 min)
# Environment: LINKS ("1gbit 100mbit"), MODELS ("lenet5 vgg"),
# CODECS_lenet5 / CODECS_vgg (space-separated specs, "none" first),
# STEPS_lenet5 (300) / STEPS_vgg (70): the uncompressed run's steps, codecs
# run CODEC_STEPS_FACTOR (2) times as many; EVAL_EVERY_lenet5 (25) /
# EVAL_EVERY_vgg (10); EVAL_SAMPLES (1000); TARGET_SLACK (0.02).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/compression}
mkdir -p "$out"
links=${LINKS:-1gbit 100mbit}
models=${MODELS:-lenet5 vgg}
declare -A codecs=(
  [lenet5]=${CODECS_lenet5:-none topk:ratio=0.01 topk:ratio=0.01,sampled=1 randomk:ratio=0.05 int8 sketch:rows=3,cols=2400,k=600}
  [vgg]=${CODECS_vgg:-none topk:ratio=0.01 topk:ratio=0.001 int8 sketch:rows=3,cols=20000,k=8600}
)
declare -A steps=([lenet5]=${STEPS_lenet5:-300} [vgg]=${STEPS_vgg:-70})
declare -A every=([lenet5]=${EVAL_EVERY_lenet5:-25} [vgg]=${EVAL_EVERY_vgg:-10})
factor=${CODEC_STEPS_FACTOR:-2}
bazel build -c opt //train:rdmaflow_train >/dev/null
train=$PWD/bazel-bin/train/rdmaflow_train
export NETNS_PREFIX=rfc NETNS_SUBNET=10.86.0
trap 'tools/netns_hosts.sh down 4 >/dev/null 2>&1 || true' EXIT
total=0
for link in $links; do for model in $models; do
  for codec in ${codecs[$model]}; do total=$((total + 1)); done
done; done
run=0
port=29950
for link in $links; do
  tools/netns_hosts.sh up 4 "$link"
  for model in $models; do
    for codec in ${codecs[$model]}; do
      run=$((run + 1))
      name="${link}_${model}_$(echo "$codec" | tr ':,=' '___')"
      n=${steps[$model]}
      [[ $codec == none ]] || n=$((n * factor))
      echo "== [$run/$total] $link $model --codec $codec ($n steps) $(date +%H:%M:%S)"
      port=$((port + 1))
      pids=()
      for r in 0 1 2 3; do
        # Rank 0 hosts the store on host 0.
        RANK=$r WORLD_SIZE=4 MASTER_ADDR=$NETNS_SUBNET.1 MASTER_PORT=$port \
          tools/netns_hosts.sh exec "$r" "$train" --strategy allreduce --model "$model" \
          --codec "$codec" --steps "$n" --eval_every "${every[$model]}" \
          --eval_samples "${EVAL_SAMPLES:-1000}" --progress=false \
          --transport_params tls=tcp,net_devices=eth0 --log_prefix "$out/$name" \
          --json "$out/$name.json" >"$out/$name.rank$r.log" 2>&1 &
        pids+=($!)
      done
      status=0
      for pid in "${pids[@]}"; do wait "$pid" || status=1; done
      if [[ $status != 0 ]]; then
        tail -n 5 "$out/$name".rank*.log >&2
        echo "bench_compression: a rank failed ($out/$name.rank*.log)" >&2
        exit 1
      fi
      rm -f "$out/$name".rank[123].csv
      tail -c 300 "$out/$name.json"; echo
    done
  done
  tools/netns_hosts.sh down 4
done
/usr/bin/python3 tools/compression_report.py "$out" "$links" "$models" | tee "$out/compression.txt"
for link in $links; do
  for model in $models; do
    curves=()
    for codec in ${codecs[$model]}; do
      # plot_accuracy.sh splits LABEL=PATH at the first '=': none in the label.
      curves+=("${codec//=/ }=$out/${link}_${model}_$(echo "$codec" | tr ':,=' '___').rank0.csv")
    done
    tools/plot_accuracy.sh "$out/compression_${model}_${link}.png" \
      "$model, allreduce on 4 hosts over $link links: test accuracy by codec" "${curves[@]}"
  done
done

#!/usr/bin/env bash
# Convergence per step (docs/scale.md, "Time to accuracy"): LeNet-5 on
# Fashion-MNIST trained by every strategy as local processes over UCX shared
# memory, rank 0 (worker 0 under ps) evaluating EVAL_SAMPLES test images
# every EVAL_EVERY steps, once per seed (model initialization and data
# order). The report is the median over seeds of the steps each needed to
# reach TARGET test accuracy, keyed by the update rule the simulator gives
# the strategy (rdmaflow simulate names it), in docs/scale/convergence.json:
# `rdmaflow simulate` multiplies them by its step times.
#   tools/measure_convergence.sh [OUT_DIR]   (default bench-results/convergence;
#                                            8-30 s a run; ~25 min in all)
# Environment: SPECS (';'-separated, the simulator's syntax; default below),
# RANKS ("2 4 8"), SEEDS ("1 2 3"), STEPS (500), TARGET (0.80), EVAL_EVERY
# (10), EVAL_SAMPLES (2000), EXTRA (more rdmaflow_train flags, such as
# "--slow_rank 2 --slow_factor 2"), CONVERGENCE (docs/scale/convergence.json).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,15p' "$0"
  exit 0
fi
out=${1:-bench-results/convergence}
mkdir -p "$out"
specs=${SPECS:-'allreduce;ps:servers=1,sync=bsp;ps:servers=1,sync=asp;ps:servers=1,sync=ssp:3;ps:servers=1,sync=dssp:1:6;gossip;gossip:mode=push;moshpit'}
ranks_list=${RANKS:-2 4 8}
seeds=${SEEDS:-1 2 3}
steps=${STEPS:-500}
target=${TARGET:-0.80}
eval_every=${EVAL_EVERY:-10}
eval_samples=${EVAL_SAMPLES:-2000}
convergence=${CONVERGENCE:-docs/scale/convergence.json}
read -r -a extra <<<"${EXTRA:-}"
batch=64  # rdmaflow_train's default, unless EXTRA sets it
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --batch_size) batch=${extra[i + 1]:-64} ;;
    --batch_size=*) batch=${extra[i]#--batch_size=} ;;
  esac
done
bazel build -c opt //train:rdmaflow_train //cli:rdmaflow >/dev/null
train=bazel-bin/train/rdmaflow_train

IFS=';' read -r -a spec_array <<<"$specs"
runs=()
for ranks in $ranks_list; do
  for spec in "${spec_array[@]}"; do
    name=${spec%%:*}
    params=
    [[ $spec == *:* ]] && params=${spec#*:}
    flags=(--strategy "$name")
    if [[ $name == ps ]]; then
      # The trainer takes the parameter server's settings as flags.
      rest=()
      IFS=',' read -r -a kvs <<<"$params"
      for kv in "${kvs[@]}"; do
        case $kv in
          servers=*) flags+=(--servers "${kv#servers=}") ;;
          sync=*) flags+=(--sync "${kv#sync=}") ;;
          *) rest+=("$kv") ;;
        esac
      done
      params=$(IFS=,; echo "${rest[*]:-}")
    fi
    [[ -n $params ]] && flags+=(--strategy_params "$params")
    for seed in $seeds; do
      tag=$(echo "${ranks}_${spec}_s$seed" | tr ':=,;' '____')
      run="$out/$tag"
      rm -f "$run".rank*.csv "$run.json"
      echo "== $spec, $ranks ranks, seed $seed, $steps steps $(date +%H:%M:%S)"
      if "$train" --local "$ranks" --model lenet5 "${flags[@]}" --steps "$steps" \
           --seed "$seed" --eval_every "$eval_every" --eval_samples "$eval_samples" "${extra[@]}" \
           --log_prefix "$run" --json "$run.json" --progress=false >"$run.log" 2>&1; then
        echo "   done: $(grep -o '"test_accuracy": [0-9.]*' "$run.json")"
        runs+=("$spec|$ranks|$run")
      else
        echo "   failed: $(tail -1 "$run.log") (left out of the report)" >&2
      fi
    done
  done
done
/usr/bin/python3 tools/convergence_report.py --target "$target" --eval_every "$eval_every" \
  --steps "$steps" --batch "$batch" --out "$convergence" --simulator bazel-bin/cli/rdmaflow \
  "${runs[@]}" |
  tee "$out/report.txt"
echo "measure_convergence: $convergence"

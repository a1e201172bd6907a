#!/usr/bin/env bash
# Decentralized training under stragglers and failures (docs/strategies.md):
# LeNet-5 (MODEL) on Fashion-MNIST with 4 ranks over UCX shared memory, for the
# all-reduce, gossip (pull and push) and Moshpit strategies, in three
# scenarios:
#   homogeneous  every rank at full speed;
#   slow         rank 3's compute takes 2x as long (--slow_rank/--slow_factor);
#   kill         rank 3 SIGKILLs itself half-way (--kill_rank/--kill_step).
# Rank 0 evaluates EVAL_SAMPLES test images every 25 steps; the report gives
# the time to TARGET accuracy per run, and a PNG per scenario plots the
# curves (of the first repeat). A run that fails (the all-reduce cannot lose
# a rank) is reported as failed, with its error and how far it got. With
# REPEATS > 1 every run is repeated and the report gives medians and ranges.
#   tools/bench_decentralized.sh [OUT_DIR]   (default bench-results/decentralized;
#                                             ~3.5 min per repeat)
# Environment: SCENARIOS ("homogeneous slow kill"), STRATEGIES ("allreduce
# gossip gossip_push moshpit"), STEPS (400), TARGET (0.80), EVAL_SAMPLES
# (1000), REPEATS (1), MODEL (lenet5), EXTRA (more rdmaflow_train flags, such as "--device
# cuda --synthetic"), TRAIN (an rdmaflow_train already built, such as the
# device check's on a machine without Bazel; default: built here, -c opt).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/decentralized}
mkdir -p "$out"
scenarios=${SCENARIOS:-homogeneous slow kill}
strategies=${STRATEGIES:-allreduce gossip gossip_push moshpit}
steps=${STEPS:-400}
target=${TARGET:-0.80}
eval_samples=${EVAL_SAMPLES:-1000}
repeats=${REPEATS:-1}
model=${MODEL:-lenet5}
read -r -a extra <<<"${EXTRA:-}"
# What the report and the plots say was trained.
what="$model on Fashion-MNIST"
[ "$model" = lenet5 ] && what="LeNet-5 on Fashion-MNIST"
[[ " ${extra[*]} " == *" --synthetic "* ]] && what="${what% on *} on synthetic data"
[[ " ${extra[*]} " == *" --device cuda "* ]] && what="$what, on the GPU"
if [ -n "${TRAIN:-}" ]; then
  train=$TRAIN
else
  bazel build -c opt //train:rdmaflow_train >/dev/null
  train=bazel-bin/train/rdmaflow_train
fi

for scenario in $scenarios; do
  case $scenario in
    homogeneous) churn=() ;;
    slow) churn=(--slow_rank 3 --slow_factor 2) ;;
    kill) churn=(--kill_rank 3 --kill_step $((steps / 2))) ;;
    *) echo "bench_decentralized: unknown scenario '$scenario'" >&2; exit 2 ;;
  esac
  for repeat in $(seq 1 "$repeats"); do
    for name in $strategies; do
      case $name in
        gossip_push) strategy=(--strategy gossip --strategy_params mode=push) ;;
        *) strategy=(--strategy "$name") ;;
      esac
      run="$out/${scenario}_${name}_r$repeat"
      rm -f "$run.json" "$run".rank*.csv
      echo "== $scenario: $name, 4 ranks, $steps steps (repeat $repeat of $repeats)"
      if "$train" --local 4 --model "$model" "${strategy[@]}" --steps "$steps" "${churn[@]}" \
           "${extra[@]}" --eval_every 25 --eval_samples "$eval_samples" --log_prefix "$run" \
           --json "$run.json" --progress=false >"$run.log" 2>&1; then
        echo "   done: $(grep -o '"test_accuracy": [0-9.]*' "$run.json")"
      else
        echo "   failed (as the report will say): $(grep -m1 -i 'error\|unavailable\|deadline' "$run.log" || tail -1 "$run.log")"
      fi
    done
  done
  logs=()
  for name in $strategies; do logs+=("$name=$out/${scenario}_${name}_r1.rank0.csv"); done
  case $scenario in
    homogeneous) title="4 ranks, homogeneous" ;;
    slow) title="4 ranks, rank 3 slowed 2x" ;;
    kill) title="4 ranks, rank 3 killed at step $((steps / 2))" ;;
  esac
  tools/plot_accuracy.sh "$out/decentralized_$scenario.png" \
    "$what, $title (UCX shared memory)" "${logs[@]}"
done

python3 tools/decentralized_report.py "$out" "$target" "$scenarios" "$strategies" "$repeats" "$what" |
  tee "$out/report.txt"
echo "bench_decentralized: results in $out"

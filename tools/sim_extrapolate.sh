#!/usr/bin/env bash
# Extrapolation (docs/scale.md): predicted step time and samples per second of
# every strategy from 8 to 1024 ranks, one rank a host, over 1 and 10 Gbit/s
# Ethernet, RoCE 100 and HDR InfiniBand, from this machine's calibration
# (each host as fast as one of its cores), with the time to accuracy where
# docs/scale/convergence.json measured the model's convergence (LeNet-5).
# Writes OUT/<model>_<link>.json, OUT/extrapolation.txt,
# docs/img/scale_<model>_<link>.png and docs/img/scale_tta_<model>_<link>.png.
#   tools/sim_extrapolate.sh [OUT_DIR]   (default bench-results/scale; ~1 min)
# Environment: MODELS ("lenet5 vgg"), LINKS ("1gbit 10gbit roce100 ib_hdr200"),
# RANKS ("8,16,32,64,128,256,512,1024"), STEPS (100),
# CALIBRATION (docs/scale/calibration.json), CONVERGENCE
# (docs/scale/convergence.json; none leaves the time to accuracy out).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,12p' "$0"
  exit 0
fi
out=${1:-bench-results/scale}
mkdir -p "$out" docs/img
models=${MODELS:-lenet5 vgg}
links=${LINKS:-1gbit 10gbit roce100 ib_hdr200}
ranks=${RANKS:-8,16,32,64,128,256,512,1024}
steps=${STEPS:-100}
calibration=${CALIBRATION:-docs/scale/calibration.json}
# The measured steps to accuracy, for the time to accuracy (_tta.tsv).
convergence=${CONVERGENCE:-docs/scale/convergence.json}
bazel build -c opt //cli:rdmaflow >/dev/null
rm -f "$out"/*_tta.tsv
strategies='ps:servers=1,sync=bsp;ps:servers=4,sync=bsp;ps:servers=4,sync=ssp:3;allreduce;layer_separated;gossip;moshpit'
for model in $models; do
  for link in $links; do
    echo "== $model over $link: ranks $ranks $(date +%H:%M:%S)"
    bazel-bin/cli/rdmaflow simulate --calibration "$calibration" \
      --convergence "$convergence" --model "$model" \
      --strategy "$strategies" --ranks "$ranks" --link "$link" --cores 1 \
      --steps "$steps" --quiet --json "$out/${model}_$link.json" >"$out/${model}_$link.txt"
  done
done
/usr/bin/python3 tools/sim_extrapolation.py "$out" "$models" "$links" | tee "$out/extrapolation.txt"
for model in $models; do
  for link in $links; do
    tools/plot_sim_scale.sh "$out/${model}_$link.tsv" "docs/img/scale_${model}_$link.png" \
      "$model over $link"
    if [[ -f $out/${model}_${link}_tta.tsv ]]; then
      tools/plot_sim_scale.sh "$out/${model}_${link}_tta.tsv" \
        "docs/img/scale_tta_${model}_$link.png" "$model over $link, time to accuracy" \
        "seconds to the target accuracy" lower
    fi
  done
done

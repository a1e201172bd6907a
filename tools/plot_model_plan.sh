#!/usr/bin/env bash
# The picture in docs/bring_your_model.md: the test MLP (graph_analyzer/torch/
# test_models.py, built by the torch of tools/torch_python.sh), saved as TorchScript, planned
# for layer_separated with 2 conv ranks and 1 FC rank, drawn by Graphviz.
#   tools/plot_model_plan.sh [OUT.png]   (default docs/img/model_plan_mlp.png)
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img/model_plan_mlp.png}
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n 2,6p "$0"; exit 0; fi
command -v dot >/dev/null || { echo "plot_model_plan: needs Graphviz's dot (tools/setup.sh installs it)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bazel build -c opt //cli:rdmaflow >/dev/null
"$(tools/torch_python.sh)" graph_analyzer/torch/test_models.py "$work" mlp
bazel-bin/cli/rdmaflow plan "$work/mlp.pt" --input 64x1x28x28 \
  --strategy layer_separated:conv=2,fc=1 --dot "$work/mlp.dot" --quiet
dot -Tpng -Gdpi=60 "$work/mlp.dot" -o "$out"
echo "wrote $out"

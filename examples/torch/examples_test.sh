#!/usr/bin/env bash
# The two examples of docs/torch.md under torchrun:
#   1. each trains Fashion-MNIST for 300 steps over rdmaflow (2 ranks) and
#      reaches a test accuracy well above chance (> 0.6; chance is 0.1);
#   2. the Python one runs 20 steps with 4 ranks over gloo and over rdmaflow
#      from the same seed, and the final parameters agree (max |diff| <=
#      1e-5). (The C++ one has no Gloo: see its comment.)
set -euo pipefail
export RDMAFLOW_TORCH_MODULE_DIR="$PWD/torch_backend/python"
export RDMAFLOW_TRANSPORT_PARAMS=tls=shm
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
python_example=(examples/torch/ddp_fashion_mnist.py)
cpp_example=(--no_python examples/torch/dp_fashion_mnist)

# accuracy LOG: the test accuracy rank 0 printed.
accuracy() { sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$1" | tail -1; }

for kind in python cpp; do
  if [ "$kind" = python ]; then example=("${python_example[@]}"); else example=("${cpp_example[@]}"); fi
  flag() { if [ "$kind" = python ]; then echo "--$1 $2"; else echo "--$1=$2"; fi; }
  echo "== $kind: 300 steps over rdmaflow, 2 ranks"
  # shellcheck disable=SC2046
  tools/torchrun.sh --nproc_per_node=2 "${example[@]}" $(flag backend rdmaflow) \
      $(flag steps 300) | tee "$tmp/$kind.log"
  acc=$(accuracy "$tmp/$kind.log")
  echo "$kind accuracy: $acc"
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)" \
      || { echo "FAIL: $kind accuracy $acc is not above 0.6"; exit 1; }
  [ "$kind" = python ] || continue
  for backend in gloo rdmaflow; do
    echo "== $kind: 20 steps over $backend, 4 ranks"
    # shellcheck disable=SC2046
    tools/torchrun.sh --nproc_per_node=4 "${example[@]}" $(flag backend "$backend") \
        $(flag steps 20) $(flag save_params "$tmp/$kind.$backend.params")
  done
  "$RDMAFLOW_PYTHON" - "$tmp/$kind.gloo.params" "$tmp/$kind.rdmaflow.params" "$kind" <<'PY'
import sys
import numpy as np
import torch
def load(path):
    if sys.argv[3] == "cpp":
        return np.fromfile(path, dtype=np.float32)
    return np.concatenate([t.numpy().ravel() for t in torch.load(path).values()])
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = float(np.abs(a - b).max())
print(f"{sys.argv[3]}: {a.size} parameters, max |gloo - rdmaflow| = {diff:.3g}")
sys.exit(0 if a.size == b.size and diff <= 1e-5 else 1)
PY
done
echo "examples_test: passed"

#!/usr/bin/env bash
# torchrun of the project's torch (tools/torch_python.sh: $RDMAFLOW_PYTHON or
# .venv), with the rdmaflow_torch module on
# PYTHONPATH (built first unless RDMAFLOW_TORCH_MODULE_DIR names a folder
# holding rdmaflow_torch.so). Arguments are torchrun's:
#   tools/torchrun.sh --nproc_per_node=2 examples/torch/ddp_fashion_mnist.py
# Runs on one machine, like --standalone, but with the rendezvous store on a
# free port: --standalone always takes port 29400, so two jobs at once
# (tests running side by side) would share one store. With `--redirects 1
# --tee 1` each rank's output reaches the console prefixed by its rank.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python=$("$root/tools/torch_python.sh") || exit 1
if [ -z "${RDMAFLOW_TORCH_MODULE_DIR:-}" ]; then
  log=$(mktemp)
  if ! (cd "$root" && bazel build -c opt //torch_backend/python:rdmaflow_torch.so) \
      >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  rm -f "$log"
  RDMAFLOW_TORCH_MODULE_DIR="$root/bazel-bin/torch_backend/python"
fi
export PYTHONPATH="$RDMAFLOW_TORCH_MODULE_DIR${PYTHONPATH:+:$PYTHONPATH}"
# torchrun leaves its log folder (torchelastic_*) in the temporary
# directory: under a test, the test's own, which Bazel cleans.
if [ -n "${TEST_TMPDIR:-}" ]; then export TMPDIR="$TEST_TMPDIR"; fi
exec "$python" -m torch.distributed.run --rdzv_backend=c10d \
  --rdzv_endpoint=localhost:0 --rdzv_id="rdmaflow-$$-$RANDOM" --nnodes=1 \
  --redirects 1 --tee 1 "$@"

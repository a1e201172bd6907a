#!/usr/bin/env bash
# Prints the Python interpreter whose torch rdmaflow is built against and
# runs with: $RDMAFLOW_PYTHON when set (the same variable chooses the
# LibTorch of the build, bazel/torch.bzl), else the project's virtual
# environment, .venv/bin/python (tools/torch_venv.sh). Fails, saying what
# to do, when there is no such interpreter. Tools use it as
#   python=$(tools/torch_python.sh) || exit 1
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python=${RDMAFLOW_PYTHON:-$root/.venv/bin/python}
if [ ! -x "$python" ]; then
  echo "torch_python: no Python interpreter at $python; run tools/setup.sh" \
       "(it makes .venv with torch) or set RDMAFLOW_PYTHON to a Python whose" \
       "torch is 2.x" >&2
  exit 1
fi
case "$python" in
  /*) echo "$python" ;;
  *) echo "$PWD/$python" ;;
esac

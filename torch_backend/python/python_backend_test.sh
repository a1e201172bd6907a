#!/usr/bin/env bash
# The rdmaflow backend from Python under torchrun, with 2 and 4 ranks:
# backend_check.py (collectives against local references, tags out of
# order, registered tensors, errors). Fails when any rank fails.
set -euo pipefail
export RDMAFLOW_TORCH_MODULE_DIR="$PWD/torch_backend/python"
export RDMAFLOW_TRANSPORT_PARAMS=tls=shm
for ranks in 2 4; do
  echo "== backend_check.py with $ranks ranks"
  tools/torchrun.sh --nproc_per_node="$ranks" torch_backend/python/backend_check.py
done

#!/usr/bin/env bash
# The rdmaflow backend from Python under torchrun, with 2 and 4 ranks:
# backend_check.py (collectives against local references, tags out of
# order, registered tensors, DDP's comm hook, inline calls, errors), and
# with 2 ranks again with plain tensors in shared memory. Fails when any
# rank fails.
set -euo pipefail
export RDMAFLOW_TORCH_MODULE_DIR="$PWD/torch_backend/python"
export RDMAFLOW_TRANSPORT_PARAMS=tls=shm
# Small collectives on the calling thread with 2 ranks, on the engine
# thread (the default) with 4.
for ranks in 2 4; do
  inline_kb=0
  [ "$ranks" = 2 ] && inline_kb=64
  echo "== backend_check.py with $ranks ranks, RDMAFLOW_INLINE_KB=$inline_kb"
  RDMAFLOW_INLINE_KB=$inline_kb tools/torchrun.sh --nproc_per_node="$ranks" \
    torch_backend/python/backend_check.py
done
# Plain tensors from 64 KiB on in shared memory (RDMAFLOW_SHARED_TENSORS):
# every collective again, and check_shared's counts.
echo "== backend_check.py with 2 ranks, RDMAFLOW_SHARED_TENSORS=on"
RDMAFLOW_SHARED_TENSORS=on RDMAFLOW_SHARED_TENSORS_MIN_KB=64 \
  tools/torchrun.sh --nproc_per_node=2 torch_backend/python/backend_check.py

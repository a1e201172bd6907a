#!/usr/bin/env bash
# What torch 2.x asks of a c10d backend (backend_api_check.py: a
# device-mapped group, the flat all-gather and reduce-scatter, new_group,
# shutdown through destroy_process_group), 4 ranks under torchrun. Fails
# when any rank fails.
set -euo pipefail
export RDMAFLOW_TORCH_MODULE_DIR="$PWD/torch_backend/python"
export RDMAFLOW_TRANSPORT_PARAMS=tls=shm
tools/torchrun.sh --nproc_per_node=4 torch_backend/python/backend_api_check.py

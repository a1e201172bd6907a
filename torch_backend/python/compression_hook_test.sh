#!/usr/bin/env bash
# rdmaflow_torch.Codec and rdmaflow_torch.hooks.codec_hook under torchrun,
# 2 ranks over the rdmaflow backend (compression_hook_check.py). Fails when
# any rank fails.
set -euo pipefail
export RDMAFLOW_TORCH_MODULE_DIR="$PWD/torch_backend/python"
export RDMAFLOW_TRANSPORT_PARAMS=tls=shm
tools/torchrun.sh --nproc_per_node=2 torch_backend/python/compression_hook_check.py

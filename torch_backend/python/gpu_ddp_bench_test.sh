#!/usr/bin/env bash
# tools/gpu_ddp_bench.py (the device check's DDP comparison, rdmaflow against
# Gloo) on CPU with small models and a few steps: both backends train the
# transformer to the same parameters, and the FSDP2 step runs over
# rdmaflow. The figures are the GPU machine's to give; here the script must
# run and agree.
set -euo pipefail
export PYTHONPATH="$PWD/torch_backend/python${PYTHONPATH:+:$PYTHONPATH}"
out="${TEST_TMPDIR:?}/ddp.json"
timeout -k 10 240 "$RDMAFLOW_PYTHON" tools/gpu_ddp_bench.py --device cpu --small \
  --models transformer --steps 3 --warmup 1 --json "$out"
"$RDMAFLOW_PYTHON" - "$out" <<'PY'
import json, sys
runs = {(r["model"], r["backend"]): r for r in json.load(open(sys.argv[1]))["runs"]}
assert set(runs) == {("transformer", "rdmaflow"), ("transformer", "gloo"),
                     ("fsdp2", "rdmaflow")}, sorted(runs)
for r in runs.values():
    assert "error" not in r and r["step_ms"] > 0, r
assert runs[("transformer", "gloo")]["max_param_diff"] < 1e-5, runs
print("gpu_ddp_bench: both backends trained the same parameters; FSDP2 ran")
PY

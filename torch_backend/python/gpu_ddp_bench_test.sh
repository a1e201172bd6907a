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
# --hook: rdmaflow's DDP through rdmaflow_torch.allreduce_hook (on CPU its
# buckets move into registered host memory), the same parameters as Gloo's.
hooked="${TEST_TMPDIR:?}/ddp_hook.json"
timeout -k 10 240 "$RDMAFLOW_PYTHON" tools/gpu_ddp_bench.py --device cpu --small \
  --models transformer --steps 3 --warmup 2 --hook --json "$hooked"
"$RDMAFLOW_PYTHON" - "$hooked" <<'PY'
import json, sys
runs = {(r["model"], r["backend"]): r for r in json.load(open(sys.argv[1]))["runs"]}
ours = runs[("transformer", "rdmaflow")]
assert ours["moved_to_registered"] > 0, ours
assert runs[("transformer", "gloo")]["max_param_diff"] < 1e-5, runs
print("gpu_ddp_bench --hook: buckets moved, the same parameters as Gloo's")
PY

#!/usr/bin/env bash
# tools/gpu_p2p_bench.py (the device check's send/recv comparison) on CPU
# with small sizes and a few rounds: every backend echoes every size back
# intact and reports a time. The figures are the GPU machine's to give;
# here the script must run and agree.
set -euo pipefail
export PYTHONPATH="$PWD/torch_backend/python${PYTHONPATH:+:$PYTHONPATH}"
out="${TEST_TMPDIR:?}/p2p.json"
timeout -k 10 240 "$RDMAFLOW_PYTHON" tools/gpu_p2p_bench.py --device cpu --sizes 4K,1M \
  --iters 3 --warmup 1 --json "$out"
"$RDMAFLOW_PYTHON" - "$out" <<'PY'
import json, sys
runs = {r["backend"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert set(runs) == {"rdmaflow", "rdmaflow_staged", "gloo"}, sorted(runs)
for r in runs.values():
    assert "error" not in r, r
    assert [s["bytes"] for s in r["sizes"]] == [4096, 1 << 20], r
    for s in r["sizes"]:
        assert s["echo_ok"] and s["one_way_us"] > 0, r
print("gpu_p2p_bench: every backend echoed every size")
PY
# A malformed size is refused by name.
if "$RDMAFLOW_PYTHON" tools/gpu_p2p_bench.py --device cpu --sizes 3 2>"$TEST_TMPDIR/err"; then
  echo "a 3-byte size was taken" >&2; exit 1
fi
grep -q -- "--sizes" "$TEST_TMPDIR/err"
echo "gpu_p2p_bench: a malformed size refused"
# --expect_inline fails a run whose sends did not go inline (CPU tensors
# take no device path at all).
if "$RDMAFLOW_PYTHON" tools/gpu_p2p_bench.py --device cpu --sizes 4K --iters 1 --warmup 0 \
  --backends rdmaflow --expect_inline >/dev/null 2>"$TEST_TMPDIR/err"; then
  echo "--expect_inline passed sends that took no device path" >&2; exit 1
fi
grep -q "expected every send inline" "$TEST_TMPDIR/err"
echo "gpu_p2p_bench: --expect_inline refuses sends that were not inline"

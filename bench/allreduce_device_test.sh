#!/usr/bin/env bash
# allreduce_bench --device=fake: two and three processes over UCX shared
# memory all-reduce device regions of their fake devices (collectives'
# DeviceDataMover, IPC mappings across the processes), each call checked
# against the exact sum inside the bench; the table and the JSON report have
# an rdmaflow-device row per size, on both paths, with the device's bound,
# and an rdmaflow-device-ring row per size (the group's ring on host copies).
# Its figures are the fake's, and nothing is asserted of them. Then a device
# kind that does not exist is refused with a reason.
set -euo pipefail
bench=bench/allreduce_bench
tmp="${TEST_TMPDIR:?}"
timeout -k 10 180 "$bench" --ranks=2,3 --impls=rdmaflow-device-ring --params=tls=shm --device=fake \
  --min_bytes=4096 --max_bytes=1048576 --factor=16 --byte_budget=2097152 --max_iters=8 \
  --device_one_shot_max_bytes=65536 --device_chunk_bytes=262144 \
  --json="$tmp/out.json" 2>"$tmp/progress" >"$tmp/out" || { cat "$tmp/out" "$tmp/progress"; exit 1; }
cat "$tmp/out"
cat "$tmp/progress" >&2
grep -q '; device fake:0, copy [0-9.]* GB/s' "$tmp/out"
# No rank freed its region while another still had it open.
if grep -q 'while another process still has it open' "$tmp/progress"; then
  echo "a rank freed device memory another still had mapped (the fake device's line above)"
  exit 1
fi
# 4 KiB, 64 KiB, 1 MiB on 2 and 3 ranks: 6 rows, 4 one-shot and 2 scatter-gather.
test "$(grep -c '^rdmaflow-device ' "$tmp/out")" = 6
test "$(grep -c '^rdmaflow-device-ring ' "$tmp/out")" = 6
test "$(grep -c ' device-ring ' "$tmp/out")" = 6
test "$(grep -c 'device-one-shot' "$tmp/out")" = 4
test "$(grep -c 'device-scatter-gather' "$tmp/out")" = 2
test "$(grep -o '"impl": "rdmaflow-device"' "$tmp/out.json" | wc -l)" = 6
# A bound for each same-host row; none (0) for the ring's.
test "$(grep -oE '"reduce_bound_gbps": [0-9.]+' "$tmp/out.json" | grep -cv ': 0$')" = 6
test "$(grep -o '"impl": "rdmaflow-device-ring"' "$tmp/out.json" | wc -l)" = 6
if "$bench" --device=tpu 2>"$tmp/err"; then exit 1; fi
grep -q "is not cuda or fake" "$tmp/err"
echo "allreduce_device_test: passed"

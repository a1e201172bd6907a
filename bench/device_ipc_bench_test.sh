#!/usr/bin/env bash
# device_ipc_bench on the fake device, both all-reduce algorithms: the two
# processes start, exchange handles, copy, and the all-reduce's own check
# (every element 1 + 2 after one call) passes; the JSON report has a row
# per size. Its figures are the fake's, and nothing is asserted of them.
set -euo pipefail
bench=bench/device_ipc_bench
tmp="${TEST_TMPDIR:?}"
for algorithm in split leader; do
  timeout -k 10 120 "$bench" --device=fake --mib=1,2 --iterations=2 \
    --algorithm="$algorithm" --json="$tmp/$algorithm.json" 2>&1 | tee "$tmp/$algorithm.out"
  grep -q "algorithm $algorithm" "$tmp/$algorithm.out"
  # Neither process freed its buffer while the other still had it open.
  if grep -q 'while another process still has it open' "$tmp/$algorithm.out"; then
    echo "a process freed device memory the other still had mapped (the fake device's line above)"
    exit 1
  fi
  test "$(grep -o '"allreduce_us"' "$tmp/$algorithm.json" | wc -l)" = 2
  grep -q '"device": "fake:0"' "$tmp/$algorithm.json"
done
# Bad flags are refused with a reason, before any process starts.
if "$bench" --device=fake --algorithm=ring 2>"$tmp/err"; then exit 1; fi
grep -q "use split or leader" "$tmp/err"
if "$bench" --device=fake --mib=0 2>"$tmp/err"; then exit 1; fi
grep -q "not a size" "$tmp/err"
if "$bench" --device=tpu 2>"$tmp/err"; then exit 1; fi
grep -q "not a device runtime" "$tmp/err"
echo "device_ipc_bench_test: passed"

#!/usr/bin/env bash
# transport_pingpong --memory=device on the fake device: two processes over
# UCX shared memory write into and read from each other's device regions
# (rdma/device's IPC path, notifications through UCX); the table and the
# JSON report have a write and a read row per size, with the device copy as
# the memcpy column. The same through the staged path. Its figures are the
# fake's, and nothing is asserted of them. Then the flags that cannot work
# are refused with a reason.
set -euo pipefail
bench=bench/transport_pingpong
tmp="${TEST_TMPDIR:?}"
timeout -k 10 120 "$bench" --transport=ucx --params=tls=shm --memory=device --device=fake \
  --min_bytes=8 --max_bytes=65536 --byte_budget=262144 --max_iters=64 \
  --json="$tmp/out.json" 2>&1 | tee "$tmp/out"
grep -q '^# memory: device (fake' "$tmp/out"
# Neither rank freed a region while the other still had it open.
if grep -q 'while another process still has it open' "$tmp/out"; then
  echo "a rank freed device memory the other still had mapped (the fake device's line above)"
  exit 1
fi
# 8 B to 64 KiB in powers of 4 or 2: at least 5 sizes, a write and a read row each.
writes=$(grep -o '"op": "write"' "$tmp/out.json" | wc -l)
reads=$(grep -o '"op": "read"' "$tmp/out.json" | wc -l)
test "$writes" -ge 5
test "$writes" = "$reads"
grep -q 'device memory (fake' "$tmp/out.json"
test "$(grep -c '"memcpy_mbps"' "$tmp/out.json")" = "$((writes + reads))"
# The staged path (each rank claims a host of its own): writes and reads
# through pinned host memory in chunks of 64 KiB, reused many times.
timeout -k 10 120 "$bench" --transport=ucx --params=tls=shm --memory=device --device=fake \
  --device_path=staged --staging_slot_bytes=65536 \
  --min_bytes=8 --max_bytes=1048576 --byte_budget=4194304 --max_iters=64 \
  --json="$tmp/staged.json" 2>&1 | tee "$tmp/staged"
grep -q '^# memory: device (fake:0), staged path' "$tmp/staged"
grep -q '(another host) written through pinned host memory' "$tmp/staged"
staged_writes=$(grep -o '"op": "write"' "$tmp/staged.json" | wc -l)
test "$staged_writes" -ge 5
test "$staged_writes" = "$(grep -o '"op": "read"' "$tmp/staged.json" | wc -l)"
if "$bench" --memory=device --device=fake --device_path=nvlink 2>"$tmp/err"; then exit 1; fi
grep -q "must be ipc or staged" "$tmp/err"
# Two ranks in one process cannot open each other's handles: refused.
if "$bench" --memory=device --device=fake --mode=thread 2>"$tmp/err"; then exit 1; fi
grep -q "needs the ranks in two processes" "$tmp/err"
if "$bench" --memory=gpu 2>"$tmp/err"; then exit 1; fi
grep -q "must be host or device" "$tmp/err"
if timeout -k 10 60 "$bench" --params=tls=shm --memory=device --device=tpu 2>"$tmp/err"; then
  exit 1
fi
grep -q "the kinds are cuda and fake" "$tmp/err"
echo "transport_pingpong_device_test: passed"

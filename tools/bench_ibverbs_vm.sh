#!/usr/bin/env bash
# The ping-pong benchmark over the native ibverbs backend, next to perftest
# (ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw) on the same device in
# the same Soft-RoCE VM run (tools/rxe_vm/run.sh), then the ablation's
# zero-copy vs rdma_copy replay over the same verbs. On rxe under emulation
# these figures are functional, not a hardware claim: see docs/ibverbs.md for
# running the same tools on a real InfiniBand/RoCE pair.
#   tools/bench_ibverbs_vm.sh            # results in bench-results/ibverbs_*
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-bench-results}
mkdir -p "$out"
bazel build -c opt //bench:transport_pingpong //bench:ablation
cat >"$out/ibverbs_vm_run.sh" <<SCRIPT
set -u
gid=\$RDMAFLOW_RXE_GID_INDEX
echo "=== rdmaflow transport_pingpong --transport=ibverbs"
bazel-bin/bench/transport_pingpong --transport=ibverbs --mode=process \
  --max_bytes=1048576 --max_iters=300 \
  --json=$out/pingpong_ibverbs_rxe.json --tsv=$out/pingpong_ibverbs_rxe.tsv
for test in "ib_write_lat -s 8" "ib_write_lat -s 4096" "ib_read_lat -s 8" \
            "ib_write_bw -s 65536" "ib_write_bw -s 1048576" "ib_read_bw -s 65536"; do
  echo "=== perftest \$test"
  \$test -d rxe0 -x \$gid -n 300 >/tmp/server.log 2>&1 &
  sleep 1
  \$test -d rxe0 -x \$gid -n 300 10.11.12.1 2>&1 | grep -E '^ *[0-9]+ +[0-9]+ ' || echo "perftest failed"
  wait
done
echo "=== rdmaflow ablation --transport=ibverbs"
bazel-bin/bench/ablation --transport=ibverbs \
  --params=device=rxe0,ack_timeout=16 --graphs=mlp,seq,small_tensors \
  --communicators=rdma,rdma_copy --steps=10 --warmup=3 \
  --sweep_max=1048576 --sweep_steps=10 --json=$out/ablation_ibverbs_rxe.json
SCRIPT
tools/rxe_vm/run.sh "sh $out/ibverbs_vm_run.sh" 2>&1 | grep -v '^busybox: ' | tee "$out/ibverbs_vm.log"

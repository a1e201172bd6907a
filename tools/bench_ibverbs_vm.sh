#!/usr/bin/env bash
# rdmaflow's ping-pong over the native ibverbs backend next to perftest's own
# tools (ib_write_lat, ib_read_lat, ib_write_bw, ib_read_bw) on the same
# device in the same Soft-RoCE VM run (tools/rxe_vm/run.sh), then the
# ablation's zero-copy vs rdma_copy replay over the same verbs. The ping-pong
# runs once per notification path (notify=imm, the default, and notify=flag).
# Everything runs REPEAT times (5), interleaved (the order turning round
# each repeat), and tools/ibverbs_report.py takes the median of each figure
# over the repeats: one table with the ratios and the targets of
# docs/ibverbs.md, and a plot.
#
# On rxe under emulation these figures are functional, not a hardware claim:
# see docs/ibverbs.md, "Running it on real hardware", for the same
# comparison on a pair of hosts.
#
#   tools/bench_ibverbs_vm.sh            # results in bench-results/ibverbs_vm/
#   OUT_DIR=... PNG=docs/img/ibverbs_vs_perftest.png ABLATION=0 tools/bench_ibverbs_vm.sh
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-bench-results/ibverbs_vm}
png=${PNG:-$out/ibverbs_vs_perftest.png}
ablation=${ABLATION:-1}
iters=${ITERS:-300}
repeat=${REPEAT:-5}
mkdir -p "$out"
rm -f "$out"/perftest_*.txt "$out"/pingpong_ibverbs_*.json "$out"/pingpong_ibverbs_*.tsv
echo "[1/3] building"
bazel build -c opt //bench:transport_pingpong //bench:ablation
cat >"$out/vm_run.sh" <<SCRIPT
set -u
gid=\$RDMAFLOW_RXE_GID_INDEX
ours() {
  for notify in "\$@"; do
    echo "=== [\$r/$repeat] rdmaflow transport_pingpong --transport=ibverbs --params=notify=\$notify"
    bazel-bin/bench/transport_pingpong --transport=ibverbs \
      --params=device=rxe0,notify=\$notify --mode=process \
      --max_bytes=1048576 --max_iters=$iters --byte_budget=64000000 \
      --json=$out/pingpong_ibverbs_\${notify}_r\$r.json \
      --tsv=$out/pingpong_ibverbs_\${notify}_r\$r.tsv | grep -A3 '^# as ib_write_lat'
  done
}
theirs() {
  for test in "ib_write_lat 8" "ib_write_lat 4096" "ib_write_lat 65536" \
              "ib_read_lat 8" "ib_read_lat 4096" "ib_write_bw 65536" \
              "ib_write_bw 1048576" "ib_read_bw 65536" "ib_read_bw 1048576"; do
    set -- \$test
    echo "=== [\$r/$repeat] perftest \$1 -s \$2"
    f=$out/perftest_\$1_\$2_r\$r.txt
    \$1 -d rxe0 -x \$gid -s \$2 -n $iters >/tmp/server.log 2>&1 &
    sleep 1
    \$1 -d rxe0 -x \$gid -s \$2 -n $iters 10.11.12.1 >\$f 2>&1 ||
      echo "perftest \$1 failed: \$(tail -3 \$f)"
    grep -E '^ *[0-9]+ +[0-9]+ ' \$f
    wait
  done
}
# The order turns round every repeat, so that neither side always runs
# first (the machine's speed drifts within a run).
for r in \$(seq $repeat); do
  if [ \$((r % 2)) = 1 ]; then ours imm flag; theirs
  else theirs; ours flag imm; fi
done
if [ "$ablation" = 1 ]; then
  echo "=== rdmaflow ablation --transport=ibverbs"
  bazel-bin/bench/ablation --transport=ibverbs \
    --params=device=rxe0,ack_timeout=16 --graphs=mlp,seq,small_tensors \
    --communicators=rdma,rdma_copy --steps=20 --warmup=3 \
    --sweep_max=1048576 --sweep_steps=40 --json=$out/ablation_ibverbs_rxe.json
fi
SCRIPT
echo "[2/3] running both in the Soft-RoCE VM (several minutes under emulation)"
tools/rxe_vm/run.sh "sh $out/vm_run.sh" 2>&1 | grep -v '^busybox: ' | tee "$out/vm.log"
echo "[3/3] side by side"
/usr/bin/python3 tools/ibverbs_report.py "$out" --png "$png"

#!/usr/bin/env bash
# All-reduce benchmark (docs/collectives.md): rdmaflow over UCX shared memory
# (the algorithm it picks per size, and its ring alone) and Gloo in
# the same processes (allreduce_bench), then
# Open MPI's MPI_Allreduce with the same sizes (mpi_allreduce under mpirun,
# its default on-node transport), for 2 and 4 ranks, 4 KiB to 64 MiB. Writes
# OUT/allreduce.{json,txt,tsv} and OUT/allreduce_busbw.png.
#   tools/bench_allreduce.sh [OUT_DIR]   (default bench-results/allreduce; ~2 min)
# Environment: RANKS ("2 4"), MAX_BYTES (67108864), PARAMS (UCX parameters).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/allreduce}
mkdir -p "$out"
ranks=${RANKS:-2 4}
max_bytes=${MAX_BYTES:-67108864}
bazel build -c opt //bench:allreduce_bench //bench:mpi_allreduce >/dev/null
comma=$(echo $ranks | tr ' ' ',')
# Each implementation in processes of its own, as a job would run it: Gloo's
# threads (and an idle second group) beside rdmaflow's ranks made the 2-rank
# figures erratic (docs/collectives.md).
for impl in rdmaflow rdmaflow-ring gloo; do
  echo "== $impl: ranks $comma"
  bazel-bin/bench/allreduce_bench --ranks="$comma" --max_bytes="$max_bytes" \
    --impls="$impl" ${PARAMS:+--params="$PARAMS"} --json="$out/ours-$impl.json" \
    | tee "$out/ours-$impl.txt"
done
for n in $ranks; do
  echo "== Open MPI: $n ranks"
  mpirun --allow-run-as-root --oversubscribe -np "$n" \
    bazel-bin/bench/mpi_allreduce --max_bytes="$max_bytes" \
    --json="$out/mpi$n.json" >"$out/mpi$n.txt"
done
/usr/bin/python3 tools/allreduce_report.py "$out" | tee "$out/allreduce.txt"
tools/plot_allreduce.sh "$out/allreduce.tsv" "$out/allreduce_busbw.png"

#!/usr/bin/env bash
# The rdmaflow c10d backend next to Gloo, through the same Python script
# (bench/torch_backend_bench.py) under torchrun: all-reduce bus bandwidth
# from 4 KiB to 64 MiB and DDP step time of LeNet-5 and the VGG-like net, with 2 and 4
# ranks, for gloo, rdmaflow, and rdmaflow with registered tensors (DDP
# with rdmaflow_torch.allreduce_hook, its buckets registered); small calls
# also asynchronous (async_op=True, then wait: the engine thread's
# hand-off), with and without RDMAFLOW_INLINE_KB=64, and one rank alone; and the bare
# collective (bench/allreduce_bench, rdmaflow's all-reduce called from C++
# with no torch between) at the same sizes, in every repeat, and again
# inside the registered run's own processes (--bare: the ring's all-reduce
# of the same tensor, alternating with the torch calls), so that
# torch.distributed's cost is a ratio of one run, and of one launch. Prints the comparison
# (tools/torch_report.py) and plots it.
#   tools/bench_torch.sh [OUT]        (default bench-results/torch)
# RANKS (default "2 4"), DDP_STEPS (default 30), REPEATS (default 3: every
# configuration runs that many times; the report shows medians, the JSON
# every run).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/torch}
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/bare.*.json
bazel build -c opt //bench:allreduce_bench >/dev/null
export RDMAFLOW_TRANSPORT_PARAMS=${RDMAFLOW_TRANSPORT_PARAMS:-tls=shm}
export RDMAFLOW_REGISTERED_MB=${RDMAFLOW_REGISTERED_MB:-80}  # a 64 MiB tensor fits
for repeat in $(seq "${REPEATS:-3}"); do
# One rank, no peer: what a 4 KiB call costs through torch.distributed.
for variant in rdmaflow async async_inline gloo; do
  echo "== $variant, 1 rank, 4 KiB (run $repeat of ${REPEATS:-3})"
  case $variant in
    async) flags=(--backend rdmaflow --async_op --label "rdmaflow (async)"); kb=0 ;;
    async_inline)
      flags=(--backend rdmaflow --async_op --label "rdmaflow (async, inline)"); kb=64 ;;
    *) flags=(--backend "$variant"); kb=0 ;;
  esac
  RDMAFLOW_INLINE_KB=$kb tools/torchrun.sh --nproc_per_node=1 bench/torch_backend_bench.py \
      "${flags[@]}" --sizes 4096 --ddp_steps 0 --json "$out/$variant.1.$repeat.jsonl" 2>&1 |
    sed -e '/^\*\*\*/d' -e '/OMP_NUM_THREADS/d' -e '/^WARNING:__main__/d'
done
for n in ${RANKS:-2 4}; do
  # Asynchronous small calls: through the engine thread, and on the
  # caller's with RDMAFLOW_INLINE_KB (off by default: docs/torch.md).
  for kb in 0 64; do
    label="rdmaflow (async)"
    [ "$kb" = 0 ] || label="rdmaflow (async, inline)"
    echo "== $label, $n ranks (run $repeat of ${REPEATS:-3})"
    RDMAFLOW_INLINE_KB=$kb tools/torchrun.sh --nproc_per_node="$n" bench/torch_backend_bench.py \
        --backend rdmaflow --async_op --label "$label" --sizes 4096,16384,65536 --ddp_steps 0 \
        --json "$out/async.$kb.$n.$repeat.jsonl" 2>&1 |
      sed -e '/^\*\*\*/d' -e '/OMP_NUM_THREADS/d' -e '/^WARNING:__main__/d'
  done
done
for n in ${RANKS:-2 4}; do
  echo "== bare collective (allreduce_bench), $n ranks (run $repeat of ${REPEATS:-3})"
  bazel-bin/bench/allreduce_bench --ranks="$n" --impls=rdmaflow \
      --params="$RDMAFLOW_TRANSPORT_PARAMS" --json="$out/bare.$n.$repeat.json" >/dev/null
  for variant in gloo rdmaflow registered; do
    case $variant in
      registered) flags=(--backend rdmaflow --registered --bare) ;;
      *) flags=(--backend "$variant") ;;
    esac
    echo "== $variant, $n ranks (run $repeat of ${REPEATS:-3})"
    # "registered": DDP with rdmaflow_torch.allreduce_hook (buckets moved
    # into registered memory).
    tools/torchrun.sh --nproc_per_node="$n" bench/torch_backend_bench.py \
        --ddp_steps "${DDP_STEPS:-30}" "${flags[@]}" --json "$out/$variant.$n.$repeat.jsonl" 2>&1 |
      sed -e '/^\*\*\*/d' -e '/OMP_NUM_THREADS/d' -e '/^WARNING:__main__/d'
  done
done
done
/usr/bin/python3 tools/torch_report.py "$out" | tee "$out/torch_report.txt"
PLOT_TITLE="torch.distributed all-reduce bus bandwidth (float32 sum)" \
  tools/plot_allreduce.sh "$out/torch_allreduce.tsv" "$out/torch_allreduce.png" \
  "rdmaflow" "rdmaflow (registered tensors)" "gloo"

#!/usr/bin/env bash
# rdmaflow beside its peers in one run, as ratios (docs/benchmarks.md,
# "Peers in one run"): each repetition runs, one after the other on UCX
# shared memory,
#  - transport_pingpong (8 B to 4 KiB): rdmaflow's flagged write (the flag
#    word behind the data, polled by the peer: --signal=flag, bound once and
#    posted with no completion where the write is done at once;
#    --signal=flag_signalled, bound, a completion each post; and
#    --signal=flag_unbound, each post checked and looked up), notified
#    write (flag inbox, then notify=am), read (bound and inline where it is
#    done at once, --read=inline; and posted), and single-thread memcpy;
#  - ucx_perftest: ucp_put_lat and ucp_get at 8 B and 4 KiB;
#  - allreduce_bench (rdmaflow and Gloo) and Open MPI's MPI_Allreduce with
#    RANKS ranks, 4 KiB to MAX_BYTES (x16 steps); then rdmaflow and Open MPI
#    again beside LOAD threads of busy compute in rank 0's process (both
#    benches' --load), as when ranks share their cores with a training step,
#    each size with the work the load got while it ran (a peer that keeps
#    its latency by taking the cores from the compute shows it there);
#  - torch.distributed all-reduces (bench/torch_backend_bench.py under
#    torchrun, TORCH_RANKS ranks, 1, 4 and 16 MiB) of ordinary tensors (in
#    shared segments, RDMAFLOW_SHARED_TENSORS=on; read out of the process,
#    RDMAFLOW_CMA_MIN_KB=1024; staged, RDMAFLOW_CMA=off) and of registered
#    ones, each run beside the bare collective in the same processes;
# Around the measures with a target (our flagged write, ucx_perftest's put,
# each all-reduce run, the torch run in shared segments) the cache-line
# round trip between the two CPUs is probed (bench:line_round_trip, 10 ms)
# into rep<N>/placement.tsv: this VM's hypervisor moves its CPUs between a
# near and a far placement (docs/benchmarks.md, "The machine's two
# placements"), and a ratio of two figures taken in different placements
# says nothing;
# then tools/peers_report.py prints each repetition's ratios and their
# range over the repetitions (latency: rdmaflow / peer, lower is better;
# all-reduce: peer time / rdmaflow time, higher is better), and writes
# OUT_DIR/peers.json. Never compare figures of different runs: this
# machine's latencies swing several fold an hour apart.
# Usage: tools/peers.sh [OUT_DIR]   (default bench-results/peers)
# Environment: REPS (default 3), RANKS (default 4), MAX_BYTES (default
# 16777216), LOAD (default 2; 0 skips the loaded runs), TORCH_RANKS
# (default "2 4"; empty skips the torch runs).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/peers}
reps=${REPS:-3}
ranks=${RANKS:-4}
max_bytes=${MAX_BYTES:-16777216}
load=${LOAD:-2}
mkdir -p "$out"
command -v ucx_perftest >/dev/null || { echo "peers.sh: ucx_perftest missing (apt-get install ucx-utils, or tools/setup.sh)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "peers.sh: mpirun missing (apt-get install openmpi-bin, or tools/setup.sh)" >&2; exit 1; }
bazel build -c opt //bench:transport_pingpong //bench:allreduce_bench //bench:mpi_allreduce \
  //bench:line_round_trip >/dev/null
torch_ranks=${TORCH_RANKS-2 4}
if [ -n "$torch_ranks" ]; then
  bazel build -c opt //torch_backend/python:rdmaflow_torch.so >/dev/null
  export RDMAFLOW_TORCH_MODULE_DIR="$PWD/bazel-bin/torch_backend/python"
fi

# torch_allreduce RANKS FILE [ARGS...]: the torch bench's all-reduces of 1,
# 4 and 16 MiB, rank 0's JSON lines into FILE.
torch_allreduce() {
  local n=$1 file=$2
  shift 2
  RDMAFLOW_TRANSPORT_PARAMS=tls=shm RDMAFLOW_REGISTERED_MB=80 timeout 600 \
    tools/torchrun.sh --nproc_per_node="$n" bench/torch_backend_bench.py --backend rdmaflow \
      --sizes 1048576,4194304,16777216 --ddp_steps 0 --json "$file" "$@" >/dev/null 2>&1 || {
    echo "peers.sh: the torch bench failed ($n ranks, $file)" >&2
    return 1
  }
}

case "$load" in
  ''|*[!0-9]*) echo "peers.sh: LOAD=$load is not a thread count" >&2; exit 2 ;;
esac

# placed LABEL FILE COMMAND...: runs COMMAND between two probes of the
# cache-line round trip, and appends "LABEL<TAB>before<TAB>after" (ns) to
# FILE.
placed() {
  local label=$1 file=$2 before after
  shift 2
  # One CPU (nothing to probe) or a failed probe: "-".
  before=$(bazel-bin/bench/line_round_trip 2>/dev/null | tail -1 | cut -f4) || before=-
  "$@"
  after=$(bazel-bin/bench/line_round_trip 2>/dev/null | tail -1 | cut -f4) || after=-
  printf '%s\t%s\t%s\n' "$label" "$before" "$after" >>"$file"
}

# ucx_perftest TEST BYTES FILE: a server and a client on a free port over
# shared memory, each bounded in time; the client's output goes to FILE.
perftest() {
  local port server tries=0
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  UCX_TLS=shm timeout 120 ucx_perftest -t "$1" -s "$2" -n 200000 -p "$port" >/dev/null 2>&1 &
  server=$!
  # Whatever way this returns, no server is left behind.
  trap 'kill "$server" 2>/dev/null || true; trap - RETURN' RETURN
  until UCX_TLS=shm timeout 120 ucx_perftest 127.0.0.1 -t "$1" -s "$2" -n 200000 -p "$port" \
      >"$3" 2>&1; do
    tries=$((tries + 1))
    if ! kill -0 "$server" 2>/dev/null || [ "$tries" -ge 50 ]; then
      echo "peers.sh: ucx_perftest $1 $2: no server answered on port $port" >&2
      return 1
    fi
    sleep 0.1  # the server is not listening yet: retry the connection
  done
  wait "$server"
}

for rep in $(seq 1 "$reps"); do
  dir="$out/rep$rep"
  mkdir -p "$dir"
  rm -f "$dir"/*.json "$dir"/*.txt "$dir"/*.tsv  # never a file of an earlier run
  echo "== repetition $rep of $reps" >&2
  placed pingpong_word "$dir/placement.tsv" \
    bazel-bin/bench/transport_pingpong --transport=ucx --params="tls=shm" --signal=flag \
    --reads=false --max_bytes=4096 --json="$dir/pingpong_word.json" >/dev/null
  bazel-bin/bench/transport_pingpong --transport=ucx --params="tls=shm" --read=inline \
    --writes=false --max_bytes=4096 --json="$dir/pingpong_read_inline.json" >/dev/null
  bazel-bin/bench/transport_pingpong --transport=ucx --params="tls=shm" --signal=flag_signalled \
    --reads=false --max_bytes=4096 --json="$dir/pingpong_word_signalled.json" >/dev/null
  bazel-bin/bench/transport_pingpong --transport=ucx --params="tls=shm" --signal=flag_unbound \
    --reads=false --max_bytes=4096 --json="$dir/pingpong_word_unbound.json" >/dev/null
  for notify in flag am; do
    bazel-bin/bench/transport_pingpong --transport=ucx --params="tls=shm,notify=$notify" \
      --max_bytes=4096 --json="$dir/pingpong_$notify.json" >/dev/null
  done
  for bytes in 8 4096; do
    placed "perftest_put_lat_$bytes" "$dir/placement.tsv" \
      perftest ucp_put_lat "$bytes" "$dir/perftest_put_lat_$bytes.txt"
    perftest ucp_get "$bytes" "$dir/perftest_get_$bytes.txt"
  done
  placed allreduce "$dir/placement.tsv" \
    bazel-bin/bench/allreduce_bench --ranks="$ranks" --impls=rdmaflow,gloo \
    --max_bytes="$max_bytes" --factor=16 \
    --json="$dir/allreduce.json" >/dev/null
  placed mpi "$dir/placement.tsv" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
    bazel-bin/bench/mpi_allreduce --max_bytes="$max_bytes" --factor=16 \
    --json="$dir/mpi.json" >/dev/null
  if [ "$load" -gt 0 ]; then
    placed allreduce_loaded "$dir/placement.tsv" \
      bazel-bin/bench/allreduce_bench --ranks="$ranks" --impls=rdmaflow \
      --max_bytes="$max_bytes" --factor=16 --load="$load" \
      --json="$dir/allreduce_loaded.json" >/dev/null
    placed mpi_loaded "$dir/placement.tsv" \
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
      bazel-bin/bench/mpi_allreduce --max_bytes="$max_bytes" --factor=16 \
      --load="$load" --json="$dir/mpi_loaded.json" >/dev/null
  fi
  rm -f "$dir"/torch_*.jsonl
  for n in $torch_ranks; do
    RDMAFLOW_SHARED_TENSORS=on placed "torch_shared_$n" "$dir/placement.tsv" \
      torch_allreduce "$n" "$dir/torch_shared_$n.jsonl" --bare --label shared
    RDMAFLOW_CMA=auto RDMAFLOW_CMA_MIN_KB=1024 torch_allreduce "$n" "$dir/torch_cma_$n.jsonl" \
      --bare --label cma
    RDMAFLOW_CMA=off torch_allreduce "$n" "$dir/torch_staged_$n.jsonl" --bare --label staged
    torch_allreduce "$n" "$dir/torch_registered_$n.jsonl" --registered --bare --label registered
  done
done
/usr/bin/python3 tools/peers_report.py "$out" "$reps"

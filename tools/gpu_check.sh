#!/usr/bin/env bash
# The device check: rdmaflow's GPU tests (and, as they land, its GPU
# benchmarks) on a machine with a GPU but none of rdmaflow's build
# dependencies, such as the H200 the project borrows (docs/device.md).
#
#   tools/gpu_check.sh pack        here: builds the binaries (-c opt, cudart
#                                  static) and packs them with the shared
#                                  libraries they need into .gpu/ (ignored
#                                  by git, a few tens of MiB)
#   tools/gpu_check.sh stale       here: whether .gpu/ was packed from the
#                                  checkout as it is, docs and tools/
#                                  aside (exit 0), or what changed since
#                                  (exit 1: pack again)
#   tools/gpu_check.sh run [OUT]   there, from the repository root with
#                                  .gpu/ carried along: runs every packed
#                                  test, its log under OUT (default
#                                  .gpu/out), and prints a table last
#
# The tests run on the GPU (RDMAFLOW_TEST_DEVICE=cuda where a test has a
# fake-device default). `run` then runs the benchmarks (bench/device_ipc_bench,
# bench/transport_pingpong --memory=device, bench/allreduce_bench
# --device=cuda, and their peers through
# PyTorch: tools/gpu_peers.py) and issue 44's baselines
# (tools/gpu_train_baselines.py), their JSON under OUT; then the seeds'
# training runs (rdmaflow_train --device cuda: the parameter server over
# three communicators and staged, the all-reduce with its parameters on
# the device and staged, layer separation, Moshpit with and without its
# background round, gossip and Moshpit against the all-reduce to a fixed
# accuracy; an untimed run first, and the EuroSys
# ratios of median and mean steps after the parameter server's); then
# builds the Python module for that machine's Python (tools/torch_module_for.sh, from the library and
# headers `pack` put in .gpu) and runs DDP and FSDP2 over rdmaflow and
# Gloo with CUDA tensors (tools/gpu_ddp_bench.py), and sends and receives
# of CUDA tensors device to device against staged and Gloo
# (tools/gpu_p2p_bench.py). docs/gpu.md has the figures.
#
# `run` keeps to a budget (GPU_CHECK_BUDGET_S, 540 s): each step's time
# limit is cut to what is left, and steps that would start with under 20 s
# left are skipped, so the table comes out inside the device's 10 minutes.
# GPU_CHECK_STEPS names the groups of steps to run, of tests,bench,train,ddp
# (all by default): the tests; the transport and all-reduce benchmarks,
# their peers and the baselines; the seeds' training runs; the Python
# module and DDP. GPU_CHECK_MPS=1 runs train and ddp under MPS.
#
# Run `pack`, then carry .gpu to the GPU machine and run `run` there in one
# command. Every binary also runs here: without a driver CUDA says
# cudaErrorInsufficientDriver and the GPU tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test binaries, by Bazel label.
TESTS=(
  //device:gpu_probe_test
  //device/cuda:cuda_device_test
  //device/cuda:cuda_device_conformance_test
  //tests:device_allreduce_multiprocess_test
  //tests:torch_backend_device_test
)

# The benchmarks, by Bazel label: run after the tests. Those that launch
# ranks link LibTorch (its TCPStore): LibTorch's libraries are not packed,
# and `run` takes them from the GPU machine's torch (the same 2.11).
BENCHES=(
  //bench:device_ipc_bench
  //bench:transport_pingpong
  //bench:allreduce_bench
  //train:rdmaflow_train
)
# Shared libraries left out of .gpu (the C runtime's own, whose newer
# version there must be the one used, LibTorch's, and the CUDA libraries
# LibTorch loads, which its wheel brings there).
NOT_PACKED='/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so|/torch/lib/|/(libcupti|libcudart|libnvrtc|libnccl|libstdc\+\+|libgcc_s)\.so'

pack() {
  # What is packed, said before the build reads the checkout: the commit,
  # and whether the files it is built from differed from it.
  local dirty="" stamp
  [ -z "$(git status --porcelain -- "${PACKED_FROM[@]}")" ] || dirty=" with uncommitted changes"
  stamp="$(git rev-parse --short HEAD)$dirty, $(date -u '+%Y-%m-%d %H:%M UTC')"
  # Our own libraries linked in: only system ones are packed beside.
  bazel build -c opt --dynamic_mode=off "${TESTS[@]}" "${BENCHES[@]}"
  rm -rf .gpu
  mkdir -p .gpu/bin .gpu/lib
  local label path
  for label in "${TESTS[@]}" "${BENCHES[@]}"; do
    path="bazel-bin/${label#//}"
    path="${path/://}"
    cp "$path" .gpu/bin/
  done
  # Without their symbols: what travels to the GPU machine is capped.
  chmod u+w .gpu/bin/*
  strip .gpu/bin/*
  # Every shared library the binaries load, but the C runtime's own (the
  # GPU machine's glibc is newer and must be the one used).
  ldd .gpu/bin/* | awk '/=> \// { print $3 }' | sort -u | grep -v -E "$NOT_PACKED" |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
  # UCX loads its transports as modules at run time (UCX_MODULE_DIR).
  local ucx_modules=/usr/lib/x86_64-linux-gnu/ucx
  if [ -d "$ucx_modules" ]; then
    mkdir -p .gpu/lib/ucx
    cp -L "$ucx_modules"/*.so* .gpu/lib/ucx/
    ldd .gpu/lib/ucx/*.so* | awk '/=> \// { print $3 }' | sort -u | grep -v -E "$NOT_PACKED" |
      while read -r lib; do [ -e ".gpu/lib/$(basename "$lib")" ] || cp -L "$lib" .gpu/lib/; done
  fi
  # The library and the headers the Python module is built from there, for
  # that machine's Python (tools/torch_module_for.sh): the GPU machine's
  # torch is the same release under Python 3.12.
  bazel run -c opt //:install -- --prefix="$PWD/.gpu/rdmaflow" >/dev/null
  ldd .gpu/rdmaflow/lib/librdmaflow.so | awk '/=> \// { print $3 }' | sort -u |
    grep -v -E "$NOT_PACKED" |
    while read -r lib; do [ -e ".gpu/lib/$(basename "$lib")" ] || cp -L "$lib" .gpu/lib/; done
  tar czf .gpu/include.tgz -C /usr/include absl google/protobuf
  # The C++ runtime the binaries were built with, for a machine whose own is
  # older (run() uses it only then: a newer one serves them, and a module
  # compiled there may need it).
  mkdir -p .gpu/lib-cxx
  cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$(g++ -print-file-name=libgcc_s.so.1)" .gpu/lib-cxx/
  echo "$stamp" >.gpu/PACKED
  du -sh .gpu | awk '{ print "packed .gpu: " $1 }'
  echo "packed from $(cat .gpu/PACKED)"
  ls .gpu/bin
}

# The files the packed binaries may be built from, as git pathspecs: all
# but the docs and tools/ (the check runs tools/ from the working tree it
# is carried with).
PACKED_FROM=(. ':!docs' ':!*.md' ':!tools')

# Whether .gpu holds the checkout as it is: exit 0 if it was packed from
# HEAD with nothing uncommitted and nothing has changed since; otherwise
# says what differs (in PACKED_FROM) and exits 1.
stale() {
  if [ ! -f .gpu/PACKED ]; then
    echo "no .gpu/PACKED: run tools/gpu_check.sh pack" >&2
    return 1
  fi
  local packed commit changed
  packed=$(cat .gpu/PACKED)
  commit=${packed%%[ ,]*}
  echo "packed from $packed"
  if [[ $packed == *"uncommitted"* ]]; then
    echo "packed with uncommitted changes: pack again" >&2
    return 1
  fi
  if ! git rev-parse -q --verify "$commit^{commit}" >/dev/null; then
    echo "commit $commit is not in this checkout: pack again" >&2
    return 1
  fi
  changed=$( (git diff --name-only "$commit" -- "${PACKED_FROM[@]}"
    git ls-files --others --exclude-standard -- "${PACKED_FROM[@]}") | sort -u)
  if [ -n "$changed" ]; then
    echo "changed since (pack again):" >&2
    sed 's/^/  /' <<<"$changed" >&2
    return 1
  fi
  echo "up to date with the checkout (docs and tools/ aside)"
}

# The Python module for the GPU machine's Python, under OUT/module; its
# log under OUT. Returns non-zero (and says why) where it cannot be built.
# Keeps to the run's budget (run_limited): returns $skipped where it had
# no time left to start.
build_module() {
  local out=$1 status=0
  rm -rf "$out/include" && mkdir -p "$out/include"
  tar xzf .gpu/include.tgz -C "$out/include"
  run_limited 240 tools/torch_module_for.sh --python python3 --prefix .gpu/rdmaflow \
    --include "$out/include" --out "$out/module" >"$out/module.log" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    cat "$out/module.log"
    return "$status"
  fi
  PYTHONPATH="$out/module" run_limited 60 python3 -c 'import torch, rdmaflow_torch; print("rdmaflow_torch", rdmaflow_torch.__version__, "for torch", torch.__version__)'
}

# Runs `cmd...` under a time limit of SECONDS or what is left of the run's
# budget (GPU_CHECK_BUDGET_S, 540 s by default: the device runs one command
# for 10 minutes at most, and the table must come out before), whichever is
# less; refuses to start it with under 20 s left, returning $skipped.
skipped=200
run_limited() {
  local want=$1 left
  shift
  left=$((budget_end - $(date +%s) - 10))
  if ((left < 20)); then
    echo "skipped, out of the run's budget: $*" >&2
    return $skipped
  fi
  timeout -k 10 $((want < left ? want : left)) "$@"
}

# outcome STATUS: "passed", "skipped" (run_limited refused to start it) or
# "FAILED", for a step's exit status.
outcome() {
  case $1 in
    0) echo passed ;;
    "$skipped") echo skipped ;;
    *) echo FAILED ;;
  esac
}

# What run() sets for the steps: OUT, the table's rows, LibTorch's folder
# (empty without torch), the label of runs under MPS, whether MPS runs.
out=.gpu/out
rows=()
torch_lib=""
mps_label=""
mps_running=0

# add_row ROW: a row of the table, also appended to OUT/table.txt as it
# comes (a run stopped at the device's time limit keeps what it got).
add_row() {
  rows+=("$1")
  printf '%s\n' "$1" >>"$out/table.txt"
}

# step GROUP: whether GPU_CHECK_STEPS names GROUP.
step() {
  [[ ",${GPU_CHECK_STEPS:-tests,bench,train,ddp}," == *",$1,"* ]]
}

# mps_start / mps_stop: MPS's control daemon, under which two processes'
# kernels and copies run side by side rather than in turns (a switch
# between them costs about 150 us): what two processes on two GPUs see.
# mps_start fails where MPS is not there.
mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null || return 1
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    mps_running=1
    return 0
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  return 1
}
# Stops the daemon and waits (5 s at most) until it is gone, so that a
# start right after does not find it leaving.
mps_stop() {
  [ "$mps_running" = 1 ] || return 0
  echo quit | nvidia-cuda-mps-control || true
  local i
  for ((i = 0; i < 50; ++i)); do
    pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1 || break
    sleep 0.1
  done
  mps_running=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap mps_stop EXIT

# The packed tests, on the GPU.
run_tests() {
  local test name status start seconds summary
  for test in .gpu/bin/*_test; do
    name=$(basename "$test")
    echo "== $name"
    start=$(date +%s%N)
    status=0
    run_limited 240 "$test" >"$out/$name.log" 2>&1 || status=$?
    status=$(outcome "$status")
    seconds=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { print (b - a) / 1e9 }')
    summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/$name.log" |
      sed -e 's/\[ *//' -e 's/ *\]//' -e 's/, listed below://' | tr '\n' ' ' || true)
    tail -5 "$out/$name.log"
    add_row "$(printf '%-36s %-7s %7.1f s  %s' "$name" "$status" "$seconds" "$summary")"
  done
}

# The device write/read ping-pong to 1 GiB, as `$1` (its JSON and log).
pingpong_device() {
  echo "== transport_pingpong --memory=device ($1)"
  run_limited 300 .gpu/bin/transport_pingpong \
    --params=tls=shm --memory=device --device=cuda --max_bytes=$((1 << 30)) \
    --json "$out/$1.json" 2>&1 | tee "$out/$1.log" || add_row "transport_pingpong $1 $(outcome $?)"
}

# The transport and all-reduce benchmarks, their peers through PyTorch, and
# issue 44's baselines.
run_bench() {
  local algorithm
  for algorithm in split leader; do
    echo "== device_ipc_bench --algorithm=$algorithm"
    run_limited 120 .gpu/bin/device_ipc_bench --algorithm=$algorithm --json "$out/device_ipc_$algorithm.json" 2>&1 |
      tee "$out/device_ipc_$algorithm.log" || add_row "device_ipc_bench $algorithm $(outcome $?)"
  done
  if [ -n "$torch_lib" ]; then pingpong_device pingpong_device; fi
  # The split all-reduce, the write ping-pong and the device all-reduce
  # again under MPS.
  if mps_start; then
    echo "== device_ipc_bench --algorithm=split under MPS"
    run_limited 120 .gpu/bin/device_ipc_bench --algorithm=split --json "$out/device_ipc_mps.json" 2>&1 |
      tee "$out/device_ipc_mps.log" || add_row "device_ipc_bench under MPS $(outcome $?)"
    if [ -n "$torch_lib" ]; then
      pingpong_device pingpong_device_mps
      echo "== allreduce_bench --device=cuda under MPS"
      run_limited 300 .gpu/bin/allreduce_bench --ranks=2 --params=tls=shm --device=cuda \
        --impls=rdmaflow --min_bytes=$((4 << 10)) --max_bytes=$((256 << 20)) --max_iters=100 \
        --byte_budget=$((8 << 30)) --json "$out/allreduce_device_mps.json" 2>&1 |
        tee "$out/allreduce_device_mps.log" || add_row "allreduce_bench under MPS $(outcome $?)"
    fi
    mps_stop
  fi
  [ -n "$torch_lib" ] || return 0
  echo "== transport_pingpong --memory=device --device_path=staged"
  run_limited 300 .gpu/bin/transport_pingpong \
    --params=tls=shm --memory=device --device=cuda --device_path=staged \
    --max_bytes=$((256 << 20)) --byte_budget=$((1 << 30)) \
    --json "$out/pingpong_staged.json" 2>&1 | tee "$out/pingpong_staged.log" ||
    add_row "transport_pingpong --device_path=staged $(outcome $?)"
  echo "== allreduce_bench --device=cuda"
  run_limited 300 .gpu/bin/allreduce_bench --ranks=2 --params=tls=shm --device=cuda \
    --impls=rdmaflow,rdmaflow-device-ring,gloo --min_bytes=$((4 << 10)) --max_bytes=$((256 << 20)) \
    --json "$out/allreduce_device.json" 2>&1 | tee "$out/allreduce_device.log" ||
    add_row "allreduce_bench --device=cuda $(outcome $?)"
  echo "== gpu_peers.py"
  PYTHONUNBUFFERED=1 run_limited 300 python3 tools/gpu_peers.py --json "$out/gpu_peers.json" 2>&1 |
    tee "$out/gpu_peers.log" || add_row "gpu_peers.py $(outcome $?)"
  echo "== gpu_train_baselines.py"
  PYTHONUNBUFFERED=1 run_limited 300 python3 tools/gpu_train_baselines.py \
    --json "$out/train_baselines.json" 2>&1 | tee "$out/train_baselines.log" ||
    add_row "gpu_train_baselines.py $(outcome $?)"
}

# train_run NAME JSON LOG ARGS...: one rdmaflow_train run; its row in the
# table has its mean and median step times (and with --device, where a
# worker's staged step went), or says that it failed (its log's end shown).
train_run() {
  local name=$1 json=$2 log=$3 status=0
  shift 3
  rm -f "$json"  # a failed run leaves none for the ratios to read
  run_limited 240 .gpu/bin/rdmaflow_train "$@" --json "$json" >"$log" 2>&1 || status=$?
  if [ "$status" = 0 ]; then
    add_row "$(printf '%-36s %s' "$name$mps_label" "$(grep -o -E '"((mean|median)_step|device_(in|compute|out))_ms": [0-9.]*|"device_resident": [a-z]*' "$json" | tr '\n' ' ')")"
  else
    tail -5 "$log"
    add_row "$(printf '%-36s %s' "$name$mps_label" "$(outcome "$status")")"
  fi
}

# The seeds' training runs on 3 ranks of the VGG-like net, workers on the
# GPU (synthetic data: the dataset is not there).
run_train() {
  # A first run reads CUDA's and cuDNN's libraries from disk: untimed, so
  # that the measured runs all start with them in the page cache.
  echo "== rdmaflow_train warm-up (untimed)"
  run_limited 120 .gpu/bin/rdmaflow_train --local 2 --model vgg --strategy allreduce \
    --synthetic --device cuda --steps 3 --progress=false --transport_params tls=shm \
    >"$out/warmup.log" 2>&1 || tail -5 "$out/warmup.log"
  # EuroSys: the parameter server's step over zero copy (its shards, pulls
  # and pushes in device memory), rdma_copy and gRPC (pull=send, staged
  # through host memory), and zero copy staged as they are (the ablation).
  local comm overlap
  for comm in rdma rdma_copy grpc rdma_staged; do
    echo "== rdmaflow_train ps vgg --device cuda --communicator $comm$mps_label"
    train_run "ps vgg cuda $comm" "$out/ps_vgg_$comm.json" "$out/ps_vgg_$comm.log" \
      --local 3 --model vgg --strategy ps --synthetic --device cuda \
      --communicator "${comm%_staged}" --steps 60 --progress=false --transport_params tls=shm \
      $([ "$comm" = rdma_staged ] && echo --stage_device_parameters)
  done
  # The ratios, of the median steps (the means carry each process's
  # warm-up) and of the means.
  local ratios line
  ratios=$(python3 - "$out" <<'PY'
import json, sys
try:
    runs = {c: json.load(open(f"{sys.argv[1]}/ps_vgg_{c}.json"))
            for c in ("rdma", "rdma_copy", "grpc", "rdma_staged")}
except (OSError, ValueError):
    sys.exit(0)
for key in ("median_step_ms", "mean_step_ms"):
    z = runs["rdma"][key]
    print(f"ps zero copy, {key}: {runs['grpc'][key] / z:.2f}x grpc, "
          f"{runs['rdma_copy'][key] / z:.2f}x rdma_copy, {runs['rdma_staged'][key] / z:.2f}x staged")
PY
  ) || true
  while read -r line; do [ -z "$line" ] || add_row "$line$mps_label"; done <<<"$ratios"
  # The all-reduce with its parameters and gradients on the device against
  # the same run staged through host memory each step (the ablation).
  local staging
  for staging in resident staged; do
    echo "== rdmaflow_train allreduce vgg --device cuda ($staging)$mps_label"
    train_run "allreduce vgg cuda $staging" "$out/ar_vgg_$staging.json" "$out/ar_vgg_$staging.log" \
      --local 3 --model vgg --strategy allreduce --synthetic --device cuda --steps 60 \
      --progress=false --transport_params tls=shm \
      $([ "$staging" = staged ] && echo --stage_device_parameters)
  done
  # Issue 48's overlap on the GPU (the resident run above is overlap=on):
  # without it, and with the head's later buckets during the next forward.
  for overlap in off forward; do
    echo "== rdmaflow_train allreduce vgg --device cuda overlap=$overlap$mps_label"
    train_run "allreduce vgg cuda overlap=$overlap" "$out/ar_vgg_$overlap.json" \
      "$out/ar_vgg_$overlap.log" --local 3 --model vgg --strategy allreduce --synthetic \
      --device cuda --steps 60 --progress=false --transport_params tls=shm \
      --strategy_params "overlap=$overlap"
  done
  # The same sums in every setting: the same final loss (a stream-ordering
  # bug on the device would show here first).
  local same
  same=$(python3 - "$out" <<'PY'
import json, sys
try:
    runs = {o: json.load(open(f"{sys.argv[1]}/ar_vgg_{o}.json"))
            for o in ("resident", "off", "forward")}
except (OSError, ValueError):
    sys.exit(0)
on = runs["resident"]["final_loss"]
worst = max(abs(runs[o]["final_loss"] - on) for o in ("off", "forward"))
print(f"allreduce overlap off/on/forward final loss: "
      + ", ".join(f"{runs[o]['final_loss']:.5f}" for o in ("off", "resident", "forward"))
      + (" (same)" if worst <= 1e-4 else f" (DIFFER by {worst:.2g})"))
PY
  ) || true
  [ -z "$same" ] || add_row "$same$mps_label"
  # Stanza: layer separation against the parameter server above, same model
  # and ranks (2 conv ranks and 1 FC rank, its halves on the GPU), without
  # and with Stanza's pipeline.
  for overlap in off on; do
    echo "== rdmaflow_train layer_separated vgg --device cuda overlap=$overlap$mps_label"
    train_run "layer_separated vgg cuda overlap=$overlap" "$out/ls_vgg_$overlap.json" \
      "$out/ls_vgg_$overlap.log" --local 3 --model vgg --strategy layer_separated \
      --strategy_params "fc_ranks=1,overlap=$overlap" --synthetic --device cuda --steps 60 \
      --progress=false --transport_params tls=shm
  done
  # The activations and their gradients through host memory, the
  # parameters still on the device: what their device slots save.
  echo "== rdmaflow_train layer_separated vgg --device cuda activations=host$mps_label"
  train_run "layer_separated vgg cuda activations=host" "$out/ls_vgg_host_act.json" \
    "$out/ls_vgg_host_act.log" --local 3 --model vgg --strategy layer_separated \
    --strategy_params "fc_ranks=1,activations=host" --synthetic --device cuda --steps 60 \
    --progress=false --transport_params tls=shm
  # Staged, against the parameter server staged: like for like too.
  echo "== rdmaflow_train layer_separated vgg --device cuda staged$mps_label"
  train_run "layer_separated vgg cuda staged" "$out/ls_vgg_staged.json" "$out/ls_vgg_staged.log" \
    --local 3 --model vgg --strategy layer_separated --strategy_params "fc_ranks=1" \
    --synthetic --device cuda --steps 60 --progress=false --transport_params tls=shm \
    --stage_device_parameters
  # Moshpit's background round (overlap=on, on a stream of its own) against
  # its rounds between the steps, 4 ranks.
  for overlap in off on; do
    echo "== rdmaflow_train moshpit vgg --device cuda overlap=$overlap$mps_label"
    train_run "moshpit vgg cuda overlap=$overlap" "$out/moshpit_vgg_$overlap.json" \
      "$out/moshpit_vgg_$overlap.log" --local 4 --model vgg --strategy moshpit \
      --strategy_params "overlap=$overlap" --synthetic --device cuda --steps 60 \
      --progress=false --transport_params tls=shm
  done
  # Gossip and Moshpit against the all-reduce: the time to a fixed accuracy,
  # 4 ranks of the VGG-like net on the GPU (synthetic data).
  echo "== bench_decentralized.sh, vgg --device cuda$mps_label"
  local status=0 line
  TRAIN=.gpu/bin/rdmaflow_train MODEL=vgg SCENARIOS=homogeneous STEPS=200 TARGET=0.95 \
    STRATEGIES="allreduce gossip moshpit" EXTRA="--device cuda --synthetic --transport_params tls=shm" \
    run_limited 240 tools/bench_decentralized.sh "$out/decentralized" >"$out/decentralized.log" 2>&1 ||
    status=$?
  tail -6 "$out/decentralized.log"
  if [ "$status" != 0 ]; then
    add_row "bench_decentralized.sh$mps_label $(outcome "$status")"
    # Stopped at its limit: the report of the runs that finished.
    python3 tools/decentralized_report.py "$out/decentralized" 0.95 homogeneous \
      "allreduce gossip moshpit" 1 "vgg on synthetic data, on the GPU" \
      >"$out/decentralized/report.txt" 2>&1 || true
  fi
  while read -r line; do add_row "time to 0.95, $line$mps_label"; done \
    < <(grep '^homogeneous' "$out/decentralized/report.txt" 2>/dev/null || true)
}

# The Python module for this machine's Python, then DDP over rdmaflow and
# Gloo with CUDA tensors.
run_ddp() {
  echo "== the Python module for this machine's Python"
  local status=0
  build_module "$out" || status=$?
  if [ "$status" != 0 ]; then
    add_row "rdmaflow_torch module build $(outcome "$status")"
    return 0
  fi
  add_row "rdmaflow_torch module built"
  echo "== gpu_ddp_bench.py (DDP over rdmaflow and Gloo, CUDA tensors)$mps_label"
  PYTHONPATH="$out/module" PYTHONUNBUFFERED=1 run_limited 420 python3 tools/gpu_ddp_bench.py \
    --device cuda --json "$out/ddp.json" 2>&1 | tee "$out/ddp.log" ||
    add_row "gpu_ddp_bench.py$mps_label $(outcome $?)"
  # With no copies of the gradients at all: DDP's gradient_as_bucket_view
  # and rdmaflow's hook (its buckets in the device pool, reduced in place),
  # the ResNet over both backends (Gloo with the bucket views only).
  echo "== gpu_ddp_bench.py --bucket_view --hook (ResNet-18-like)$mps_label"
  PYTHONPATH="$out/module" PYTHONUNBUFFERED=1 run_limited 100 python3 tools/gpu_ddp_bench.py \
    --device cuda --models resnet18 --bucket_view --hook --json "$out/ddp_bucket_view.json" 2>&1 |
    tee "$out/ddp_bucket_view.log" ||
    add_row "gpu_ddp_bench.py --bucket_view --hook$mps_label $(outcome $?)"
  # Sends and receives of CUDA tensors (pipeline parallelism's traffic):
  # device to device through CUDA IPC, against rdmaflow staged and Gloo.
  echo "== gpu_p2p_bench.py (send/recv of CUDA tensors)$mps_label"
  PYTHONPATH="$out/module" PYTHONUNBUFFERED=1 run_limited 120 python3 tools/gpu_p2p_bench.py \
    --device cuda --json "$out/p2p.json" 2>&1 | tee "$out/p2p.log" ||
    add_row "gpu_p2p_bench.py$mps_label $(outcome $?)"
  while read -r line; do add_row "p2p $line$mps_label"; done \
    < <(grep -E '^ +[0-9]+ rdmaflow ' "$out/p2p.log" 2>/dev/null || true)
  # Under torch's expandable segments (memory CUDA IPC cannot export):
  # the sends carry their bytes inline (device_p2p_inline), not a handle.
  echo "== gpu_p2p_bench.py under expandable_segments$mps_label"
  local p2p_status=0
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH="$out/module" PYTHONUNBUFFERED=1 \
    run_limited 60 python3 tools/gpu_p2p_bench.py --device cuda --sizes 64K,4M,64M --iters 10 \
    --warmup 2 --backends rdmaflow --expect_inline --json "$out/p2p_expandable.json" 2>&1 |
    tee "$out/p2p_expandable.log" || p2p_status=$?
  add_row "$(printf '%-36s %-7s %s' "p2p, expandable segments$mps_label" "$(outcome "$p2p_status")" \
    "$(grep -o -E 'device_p2p_(ipc|inline) [0-9]+' "$out/p2p_expandable.log" 2>/dev/null | tr '\n' ' ')")"
  # The ResNet's parameters on both backends, to the bit: cuDNN's
  # deterministic algorithms (its default ones are not).
  echo "== gpu_ddp_bench.py --deterministic (ResNet-18-like)$mps_label"
  PYTHONPATH="$out/module" PYTHONUNBUFFERED=1 run_limited 150 python3 tools/gpu_ddp_bench.py \
    --device cuda --models resnet18 --steps 10 --deterministic --json "$out/ddp_deterministic.json" \
    2>&1 | tee "$out/ddp_deterministic.log" ||
    add_row "gpu_ddp_bench.py --deterministic$mps_label $(outcome $?)"
}

run() {
  out=${1:-.gpu/out}
  rows=()
  local unknown
  unknown=$(tr ',' '\n' <<<"${GPU_CHECK_STEPS:-tests,bench,train,ddp}" | grep -v -x -E 'tests|bench|train|ddp' || true)
  if [ -n "$unknown" ]; then
    echo "GPU_CHECK_STEPS: unknown group(s): $unknown (the groups: tests,bench,train,ddp)" >&2
    return 2
  fi
  budget_end=$(($(date +%s) + ${GPU_CHECK_BUDGET_S:-540}))
  mkdir -p "$out"
  : >"$out/table.txt"
  export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local system_cxx
  # (awk leaves at its first match: ldconfig may die of SIGPIPE, which
  # pipefail would make this script's end.)
  system_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }' || true)
  if [ -z "$system_cxx" ] || ! grep -q GLIBCXX_3.4.30 "$system_cxx"; then
    echo "the system's libstdc++ (${system_cxx:-none}) is older than the build's: using .gpu/lib-cxx"
    export LD_LIBRARY_PATH="$PWD/.gpu/lib-cxx:$LD_LIBRARY_PATH"
  fi
  export UCX_MODULE_DIR="$PWD/.gpu/lib/ucx"
  [ ! -f .gpu/PACKED ] || add_row "binaries packed from $(cat .gpu/PACKED)"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  # LibTorch from the GPU machine's torch, after ours.
  torch_lib=""
  if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$torch_lib"
    echo "LibTorch from $torch_lib"
  fi
  export RDMAFLOW_TEST_DEVICE=cuda
  step tests && run_tests
  step bench && run_bench
  if [ -n "$torch_lib" ] && { step train || step ddp; }; then
    if [ "${GPU_CHECK_MPS:-0}" = 1 ]; then
      if mps_start; then mps_label=" (MPS)"; else add_row "MPS asked for, not started"; fi
    fi
    step train && run_train
    step ddp && run_ddp
    [ -z "$mps_label" ] || mps_stop
  fi
  echo
  printf '%-36s %-7s %9s  %s\n' test result time gtest
  printf '%s\n' "${rows[@]}"
}

case "${1:-}" in
  pack) pack ;;
  stale) stale ;;
  run) shift; run "$@" ;;
  -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
  *) sed -n '2,/^[^#]/{/^#/p}' "$0" >&2; exit 2 ;;
esac

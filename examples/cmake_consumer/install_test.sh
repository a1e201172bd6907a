#!/usr/bin/env bash
# rdmaflow from outside Bazel (docs/using_rdmaflow.md):
#   1. //:install puts the library, headers, rdmaflow.pc and the CMake
#      package under a scratch prefix;
#   2. pkg-config: g++ builds the README's example (examples/write_notify.cc)
#      with `pkg-config --cflags --libs rdmaflow`, and two ranks run it;
#   3. CMake: find_package(Torch) + find_package(rdmaflow) build
#      c10d_train_loop, and two ranks train with the c10d backend;
#   4. tools/torch_module_for.sh builds the Python module against the
#      installed library (as on the GPU machine, for its Python): it exports
#      its PyInit alone and loads libstdc++.so.6, and two ranks all-reduce
#      through it under torchrun;
#   5. --uninstall removes every installed file.
# Ranks run under plain torchrun (of the build's torch, $RDMAFLOW_PYTHON)
# over UCX shared memory; CMake finds that torch's package
# (torch.utils.cmake_prefix_path).
set -euo pipefail
tmp="${TEST_TMPDIR:?}"
prefix="$tmp/prefix"
install_script="$PWD/install"

"$install_script" --help | grep -q -- "--prefix DIR"
if "$install_script" --bogus 2>/dev/null; then
  echo "install_test: an unknown argument was accepted" >&2
  exit 1
fi
"$install_script" --prefix "$prefix"
for f in lib/librdmaflow.so include/rdmaflow/rdma/transport.h \
         include/rdmaflow/torch_backend/process_group_rdmaflow.h \
         include/rdmaflow/graph_analyzer/plan.pb.h lib/pkgconfig/rdmaflow.pc \
         lib/cmake/rdmaflow/rdmaflowConfig.cmake lib/cmake/rdmaflow/rdmaflowConfigVersion.cmake; do
  test -f "$prefix/$f" || { echo "install_test: $f was not installed" >&2; exit 1; }
done
# No test-only code and nothing private to the build in the library.
# (grep reads a variable, not a pipe: with pipefail, nm's SIGPIPE after an
# early match would hide it.)
symbols=$(nm -DC --defined-only "$prefix/lib/librdmaflow.so")
test -n "$symbols" || { echo "install_test: librdmaflow.so exports no symbols" >&2; exit 1; }
if grep -q "testing::Test" <<<"$symbols"; then
  echo "install_test: librdmaflow.so holds gtest code" >&2
  exit 1
fi

run_two_ranks() {  # <out file> <program> [args]: two ranks under torchrun
  local out=$1; shift
  # TMPDIR: torchrun leaves its log folder (torchelastic_*) there.
  TMPDIR="$tmp" RDMAFLOW_TRANSPORT_PARAMS=tls=shm UCX_TLS=shm,self timeout -k 20 240 \
    "$RDMAFLOW_PYTHON" -m torch.distributed.run --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \
    --rdzv_id="install-test-$$-$RANDOM" --nnodes=1 --nproc_per_node=2 \
    --redirects 1 --tee 1 --no_python "$@" 2>&1 | tee "$out"
}

# pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists --print-errors rdmaflow
timeout -k 20 300 g++ -O1 -o "$tmp/write_notify" examples/write_notify.cc $(pkg-config --cflags --libs rdmaflow)
run_two_ranks "$tmp/write_notify.out" "$tmp/write_notify"
grep -q 'notification 7 from rank 0, first byte 42' "$tmp/write_notify.out" || {
  echo "install_test: write_notify built with pkg-config did not deliver the write" >&2
  exit 1
}

# CMake, with LibTorch's package found beside ours.
torch_cmake=$("$RDMAFLOW_PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
timeout -k 20 300 cmake -S examples/cmake_consumer -B "$tmp/build" \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_cmake" \
  -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
timeout -k 20 600 cmake --build "$tmp/build" > "$tmp/cmake_build.log" 2>&1 ||
  { cat "$tmp/cmake_build.log"; exit 1; }
run_two_ranks "$tmp/train.out" "$tmp/build/c10d_train_loop" 100
# Two ranks share one stdout: lines can run together, so count matches.
test "$(grep -o 'parameters identical on every rank' "$tmp/train.out" | wc -l)" = 2 || {
  echo "install_test: c10d_train_loop did not pass on both ranks" >&2
  exit 1
}
# A version rdmaflow does not provide is refused.
mkdir -p "$tmp/version_probe"
cat > "$tmp/version_probe/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(version_probe LANGUAGES CXX)
find_package(rdmaflow 2.0 CONFIG REQUIRED)
CMAKE
if timeout -k 20 300 cmake -S "$tmp/version_probe" -B "$tmp/version_probe/build" \
    -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/version_probe.log" 2>&1; then
  echo "install_test: find_package(rdmaflow 2.0) was accepted" >&2
  exit 1
fi
grep -q 'compatible with requested version' "$tmp/version_probe.log" || {
  cat "$tmp/version_probe.log"
  echo "install_test: find_package(rdmaflow 2.0) failed for another reason than the version" >&2
  exit 1
}

# The Python module against the installed library.
tools/torch_module_for.sh --python "$RDMAFLOW_PYTHON" --prefix "$prefix" --out "$tmp/module" \
  > "$tmp/module.log" 2>&1 || { cat "$tmp/module.log"; exit 1; }
# The module exports its PyInit alone and needs the shared C++ runtime: a
# copy of the runtime inside it served librdmaflow.so's calls too (the GPU
# machine's compiler, with no libstdc++.so link, linked the static one).
exports=$(nm -D --defined-only "$tmp/module/rdmaflow_torch.so" | awk '{ print $NF }')
if [ "$exports" != PyInit_rdmaflow_torch ]; then
  echo "the module exports more than PyInit_rdmaflow_torch: $(head -5 <<<"$exports")"
  exit 1
fi
readelf -d "$tmp/module/rdmaflow_torch.so" | grep -q 'NEEDED.*\[libstdc++\.so\.6\]' ||
  { echo "the module does not load libstdc++.so.6"; exit 1; }
cat > "$tmp/module_check.py" <<'PY'
import torch, torch.distributed as dist, rdmaflow_torch
dist.init_process_group("rdmaflow")
t = torch.ones(1000) * (dist.get_rank() + 1)
dist.all_reduce(t)
assert t.eq(3).all(), t[:4]
assert rdmaflow_torch.stats(dist.group.WORLD)["allreduces"] == 1
print("module all-reduce ok")
dist.destroy_process_group()
PY
PYTHONPATH="$tmp/module" run_two_ranks "$tmp/module.out" "$RDMAFLOW_PYTHON" "$tmp/module_check.py"
test "$(grep -o 'module all-reduce ok' "$tmp/module.out" | wc -l)" = 2 || {
  echo "install_test: the module built against the installed library did not all-reduce" >&2
  exit 1
}

"$install_script" --prefix "$prefix" --uninstall
left=$(find "$prefix" -type f | wc -l)
test "$left" = 0 || { echo "install_test: $left files left after --uninstall" >&2; find "$prefix" -type f >&2; exit 1; }
echo "install_test: passed"

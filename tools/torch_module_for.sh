#!/usr/bin/env bash
# Builds the Python module rdmaflow_torch for another Python than the
# build's (docs/torch.md, "A module for another Python"): the two binding
# files compiled with the system C++ compiler against that interpreter's
# headers and torch, and linked with an installed librdmaflow.so
# (`bazel run -c opt //:install -- --prefix=DIR`). For a machine without
# rdmaflow's build, such as the GPU machine, whose torch lives under
# another Python (tools/gpu_check.sh packs what this needs).
#
#   tools/torch_module_for.sh --python PY --prefix DIR [--include DIR] --out DIR
#
#   --python   the interpreter whose torch the module is for (it must be
#              the release librdmaflow.so was built against)
#   --prefix   the installed rdmaflow (lib/librdmaflow.so, include/rdmaflow)
#   --include  where Abseil's and Protobuf's headers are, if not in the
#              compiler's own search path (absl/, google/protobuf/)
#   --out      the folder that gets rdmaflow_torch.so (put it on PYTHONPATH)
#
# Exits 2, saying what is missing, when the interpreter has no torch or no
# C headers (Python.h).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."

python="" prefix="" include="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --include) include=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "torch_module_for: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
if [ -z "$python" ] || [ -z "$prefix" ] || [ -z "$out" ]; then
  echo "torch_module_for: --python, --prefix and --out are needed (--help)" >&2
  exit 2
fi
if [ ! -f "$prefix/lib/librdmaflow.so" ]; then
  echo "torch_module_for: no $prefix/lib/librdmaflow.so (bazel run -c opt //:install -- --prefix=DIR)" >&2
  exit 2
fi
# One line (the last: importing torch may print warnings): torch's folder
# and release, the C++ ABI, the C headers.
errors=$(mktemp)
if ! info=$("$python" -c '
import os, sysconfig, torch
print(os.path.dirname(torch.__file__), torch.__version__,
      int(torch.compiled_with_cxx11_abi()), sysconfig.get_paths()["include"])' 2>"$errors"); then
  echo "torch_module_for: $python has no torch: $(tail -3 "$errors")" >&2
  rm -f "$errors"
  exit 2
fi
rm -f "$errors"
read -r torch_dir torch_version abi python_include <<<"$(tail -1 <<<"$info")"
if [ ! -f "$python_include/Python.h" ]; then
  echo "torch_module_for: $python has no C headers ($python_include/Python.h is missing)" >&2
  exit 2
fi
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Only the header folders LibTorch's own headers need: torch's include/
# also carries an old Protobuf that would shadow the one rdmaflow uses.
mkdir -p "$work/torch_include"
for folder in ATen c10 caffe2 pybind11 torch; do
  ln -s "$torch_dir/include/$folder" "$work/torch_include/$folder"
done
# The module's Python files as C++ string literals (as the Bazel build's
# genrules make them).
mkdir -p "$work/gen/torch_backend/python"
for script in fx_export ddp_hook hooks; do
  { echo 'R"rdmaflow_py('; cat "torch_backend/python/$script.py"; echo ')rdmaflow_py"'; } \
    >"$work/gen/torch_backend/python/$script.inc"
done
# The module exports its PyInit alone, and links the C++ runtime's shared
# library by name: a compiler with no libstdc++.so link beside it (the GPU
# machine's) links the static libstdc++.a instead, and the module's copy of
# the runtime then served librdmaflow.so's calls too (a std::locale made by
# one copy and freed by the other: "free(): invalid pointer").
echo '{ global: PyInit_rdmaflow_torch; local: *; };' >"$work/exports.map"
version=$(sed -n 's/^RDMAFLOW_VERSION = "\(.*\)"/\1/p' bazel/version.bzl)
echo "torch_module_for: rdmaflow_torch $version for torch $torch_version ($python)"
"${CXX:-g++}" -O2 -shared -fPIC -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" \
  -DRDMAFLOW_VERSION="\"$version\"" -DRDMAFLOW_TORCH_VERSION="\"$torch_version\"" \
  -I"$prefix/include/rdmaflow" -I. -I"$work/gen" ${include:+-I"$include"} \
  -I"$work/torch_include" -I"$torch_dir/include/torch/csrc/api/include" -I"$python_include" \
  torch_backend/python/rdmaflow_torch_module.cc torch_backend/python/codec_binding.cc \
  -L"$prefix/lib" -lrdmaflow -L"$torch_dir/lib" -ltorch_python -ltorch_cpu -lc10 \
  -l:libstdc++.so.6 -Wl,--version-script="$work/exports.map" \
  -Wl,-rpath,"$(cd "$prefix/lib" && pwd):$torch_dir/lib" -o "$out/rdmaflow_torch.so"
echo "torch_module_for: wrote $out/rdmaflow_torch.so"

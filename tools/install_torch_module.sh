#!/usr/bin/env bash
# Installs the rdmaflow c10d backend's Python module (rdmaflow_torch.so,
# built with -c opt) into a Python with torch, so that any script it runs,
# or plain torchrun, can `import rdmaflow_torch` and then
# init_process_group("rdmaflow"), with no wrapper and no PYTHONPATH.
#   tools/install_torch_module.sh [--python PYTHON] [--prefix DIR] [--uninstall]
#     --python PYTHON  install for this interpreter (default: the one the
#                      module is built for, tools/torch_python.sh: .venv or
#                      $RDMAFLOW_PYTHON); its torch must be the build's
#     --prefix DIR     install into DIR instead of PYTHON's first
#                      site-packages folder
#     --uninstall      remove it again
# The module is one self-contained file: it links rdmaflow statically and
# needs only torch's and Debian's libraries (UCX, ...). Re-run after a
# rebuild; a module older than the sources is not detected.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=""
python=""
uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --python) python=${2:?--python needs an interpreter}; shift 2 ;;
    --python=*) python=${1#--python=}; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install_torch_module: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$python" ]; then
  python=$("$root/tools/torch_python.sh") || exit 1
fi
if [ -z "$prefix" ]; then
  prefix=$("$python" -c 'import site; print(site.getsitepackages()[0])') || {
    echo "install_torch_module: cannot ask $python for its site-packages folder" >&2
    exit 1
  }
fi
if [ "$uninstall" = 1 ]; then
  rm -f "$prefix/rdmaflow_torch.so"
  echo "install_torch_module: removed $prefix/rdmaflow_torch.so"
  exit 0
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "install_torch_module: $python cannot import torch; give the Python" \
       "whose torch rdmaflow was built against (tools/torch_python.sh prints it)" >&2
  exit 1
fi
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"  # Python's path entries are absolute
target="$prefix/rdmaflow_torch.so"
module="${RDMAFLOW_TORCH_MODULE:-}"
if [ -z "$module" ]; then
  (cd "$root" && bazel build -c opt //torch_backend/python:rdmaflow_torch.so >/dev/null 2>&1) || {
    echo "install_torch_module: the build failed; run" \
         "'bazel build -c opt //torch_backend/python:rdmaflow_torch.so' to see why" >&2
    exit 1
  }
  module="$root/bazel-bin/torch_backend/python/rdmaflow_torch.so"
fi
install -m 0644 "$module" "$target.tmp"
mv -f "$target.tmp" "$target"
# Prove it: the module imports from there and registers the backend.
PYTHONPATH="$prefix" "$python" -c '
import sys, torch.distributed as dist, rdmaflow_torch
assert rdmaflow_torch.__file__.startswith(sys.argv[1]), rdmaflow_torch.__file__
dist.Backend("rdmaflow")  # ValueError unless registered
' "$prefix"
echo "install_torch_module: installed $target (import rdmaflow_torch; backend \"rdmaflow\")"

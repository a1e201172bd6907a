#!/usr/bin/env bash
# Makes the project's Python virtual environment with PyTorch 2.x from PyPI
# (pinned below), for building rdmaflow against it:
#
#   tools/torch_venv.sh                      # .venv/ (ignored by git)
#   RDMAFLOW_PYTHON=$PWD/.venv/bin/python bazel build //torch_backend/...
#
# Idempotent: an environment that already imports the pinned torch is left
# alone (no network then). Installs only what `import torch` needs on a
# CPU-only machine: torch itself (without its dependency list, which pulls
# ~2.5 GB of CUDA libraries and triton), its pure-Python dependencies, and
# the NVIDIA libraries its shared objects are linked against. Where a CUDA
# 13.0 toolkit is installed (/usr/local/cuda-13.0/lib, in the loader's
# path), most of those come from it and only three wheels are added
# (cuFile, cuSPARSELt, NVSHMEM); elsewhere the whole set.
#
# Environment (optional): VENV (default .venv), PYTHON (default
# /usr/bin/python3, Debian's 3.11), TORCH_VERSION (default 2.11.0).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${VENV:-.venv}
python=${PYTHON:-/usr/bin/python3}
torch_version=${TORCH_VERSION:-2.11.0}

# torch 2.11.0 (cu130)'s pins.
PURE=(filelock "typing-extensions>=4.10.0" "setuptools<82" "sympy>=1.13.3"
      "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" numpy)
NOT_IN_TOOLKIT=(nvidia-cufile==1.15.1.6 nvidia-cusparselt-cu13==0.8.0
                nvidia-nvshmem-cu13==3.4.5)
TOOLKIT=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
         nvidia-cublas==13.1.0.3 nvidia-cufft==12.0.0.61 nvidia-curand==10.4.0.35
         nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.0.88
         nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9)

imports_torch() {
  [ -x "$venv/bin/python" ] &&
    "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" \
      >/dev/null 2>&1
}

if imports_torch; then
  echo "torch_venv: $venv imports torch $torch_version"
  exit 0
fi

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    echo "torch_venv: '$python -m venv' failed; on Debian install python3-venv" >&2
    exit 1
  fi
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "${PURE[@]}"
"${pip[@]}" --no-deps "torch==$torch_version"
wheels=("${NOT_IN_TOOLKIT[@]}")
if [ ! -e /usr/local/cuda-13.0/lib/libcudnn.so.9 ] ||
   ! ldconfig -p | grep -q "libcublas.so.13 "; then
  wheels+=("${TOOLKIT[@]}")
fi
"${pip[@]}" --no-deps "${wheels[@]}"
if ! imports_torch; then
  "$venv/bin/python" -c "import torch" || true
  echo "torch_venv: $venv does not import torch $torch_version (above: why)" >&2
  exit 1
fi
echo "torch_venv: $venv imports torch $torch_version" \
  "($(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1))"

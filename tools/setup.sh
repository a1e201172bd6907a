#!/usr/bin/env bash
# Installs the Debian 12 packages rdmaflow needs, only those missing (no
# network use when everything is present), then the project's Python
# environment with the pinned torch from PyPI (.venv, tools/torch_venv.sh;
# the LibTorch rdmaflow builds against). Idempotent; needs root to install
# packages.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail

PACKAGES=(
  bazel-bootstrap g++ pkg-config python3 cmake
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  libibverbs-dev librdmacm-dev libucx-dev
  zlib1g-dev dataset-fashion-mnist libssl-dev
  python3-dev python3-venv
  libgloo-dev libopenmpi-dev openmpi-bin
  gnuplot-nox graphviz
  clang libclang-rt-14-dev
  qemu-system-x86 busybox-static cpio xz-utils zstd iproute2
  rdma-core ibverbs-providers ibverbs-utils perftest ucx-utils
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

"$(dirname "$0")/torch_venv.sh"

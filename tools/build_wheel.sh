#!/usr/bin/env bash
# Builds the rdmaflow_torch wheel (-c opt) for the build's Python and torch
# (tools/torch_python.sh: .venv, or RDMAFLOW_PYTHON) into OUT (default
# dist/) and prints its path; then
#   pip install dist/rdmaflow_torch-*.whl
# into any environment with that Python and torch release gives
# `import rdmaflow_torch` (docs/torch.md).
#   tools/build_wheel.sh [OUT]
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
out=${1:-dist}
log=$(mktemp)
if ! bazel build -c opt //torch_backend/python:wheel >"$log" 2>&1; then
  cat "$log" >&2
  echo "build_wheel: the build failed (above)" >&2
  exit 1
fi
rm -f "$log"
mkdir -p "$out"
for wheel in bazel-bin/torch_backend/python/rdmaflow_torch-*.whl; do
  install -m 0644 "$wheel" "$out/"
  echo "$out/$(basename "$wheel")"
done

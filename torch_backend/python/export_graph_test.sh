#!/usr/bin/env bash
# export_graph_test.py under the build's torch ($RDMAFLOW_PYTHON), with
# the rdmaflow_torch module and the rdmaflow CLI this build made.
set -euo pipefail
export PYTHONPATH="$PWD/torch_backend/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$RDMAFLOW_PYTHON" torch_backend/python/export_graph_test.py "$PWD/cli/rdmaflow" \
  "$PWD/graph_analyzer/torch" "${TEST_TMPDIR:-/tmp}/export_graph_test"

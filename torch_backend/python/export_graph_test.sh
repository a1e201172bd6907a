#!/usr/bin/env bash
# export_graph_test.py under Debian's /usr/bin/python3 (python3-torch), with
# the rdmaflow_torch module and the rdmaflow CLI this build made.
set -euo pipefail
export PYTHONPATH="$PWD/torch_backend/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 torch_backend/python/export_graph_test.py "$PWD/cli/rdmaflow" \
  "$PWD/graph_analyzer/torch" "${TEST_TMPDIR:-/tmp}/export_graph_test"

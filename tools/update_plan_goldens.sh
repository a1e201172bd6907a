#!/usr/bin/env bash
# Regenerates the example graphs (graph_analyzer/testdata/*.pbtxt) from
# graph_analyzer/examples/example_graphs.cc and their golden plans
# (graph_analyzer/testdata/golden/*.plan.pbtxt) with `rdmaflow plan` at its
# default options. Run after an intended change to the examples or the
# planner, then review the diff: golden_test compares against these files.
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //cli:rdmaflow //graph_analyzer:write_example_graphs
bazel-bin/graph_analyzer/write_example_graphs "$PWD/graph_analyzer/testdata"
mkdir -p graph_analyzer/testdata/golden
for graph in graph_analyzer/testdata/*.pbtxt; do
  name=$(basename "$graph" .pbtxt)
  bazel-bin/cli/rdmaflow plan "$graph" --quiet \
    --out "graph_analyzer/testdata/golden/$name.plan.pbtxt"
done

// File: small_traces.h
// -----------------------------------------------------------------------------
// Small traced models (ModelTrace, as the importers write them) for tests
// of what consumes a training graph: placement, gradient order, the
// strategies that place a model as planned.
#ifndef RDMAFLOW_GRAPH_ANALYZER_TESTING_SMALL_TRACES_H_
#define RDMAFLOW_GRAPH_ANALYZER_TESTING_SMALL_TRACES_H_

#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"

namespace rdmaflow::graph::testing {

// x [8, 20] -> linear fc1 (16) -> relu_ -> linear fc2 (4): parameters
// fc1.weight [16, 20], fc1.bias [16], fc2.weight [4, 16], fc2.bias [4].
ModelTrace SmallMlpTrace();

// x [8, 1, 6, 6] -> conv 3x3 (2 channels) -> relu -> flatten -> linear fc
// (3): parameters conv.weight [2, 1, 3, 3], conv.bias [2], fc.weight
// [3, 32], fc.bias [3]. `scaled`: the output times a buffer "scale".
ModelTrace SmallCnnTrace(bool scaled = false);

// BuildTrainingGraph(trace); a gtest failure (and an empty graph) when it
// fails.
GraphDef TrainingGraphOf(const ModelTrace& trace);

}  // namespace rdmaflow::graph::testing

#endif  // RDMAFLOW_GRAPH_ANALYZER_TESTING_SMALL_TRACES_H_

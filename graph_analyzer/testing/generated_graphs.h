// File: generated_graphs.h
// -----------------------------------------------------------------------------
// Graphs generated for property tests and planning benchmarks.
#ifndef RDMAFLOW_GRAPH_ANALYZER_TESTING_GENERATED_GRAPHS_H_
#define RDMAFLOW_GRAPH_ANALYZER_TESTING_GENERATED_GRAPHS_H_

#include <cstdint>

#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/model_trace.pb.h"

namespace rdmaflow::graph::testing {

struct RandomGraphOptions {
  int num_nodes = 100;  // Exactly this many nodes, weights included.
  int world_size = 4;
  // Chance that a node moves to another rank than its first input's.
  double rank_switch = 0.2;
  // Chance that a source has an unknown batch dimension.
  double dynamic = 0.1;
  // Inputs are drawn from the last `window` nodes (short lifetimes, like a
  // real step) with occasional long-range ones (skip connections).
  int window = 32;
};

// A valid random DAG of Placeholder, Variable, Relu, Add, MatMul, Concat and
// Gradient nodes over [batch, width] tensors, placed over the ranks.
// Deterministic for a given seed.
GraphDef RandomGraph(const RandomGraphOptions& options, uint64_t seed);

struct OneLinkGraphOptions {
  int transfers = 100000;
  // Each consumer also reads a tensor sent up to `window` transfers before
  // its own, so a transfer stays live for about `window` / 2 more.
  int window = 32;
  // A last node on rank 1 reads every tensor, so all transfers are live
  // together until the end (as the gradients a parameter server sums).
  bool all_live = false;
};

// Every transfer on one link: rank 0 sends `transfers` tensors of
// [32, width] float32 (width from 16 to 4096: 2 KiB .. 512 KiB) and rank 1
// reads each (Gradient nodes). The planner's stress test for one region.
// Deterministic for a given seed.
GraphDef OneLinkGraph(const OneLinkGraphOptions& options, uint64_t seed);

// ResNet-50's 161 parameter tensors (53 conv weights, 53 batch-norm scale and
// shift pairs, the FC weight and bias: 25,557,032 parameters) in
// parameter-server form: `servers` ranks hold size-balanced shards,
// `workers` ranks each compute every gradient and push it; servers sum and
// apply them.
GraphDef ResNet50ParameterServer(int workers, int servers);

// Number of parameters (elements) ResNet50ParameterServer uses.
int64_t ResNet50ParameterCount();

// The forward pass of ResNet-50 on [batch, 3, 224, 224] images as an
// importer records it (model_trace.proto): the ops torch.jit.trace gives
// for torchvision's resnet50 (conv2d, batch_norm, relu, max_pool2d, add,
// adaptive_avg_pool2d, flatten, linear) with their traced shapes; the same
// 161 parameters as above, plus the batch norms' running statistics.
ModelTrace ResNet50Trace(int64_t batch);

}  // namespace rdmaflow::graph::testing

#endif  // RDMAFLOW_GRAPH_ANALYZER_TESTING_GENERATED_GRAPHS_H_

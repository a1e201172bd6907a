// File: ablation_graphs.h
// -----------------------------------------------------------------------------
// Graphs the ablation tool replays besides graph_analyzer's examples: an
// FC-heavy VGG-like parameter-server graph (~104 MB of parameters pulled and
// as many gradient bytes pushed per step), a graph of many small tensors
// (4-64 KiB, both directions), and one tensor of a given size (the sweep).
#ifndef RDMAFLOW_BENCH_ABLATION_GRAPHS_H_
#define RDMAFLOW_BENCH_ABLATION_GRAPHS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::bench {

struct AblationGraph {
  std::string name;
  graph::GraphDef graph;
};

// A worker (rank 0) and a parameter server (rank 1) for the FC head of a
// VGG network: fc1 4096x4096, fc2 4096x2048, fc3 2048x1000 with biases.
graph::GraphDef VggFcParameterServer();

// `count` tensors of 4-64 KiB from rank 0 to rank 1 and as many back.
graph::GraphDef SmallTensors(int count = 64);

// One float32 tensor of `bytes` (a multiple of 4) from rank 0 to rank 1.
graph::GraphDef SingleTensor(int64_t bytes);

// graph_analyzer's examples followed by the two graphs above, by name
// ("mlp", "cnn_ps", "cnn_layer_separated", "seq", "vgg_fc", "small_tensors").
std::vector<AblationGraph> AblationGraphs();

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_ABLATION_GRAPHS_H_

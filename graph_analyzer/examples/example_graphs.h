// File: example_graphs.h
// -----------------------------------------------------------------------------
// The example training graphs behind graph_analyzer/testdata/*.pbtxt, built
// with GraphBuilder. `write_example_graphs` writes them out;
// example_graphs_test checks the checked-in files still match.
#ifndef RDMAFLOW_GRAPH_ANALYZER_EXAMPLES_EXAMPLE_GRAPHS_H_
#define RDMAFLOW_GRAPH_ANALYZER_EXAMPLES_EXAMPLE_GRAPHS_H_

#include <string>
#include <vector>

#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph::examples {

// A 3-layer MLP (784-512-256-10, batch 64) split over 2 ranks: rank 0 runs
// layers 1-2, rank 1 layer 3 and the loss; the activation goes 0 -> 1 and
// its gradient 1 -> 0.
GraphDef MlpTwoRanks();

// A VGG-like CNN (3 conv blocks, 2 FC layers, 32x32x3 images, batch 32) in
// parameter-server form: ranks 0 .. workers-1 train, rank `workers` holds the
// 10 parameters, sums the workers' gradients and applies them.
GraphDef CnnParameterServer(int workers = 2);

// The same CNN layer-separated (Stanza): ranks 0 and 1 run the conv part and
// exchange their conv gradients; rank 2 holds the FC part, receives both
// ranks' activations and sends back their gradients.
GraphDef CnnLayerSeparated();

// A sequence model whose length dimension is dynamic (-1): an encoder on rank
// 0 and a decoder on rank 1; the [32, T, 512] hidden state crosses with
// the dynamic path, its pooled [32, 512] summary with a static slot.
GraphDef SequenceDynamicLength();

struct NamedGraph {
  std::string file;  // Under graph_analyzer/testdata/.
  GraphDef graph;
};

// Every example, with its file name.
std::vector<NamedGraph> AllExamples();

}  // namespace rdmaflow::graph::examples

#endif  // RDMAFLOW_GRAPH_ANALYZER_EXAMPLES_EXAMPLE_GRAPHS_H_

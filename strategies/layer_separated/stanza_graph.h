// File: stanza_graph.h
// -----------------------------------------------------------------------------
// The tensors layer-separated training exchanges, as a GraphDef for the
// graph analyzer, so every one gets a static slot at its receiver. Ranks
// 0..C-1 train the convolutional part, ranks C..C+K-1 the fully connected
// part; conv rank i is served by FC rank C + i % K. Per conv rank i:
//   c<i>/act     [batch, activation...] float32   conv rank -> FC rank
//   c<i>/labels  [batch] int64                    conv rank -> FC rank
//   f<k>/grad_c<i>  like c<i>/act                 FC rank -> conv rank
//   f<k>/stats_c<i> [2] float32 (loss, accuracy)  FC rank -> conv rank
// (a transfer is named after its producer's output, "c<i>/act:0").
// With `on_device` the activations and their gradients are held and
// received in device memory (device slots: docs/device.md), the labels
// received there from the host, the stats host to host.
#ifndef RDMAFLOW_STRATEGIES_LAYER_SEPARATED_STANZA_GRAPH_H_
#define RDMAFLOW_STRATEGIES_LAYER_SEPARATED_STANZA_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::strategies::layer_separated {

struct StanzaLayout {
  int conv_ranks = 1;
  int fc_ranks = 1;
  int64_t batch = 1;
  std::vector<int64_t> activation_shape;  // one sample's

  // The FC rank (global) that serves conv rank i, and the conv ranks an FC
  // rank (index k in [0, K)) serves, in order.
  int FcRankOf(int conv) const { return conv_ranks + conv % fc_ranks; }
  std::vector<int> Served(int fc_index) const;
};

std::string ActTensor(int conv);
std::string LabelsTensor(int conv);
std::string GradTensor(int fc_index, int conv);
std::string StatsTensor(int fc_index, int conv);

graph::GraphDef BuildStanzaGraph(const StanzaLayout& layout, bool on_device = false);

}  // namespace rdmaflow::strategies::layer_separated

#endif  // RDMAFLOW_STRATEGIES_LAYER_SEPARATED_STANZA_GRAPH_H_

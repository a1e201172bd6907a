// File: ablation_graphs.cc
#include "bench/ablation_graphs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/graph_builder.h"

namespace rdmaflow::bench {

using graph::DT_FLOAT32;
using graph::DT_INT64;
using graph::GraphBuilder;

graph::GraphDef VggFcParameterServer() {
  GraphBuilder b("vgg_fc_ps");
  b.SetWorldSize(2);
  b.SetRank(1);  // the server holds the parameters
  const std::string w1 = b.Variable("fc1_w", DT_FLOAT32, {4096, 4096});
  const std::string b1 = b.Variable("fc1_b", DT_FLOAT32, {4096});
  const std::string w2 = b.Variable("fc2_w", DT_FLOAT32, {4096, 2048});
  const std::string b2 = b.Variable("fc2_b", DT_FLOAT32, {2048});
  const std::string w3 = b.Variable("fc3_w", DT_FLOAT32, {2048, 1000});
  const std::string b3 = b.Variable("fc3_b", DT_FLOAT32, {1000});
  b.SetRank(0);  // the worker: forward and backward with pulled parameters
  const std::string x = b.Placeholder("features", DT_FLOAT32, {32, 4096});
  const std::string labels = b.Placeholder("labels", DT_INT64, {32});
  std::string h = b.Op("fc1", "MatMul", {x, w1}).out();
  h = b.Op("fc1_bias", "BiasAdd", {h, b1}).out();
  h = b.Op("fc1_relu", "Relu", {h}).out();
  h = b.Op("fc2", "MatMul", {h, w2}).out();
  h = b.Op("fc2_bias", "BiasAdd", {h, b2}).out();
  h = b.Op("fc2_relu", "Relu", {h}).out();
  h = b.Op("fc3", "MatMul", {h, w3}).out();
  h = b.Op("fc3_bias", "BiasAdd", {h, b3}).out();
  const std::string loss =
      b.Op("loss", "SoftmaxCrossEntropy", {h, labels}).out();
  auto grad = b.Op("grad", "Gradient", {w1, b1, w2, b2, w3, b3, loss})
                  .Attr("wrt", int64_t{6});
  b.SetRank(1);
  const std::vector<std::string> vars = {w1, b1, w2, b2, w3, b3};
  for (int i = 0; i < 6; ++i) {
    b.Op(absl::StrCat(absl::StripSuffix(vars[i], ":0"), "_update"),
         "ApplyGradient", {vars[i], grad.out(i)});
  }
  return std::move(b).Build();
}

graph::GraphDef SmallTensors(int count) {
  GraphBuilder b("small_tensors");
  b.SetWorldSize(2);
  for (int i = 0; i < count; ++i) {
    // 4, 8, 16, 32, 64 KiB in turn.
    const int64_t elements = int64_t{1024} << (i % 5);
    b.SetRank(0);
    const std::string t =
        b.Placeholder(absl::StrCat("t", i), DT_FLOAT32, {elements});
    b.SetRank(1);
    const std::string r = b.Op(absl::StrCat("r", i), "Relu", {t}).out();
    b.SetRank(0);
    b.Op(absl::StrCat("back", i), "Identity", {r});
  }
  return std::move(b).Build();
}

graph::GraphDef SingleTensor(int64_t bytes) {
  GraphBuilder b(absl::StrCat("tensor_", bytes));
  b.SetWorldSize(2);
  b.SetRank(0);
  const std::string x = b.Placeholder("x", DT_FLOAT32, {bytes / 4});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  return std::move(b).Build();
}

std::vector<AblationGraph> AblationGraphs() {
  return {
      {"mlp", graph::examples::MlpTwoRanks()},
      {"cnn_ps", graph::examples::CnnParameterServer(2)},
      {"cnn_layer_separated", graph::examples::CnnLayerSeparated()},
      {"seq", graph::examples::SequenceDynamicLength()},
      {"vgg_fc", VggFcParameterServer()},
      {"small_tensors", SmallTensors()},
  };
}

}  // namespace rdmaflow::bench

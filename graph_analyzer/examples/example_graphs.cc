// File: example_graphs.cc
#include "graph_analyzer/examples/example_graphs.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "graph_analyzer/graph_builder.h"

namespace rdmaflow::graph::examples {
namespace {

constexpr int64_t kCnnBatch = 32;

// The CNN's parameters: three 3x3 conv layers (64, 128, 256 channels, each
// followed by 2x2 max pooling) and two FC layers (4096 -> 1024 -> 10).
struct CnnParam {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<CnnParam> CnnConvParams() {
  return {{"conv1_w", {64, 3, 3, 3}},    {"conv1_b", {64}},
          {"conv2_w", {128, 64, 3, 3}},  {"conv2_b", {128}},
          {"conv3_w", {256, 128, 3, 3}}, {"conv3_b", {256}}};
}

std::vector<CnnParam> CnnFcParams() {
  return {{"fc1_w", {4096, 1024}},
          {"fc1_b", {1024}},
          {"fc2_w", {1024, 10}},
          {"fc2_b", {10}}};
}

// Conv block i (1-based): conv (SAME) + bias + relu + 2x2 max pool. Returns
// the pooled activation.
std::string ConvBlock(GraphBuilder& b, const std::string& prefix, int i,
                      const std::string& x, const std::string& w,
                      const std::string& bias) {
  std::string p = absl::StrCat(prefix, "conv", i);
  std::string conv = b.Op(p, "Conv2D", {x, w})
                         .Attr("strides", std::vector<int64_t>{1, 1})
                         .Attr("padding", "SAME")
                         .out();
  std::string biased = b.Op(p + "_bias", "BiasAdd", {conv, bias}).out();
  std::string relu = b.Op(p + "_relu", "Relu", {biased}).out();
  return b.Op(p + "_pool", "MaxPool", {relu})
      .Attr("ksize", std::vector<int64_t>{2, 2})
      .out();
}

// The conv part on the current rank: returns the flattened [32, 4096]
// activation. `params` are the tensor names of CnnConvParams() in order.
std::string ConvForward(GraphBuilder& b, const std::string& prefix,
                        const std::string& images,
                        const std::vector<std::string>& params) {
  std::string x = images;
  for (int i = 0; i < 3; ++i) {
    x = ConvBlock(b, prefix, i + 1, x, params[2 * i], params[2 * i + 1]);
  }
  return b.Op(prefix + "flatten", "Flatten", {x}).out();
}

// FC part: fc1 + relu, fc2, loss. Returns the loss.
std::string FcForward(GraphBuilder& b, const std::string& prefix,
                      const std::string& x, const std::string& labels,
                      const std::vector<std::string>& params) {
  std::string h = b.Op(prefix + "fc1", "MatMul", {x, params[0]}).out();
  h = b.Op(prefix + "fc1_bias", "BiasAdd", {h, params[1]}).out();
  h = b.Op(prefix + "fc1_relu", "Relu", {h}).out();
  std::string logits = b.Op(prefix + "fc2", "MatMul", {h, params[2]}).out();
  logits = b.Op(prefix + "fc2_bias", "BiasAdd", {logits, params[3]}).out();
  return b.Op(prefix + "loss", "SoftmaxCrossEntropy", {logits, labels}).out();
}

std::string Images(GraphBuilder& b, const std::string& prefix,
                   int64_t batch) {
  return b.Placeholder(prefix + "images", DT_FLOAT32, {batch, 3, 32, 32});
}

std::string Labels(GraphBuilder& b, const std::string& prefix, int64_t batch) {
  return b.Placeholder(prefix + "labels", DT_INT64, {batch});
}

}  // namespace

GraphDef MlpTwoRanks() {
  GraphBuilder b("mlp_2ranks");
  // Rank 0: layers 1 and 2.
  b.SetRank(0);
  std::string x = b.Placeholder("x", DT_FLOAT32, {64, 784});
  std::string w1 = b.Variable("w1", DT_FLOAT32, {784, 512});
  std::string b1 = b.Variable("b1", DT_FLOAT32, {512});
  std::string w2 = b.Variable("w2", DT_FLOAT32, {512, 256});
  std::string b2 = b.Variable("b2", DT_FLOAT32, {256});
  std::string h1 = b.Op("fc1", "MatMul", {x, w1}).out();
  h1 = b.Op("fc1_bias", "BiasAdd", {h1, b1}).out();
  h1 = b.Op("fc1_relu", "Relu", {h1}).out();
  std::string h2 = b.Op("fc2", "MatMul", {h1, w2}).out();
  h2 = b.Op("fc2_bias", "BiasAdd", {h2, b2}).out();
  h2 = b.Op("fc2_relu", "Relu", {h2}).out();
  // Rank 1: layer 3, loss, and the gradient of the activation it received.
  b.SetRank(1);
  std::string labels = b.Placeholder("labels", DT_INT64, {64});
  std::string w3 = b.Variable("w3", DT_FLOAT32, {256, 10});
  std::string b3 = b.Variable("b3", DT_FLOAT32, {10});
  std::string logits = b.Op("fc3", "MatMul", {h2, w3}).out();
  logits = b.Op("fc3_bias", "BiasAdd", {logits, b3}).out();
  std::string loss = b.Op("loss", "SoftmaxCrossEntropy", {logits, labels}).out();
  auto g3 = b.Op("fc3_grad", "Gradient", {h2, w3, b3, loss}).Attr("wrt", 3);
  b.Op("w3_update", "ApplyGradient", {w3, g3.out(1)});
  b.Op("b3_update", "ApplyGradient", {b3, g3.out(2)});
  // Rank 0: backward through layers 2 and 1, consuming the gradient of h2.
  b.SetRank(0);
  auto g2 = b.Op("fc2_grad", "Gradient", {h1, w2, b2, g3.out(0)}).Attr("wrt", 3);
  b.Op("w2_update", "ApplyGradient", {w2, g2.out(1)});
  b.Op("b2_update", "ApplyGradient", {b2, g2.out(2)});
  auto g1 = b.Op("fc1_grad", "Gradient", {w1, b1, g2.out(0)}).Attr("wrt", 2);
  b.Op("w1_update", "ApplyGradient", {w1, g1.out(0)});
  b.Op("b1_update", "ApplyGradient", {b1, g1.out(1)});
  return std::move(b).Build();
}

GraphDef CnnParameterServer(int workers) {
  GraphBuilder b(absl::StrCat("cnn_ps_", workers, "workers"));
  std::vector<CnnParam> params = CnnConvParams();
  for (CnnParam& p : CnnFcParams()) params.push_back(p);
  // The server's parameters.
  b.SetRank(workers);
  std::vector<std::string> vars;
  for (const CnnParam& p : params) {
    vars.push_back(b.Variable(p.name, DT_FLOAT32, p.shape));
  }
  // Each worker: forward with the server's parameters, one gradient op.
  std::vector<std::vector<std::string>> grads(params.size());
  for (int w = 0; w < workers; ++w) {
    b.SetRank(w);
    std::string prefix = absl::StrCat("worker", w, "/");
    std::string images = Images(b, prefix, kCnnBatch);
    std::string labels = Labels(b, prefix, kCnnBatch);
    std::vector<std::string> conv(vars.begin(), vars.begin() + 6);
    std::vector<std::string> fc(vars.begin() + 6, vars.end());
    std::string act = ConvForward(b, prefix, images, conv);
    std::string loss = FcForward(b, prefix, act, labels, fc);
    std::vector<std::string> inputs = vars;
    inputs.push_back(loss);
    auto g = b.Op(prefix + "grad", "Gradient", inputs)
                 .Attr("wrt", static_cast<int64_t>(vars.size()));
    for (size_t i = 0; i < params.size(); ++i) grads[i].push_back(g.out(i));
  }
  // The server sums the gradients and updates each parameter.
  b.SetRank(workers);
  for (size_t i = 0; i < params.size(); ++i) {
    std::string sum = b.Op(params[i].name + "_grad_sum", "AddN", grads[i]).out();
    b.Op(params[i].name + "_update", "ApplyGradient", {vars[i], sum});
  }
  return std::move(b).Build();
}

GraphDef CnnLayerSeparated() {
  GraphBuilder b("cnn_layer_separated");
  constexpr int kConvRanks = 2;
  constexpr int kFcRank = 2;
  std::vector<CnnParam> conv_params = CnnConvParams();
  // Each conv rank holds a replica of the conv parameters and computes the
  // activation of its half of the global batch.
  std::vector<std::vector<std::string>> conv_vars(kConvRanks);
  std::vector<std::vector<std::string>> acts(kConvRanks);
  std::vector<std::string> flat(kConvRanks);
  for (int r = 0; r < kConvRanks; ++r) {
    b.SetRank(r);
    std::string prefix = absl::StrCat("conv", r, "/");
    for (const CnnParam& p : conv_params) {
      conv_vars[r].push_back(b.Variable(prefix + p.name, DT_FLOAT32, p.shape));
    }
    std::string x = Images(b, prefix, kCnnBatch);
    acts[r].push_back(x);
    for (int i = 0; i < 3; ++i) {
      x = ConvBlock(b, prefix, i + 1, x, conv_vars[r][2 * i],
                    conv_vars[r][2 * i + 1]);
      acts[r].push_back(x);
    }
    flat[r] = b.Op(prefix + "flatten", "Flatten", {x}).out();
  }
  // The FC rank: both halves of the batch, FC parameters that never leave it.
  b.SetRank(kFcRank);
  std::vector<std::string> fc_vars;
  for (const CnnParam& p : CnnFcParams()) {
    fc_vars.push_back(b.Variable("fc/" + p.name, DT_FLOAT32, p.shape));
  }
  std::string x =
      b.Op("fc/concat", "Concat", {flat[0], flat[1]}).Attr("axis", 0).out();
  std::string labels = Labels(b, "fc/", kConvRanks * kCnnBatch);
  std::string loss = FcForward(b, "fc/", x, labels, fc_vars);
  std::vector<std::string> inputs = {flat[0], flat[1]};
  inputs.insert(inputs.end(), fc_vars.begin(), fc_vars.end());
  inputs.push_back(loss);
  auto g = b.Op("fc/grad", "Gradient", inputs).Attr("wrt", 6);
  for (int i = 0; i < 4; ++i) {
    b.Op("fc/" + CnnFcParams()[i].name + "_update", "ApplyGradient",
         {fc_vars[i], g.out(2 + i)});
  }
  // Conv ranks: backward block by block, from the top; each block's
  // gradients go to the other conv rank (an all-reduce among the conv ranks,
  // drawn as an exchange), which sums and applies them.
  std::vector<std::string> upstream = {g.out(0), g.out(1)};
  for (int i = 2; i >= 0; --i) {
    std::vector<std::string> gw(kConvRanks);
    std::vector<std::string> gb(kConvRanks);
    for (int r = 0; r < kConvRanks; ++r) {
      b.SetRank(r);
      std::string prefix = absl::StrCat("conv", r, "/");
      auto grad = b.Op(absl::StrCat(prefix, "conv", i + 1, "_grad"),
                       "Gradient",
                       {acts[r][i], conv_vars[r][2 * i],
                        conv_vars[r][2 * i + 1], upstream[r]})
                      .Attr("wrt", 3);
      upstream[r] = grad.out(0);
      gw[r] = grad.out(1);
      gb[r] = grad.out(2);
    }
    for (int r = 0; r < kConvRanks; ++r) {
      b.SetRank(r);
      std::string prefix = absl::StrCat("conv", r, "/");
      const std::string& wname = conv_params[2 * i].name;
      const std::string& bname = conv_params[2 * i + 1].name;
      std::string sw = b.Op(prefix + wname + "_grad_sum", "AddN", {gw[0], gw[1]})
                           .out();
      std::string sb = b.Op(prefix + bname + "_grad_sum", "AddN", {gb[0], gb[1]})
                           .out();
      b.Op(prefix + wname + "_update", "ApplyGradient",
           {conv_vars[r][2 * i], sw});
      b.Op(prefix + bname + "_update", "ApplyGradient",
           {conv_vars[r][2 * i + 1], sb});
    }
  }
  return std::move(b).Build();
}

GraphDef SequenceDynamicLength() {
  GraphBuilder b("seq_dynamic_length");
  constexpr int64_t kBatch = 32;
  constexpr int64_t kUnknown = -1;
  // Rank 0: the encoder.
  b.SetRank(0);
  std::string x = b.Placeholder("tokens", DT_FLOAT32, {kBatch, kUnknown, 256});
  std::string w_enc = b.Variable("w_enc", DT_FLOAT32, {256, 512});
  std::string h = b.Op("encoder", "MatMul", {x, w_enc}).out();
  h = b.Op("encoder_relu", "Tanh", {h}).out();
  std::string summary =
      b.Op("encoder_pool", "ReduceMean", {h}).Attr("axes", std::vector<int64_t>{1}).out();
  // Rank 1: the decoder, pooling, classifier and loss.
  b.SetRank(1);
  std::string labels = b.Placeholder("labels", DT_INT32, {kBatch});
  std::string w_dec = b.Variable("w_dec", DT_FLOAT32, {512, 256});
  std::string w_out = b.Variable("w_out", DT_FLOAT32, {768, 10});
  std::string d = b.Op("decoder", "MatMul", {h, w_dec}).out();
  d = b.Op("decoder_relu", "Relu", {d}).out();
  std::string pooled =
      b.Op("decoder_pool", "ReduceMean", {d}).Attr("axes", std::vector<int64_t>{1}).out();
  std::string z =
      b.Op("features", "Concat", {pooled, summary}).Attr("axis", 1).out();
  std::string logits = b.Op("classifier", "MatMul", {z, w_out}).out();
  std::string loss =
      b.Op("loss", "SoftmaxCrossEntropy", {logits, labels}).out();
  auto g = b.Op("decoder_grad", "Gradient", {h, summary, w_dec, w_out, loss})
               .Attr("wrt", 4);
  b.Op("w_dec_update", "ApplyGradient", {w_dec, g.out(2)});
  b.Op("w_out_update", "ApplyGradient", {w_out, g.out(3)});
  // Rank 0: the encoder's backward pass, from both gradients it gets back.
  b.SetRank(0);
  auto ge = b.Op("encoder_grad", "Gradient", {w_enc, x, g.out(0), g.out(1)})
                .Attr("wrt", 1);
  b.Op("w_enc_update", "ApplyGradient", {w_enc, ge.out(0)});
  return std::move(b).Build();
}

std::vector<NamedGraph> AllExamples() {
  return {{"mlp_2ranks.pbtxt", MlpTwoRanks()},
          {"cnn_ps_2workers.pbtxt", CnnParameterServer(2)},
          {"cnn_layer_separated.pbtxt", CnnLayerSeparated()},
          {"seq_dynamic_length.pbtxt", SequenceDynamicLength()}};
}

}  // namespace rdmaflow::graph::examples

// File: generated_graphs.cc
#include "graph_analyzer/testing/generated_graphs.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/size_balance.h"

namespace rdmaflow::graph::testing {
namespace {

struct Made {
  std::string tensor;
  int rank;
  int64_t batch;  // -1 when dynamic.
  int64_t width;
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<Param> ResNet50Params() {
  std::vector<Param> params;
  int conv = 0;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t k) {
    std::string p = absl::StrCat("conv", conv++);
    params.push_back({p + "_w", {out, in, k, k}});
    params.push_back({p + "_bn_scale", {out}});
    params.push_back({p + "_bn_shift", {out}});
  };
  conv_bn(64, 3, 7);
  int64_t in = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    int64_t width = int64_t{64} << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv_bn(width, in, 1);
      conv_bn(width, width, 3);
      conv_bn(4 * width, width, 1);
      if (b == 0) conv_bn(4 * width, in, 1);  // Projection shortcut.
      in = 4 * width;
    }
  }
  params.push_back({"fc_w", {1000, 2048}});
  params.push_back({"fc_b", {1000}});
  return params;
}

int64_t Elements(const Param& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

}  // namespace

GraphDef RandomGraph(const RandomGraphOptions& options, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int n) {
    return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng));
  };
  auto chance = [&](double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng) < p;
  };
  const int64_t widths[] = {16, 64, 100, 256, 1000};
  constexpr int64_t kBatch = 32;
  GraphBuilder b(absl::StrCat("random_", options.num_nodes, "_", seed));
  b.SetWorldSize(options.world_size);
  std::vector<Made> made;
  auto pick = [&]() -> const Made& {
    int n = made.size();
    if (chance(0.1)) return made[uniform(n)];
    return made[n - 1 - uniform(std::min(n, options.window))];
  };
  for (int i = 0; b.graph().node_size() < options.num_nodes; ++i) {
    std::string name = absl::StrCat("n", i);
    int kind = made.size() < 4 ? 0 : uniform(10);
    // A MatMul adds two nodes (its weight too); keep the count exact.
    if (kind >= 4 && kind <= 5 &&
        b.graph().node_size() + 2 > options.num_nodes) {
      kind = 1;
    }
    if (kind == 0) {  // Source.
      int rank = uniform(options.world_size);
      int64_t batch = chance(options.dynamic) ? -1 : kBatch;
      int64_t width = widths[uniform(5)];
      b.SetRank(rank);
      made.push_back(
          {b.Placeholder(name, DT_FLOAT32, {batch, width}), rank, batch, width});
      continue;
    }
    const Made x = pick();
    int rank = chance(options.rank_switch) ? uniform(options.world_size)
                                           : x.rank;
    b.SetRank(rank);
    if (kind <= 3) {
      made.push_back({b.Op(name, "Relu", {x.tensor}).out(), rank, x.batch,
                      x.width});
    } else if (kind <= 5) {  // MatMul by a fresh weight on this rank.
      int64_t width = widths[uniform(5)];
      std::string w = b.Variable(name + "_w", DT_FLOAT32, {x.width, width});
      made.push_back({b.Op(name, "MatMul", {x.tensor, w}).out(), rank, x.batch,
                      width});
    } else if (kind <= 7) {  // Add of two tensors of one shape, if any.
      std::vector<const Made*> same;
      for (int j = std::max<int>(0, made.size() - options.window);
           j < static_cast<int>(made.size()); ++j) {
        if (made[j].width == x.width && made[j].batch == x.batch &&
            made[j].tensor != x.tensor) {
          same.push_back(&made[j]);
        }
      }
      std::string y = same.empty() ? x.tensor : same[uniform(same.size())]->tensor;
      made.push_back(
          {b.Op(name, "Add", {x.tensor, y}).out(), rank, x.batch, x.width});
    } else if (kind == 8) {  // Concat along the width.
      const Made y = pick();
      if (y.batch != x.batch) {
        made.push_back({b.Op(name, "Identity", {x.tensor}).out(), rank,
                        x.batch, x.width});
        continue;
      }
      made.push_back({b.Op(name, "Concat", {x.tensor, y.tensor})
                          .Attr("axis", 1)
                          .out(),
                      rank, x.batch, x.width + y.width});
    } else {  // Gradient of x, computed after y.
      const Made y = pick();
      made.push_back({b.Op(name, "Gradient", {x.tensor, y.tensor}).out(), rank,
                      x.batch, x.width});
    }
  }
  return std::move(b).Build();
}

GraphDef OneLinkGraph(const OneLinkGraphOptions& options, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int n) {
    return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng));
  };
  const int64_t widths[] = {16, 64, 100, 256, 1000, 4096};
  GraphBuilder b(absl::StrCat("one_link_", options.transfers,
                              options.all_live ? "_all_live" : "", "_", seed));
  b.SetWorldSize(2);
  std::vector<std::string> sent;
  sent.reserve(options.transfers);
  for (int i = 0; i < options.transfers; ++i) {
    b.SetRank(0);
    sent.push_back(b.Placeholder(absl::StrCat("t", i), DT_FLOAT32,
                                 {32, widths[uniform(6)]}));
    std::vector<std::string> inputs = {sent.back()};
    if (i > 0) {
      inputs.push_back(sent[i - 1 - uniform(std::min(i, options.window))]);
    }
    b.SetRank(1);
    b.Op(absl::StrCat("c", i), "Gradient", std::move(inputs));
  }
  if (options.all_live) {
    b.SetRank(1);
    b.Op("sum", "Gradient", std::move(sent));
  }
  return std::move(b).Build();
}

int64_t ResNet50ParameterCount() {
  int64_t n = 0;
  for (const Param& p : ResNet50Params()) n += Elements(p);
  return n;
}

GraphDef ResNet50ParameterServer(int workers, int servers) {
  std::vector<Param> params = ResNet50Params();
  // Size-balanced shards, as the ps strategy makes them.
  std::vector<int64_t> sizes;
  for (const Param& p : params) sizes.push_back(Elements(p));
  std::vector<int> server_of = BalanceBySize(sizes, servers);
  for (int& s : server_of) s += workers;
  GraphBuilder b(absl::StrCat("resnet50_ps_", workers, "w_", servers, "s"));
  std::vector<std::string> vars;
  for (size_t i = 0; i < params.size(); ++i) {
    b.SetRank(server_of[i]);
    vars.push_back(b.Variable(params[i].name, DT_FLOAT32, params[i].shape));
  }
  std::vector<std::vector<std::string>> grads(params.size());
  for (int w = 0; w < workers; ++w) {
    b.SetRank(w);
    std::string prefix = absl::StrCat("worker", w, "/");
    std::string images =
        b.Placeholder(prefix + "images", DT_FLOAT32, {32, 3, 224, 224});
    // Backward runs from the last layer to the first: one gradient per
    // parameter, each depending on the one before, as backprop does.
    std::string upstream = images;
    for (size_t i = params.size(); i-- > 0;) {
      auto g = b.Op(absl::StrCat(prefix, params[i].name, "_grad"), "Gradient",
                    {vars[i], upstream});
      upstream = g.out();
      grads[i].push_back(g.out());
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    b.SetRank(server_of[i]);
    std::string sum =
        b.Op(params[i].name + "_grad_sum", "AddN", grads[i]).out();
    b.Op(params[i].name + "_update", "ApplyGradient", {vars[i], sum});
  }
  return std::move(b).Build();
}

namespace {

// Appends ops to a trace, naming their outputs t0, t1, ...
class TraceWriter {
 public:
  explicit TraceWriter(ModelTrace& trace) : trace_(trace) {}

  std::string Param(const std::string& name, std::vector<int64_t> shape, bool buffer = false) {
    TracedTensor* t = buffer ? trace_.add_buffer() : trace_.add_parameter();
    t->set_name(name);
    t->mutable_spec()->set_dtype(DT_FLOAT32);
    for (int64_t d : shape) t->mutable_spec()->add_shape(d);
    return name;
  }

  std::string Op(const std::string& kind, std::vector<std::string> inputs,
                 std::vector<int64_t> shape,
                 std::vector<std::pair<std::string, std::vector<int64_t>>> args = {}) {
    TracedOp* op = trace_.add_op();
    op->set_kind(kind);
    for (std::string& in : inputs) op->add_input(std::move(in));
    for (auto& [name, value] : args) {
      AttrValue& a = (*op->mutable_arg())[name];
      if (value.size() == 1 && (name == "groups" || name == "start_dim")) {
        a.set_i(value[0]);
      } else {
        for (int64_t v : value) a.add_ints(v);
      }
    }
    const std::string out = absl::StrCat("t", next_++);
    op->add_output(out);
    op->add_output_spec()->set_dtype(DT_FLOAT32);
    for (int64_t d : shape) op->mutable_output_spec(0)->add_shape(d);
    return out;
  }

 private:
  ModelTrace& trace_;
  int next_ = 0;
};

}  // namespace

ModelTrace ResNet50Trace(int64_t batch) {
  ModelTrace trace;
  trace.set_name("resnet50");
  trace.set_source("generated");
  TracedTensor* input = trace.add_input();
  input->set_name("x");
  input->mutable_spec()->set_dtype(DT_FLOAT32);
  for (int64_t d : {batch, int64_t{3}, int64_t{224}, int64_t{224}}) {
    input->mutable_spec()->add_shape(d);
  }
  TraceWriter w(trace);
  int layer = 0;
  // conv (k x k, stride, padding k/2) + batch norm.
  auto conv_bn = [&](const std::string& x, int64_t in, int64_t out, int64_t k,
                     int64_t stride, int64_t size) {
    const std::string p = absl::StrCat("layer", layer++);
    const std::string weight = w.Param(p + ".conv.weight", {out, in, k, k});
    const int64_t next = (size + 2 * (k / 2) - k) / stride + 1;
    const std::string c = w.Op("aten::conv2d", {x, weight}, {batch, out, next, next},
                               {{"stride", {stride, stride}}, {"padding", {k / 2, k / 2}},
                                {"dilation", {1, 1}}, {"groups", {1}}});
    const std::string bn = w.Op(
        "aten::batch_norm",
        {c, w.Param(p + ".bn.weight", {out}), w.Param(p + ".bn.bias", {out}),
         w.Param(p + ".bn.running_mean", {out}, true),
         w.Param(p + ".bn.running_var", {out}, true)},
        {batch, out, next, next});
    return std::make_pair(bn, next);
  };
  auto [stem, size] = conv_bn("x", 3, 64, 7, 2, 224);
  std::string x = w.Op("aten::relu", {stem}, {batch, 64, size, size});
  size = (size + 2 - 3) / 2 + 1;
  x = w.Op("aten::max_pool2d", {x}, {batch, 64, size, size},
           {{"kernel_size", {3, 3}}, {"stride", {2, 2}}, {"padding", {1, 1}}});
  int64_t channels = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t width = widths[stage];
      const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      auto [h1, s1] = conv_bn(x, channels, width, 1, 1, size);
      h1 = w.Op("aten::relu", {h1}, {batch, width, s1, s1});
      auto [h2, s2] = conv_bn(h1, width, width, 3, stride, s1);
      h2 = w.Op("aten::relu", {h2}, {batch, width, s2, s2});
      auto [h3, s3] = conv_bn(h2, width, 4 * width, 1, 1, s2);
      std::string skip = x;
      if (b == 0) skip = conv_bn(x, channels, 4 * width, 1, stride, size).first;
      x = w.Op("aten::add", {h3, skip}, {batch, 4 * width, s3, s3});
      x = w.Op("aten::relu", {x}, {batch, 4 * width, s3, s3});
      channels = 4 * width;
      size = s3;
    }
  }
  x = w.Op("aten::adaptive_avg_pool2d", {x}, {batch, 2048, 1, 1});
  x = w.Op("aten::flatten", {x}, {batch, 2048}, {{"start_dim", {1}}});
  x = w.Op("aten::linear",
           {x, w.Param("fc.weight", {1000, 2048}), w.Param("fc.bias", {1000})},
           {batch, 1000});
  trace.set_output(x);
  return trace;
}

}  // namespace rdmaflow::graph::testing

// File: ps_graph.cc
#include "strategies/ps/ps_graph.h"

#include "absl/strings/str_cat.h"
#include "graph_analyzer/graph_builder.h"

namespace rdmaflow::strategies::ps {

namespace {

std::string SliceSuffix(int slice) { return slice < 0 ? "" : absl::StrCat("_", slice); }

}  // namespace

std::string GradTensor(int worker, int server, int slice) {
  return absl::StrCat("w", worker, "/grad", server, SliceSuffix(slice), ":0");
}

std::string ParamsTensor(int server) {
  return absl::StrCat("ps", server, "/params:0");
}

graph::GraphDef BuildPsGraph(int servers, int workers,
                             const std::vector<int64_t>& shard_elements,
                             const std::vector<std::vector<int64_t>>& push_elements,
                             bool sliced, bool compressed, bool pull_by_read,
                             bool on_device) {
  graph::GraphBuilder b("parameter_server");
  b.SetWorldSize(servers + workers);
  if (on_device) b.SetMemory(graph::MEMORY_DEVICE);
  std::vector<std::string> params(servers);
  // Sliced: each slice a variable of its own (a versioned buffer apiece).
  std::vector<std::vector<std::string>> slice_params(servers);
  for (int s = 0; s < servers; ++s) {
    b.SetRank(s);
    params[s] = b.Variable(absl::StrCat("ps", s, "/params"), graph::DT_FLOAT32,
                           {shard_elements[s]});
    for (size_t k = 0; sliced && k < push_elements[s].size(); ++k) {
      slice_params[s].push_back(b.Variable(absl::StrCat("ps", s, "/params", SliceSuffix(k)),
                                           graph::DT_FLOAT32, {push_elements[s][k]}));
    }
  }
  for (int w = 0; w < workers; ++w) {
    for (int s = 0; s < servers; ++s) {
      b.SetRank(servers + w);
      if (!pull_by_read) {
        b.Op(absl::StrCat("w", w, "/params", s), "Identity", {params[s]});
      }
      for (size_t k = 0; k < push_elements[s].size(); ++k) {
        const std::string suffix = SliceSuffix(sliced ? static_cast<int>(k) : -1);
        b.SetRank(servers + w);
        const std::string grad = b.Variable(absl::StrCat("w", w, "/grad", s, suffix),
                                            graph::DT_FLOAT32, {push_elements[s][k]});
        b.SetRank(s);
        if (!compressed) {
          b.Op(absl::StrCat("ps", s, "/apply_w", w, suffix), "ApplyGradient",
               {sliced ? slice_params[s][k] : params[s], grad});
        } else {
          // A codec's message: the server reads it (and decodes it into a
          // gradient of its shard, which never crosses again).
          b.Op(absl::StrCat("ps", s, "/decode_w", w, suffix), "Identity", {grad});
        }
      }
    }
  }
  return std::move(b).Build();
}

}  // namespace rdmaflow::strategies::ps

// File: ps_graph.cc
#include "strategies/ps/ps_graph.h"

#include "absl/strings/str_cat.h"
#include "graph_analyzer/graph_builder.h"

namespace rdmaflow::strategies::ps {

std::string GradTensor(int worker, int server) {
  return absl::StrCat("w", worker, "/grad", server, ":0");
}

std::string ParamsTensor(int server) {
  return absl::StrCat("ps", server, "/params:0");
}

graph::GraphDef BuildPsGraph(int servers, int workers,
                             const std::vector<int64_t>& shard_elements,
                             const std::vector<int64_t>& push_elements, bool compressed,
                             bool pull_by_read) {
  graph::GraphBuilder b("parameter_server");
  b.SetWorldSize(servers + workers);
  std::vector<std::string> params(servers);
  for (int s = 0; s < servers; ++s) {
    b.SetRank(s);
    params[s] = b.Variable(absl::StrCat("ps", s, "/params"), graph::DT_FLOAT32,
                           {shard_elements[s]});
  }
  for (int w = 0; w < workers; ++w) {
    for (int s = 0; s < servers; ++s) {
      b.SetRank(servers + w);
      const std::string grad = b.Variable(absl::StrCat("w", w, "/grad", s),
                                          graph::DT_FLOAT32, {push_elements[s]});
      if (!pull_by_read) {
        b.Op(absl::StrCat("w", w, "/params", s), "Identity", {params[s]});
      }
      b.SetRank(s);
      if (!compressed) {
        b.Op(absl::StrCat("ps", s, "/apply_w", w), "ApplyGradient", {params[s], grad});
      } else {
        // A codec's message: the server reads it (and decodes it into a
        // gradient of its shard, which never crosses again).
        b.Op(absl::StrCat("ps", s, "/decode_w", w), "Identity", {grad});
      }
    }
  }
  return std::move(b).Build();
}

}  // namespace rdmaflow::strategies::ps

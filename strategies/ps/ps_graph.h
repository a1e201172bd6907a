// File: ps_graph.h
// -----------------------------------------------------------------------------
// The tensors a parameter server job exchanges, as a GraphDef for the graph
// analyzer. Ranks 0..S-1 are servers, S..S+W-1 workers (worker w is rank
// S + w). Per (worker w, server s):
//   w<w>/grad<s>       float[n_s] on the worker (or, with a codec, as many
//                      as its largest message takes, read by the server's
//                      ps<s>/decode_w<w>, an Identity), consumed by the server's
//                      ps<s>/apply_w<w> (ApplyGradient): a push into a static
//                      slot of its own on the server;
//                      With overlap=on, one such tensor per slice k of the
//                      shard (slices.h): w<w>/grad<s>_<k>, with ps<s>/apply_w<w>_<k>.
//   ps<s>/params       with pull=send only, sent to each worker (consumed by
//                      its w<w>/params<s>, an Identity). With pull=read they
//                      never cross in the plan: workers READ them from the
//                      server's versioned buffer.
// `on_device` (device parameters): every node keeps its outputs in device
// memory, so each push lands in a device slot on its server.
#ifndef RDMAFLOW_STRATEGIES_PS_PS_GRAPH_H_
#define RDMAFLOW_STRATEGIES_PS_PS_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::strategies::ps {

// "w1/grad0:0"; slice k of a sliced shard: "w1/grad0_3:0".
std::string GradTensor(int worker, int server, int slice = -1);
std::string ParamsTensor(int server);  // "ps0/params:0"

// `push_elements[s]`: the float32 elements of each push to server s, one
// per slice of its shard: the shard's (one push), the slices' (`sliced`),
// or with a codec, `compressed`, its largest message's.
graph::GraphDef BuildPsGraph(int servers, int workers,
                             const std::vector<int64_t>& shard_elements,
                             const std::vector<std::vector<int64_t>>& push_elements,
                             bool sliced, bool compressed, bool pull_by_read,
                             bool on_device = false);

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_PS_GRAPH_H_

// File: partition.cc
#include "graph_analyzer/partition.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::graph {
namespace {

// Key of a transfer while collecting: (producer output, destination rank).
struct TransferKey {
  OutputId tensor;
  int dst_rank;

  friend bool operator==(const TransferKey& a, const TransferKey& b) {
    return a.tensor == b.tensor && a.dst_rank == b.dst_rank;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TransferKey& k) {
    return H::combine(std::move(h), k.tensor, k.dst_rank);
  }
};

std::vector<Transfer> CollectTransfers(const AnalyzedGraph& graph) {
  absl::flat_hash_map<TransferKey, int> index;
  std::vector<Transfer> transfers;
  for (int node : graph.schedule()) {
    const AnalyzedNode& consumer = graph.node(node);
    for (const OutputId& in : consumer.inputs) {
      const AnalyzedNode& producer = graph.node(in.node);
      if (producer.rank == consumer.rank) continue;
      auto [it, inserted] =
          index.emplace(TransferKey{in, consumer.rank}, transfers.size());
      if (inserted) {
        Transfer t;
        t.tensor = in;
        t.src_rank = producer.rank;
        t.dst_rank = consumer.rank;
        t.live_begin = producer.position;
        transfers.push_back(t);
      }
      Transfer& t = transfers[it->second];
      // A node may read the same tensor twice; list it once.
      if (t.consumers.empty() || t.consumers.back() != node) {
        t.consumers.push_back(node);
      }
      t.live_end = consumer.position;
    }
  }
  std::sort(transfers.begin(), transfers.end(),
            [](const Transfer& a, const Transfer& b) {
              return std::tie(a.src_rank, a.dst_rank, a.live_begin,
                              a.tensor.output) <
                     std::tie(b.src_rank, b.dst_rank, b.live_begin,
                              b.tensor.output);
            });
  return transfers;
}

std::string SendNodeName(const std::string& node, int output, int dst) {
  return absl::StrCat("_send/", node, "/", output, "/to/", dst);
}

void AddSend(const AnalyzedGraph& graph, const Transfer& t, int id,
             GraphDef& out) {
  const std::string& name = graph.def(t.tensor.node).name();
  NodeDef* send = out.add_node();
  send->set_name(SendNodeName(name, t.tensor.output, t.dst_rank));
  send->set_op("Send");
  send->add_input(absl::StrCat(name, ":", t.tensor.output));
  send->set_rank(t.src_rank);
  (*send->mutable_attr())["dst_rank"].set_i(t.dst_rank);
  (*send->mutable_attr())["transfer_id"].set_i(id);
}

void AddRecv(const AnalyzedGraph& graph, const Transfer& t, int id,
             GraphDef& out) {
  NodeDef* recv = out.add_node();
  recv->set_name(
      RecvNodeName(graph.def(t.tensor.node).name(), t.tensor.output));
  recv->set_op("Recv");
  *recv->add_output() = graph.spec(t.tensor);
  recv->set_rank(t.dst_rank);
  (*recv->mutable_attr())["src_rank"].set_i(t.src_rank);
  (*recv->mutable_attr())["transfer_id"].set_i(id);
}

}  // namespace

std::string RecvNodeName(const std::string& node, int output) {
  return absl::StrCat("_recv/", node, "/", output);
}

Partition PartitionGraph(const AnalyzedGraph& graph) {
  Partition p;
  p.transfers = CollectTransfers(graph);
  p.rank_graphs.resize(graph.world_size());
  for (int r = 0; r < graph.world_size(); ++r) {
    p.rank_graphs[r].set_name(absl::StrCat(graph.graph().name(), "/rank", r));
    p.rank_graphs[r].set_world_size(graph.world_size());
  }
  // Sends by producer, Recvs by first consumer, in id order.
  absl::flat_hash_map<int, std::vector<int>> sends_after;
  absl::flat_hash_map<int, std::vector<int>> recvs_before;
  for (int id = 0; id < static_cast<int>(p.transfers.size()); ++id) {
    const Transfer& t = p.transfers[id];
    sends_after[t.tensor.node].push_back(id);
    recvs_before[t.consumers.front()].push_back(id);
  }
  for (int node : graph.schedule()) {
    const AnalyzedNode& n = graph.node(node);
    GraphDef& out = p.rank_graphs[n.rank];
    if (auto it = recvs_before.find(node); it != recvs_before.end()) {
      for (int id : it->second) AddRecv(graph, p.transfers[id], id, out);
    }
    NodeDef* copy = out.add_node();
    *copy = graph.def(node);
    copy->clear_output();
    for (const TensorSpec& spec : n.outputs) *copy->add_output() = spec;
    for (int k = 0; k < copy->input_size(); ++k) {
      const OutputId& in = n.inputs[k];
      if (graph.node(in.node).rank != n.rank) {
        copy->set_input(k, absl::StrCat(RecvNodeName(
                                            graph.def(in.node).name(),
                                            in.output),
                                        ":0"));
      }
    }
    if (auto it = sends_after.find(node); it != sends_after.end()) {
      for (int id : it->second) AddSend(graph, p.transfers[id], id, out);
    }
  }
  return p;
}

}  // namespace rdmaflow::graph

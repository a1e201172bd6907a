// File: partition.h
// -----------------------------------------------------------------------------
// PartitionGraph: splits an analyzed graph by rank. Every tensor consumed on
// another rank becomes one Transfer per (tensor, destination rank) -- never
// two for the same destination, however many nodes there read it -- and each
// rank gets its own GraphDef where a `Send` follows the producer and a `Recv`
// precedes the first consumer.
#ifndef RDMAFLOW_GRAPH_ANALYZER_PARTITION_H_
#define RDMAFLOW_GRAPH_ANALYZER_PARTITION_H_

#include <string>
#include <vector>

#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/graph.pb.h"

namespace rdmaflow::graph {

// One Send/Recv pair.
struct Transfer {
  OutputId tensor;
  int src_rank = 0;
  int dst_rank = 0;
  std::vector<int> consumers;  // Nodes on dst_rank, in schedule order.
  int live_begin = 0;          // Schedule position of the producer.
  int live_end = 0;            // Schedule position of the last consumer.
};

struct Partition {
  // Ordered by (src_rank, dst_rank, live_begin, output): an index here is the
  // transfer's id (the `transfer_id` attribute of its Send and Recv).
  std::vector<Transfer> transfers;
  // One per rank. Nodes keep their names and declare their inferred outputs;
  // an input from another rank names the Recv instead. Sends are called
  // "_send/<node>/<k>/to/<dst>", Recvs "_recv/<node>/<k>".
  std::vector<GraphDef> rank_graphs;
};

Partition PartitionGraph(const AnalyzedGraph& graph);

// The name PartitionGraph gives the Recv of `tensor` ("node:k" form allowed).
std::string RecvNodeName(const std::string& node, int output);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_PARTITION_H_

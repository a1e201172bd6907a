// File: planner.h
// -----------------------------------------------------------------------------
// The planner: from an analyzed, partitioned graph to a TransferPlan
// (plan.proto). Per directed link, one receive region on the destination;
// per transfer, a slot in it: static (the tensor's bytes) when its spec is
// fully known, dynamic (a metadata slot) otherwise. Slots are aligned, may
// share memory when never live together (slot_allocator.h), and the region
// holds `pipeline_depth` stages so step t+1 can arrive while step t is read.
//
//   ASSIGN_OR_RETURN(TransferPlan plan, PlanGraph(std::move(graph), {}));
#ifndef RDMAFLOW_GRAPH_ANALYZER_PLANNER_H_
#define RDMAFLOW_GRAPH_ANALYZER_PLANNER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::graph {

struct PlannerOptions {
  // Slot offsets and stage sizes are multiples of this: a power of two,
  // 64 (a cache line) .. 1 GiB. 4096 page-aligns every slot.
  uint64_t alignment = 64;
  // Buffers per slot, 1 .. 16; 2 or more lets the sender write step t+1 while
  // the receiver still reads step t. 1 is for ablations.
  int pipeline_depth = 2;
  // Size of a dynamic tensor's metadata slot: a multiple of 8, 64 .. 4096.
  // It holds 4 words (sequence, byte count, source offset, rank) and one word
  // per dimension.
  uint64_t metadata_bytes = 128;
  // Let slots that are never live together share memory.
  bool share_slots = true;
  // ... but only slots of at least this many bytes (<= 1 GiB): a shared
  // slot costs the sender a wait for the receiver's release of its earlier
  // tensor, and small slots save little memory. 64 tensors of 4-64 KiB
  // stepped 2.4x slower shared than not (bench/ablation small_tensors).
  uint64_t min_shared_bytes = uint64_t{256} << 10;
};

// kInvalidArgument naming the bad option.
absl::Status CheckPlannerOptions(const PlannerOptions& options);

// Builds the plan for `graph`, partitioned as `partition` (from
// PartitionGraph(graph)). kInvalidArgument for bad options, a dynamic tensor
// of too high a rank for the metadata slot, or a region too large to
// register.
absl::StatusOr<plan::TransferPlan> BuildPlan(const AnalyzedGraph& graph,
                                             const Partition& partition,
                                             const PlannerOptions& options);

// AnalyzeGraph + PartitionGraph + BuildPlan.
absl::StatusOr<plan::TransferPlan> PlanGraph(GraphDef graph,
                                             const PlannerOptions& options);

// (Re)computes every slot offset, stage and region size and the per-rank
// summaries from the slots' kinds, sizes and live intervals and
// `plan.config()`. BuildPlan and re-planning (tracing.h) both end here.
absl::Status LayoutPlan(plan::TransferPlan& plan);

// The options a plan was built with.
PlannerOptions OptionsFromConfig(const plan::PlannerConfig& config);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_PLANNER_H_

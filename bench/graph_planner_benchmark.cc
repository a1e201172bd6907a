// File: graph_planner_benchmark.cc
// -----------------------------------------------------------------------------
// Planning time and registered bytes of the graph analyzer on large graphs:
// a generated graph of 10k nodes over 8 ranks, ResNet-50 (161 parameter
// tensors, 25.6 M parameters) in parameter-server form, both as a hand-made
// exchange graph and as the whole training step of an imported model, and up to 100k
// transfers on a single link (one region for the slot layout). Each
// benchmark reports its stages separately (analyze = validate + infer
// shapes, partition, plan) and counters for transfers and registered bytes.
//
//   bazel run -c opt //bench:graph_planner_benchmark --
//       --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/placement.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/training_graph.h"
#include "graph_analyzer/testing/generated_graphs.h"

namespace rdmaflow::graph {
namespace {

GraphDef RandomGraphOfSize(int nodes) {
  testing::RandomGraphOptions options;
  options.num_nodes = nodes;
  options.world_size = 8;
  return testing::RandomGraph(options, 1);
}

GraphDef RandomGraph10k() { return RandomGraphOfSize(10000); }

void ReportPlan(benchmark::State& state, const plan::TransferPlan& p) {
  int transfers = 0;
  int dynamic = 0;
  for (const auto& link : p.link()) {
    transfers += link.slot_size();
    for (const auto& slot : link.slot()) dynamic += slot.kind() == plan::DYNAMIC;
  }
  uint64_t receive = 0;
  // Pairs of slots of one region live at the same time: what greedy by size
  // costs (slot_allocator.h).
  uint64_t live_pairs = 0;
  for (const auto& link : p.link()) {
    receive += link.region_bytes() + link.device_region_bytes();
    std::vector<std::pair<int, int>> live;  // (begin, end), by begin.
    for (const auto& slot : link.slot()) {
      live.emplace_back(slot.live_begin(), slot.live_end());
    }
    std::sort(live.begin(), live.end());
    std::vector<int> begins;
    for (const auto& [begin, end] : live) begins.push_back(begin);
    for (size_t k = 0; k < live.size(); ++k) {
      // The later slots that begin no later than this one ends.
      live_pairs += std::upper_bound(begins.begin() + k + 1, begins.end(),
                                     live[k].second) -
                    (begins.begin() + k + 1);
    }
  }
  uint64_t registered = 0;
  uint64_t max_rank = 0;
  for (const auto& r : p.rank()) {
    registered += r.registered_bytes();
    max_rank = std::max<uint64_t>(max_rank, r.registered_bytes());
  }
  state.counters["links"] = p.link_size();
  state.counters["transfers"] = transfers;
  state.counters["dynamic"] = dynamic;
  state.counters["receive_MiB"] = receive / 1048576.0;
  state.counters["live_pairs"] = live_pairs;
  state.counters["registered_MiB"] = registered / 1048576.0;
  state.counters["max_rank_MiB"] = max_rank / 1048576.0;
}

// The whole pipeline, from a GraphDef to a TransferPlan.
void PlanEndToEnd(benchmark::State& state, const GraphDef& graph,
                  bool share) {
  PlannerOptions options;
  options.share_slots = share;
  plan::TransferPlan last;
  for (auto _ : state) {
    absl::StatusOr<plan::TransferPlan> p = PlanGraph(graph, options);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      return;
    }
    last = *std::move(p);
  }
  state.counters["nodes"] = graph.node_size();
  ReportPlan(state, last);
}

// Scaling with graph size (8 ranks), with and without slot sharing.
void BM_PlanRandom(benchmark::State& state) {
  PlanEndToEnd(state, RandomGraphOfSize(state.range(0)), state.range(1) != 0);
}
BENCHMARK(BM_PlanRandom)
    ->ArgNames({"nodes", "share"})
    ->ArgsProduct({{1000, 2500, 5000, 10000, 20000}, {1, 0}})
    ->Unit(benchmark::kMillisecond);

void BM_PlanResNet50PS(benchmark::State& state) {
  PlanEndToEnd(state,
               testing::ResNet50ParameterServer(state.range(0), state.range(1)),
               true);
}
BENCHMARK(BM_PlanResNet50PS)
    ->ArgNames({"workers", "servers"})
    ->Args({2, 1})
    ->Args({8, 2})
    ->Args({32, 4})
    ->Unit(benchmark::kMillisecond);

// ResNet-50 as a model importer gives it (a trace of the forward pass at
// batch 32), turned into its training step, placed for a parameter server
// and planned: the path of `rdmaflow plan MODEL.pt --strategy ps:...`
// after the import, every stage inside the timing.
void BM_PlanResNet50Model(benchmark::State& state) {
  const ModelTrace trace = testing::ResNet50Trace(32);
  PlacementSpec spec;
  spec.strategy = "ps";
  spec.workers = static_cast<int>(state.range(0));
  spec.servers = static_cast<int>(state.range(1));
  plan::TransferPlan last;
  int nodes = 0;
  for (auto _ : state) {
    absl::StatusOr<GraphDef> step = BuildTrainingGraph(trace);
    absl::StatusOr<GraphDef> placed =
        step.ok() ? PlaceTrainingGraph(*step, spec) : step.status();
    absl::StatusOr<plan::TransferPlan> p =
        placed.ok() ? PlanGraph(*placed, PlannerOptions{}) : placed.status();
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      return;
    }
    nodes = placed->node_size();
    last = *std::move(p);
  }
  state.counters["nodes"] = nodes;
  ReportPlan(state, last);
}
BENCHMARK(BM_PlanResNet50Model)
    ->ArgNames({"workers", "servers"})
    ->Args({2, 1})
    ->Args({8, 2})
    ->Unit(benchmark::kMillisecond);

// Every transfer on one link, so that one region holds them all: short
// lifetimes (each tensor is read again within 32 transfers), or all live
// together until the end. With and without slot sharing.
GraphDef OneLink(benchmark::State& state) {
  testing::OneLinkGraphOptions options;
  options.transfers = static_cast<int>(state.range(0));
  options.all_live = state.range(1) != 0;
  return testing::OneLinkGraph(options, 1);
}

void BM_PlanOneLink(benchmark::State& state) {
  PlanEndToEnd(state, OneLink(state), state.range(2) != 0);
}
BENCHMARK(BM_PlanOneLink)
    ->ArgNames({"transfers", "all_live", "share"})
    ->ArgsProduct({{16000, 100000}, {0, 1}, {1, 0}})
    ->Unit(benchmark::kMillisecond);

// The slot layout alone (LayoutPlan over the plan of the graph above).
void BM_LayoutOneLink(benchmark::State& state) {
  PlannerOptions options;
  options.share_slots = state.range(2) != 0;
  absl::StatusOr<plan::TransferPlan> p = PlanGraph(OneLink(state), options);
  if (!p.ok()) {
    state.SkipWithError(std::string(p.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    absl::Status laid_out = LayoutPlan(*p);
    if (!laid_out.ok()) {
      state.SkipWithError(std::string(laid_out.message()).c_str());
      return;
    }
  }
  ReportPlan(state, *p);
}
BENCHMARK(BM_LayoutOneLink)
    ->ArgNames({"transfers", "all_live", "share"})
    ->ArgsProduct({{16000, 100000}, {0, 1}, {1, 0}})
    ->Unit(benchmark::kMillisecond);

// Stages of the 10k-node pipeline on their own: 0 analyze (validate,
// schedule, shapes), 1 partition, 2 build the plan.
void BM_StageRandom10k(benchmark::State& state) {
  GraphDef graph = RandomGraph10k();
  absl::StatusOr<AnalyzedGraph> g = AnalyzeGraph(graph);
  if (!g.ok()) {
    state.SkipWithError(std::string(g.status().message()).c_str());
    return;
  }
  Partition partition = PartitionGraph(*g);
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        benchmark::DoNotOptimize(AnalyzeGraph(graph));
        break;
      case 1:
        benchmark::DoNotOptimize(PartitionGraph(*g));
        break;
      default:
        benchmark::DoNotOptimize(BuildPlan(*g, partition, PlannerOptions{}));
    }
  }
}
BENCHMARK(BM_StageRandom10k)
    ->ArgName("stage")
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace rdmaflow::graph

// main(): bench/benchmark_main.cc.

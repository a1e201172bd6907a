// File: fuzz_target.cc
#include "graph_analyzer/fuzz/fuzz_target.h"

#include "absl/container/flat_hash_set.h"

#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/dot_writer.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/plan_printer.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/text_io.h"
#include "graph_analyzer/tracing.h"

namespace rdmaflow::graph::fuzz {

Outcome RunOneInput(const std::string& text) {
  if (text.size() > kMaxInputBytes) return Outcome::kTooLong;
  GraphDef graph;
  if (!ParseTextProto(text, "fuzz", &graph).ok()) return Outcome::kParseError;
  absl::StatusOr<AnalyzedGraph> analyzed = AnalyzeGraph(graph);
  if (!analyzed.ok()) return Outcome::kInvalidGraph;
  Partition partition = PartitionGraph(*analyzed);
  PlannerOptions options;
  options.pipeline_depth = 1 + text.size() % 3;
  absl::StatusOr<plan::TransferPlan> plan =
      BuildPlan(*analyzed, partition, options);
  if (!plan.ok()) return Outcome::kPlanError;
  // Exercise the printers and a trace that observes each dynamic tensor with
  // its unknown dimensions set to 3.
  FormatPlan(*plan);
  GraphToDot(*analyzed);
  plan::SizeTrace trace;
  absl::flat_hash_set<std::string> traced;
  for (const plan::LinkRegion& link : plan->link()) {
    for (const plan::TensorSlot& slot : link.slot()) {
      // A tensor sent to several ranks is traced once (twice is an error).
      if (slot.kind() != plan::DYNAMIC || !traced.insert(slot.tensor()).second) {
        continue;
      }
      plan::SizeTrace::Observation* obs = trace.add_observation();
      obs->set_tensor(slot.tensor());
      for (int step = 0; step < 2; ++step) {
        auto* shape = obs->add_step();
        for (int64_t d : slot.spec().shape()) shape->add_dim(d < 0 ? 3 : d);
      }
    }
  }
  PromoteStableTensors(*plan, trace).IgnoreError();
  return Outcome::kPlanned;
}

}  // namespace rdmaflow::graph::fuzz

// File: tracing.h
// -----------------------------------------------------------------------------
// Dynamic tracing: the runtime records the shapes of dynamic tensors over the
// first steps (a SizeTrace, plan.proto); PromoteStableTensors re-plans, giving
// every dynamic tensor whose shape was the same at every traced step a static
// slot of that shape, so later steps move it with one write and no metadata.
// The plan lists what it promoted (`promoted_tensor`, `TensorSlot.promoted`).
#ifndef RDMAFLOW_GRAPH_ANALYZER_TRACING_H_
#define RDMAFLOW_GRAPH_ANALYZER_TRACING_H_

#include "absl/status/statusor.h"
#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::graph {

struct TracingOptions {
  // A tensor must have been seen at least this many steps to be promoted.
  int min_steps = 2;
};

// Returns the re-planned plan. Tensors seen fewer than `min_steps` times or
// with changing shapes stay dynamic. kInvalidArgument when the trace names a
// tensor the plan does not transfer, or an observed shape contradicts the
// tensor's spec (another rank, a known dimension that differs, a dimension
// that is not positive) -- for a static tensor too: that means the graph is
// wrong.
absl::StatusOr<plan::TransferPlan> PromoteStableTensors(
    const plan::TransferPlan& plan, const plan::SizeTrace& trace,
    const TracingOptions& options = {});

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_TRACING_H_

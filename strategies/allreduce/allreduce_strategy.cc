// File: allreduce_strategy.cc
#include "strategies/allreduce/allreduce_strategy.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/gradient_order.h"
#include "graph_analyzer/graph_builder.h"
#include "strategies/allreduce/forward_buckets.h"
#include "strategies/device_tensors.h"
#include "strategies/strategy_params.h"

namespace rdmaflow::strategies {

absl::StatusOr<std::unique_ptr<AllReduceStrategy>> AllReduceStrategy::Create(
    const StrategyOptions& options) {
  DataParallelOptions group;
  StrategyParams params("allreduce", options.params);
  RETURN_IF_ERROR(params.Size("bucket_bytes", 0, &group.bucket_bytes));
  RETURN_IF_ERROR(params.Size("chunk_bytes", 64, &group.chunk_bytes));
  RETURN_IF_ERROR(params.Int("slots", 1, &group.slots));
  std::string overlap = "on";
  RETURN_IF_ERROR(params.Choice("overlap", {"on", "off", "forward"}, &overlap));
  // forward_bytes=auto is the default budget (forward_buckets.h).
  int64_t forward_bytes = kAutoBudget;
  RETURN_IF_ERROR(params.SizeOrAuto("forward_bytes", 0, kAutoBudget, &forward_bytes));
  if (options.params.count("forward_bytes") > 0 && overlap != "forward") {
    return absl::InvalidArgumentError(absl::StrCat(
        "allreduce: forward_bytes is the budget of overlap=forward; with overlap=", overlap,
        " nothing is deferred (drop it, or set overlap=forward)"));
  }
  RETURN_IF_ERROR(params.Done());
  RETURN_IF_ERROR(CheckTrainingOptions("allreduce", options.steps,
                                       options.learning_rate, options.momentum));
  if (overlap == "forward" && !options.codec.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allreduce: overlap=forward all-reduces the gradients in buckets while the next "
        "forward runs; codec '", options.codec,
        "' sends them whole after backward (use overlap=on or drop the codec)"));
  }
  group.name = "allreduce/grads";
  group.timeout = options.communicator_options.timeout;
  group.codec = options.codec;
  return std::unique_ptr<AllReduceStrategy>(
      new AllReduceStrategy(options, std::move(group), overlap != "off", overlap == "forward",
                            forward_bytes));
}

absl::Status AllReduceStrategy::OrderAsPlanned(const graph::GraphDef& model) {
  absl::StatusOr<std::vector<graph::ReadyGradient>> order = graph::GradientReadyOrder(model);
  if (!order.ok()) {
    return absl::Status(order.status().code(),
                        absl::StrCat("allreduce: the order of the model's gradients: ",
                                     order.status().message()));
  }
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!index.emplace(parameters_[i].name, i).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allreduce: two parameters are named '", parameters_[i].name,
          "'; the plan tells them apart by name"));
    }
  }
  std::vector<Parameter> ordered;
  for (const graph::ReadyGradient& g : *order) {
    const auto it = index.find(g.parameter);
    if (it == index.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "allreduce: the model's plan has a gradient for '", g.parameter,
          "', which the model does not name among its parameters"));
    }
    const Parameter& p = parameters_[it->second];
    if (p.tensor.numel() != g.elements) {
      return absl::FailedPreconditionError(absl::StrCat(
          "allreduce: parameter '", p.name, "' has ", p.tensor.numel(),
          " elements, its gradient in the model's plan ", g.elements));
    }
    ordered.push_back(p);
    index.erase(it);
  }
  // Parameters backward never reaches (unused by forward) come last, in the
  // model's order.
  for (const Parameter& p : parameters_) {
    if (index.contains(p.name)) ordered.push_back(p);
  }
  parameters_ = std::move(ordered);
  return absl::OkStatus();
}

std::vector<std::string> AllReduceStrategy::gradient_order() const {
  std::vector<std::string> names;
  for (const Parameter& p : parameters_) names.push_back(p.name);
  return names;
}

absl::StatusOr<graph::GraphDef> AllReduceStrategy::DoPrepare(std::vector<Parameter> parameters) {
  const int world = context().world_size;
  if (forward_) RETURN_IF_ERROR(CheckForwardContext());
  parameters_ = std::move(parameters);
  if (context().model != nullptr) {
    RETURN_IF_ERROR(OrderAsPlanned(*context().model));
  } else {
    // Without a plan, DDP's guess: backward runs the model backwards, so
    // the last parameters' gradients come first.
    std::reverse(parameters_.begin(), parameters_.end());
  }
  // Declared: each replica's fused gradients, and what one ring step moves
  // to the next rank (a piece written into its staging slot).
  int64_t elements = 0;
  for (const Parameter& p : parameters_) elements += p.tensor.numel();
  const int64_t piece = std::min<int64_t>(group_options_.chunk_bytes / 4,
                                          std::max<int64_t>(elements, 1));
  graph::GraphBuilder b("allreduce");
  b.SetWorldSize(world);
  for (int r = 0; r < world; ++r) {
    b.SetRank(r);
    b.Variable(absl::StrCat("r", r, "/grads"), graph::DT_FLOAT32, {std::max<int64_t>(elements, 1)});
    const std::string out = b.Variable(absl::StrCat("r", r, "/piece"), graph::DT_FLOAT32, {piece});
    if (world > 1) {
      b.SetRank((r + 1) % world);
      b.Op(absl::StrCat("r", (r + 1) % world, "/from_r", r), "Identity", {out});
    }
  }
  return std::move(b).Build();
}

absl::Status AllReduceStrategy::DoStart() {
  std::vector<int> members;
  for (int r = 0; r < context().world_size; ++r) members.push_back(r);
  DataParallelOptions group = group_options_;
  group.device = context().device;
  ASSIGN_OR_RETURN(group_, DataParallelGroup::Create(links(), members, parameters_, group));
  on_device_ = group_->on_device();
  // A codec sends the fused gradients whole: nothing to pipeline then. On
  // a device, backward's hooks run once the kernels that write a gradient
  // are queued: each bucket waits for an event recorded then.
  if (forward_) {
    RETURN_IF_ERROR(StartForwardOverlap());
  } else if (overlap_ && group_->reduces_in_buckets()) {
    ASSIGN_OR_RETURN(pipeline_, BucketPipeline::Create(*group_, links().loop()));
  }
  if (pipeline_ != nullptr && group_->on_device()) {
    const c10::Device where = TensorDeviceOf(context().device);
    pipeline_->set_ready_marks([where](size_t) { return MarkTorchWork(where); },
                               options().communicator_options.timeout);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepReport> AllReduceStrategy::DoStep(const ComputeFn& compute) {
  if (forward_) return ForwardOverlapStep();
  StepReport report;
  report.clock = clock();
  report.min_clock = clock();
  group_->ZeroGradients();
  if (pipeline_ != nullptr) {
    // Buckets all-reduced while backward runs: the step waits for what is
    // still in flight when it ends.
    ASSIGN_OR_RETURN(PipelinedStep step, pipeline_->Run(compute));
    const absl::Time reduced = absl::Now();
    report.compute = step.compute;
    report.Add(StepSpan::Kind::kCompute, step.compute_begin, step.compute_end);
    for (const PipelinedStep::Span& bucket : step.buckets) {
      report.Add(StepSpan::Kind::kCommunication, bucket.begin, bucket.end);
    }
    if (reduced > step.compute_end) {
      report.Add(StepSpan::Kind::kWait, step.compute_end, reduced);
    }
    overlapped_buckets_ += step.overlapped;
    group_->ScaleGradients(1.0 / context().world_size);
  } else {
    const absl::Time begin = absl::Now();
    ASSIGN_OR_RETURN(report.compute, compute());
    const absl::Time computed = absl::Now();
    RETURN_IF_ERROR(group_->AllReduceGradients(1.0 / context().world_size, options().momentum));
    report.Add(StepSpan::Kind::kCompute, begin, computed);
    report.Add(StepSpan::Kind::kCommunication, computed, absl::Now());
  }
  group_->ApplySgd(options().learning_rate, options().momentum);
  return report;
}

absl::Status AllReduceStrategy::DoFinish(bool after_failure) {
  // After a failure the ring cancels what it posted as it goes. Else the
  // head's buckets overlap=forward left for a next step are applied first.
  absl::Status status = after_failure ? absl::OkStatus() : FlushDeferred();
  if (!after_failure && status.ok()) status = group_->Shutdown();
  final_stats_ = group_->stats();
  final_compression_ = group_->compression();
  pipeline_.reset();  // its hooks before the group they report to
  group_.reset();  // the gradients point back at their own memory
  return status;
}

compression::CompressionStats AllReduceStrategy::compression() const {
  return group_ != nullptr ? group_->compression() : final_compression_;
}

runtime::TransferCounters AllReduceStrategy::counters() const {
  runtime::TransferCounters counters;
  const collectives::RingAllReduceStats stats =
      group_ != nullptr ? group_->stats() : final_stats_;
  counters.steps = clock();
  counters.tensors_sent = stats.messages;
  counters.bytes_sent = stats.bytes_sent;
  return counters;
}

}  // namespace rdmaflow::strategies

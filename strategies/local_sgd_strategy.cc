// File: local_sgd_strategy.cc
#include "strategies/local_sgd_strategy.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "strategies/device_tensors.h"

namespace rdmaflow::strategies {

absl::Status LocalSgdStrategy::Adopt(std::vector<Parameter> parameters, int min_ranks) {
  if (context().world_size < min_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), " needs at least ", min_ranks, " ranks, the job has ", context().world_size));
  }
  // On the device of device parameters (StrategyContext::device), where
  // the strategy takes them.
  ASSIGN_OR_RETURN(replica_, LocalSgd::Create(name(), std::move(parameters),
                                              TensorDeviceOf(context().device)));
  return absl::OkStatus();
}

absl::StatusOr<StepReport> LocalSgdStrategy::DoStep(const ComputeFn& compute) {
  StepReport report;
  report.clock = report.min_clock = clock();
  replica_->ZeroGradients();
  const absl::Time begin = absl::Now();
  ASSIGN_OR_RETURN(report.compute, compute());
  replica_->Step(options().learning_rate, options().momentum);
  const absl::Time computed = absl::Now();
  report.Add(StepSpan::Kind::kCompute, begin, computed);
  RETURN_IF_ERROR(FinishExchange(report));
  if ((clock() + 1) % period_ == 0) RETURN_IF_ERROR(Exchange());
  report.Add(StepSpan::Kind::kCommunication, computed, absl::Now());
  return report;
}

runtime::TransferCounters LocalSgdStrategy::counters() const {
  runtime::TransferCounters counters = counters_;
  counters.steps = clock();
  return counters;
}

}  // namespace rdmaflow::strategies

// File: local_sgd_strategy.cc
#include "strategies/local_sgd_strategy.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies {

absl::Status LocalSgdStrategy::Adopt(const StrategyContext& context,
                                     std::vector<Parameter> parameters, int min_ranks) {
  if (context.transport == nullptr || context.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), " needs a transport and a store"));
  }
  if (context.world_size < min_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), " needs at least ", min_ranks, " ranks, the job has ", context.world_size));
  }
  ASSIGN_OR_RETURN(replica_, LocalSgd::Create(name(), std::move(parameters)));
  context_ = context;
  return absl::OkStatus();
}

absl::StatusOr<StepReport> LocalSgdStrategy::Step(const ComputeFn& compute) {
  if (!started_) {
    return absl::FailedPreconditionError(absl::StrCat(name(), ": Step() before Start()"));
  }
  if (done()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name(), " rank ", context_.rank, " already ran its ", options_.steps, " steps"));
  }
  StepReport report;
  report.clock = report.min_clock = clock_;
  replica_->ZeroGradients();
  const absl::Time begin = absl::Now();
  ASSIGN_OR_RETURN(report.compute, compute());
  replica_->Step(options_.learning_rate, options_.momentum);
  const absl::Time computed = absl::Now();
  if ((clock_ + 1) % period_ == 0) RETURN_IF_ERROR(Exchange());
  report.compute_time = computed - begin;
  report.comm_time = absl::Now() - computed;
  ++clock_;
  counters_.steps = clock_;
  return report;
}

}  // namespace rdmaflow::strategies

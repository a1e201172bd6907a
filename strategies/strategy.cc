// File: strategy.cc
// The Strategy base's state machine (see the table in strategy.h).
#include "strategies/strategy.h"

#include <cstdio>
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/device/device_transport.h"
#include "strategies/exception_text.h"

namespace rdmaflow::strategies {

std::string Strategy::Where() const {
  return absl::StrCat(name(), " rank ", context_.rank);
}

std::string Strategy::Who() const {
  return phase_ == Phase::kNew ? name() : Where();
}

absl::Status Strategy::Refuse(absl::string_view call, absl::string_view why) const {
  return absl::FailedPreconditionError(absl::StrCat(Who(), ": ", call, " ", why));
}

absl::Status Strategy::Unusable() const {
  return absl::FailedPreconditionError(absl::StrCat(Where(), " is unusable after a failed ",
                                                    failed_in_start_ ? "Start()" : "step",
                                                    ": ", failure_.ToString()));
}

template <typename F>
auto Strategy::Guarded(absl::string_view what, F&& run) const -> decltype(run()) {
  // The model's own code (LibTorch, a user's TorchScript) throws; no
  // exception may leave the strategy.
  try {
    return run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(Where(), ": ", what, " threw: ", ExceptionText(e)));
  }
}

absl::StatusOr<graph::GraphDef> Strategy::Prepare(const StrategyContext& context,
                                                  std::vector<Parameter> parameters) {
  if (phase_ != Phase::kNew) return Refuse("Prepare()", "called twice");
  if (context.transport == nullptr || context.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), " needs a transport and a store (StrategyContext::transport, ::store)"));
  }
  if (context.device != nullptr) {
    if (!takes_device_parameters()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), " exchanges host parameters only: pass StrategyContext::device null (the "
          "harness stages a device model's parameters through host memory for it)"));
    }
    if (static_cast<rdma::Transport*>(context.device) != context.transport) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": StrategyContext::device must be the context's transport itself"));
    }
  }
  if (context.world_size < 1 || context.rank < 0 || context.rank >= context.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": rank ", context.rank,
                                                   " is not one of a job of ",
                                                   context.world_size, " ranks"));
  }
  onesided::ProgressLoopOptions loop;
  loop.name = absl::StrCat(name(), " rank ", context.rank);
  loop.wait = options_.communicator_options.wait;
  loop.liveness_interval = options_.communicator_options.liveness_interval;
  if (absl::Status valid = loop.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": ", valid.message()));
  }
  // A fresh loop and links on this thread each time: a failed DoPrepare()
  // may have left protocols registered with the last ones, which must
  // outlive them.
  if (own_.loop != nullptr) retired_.push_back(std::move(own_));
  ASSIGN_OR_RETURN(own_, onesided::MakeOwnLinks(
                             *context.transport, *context.store,
                             options_.communicator_options.ns, nullptr, loop,
                             options_.communicator_options.timeout,
                             absl::StrCat(name(), " rank ", context.rank)));
  context_ = context;
  absl::StatusOr<graph::GraphDef> graph =
      Guarded("Prepare()", [&] { return DoPrepare(std::move(parameters)); });
  if (!graph.ok()) return graph;
  absl::StatusOr<plan::TransferPlan> planned = graph::PlanGraph(*graph, planner_options());
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(Who(), ": planning the exchange it declared: ",
                                     planned.status().message()));
  }
  plan_ = *std::move(planned);
  phase_ = Phase::kPrepared;
  return graph;
}

runtime::CommunicatorOptions Strategy::communicator_options() const {
  runtime::CommunicatorOptions options = options_.communicator_options;
  options.loop = own_.loop.get();
  options.links = own_.links.get();
  return options;
}

absl::Status Strategy::Start() {
  switch (phase_) {
    case Phase::kNew:
      return Refuse("Start()", "before Prepare(): call Prepare() first");
    case Phase::kPrepared:
      break;
    case Phase::kStarted:
      return failure_.ok() ? Refuse("Start()", "called twice") : Unusable();
    case Phase::kFinished:
      return Refuse("Start()", "after Finish()");
  }
  phase_ = Phase::kStarted;
  if (absl::Status started = Guarded("Start()", [&] { return DoStart(); }); !started.ok()) {
    failure_ = started;
    failed_in_start_ = true;
    return started;
  }
  return absl::OkStatus();
}

absl::Status Strategy::CheckRunning(absl::string_view call) const {
  switch (phase_) {
    case Phase::kNew:
    case Phase::kPrepared:
      return Refuse(call, "before Start(): call Prepare() and Start() first");
    case Phase::kStarted:
      break;
    case Phase::kFinished:
      return Refuse(call, "after Finish()");
  }
  return failure_.ok() ? absl::OkStatus() : Unusable();
}

absl::StatusOr<StepReport> Strategy::Step(const ComputeFn& compute) {
  RETURN_IF_ERROR(CheckRunning("Step()"));
  if (done()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), " already ran its ", options_.steps, " steps: Step() after done()"));
  }
  if (needs_compute_fn() && !compute) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), " computes: its Step() needs a ComputeFn"));
  }
  absl::StatusOr<StepReport> report = Guarded("a step", [&] { return DoStep(compute); });
  if (!report.ok()) {
    // A pull, a push, a ring or a tensor may be half done: nothing is
    // retried on this state.
    failure_ = report.status();
    return report;
  }
  ++clock_;
  return report;
}

absl::Status Strategy::ShareModel() {
  RETURN_IF_ERROR(CheckRunning("ShareModel()"));
  if (!shares_model()) return absl::OkStatus();
  absl::Status shared = Guarded("sharing the model", [&] { return DoShareModel(); });
  if (!shared.ok()) {
    // A ring may be half done: the rank is unusable, as after a failed step.
    failure_ = absl::Status(shared.code(),
                            absl::StrCat(Where(), ": sharing the model between steps (for an "
                                         "evaluation, rdmaflow_train --eval_every): ",
                                         shared.message()));
    return failure_;
  }
  return absl::OkStatus();
}

absl::Status Strategy::Finish() {
  const bool run = phase_ == Phase::kStarted && !failed_in_start_;
  phase_ = Phase::kFinished;
  if (!run) return absl::OkStatus();  // nothing started, or finished already
  const bool after_failure = !failure_.ok();
  absl::Status status = Guarded("Finish()", [&] { return DoFinish(after_failure); });
  if (!after_failure) return status;
  if (!status.ok()) {
    std::fprintf(stderr, "%s: shutting down after a failure: %s\n", Where().c_str(),
                 status.ToString().c_str());
  }
  return failure_;
}

}  // namespace rdmaflow::strategies

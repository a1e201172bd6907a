// File: local_sgd_strategy.h
// -----------------------------------------------------------------------------
// LocalSgdStrategy: the shape of the decentralized strategies (gossip,
// moshpit). Every rank is a peer that trains its own replica (LocalSgd) and,
// every `period` steps, after its local update, exchanges with other peers
// through the subclass's Exchange(). This class owns the replica and the
// step loop; subclasses set up their exchange in Prepare()/Start().
#ifndef RDMAFLOW_STRATEGIES_LOCAL_SGD_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_LOCAL_SGD_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strategies/local_sgd.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

// Thread-compatible: one thread drives a rank's strategy.
class LocalSgdStrategy : public Strategy {
 public:
  std::string role() const override { return "peer"; }
  bool computes() const override { return true; }
  int workers() const override { return context_.world_size; }
  int worker_index() const override { return context_.rank; }
  bool done() const override { return clock_ >= options_.steps; }
  runtime::TransferCounters counters() const override { return counters_; }

  // Zero the gradients, compute, the local SGD update, and every `period`
  // steps Exchange(). kFailedPrecondition before Start() or after done().
  absl::StatusOr<StepReport> Step(const ComputeFn& compute) final;

 protected:
  LocalSgdStrategy(StrategyOptions options, int period)
      : options_(std::move(options)), period_(period) {}

  // For Prepare(): validates the context (transport, store, at least
  // `min_ranks` ranks) and moves the parameters into the replica.
  absl::Status Adopt(const StrategyContext& context, std::vector<Parameter> parameters,
                     int min_ranks);
  // For Start(): from now on Step() may run.
  void MarkStarted() { started_ = true; }
  bool started() const { return started_; }
  // For a rank that rejoins a running job: continue from step `clock`.
  void SkipTo(int64_t clock) { clock_ = clock; }
  int period() const { return period_; }

  // This peer's exchange, on the updated replica.
  virtual absl::Status Exchange() = 0;

  const StrategyOptions options_;
  StrategyContext context_;
  std::unique_ptr<LocalSgd> replica_;
  runtime::TransferCounters counters_;

 private:
  const int period_;
  int64_t clock_ = 0;
  bool started_ = false;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_LOCAL_SGD_STRATEGY_H_

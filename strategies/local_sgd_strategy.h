// File: local_sgd_strategy.h
// -----------------------------------------------------------------------------
// LocalSgdStrategy: the shape of the decentralized strategies (gossip,
// moshpit). Every rank is a peer that trains its own replica (LocalSgd) and,
// every `period` steps, after its local update, exchanges with other peers
// through the subclass's Exchange(). This class owns the replica and the
// step; subclasses set up their exchange in DoPrepare()/DoStart() (the
// Strategy base checks the order of the calls).
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
  int workers() const override { return context().world_size; }
  int worker_index() const override { return context().rank; }
  runtime::TransferCounters counters() const override;

 protected:
  LocalSgdStrategy(StrategyOptions options, int period)
      : Strategy(std::move(options)), period_(period) {}

  // Zero the gradients, compute, the local SGD update, and every `period`
  // steps Exchange().
  absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) final;

  // For DoPrepare(): checks the job has at least `min_ranks` ranks and
  // moves the parameters into the replica.
  absl::Status Adopt(std::vector<Parameter> parameters, int min_ranks);
  int period() const { return period_; }

  // This peer's exchange, on the updated replica. An overlapping exchange
  // may leave work running on a communication thread into the next
  // step's compute (communication_thread.h) and end it in
  // FinishExchange().
  virtual absl::Status Exchange() = 0;
  // Called each step after the local update, before that step's
  // Exchange(): ends what the last Exchange() left running, recording its
  // spans into `report`. Default: nothing runs.
  virtual absl::Status FinishExchange(StepReport& report) { return absl::OkStatus(); }

  std::unique_ptr<LocalSgd> replica_;
  runtime::TransferCounters counters_;  // but steps: clock()

 private:
  const int period_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_LOCAL_SGD_STRATEGY_H_

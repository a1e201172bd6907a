// File: step_tracker.h
// -----------------------------------------------------------------------------
// The step discipline every Communicator enforces: in each step, each
// transfer of the rank is sent (received) exactly once, and FinishStep()
// checks that none is missing. StepTracker keeps the counts for the
// baselines; the executor keeps them per slot and shares the messages.
#ifndef RDMAFLOW_RUNTIME_STEP_TRACKER_H_
#define RDMAFLOW_RUNTIME_STEP_TRACKER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime {

// kFailedPrecondition: `info` was already sent/received ("sent" or
// "received" as `verb`) in `step`.
absl::Status AlreadyMovedError(const TransferInfo& info, int64_t step,
                               const char* verb);
// kFailedPrecondition: `step` of `rank` ends without `info` being moved.
absl::Status NotMovedError(const TransferInfo& info, int64_t step, int rank,
                           const char* verb);

// Thread-compatible. `plan` must outlive the tracker. Free-running
// (`lockstep` false): the checks pass and each transfer counts on its own.
class StepTracker {
 public:
  StepTracker(const RankPlan* plan, bool lockstep);

  // Before moving `info` in the current step: AlreadyMovedError if it was.
  absl::Status CheckSend(const TransferInfo& info) const;
  absl::Status CheckRecv(const TransferInfo& info) const;
  void Sent(const TransferInfo& info) { ++sent_[info.id]; }
  void Received(const TransferInfo& info) { ++received_[info.id]; }
  // The sequence number of the next tensor sent (received) on `info`: the
  // step in lock-step mode, the transfer's own count when free-running.
  int64_t SendSequence(const TransferInfo& info) const { return sent_[info.id]; }
  int64_t RecvSequence(const TransferInfo& info) const {
    return received_[info.id];
  }

  // NotMovedError for the first transfer not moved in the step; else moves
  // to the next step.
  absl::Status FinishStep();
  int64_t step() const { return step_; }

 private:
  const RankPlan* plan_;
  const bool lockstep_;
  std::vector<int64_t> sent_;      // by id
  std::vector<int64_t> received_;  // by id
  int64_t step_ = 0;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_STEP_TRACKER_H_

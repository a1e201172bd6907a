// File: step_tracker.cc
#include "runtime/step_tracker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rdmaflow::runtime {

absl::Status AlreadyMovedError(const TransferInfo& info, int64_t step,
                               const char* verb) {
  return absl::FailedPreconditionError(absl::StrCat(
      info.Describe(), " was already ", verb, " in step ", step,
      ": call FinishStep() before the next step's transfers"));
}

absl::Status NotMovedError(const TransferInfo& info, int64_t step, int rank,
                           const char* verb) {
  return absl::FailedPreconditionError(
      absl::StrCat("step ", step, " of rank ", rank, " never ", verb, " ",
                   info.Describe(), ": every transfer moves once per step"));
}

StepTracker::StepTracker(const RankPlan* plan, bool lockstep)
    : plan_(plan), lockstep_(lockstep) {
  int ids = 0;
  for (const auto* list : {&plan->sends(), &plan->recvs()}) {
    for (const TransferInfo& info : *list) ids = std::max(ids, info.id + 1);
  }
  sent_.assign(ids, 0);
  received_.assign(ids, 0);
}

absl::Status StepTracker::CheckSend(const TransferInfo& info) const {
  if (!lockstep_ || sent_[info.id] == step_) return absl::OkStatus();
  return AlreadyMovedError(info, step_, "sent");
}

absl::Status StepTracker::CheckRecv(const TransferInfo& info) const {
  if (!lockstep_ || received_[info.id] == step_) return absl::OkStatus();
  return AlreadyMovedError(info, step_, "received");
}

absl::Status StepTracker::FinishStep() {
  if (!lockstep_) {
    ++step_;
    return absl::OkStatus();
  }
  for (const TransferInfo& info : plan_->sends()) {
    if (sent_[info.id] != step_ + 1) {
      return NotMovedError(info, step_, plan_->rank(), "sent");
    }
  }
  for (const TransferInfo& info : plan_->recvs()) {
    if (received_[info.id] != step_ + 1) {
      return NotMovedError(info, step_, plan_->rank(), "received");
    }
  }
  ++step_;
  return absl::OkStatus();
}

}  // namespace rdmaflow::runtime

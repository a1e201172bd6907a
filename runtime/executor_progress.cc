// File: executor_progress.cc
// -----------------------------------------------------------------------------
// The executor's share of each progress round (progress_engine.h runs the
// transport): incoming notifications (tensor arrivals), tensors dropped by
// the user (slot releases), credit write-backs, deferred writes. Runs on the
// calling thread and takes no locks: the only state shared with other
// threads is each RecvSlot's atomic `dropped` mask.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/executor.h"

namespace rdmaflow::runtime {

void Executor::OnNotification(const rdma::Notification& n) {
  // The value is the sender's (untrusted): it may index nothing we have.
  const int peer = n.peer_rank;
  const int slot_index = static_cast<int>(n.value >> 4);
  const int stage = static_cast<int>(n.value & 15);
  if (peer < 0 || peer >= static_cast<int>(recv_by_notification_.size()) ||
      slot_index >= static_cast<int>(recv_by_notification_[peer].size()) ||
      recv_by_notification_[peer][slot_index] < 0) {
    engine_.Fail(absl::DataLossError(absl::StrCat(
        "rank ", rank_plan_.rank(), " got a write notification from rank ",
        peer, " for slot ", slot_index,
        ", which its plan does not have: do all ranks run the same plan?")));
    return;
  }
  internal::RecvSlot& slot = *recvs_[recv_by_notification_[peer][slot_index]];
  if (absl::Status valid =
          internal::CheckArrival(slot.info, stage, slot.arrived, slot.released);
      !valid.ok()) {
    engine_.Fail(std::move(valid));
    return;
  }
  ++slot.arrived;
}

void Executor::OnRound() {
  // Credits are written into our memory by the receivers: checked each round
  // (a failure is recorded by RefreshCredit and ends the wait).
  for (auto& slot : sends_) {
    if (!RefreshCredit(*slot).ok()) break;
  }
  if (dirty_->load(std::memory_order_acquire) > 0) {
    dirty_->exchange(0, std::memory_order_acq_rel);
    for (auto& slot : recvs_) ProcessDrops(*slot);
    for (auto& slot : retired_) ProcessDrops(*slot);
  }
  PostCredits();
  if (!deferred_.empty()) PostDeferred();
}

void Executor::ProcessDrops(internal::RecvSlot& slot) {
  const uint32_t dropped = slot.dropped.exchange(0, std::memory_order_acq_rel);
  if (dropped == 0) return;
  for (int stage = 0; stage < slot.info.depth; ++stage) {
    if ((dropped & (1u << stage)) == 0) continue;
    if (slot.dest_valid[stage]) {
      dest_pool_->Free(slot.dest[stage]);
      slot.dest_valid[stage] = false;
    }
    slot.done_stages |= 1u << stage;
  }
  if (slot.retired) return;
  // Report releases in sequence order only.
  while ((slot.done_stages & (1u << (slot.released % slot.info.depth))) != 0) {
    slot.done_stages &= ~(1u << (slot.released % slot.info.depth));
    ++slot.released;
  }
  slot.credits->Set(slot.info.slot_index, slot.released);
}

void Executor::PostCredits() {
  for (const auto& credits : credit_writers_) {
    if (credits == nullptr) continue;
    if (absl::Status posted = credits->Post(); !posted.ok()) {
      engine_.Fail(absl::Status(posted.code(),
                                absl::StrCat("rank ", rank_plan_.rank(), ": ", posted.message())));
    }
  }
}

bool Executor::CreditsPending() const {
  for (const auto& credits : credit_writers_) {
    if (credits != nullptr && credits->pending()) return true;
  }
  return false;
}

absl::Status Executor::Drain() {
  return engine_.Drain(
      [&] { return !CreditsPending() && deferred_.empty(); }, [&] {
        if (!deferred_.empty()) {
          return BlockerOf(*deferred_.front(), deferred_.front()->pending->seq);
        }
        return std::string("credits still to return");
      });
}

}  // namespace rdmaflow::runtime

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
  if (slot.released > slot.credit_posted && !slot.credit_queued) {
    slot.credit_queued = true;
    credit_pending_.push_back(&slot);
  }
}

void Executor::PostCredits() {
  size_t kept = 0;
  for (internal::RecvSlot* slot : credit_pending_) {
    if (slot->credit_busy || slot->retired) {
      // The completion of the write in flight re-queues it if needed.
      slot->credit_queued = false;
      continue;
    }
    uint64_t* word =
        reinterpret_cast<uint64_t*>(credit_out_->data() + slot->credit_word);
    *word = slot->released;
    const uint64_t value = slot->released;
    absl::Status posted = slot->endpoint->PostWrite(
        {credit_out_.get(), slot->credit_word, 8},
        {slot->credit_remote, 8 * static_cast<uint64_t>(slot->info.slot_index),
         8},
        std::nullopt, [this, slot](absl::Status status) {
          engine_.Completed();
          slot->credit_busy = false;
          if (!status.ok()) {
            engine_.Fail(absl::Status(status.code(),
                              absl::StrCat("returning the slot of ",
                                           slot->info.Describe(),
                                           " to its sender: ",
                                           status.message())));
            return;
          }
          if (slot->released > slot->credit_posted && !slot->credit_queued &&
              !slot->retired) {
            slot->credit_queued = true;
            credit_pending_.push_back(slot);
          }
        });
    if (absl::IsResourceExhausted(posted)) {
      credit_pending_[kept++] = slot;  // retry on the next poll
      continue;
    }
    slot->credit_queued = false;
    if (!posted.ok()) {
      engine_.Fail(absl::Status(posted.code(),
                        absl::StrCat("returning the slot of ",
                                     slot->info.Describe(), " to its sender: ",
                                     posted.message())));
      continue;
    }
    engine_.Started();
    slot->credit_busy = true;
    slot->credit_posted = value;
  }
  credit_pending_.resize(kept);
}

absl::Status Executor::Drain() {
  return engine_.Drain(
      [&] { return credit_pending_.empty() && deferred_.empty(); }, [&] {
        if (!deferred_.empty()) {
          return BlockerOf(*deferred_.front(), deferred_.front()->pending->seq);
        }
        return std::string("credits still to return");
      });
}

}  // namespace rdmaflow::runtime

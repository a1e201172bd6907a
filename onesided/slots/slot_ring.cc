// File: slot_ring.cc
#include "onesided/slots/slot_ring.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shared_word.h"
#include "onesided/slots/credit_check.h"

namespace rdmaflow::onesided {
namespace {

uint64_t LoadWord(const std::byte* word) { return LoadSharedWord(word); }
void StoreWord(std::byte* word, uint64_t value) { StoreSharedWord(word, value); }

}  // namespace

SlotRingSender::SlotRingSender(Options options)
    : options_(std::move(options)),
      ordered_(options_.endpoint != nullptr && options_.endpoint->OrdersWrites()) {}

void SlotRingSender::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::StatusOr<uint64_t> SlotRingSender::Credit() {
  if (!failure_.ok()) return failure_;
  const uint64_t credit = LoadCredit(options_.credit_word);
  if (absl::Status valid = CheckCredit(options_.peer, "messages", credit, credit_seen_, claimed_);
      !valid.ok()) {
    Fail(std::move(valid));
    return failure_;
  }
  credit_seen_ = credit;
  return credit;
}

absl::StatusOr<bool> SlotRingSender::HasRoom(uint64_t window) {
  absl::StatusOr<uint64_t> credit = Credit();
  if (!credit.ok()) return credit.status();
  // credit <= claimed_ (Credit() checked): no wrap.
  return claimed_ - *credit < std::min<uint64_t>(window, options_.slots);
}

void SlotRingSender::Write(uint64_t seq, const rdma::LocalSlice& src,
                           const rdma::RemoteSlice& dst) {
  actions_.push_back({Action::kWrite, seq, src, dst});
}

void SlotRingSender::Commit(uint64_t seq, bool had_writes) {
  if (ordered_) {
    // The endpoint places the flag after the payload: it goes at once. The
    // flush behind it completes once the writes (and the flag) have: then
    // the message is written and delivered.
    actions_.push_back({Action::kFlag, seq, {}, {}, /*delivers=*/!had_writes});
    if (had_writes) actions_.push_back({Action::kWritten, seq, {}, {}});
    return;
  }
  // The flag may only land once the payload is visible: it is queued when
  // the flush completes.
  actions_.push_back({had_writes ? Action::kFlush : Action::kFlag, seq, {}, {}});
}

void SlotRingSender::RestageQueued(
    uint64_t first, uint64_t end,
    absl::FunctionRef<void(uint64_t seq, rdma::LocalSlice& src)> visit) {
  for (Action& action : actions_) {
    if (action.kind == Action::kWrite && action.seq >= first && action.seq < end) {
      visit(action.seq, action.src);
    }
  }
}

void SlotRingSender::Delivered(uint64_t seq) {
  if (seq != delivered_) {
    delivered_out_of_order_.insert(seq);
    return;
  }
  ++delivered_;
  while (!delivered_out_of_order_.empty() &&
         *delivered_out_of_order_.begin() == delivered_) {
    delivered_out_of_order_.erase(delivered_out_of_order_.begin());
    ++delivered_;
  }
}

rdma::Completion SlotRingSender::Done() {
  return [this](absl::Status status) {
    --outstanding_;
    if (!status.ok()) Fail(std::move(status));
  };
}

absl::Status SlotRingSender::Post() {
  while (!actions_.empty() && failure_.ok()) {
    const Action& action = actions_.front();
    const uint64_t seq = action.seq;
    absl::Status posted;
    switch (action.kind) {
      case Action::kWrite:
        posted = options_.endpoint->PostWrite(action.src, action.dst, std::nullopt, Done());
        break;
      case Action::kFlush:
      case Action::kWritten: {
        // kFlush: the flag goes next; kWritten: the flag went before it.
        const bool flag_next = action.kind == Action::kFlush;
        posted = options_.endpoint->PostFlush([this, seq, flag_next](absl::Status status) {
          --outstanding_;
          if (!status.ok()) {
            Fail(std::move(status));
            return;
          }
          // Every write posted before the flush has completed.
          written_ = std::max(written_, seq + 1);
          if (flag_next) {
            actions_.push_back({Action::kFlag, seq, {}, {}});
          } else {
            Delivered(seq);
          }
        });
        break;
      }
      case Action::kFlag: {
        const size_t source = options_.flag_source_offset + slot(seq) * kSlotWordBytes;
        StoreWord(options_.flag_source->data() + source, seq + 1);
        rdma::Endpoint* const flags = !ordered_ && options_.flag_endpoint != nullptr
                                          ? options_.flag_endpoint
                                          : options_.endpoint;
        posted = flags->PostWrite(
            {options_.flag_source, source, kSlotWordBytes},
            {options_.remote_flags, options_.remote_flags_offset + slot(seq) * kSlotWordBytes,
             kSlotWordBytes},
            std::nullopt, [this, seq, delivers = action.delivers](absl::Status status) {
              --outstanding_;
              if (!status.ok()) {
                Fail(std::move(status));
                return;
              }
              if (delivers) Delivered(seq);
            });
        break;
      }
    }
    if (absl::IsResourceExhausted(posted)) break;  // the next call retries
    if (!posted.ok()) {
      Fail(absl::Status(posted.code(), absl::StrCat("posting to ", options_.peer, ": ",
                                                    posted.message())));
      break;
    }
    ++outstanding_;
    actions_.pop_front();
  }
  return failure_;
}

namespace {

CreditWriter::Options CreditOptions(const SlotRingReceiver::Options& o) {
  CreditWriter::Options credit;
  credit.words = 1;
  credit.peer = o.peer;
  credit.endpoint = o.endpoint;
  credit.source = o.credit_source;
  credit.source_offset = o.credit_source_offset;
  credit.remote = o.remote_credit;
  credit.remote_offset = o.remote_credit_offset;
  return credit;
}

}  // namespace

SlotRingReceiver::SlotRingReceiver(Options options)
    : options_(std::move(options)), credits_(CreditOptions(options_)) {}

void SlotRingReceiver::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::StatusOr<bool> SlotRingReceiver::Arrived() {
  if (!failure_.ok()) return failure_;
  const uint64_t seq = received_;
  const uint64_t flag = LoadWord(options_.flags + slot() * kSlotWordBytes);
  if (flag == seq + 1) return true;
  // Until it arrives, the slot's flag holds its previous message's number
  // (0 before the slot's first use): the next use needs our credit.
  const uint64_t slots = static_cast<uint64_t>(options_.slots);
  const uint64_t previous = seq >= slots ? seq + 1 - slots : 0;
  if (flag == previous) return false;
  Fail(absl::DataLossError(absl::StrCat(
      options_.peer, " wrote ", flag, " into the flag of slot ", slot(), " where ", seq + 1,
      " (", options_.describe ? options_.describe(seq) : absl::StrCat("message ", seq),
      ") or, before it, ", previous,
      " was due: it breaks the slot protocol (does it run the same rdmaflow version? is "
      "anything else writing into our memory?)")));
  return failure_;
}

absl::Status SlotRingReceiver::PostCredit(uint64_t released) {
  if (!failure_.ok()) return failure_;
  credits_.Set(0, std::min(released, received_));
  return credits_.Post();
}

}  // namespace rdmaflow::onesided

// File: stamped_slot.cc
#include "onesided/stamped_slot.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"

namespace rdmaflow::onesided {

uint64_t LoadStamp(const std::byte* base, size_t offset) {
  return LoadSharedWord(base + offset);
}

void StoreStamp(std::byte* base, size_t offset, uint64_t stamp) {
  StoreSharedWord(base + offset, stamp);
}

std::optional<size_t> AlignUp(size_t bytes) {
  size_t padded = 0;
  if (__builtin_add_overflow(bytes, kSlotAlign - 1, &padded))
    return std::nullopt;
  return padded / kSlotAlign * kSlotAlign;
}

std::optional<size_t> StampedSlot::PackedBytes(size_t payload_bytes) {
  const std::optional<size_t> payload = AlignUp(payload_bytes);
  size_t total = 0;
  if (!payload.has_value() ||
      __builtin_add_overflow(*payload, kSlotAlign, &total)) {
    return std::nullopt;
  }
  return total;
}

// --- RisingWord
// ------------------------------------------------------------------

RisingWord::RisingWord(std::string writer, std::string what, std::string unit,
                       uint64_t limit)
    : writer_(std::move(writer)),
      what_(std::move(what)),
      unit_(std::move(unit)),
      limit_(limit) {}

absl::Status RisingWord::Fail(std::string problem) {
  status_ = absl::DataLossError(
      absl::StrCat(writer_, " broke the protocol: ", what_, " ", problem,
                   "; is anything else writing into this memory?"));
  std::fprintf(stderr, "%s\n", std::string(status_.message()).c_str());
  return status_;
}

absl::Status RisingWord::Check(uint64_t value) {
  return CheckAfter(last_, value);
}

absl::Status RisingWord::CheckAfter(uint64_t earlier, uint64_t value) {
  RETURN_IF_ERROR(status_);
  if (value > limit_) {
    return Fail(absl::StrCat("says ", unit_, value,
                             ", beyond the largest whose stamps fit in "
                             "64 bits (",
                             limit_, ")"));
  }
  if (value < earlier) {
    return Fail(
        absl::StrCat("went back from ", unit_, earlier, " to ", value,
                     " (it only goes up: a restarted writer needs a new "
                     "namespace or name)"));
  }
  return absl::OkStatus();
}

absl::Status RisingWord::Advance(uint64_t value) {
  RETURN_IF_ERROR(Check(value));
  last_ = value;
  return absl::OkStatus();
}

// --- StampedSlotReader
// -------------------------------------------------------------

StampedSlotReader::StampedSlotReader(std::string writer, std::string what)
    : stamp_(std::move(writer), std::move(what)) {}

absl::StatusOr<SlotRead> StampedSlotReader::TryRead(
    uint64_t before, absl::FunctionRef<absl::Status()> copy,
    absl::FunctionRef<absl::StatusOr<uint64_t>()> reload,
    std::optional<uint64_t> sequence) {
  RETURN_IF_ERROR(stamp_.Check(before));
  if (sequence.has_value()) {
    ABSL_RAW_CHECK(*sequence <= kMaxSequence, "a sequence no stamp can hold");
    if (before != WholeStamp(*sequence)) return SlotRead::kBusy;
  } else {
    if (before == stamp_.last()) return SlotRead::kUnchanged;
    if (before % 2 == 1) return SlotRead::kBusy;
  }
  RETURN_IF_ERROR(copy());
  ASSIGN_OR_RETURN(const uint64_t after, reload());
  RETURN_IF_ERROR(stamp_.CheckAfter(before, after));
  if (after != before) return SlotRead::kBusy;  // overwritten while we copied
  RETURN_IF_ERROR(stamp_.Advance(before));
  return SlotRead::kWhole;
}

absl::StatusOr<SlotRead> StampedSlotReader::TryReadLocal(
    const std::byte* base, const StampedSlot& slot, std::byte* into) {
  return TryRead(
      LoadStamp(base, slot.stamp_offset),
      [&] {
        std::memcpy(into, base + slot.payload_offset, slot.payload_bytes);
        // The copy's loads before the stamp's reload.
        std::atomic_thread_fence(std::memory_order_acquire);
        return absl::OkStatus();
      },
      [&]() -> absl::StatusOr<uint64_t> {
        return LoadStamp(base, slot.stamp_offset);
      });
}

// --- Writer
// ------------------------------------------------------------------------

absl::Status WriteBracket(uint64_t sequence,
                          absl::FunctionRef<absl::Status(uint64_t)> put_stamp,
                          absl::FunctionRef<absl::Status()> put_payload) {
  ABSL_RAW_CHECK(sequence >= 1 && sequence <= kMaxSequence,
                 "a sequence no stamp can hold");
  RETURN_IF_ERROR(put_stamp(WritingStamp(sequence)));
  RETURN_IF_ERROR(put_payload());
  return put_stamp(WholeStamp(sequence));
}

void WriteLocal(std::byte* base, const StampedSlot& slot, uint64_t sequence,
                absl::FunctionRef<void(std::byte* payload)> fill) {
  absl::Status written = WriteLocal(base, slot.stamp_offset, base + slot.payload_offset,
                                    sequence, [&](std::byte* payload) {
                                      fill(payload);
                                      return absl::OkStatus();
                                    });
  ABSL_RAW_CHECK(written.ok(), "local stores cannot fail");
}

absl::Status WriteLocal(std::byte* stamp_base, size_t stamp_offset, std::byte* payload,
                        uint64_t sequence,
                        absl::FunctionRef<absl::Status(std::byte* payload)> fill) {
  return WriteBracket(
      sequence,
      [&](uint64_t stamp) {
        StoreStamp(stamp_base, stamp_offset, stamp);
        // The odd stamp before any byte of the payload (a reader that sees
        // new bytes then sees the odd stamp, or a later one, on reload).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return absl::OkStatus();
      },
      [&] {
        RETURN_IF_ERROR(fill(payload));
        // Every byte of the payload before the even stamp.
        std::atomic_thread_fence(std::memory_order_release);
        return absl::OkStatus();
      });
}

absl::Status WriteRemote(ProgressLoop& loop, rdma::Endpoint& endpoint,
                         rdma::MemoryRegion& staging,
                         const rdma::RemoteRegion& remote,
                         const StampedSlot& at, uint64_t sequence,
                         absl::Time deadline, const Fence& fence) {
  return WriteBracket(
      sequence,
      [&](uint64_t stamp) {
        // Our staging word is only read by the write we post next.
        StoreStamp(staging.data(), 0, stamp);
        RETURN_IF_ERROR(
            Write(loop, endpoint, {&staging, 0, sizeof(uint64_t)},
                  {&remote, at.stamp_offset, sizeof(uint64_t)}, std::nullopt, deadline, fence));
        return Flush(loop, endpoint, deadline, fence);
      },
      [&] {
        RETURN_IF_ERROR(Write(loop, endpoint, {&staging, kSlotAlign, at.payload_bytes},
                              {&remote, at.payload_offset, at.payload_bytes}, std::nullopt,
                              deadline, fence));
        return Flush(loop, endpoint, deadline, fence);
      });
}

}  // namespace rdmaflow::onesided

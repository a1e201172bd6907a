// File: device_data_mover.cc
#include "collectives/device_data_mover.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "device/queued_work.h"

namespace rdmaflow::collectives {
namespace {

// How long the destructor waits for work still on the stream.
constexpr absl::Duration kDrainTimeout = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceDataMover>> DeviceDataMover::Create(
    rdma::device_path::DeviceTransport& transport) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, transport.runtime().CreateStream());
  return std::unique_ptr<DeviceDataMover>(new DeviceDataMover(transport, std::move(stream)));
}

DeviceDataMover::~DeviceDataMover() {
  Fence(absl::Now() + kDrainTimeout, "device work at the mover's end").IgnoreError();
}

std::string DeviceDataMover::Describe() const {
  return absl::StrCat("device memory of ", transport_.runtime().name());
}

absl::Status DeviceDataMover::Supports(DataType type, ReduceOp op) const {
  // Any non-null pointers: only the type and the operator are asked about.
  static std::byte placeholder;
  device::ReduceArgs probe;
  probe.type = type;
  probe.op = op;
  probe.dst = &placeholder;
  probe.srcs = {&placeholder};
  probe.count = 1;
  absl::Status status = device::CheckReduceArgs(probe);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      "a reduction of ", DataTypeName(type), " by ", ReduceOpName(op), " on ", Describe(),
      ": the device reduces float32, float16 and bfloat16 by sum or max"));
}

absl::StatusOr<std::byte*> DeviceDataMover::MapPeer(rdma::Endpoint& endpoint,
                                                    const rdma::RemoteSlice& remote) {
  return transport_.MapDevice(endpoint, remote);
}

absl::StatusOr<std::byte*> DeviceDataMover::Scratch(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (scratch_.size() < bytes) {
    // The old scratch may still be in use on the stream.
    RETURN_IF_ERROR(Fence(absl::Now() + kDrainTimeout, "device work before a new scratch"));
    scratch_ = device::DeviceMemory();
    ASSIGN_OR_RETURN(scratch_, transport_.runtime().Allocate(bytes));
  }
  return static_cast<std::byte*>(scratch_.data());
}

absl::Status DeviceDataMover::Copy(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return stream_->Copy(dst, src, bytes);
}

absl::Status DeviceDataMover::Reduce(DataType type, ReduceOp op, std::byte* dst,
                                     const std::vector<const std::byte*>& srcs, size_t count) {
  if (srcs.empty()) return absl::InvalidArgumentError("a reduction of no sources");
  if (count == 0) return absl::OkStatus();
  if (srcs.size() == 1) return Copy(dst, srcs[0], count * ElementSize(type));
  // One launch reads up to kMaxSources; more fold into dst, in order.
  device::ReduceArgs args;
  args.type = type;
  args.op = op;
  args.dst = dst;
  args.count = count;
  size_t next = 0;
  while (next < srcs.size()) {
    args.srcs.clear();
    if (next > 0) args.srcs.push_back(dst);
    const size_t take = std::min(srcs.size() - next,
                                 static_cast<size_t>(device::ReduceArgs::kMaxSources) -
                                     args.srcs.size());
    args.srcs.insert(args.srcs.end(), srcs.begin() + next, srcs.begin() + next + take);
    next += take;
    RETURN_IF_ERROR(stream_->Reduce(args));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DeviceDataMover::Mark() {
  // An event recorded now marks the work queued so far. Where none could
  // be made or its Record is refused, that work runs all the same: the
  // QueuedWork watches it (the Record tried again at each look, or else the
  // stream going idle), and the mark is reached once it ended. A refused
  // Record costs only that time; a broken stream fails Reached().
  absl::StatusOr<std::unique_ptr<device::Event>> event = events_.Take();
  Pending pending;
  pending.mark = marks_ + 1;
  pending.work.Mark(*stream_, event.ok() ? *std::move(event) : nullptr).IgnoreError();
  pending_.push_back(std::move(pending));
  return ++marks_;
}

absl::StatusOr<bool> DeviceDataMover::Reached(uint64_t mark) {
  if (mark > marks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mark ", mark, " of a device data mover that made ", marks_));
  }
  while (mark > reached_ && !pending_.empty()) {
    ASSIGN_OR_RETURN(const bool done, pending_.front().work.Ended());
    if (!done) break;
    reached_ = pending_.front().mark;
    events_.Give(pending_.front().work.Release());  // a refused event is dropped
    pending_.pop_front();
  }
  return mark <= reached_;
}

absl::Status DeviceDataMover::Fence(absl::Time deadline, const std::string& what) {
  // The scratch and the peers' mappings the work uses stay until it ended.
  ASSIGN_OR_RETURN(const uint64_t mark, Mark());
  absl::Status status =
      PollUntil([&] { return Reached(mark); }, deadline, absl::StrCat(what, " on ", Describe()));
  // The fence's own mark is the last one made; earlier marks it waits on
  // may have events even where the device refuses this Record.
  if (absl::IsDeadlineExceeded(status) && !pending_.empty() && pending_.back().mark == mark &&
      pending_.back().work.unmarked()) {
    return absl::DeadlineExceededError(
        absl::StrCat(status.message(),
                     " (no event marks its work: the device refused its Record, "
                     "and the stream did not go idle)"));
  }
  return status;
}

}  // namespace rdmaflow::collectives

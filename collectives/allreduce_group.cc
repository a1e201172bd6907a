// File: allreduce_group.cc
#include "collectives/allreduce_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::collectives {

std::string AlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kNone: return "none";
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kHostOneShot: return "host-one-shot";
    case AllReduceAlgorithm::kHostScatterGather: return "host-scatter-gather";
  }
  return "?";
}

absl::StatusOr<DirectAccess> ParseDirectAccess(absl::string_view text) {
  if (text == "auto") return DirectAccess::kAuto;
  if (text == "off") return DirectAccess::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("direct access '", text, "': expected 'auto' or 'off'"));
}

absl::StatusOr<std::unique_ptr<AllReduceGroup>> AllReduceGroup::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    std::vector<int> members, const AllReduceGroupOptions& options) {
  std::unique_ptr<AllReduceGroup> group(new AllReduceGroup());
  RingAllReduceOptions ring = options.ring;
  if (ring.loop == nullptr) {
    // One loop for both algorithms, on this thread, as the ring would make.
    onesided::ProgressLoopOptions loop;
    loop.name = absl::StrCat("all-reduce '", ring.name, "' on rank ", transport.rank());
    loop.wait = ring.wait;
    loop.liveness_interval = ring.liveness_interval;
    if (absl::Status valid = loop.Validate(); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce '", ring.name, "': ", valid.message()));
    }
    group->own_loop_ = std::make_unique<onesided::ProgressLoop>(transport, loop);
    ring.loop = group->own_loop_.get();
  }
  ASSIGN_OR_RETURN(group->ring_,
                   RingAllReduce::Create(transport, store, ns, members, ring));
  group->ring_options_timeout_ = ring.timeout;
  if (options.direct == DirectAccess::kAuto && group->ring_->size() > 1) {
    HostAllReduceOptions host;
    host.name = ring.name;
    host.one_shot_max_bytes = std::min(options.one_shot_max_bytes, ring.capacity_bytes);
    host.chunk_bytes = options.host_chunk_bytes;
    host.timeout = ring.timeout;
    host.loop = ring.loop;
    // The ring's region: its descriptor is already published for the ring,
    // and both algorithms reduce it in place.
    absl::StatusOr<std::unique_ptr<HostAllReduce>> made = HostAllReduce::Create(
        transport, store, ns, std::move(members),
        group->ring_->data_region(), host);
    if (made.ok()) {
      group->host_ = *std::move(made);
    } else if (!absl::IsUnimplemented(made.status())) {
      return made.status();
    }
  }
  return group;
}

AllReduceGroup::~AllReduceGroup() {
  host_.reset();  // it reads the ring's region
  ring_.reset();
}

AllReduceAlgorithm AllReduceGroup::Choose(size_t bytes) const {
  if (host_ == nullptr) return AllReduceAlgorithm::kRing;
  return host_->OneShot(bytes) ? AllReduceAlgorithm::kHostOneShot
                               : AllReduceAlgorithm::kHostScatterGather;
}

absl::Status AllReduceGroup::AllReduce(size_t offset, size_t count, DataType type,
                                       ReduceOp op, uint8_t variant) {
  // A count too large to multiply is refused by the algorithm itself.
  const size_t element = ElementSize(type);
  const size_t bytes = count <= capacity() / element ? count * element : capacity() + 1;
  last_ = Choose(bytes);
  if (last_ == AllReduceAlgorithm::kRing) return ring_->AllReduce(offset, count, type, op);
  return host_->AllReduce(offset, count, type, op, variant);
}

RingAllReduceStats AllReduceGroup::stats() const {
  RingAllReduceStats stats = ring_->stats();
  if (host_ != nullptr) {
    stats.calls += host_->stats().calls;
    stats.messages += host_->stats().reads;
    stats.bytes_sent += host_->stats().bytes_read;
  }
  return stats;
}

absl::Status AllReduceGroup::Shutdown(std::optional<absl::Duration> timeout) {
  // One bound for both barriers.
  const absl::Time deadline = absl::Now() + timeout.value_or(ring_options_timeout_);
  absl::Status status;
  if (host_ != nullptr) {
    status.Update(host_->Shutdown(std::max(deadline - absl::Now(), absl::ZeroDuration())));
  }
  status.Update(ring_->Shutdown(std::max(deadline - absl::Now(), absl::ZeroDuration())));
  return status;
}

}  // namespace rdmaflow::collectives

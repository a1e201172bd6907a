// File: ibverbs_endpoint.cc
#include "rdma/ibverbs/ibverbs_endpoint.h"

#include <arpa/inet.h>

#include <typeinfo>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma::ibverbs {

struct IbverbsEndpoint::Lanes {
  // A notification (or a flush) waiting for the parts of its operation (or
  // the markers of the other queue pairs), in post order.
  struct Pending {
    bool flush = false;
    uint32_t value = 0;
    std::optional<NotifyRingWriter::Next> record;
    bool ready = false;
    absl::Status status;
    Completion done;
  };
  // The parts of one operation: `done` fires once with the first error.
  struct Join {
    int left = 0;
    absl::Status status;
    Completion done;
  };

  static Completion Part(std::shared_ptr<Join> join) {
    return [join = std::move(join)](absl::Status status) {
      if (!status.ok() && join->status.ok()) join->status = std::move(status);
      if (--join->left == 0) std::move(join->done)(std::move(join->status));
    };
  }

  // Marks `entry` ready with `status` and posts what is ready at the front.
  static Completion Ready(std::shared_ptr<Lanes> lanes,
                          std::shared_ptr<Pending> entry) {
    return [lanes = std::move(lanes), entry = std::move(entry)](
               absl::Status status) {
      entry->ready = true;
      entry->status = std::move(status);
      lanes->Release();
    };
  }

  // Posts, in order, the entries at the front whose operation completed: a
  // notification on the first queue pair (or its failure to the caller),
  // a flush's marker behind them.
  void Release() {
    while (!pending.empty() && pending.front()->ready) {
      std::shared_ptr<Pending> entry = std::move(pending.front());
      pending.pop_front();
      EndpointState& first = *states[0];
      if (first.reserved > 0) --first.reserved;
      if (!entry->flush) {
        if (!entry->status.ok()) {
          // Its ring record will never be written: the target would hold
          // back every later one, so the endpoint notifies no more.
          if (entry->record.has_value()) {
            queues->FailRing(first, entry->status);
          }
          queues->Defer(std::move(entry->done), entry->status);
          continue;
        }
        ++first.reserved;  // PostReservedNotification releases it.
        queues->PostReservedNotification(first, entry->value, entry->record,
                                            std::move(entry->done));
        continue;
      }
      absl::Status refused = entry->status;
      if (refused.ok() && (first.closed || first.stopped)) {
        refused = first.stop_reason.ok()
                      ? absl::CancelledError(absl::StrCat(
                            "the endpoint to rank ", first.peer_rank,
                            " was closed"))
                      : first.stop_reason;
      }
      if (refused.ok()) refused = first.failure;
      if (!refused.ok()) {
        queues->Defer(std::move(entry->done), refused);
        continue;
      }
      // A refused post leaves `done` here (PostChain()).
      absl::Status posted =
          queues->PostMarker(first, std::move(entry->done), true);
      if (!posted.ok()) {
        queues->Defer(std::move(entry->done), posted);
      }
    }
  }

  SendQueues* queues;
  std::vector<std::shared_ptr<EndpointState>> states;
  uint64_t stripe_min = 0;
  std::deque<std::shared_ptr<Pending>> pending;
};

IbverbsEndpoint::IbverbsEndpoint(SendQueues* queues, const VerbsContext* context,
                                 size_t max_outstanding,
                                 std::vector<std::shared_ptr<EndpointState>> lanes,
                                 uint64_t stripe_min)
    : queues_(queues),
      context_(context),
      max_outstanding_(max_outstanding),
      state_(lanes.front()),
      lanes_(std::make_shared<Lanes>()) {
  lanes_->queues = queues;
  lanes_->states = std::move(lanes);
  lanes_->stripe_min = stripe_min;
}

IbverbsEndpoint::~IbverbsEndpoint() {
  Close().IgnoreError();
  for (const auto& lane : lanes_->states) queues_->Forget(lane->id);
}

std::string IbverbsEndpoint::Describe() const {
  if (lanes_->states.size() == 1) return state_->description;
  return absl::StrCat(state_->description, "; ", lanes_->states.size(),
                      " queue pairs, operations from ", lanes_->stripe_min,
                      " B striped across them");
}

absl::Status IbverbsEndpoint::CheckUsable() const {
  const EndpointState& s = *state_;
  if (s.closed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the endpoint to rank ", s.peer_rank, " is closed"));
  }
  for (const auto& lane : lanes_->states) {
    if (!lane->failure.ok()) return lane->failure;
  }
  if (s.operations >= max_outstanding_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        s.operations, " operations in flight towards rank ", s.peer_rank,
        "; progress the transport and retry"));
  }
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::Prepare(const LocalSlice& local,
                                      const RemoteSlice& remote, ibv_sge& sge,
                                      uint32_t& rkey) const {
  const EndpointState& s = *state_;
  RETURN_IF_ERROR(CheckUsable());
  // Host memory, or device memory registered here through a dma-buf
  // (GPUDirect RDMA; the registration check below makes it this
  // transport's).
  RETURN_IF_ERROR(
      CheckTransfer(local, remote, s.peer_rank, kBackend, Moves::kAnyMemory));
  // VerbsRegistration is final: an exact type match is the cast's check,
  // without a dynamic_cast's walk of the class hierarchy on every post.
  const MemoryRegion::Registration* base = local.region->registration();
  const auto* registration =
      base != nullptr && typeid(*base) == typeid(VerbsRegistration)
          ? static_cast<const VerbsRegistration*>(base)
          : nullptr;
  if (registration == nullptr ||
      registration->context() != context_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the local region of an operation towards rank ", s.peer_rank,
        " was not registered with this ibverbs transport"));
  }
  ASSIGN_OR_RETURN(rkey, UnpackKey(remote.region->packed_key, s.peer_rank));
  sge.addr = reinterpret_cast<uintptr_t>(local.data());
  sge.lkey = registration->lkey();
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::PostParts(ibv_wr_opcode opcode,
                                        const ibv_sge& sge, uint64_t length,
                                        uint64_t remote_address, uint32_t rkey,
                                        std::optional<uint32_t> notification,
                                        Completion done, const char* op,
                                        bool host_source) {
  const auto& states = lanes_->states;
  struct Part {
    EndpointState* lane;
    uint64_t offset;
    uint64_t length;
  };
  absl::InlinedVector<Part, 4> parts;
  if (states.size() > 1 && length >= lanes_->stripe_min) {
    constexpr uint64_t kAlign = 4096;
    const uint64_t per = (length + states.size() - 1) / states.size();
    const uint64_t stripe = (per + kAlign - 1) / kAlign * kAlign;
    for (uint64_t i = 0, offset = 0; i < states.size() && offset < length;
         ++i, offset += stripe) {
      parts.push_back({states[i].get(), offset,
                       std::min(stripe, length - offset)});
    }
  } else {
    parts.push_back({state_.get(), 0, length});
  }
  // Nothing is posted unless every part can be.
  for (const Part& part : parts) {
    if (part.lane->operations >=
            max_outstanding_ ||
        !queues_->HasRoom(*part.lane,
                             queues_->RequestsFor(part.length))) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the queue pairs towards rank ", state_->peer_rank,
          " are full; progress the transport and retry"));
    }
  }
  auto join = std::make_shared<Lanes::Join>();
  join->left = static_cast<int>(parts.size());
  std::shared_ptr<Lanes::Pending> entry;
  if (notification.has_value()) {
    ASSIGN_OR_RETURN(std::optional<NotifyRingWriter::Next> record,
                     queues_->ReserveNotification(*state_, *notification));
    entry = std::make_shared<Lanes::Pending>();
    entry->value = *notification;
    entry->record = record;
    entry->done = std::move(done);
    lanes_->pending.push_back(entry);
    join->done = Lanes::Ready(lanes_, entry);
  } else {
    join->done = std::move(done);
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    ibv_sge part_sge = sge;
    part_sge.addr += parts[i].offset;
    absl::Status posted = queues_->PostOperation(
        *parts[i].lane, opcode, std::nullopt, part_sge, parts[i].length,
        remote_address + parts[i].offset, rkey, Lanes::Part(join), op,
        host_source);
    if (posted.ok()) continue;
    if (i == 0) {
      // Nothing in flight: refused as a whole, `done` never runs.
      if (entry != nullptr) {
        lanes_->pending.pop_back();
        --state_->reserved;
        if (entry->record.has_value()) state_->ring->Untake();
      }
      return posted;
    }
    // Parts are in flight: the operation fails once they complete.
    if (join->status.ok()) join->status = posted;
    join->left -= static_cast<int>(parts.size() - i);
    break;
  }
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::PostWrite(const LocalSlice& src,
                                        const RemoteSlice& dst,
                                        std::optional<uint32_t> notification,
                                        Completion done) {
  ibv_sge sge{};
  uint32_t rkey = 0;
  RETURN_IF_ERROR(Prepare(src, dst, sge, rkey));
  // Device memory (registered through a dma-buf) is never read by the CPU.
  const bool host_source =
      src.region->descriptor().memory_kind == device::MemoryKind::kHost;
  // Striped, or a notification that must wait behind a pending one.
  if (lanes_->states.size() > 1 &&
      (src.length >= lanes_->stripe_min ||
       (notification.has_value() && !lanes_->pending.empty()))) {
    return PostParts(IBV_WR_RDMA_WRITE, sge, src.length, dst.address(), rkey,
                     notification, std::move(done),
                     notification ? "write with notification" : "write",
                     host_source);
  }
  return queues_->PostOperation(
      *state_, IBV_WR_RDMA_WRITE, notification, sge, src.length,
      dst.address(), rkey, std::move(done),
      notification ? "write with notification" : "write", host_source);
}

absl::Status IbverbsEndpoint::PostRead(const LocalSlice& dst,
                                       const RemoteSlice& src,
                                       Completion done) {
  ibv_sge sge{};
  uint32_t rkey = 0;
  RETURN_IF_ERROR(Prepare(dst, src, sge, rkey));
  if (lanes_->states.size() > 1 && dst.length >= lanes_->stripe_min) {
    return PostParts(IBV_WR_RDMA_READ, sge, dst.length, src.address(), rkey,
                     std::nullopt, std::move(done), "read",
                     /*host_source=*/false);
  }
  return queues_->PostOperation(*state_, IBV_WR_RDMA_READ, std::nullopt,
                                   sge, dst.length, src.address(), rkey,
                                   std::move(done), "read",
                                   /*host_source=*/false);
}

absl::Status IbverbsEndpoint::PostFlush(Completion done) {
  RETURN_IF_ERROR(CheckUsable());
  const auto& states = lanes_->states;
  if (states.size() == 1) {
    return queues_->PostMarker(*state_, std::move(done), true);
  }
  // The other queue pairs' markers now; the first's once they completed
  // and the notifications pending before this flush are posted (its place
  // reserved now, so it never fails for room later).
  for (const auto& lane : states) {
    if (!queues_->HasRoom(*lane, 1)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the queue pairs towards rank ", state_->peer_rank,
          " are full; progress the transport and retry"));
    }
  }
  auto entry = std::make_shared<Lanes::Pending>();
  entry->flush = true;
  entry->done = std::move(done);
  auto join = std::make_shared<Lanes::Join>();
  join->left = static_cast<int>(states.size() - 1);
  join->done = Lanes::Ready(lanes_, entry);
  lanes_->pending.push_back(entry);
  ++state_->reserved;
  for (size_t i = 1; i < states.size(); ++i) {
    absl::Status posted =
        queues_->PostMarker(*states[i], Lanes::Part(join), true);
    if (posted.ok()) continue;
    if (i == 1) {
      lanes_->pending.pop_back();
      --state_->reserved;
      return posted;
    }
    if (join->status.ok()) join->status = posted;
    join->left -= static_cast<int>(states.size() - i);
    break;
  }
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::Close() {
  absl::Status first_error;
  // Every queue pair stops first, so that they drain together: Close()
  // blocks for one close_timeout, not one per queue pair.
  for (const auto& lane : lanes_->states) {
    if (lane->closed || lane->stopped) continue;
    absl::Status stopped = queues_->Stop(
        *lane, absl::CancelledError(absl::StrCat(
                   "the endpoint to rank ", lane->peer_rank, " was closed")));
    if (first_error.ok()) first_error = stopped;
  }
  for (const auto& lane : lanes_->states) {
    EndpointState& s = *lane;
    if (s.closed) continue;
    s.closed = true;
    // Not FailAll() at once: the adapter may touch a request's buffers until
    // its flush completion arrives, and a callback hands the buffer back.
    absl::Status closed = queues_->CloseEndpoint(s);
    if (first_error.ok()) first_error = closed;
  }
  return first_error;
}

}  // namespace rdmaflow::rdma::ibverbs

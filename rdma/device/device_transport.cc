#include "rdma/device/device_transport.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/timer_slack.h"
#include "device/queued_work.h"
#include "rdma/device/device_key.pb.h"
#include "rdma/device/gpudirect_probe.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma::device_path {

namespace {

constexpr uint32_t kAddressVersion = 1;
// Bytes of the doorbell a notification is written into.
constexpr size_t kDoorbellBytes = 8;
// Operations one endpoint holds in flight before kResourceExhausted.
constexpr size_t kMaxPending = 1024;
// How long the destructor waits for copies still running.
constexpr absl::Duration kDrainTimeout = absl::Seconds(10);
// A staged chunk moves one phase a completion (its data written, flushed,
// its header written), and on shared memory each completes at the next
// host progress: one Progress() goes round this many times at most while
// completions fire, rather than leaving each phase to a later call (a
// sleep apart, where the caller waits in WaitForActivity).
constexpr int kStagedRounds = 4;

// One walk over the transport's queues (Progress, CloseMappings), counted
// in `depth` while it lasts: a completion fired during a walk may call
// Progress() again, whose walk must not erase a queue from under it.
class QueueWalk {
 public:
  explicit QueueWalk(int& depth) : depth_(depth) { ++depth_; }
  ~QueueWalk() { --depth_; }
  QueueWalk(const QueueWalk&) = delete;
  QueueWalk& operator=(const QueueWalk&) = delete;

  // No other walk is under way.
  bool outermost() const { return depth_ == 1; }

 private:
  int& depth_;
};

// What a device region's registration owns: the allocation, for
// AllocateDevice; nothing for a caller's memory. Its range is one staged
// chunks may land in while it lives.
class DeviceRegistration final : public MemoryRegion::Registration {
 public:
  DeviceRegistration(device::DeviceMemory owned, std::shared_ptr<DeviceRanges> ranges,
                     std::shared_ptr<RetiredDeviceMemory> retired, uintptr_t base, size_t size)
      : ranges_(std::move(ranges)),
        retired_(std::move(retired)),
        base_(base),
        size_(size),
        owned_(std::move(owned)) {
    ranges_->Add(base_, size_);
  }
  // Memory of ours goes to the transport's retired memory: a peer may
  // still have it open (DeviceTransport::retired_bytes).
  ~DeviceRegistration() override {
    ranges_->Remove(base_, size_);
    if (owned_.data() != nullptr) retired_->Keep(std::move(owned_));
  }

 private:
  std::shared_ptr<DeviceRanges> ranges_;
  std::shared_ptr<RetiredDeviceMemory> retired_;
  uintptr_t base_;
  size_t size_;
  device::DeviceMemory owned_;
};

}  // namespace

void RetiredDeviceMemory::Keep(device::DeviceMemory memory) {
  absl::MutexLock lock(&mu_);
  bytes_ += memory.size();
  memory_.push_back(std::move(memory));
}

size_t RetiredDeviceMemory::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

// One operation of an endpoint, in post order.
struct PendingOp {
  enum class Kind {
    kDeviceCopy,  // a copy on the device stream, then maybe a notification
    kHostWrite,   // a host write with a notification, held behind copies
    kFlush,       // a flush, held behind copies
    kStaged,      // chunks through the staging link, then maybe a notification
    kStagedRead,  // a read request through the staging link, done when answered
  };
  Kind kind = Kind::kDeviceCopy;
  device::QueuedWork copy;  // kDeviceCopy: the copy
  std::optional<uint32_t> notification;
  Completion done;
  // kStaged: the sequences of its first and last chunks (the last landed:
  // the write is done); kStagedRead: the read's number (in staged_last).
  uint64_t staged_first = 0;
  uint64_t staged_last = 0;
  // kHostWrite: what to post, the descriptor copied (a post reads it then).
  LocalSlice src;
  RemoteRegion dst_region;
  uint64_t dst_offset = 0;
  uint64_t dst_length = 0;
};

// An endpoint's operations. Owned by the transport: the endpoint may go
// first, and what it left in flight still completes.
struct PendingQueue {
  int peer_rank = -1;
  // The host endpoint, while the device endpoint lives.
  Endpoint* host = nullptr;
  RemoteRegion peer_doorbell;
  bool closed = false;
  // kUnavailable once the host transport has said the peer is gone: no copy
  // goes into its memory after that (docs/device.md). Shared with the
  // completions that may tell it.
  std::shared_ptr<absl::Status> gone = std::make_shared<absl::Status>();
  std::deque<PendingOp> ops;
  // The peer's allocations this endpoint mapped (their IPC handles'
  // bytes): closed once no endpoint uses them (DeviceTransport::Progress).
  std::vector<std::string> mapped;
  // A peer on another host: the staged path's link, one per peer, shared
  // by every endpoint to it (owned by the transport).
  StagingLink* link = nullptr;
};

namespace {

// Fires `op`'s completion with `status` after taking it off `queue`.
void Finish(DeviceTransport& transport, PendingQueue& queue, absl::Status status) {
  PendingOp op = std::move(queue.ops.front());
  queue.ops.pop_front();
  if (op.copy.pending()) transport.ReturnEvent(op.copy.Release());
  std::move(op.done)(std::move(status));
}

// `done`, noting in `gone` a completion that says the peer is gone.
Completion Watched(const std::shared_ptr<absl::Status>& gone, Completion done) {
  return [gone, done = std::move(done)](absl::Status status) mutable {
    if (absl::IsUnavailable(status) && gone->ok()) *gone = status;
    std::move(done)(std::move(status));
  };
}

// A host post's own answer: kUnavailable also marks the peer gone.
absl::Status Noted(PendingQueue& queue, absl::Status posted) {
  if (absl::IsUnavailable(posted) && queue.gone->ok()) *queue.gone = posted;
  return posted;
}

// Posts `op`'s host part through `post`, which receives a completion that
// forwards to op.done; op.done is kept where the post fails (the host
// endpoint never runs a refused post's callback).
template <typename Post>
absl::Status PostKeeping(PendingQueue& queue, PendingOp& op, Post post) {
  auto held = std::make_shared<Completion>(std::move(op.done));
  absl::Status posted = Noted(queue, post(Watched(queue.gone, [held](absl::Status status) {
    std::move (*held)(std::move(status));
  })));
  if (!posted.ok()) op.done = std::move(*held);
  return posted;
}

// Moves `queue` on as far as it can: copies whose events completed are
// finished or their notifications posted, held host operations posted.
// Returns how many completions fired here.
int Advance(DeviceTransport& transport, PendingQueue& queue) {
  int fired = 0;
  while (!queue.ops.empty()) {
    PendingOp& op = queue.ops.front();
    const bool staged =
        op.kind == PendingOp::Kind::kStaged || op.kind == PendingOp::Kind::kStagedRead;
    const bool read = op.kind == PendingOp::Kind::kStagedRead;
    const bool stopped = queue.closed || queue.host == nullptr;
    if (staged) {
      StagingLink& link = *queue.link;
      if (!(read ? link.ReadDone(op.staged_last) : link.Landed(op.staged_last))) {
        const absl::Status failed = !queue.gone->ok() ? *queue.gone : link.error();
        if (failed.ok() && !stopped) break;  // still under way, and the rest behind it
        // Closed, or failed: what of it has not started is dropped (its
        // chunks go void, its answer lands nowhere), and it completes once
        // nothing of it touches its memory any more (the caller may free
        // it then), waiting for the peer only through a host write of it
        // already under way. The link goes on for the other endpoints.
        if (read) {
          link.CancelRead(op.staged_last);
        } else {
          link.CancelWrite(op.staged_first, op.staged_last);
        }
        if (!(read ? link.ReadReleased(op.staged_last)
                   : link.WriteReleased(op.staged_first, op.staged_last))) {
          break;  // a copy or a host write of its memory still runs
        }
        if (!stopped) {
          Finish(transport, queue,
                 absl::Status(failed.code(),
                              absl::StrCat(read ? "a staged read from rank "
                                                : "a staged write to rank ",
                                           queue.peer_rank, " failed: ", failed.message())));
          ++fired;
          continue;
        }
      } else if (read && !stopped) {
        Finish(transport, queue, absl::OkStatus());
        ++fired;
        continue;
      }
    }
    if (op.copy.pending()) {
      absl::StatusOr<bool> copied = op.copy.Ended();
      if (copied.ok() && !*copied) break;  // still running, and the rest behind it
      transport.ReturnEvent(op.copy.Release());
      if (!copied.ok()) {
        Finish(transport, queue,
               absl::Status(copied.status().code(),
                            absl::StrCat("a device copy with rank ", queue.peer_rank,
                                         " failed: ", copied.status().message())));
        ++fired;
        continue;
      }
    }
    if (stopped) {
      Finish(transport, queue,
             absl::CancelledError(absl::StrCat("the endpoint to rank ", queue.peer_rank,
                                               " was closed")));
      ++fired;
      continue;
    }
    absl::Status posted;
    switch (op.kind) {
      case PendingOp::Kind::kDeviceCopy:
      case PendingOp::Kind::kStaged:
      case PendingOp::Kind::kStagedRead:
        if (!op.notification.has_value()) {
          Finish(transport, queue, absl::OkStatus());
          ++fired;
          continue;
        }
        posted = PostKeeping(queue, op, [&](Completion done) {
          return queue.host->PostWrite({&transport.doorbell_source(), 0, kDoorbellBytes},
                                       {&queue.peer_doorbell, 0, kDoorbellBytes},
                                       op.notification, std::move(done));
        });
        break;
      case PendingOp::Kind::kHostWrite:
        posted = PostKeeping(queue, op, [&](Completion done) {
          return queue.host->PostWrite(op.src, {&op.dst_region, op.dst_offset, op.dst_length},
                                       op.notification, std::move(done));
        });
        break;
      case PendingOp::Kind::kFlush:
        posted = PostKeeping(queue, op, [&](Completion done) {
          return queue.host->PostFlush(std::move(done));
        });
        break;
    }
    if (absl::IsResourceExhausted(posted)) break;  // the host endpoint is full: later
    if (!posted.ok()) {
      Finish(transport, queue, std::move(posted));
      ++fired;
      continue;
    }
    queue.ops.pop_front();  // its completion now fires from the host transport
  }
  return fired;
}

class DeviceEndpoint final : public Endpoint {
 public:
  DeviceEndpoint(DeviceTransport* transport, std::unique_ptr<Endpoint> host,
                 PendingQueue* queue)
      : transport_(transport), host_(std::move(host)), queue_(queue) {
    queue_->host = host_.get();
  }
  ~DeviceEndpoint() override {
    Close().IgnoreError();
    queue_->host = nullptr;
  }

  int peer_rank() const override { return queue_->peer_rank; }
  std::string Describe() const override {
    if (queue_->link != nullptr) {
      return absl::StrCat(host_->Describe(), "; device regions of rank ", peer_rank(),
                          " (another host) written through pinned host memory (",
                          transport_->runtime().name(), ")");
    }
    return absl::StrCat(host_->Describe(), "; device regions by IPC on this host (",
                        transport_->runtime().name(), ")");
  }

  absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                         std::optional<uint32_t> notification, Completion done) override {
    RETURN_IF_ERROR(CheckOpen());
    if (dst.region != nullptr && dst.region->memory_kind == device::MemoryKind::kDevice) {
      RETURN_IF_ERROR(CheckTransfer(src, dst, peer_rank(), DeviceTransport::kBackend,
                                    Moves::kPeerDeviceMemory));
      if (queue_->link != nullptr) return Stage(src, dst, notification, std::move(done));
      ASSIGN_OR_RETURN(std::byte * at, Resolve(dst));
      return Enqueue(at, src.data(), src.length, notification, std::move(done));
    }
    if (queue_->ops.empty() || !notification.has_value()) {
      return Noted(*queue_, host_->PostWrite(src, dst, notification,
                                             Watched(queue_->gone, std::move(done))));
    }
    // A notification must not overtake those of copies still running.
    RETURN_IF_ERROR(CheckTransfer(src, dst, peer_rank(), host_backend()));
    RETURN_IF_ERROR(CheckRoom());
    PendingOp op;
    op.kind = PendingOp::Kind::kHostWrite;
    op.notification = notification;
    op.done = std::move(done);
    op.src = src;
    op.dst_region = *dst.region;
    op.dst_offset = dst.offset;
    op.dst_length = dst.length;
    queue_->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                        Completion done) override {
    RETURN_IF_ERROR(CheckOpen());
    if (src.region != nullptr && src.region->memory_kind == device::MemoryKind::kDevice) {
      RETURN_IF_ERROR(CheckTransfer(dst, src, peer_rank(), DeviceTransport::kBackend,
                                    Moves::kPeerDeviceMemory));
      if (queue_->link != nullptr) return StageRead(dst, src, std::move(done));
      ASSIGN_OR_RETURN(std::byte * at, Resolve(src));
      return Enqueue(dst.data(), at, dst.length, std::nullopt, std::move(done));
    }
    return Noted(*queue_, host_->PostRead(dst, src, Watched(queue_->gone, std::move(done))));
  }

  absl::Status PostFlush(Completion done) override {
    RETURN_IF_ERROR(CheckOpen());
    if (queue_->ops.empty()) {
      return Noted(*queue_, host_->PostFlush(Watched(queue_->gone, std::move(done))));
    }
    RETURN_IF_ERROR(CheckRoom());
    PendingOp op;
    op.kind = PendingOp::Kind::kFlush;
    op.done = std::move(done);
    queue_->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  absl::StatusOr<std::byte*> MapRemote(const RemoteSlice& remote) override {
    if (remote.region != nullptr && remote.region->memory_kind == device::MemoryKind::kDevice) {
      return absl::UnimplementedError(absl::StrCat(
          remote.region->DebugString(),
          " is device memory, which loads and stores of the host cannot reach: use the posts"));
    }
    return host_->MapRemote(remote);
  }

  // DeviceTransport::MapDevice.
  absl::StatusOr<std::byte*> MapDevice(const RemoteSlice& remote) {
    if (remote.region == nullptr || remote.region->memory_kind != device::MemoryKind::kDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mapping ", remote.region == nullptr ? "no region" : remote.region->DebugString(),
          " of rank ", peer_rank(), " for device work: not a device region"));
    }
    RETURN_IF_ERROR(CheckRemoteSlice(remote, peer_rank(), DeviceTransport::kBackend,
                                     Moves::kPeerDeviceMemory));
    return Resolve(remote);
  }

  absl::Status Prepare(const RemoteRegion& region) override {
    if (region.memory_kind != device::MemoryKind::kDevice) return host_->Prepare(region);
    RETURN_IF_ERROR(CheckRemoteSlice(WholeRegion(region), peer_rank(),
                                     DeviceTransport::kBackend, Moves::kPeerDeviceMemory));
    if (queue_->link != nullptr) return StagedKey(region).status();  // nothing to map
    return Resolve(WholeRegion(region)).status();
  }

  absl::Status Close() override {
    queue_->closed = true;
    return host_->Close();
  }

 private:
  std::string host_backend() const { return transport_->host().capabilities().backend; }

  absl::Status CheckOpen() const {
    if (queue_->closed) {
      return absl::FailedPreconditionError(
          absl::StrCat("the endpoint to rank ", peer_rank(), " is closed"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckRoom() const {
    // What the transport advertises: the host endpoint's limit, at most
    // kMaxPending.
    const size_t limit = transport_->max_pending();
    if (queue_->ops.size() >= limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          limit, " operations with rank ", peer_rank(),
          " are in flight: progress the transport and post again"));
    }
    return absl::OkStatus();
  }

  // The key of a device region of this staged peer: another host's.
  absl::StatusOr<DeviceKey> StagedKey(const RemoteRegion& region) const {
    ASSIGN_OR_RETURN(DeviceKey key, DeviceKey::Parse(region.packed_key, region.length));
    if (key.host == transport_->host_identity()) {
      return absl::InvalidArgumentError(absl::StrCat(
          region.DebugString(), " of rank ", peer_rank(),
          " claims this host, but its transport's address named another"));
    }
    return key;
  }

  // The local side of a staged transfer: a device region of this transport
  // or a host region of its host transport.
  absl::Status CheckStagedLocal(const LocalSlice& local, const char* what) const {
    const RemoteRegion& region = local.region->descriptor();
    const bool ours = region.memory_kind == device::MemoryKind::kDevice
                          ? region.backend == DeviceTransport::kBackend
                          : region.backend == host_backend();
    if (ours) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "a staged ", what, " rank ", peer_rank(), " with ", region.DebugString(),
        ": the local side must be a device region of this transport or a host region of its "
        "host transport (", host_backend(), ")"));
  }

  // A write into a staged peer's device region: its chunks go through the
  // link (rdma/device/staging.h) as Progress runs.
  absl::Status Stage(const LocalSlice& src, const RemoteSlice& dst,
                     std::optional<uint32_t> notification, Completion done) {
    RETURN_IF_ERROR(CheckAlive());
    RETURN_IF_ERROR(CheckRoom());
    RETURN_IF_ERROR(StagedKey(*dst.region).status());
    RETURN_IF_ERROR(CheckStagedLocal(src, "write to"));
    PendingOp op;
    op.kind = PendingOp::Kind::kStaged;
    op.staged_first = queue_->link->staged() + 1;
    op.staged_last = queue_->link->Stage(src, dst.address(), dst.length);
    op.notification = notification;
    op.done = std::move(done);
    queue_->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  // A read of a staged peer's device region: a request through the link,
  // answered by the peer's chunks into `dst`.
  absl::Status StageRead(const LocalSlice& dst, const RemoteSlice& src, Completion done) {
    RETURN_IF_ERROR(CheckAlive());
    RETURN_IF_ERROR(CheckRoom());
    RETURN_IF_ERROR(StagedKey(*src.region).status());
    RETURN_IF_ERROR(CheckStagedLocal(dst, "read from"));
    PendingOp op;
    op.kind = PendingOp::Kind::kStagedRead;
    op.staged_last = queue_->link->RequestRead(src.address(), src.length, dst.data());
    op.done = std::move(done);
    queue_->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  // Where `remote` (checked) starts in this process: the peer's allocation
  // mapped, and the region's place in it, checked against the mapping's own
  // size (the key's sizes are the peer's word).
  absl::StatusOr<std::byte*> Resolve(const RemoteSlice& remote) {
    RETURN_IF_ERROR(CheckAlive());
    ASSIGN_OR_RETURN(DeviceKey key,
                     DeviceKey::Parse(remote.region->packed_key, remote.region->length));
    if (key.host != transport_->host_identity()) {
      return absl::UnimplementedError(absl::StrCat(
          remote.region->DebugString(), " is on another host",
          queue_->link != nullptr
              ? ": its device memory is reached through the posts (staged), never mapped"
              : ", but its rank's address named this one: a forged or mixed-up descriptor"));
    }
    ASSIGN_OR_RETURN(const device::DeviceMemory* mapped, Map(key));
    if (key.offset > mapped->size() || remote.region->length > mapped->size() - key.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          remote.region->DebugString(), " claims ", remote.region->length,
          " bytes at offset ", key.offset, " of an allocation that has ", mapped->size()));
    }
    return static_cast<std::byte*>(mapped->data()) + key.offset + remote.offset;
  }

  absl::StatusOr<const device::DeviceMemory*> Map(const DeviceKey& key) {
    absl::StatusOr<const device::DeviceMemory*> mapped = transport_->Map(key, *queue_);
    if (!mapped.ok()) {
      return absl::Status(mapped.status().code(),
                          absl::StrCat("mapping a device region of rank ", peer_rank(), ": ",
                                       mapped.status().message()));
    }
    return mapped;
  }

  // Queues a copy of `bytes` from `from` to `to` on the device stream.
  // Once the peer is gone its allocations may be freed: a copy there, or a
  // mapping opened anew, could end this process's device context.
  absl::Status CheckAlive() const {
    if (!queue_->gone->ok()) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", peer_rank(), " is gone (", queue_->gone->message(),
          "): no more device copies into or out of its memory"));
    }
    return absl::OkStatus();
  }

  absl::Status Enqueue(void* to, const void* from, size_t bytes,
                       std::optional<uint32_t> notification, Completion done) {
    RETURN_IF_ERROR(CheckAlive());
    RETURN_IF_ERROR(CheckRoom());
    ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event, transport_->TakeEvent());
    absl::Status queued = transport_->stream().Copy(to, from, bytes);
    if (!queued.ok()) {  // refused: nothing queued, nothing touched
      transport_->ReturnEvent(std::move(event));
      return absl::Status(queued.code(), absl::StrCat("a device copy with rank ", peer_rank(),
                                                      ": ", queued.message()));
    }
    // Queued: the post is taken whatever the Record says, and goes on
    // only once the copy ended, so that the caller never frees memory the
    // copy still touches. A Record the device refused costs only time: the
    // copy is watched through the stream until one passes (QueuedWork),
    // and a broken stream fails the operation there.
    PendingOp op;
    op.kind = PendingOp::Kind::kDeviceCopy;
    op.copy.Mark(transport_->stream(), std::move(event)).IgnoreError();
    op.notification = notification;
    op.done = std::move(done);
    queue_->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  DeviceTransport* const transport_;
  std::unique_ptr<Endpoint> host_;
  PendingQueue* const queue_;
};

}  // namespace

DeviceTransport::DeviceTransport(std::unique_ptr<Transport> host, device::DeviceRuntime* runtime,
                                 std::string host_id, const StagingOptions& staging)
    : host_(std::move(host)),
      runtime_(runtime),
      host_id_(std::move(host_id)),
      staging_(staging),
      events_(*runtime) {}

absl::StatusOr<std::unique_ptr<DeviceTransport>> DeviceTransport::Create(
    std::unique_ptr<Transport> host, device::DeviceRuntime* runtime,
    const DeviceTransportOptions& options) {
  if (host == nullptr || runtime == nullptr) {
    return absl::InvalidArgumentError("a device transport needs a host transport and a device");
  }
  RETURN_IF_ERROR(CheckStagingOptions(options.staging));
  std::string host_id = options.host_identity;
  if (host_id.empty()) {
    ASSIGN_OR_RETURN(host_id, ThisHost());
  } else if (host_id.size() > DeviceKey::kMaxHostBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a host identity of ", host_id.size(),
                                                   " bytes (at most ", DeviceKey::kMaxHostBytes,
                                                   ")"));
  }
  std::unique_ptr<DeviceTransport> transport(
      new DeviceTransport(std::move(host), runtime, std::move(host_id), options.staging));
  ASSIGN_OR_RETURN(transport->directory_,
                   transport->host_->Allocate(static_cast<size_t>(options.staging.directory_ranks) *
                                              staging_layout::kEntryBytes));
  transport->max_pending_ =
      std::min(kMaxPending, transport->host_->capabilities().max_outstanding_per_endpoint);
  ASSIGN_OR_RETURN(transport->stream_, runtime->CreateStream());
  transport->gpudirect_ = ProbeGpuDirect(*transport->host_, *runtime);
  ASSIGN_OR_RETURN(transport->doorbell_, transport->host_->Allocate(kDoorbellBytes));
  ASSIGN_OR_RETURN(transport->doorbell_source_, transport->host_->Allocate(kDoorbellBytes));
  return transport;
}

DeviceTransport::~DeviceTransport() {
  // Copies still running may touch peers' mappings and our regions: let
  // them end before either goes.
  absl::StatusOr<std::unique_ptr<device::Event>> idle = TakeEvent();
  device::QueuedWork copies;
  // With no event, or its Record failing: waited for as the stream's idling.
  copies.Mark(*stream_, idle.ok() ? *std::move(idle) : nullptr).IgnoreError();
  copies.WaitUntil(absl::Now() + kDrainTimeout, "device copies at shutdown").IgnoreError();
}

Capabilities DeviceTransport::capabilities() const {
  Capabilities capabilities = host_->capabilities();
  absl::StrAppend(&capabilities.description, "; device regions: ", runtime_->name(),
                  ", by IPC with peers on this host, staged through pinned host memory (",
                  staging_.slots, " slots of ", staging_.slot_bytes, " bytes a peer) with others",
                  "; GPUDirect RDMA: ",
                  gpudirect_.ok() ? std::string("available (unused)")
                                  : absl::StrCat("no (", gpudirect_.message(), ")"));
  capabilities.max_outstanding_per_endpoint = max_pending_;
  capabilities.flag_writes = false;  // its endpoints have none
  capabilities.device_regions = true;
  return capabilities;
}

std::string DeviceTransport::address() const {
  DeviceAddressProto proto;
  proto.set_version(kAddressVersion);
  proto.set_host_address(host_->address());
  proto.set_host(host_id_);
  proto.set_doorbell(doorbell_.descriptor().Serialize());
  proto.set_directory(directory_.descriptor().Serialize());
  proto.set_staging_slots(static_cast<uint32_t>(staging_.slots));
  proto.set_staging_slot_bytes(staging_.slot_bytes);
  return proto.SerializeAsString();
}

absl::StatusOr<std::unique_ptr<Endpoint>> DeviceTransport::Connect(const PeerInfo& peer) {
  DeviceAddressProto proto;
  if (!proto.ParseFromArray(peer.address.data(), static_cast<int>(peer.address.size())) ||
      proto.version() != kAddressVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer.rank, "'s address is not a device transport's (version ",
        kAddressVersion, "): do all ranks use the device path?"));
  }
  absl::StatusOr<RemoteRegion> doorbell = RemoteRegion::Parse(proto.doorbell());
  if (!doorbell.ok() || doorbell->owner_rank != peer.rank ||
      doorbell->memory_kind != device::MemoryKind::kHost ||
      doorbell->length < kDoorbellBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer.rank, "'s address carries no usable doorbell region",
        doorbell.ok() ? "" : absl::StrCat(": ", doorbell.status().message())));
  }
  // A peer on another host gets the staged path: its directory, and links
  // of the same sizes as ours.
  const bool staged = proto.host() != host_id_;
  std::optional<RemoteRegion> directory;
  if (staged) {
    absl::StatusOr<RemoteRegion> parsed = RemoteRegion::Parse(proto.directory());
    if (!parsed.ok() || parsed->owner_rank != peer.rank ||
        parsed->memory_kind != device::MemoryKind::kHost) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", peer.rank, "'s address carries no usable staging directory",
          parsed.ok() ? "" : absl::StrCat(": ", parsed.status().message())));
    }
    if (proto.staging_slots() != staging_.slots ||
        proto.staging_slot_bytes() != staging_.slot_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", peer.rank, " stages in ", proto.staging_slots(), " slots of ",
          proto.staging_slot_bytes(), " bytes, rank ", rank(), " in ", staging_.slots,
          " of ", staging_.slot_bytes, ": give every rank the same staging options"));
    }
    if (peer.rank < 0 || peer.rank >= staging_.directory_ranks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", peer.rank, " is on another host, and rank ", rank(),
          "'s staging directory has room for ranks 0 to ", staging_.directory_ranks - 1,
          ": raise DeviceTransportOptions::staging.directory_ranks"));
    }
    directory = *std::move(parsed);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> host,
                   host_->Connect({peer.rank, proto.host_address()}));
  // Resolved now, while the peer surely holds it (Endpoint::Prepare).
  RETURN_IF_ERROR(host->Prepare(*doorbell));
  StagingLink* link = nullptr;
  if (staged) {
    // One link per peer: every endpoint to it shares it (the peer's
    // directory has one entry for us). A link that failed (its peer died)
    // is replaced, for a peer that came back.
    auto it = links_.find(peer.rank);
    if (it == links_.end() || !it->second->error().ok()) {
      ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> own,
                       host_->Connect({peer.rank, proto.host_address()}));
      RETURN_IF_ERROR(own->Prepare(*directory));
      ASSIGN_OR_RETURN(
          std::unique_ptr<StagingLink> made,
          StagingLink::Create(*host_, *runtime_, staging_, std::move(own), *directory, rank(),
                              directory_.data() +
                                  static_cast<size_t>(peer.rank) * staging_layout::kEntryBytes,
                              Incarnation(proto.host_address()), ranges_));
      if (it != links_.end()) {
        retired_links_.push_back(std::move(it->second));
        it->second = std::move(made);
      } else {
        it = links_.emplace(peer.rank, std::move(made)).first;
      }
    }
    link = it->second.get();
  }
  PendingQueue* queue = NewQueue(peer.rank);
  queue->peer_doorbell = *std::move(doorbell);
  queue->link = link;
  return std::make_unique<DeviceEndpoint>(this, std::move(host), queue);
}

absl::StatusOr<std::byte*> DeviceTransport::MapDevice(Endpoint& endpoint,
                                                      const RemoteSlice& remote) {
  auto* ours = dynamic_cast<DeviceEndpoint*>(&endpoint);
  if (ours == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mapping a device region through ", endpoint.Describe(),
        ": not an endpoint of this device transport"));
  }
  return ours->MapDevice(remote);
}

PendingQueue* DeviceTransport::NewQueue(int peer_rank) {
  auto queue = std::make_unique<PendingQueue>();
  queue->peer_rank = peer_rank;
  queues_.push_back(std::move(queue));
  return queues_.back().get();
}

uint64_t DeviceTransport::staged_answer_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [peer, link] : links_) bytes += link->answered_bytes();
  return bytes;
}

absl::StatusOr<int> DeviceTransport::Progress() {
  ASSIGN_OR_RETURN(int fired, host_->Progress());
  for (int round = 0; round < kStagedRounds; ++round) {
    // Each link: its error stays in it, and the staged operations of every
    // endpoint to that peer fail with it.
    bool busy = false;
    for (auto& [peer, link] : links_) {
      if (link->error().ok()) {
        link->Advance(*stream_).IgnoreError();
        busy = busy || link->busy();
      } else {
        link->Quiesce();  // only its device copies end
      }
    }
    if (!busy || round + 1 == kStagedRounds) break;
    ASSIGN_OR_RETURN(const int more, host_->Progress());
    if (more == 0) break;
    fired += more;
  }
  for (auto& link : retired_links_) link->Quiesce();
  const QueueWalk walk(walks_);
  for (auto it = queues_.begin(); it != queues_.end();) {
    PendingQueue& queue = **it;
    fired += Advance(*this, queue);
    if (!queue.ops.empty() || (queue.link != nullptr && queue.link->copying())) {
      ++it;
      continue;
    }
    // No copy of this endpoint runs: the mappings of a gone peer are closed
    // (holding them may hold its freed allocations' resources), and a queue
    // whose endpoint was destroyed goes with its own.
    // Only the outermost walk drops one: a completion that called Progress()
    // again may have come from an Advance of this very queue.
    const bool destroyed = queue.host == nullptr;
    if (destroyed || !queue.gone->ok()) Unmap(queue);
    it = destroyed && walk.outermost() ? queues_.erase(it) : std::next(it);
  }
  return fired;
}

absl::Status DeviceTransport::CloseMappings(absl::Time deadline) {
  // Operations whose copies ended since the last Progress() move on here
  // first (complete, or post their host part): only what still runs
  // refuses the close.
  {
    const QueueWalk walk(walks_);
    for (const auto& queue : queues_) Advance(*this, *queue);
  }
  for (const auto& queue : queues_) {
    if (!queue->ops.empty() || (queue->link != nullptr && queue->link->copying())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "closing the peers' mappings: operations to rank ", queue->peer_rank,
          " are still in flight"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> idle, TakeEvent());
  device::QueuedWork copies;
  copies.Mark(*stream_, std::move(idle)).IgnoreError();  // or waited for as the stream
  const absl::Status drained = copies.WaitUntil(deadline, "device copies before closing mappings");
  ReturnEvent(copies.Release());
  RETURN_IF_ERROR(drained);
  for (const auto& queue : queues_) queue->mapped.clear();
  mappings_.clear();
  return absl::OkStatus();
}

void DeviceTransport::Unmap(PendingQueue& queue) {
  for (const std::string& id : queue.mapped) {
    const bool shared = std::any_of(queues_.begin(), queues_.end(), [&](const auto& other) {
      return other.get() != &queue &&
             std::find(other->mapped.begin(), other->mapped.end(), id) != other->mapped.end();
    });
    if (!shared) mappings_.erase(id);
  }
  queue.mapped.clear();
}

bool DeviceTransport::WaitForActivity(absl::Duration timeout) {
  const bool copying =
      std::any_of(queues_.begin(), queues_.end(),
                  [](const auto& queue) { return !queue->ops.empty(); }) ||
      std::any_of(links_.begin(), links_.end(),
                  [](const auto& entry) { return entry.second->busy(); });
  const bool staged_peer = std::any_of(links_.begin(), links_.end(),
                                       [](const auto& entry) { return entry.second->error().ok(); });
  const absl::Duration look = copying       ? kCopyLook
                              : staged_peer ? kStagedPeerLook
                                            : absl::InfiniteDuration();
  // With device copies in flight what is waited for runs on the device,
  // which needs none of our cores: the nap ends when it says, not the
  // kernel's default timer slack (50 us) later (common/timer_slack.h).
  std::optional<ScopedTimerSlack> precise;
  if (copying) precise.emplace(kCopySlack);
  return host_->WaitForActivity(std::min(timeout, look));
}

absl::StatusOr<MemoryRegion> DeviceTransport::AllocateDevice(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a device region of 0 bytes");
  ASSIGN_OR_RETURN(device::DeviceMemory memory, runtime_->Allocate(bytes));
  ASSIGN_OR_RETURN(device::PointerInfo info, runtime_->Query(memory.data()));
  auto* data = static_cast<std::byte*>(memory.data());
  // Zeroed, as Allocate's host memory is: on this transport's stream, and
  // waited for (only that, not the device) before a peer can see the region.
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event, TakeEvent());
  absl::Status status = stream_->Zero(data, bytes);
  if (!status.ok()) {
    ReturnEvent(std::move(event));
    return status;
  }
  // A Record refused costs only time: the zeroing is watched through the
  // stream until one passes.
  device::QueuedWork zeroing;
  zeroing.Mark(*stream_, std::move(event)).IgnoreError();
  status = zeroing.WaitUntil(absl::Now() + kZeroTimeout,
                             absl::StrCat("zeroing a new ", bytes, "-byte device region"));
  // Still queued or running at the deadline: its memory stays until the
  // stream has gone.
  if (!status.ok()) abandoned_.push_back(std::move(memory));
  ReturnEvent(zeroing.Release());
  RETURN_IF_ERROR(status);
  return DeviceRegion(data, bytes, info, std::move(memory));
}

absl::StatusOr<MemoryRegion> DeviceTransport::RegisterDevice(void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("registering an empty or null device range");
  }
  ASSIGN_OR_RETURN(device::PointerInfo info, runtime_->Query(data));
  if (info.kind != device::MemoryKind::kDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "registering ", bytes, " bytes at ", absl::StrFormat("%p", data),
        " as device memory of ", runtime_->name(),
        ": it is host memory (register it with Register)"));
  }
  const auto* base = static_cast<const std::byte*>(info.base);
  const auto* at = static_cast<const std::byte*>(data);
  const size_t offset = static_cast<size_t>(at - base);
  if (offset > info.size || bytes > info.size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "registering ", bytes, " bytes at offset ", offset, " of a ", info.size,
        "-byte device allocation: the range runs past its end"));
  }
  return DeviceRegion(static_cast<std::byte*>(data), bytes, info, device::DeviceMemory());
}

absl::StatusOr<MemoryRegion> DeviceTransport::DeviceRegion(std::byte* data, size_t bytes,
                                                           const device::PointerInfo& info,
                                                           device::DeviceMemory owned) {
  // Exported anew for every region: a cached handle would outlive a freed
  // allocation whose base is then reused.
  ASSIGN_OR_RETURN(device::IpcHandle handle, runtime_->ExportIpc(info.base));
  DeviceKey key;
  key.host = host_id_;
  key.device = info.device;
  key.handle = handle;
  key.offset = static_cast<uint64_t>(data - static_cast<const std::byte*>(info.base));
  key.allocation_size = info.size;
  RemoteRegion descriptor;
  descriptor.backend = kBackend;
  descriptor.owner_rank = rank();
  descriptor.address = reinterpret_cast<uint64_t>(data);
  descriptor.length = bytes;
  descriptor.packed_key = key.Serialize();
  descriptor.memory_kind = device::MemoryKind::kDevice;
  RETURN_IF_ERROR(descriptor.Validate());
  return MemoryRegion(data, bytes, std::move(descriptor),
                      std::make_unique<DeviceRegistration>(
                          std::move(owned), ranges_, retired_, reinterpret_cast<uintptr_t>(data),
                          bytes));
}

absl::StatusOr<const device::DeviceMemory*> DeviceTransport::Map(const DeviceKey& key,
                                                                  PendingQueue& user) {
  std::string id(reinterpret_cast<const char*>(key.handle.bytes.data()),
                 key.handle.bytes.size());
  auto it = mappings_.find(id);
  if (it == mappings_.end()) {
    ASSIGN_OR_RETURN(device::DeviceMemory mapped, runtime_->OpenIpc(key.handle));
    it = mappings_.emplace(id, std::move(mapped)).first;
  }
  if (std::find(user.mapped.begin(), user.mapped.end(), id) == user.mapped.end()) {
    user.mapped.push_back(std::move(id));
  }
  return &it->second;
}

absl::StatusOr<std::unique_ptr<device::Event>> DeviceTransport::TakeEvent() {
  return events_.Take();
}

void DeviceTransport::ReturnEvent(std::unique_ptr<device::Event> event) {
  events_.Give(std::move(event));
}

}  // namespace rdmaflow::rdma::device_path

// File: device_transport.h
// -----------------------------------------------------------------------------
// DeviceTransport: device memory as regions of a transport (docs/device.md).
// It wraps a host transport (UCX, verbs, loopback), which still moves every
// host region and carries every notification, and adds device regions:
//
//   AllocateDevice / RegisterDevice   a region of device memory (this
//                                     runtime's, or a caller's such as a
//                                     tensor's); its descriptor has
//                                     memory_kind = device, backend "device",
//                                     and a key naming this host and the
//                                     allocation's IPC handle
//
// A write into a peer's device region, or a read from one, runs as a copy on
// this process's device stream through an IPC mapping of the peer's
// allocation (opened once, kept while an endpoint that used it lives and its
// peer is not gone); the local side
// may be host or device memory. A write's notification goes out through the
// host transport (a write into a small host region of the peer's, the
// doorbell) only once the copy's event has completed, so the peer sees the
// bytes before the notification, and notifications of one endpoint keep
// the order of their posts across both paths. Every completion fires from
// Progress().
//
// A write into a device region of a peer on another host (the key's host
// is not ours, so no IPC handle opens) is staged through pinned host memory
// in chunks (rdma/device/staging.h): a device copy into an outbound slot (a
// host source is written from where it lies), a host write into the peer's
// inbound slot, and a copy into its device memory that the peer's Progress
// makes; the write completes, and its notification goes, once the peer has
// said every chunk landed. A read of another host's device memory is
// staged the other way: a request record, which the peer's Progress answers
// by copying into its outbound slots and writing them into ours. Both ranks
// must connect to each other, and the peer must progress. A device region
// as the source of a write into a peer's host region is refused by name:
// device memory is never handed to the host transport (Debian's UCX is
// built without CUDA).
//
// Thread-compatible, as every Transport.
#ifndef RDMAFLOW_RDMA_DEVICE_DEVICE_TRANSPORT_H_
#define RDMAFLOW_RDMA_DEVICE_DEVICE_TRANSPORT_H_

#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device/device_runtime.h"
#include "device/event_pool.h"
#include "rdma/device/device_key.h"
#include "rdma/device/staging.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::device_path {

struct PendingQueue;

// Device memory whose region was destroyed while a peer may still have it
// open: kept, and freed with the last owner of this object (the device
// transport, or a region that outlives it). Thread-safe.
class RetiredDeviceMemory {
 public:
  void Keep(device::DeviceMemory memory);
  size_t bytes() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<device::DeviceMemory> memory_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

struct DeviceTransportOptions {
  // This host's identity, which tells same-host peers (IPC) from others
  // (staged). Empty: the kernel's boot id. Set it to stage between
  // processes of one host, e.g. containers that cannot share IPC handles,
  // or tests.
  std::string host_identity;
  StagingOptions staging;
};

class DeviceTransport final : public Transport {
 public:
  // The backend name device regions carry.
  static constexpr char kBackend[] = "device";

  // `runtime` must outlive the transport. kUnavailable where this host's
  // identity cannot be read; the host transport's or runtime's error.
  static absl::StatusOr<std::unique_ptr<DeviceTransport>> Create(
      std::unique_ptr<Transport> host, device::DeviceRuntime* runtime,
      const DeviceTransportOptions& options = {});
  ~DeviceTransport() override;

  // `bytes` of zeroed device memory, owned by the region, and freed when
  // the transport goes (retired_bytes()).
  // The zeroing runs on this transport's stream and is waited for, at most
  // kZeroTimeout (kDeadlineExceeded then).
  absl::StatusOr<MemoryRegion> AllocateDevice(size_t bytes) override;
  static constexpr absl::Duration kZeroTimeout = absl::Seconds(60);
  // The caller's device memory [data, data + bytes), which must lie in one
  // allocation of this transport's runtime and outlive the region (and,
  // when peers of this host map it, their CloseMappings: close_mappings.h).
  // kInvalidArgument for host memory, another device's, or a range past
  // the end of its allocation.
  absl::StatusOr<MemoryRegion> RegisterDevice(void* data, size_t bytes);

  // Where `remote` (a slice of a peer's device region) starts in this
  // process, for device work of this runtime (a stream's copies and
  // reductions; never host loads and stores): the peer's allocation mapped
  // by IPC, as the posts map it, kept while `endpoint` lives. `endpoint`
  // must be one of this transport's. kInvalidArgument for a host region or
  // a bad slice; kUnimplemented for a region of another host; kUnavailable
  // once the peer is gone; OpenIpc's errors.
  absl::StatusOr<std::byte*> MapDevice(Endpoint& endpoint, const RemoteSlice& remote);

  device::DeviceRuntime& runtime() { return *runtime_; }
  Transport& host() { return *host_; }
  // Whether the host transport's NIC reaches this device's memory directly
  // (GPUDirect RDMA; ProbeGpuDirect, run once at Create): OK, or why not.
  // Reported in capabilities(); no path uses it yet (docs/device.md).
  const absl::Status& gpudirect() const { return gpudirect_; }

  // Transport. Allocate and Register give host regions of the host
  // transport; Connect an endpoint that moves both kinds.
  int rank() const override { return host_->rank(); }
  Capabilities capabilities() const override;
  std::string address() const override;
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override { return host_->Allocate(bytes); }
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override {
    return host_->Register(memory);
  }
  absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span) override {
    return host_->RegisterDmaBuf(span);
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;
  std::optional<Notification> PollNotification() override { return host_->PollNotification(); }
  // No event announces a finished device copy, nor a staged peer's chunk
  // or read request (a silent write into our link): while a copy runs, or
  // a staged peer is linked, the host transport is asked to wait at most
  // kCopyLook or kStagedPeerLook, so a target serving staged reads answers
  // within about that much even when it sleeps here.
  bool WaitForActivity(absl::Duration timeout) override;
  // The host transport's: its wait is the one WaitForActivity() sleeps in.
  void InterruptWait() override { host_->InterruptWait(); }
  static constexpr absl::Duration kCopyLook = absl::Microseconds(50);
  // The thread's timer slack while it waits with copies in flight.
  static constexpr absl::Duration kCopySlack = absl::Microseconds(1);
  static constexpr absl::Duration kStagedPeerLook = absl::Microseconds(100);

  // For DeviceEndpoint: the peer's allocation named by `key`, mapped here
  // (opened at the first use; closed once no endpoint that used it is left,
  // or the peer is gone), and this transport's stream and events.
  absl::StatusOr<const device::DeviceMemory*> Map(const DeviceKey& key, PendingQueue& user);
  device::Stream& stream() { return *stream_; }
  absl::StatusOr<std::unique_ptr<device::Event>> TakeEvent();
  void ReturnEvent(std::unique_ptr<device::Event> event);
  const std::string& host_identity() const { return host_id_; }
  const MemoryRegion& doorbell_source() const { return doorbell_source_; }
  // A queue of an endpoint's operations, owned here so that what an endpoint
  // left in flight when it was destroyed still completes (kCancelled).
  PendingQueue* NewQueue(int peer_rank);

  // Operations one endpoint holds in flight before kResourceExhausted: the
  // host transport's limit, at most 1024.
  size_t max_pending() const { return max_pending_; }

  // How many peers' allocations are mapped here (diagnostics, tests).
  size_t mapped_allocations() const { return mappings_.size(); }
  // Bytes of this transport's device memory staged so far to answer staged
  // peers' reads, over the links in use (diagnostics, tests).
  uint64_t staged_answer_bytes() const;

  // Device memory of AllocateDevice regions already destroyed, still
  // allocated: a region's memory is freed when the transport goes (or, if
  // regions outlive it, with the last of them), not with the region: a peer
  // of this host may still have it open (CUDA leaves freeing memory another
  // process has open undefined) until the collective teardown: every rank
  // CloseMappings(), a barrier, then the transports go.
  size_t retired_bytes() const { return retired_->bytes(); }

  // Closes every mapping of a peer's allocation, once this transport's
  // copies have ended (waited for until `deadline`): for a collective
  // teardown after the last operation, so that every peer may free what
  // it exported once all have closed (CUDA leaves freeing memory another
  // process still has open undefined). Operations whose copies have ended
  // move on first, as in Progress(): a read or a write without a
  // notification completes there, a notification or a held host operation
  // is posted (its completion fires from a later Progress()).
  // kFailedPrecondition, closing nothing (but having moved those on),
  // while an endpoint still has operations in flight; the wait's error. Device work of the caller's
  // own that reads the mappings (what MapDevice gave out: a collective's
  // reductions on its mover's stream) must have ended first, and those
  // pointers are invalid after it; an endpoint used afterwards maps again.
  absl::Status CloseMappings(absl::Time deadline);

 private:
  DeviceTransport(std::unique_ptr<Transport> host, device::DeviceRuntime* runtime,
                  std::string host_id, const StagingOptions& staging);
  // Closes the mappings `queue` opened that no other endpoint uses.
  void Unmap(PendingQueue& queue);
  absl::StatusOr<MemoryRegion> DeviceRegion(std::byte* data, size_t bytes,
                                            const device::PointerInfo& info,
                                            device::DeviceMemory owned);

  std::unique_ptr<Transport> host_;
  device::DeviceRuntime* const runtime_;
  const std::string host_id_;
  const StagingOptions staging_;
  size_t max_pending_ = 0;
  absl::Status gpudirect_;
  // Where peers on other hosts publish their links, and the device ranges
  // their chunks may land in.
  MemoryRegion directory_;
  std::shared_ptr<DeviceRanges> ranges_ = std::make_shared<DeviceRanges>();
  // Destroyed regions' memory (retired_bytes), shared with the regions.
  std::shared_ptr<RetiredDeviceMemory> retired_ = std::make_shared<RetiredDeviceMemory>();
  // Allocations whose zeroing was queued but not seen to complete
  // (AllocateDevice gave up): kept until the transport goes, after its
  // destructor's drain of the stream (declared after, so destroyed first).
  std::vector<device::DeviceMemory> abandoned_;
  std::unique_ptr<device::Stream> stream_;
  device::EventPool events_;
  // Host memory the peers' notifications are written into (its bytes mean
  // nothing), and the 8 bytes ours are written from.
  MemoryRegion doorbell_;
  MemoryRegion doorbell_source_;
  // Peers' allocations mapped here, by IPC handle.
  absl::flat_hash_map<std::string, device::DeviceMemory> mappings_;
  // The staged path: one link per peer on another host, and links that
  // failed and were replaced (kept until the transport goes, as their
  // device copies may still run). Before queues_: the queues go first.
  absl::flat_hash_map<int, std::unique_ptr<StagingLink>> links_;
  std::vector<std::unique_ptr<StagingLink>> retired_links_;
  std::list<std::unique_ptr<PendingQueue>> queues_;
  // Walks over queues_ under way (a completion may call Progress() from
  // inside one): only the outermost erases a queue.
  int walks_ = 0;
};

}  // namespace rdmaflow::rdma::device_path

#endif  // RDMAFLOW_RDMA_DEVICE_DEVICE_TRANSPORT_H_

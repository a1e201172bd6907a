// File: versioned_buffer.h
// -----------------------------------------------------------------------------
// Versioned buffers: memory one rank updates and other ranks read with
// one-sided RDMA READs, without the owner's CPU, and without ever seeing a
// half-updated tensor. A parameter server publishes each shard of its
// parameters in one; workers pull them (strategies/ps); gossip reads a
// peer's parameters the same way.
//
// The owner keeps `copies` copies (>= 2) of the tensor and a header: the
// latest version number and, per copy, a stamp. Each copy is a stamped slot
// (stamped_slot.h) whose stamp word lies in the header: copy v % copies
// holds version v once its stamp is 2v, and is being written while it is
// 2v-1. Update() writes version v+1 into the copy after the latest, so
// readers of the latest are not disturbed. A reader reads the header, then
// the latest copy, then that copy's stamp again (three ordered reads, a
// seqlock): a stamp of exactly 2v, unchanged, proves no write overlapped the
// copy; otherwise it retries. A reader that loses the race needs
// `copies - 1` updates to pass during one read.
//
// In memory: 8-byte words [latest version][stamp of copy 0]...[stamp of
// copy copies-1], padded to 64 bytes, then the copies, each rounded up to
// 64 bytes. With the copies in device memory (copies_in = kDevice: a
// parameter server's shard or a gossip peer's parameters on a GPU), the
// header stays in host memory and the copies lie in a device region of
// their own (transport.AllocateDevice: rdma/device), published beside it;
// readers read the header as before and the copy through the transport's
// device path (IPC on one host, staged otherwise), into host or device
// memory. Update()'s `fill` then gets device pointers and must have
// finished its device work when it returns (synchronize the stream that
// wrote them): the copy's stamp says whole only after `fill` returns.
//
// Everything a reader learns from the store (the layout: bytes and copies;
// the region's descriptor) or from the owner's memory (the latest version,
// the stamps) is untrusted: the layout is checked with overflow-safe
// arithmetic against the descriptor before it sizes anything, and a header
// whose version goes back, or lies beyond what a stamp can hold (2^63 - 1),
// or a copy's stamp that goes back, fails the reader with kDataLoss for
// good.
//
// A reader reads over a PeerLinks' (onesided/links) data lane to the owner,
// shared with the other protocols on the links (a strategy's communicator,
// its mailbox); a read that times out is fenced on the links
// (PeerLinks::FenceOn), never the lane closed under the others.
//
//   // owner (rank 0)
//   ASSIGN_OR_RETURN(auto shard, VersionedBuffer::Create(
//       links, "shard0", bytes, /*copies=*/3));
//   shard->Update([&](std::byte* next, const std::byte* latest) { ... });
//   // reader (rank 1)
//   ASSIGN_OR_RETURN(auto pull, VersionedReader::Create(
//       links, "shard0", /*owner=*/0, absl::Seconds(60)));
//   ASSIGN_OR_RETURN(uint64_t version, pull->Read({&region, 0,
//   pull->bytes()}));
#ifndef RDMAFLOW_ONESIDED_VERSIONED_BUFFER_H_
#define RDMAFLOW_ONESIDED_VERSIONED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device/memory_kind.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/waits.h"
#include "onesided/stamped_slot.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

// The owner's side. Thread-compatible; Update() touches only local memory
// (no transport call), so it may run while readers read.
class VersionedBuffer {
 public:
  // The most copies a buffer may have: a reader reads the whole header (8
  // bytes per copy) on every Read(), and a layout in the store claiming more
  // must not make it allocate without bound.
  static constexpr int kMaxCopies = 1024;

  // Allocates the header and the copies with transport.Allocate() (with
  // `copies_in` kDevice: the header so, the copies with
  // transport.AllocateDevice(), in a region of their own), writes version 0
  // (zeros) and publishes the descriptors as <ns>/versioned/<name> (and
  // <ns>/versioned/<name>/copies). kInvalidArgument for 0 bytes, fewer than
  // 2 or more than kMaxCopies copies, or a size that does not fit in
  // size_t; Allocate's and AllocateDevice's errors (kUnimplemented from a
  // transport without device regions). The transport's address is
  // published there too (readers connect by it).
  static absl::StatusOr<std::unique_ptr<VersionedBuffer>> Create(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      const std::string& name, size_t bytes, int copies,
      device::MemoryKind copies_in = device::MemoryKind::kHost);
  // The same on `links` (their transport, store and namespace; the links
  // published the address).
  static absl::StatusOr<std::unique_ptr<VersionedBuffer>> Create(
      PeerLinks& links, const std::string& name, size_t bytes, int copies,
      device::MemoryKind copies_in = device::MemoryKind::kHost);

  size_t bytes() const { return bytes_; }
  // Versions written so far (0 before the first Update()).
  uint64_t version() const { return version_; }
  // Where the copies lie: host or device memory.
  device::MemoryKind copies_in() const { return copies_region_->descriptor().memory_kind; }
  // The latest version's bytes (read-only: readers may be reading them; a
  // device address with copies in device memory).
  const std::byte* latest() const { return CopyData(version_); }
  // The registered memory holding the header, and the copies unless they
  // are in device memory.
  const rdma::MemoryRegion& region() const { return *region_; }
  // The registered memory holding the copies: region(), or the device
  // region.
  const rdma::MemoryRegion& copies_region() const { return *copies_region_; }

  // Writes version()+1: `fill(next, latest)` must write all bytes() of
  // `next` (it may read `latest`, the current version), device work
  // included; then the new version becomes the latest, atomically for
  // readers.
  void Update(
      absl::FunctionRef<void(std::byte* next, const std::byte* latest)> fill);
  // Update() with a `fill` that may fail (a device's work): when it does,
  // nothing is published (readers keep the latest version; the copy it
  // was writing reads as being written until the next update) and its
  // error returns.
  absl::Status TryUpdate(
      absl::FunctionRef<absl::Status(std::byte* next, const std::byte* latest)> fill);

 private:
  VersionedBuffer(std::unique_ptr<rdma::MemoryRegion> region,
                  std::unique_ptr<rdma::MemoryRegion> device_copies, size_t bytes, int copies);
  // Both Create()s but the address.
  static absl::StatusOr<std::unique_ptr<VersionedBuffer>> Make(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      const std::string& name, size_t bytes, int copies, device::MemoryKind copies_in);
  std::byte* CopyData(uint64_t version) const;

  std::unique_ptr<rdma::MemoryRegion> region_;
  // The copies in device memory, or null (they follow the header).
  std::unique_ptr<rdma::MemoryRegion> device_copies_;
  const rdma::MemoryRegion* copies_region_;  // device_copies_ or region_
  size_t bytes_;
  int copies_;
  uint64_t version_ = 0;
};

// A reader's side. Single-thread: Read() and LatestVersion() wait through
// the transport's ProgressLoop (so on its thread), which keeps running the
// other protocols registered with it (a communicator's) while they wait.
class VersionedReader {
 public:
  // Fetches <ns>/versioned/<name> from the links' store and namespace
  // (waiting up to `timeout` for the owner to publish it; and the copies'
  // device region, for a buffer whose copies are in device memory, which
  // needs a transport with device regions: kFailedPrecondition otherwise)
  // and takes the
  // links' `lane` to `owner_rank` (the links must outlive the reader): the
  // data lane, or the control lane for reads that must not queue behind
  // this rank's own writes to the owner on a transport that delivers in
  // order (the parameter server's pulls during its pushes, over UCX TCP).
  // kDeadlineExceeded names both; kInvalidArgument naming the field for a
  // layout that is malformed, out of range (bytes 0, copies outside
  // 2..kMaxCopies), overflows size_t, or does not fit in the published
  // descriptor; the links' error for a peer severed or never joined.
  static absl::StatusOr<std::unique_ptr<VersionedReader>> Create(PeerLinks& links,
                                                                 const std::string& name,
                                                                 int owner_rank,
                                                                 absl::Duration timeout,
                                                                 LaneKind lane = LaneKind::kData);

  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  // Reads a whole, consistent version into `dst` (registered memory of
  // exactly bytes(), host or device memory where the transport moves
  // both) and returns its version number. kInvalidArgument for a
  // wrong `dst`; kUnavailable / kDeadlineExceeded when the owner is gone or
  // silent; kAborted when 1000 attempts in a row lost the race against the
  // owner's updates (give the buffer more copies); kDataLoss when the
  // owner's header broke the protocol (a version below one already seen, or
  // one of 2^63 or more, or a copy's stamp going back), and from then on for
  // every call.
  absl::StatusOr<uint64_t> Read(const rdma::LocalSlice& dst);

  // The latest version number, by one 8-byte read. kDataLoss as for Read().
  absl::StatusOr<uint64_t> LatestVersion();

  // OK while the owner answers: a flush of the lane to it, which reads none
  // of its memory. For liveness probes of an owner that may free the
  // buffer at any moment (once it believes its last reader is done): over
  // UCX TCP, whose reads run in software on the owner, a read arriving
  // after the free touches freed memory there. kUnavailable /
  // kDeadlineExceeded as for Read().
  absl::Status Probe();
  // Probe() without waiting: posts the flush, whose `done` fires from the
  // loop's progress once the owner answered, or with why not. Over UCX TCP
  // a flush needs the owner's progress, so `done` may not fire while the
  // owner does not progress (until the endpoint closes: kCancelled). A
  // flush holds no memory on either side: the caller may stop waiting for
  // it, but `done` must stay safe to run until then. kUnavailable when the
  // owner is known gone; a post's errors (kResourceExhausted: try later).
  absl::Status PostProbe(rdma::Completion done);

  // Reads that saw their copy overwritten and started again.
  int64_t retries() const { return retries_; }

 private:
  VersionedReader(PeerLinks& links, std::string name, int owner, absl::Duration timeout);
  // Reads `count` header words at byte `offset` into scratch_ (same offset).
  absl::Status ReadWords(size_t offset, size_t count);
  // Error context for a failed read of the owner's memory.
  absl::Status Named(absl::Status status) const;
  // version_.Advance(version); kDataLoss is kept in failed_.
  absl::Status CheckVersion(uint64_t version);

  PeerLinks& links_;
  const std::string name_;
  const int owner_;
  const absl::Duration timeout_;
  rdma::Endpoint* endpoint_ = nullptr;  // the links' lane to the owner
  Fence fence_;                         // PeerLinks::FenceOn(owner_)
  std::unique_ptr<rdma::RemoteRegion> remote_;
  // The copies' region: remote_, or the device region of a buffer whose
  // copies are in device memory; where copy 0 starts in it.
  std::unique_ptr<rdma::RemoteRegion> device_copies_;
  const rdma::RemoteRegion* copies_remote_ = nullptr;
  size_t first_copy_ = 0;
  std::unique_ptr<rdma::MemoryRegion> scratch_;  // header words read back
  size_t bytes_ = 0;
  int copies_ = 0;
  int64_t retries_ = 0;
  RisingWord version_;                     // the header's latest version
  std::vector<StampedSlotReader> stamps_;  // by copy
  absl::Status failed_;  // kDataLoss once the owner broke the protocol
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_VERSIONED_BUFFER_H_

// File: transport.h
// -----------------------------------------------------------------------------
// Transport: one per process and backend; "the remote machine as a device
// with a memory interface". It allocates and registers memory regions,
// connects endpoints to peers, and owns the progress context that completes
// operations and delivers notifications.
#ifndef RDMAFLOW_RDMA_TRANSPORT_H_
#define RDMAFLOW_RDMA_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"

namespace rdmaflow::rdma {

// How to reach a peer's transport: its rank and the address blob that the
// peer's Transport::address() returned (exchanged through a Store).
struct PeerInfo {
  int rank = -1;
  std::string address;
};

// A notification delivered by a peer's PostWrite(..., notification, ...).
struct Notification {
  int peer_rank = -1;
  uint32_t value = 0;
};

// Device memory a NIC may reach directly (GPUDirect RDMA): a range of an
// accelerator's allocation exported as a Linux dma-buf
// (device::DeviceRuntime::ExportDmaBuf gives the descriptor and offset).
struct DmaBufSpan {
  int fd = -1;           // the dma-buf; the caller keeps it, and may close it after
  uint64_t offset = 0;   // the range's first byte in the dma-buf
  size_t bytes = 0;
  uintptr_t address = 0;  // the range in this process's device address space
};

// What the backend offers, for logs and benchmark reports.
struct Capabilities {
  std::string backend;      // "ucx", "loopback", ...
  std::string description;  // e.g. the UCX transports and devices in use.
  // True when a write into memory from Allocate() needs no CPU at the target.
  bool one_sided_allocate = false;
  // Operations one endpoint accepts in flight before kResourceExhausted.
  size_t max_outstanding_per_endpoint = 0;
  // Endpoint::MapRemote may map some peer's memory (a same-host peer's
  // shared memory); false: it never does, so callers need not try.
  bool maps_peer_memory = false;
  // Endpoint::PostWriteWithFlag works; false: it returns kUnimplemented.
  bool flag_writes = false;
  // AllocateDevice works and endpoints move device regions (the device
  // transport, rdma/device); false: a device region is refused.
  bool device_regions = false;
};

// Thread-compatible: all methods, and every Endpoint it created, are called
// from one thread at a time, the thread that drives Progress() (see
// docs/rdma.md, "Threads"), but InterruptWait(), which any thread may call
// while the transport lives. Must outlive its endpoints; memory regions keep
// what they need of it alive themselves.
class Transport {
 public:
  virtual ~Transport() = default;

  // This process's rank.
  virtual int rank() const = 0;

  virtual Capabilities capabilities() const = 0;

  // Bytes a peer passes to Connect() (in PeerInfo::address) to reach us.
  virtual std::string address() const = 0;

  // Allocates `bytes` of zeroed, registered memory owned by the transport,
  // page aligned. This is the memory to use as a target of one-sided
  // operations: on UCX it comes from ucp_mem_map(ALLOCATE), the only memory
  // shared-memory put/get reach without the target's CPU.
  // kInvalidArgument for 0 bytes; kResourceExhausted when the system refuses
  // the memory or registration (the message says which limit to check).
  virtual absl::StatusOr<MemoryRegion> Allocate(size_t bytes) = 0;

  // Registers memory the caller owns and keeps alive longer than the
  // returned region. Same errors as Allocate().
  virtual absl::StatusOr<MemoryRegion> Register(
      absl::Span<std::byte> memory) = 0;

  // `bytes` of zeroed device memory as a region peers write and read one-sidedly
  // (docs/device.md), owned by the region (the device transport frees it
  // when the transport goes: peers may have it open). The default: kUnimplemented,
  // naming the backend (a host transport has no device; the device
  // transport of rdma/device, over any host transport, has).
  virtual absl::StatusOr<MemoryRegion> AllocateDevice(size_t bytes);

  // Registers device memory through its dma-buf, so that peers write and
  // read it with no staging (GPUDirect RDMA). The region's data() is the
  // device address (the CPU must not touch it) and its descriptor's memory
  // kind is device. kInvalidArgument for an empty span or no descriptor;
  // kUnimplemented where this backend, or its NIC and driver, cannot (the
  // message names which). The default: kUnimplemented, naming the backend.
  virtual absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span);

  // Connects to a peer. kInvalidArgument for a malformed address or a peer
  // of another backend; kUnavailable when it cannot be reached.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      const PeerInfo& peer) = 0;

  // Makes progress: runs the backend's progress engine, delivers incoming
  // notifications to the queue PollNotification() reads, and fires the
  // completion callbacks of finished operations. Returns the number of
  // callbacks fired (0 means nothing happened), or kInternal on a backend
  // failure. Peers whose data path is emulated in software (UCX over TCP)
  // only progress while their owner calls this.
  virtual absl::StatusOr<int> Progress() = 0;

  // The oldest notification delivered by an earlier Progress(), if any.
  virtual std::optional<Notification> PollNotification() = 0;

  // Blocks the thread that drives Progress() until the backend has
  // something for Progress() that it can be woken for (a completion, a
  // notification) or `timeout` passes; true when woken early. A wait that
  // should not spin (WaitPolicy's `events`) sleeps here instead of in
  // absl::SleepFor. The default sleeps for `timeout` and returns false:
  // backends without events, and activity no event announces (a flag a
  // peer writes into memory), are seen when the timeout ends.
  virtual bool WaitForActivity(absl::Duration timeout);

  // True when WaitForActivity() is woken by everything Progress() could
  // find: every completion and every arrival, no flag a peer writes into
  // memory unannounced (UCX over TCP alone: each is a socket's). A
  // ProgressLoop then waits in WaitForActivity() rather than polling
  // (onesided/progress/progress_loop.h). The default: false.
  virtual bool AnnouncesActivity() const { return false; }

  // Ends a WaitForActivity() in progress on another thread now, or the
  // next one where none is: for a condition another thread sets, which no
  // event of the backend's announces (a communication thread told to
  // stop). Safe from any thread while the transport lives. The default
  // does nothing: such waits end at their timeout.
  virtual void InterruptWait() {}
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_TRANSPORT_H_

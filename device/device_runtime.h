// File: device_runtime.h
// -----------------------------------------------------------------------------
// DeviceRuntime: what rdmaflow asks of an accelerator, with no CUDA header
// in sight (docs/device.md). Device memory (allocated here, or foreign
// memory such as a PyTorch tensor's, described by Query), streams that
// run copies and reductions in order, events that mark a point in a
// stream, IPC handles that let another process on the same host map an
// allocation, and pinned host memory.
//
// Two implementations: CUDA (device/cuda, cudart linked statically), and a
// fake device (device/fake: host shared memory as "device" memory, one
// thread per stream, injectable faults) on which every protocol built on
// this interface is tested in CI. Both keep the same ordering rules:
//   - the operations of one stream run in the order they were enqueued;
//   - an event recorded on a stream completes once everything enqueued
//     on that stream before it has;
//   - Stream::WaitFor(event) holds the stream's later operations until the
//     event completes, without blocking the caller;
//   - an operation that fails leaves its stream broken: later events on it
//     report the error (as CUDA's sticky errors do), never success.
// Nothing here blocks the host without a deadline.
#ifndef RDMAFLOW_DEVICE_DEVICE_RUNTIME_H_
#define RDMAFLOW_DEVICE_DEVICE_RUNTIME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "common/unique_fd.h"
#include "device/memory_kind.h"

namespace rdmaflow::device {

// What Query says of a pointer.
struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  // For device memory: the device's ordinal, and the allocation the pointer
  // lies in (its base and size: an IPC handle names the base, so a
  // sub-allocation travels as handle + offset).
  int device = -1;
  const void* base = nullptr;
  size_t size = 0;
};

// An exported allocation: what a process on the same host needs to map it.
// 64 opaque bytes, as cudaIpcMemHandle_t. A handle read from a peer is
// untrusted: OpenIpc checks what it can and fails with kInvalidArgument.
struct IpcHandle {
  static constexpr size_t kBytes = 64;
  std::array<uint8_t, kBytes> bytes{};
};

// A range of device memory exported as a Linux dma-buf: the file
// descriptor an RDMA NIC's driver registers (ibv_reg_dmabuf_mr, for
// GPUDirect RDMA), and where the range starts in it. Owns the descriptor.
struct DmaBuf {
  UniqueFd fd;
  // The range's first byte, as an offset into the dma-buf (the exported
  // span may start before it: drivers export whole pages).
  uint64_t offset = 0;
  size_t size = 0;
};

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count. Any of the
// pointers may be device memory of this runtime or a peer's mapping of one
// (OpenIpc); dst may be one of the sources (in place), no other overlap.
struct ReduceArgs {
  static constexpr int kMaxSources = 8;
  collectives::DataType type = collectives::DataType::kFloat32;
  collectives::ReduceOp op = collectives::ReduceOp::kSum;
  void* dst = nullptr;
  std::vector<const void*> srcs;
  size_t count = 0;
};
// kInvalidArgument unless the runtime's reduce launch takes `args`: 1 to
// kMaxSources sources, no null pointer, float32, float16 or bfloat16 with
// sum or max. Every implementation checks with this.
absl::Status CheckReduceArgs(const ReduceArgs& args);

class Stream;

// A point in a stream. Created by DeviceRuntime::CreateEvent, recorded by
// Stream::Record (again and again: each record moves it). An event never
// recorded is complete. Thread-compatible.
class Event {
 public:
  virtual ~Event() = default;
  // True once everything before the last Record has completed; the
  // stream's error if an operation there failed.
  virtual absl::StatusOr<bool> Done() = 0;
  // Waits until Done() or `deadline`: kDeadlineExceeded naming `what` (the
  // operation waited for) when it passes; the stream's error if it failed.
  // Polls Done() (common/poll_until.h: back to back a few times, then naps
  // of 2 us doubling to 20 us with the thread's timer slack narrowed, so
  // that the wait ends within a few microseconds of the device's).
  absl::Status WaitUntil(absl::Time deadline, const std::string& what);
};

// An ordered queue of device work. Enqueueing returns at once; the work
// runs later, in order. kInvalidArgument for a bad pointer or size, or an
// event of another runtime; a failure while the work runs breaks the
// stream (see above). Thread-compatible: one enqueuer at a time.
class Stream {
 public:
  virtual ~Stream() = default;
  // Copies `bytes` from `src` to `dst`, host or device memory either way.
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // Sets `bytes` of device memory at `dst` to zero.
  virtual absl::Status Zero(void* dst, size_t bytes) = 0;
  // Launches a reduction (ReduceArgs).
  virtual absl::Status Reduce(const ReduceArgs& args) = 0;
  // Marks this point of the stream in `event`.
  virtual absl::Status Record(Event& event) = 0;
  // Later operations of this stream wait until `event` (as recorded now,
  // on any stream of the same runtime) completes.
  virtual absl::Status WaitFor(Event& event) = 0;
  // True once everything enqueued on it so far has ended; the stream's
  // error once it failed (a broken stream runs nothing more). For work no
  // event marks: a Record that failed after the work was queued.
  virtual absl::StatusOr<bool> Idle() = 0;
  // The stream as its runtime's own API knows it (CUDA: the cudaStream_t;
  // the fake device: its FakeStream), for DeviceRuntime::WrapStream.
  virtual void* native_handle() const = 0;
};

// Device memory held by this process: an allocation (Allocate), freed
// when destroyed, or a peer's allocation mapped here (OpenIpc), unmapped
// when destroyed. Move-only. Thread-compatible.
class DeviceMemory {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    // Frees or unmaps `data` (logs a failure, never throws).
    virtual void Release(void* data, size_t size) = 0;
  };
  DeviceMemory() = default;
  DeviceMemory(Owner* owner, void* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { Reset(); }

  // The allocation's base in this process, and its size.
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();
  Owner* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One device of one runtime. Thread-safe. Its DeviceMemory, streams and
// events must be destroyed before it.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda:0 (NVIDIA H200, sm_90)", "fake:0".
  virtual std::string name() const = 0;
  // The device's ordinal.
  virtual int device() const = 0;

  // `bytes` (> 0) of device memory. kResourceExhausted when the device is
  // full, naming the size.
  virtual absl::StatusOr<DeviceMemory> Allocate(size_t bytes) = 0;
  // Where `ptr` lives: device memory of this runtime (its allocation's base
  // and size), or host memory. kInvalidArgument for a null pointer.
  virtual absl::StatusOr<PointerInfo> Query(const void* ptr) = 0;

  // Pins [ptr, ptr + bytes) of host memory for fast copies (page-aligned
  // or not); Unpin undoes it. kInvalidArgument for a range already pinned,
  // device memory, or a null/empty range.
  virtual absl::Status PinHost(void* ptr, size_t bytes) = 0;
  virtual absl::Status UnpinHost(void* ptr) = 0;

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  // A stream someone else made, as a Stream of this runtime that does not
  // own it (destroying it leaves the stream alone): CUDA, any cudaStream_t
  // of this device's context, PyTorch's current stream among them (0, the
  // legacy default stream, too); the fake device, the native_handle() of
  // one of its live streams (kInvalidArgument otherwise: a fake stream
  // cannot be forged). Work enqueued through it runs in the one queue of
  // the stream it wraps.
  virtual absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native) = 0;

  // A handle to the allocation whose base is `base` (Query gives the base
  // of any device pointer), for another process on the same host.
  // kInvalidArgument when `base` is not the base of device memory.
  virtual absl::StatusOr<IpcHandle> ExportIpc(const void* base) = 0;
  // Maps the allocation a peer exported. An allocation can be opened once
  // per process (as CUDA allows): keep the mapping and reuse it.
  // kInvalidArgument for a handle that names nothing this runtime can open
  // (forged, garbage, or of another runtime); kUnavailable when the
  // exporting process has freed it or gone.
  virtual absl::StatusOr<DeviceMemory> OpenIpc(const IpcHandle& handle) = 0;

  // [ptr, ptr + bytes) of device memory as a dma-buf, for an RDMA NIC to
  // register (docs/device.md, "GPUDirect RDMA"). The range must lie in one
  // allocation this process made on this runtime's device (here, or by
  // another allocator such as PyTorch's on CUDA). kInvalidArgument for an
  // empty range, host memory, a peer's mapping, or a range past the end;
  // kUnimplemented where the driver or device cannot export dma-bufs (the
  // message says what is missing).
  virtual absl::StatusOr<DmaBuf> ExportDmaBuf(const void* ptr, size_t bytes) = 0;
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_DEVICE_RUNTIME_H_

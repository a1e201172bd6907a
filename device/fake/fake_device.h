// File: fake_device.h
// -----------------------------------------------------------------------------
// FakeDevice: a DeviceRuntime with no accelerator, so that everything built
// on device memory is tested in CI (docs/device.md). "Device" memory is
// host shared memory (POSIX shm), so a handle exported by one process maps
// in another, as CUDA IPC does; each stream is a thread that runs its
// copies and reductions in order; an event is a stream's sequence number.
// It keeps CUDA's rules where a protocol could lean on them by mistake:
//   - a handle does not open in the process that exported it;
//   - an event reports a failure of its stream, and a failed stream stays
//     broken;
//   - work runs later than it is enqueued (operation_delay makes it much
//     later), so only events order it;
//   - a fresh allocation holds garbage (every byte kFreshByte), not zeros;
//   - freeing an allocation another process still has open through an IPC
//     handle is undefined: the fake says so on stderr and counts it
//     (frees_while_open()), so that a teardown that frees before its peers
//     have closed their mappings fails its tests here, not on a GPU.
// A dma-buf export is the allocation's shared-memory object (mapping it
// shows the memory, but no NIC driver takes it as a dma-buf).
// Faults are injected by options: the Nth copy or reduction fails (or is
// refused when enqueued); by
// FailRecords(n): the next n Records fail; and Pause() holds every
// stream's queued work until Resume().
//
// Thread-safe, like every DeviceRuntime.
#ifndef RDMAFLOW_DEVICE_FAKE_FAKE_DEVICE_H_
#define RDMAFLOW_DEVICE_FAKE_FAKE_DEVICE_H_

#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "device/device_runtime.h"

namespace rdmaflow::device {

class FakeStream;

struct FakeDeviceOptions {
  // The ordinal the device answers to.
  int device = 0;
  // Allocations beyond this many bytes in all fail with kResourceExhausted.
  size_t capacity_bytes = size_t{1} << 30;
  // The Nth copy or reduction enqueued on this runtime (counting from 1,
  // over all its streams; a Stream::Zero is neither) fails with `fault`
  // when it runs, breaking its stream for good: what is queued behind it
  // fails with it and runs nothing. 0: none fails.
  int fail_operation = 0;
  // The Nth copy or reduction (counted as above) is refused when enqueued:
  // the call returns `fault`, nothing is queued and the stream runs on, as
  // CUDA refuses a launch it cannot run (out of resources) without
  // breaking the context. 0: none is refused.
  int refuse_operation = 0;
  absl::Status fault = absl::InternalError("an injected fault of the fake device");
  // Every copy and reduction takes at least this long to run.
  absl::Duration operation_delay = absl::ZeroDuration();
  // Allocations of more bytes than this refuse ExportIpc with
  // kFailedPrecondition, as memory of torch's expandable segments (CUDA
  // virtual memory, which takes another kind of handle) refuses
  // cudaIpcGetMemHandle. 0: none refuses.
  size_t ipc_export_limit_bytes = 0;
  // Query reports the piece of this many bytes (counted from the
  // allocation's base) that holds the pointer, not the whole allocation:
  // CUDA's address range of memory mapped a piece at a time, as torch's
  // expandable segments map theirs (2 and 20 MiB), is the piece's. Copies
  // still span pieces. 0: the whole allocation.
  size_t query_piece_bytes = 0;
};

class FakeDevice final : public DeviceRuntime, private DeviceMemory::Owner {
 public:
  static absl::StatusOr<std::unique_ptr<FakeDevice>> Create(const FakeDeviceOptions& options);
  // What every byte of a fresh allocation holds.
  // 0xFF: as float32 a NaN, which spreads through any sum a test checks.
  static constexpr unsigned char kFreshByte = 0xFF;
  ~FakeDevice() override;

  std::string name() const override;
  int device() const override { return options_.device; }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override;
  absl::StatusOr<PointerInfo> Query(const void* ptr) override;
  absl::Status PinHost(void* ptr, size_t bytes) override;
  absl::Status UnpinHost(void* ptr) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  // A FakeStream of this runtime, still alive.
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native) override;
  absl::StatusOr<IpcHandle> ExportIpc(const void* base) override;
  absl::StatusOr<DeviceMemory> OpenIpc(const IpcHandle& handle) override;
  // The allocation's shared-memory object, and the range's offset in it.
  absl::StatusOr<DmaBuf> ExportDmaBuf(const void* ptr, size_t bytes) override;

  // For the streams: whether an operation of `bytes` at `ptr` stays within
  // device memory it starts in (host memory is not checked).
  absl::Status CheckRange(const void* ptr, size_t bytes, const char* what);
  // For the streams: counts a copy or reduction about to be enqueued. Its
  // refusal (refuse_operation), else OK with `*when_run` set to the fault
  // it fails with when it runs (fail_operation), or OK.
  absl::Status CountOperation(absl::Status* when_run);
  // The next `n` Records on streams of this runtime fail with options'
  // fault and mark nothing, and the streams run on: what was queued before
  // such a Record runs, though no event says when (Stream::Idle() does).
  // Replaces the count left (0: no more fail).
  void FailRecords(int n) { records_to_fail_.store(n); }
  // How many of those are still to fail.
  int records_left_to_fail() const { return records_to_fail_.load(); }
  // Whether every stream of this runtime has run everything queued on it
  // so far; the first broken stream's error.
  absl::StatusOr<bool> Idle();
  // For the streams: a Record's injected fault, or OK.
  absl::Status NextRecordFault();
  absl::Duration operation_delay() const { return options_.operation_delay; }
  // Pause(): no stream of this runtime starts another operation until
  // Resume() (one running ends), as work queued behind a long kernel
  // waits; so that a test sees a copy still queued without a race against
  // a delay. Work that waits for the streams (a free, a stream's
  // destruction) waits for Resume() as well.
  void Pause();
  void Resume();
  // For the streams: returns once the runtime is not paused.
  void AwaitResumed();
  // Streams say when they start and end: freeing memory first finishes
  // their work, as cudaFree synchronizes the device.
  void AddStream(FakeStream* stream);
  void RemoveStream(FakeStream* stream);

  // How many times a fake device of this process freed an allocation of
  // its own while another process still had it open through an IPC handle
  // (each is also said on stderr, with kFreedWhileOpen in the line). An
  // importer that ended no longer holds it open, as with CUDA. Memory
  // still allocated when its fake device goes is no free of the program's
  // (CUDA releases it with the process) and is not counted. (Unlike
  // CUDA's, an importer's lock passes to a child it forks without exec:
  // such a child that outlives the importer's close keeps it open.)
  static int64_t frees_while_open();
  static constexpr char kFreedWhileOpen[] = "while another process still has it open";

 private:
  struct Block {
    size_t size = 0;
    std::string shm_name;  // allocated here: the name to export and unlink
    bool mapped = false;   // a peer's allocation, opened here
    // A mapped block: the shared-memory object, open and share-locked
    // (flock) while mapped, so that its exporter sees it is open (and a
    // process that ends drops the lock with it).
    UniqueFd importer;
  };

  explicit FakeDevice(const FakeDeviceOptions& options) : options_(options) {}
  void Release(void* data, size_t size) override;
  // The block holding `ptr`, or blocks_.end().
  std::map<const std::byte*, Block>::const_iterator Find(const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeDeviceOptions options_;
  std::atomic<int> operations_{0};
  std::atomic<int> records_to_fail_{0};
  mutable absl::Mutex mu_;
  std::map<const std::byte*, Block> blocks_ ABSL_GUARDED_BY(mu_);
  std::map<const std::byte*, size_t> pinned_ ABSL_GUARDED_BY(mu_);
  std::set<FakeStream*> streams_ ABSL_GUARDED_BY(mu_);
  size_t allocated_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Not mu_: a free drains the streams holding mu_.
  absl::Mutex pause_mu_;
  bool running_ ABSL_GUARDED_BY(pause_mu_) = true;  // not paused
};

}  // namespace rdmaflow::device

#endif  // RDMAFLOW_DEVICE_FAKE_FAKE_DEVICE_H_

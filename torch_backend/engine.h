// File: engine.h
// -----------------------------------------------------------------------------
// Engine: the thread of one rdmaflow process group, and everything it owns:
// the transport, the Messenger (with DirectCollectives over it), the ring
// all-reduce and its data region (staging area, then the pool of
// registered tensors). The transport is thread-compatible, so this one
// thread sets it up, runs every operation and tears it down.
//
// Operations arrive through Submit() from any thread and run in submission
// order: a collective runs to completion (its waits drive the Messenger);
// a point-to-point post returns at once and completes from the Messenger's
// callbacks while the thread keeps progressing.
//
// A collective may instead run on its caller's thread (TryRunInline): one
// whose caller waits for it at once (torch's async_op=False), or a small
// one with inline calls on, when nothing is queued or running, no
// point-to-point operation is in flight, and the engine thread is asleep. Whichever
// thread drives the transport holds `drive_mu_` and owns the progress loop
// (ProgressLoop::AdoptOnCurrentThread) meanwhile, so the transport and
// everything built on it still see one thread at a time.
#ifndef RDMAFLOW_TORCH_BACKEND_ENGINE_H_
#define RDMAFLOW_TORCH_BACKEND_ENGINE_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/allreduce_group.h"
#include "collectives/direct_collectives.h"
#include "onesided/links/peer_links.h"
#include "onesided/messenger.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/memory_region.h"
#include "rdma/torch/c10d_store.h"
#include "rdma/transport.h"
#include "runtime/torch/registered_allocator.h"
#include "torch_backend/backend_options.h"
#include "torch_backend/backend_stats.h"
#include "torch_backend/device_allreduce.h"
#include "torch_backend/device_p2p.h"
#include "torch_backend/tensor_device.h"
#include "torch_backend/work.h"

namespace rdmaflow::torch_backend {

class Engine {
 public:
  using WorkPtr = c10::intrusive_ptr<RdmaflowWork>;
  struct Op {
    WorkPtr work;
    // A collective (when `post` is empty): returns once done, and the
    // engine completes `work`.
    std::function<absl::Status(Engine&, const WorkPtr&)> run;
    // A point-to-point post: hands `work` to a Messenger completion and
    // returns the operation; an error completes `work` at once. The engine
    // abandons it (kDeadlineExceeded naming `what`) at the group's timeout.
    std::function<absl::StatusOr<onesided::Messenger::OpId>(Engine&, const WorkPtr&)> post;
    std::string what;
  };

  // Starts the thread and sets everything up on it (rendezvous through
  // `store`). The set-up's error, if any.
  // `device`: the group's device, or null; with one (and more than one
  // rank, and options.device_bytes) the engine all-reduces its tensors on
  // the device too (DeviceAllReduce). It must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Start(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const BackendOptions& options, TensorDevice* device = nullptr);
  // Stops the thread: what was submitted runs (collectives to completion
  // or their timeout), point-to-point operations still pending are
  // cancelled, then everything is torn down. Returns within the group's
  // timeout plus the ring's shutdown bound (the timeout, at most 10 s),
  // even with peers that never answer. Stop() does so before the engine
  // goes, so that its counters say how the teardown went; idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  ~Engine();

  // Thread-safe.
  void Submit(Op op) ABSL_LOCKS_EXCLUDED(mu_);
  // Which collectives may run on their caller's thread.
  enum class Inline {
    // The caller waits on the Work at once (torch's async_op=False): it
    // would block until the collective ends anyway, so any collective of
    // any size, whatever other groups the process has.
    kCallerWaits,
    // An asynchronous call: only when inline calls are on
    // (BackendOptions::inline_bytes >= `bytes`) and this is the process's
    // only engine, since the caller returns only once its peers have joined.
    kIfSmall,
  };
  // Runs collective `op` (not a post) on the calling thread, as `when` and
  // `bytes` (what it moves) allow, and completes its Work, when the engine
  // is idle: nothing submitted is unfinished, no point-to-point operation is
  // in flight, no other thread drives the transport, and the engine is not
  // stopping. Otherwise returns false with `op` untouched (Submit it). The
  // Work is completed after the transport is let go. Thread-safe.
  bool TryRunInline(Op& op, Inline when, size_t bytes = 0)
      ABSL_LOCKS_EXCLUDED(drive_mu_, mu_);
  // Whether the calling thread is an engine's (a Future callback runs
  // there): it must not wait for its own engine's operations.
  static bool OnEngineThread();
  absl::StatusOr<at::Tensor> AllocateRegistered(const std::vector<int64_t>& shape,
                                                at::ScalarType dtype);
  // Whether `tensor`'s memory is a block of the registered pool, or of the
  // device all-reduce's device pool. Thread-safe.
  bool IsRegistered(const at::Tensor& tensor) const;
  BackendStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // For operations, on the engine thread.
  int rank() const { return rank_; }
  int size() const { return size_; }
  const BackendOptions& options() const { return options_; }
  onesided::Messenger& messenger() { return *messenger_; }
  collectives::DirectCollectives& direct() { return *direct_; }
  // Null for a group of one.
  collectives::AllReduceGroup* ring() { return ring_.get(); }
  // The all-reduce of device tensors on the device: null without a device,
  // for a group of one, or with RDMAFLOW_DEVICE_MB=0. Set before Start()
  // returns; readable from any thread.
  DeviceAllReduce* device_allreduce() const { return device_allreduce_.get(); }
  // The group's device, or null.
  TensorDevice* device() const { return device_; }
  // Sends and receives of device tensors device to device: with a device
  // all-reduce whose ranks all lie on one host with direct access
  // (DeviceAllReduce::copies_broadcasts(), the same on every rank), else
  // null (they go through host memory). On the engine thread.
  DeviceP2p* device_p2p() const { return device_p2p_.get(); }
  const rdma::MemoryRegion& data_region() const { return *data_region_; }
  // Moves `tensor`'s storage into the registered pool
  // (RegisteredAllocator::MoveIn), counted: between operations, so no
  // collective is reading it. kUnavailable while point-to-point operations
  // are in flight (one may hold the old address): try again later.
  absl::Status MoveToRegistered(const at::Tensor& tensor);
  // The same for a device tensor, into the device all-reduce's pool
  // (DeviceAllReduce::MoveIn), once the caller's stream finished with it;
  // kFailedPrecondition without a device all-reduce.
  absl::Status MoveToDevicePool(const at::Tensor& tensor);
  // Adds to the counters (any thread).
  void Count(const std::function<void(BackendStats&)>& update) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Engine(int rank, int size, const BackendOptions& options, TensorDevice* device);
  absl::Status SetUp(const c10::intrusive_ptr<c10d::Store>& store);
  // kUnavailable while point-to-point operations are in flight (one may
  // hold a tensor's old address).
  absl::Status NoPostsInFlight() const;
  // Counts a tensor moved into registered memory.
  void CountMove(const at::Tensor& tensor);
  // Installs the shared tensor allocator (options' shared_tensors) where
  // the ranks read each other's memory; else says once why not.
  void UseSharedTensors();
  void Loop() ABSL_LOCKS_EXCLUDED(drive_mu_, mu_);
  // The last operation of a batch, completed once the transport is let go.
  static void CompleteLast(WorkPtr& last, const absl::Status& status);
  // Takes what was submitted into `batch`, first sleeping until something
  // was (or an inline call left progress to do, or the engine stops) when
  // `sleep`; whether the engine stops now.
  bool TakeBatch(bool sleep, std::deque<Op>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  // A collective's status (and the group broken by its failure), or a
  // post handed to the Messenger. The caller completes the Work (a post's
  // only when it failed to go out: the Messenger completes the others).
  absl::Status Execute(Op& op);
  // Abandons point-to-point operations past their deadline.
  void ExpireOverdue(absl::Time now);
  // After a batch: forgets completed point-to-point work, copies the
  // Messenger's counters.
  void Settle();
  void TearDown() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drive_mu_);
  // On the engine thread, first: torch's work there (the device
  // collectives' fills and copies) runs on a stream of torch's pool, never
  // the legacy default stream, which would wait for (and hold up) every
  // other stream's work.
  void UseStreamOfItsOwn();

  const int rank_;
  const int size_;
  const BackendOptions options_;
  TensorDevice* const device_;

  // Owned by the thread.
  std::unique_ptr<rdma::torch::C10dStore> store_;
  std::unique_ptr<rdma::Transport> transport_;
  // The transport's one progress loop (this thread's): the Messenger is a
  // round handler of it.
  std::unique_ptr<onesided::ProgressLoop> loop_;
  // Its links (one endpoint and watch per peer), shared by the Messenger
  // and every all-reduce algorithm; they go after those, before the loop.
  std::unique_ptr<onesided::PeerLinks> links_;
  std::unique_ptr<onesided::Messenger> messenger_;
  std::unique_ptr<collectives::DirectCollectives> direct_;
  std::unique_ptr<collectives::AllReduceGroup> ring_;
  std::unique_ptr<DeviceAllReduce> device_allreduce_;
  std::unique_ptr<DeviceP2p> device_p2p_;
  std::unique_ptr<rdma::MemoryRegion> own_region_;  // a group of one's
  const rdma::MemoryRegion* data_region_ = nullptr;
  std::unique_ptr<runtime::torch::RegisteredAllocator> registered_;
  absl::Status broken_;  // a failed collective: the ring is unusable
  // Point-to-point operations in flight.
  struct Posted {
    WorkPtr work;
    onesided::Messenger::OpId id;
    absl::Time deadline;
    std::string what;
  };
  std::vector<Posted> posted_;

  std::thread thread_;
  // Held by the thread that drives the transport: the engine thread while
  // it runs operations and progresses, or a caller in TryRunInline. Taken
  // before mu_, never while holding it (clang's -Wthread-safety checks it:
  // tools/thread_safety_check.sh).
  absl::Mutex drive_mu_;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(drive_mu_);
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;   // submitted, not yet run
  bool nudged_ ABSL_GUARDED_BY(mu_) = false;  // an inline call left progress to do
  absl::CondVar wake_;                        // with mu_
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> queued_{0};
  std::atomic<bool> stopping_{false};  // stop_, readable without mu_
  BackendStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_ENGINE_H_

// File: process_group_rdmaflow.h
// -----------------------------------------------------------------------------
// ProcessGroupRdmaflow: the "rdmaflow" c10d backend (a c10d::Backend of
// PyTorch 2.x, which torch's ProcessGroup dispatches CPU tensors to), so
// DistributedDataParallel, torch.distributed's collectives and
// point-to-point calls run over rdmaflow unchanged.
//   - allreduce: an AllReduceGroup (collectives/allreduce_group.h), which
//     picks per call: ranks on one host reduce through each other's memory
//     (one-shot or scatter-gather), hosts run the hierarchical algorithm,
//     else the ring over one-sided writes (RDMAFLOW_DIRECT=off: the ring
//     only). A tensor from AllocateRegistered() lies in the group's data
//     region and is reduced where it is (no copy); others are copied
//     through a staging area (in pieces when larger).
//   - broadcast, reduce, gather, scatter, allgather, reduce_scatter,
//     barrier: DirectCollectives over
//     a Messenger; send/recv (with tags): the Messenger. Payload in
//     registered memory is written from where it lies.
//   - Non-contiguous tensors are copied once into (and out of) a
//     contiguous buffer, and counted in stats().
//   - CUDA tensors (of one device per group), and with RDMAFLOW_DEVICE=fake
//     the fake device's, go through host twins with torch's stream
//     semantics (DeviceStage: the call waits for the caller's current
//     stream without blocking it; a completed Work's outputs are on the
//     device), counted in stats().
// Every call returns a Work; one engine thread per group owns the
// transport and runs the operations in call order (point-to-point ones
// progress alongside). A synchronous collective, and with
// RDMAFLOW_INLINE_KB a small asynchronous one, runs on the calling thread
// when the engine is idle (docs/torch.md, "How a call runs"). Errors, a dead rank's included, complete the Work
// with an error (wait() raises it); after a failed collective the group
// refuses further collectives with that error. Set-up rendezvous goes
// through the c10d store the group is given.
//
//   ASSIGN_OR_RETURN(auto pg, ProcessGroupRdmaflow::Create(store, rank, size, options));
//   std::vector<at::Tensor> tensors = {grad};
//   pg->allreduce(tensors)->wait();
#ifndef RDMAFLOW_TORCH_BACKEND_PROCESS_GROUP_RDMAFLOW_H_
#define RDMAFLOW_TORCH_BACKEND_PROCESS_GROUP_RDMAFLOW_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torch_backend/backend_options.h"
#include "torch_backend/backend_stats.h"
#include "torch_backend/device_stage.h"
#include "torch_backend/repeated_storages.h"
#include "torch_backend/tensor_device.h"
#include "torch_backend/work.h"

namespace rdmaflow::torch_backend {

class Engine;

class ProcessGroupRdmaflow final : public c10d::Backend {
 public:
  // Creates the transport, the Messenger and the all-reduce group, meeting
  // the other ranks through `store`. Errors name what failed (transport,
  // peer, store) and what to check.
  // options.device "fake" gives the group the fake device at once; else it
  // takes the CUDA device of the first CUDA tensor it is given.
  static absl::StatusOr<c10::intrusive_ptr<ProcessGroupRdmaflow>> Create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const BackendOptions& options);
  // With `device` as the group's device (tests: a fake device with faults).
  static absl::StatusOr<c10::intrusive_ptr<ProcessGroupRdmaflow>> Create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const BackendOptions& options, std::unique_ptr<TensorDevice> device);
  // Runs what was queued, then stops the engine. Registered tensors still
  // alive keep the transport's memory mapped (it is then not freed).
  ~ProcessGroupRdmaflow() override;
  // Use Create(); public for c10::make_intrusive.
  ProcessGroupRdmaflow(int rank, int size, std::unique_ptr<Engine> engine,
                      std::unique_ptr<TensorDevice> device);

  const std::string getBackendName() const override { return "rdmaflow"; }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  // The coalesced flat forms (torch's _coalescing_manager with a backend
  // that does not coalesce itself, FSDP): each pair as its own call.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;

  // An uninitialized contiguous tensor in registered memory: all-reduced in
  // place and sent without staging. Thread-safe. Every rank must allocate
  // its registered tensors in the same order with the same shapes (a
  // tensor's offset must match across ranks to be reduced in place; when
  // it does not, the call still works, through staging).
  // kResourceExhausted when the pool (RDMAFLOW_REGISTERED_MB) is full.
  absl::StatusOr<at::Tensor> AllocateRegistered(const std::vector<int64_t>& shape,
                                                at::ScalarType dtype);

  // Moves `tensor`'s memory into the registered pool: all its views come
  // along (RegisteredAllocator::MoveIn says what can be moved and what the
  // caller guarantees). Runs after the operations already queued have
  // completed; returns once done. Thread-safe, except that nothing else may
  // use the tensor meanwhile. Errors: those of MoveIn; kUnavailable with
  // point-to-point operations in flight (try again); kFailedPrecondition
  // for a broken group or a call from a Future callback (the engine
  // thread); kDeadlineExceeded when the queue ahead did not finish within
  // the group's timeout (the move is then not made).
  absl::Status MoveToRegistered(const at::Tensor& tensor);
  // The trace behind the DDP comm hook (rdmaflow_torch.allreduce_hook):
  // counts a sighting of `tensor`'s storage and moves it at its second
  // (RepeatedStorages), so buffers that come back every step (DDP's
  // gradient buckets) end up in registered memory and those used once
  // (the buckets DDP rebuilds after its first step) do not. Returns whether
  // the tensor lies in registered memory now. A move refused for what the
  // tensor or the pool is (MoveIn's errors) leaves it staged: false,
  // counted in moves_refused, and one warning on stderr (naming the pool
  // size to raise when it is full); one put off by point-to-point
  // operations in flight is tried again at the next sighting. Thread-safe.
  absl::StatusOr<bool> RegisterRepeated(const at::Tensor& tensor);

  // For benchmarks (bench/torch_backend_bench.py --bare): the time per
  // call of `iterations` all-reduces of registered `tensor` by the ring
  // itself (TimeBareAllReduce), run like a synchronous call. Every rank
  // must call it alike.
  absl::StatusOr<absl::Duration> TimeBareAllReduce(const at::Tensor& tensor, int iterations);

  // Counters since creation (after shutdown: as they were when it was
  // called). Thread-safe.
  BackendStats stats() const;

  // The group's device: null until a CUDA tensor came (or with the fake
  // device from the start). Thread-safe.
  TensorDevice* device() ABSL_LOCKS_EXCLUDED(device_mu_);

  // c10d::Backend; destroy_process_group() calls shutdown(). Both stop the
  // engine (Engine::~Engine: what was submitted runs to completion or its
  // timeout, pending point-to-point operations are cancelled, then
  // everything is torn down, within the group's timeout plus the ring's
  // shutdown bound) and keep the counters; afterwards every operation
  // fails with kFailedPrecondition naming the shut-down group. abort()
  // does the same: the engine has no faster way to drop what is in flight.
  // Not concurrent with other calls on this group. Idempotent.
  void shutdown() override;
  void abort() override;

 private:
  // kFailedPrecondition: the group was shut down.
  absl::Status ShutDownError() const;

  // Queues a collective on the engine (see Engine::Op), or runs it on the
  // calling thread (Engine::TryRunInline): when `caller_waits` (torch's
  // async_op=False: the caller waits on the Work at once, so running it
  // here changes nothing it can see), or for a small asynchronous
  // all-reduce or broadcast with RDMAFLOW_INLINE_KB on.
  // `stage` (null: no device tensors): its inputs are copied to the host
  // before `run`, its outputs back before the Work completes; `outputs` are
  // the caller's tensors (the Work's result), `run` works on the twins.
  c10::intrusive_ptr<c10d::Work> Enqueue(
      c10d::OpType type, std::vector<at::Tensor> outputs, bool caller_waits,
      std::function<absl::Status(Engine&, const c10::intrusive_ptr<RdmaflowWork>&)> run,
      std::shared_ptr<DeviceStage> stage = nullptr);
  // Queues a point-to-point post on the engine (see Engine::Op).
  c10::intrusive_ptr<c10d::Work> EnqueuePost(
      c10d::OpType type, std::vector<at::Tensor> outputs, std::string what,
      std::function<absl::StatusOr<uint64_t>(Engine&,
                                              const c10::intrusive_ptr<RdmaflowWork>&)>
          post,
      std::shared_ptr<DeviceStage> stage = nullptr);
  // A call that `run` does on the device where every tensor it reads or
  // writes (`tensors`) is a contiguous tensor of the group's device and it
  // has a device all-reduce: its Work (a failed one where staging refused
  // them), completing with `results`, else null (the caller goes through
  // host twins).
  c10::intrusive_ptr<c10d::Work> OnDeviceOrNull(c10d::OpType type,
                                                std::vector<at::Tensor> tensors,
                                                std::vector<at::Tensor> results,
                                                bool caller_waits,
                                                std::function<absl::Status(Engine&)> run);
  // OnDeviceOrNull for an exchange of device sends and receives
  // (DeviceP2p: gather, scatter, all-to-all) of the tensors in `some` and
  // `more`: null without device to device sends.
  c10::intrusive_ptr<c10d::Work> ExchangedOnDeviceOrNull(
      c10d::OpType type, const std::vector<at::Tensor>& some,
      const std::vector<at::Tensor>& more, std::vector<at::Tensor> results, bool caller_waits,
      std::function<absl::Status(Engine&)> run);
  // A point-to-point `post` of `tensor` device to device where the engine
  // has a DeviceP2p and `tensor` is a contiguous tensor of the group's
  // device: its Work, else null (the caller goes through host twins).
  c10::intrusive_ptr<c10d::Work> DevicePostOrNull(
      c10d::OpType type, at::Tensor& tensor, std::string what,
      std::function<absl::StatusOr<uint64_t>(Engine&, const c10::intrusive_ptr<RdmaflowWork>&)>
          post);
  // OnDeviceOrNull for a call the device does as a sum of the first
  // tensor's type (a floating type the device all-reduce sums; else null),
  // `run` given that type.
  c10::intrusive_ptr<c10d::Work> SummedOnDeviceOrNull(
      c10d::OpType type, std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
      bool caller_waits, std::function<absl::Status(Engine&, collectives::DataType)> run);
  // One argument of a call for StageCall: a tensor or a list of them, and
  // which way its bytes go.
  struct StageItem {
    StageItem(at::Tensor* tensor, DeviceStage::Direction way) : one(tensor), direction(way) {}
    StageItem(std::vector<at::Tensor>* tensors, DeviceStage::Direction way)
        : many(tensors), direction(way) {}
    at::Tensor* one = nullptr;
    std::vector<at::Tensor>* many = nullptr;
    DeviceStage::Direction direction;
  };
  // The call's stage (NewStage), with each device tensor of `items`
  // swapped for its host twin (DeviceStage::Stage). Its errors: a CUDA
  // tensor where CUDA does not start, or of another device; Stage's.
  absl::Status StageCall(std::shared_ptr<DeviceStage>& stage,
                         const std::vector<StageItem>& items) ABSL_LOCKS_EXCLUDED(device_mu_);
  // A stage on the group's device, made at the first CUDA tensor of `items`.
  absl::StatusOr<std::shared_ptr<DeviceStage>> NewStage(const std::vector<StageItem>& items)
      ABSL_LOCKS_EXCLUDED(device_mu_);
  // The Work for `outputs` (its Future on their CUDA device, if any), with
  // `stage`'s copy back run before it completes.
  c10::intrusive_ptr<RdmaflowWork> NewWork(c10d::OpType type, std::vector<at::Tensor> outputs,
                                           const std::shared_ptr<DeviceStage>& stage);
  // Runs `one` on each (output, input) pair in order and returns the Work
  // of the last: the engine runs calls in order, and a call that fails
  // breaks the group, failing those queued after it. A pair refused at
  // once (bad arguments) returns its failed Work, and the pairs after it
  // are not queued.
  c10::intrusive_ptr<c10d::Work> EachPair(
      c10d::OpType type, const char* name, std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const std::function<c10::intrusive_ptr<c10d::Work>(at::Tensor&, at::Tensor&)>& one);
  // A Work already failed with `status` (bad arguments).
  c10::intrusive_ptr<c10d::Work> Failed(c10d::OpType type, const absl::Status& status);
  // alltoall and alltoall_base (as `op_type`): one part per rank each way.
  c10::intrusive_ptr<c10d::Work> AllToAll(c10d::OpType op_type,
                                          std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs, bool caller_waits);

  // Before the engine: destroyed after it, which may still copy through it.
  absl::Mutex device_mu_;
  std::unique_ptr<TensorDevice> device_ ABSL_GUARDED_BY(device_mu_);
  bool no_device_ = false;  // RDMAFLOW_DEVICE=none: CUDA tensors refused
  std::unique_ptr<Engine> engine_;  // null once shut down
  BackendStats final_stats_;        // the engine's last counters, then
  RepeatedStorages repeated_;
  std::atomic<bool> warned_refusal_{false};
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_PROCESS_GROUP_RDMAFLOW_H_

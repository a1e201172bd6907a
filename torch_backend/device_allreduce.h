// File: device_allreduce.h
// -----------------------------------------------------------------------------
// DeviceAllReduce: the backend's all-reduce of device tensors on the device
// (docs/torch.md, "CUDA tensors"), for float32, float16 and bfloat16 sums
// and maxima: an AllReduceGroup on device memory (collectives/
// allreduce_group.h) over a DeviceTransport of its own, so that ranks on one
// host reduce through each other's device memory (CUDA IPC) and ranks on
// other hosts through pinned host memory, with no host twin of the tensor.
// A tensor is copied device to device into the group's region in pieces of
// the region's size, and each piece's result is written straight back into
// the tensor by the group.
//
// It has a transport of its own (a second endpoint per peer) beside the
// engine's: the group's device copies and IPC mappings stay off the host
// collectives' transport. Created and used on the engine thread only; its
// progress loop runs while a call runs.
//
// Thread-compatible: the engine thread (or an inline caller holding the
// engine's transport).
#ifndef RDMAFLOW_TORCH_BACKEND_DEVICE_ALLREDUCE_H_
#define RDMAFLOW_TORCH_BACKEND_DEVICE_ALLREDUCE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/allreduce_group.h"
#include "collectives/reduce.h"
#include "rdma/device/device_transport.h"
#include "rdma/store.h"
#include "runtime/torch/registered_allocator.h"
#include "torch_backend/backend_options.h"
#include "torch_backend/tensor_device.h"

namespace rdmaflow::torch_backend {

class DeviceAllReduce {
 public:
  // Collective: every rank of the group, each with its device. `ns` scopes
  // the store keys. The transport's, the runtime's and the group's errors,
  // naming what failed.
  static absl::StatusOr<std::unique_ptr<DeviceAllReduce>> Create(
      rdma::Store& store, const std::string& ns, int rank, int size, TensorDevice& device,
      const BackendOptions& options);
  ~DeviceAllReduce();

  // Whether the device reduces `type` by `op` (the others go through host
  // twins).
  static bool Takes(collectives::DataType type, collectives::ReduceOp op);

  // `data`: `count` elements of a device tensor of the group's device that
  // the caller's stream has finished with. Reduced in place, across the
  // ranks, which pass the same count, type and op: where it lies in the
  // pool, right there (each rank either way, the same pieces). kDeadlineExceeded naming
  // the copy when a copy into the region does not finish by `deadline`.
  // `variant` (below 2) marks every piece, compared between the ranks as
  // the type and op are (the backend's average).
  absl::Status AllReduce(void* data, size_t count, collectives::DataType type,
                         collectives::ReduceOp op, absl::Time deadline, uint8_t variant = 0);

  // This rank's part of the reduction over the ranks of `input` (size()
  // parts of `count` elements, device memory the caller's stream has
  // finished with) into `output` (`count` elements of device memory): each
  // piece of the input is copied into the region and all-reduced there,
  // and what of it is this rank's part copied out. The input stays as it
  // was. AllReduce's errors; a failed copy out fails this rank's call
  // (and, with pieces still to come, the peers' too).
  absl::Status ReduceScatter(const void* input, void* output, size_t count,
                             collectives::DataType type, collectives::ReduceOp op,
                             absl::Time deadline);

  // Whether Broadcast() runs: every rank on one host with direct access
  // (the same answer on every rank). Fixed at Create(): any thread may ask.
  bool copies_broadcasts() const { return copies_broadcasts_; }

  // `bytes` of device memory of the group's device (the caller's stream
  // finished with them) copied from the rank at position `root` to every
  // other rank, byte for byte whatever they hold: the root's piece copied
  // into its region, read straight out of it by the others (CUDA IPC), and
  // copied out into their `data`. Needs copies_broadcasts(): else
  // kFailedPrecondition on every rank alike. AllReduce()'s errors; a rank
  // whose size differs fails the call on every rank at the first piece
  // that differs.
  absl::Status Broadcast(void* data, size_t bytes, int root, absl::Time deadline);

  // The pool: device memory beside the region's staging part, in the same
  // region (options.device_pool_bytes; none when 0), where the DDP hook's
  // gradient buckets are moved (MoveIn) and then reduced in place, with no
  // copy into the region nor out of it.
  //
  // Moves the memory of `tensor`'s storage into the pool, as
  // runtime::torch::RegisteredAllocator::MoveIn does for host memory: the
  // bytes copied into a block (the caller's stream finished with them),
  // the storage pointed at the block, the old memory given back to torch's
  // CUDA allocator. Every tensor sharing the storage (DDP's gradient views)
  // follows. OK at once when it lies there already. Refused, the tensor
  // untouched: kInvalidArgument for a tensor that is not a contiguous
  // device tensor of the group's device and the whole of its storage, or
  // of a dtype the device does not sum (it would be staged anyway);
  // kFailedPrecondition for memory that is not torch's CUDA allocator's
  // (another pool, from_blob) or no pool; kResourceExhausted when the pool
  // cannot hold it; the copy's errors.
  absl::Status MoveIn(const at::Tensor& tensor, absl::Time deadline);
  // Whether `tensor`'s memory is a block of the pool.
  bool InPool(const at::Tensor& tensor) const;
  // Bytes of the pool in use (0 without one).
  size_t pool_used() const;
  // AllReduce() calls that reduced their tensor in the pool, in place, and
  // succeeded.
  int64_t pool_allreduces() const { return pool_allreduces_; }

  // Gives up this rank's next call for `why` (returned), an error before
  // it: the peers already waiting in it fail it at once
  // (AllReduceGroup::Abandon); the group is unusable after.
  absl::Status Abandon(absl::Status why) { return group_->Abandon(std::move(why)); }

  // Collective teardown within `timeout`: the group's (AllReduceGroup::
  // Shutdown), then every rank closes its mappings of the others' regions
  // and waits for all to have, before any frees its own. `store` (of
  // Create) must still be there.
  absl::Status Shutdown(absl::Duration timeout);

  const collectives::AllReduceGroup& group() const { return *group_; }

 private:
  explicit DeviceAllReduce(TensorDevice& device) : device_(device) {}

  TensorDevice& device_;
  std::unique_ptr<rdma::device_path::DeviceTransport> transport_;
  // For Shutdown's last barrier: Create's store, namespace and ranks.
  rdma::Store* store_ = nullptr;
  std::string ns_;
  int size_ = 0;
  // The pool's offset in the region for `bytes` at `data` lying in it, or
  // nullopt.
  std::optional<size_t> PoolOffset(const void* data, size_t bytes) const;

  std::unique_ptr<collectives::AllReduceGroup> group_;
  bool copies_broadcasts_ = false;
  // Torch's CUDA allocator is cudaMallocAsync: MoveIn refuses.
  bool async_allocator_ = false;
  // The region's first staging_bytes_ take copies of tensors; the pool is
  // the rest.
  size_t staging_bytes_ = 0;
  std::unique_ptr<runtime::torch::RegisteredAllocator> pool_;
  int64_t pool_allreduces_ = 0;
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_DEVICE_ALLREDUCE_H_

// File: registered_allocator.h
// -----------------------------------------------------------------------------
// RegisteredAllocator: a c10::Allocator over one registered region from
// Transport::Allocate, so LibTorch tensors (and ops writing into them with
// out= variants) live in memory the zero-copy executor sends from in place.
// Register the region with Executor::AddSendArena(&allocator.region()); a
// tensor allocated here is then written to its receiver with no copy.
//
//   ASSIGN_OR_RETURN(auto allocator, RegisteredAllocator::Create(*transport, 256 << 20));
//   executor->AddSendArena(&allocator->region());
//   ASSIGN_OR_RETURN(at::Tensor grad, allocator->Empty({4096, 4096}, at::kFloat));
//   at::matmul_out(grad, a, b);  // produced straight into the send buffer
#ifndef RDMAFLOW_RUNTIME_TORCH_REGISTERED_ALLOCATOR_H_
#define RDMAFLOW_RUNTIME_TORCH_REGISTERED_ALLOCATOR_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rdma/memory_region.h"
#include "rdma/transport.h"
#include "runtime/pool_allocator.h"

namespace rdmaflow::runtime::torch {

// Thread-safe (LibTorch allocates from any thread). Must outlive every
// tensor it allocated and the executor that sends from it.
class RegisteredAllocator final : public c10::Allocator {
 public:
  // Allocates and registers `bytes` through `transport`.
  static absl::StatusOr<std::unique_ptr<RegisteredAllocator>> Create(
      rdma::Transport& transport, size_t bytes);

  // Allocates from bytes [offset, offset + bytes) of `parent`, a region
  // someone else registered and keeps alive (a collective's data region, so
  // its tensors are reduced in place). region() is then a view without a
  // registration of its own: post transfers from `parent`.
  // kOutOfRange when the range does not fit in `parent`. `device`: where
  // the region's memory is, as the blocks' DataPtrs say (a device region's
  // blocks are for Allocate() and Holds() only: the c10::Allocator
  // interface, Empty() and MoveIn() make CPU tensors).
  static absl::StatusOr<std::unique_ptr<RegisteredAllocator>> Over(
      const rdma::MemoryRegion& parent, size_t offset, size_t bytes,
      c10::Device device = c10::Device(c10::DeviceType::CPU));

  // c10::Allocator. When the region is full, falls back to ordinary memory
  // (counted in fallbacks(); such tensors are staged by the executor).
  c10::DataPtr allocate(size_t bytes) override { return AllocateOrFallBack(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  // A block of `bytes` of the region (never ordinary memory), freed back
  // to it when the DataPtr goes. kResourceExhausted when it cannot hold it.
  absl::StatusOr<c10::DataPtr> Allocate(size_t bytes) const;

  // An uninitialized contiguous CPU tensor in registered memory.
  // kResourceExhausted when the region cannot hold it, kInvalidArgument for
  // a negative dimension or a size past 2^64 bytes.
  absl::StatusOr<at::Tensor> Empty(const std::vector<int64_t>& shape,
                                   at::ScalarType dtype);

  // Moves the memory of `tensor`'s storage into the region: copies its
  // bytes into a block, points the storage at the block and frees the old
  // memory. Every tensor sharing the storage (views, DDP's gradient views)
  // then lies in registered memory, with the same content. OK at once when
  // the storage already lies here. The caller guarantees that nothing reads
  // or writes the storage meanwhile, and that nobody kept its old address
  // (tensor.numpy(), data_ptr()): those would point at freed memory.
  // Refused, with the tensor untouched:
  //   kInvalidArgument: not a CPU tensor, not contiguous, or not the whole
  //     of its storage (a view: moving would move other tensors too);
  //   kFailedPrecondition: its memory is not LibTorch's CPU allocator's
  //     (from_blob, numpy, another allocator): someone else frees it;
  //   kResourceExhausted: the region cannot hold it.
  absl::Status MoveIn(const at::Tensor& tensor) const;
  // Whether `tensor`'s memory is a block of this allocator.
  bool Holds(const at::Tensor& tensor) const;
  // MoveIn's refusals that do not depend on where the memory is, for the
  // device pool's move too (`into` names the destination in the message):
  // kInvalidArgument unless `tensor` (which has a storage) is contiguous
  // and the whole of its storage; kFailedPrecondition when its storage is
  // already a block of a RegisteredAllocator.
  static absl::Status CheckMovable(const at::Tensor& tensor, const char* into);

  const rdma::MemoryRegion& region() const { return region_; }
  size_t used() const;
  int64_t fallbacks() const { return fallbacks_.load(); }

 private:
  // A block of the region, else ordinary memory (counted).
  c10::DataPtr AllocateOrFallBack(size_t bytes) const;
  RegisteredAllocator(rdma::MemoryRegion region, c10::Device device);
  static void Free(void* context);

  rdma::MemoryRegion region_;
  const c10::Device device_;
  mutable absl::Mutex mu_;
  mutable PoolAllocator pool_ ABSL_GUARDED_BY(mu_);
  mutable std::atomic<int64_t> fallbacks_{0};
};

}  // namespace rdmaflow::runtime::torch

#endif  // RDMAFLOW_RUNTIME_TORCH_REGISTERED_ALLOCATOR_H_

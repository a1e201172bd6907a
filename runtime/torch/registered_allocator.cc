// File: registered_allocator.cc
#include "runtime/torch/registered_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/strides.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::runtime::torch {
namespace {

// The deleter's context: which allocator, which offset.
struct Block {
  const RegisteredAllocator* allocator;
  size_t offset;
};

// LibTorch's CPU allocations are 64-byte aligned; so are ours.
constexpr size_t kAlignment = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<RegisteredAllocator>> RegisteredAllocator::Create(
    rdma::Transport& transport, size_t bytes) {
  ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(bytes));
  return std::unique_ptr<RegisteredAllocator>(
      new RegisteredAllocator(std::move(region)));
}

absl::StatusOr<std::unique_ptr<RegisteredAllocator>> RegisteredAllocator::Over(
    const rdma::MemoryRegion& parent, size_t offset, size_t bytes) {
  if (offset > parent.size() || bytes > parent.size() - offset ||
      offset % kAlignment != 0) {
    return absl::OutOfRangeError(absl::StrCat(
        "bytes [", offset, ", ", offset + bytes, ") are not a ", kAlignment,
        "-byte aligned range of a ", parent.size(), "-byte region"));
  }
  rdma::RemoteRegion descriptor = parent.descriptor();
  descriptor.address += offset;
  descriptor.length = bytes;
  return std::unique_ptr<RegisteredAllocator>(new RegisteredAllocator(
      rdma::MemoryRegion(parent.data() + offset, bytes, std::move(descriptor), nullptr)));
}

RegisteredAllocator::RegisteredAllocator(rdma::MemoryRegion region)
    : region_(std::move(region)), pool_(region_.size(), kAlignment) {}

c10::DataPtr RegisteredAllocator::allocate(size_t bytes) const {
  if (bytes > 0) {
    absl::StatusOr<size_t> offset;
    {
      absl::MutexLock lock(&mu_);
      offset = pool_.Allocate(bytes);
    }
    if (offset.ok()) {
      void* data = region_.data() + *offset;
      return c10::DataPtr(data, new Block{this, *offset}, &RegisteredAllocator::Free,
                          c10::Device(c10::DeviceType::CPU));
    }
    ++fallbacks_;
  }
  return c10::GetDefaultCPUAllocator()->allocate(bytes);
}

void RegisteredAllocator::Free(void* context) {
  auto* block = static_cast<Block*>(context);
  {
    absl::MutexLock lock(&block->allocator->mu_);
    block->allocator->pool_.Free(block->offset);
  }
  delete block;
}

size_t RegisteredAllocator::used() const {
  absl::MutexLock lock(&mu_);
  return pool_.used();
}

absl::StatusOr<at::Tensor> RegisteredAllocator::Empty(
    const std::vector<int64_t>& shape, at::ScalarType dtype) {
  try {
    int64_t elements = 1;
    for (int64_t d : shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a tensor dimension cannot be negative (", d, ")"));
      }
      elements *= d;
    }
    const size_t bytes = static_cast<size_t>(elements) * c10::elementSize(dtype);
    c10::DataPtr data = allocate(bytes);
    // Ours unless it fell back (decided per allocation: other threads may
    // fall back meanwhile).
    if (bytes > 0 && data.get_deleter() != &RegisteredAllocator::Free) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the registered region of ", region_.size(), " bytes cannot hold a ",
          bytes, "-byte tensor (", used(), " bytes in use); create the "
          "allocator larger"));
    }
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                         std::move(data), this, /*resizable=*/false);
    at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(dtype));
    tensor.set_(storage, 0, shape, c10::contiguous_strides(shape));
    return tensor;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what()));
  }
}

}  // namespace rdmaflow::runtime::torch

// File: registered_allocator.cc
#include "runtime/torch/registered_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/strides.h>

#include <cstdint>
#include <cstring>
#include <exception>

#include "ATen/ops/empty.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
      new RegisteredAllocator(std::move(region), c10::Device(c10::DeviceType::CPU)));
}

absl::StatusOr<std::unique_ptr<RegisteredAllocator>> RegisteredAllocator::Over(
    const rdma::MemoryRegion& parent, size_t offset, size_t bytes, c10::Device device) {
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
      rdma::MemoryRegion(parent.data() + offset, bytes, std::move(descriptor), nullptr),
      device));
}

RegisteredAllocator::RegisteredAllocator(rdma::MemoryRegion region, c10::Device device)
    : region_(std::move(region)), device_(device), pool_(region_.size(), kAlignment) {}

absl::StatusOr<c10::DataPtr> RegisteredAllocator::Allocate(size_t bytes) const {
  absl::StatusOr<size_t> offset;
  size_t used = 0;
  {
    absl::MutexLock lock(&mu_);
    offset = pool_.Allocate(bytes);
    used = pool_.used();
  }
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the registered region of ", region_.size(), " bytes cannot hold ", bytes,
        " more bytes (", used, " bytes in use): ", offset.status().message()));
  }
  void* data = region_.data() + *offset;
  return c10::DataPtr(data, new Block{this, *offset}, &RegisteredAllocator::Free, device_);
}

c10::DataPtr RegisteredAllocator::AllocateOrFallBack(size_t bytes) const {
  if (bytes > 0) {
    absl::StatusOr<c10::DataPtr> block = Allocate(bytes);
    if (block.ok()) return *std::move(block);
    ++fallbacks_;
  }
  return c10::GetDefaultCPUAllocator()->allocate(bytes);
}

bool RegisteredAllocator::Holds(const at::Tensor& tensor) const {
  if (!tensor.has_storage()) return false;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  return data.get_deleter() == &RegisteredAllocator::Free &&
         static_cast<const Block*>(data.get_context())->allocator == this;
}

absl::Status RegisteredAllocator::MoveIn(const at::Tensor& tensor) const {
  if (Holds(tensor)) return absl::OkStatus();
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.has_storage()) {
    return absl::InvalidArgumentError(
        "only a CPU tensor with storage can be moved into registered memory");
  }
  RETURN_IF_ERROR(CheckMovable(tensor, "registered memory"));
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  const c10::DeleterFnPtr cpu = c10::GetCPUAllocator()->raw_deleter();
  const c10::DeleterFnPtr default_cpu = c10::GetDefaultCPUAllocator()->raw_deleter();
  const c10::DeleterFnPtr deleter = storage->data_ptr().get_deleter();
  if (deleter == nullptr || (deleter != cpu && deleter != default_cpu)) {
    return absl::FailedPreconditionError(
        "the tensor's memory was not allocated by LibTorch's CPU allocator (from_blob, "
        "from_numpy or another allocator own it), so it cannot be moved; copy it into "
        "a tensor of its own first");
  }
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(c10::DataPtr block, Allocate(bytes));
  std::memcpy(block.get(), storage->data(), bytes);
  // The old DataPtr is freed as it goes out of scope.
  c10::DataPtr old = storage->set_data_ptr(std::move(block));
  return absl::OkStatus();
}

absl::Status RegisteredAllocator::CheckMovable(const at::Tensor& tensor, const char* into) {
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  const size_t tensor_bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  if (!tensor.is_contiguous() || tensor.storage_offset() != 0 || tensor_bytes != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "only a contiguous tensor that is the whole of its storage can be moved into ", into,
        " (this one: ", tensor_bytes, " bytes from element ", tensor.storage_offset(), " of a ",
        bytes, "-byte storage", tensor.is_contiguous() ? "" : ", not contiguous",
        "); moving a view would move the tensors it shares memory with"));
  }
  if (storage->data_ptr().get_deleter() == &RegisteredAllocator::Free) {
    return absl::FailedPreconditionError(
        "the tensor already lies in another registered region (another process "
        "group's pool); copy it into a tensor of its own first");
  }
  return absl::OkStatus();
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
    size_t bytes = c10::elementSize(dtype);
    for (int64_t d : shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a tensor dimension cannot be negative (", d, ")"));
      }
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a tensor of shape [", absl::StrJoin(shape, ", "), "] has more than 2^64 bytes"));
      }
    }
    c10::DataPtr data;
    if (bytes > 0) {
      absl::StatusOr<c10::DataPtr> block = Allocate(bytes);
      if (!block.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "a ", bytes, "-byte tensor: ", block.status().message(),
            "; create the allocator larger"));
      }
      data = *std::move(block);
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

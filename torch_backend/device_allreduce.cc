#include "torch_backend/device_allreduce.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/builtin_transports.h"
#include "rdma/device/close_mappings.h"
#include "torch_backend/tensor_types.h"

namespace rdmaflow::torch_backend {

absl::StatusOr<std::unique_ptr<DeviceAllReduce>> DeviceAllReduce::Create(
    rdma::Store& store, const std::string& ns, int rank, int size, TensorDevice& device,
    const BackendOptions& options) {
  std::unique_ptr<DeviceAllReduce> self(new DeviceAllReduce(device));
  absl::StatusOr<std::unique_ptr<rdma::Transport>> host =
      rdma::CreateBuiltinTransport(options.transport, options.transport_params, rank);
  if (!host.ok()) {
    return absl::Status(host.status().code(),
                        absl::StrCat("rdmaflow rank ", rank, ": the device all-reduce's '",
                                     options.transport, "' transport: ",
                                     host.status().message()));
  }
  absl::StatusOr<std::unique_ptr<rdma::device_path::DeviceTransport>> transport =
      rdma::device_path::DeviceTransport::Create(*std::move(host), &device.runtime());
  if (!transport.ok()) {
    return absl::Status(transport.status().code(),
                        absl::StrCat("rdmaflow rank ", rank, ": device transport on ",
                                     device.runtime().name(), ": ",
                                     transport.status().message()));
  }
  self->transport_ = *std::move(transport);
  self->store_ = &store;
  self->ns_ = ns;
  self->size_ = size;
  collectives::AllReduceGroupOptions group;
  group.ring.name = "c10d-device";
  // The staging part first, the pool after it (both 1 MiB multiples).
  group.ring.capacity_bytes = options.device_bytes + options.device_pool_bytes;
  group.ring.chunk_bytes = options.chunk_bytes;
  group.ring.slots = options.ring_slots;
  group.ring.timeout = options.timeout;
  group.ring.wait = options.wait;
  group.direct = options.direct;
  group.device = self->transport_.get();
  std::vector<int> members(size);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(self->group_, collectives::AllReduceGroup::Create(
                                     *self->transport_, store, ns, members, group));
  self->copies_broadcasts_ = self->group_->direct();
  self->async_allocator_ = options.torch_cuda_malloc_async && !device.fake();
  self->staging_bytes_ = options.device_bytes;
  if (options.device_pool_bytes > 0) {
    const c10::Device where = device.fake() ? c10::Device(c10::DeviceType::CPU)
                                            : c10::Device(c10::DeviceType::CUDA,
                                                          static_cast<c10::DeviceIndex>(
                                                              device.index()));
    ASSIGN_OR_RETURN(self->pool_, runtime::torch::RegisteredAllocator::Over(
                                      self->group_->data_region(), options.device_bytes,
                                      options.device_pool_bytes, where));
  }
  return self;
}

DeviceAllReduce::~DeviceAllReduce() {
  pool_.reset();
  group_.reset();
  transport_.reset();
}

bool DeviceAllReduce::Takes(collectives::DataType type, collectives::ReduceOp op) {
  device::ReduceArgs args;
  args.type = type;
  args.op = op;
  args.srcs = {&args};  // any non-null source: only the type and op are asked
  args.dst = &args;
  return device::CheckReduceArgs(args).ok();
}

absl::Status DeviceAllReduce::AllReduce(void* data, size_t count, collectives::DataType type,
                                        collectives::ReduceOp op, absl::Time deadline,
                                        uint8_t variant) {
  const size_t element = collectives::ElementSize(type);
  auto* base = static_cast<std::byte*>(data);
  // The last piece of a tensor says so (as the host path's): ranks whose
  // tensors differ in size differ at their first piece that differs.
  constexpr uint8_t kLastPiece = 2;
  variant &= 1;
  if (count == 0) return group_->AllReduce(0, 0, type, op, kLastPiece | variant);
  const size_t per_piece = staging_bytes_ / element;
  // In the pool: each piece reduced where it lies (the peers' pieces are
  // the same whether theirs lie in the pool or not).
  if (const std::optional<size_t> at = PoolOffset(data, count * element)) {
    for (size_t first = 0; first < count; first += per_piece) {
      const size_t n = std::min(per_piece, count - first);
      RETURN_IF_ERROR(group_->AllReduce(
          *at + first * element, n, type, op,
          static_cast<uint8_t>((first + n >= count ? kLastPiece : 0) | variant)));
    }
    ++pool_allreduces_;
    return absl::OkStatus();
  }
  for (size_t first = 0; first < count; first += per_piece) {
    const size_t n = std::min(per_piece, count - first);
    std::byte* piece = base + first * element;
    absl::Status copied = device_.Copy(group_->data(), piece, n * element, deadline,
                                       "copying a device tensor into the device all-reduce's "
                                       "region");
    // The peers are in this call already: they must not wait for us, nor
    // pair it with our next one.
    if (!copied.ok()) return group_->Abandon(copied);
    // The group writes the sum straight into the tensor.
    RETURN_IF_ERROR(group_->AllReduce(
        0, n, type, op, static_cast<uint8_t>((first + n >= count ? kLastPiece : 0) | variant),
        piece));
  }
  return absl::OkStatus();
}

absl::Status DeviceAllReduce::ReduceScatter(const void* input, void* output, size_t count,
                                            collectives::DataType type,
                                            collectives::ReduceOp op, absl::Time deadline) {
  const size_t element = collectives::ElementSize(type);
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  constexpr uint8_t kLastPiece = 2;
  const size_t total = count * static_cast<size_t>(group_->size());
  if (total == 0) return group_->AllReduce(0, 0, type, op, kLastPiece);
  // This rank's part, in elements of the input.
  const size_t mine = count * static_cast<size_t>(group_->position());
  const size_t per_piece = staging_bytes_ / element;
  for (size_t first = 0; first < total; first += per_piece) {
    const size_t n = std::min(per_piece, total - first);
    const bool last = first + n >= total;
    absl::Status copied = device_.Copy(group_->data(), in + first * element, n * element,
                                       deadline,
                                       "copying a device tensor into the device "
                                       "reduce-scatter's region");
    if (!copied.ok()) return group_->Abandon(copied);
    RETURN_IF_ERROR(group_->AllReduce(0, n, type, op, last ? kLastPiece : uint8_t{0}));
    const size_t begin = std::max(first, mine);
    const size_t end = std::min(first + n, mine + count);
    if (begin >= end) continue;
    absl::Status out_copied =
        device_.Copy(out + (begin - mine) * element, group_->data() + (begin - first) * element,
                     (end - begin) * element, deadline,
                     "copying this rank's part of the device reduce-scatter out of its region");
    if (!out_copied.ok()) return last ? out_copied : group_->Abandon(out_copied);
  }
  return absl::OkStatus();
}

absl::Status DeviceAllReduce::Broadcast(void* data, size_t bytes, int root,
                                        absl::Time deadline) {
  auto* base = static_cast<std::byte*>(data);
  constexpr uint8_t kLastPiece = 2;
  if (bytes == 0) return group_->Broadcast(0, 0, root, kLastPiece);
  const bool is_root = group_->position() == root;
  const size_t per_piece = staging_bytes_;
  for (size_t first = 0; first < bytes; first += per_piece) {
    const size_t n = std::min(per_piece, bytes - first);
    const bool last = first + n >= bytes;
    if (is_root) {
      absl::Status copied = device_.Copy(group_->data(), base + first, n, deadline,
                                         "copying a device tensor into the device "
                                         "broadcast's region");
      if (!copied.ok()) return group_->Abandon(copied);
    }
    RETURN_IF_ERROR(group_->Broadcast(0, n, root, last ? kLastPiece : uint8_t{0}));
    if (is_root) continue;
    absl::Status out = device_.Copy(base + first, group_->data(), n, deadline,
                                    "copying the device broadcast's bytes out of its region");
    // With pieces to come the peers would wait for us in the next one.
    if (!out.ok()) return last ? out : group_->Abandon(out);
  }
  return absl::OkStatus();
}

std::optional<size_t> DeviceAllReduce::PoolOffset(const void* data, size_t bytes) const {
  if (pool_ == nullptr || data == nullptr) return std::nullopt;
  const auto* at = static_cast<const std::byte*>(data);
  const std::byte* begin = group_->data() + staging_bytes_;
  const std::byte* end = group_->data() + group_->capacity();
  if (at < begin || at > end || bytes > static_cast<size_t>(end - at)) return std::nullopt;
  return static_cast<size_t>(at - group_->data());
}

bool DeviceAllReduce::InPool(const at::Tensor& tensor) const {
  return pool_ != nullptr && pool_->Holds(tensor);
}

size_t DeviceAllReduce::pool_used() const { return pool_ != nullptr ? pool_->used() : 0; }

absl::Status DeviceAllReduce::MoveIn(const at::Tensor& tensor, absl::Time deadline) {
  if (pool_ == nullptr) {
    return absl::FailedPreconditionError(
        "the group has no device pool (RDMAFLOW_DEVICE_POOL_MB=0)");
  }
  if (async_allocator_) {
    // Torch's futures record the pool's memory on their streams, which
    // cudaMallocAsync's allocator refuses for memory it did not allocate.
    return absl::FailedPreconditionError(
        "torch's CUDA allocator is cudaMallocAsync (backend:cudaMallocAsync in "
        "PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF), which cannot track the device "
        "pool's memory on its streams: the buffer stays where it is and is all-reduced "
        "through the device region");
  }
  if (pool_->Holds(tensor)) return absl::OkStatus();
  absl::StatusOr<bool> ours = device_.Holds(tensor);
  if (!ours.ok()) return ours.status();
  if (!*ours || !tensor.has_storage()) {
    return absl::InvalidArgumentError(
        "only a device tensor of the group's device, with storage, can be moved into its "
        "device pool");
  }
  RETURN_IF_ERROR(runtime::torch::RegisteredAllocator::CheckMovable(tensor, "the device pool"));
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  // On a GPU only memory the storage's own allocator (torch's CUDA
  // allocator) gave it, which the old DataPtr gives back as it goes:
  // memory someone else owns (from_blob, DLPack) would be freed under
  // them. The fake device's tensors are from_blob views of its memory by
  // design.
  if (!device_.fake()) {
    const c10::Allocator* own = storage->allocator();
    if (own == nullptr || own->raw_deleter() == nullptr ||
        storage->data_ptr().get_deleter() != own->raw_deleter()) {
      return absl::FailedPreconditionError(
          "the tensor's memory was not allocated by torch's CUDA allocator (from_blob, "
          "DLPack or another owner hold it), so it cannot be moved; copy it into a "
          "tensor of its own first");
    }
  }
  // Only what the device sums: anything else would take pool space and
  // still be all-reduced through host memory.
  absl::StatusOr<collectives::DataType> type = ReducibleType(tensor.scalar_type());
  if (!type.ok() || !Takes(*type, collectives::ReduceOp::kSum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", c10::toString(tensor.scalar_type()),
        " tensor is not moved into the device pool: the device all-reduces float32, "
        "float16 and bfloat16 only"));
  }
  if (bytes == 0) return absl::OkStatus();
  absl::StatusOr<c10::DataPtr> allocated = pool_->Allocate(bytes);
  if (!allocated.ok()) {
    return absl::Status(allocated.status().code(),
                        absl::StrCat("the device pool: ", allocated.status().message(),
                                     "; RDMAFLOW_DEVICE_POOL_MB sets its size"));
  }
  c10::DataPtr block = *std::move(allocated);
  absl::Status copied = device_.Copy(block.get(), storage->data(), bytes, deadline,
                                     "copying a tensor into the device pool");
  if (absl::IsDeadlineExceeded(copied)) {
    // The copy may still land: the block is never given to another tensor.
    new c10::DataPtr(std::move(block));
  }
  RETURN_IF_ERROR(copied);
  // The old memory goes back to torch's allocator as `old` goes: nothing
  // of ours reads it any more (the copy is done).
  c10::DataPtr old = storage->set_data_ptr(std::move(block));
  return absl::OkStatus();
}

absl::Status DeviceAllReduce::Shutdown(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // No rank reads another's memory after the group's barriers; then every
  // rank closes its mappings of the others' regions, and only once all
  // have (the last barrier) may any free its own (the destructor).
  RETURN_IF_ERROR(group_->Shutdown(timeout));
  return rdma::device_path::CloseMappingsTogether(*transport_, *store_, ns_, size_, deadline);
}

}  // namespace rdmaflow::torch_backend

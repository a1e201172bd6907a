#include "torch_backend/device_allreduce.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/builtin_transports.h"

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
  collectives::AllReduceGroupOptions group;
  group.ring.name = "c10d-device";
  group.ring.capacity_bytes = options.device_bytes;
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
  return self;
}

DeviceAllReduce::~DeviceAllReduce() {
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
                                        collectives::ReduceOp op, absl::Time deadline) {
  const size_t element = collectives::ElementSize(type);
  auto* base = static_cast<std::byte*>(data);
  // The last piece of a tensor says so (as the host path's): ranks whose
  // tensors differ in size differ at their first piece that differs.
  constexpr uint8_t kLastPiece = 2;
  if (count == 0) return group_->AllReduce(0, 0, type, op, kLastPiece);
  const size_t per_piece = group_->capacity() / element;
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
    RETURN_IF_ERROR(group_->AllReduce(0, n, type, op,
                                      first + n >= count ? kLastPiece : uint8_t{0}, piece));
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
  const size_t per_piece = group_->capacity() / element;
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
  const size_t per_piece = group_->capacity();
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

absl::Status DeviceAllReduce::Shutdown(absl::Duration timeout) {
  return group_->Shutdown(timeout);
}

}  // namespace rdmaflow::torch_backend

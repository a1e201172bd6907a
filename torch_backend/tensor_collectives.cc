#include "torch_backend/tensor_collectives.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "collectives/host_allreduce.h"
#include "collectives/shared_segments.h"
#include "common/status_macros.h"
#include "device/queued_work.h"

namespace rdmaflow::torch_backend {
namespace {

size_t Bytes(const at::Tensor& tensor) {
  return static_cast<size_t>(tensor.numel()) * tensor.element_size();
}

// `tensor` itself when contiguous, else a contiguous copy (counted), with
// its content when `fill`.
at::Tensor Contiguous(Engine& engine, const at::Tensor& tensor, bool fill) {
  if (tensor.is_contiguous()) return tensor;
  engine.Count([](BackendStats& stats) { ++stats.noncontiguous_copies; });
  return fill ? tensor.contiguous()
              : at::empty(tensor.sizes(), tensor.options().memory_format(
                                              at::MemoryFormat::Contiguous));
}

// Copies `buffer` back into `tensor` when it is a copy.
void CopyBack(const at::Tensor& tensor, const at::Tensor& buffer) {
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

// Contiguous() of each tensor of a list, and CopyBack() of each.
std::vector<at::Tensor> ContiguousAll(Engine& engine, const std::vector<at::Tensor>& tensors,
                                      bool fill) {
  std::vector<at::Tensor> buffers;
  for (const at::Tensor& tensor : tensors) buffers.push_back(Contiguous(engine, tensor, fill));
  return buffers;
}
void CopyBackAll(const std::vector<at::Tensor>& tensors,
                 const std::vector<at::Tensor>& buffers) {
  for (size_t i = 0; i < tensors.size(); ++i) CopyBack(tensors[i], buffers[i]);
}

// The data pointers of a list of contiguous tensors.
template <typename Pointer>
std::vector<Pointer> DataPointers(const std::vector<at::Tensor>& buffers) {
  std::vector<Pointer> pointers;
  for (const at::Tensor& buffer : buffers) pointers.push_back(buffer.data_ptr());
  return pointers;
}

// The c10d backend's variants of an all-reduce call (AllReduceGroup's
// `variant`, compared between ranks): an AVG (reduced as a sum, divided
// afterwards), and the last piece of a tensor.
constexpr uint8_t kAverageVariant = 1;
constexpr uint8_t kLastPieceVariant = 2;

// Whether [at, at + bytes) lies wholly outside the group's data region.
bool Outside(const collectives::AllReduceGroup& ring, const std::byte* at, size_t bytes) {
  return at + bytes <= ring.data() || at >= ring.data() + ring.capacity();
}

// Whether the tensor lies in one of our shared segments (the shared tensor
// allocator's), where the peers map it. Asked only where it was installed.
bool InSharedSegment(Engine& engine, const at::Tensor& tensor, size_t bytes) {
  return engine.options().shared_tensors && bytes > 0 &&
         collectives::SharedSegments::Process()
             .Find(static_cast<const std::byte*>(tensor.data_ptr()), bytes)
             .has_value();
}

// The host path's counts of the peers' segments, into the stats.
void CountSegmentReads(Engine& engine, const collectives::AllReduceGroup& ring) {
  if (ring.host() == nullptr) return;
  const collectives::HostAllReduceStats host = ring.host()->stats();
  engine.Count([&](BackendStats& stats) {
    stats.peer_segments_mapped = host.segments_mapped;
    stats.peer_segment_reads = host.segment_reads;
    stats.peer_segment_fallbacks = host.segment_fallbacks;
  });
}

}  // namespace

absl::StatusOr<absl::Duration> TimeBareAllReduce(Engine& engine, const at::Tensor& tensor,
                                                 int iterations) {
  collectives::AllReduceGroup* ring = engine.ring();
  if (ring == nullptr) {
    return absl::InvalidArgumentError("timing the bare all-reduce needs a group of 2 or more");
  }
  const std::byte* data = ring->data();
  const auto* at = static_cast<const std::byte*>(tensor.data_ptr());
  const size_t bytes = Bytes(tensor);
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous() ||
      at < data + engine.options().staging_bytes || at + bytes > data + ring->capacity()) {
    return absl::InvalidArgumentError(
        "timing the bare all-reduce needs a contiguous float32 tensor of the registered pool "
        "(rdmaflow_torch.empty)");
  }
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) {
    RETURN_IF_ERROR(ring->AllReduce(at - data, static_cast<size_t>(tensor.numel()),
                                    collectives::DataType::kFloat32));
  }
  return (absl::Now() - start) / std::max(iterations, 1);
}

absl::Status AllReduceTensor(Engine& engine, at::Tensor& tensor, collectives::DataType type,
                             Reduction reduction) {
  engine.Count([](BackendStats& stats) { ++stats.allreduces; });
  collectives::AllReduceGroup* ring = engine.ring();
  const size_t count = static_cast<size_t>(tensor.numel());
  const size_t bytes = Bytes(tensor);
  if (ring != nullptr) {
    // Whatever path our tensor takes, a peer's may lie in its segment.
    const absl::Cleanup count_reads = [&] { CountSegmentReads(engine, *ring); };
    const std::byte* data = ring->data();
    const size_t staging = engine.options().staging_bytes;
    const auto* at = static_cast<const std::byte*>(tensor.data_ptr());
    const bool registered = tensor.is_contiguous() && at >= data + staging &&
                            at + bytes <= data + ring->capacity();
    // No agreement first, on any path: each rank's tensor is reduced where
    // it lies, staged or registered, and the algorithms check count, type,
    // operator and variant at every call (the host paths in their control
    // blocks, the rings in their call descriptors). An AVG and a SUM must
    // not pair up: both reduce as a sum, so the call says which it is.
    // Empty tensors take part too, so a rank whose tensor is not empty gets
    // an error instead of waiting for it. A tensor goes in pieces of the
    // staging area's size whatever its place, and the last piece says so:
    // ranks whose tensors differ in size then differ in their first piece
    // that differs (in count, or in being the last), instead of pairing one
    // rank's next piece with another's next all-reduce.
    const uint8_t avg = reduction.average ? kAverageVariant : 0;
    auto variant = [&](size_t first, size_t n) {
      return static_cast<uint8_t>(avg | (first + n >= count ? kLastPieceVariant : 0));
    };
    if (count == 0) {
      RETURN_IF_ERROR(ring->AllReduce(0, 0, type, reduction.op, variant(0, 0)));
    } else if (registered) {
      // In pieces of the staging area's size, as a staged tensor on another
      // rank goes: the calls then depend on the count alone.
      engine.Count([](BackendStats& stats) { ++stats.zero_copy_allreduces; });
      const size_t element = tensor.element_size();
      const size_t per_piece = staging / element;
      for (size_t first = 0; first < count; first += per_piece) {
        const size_t n = std::min(per_piece, count - first);
        RETURN_IF_ERROR(ring->AllReduce(at - data + first * element, n, type, reduction.op,
                                        variant(first, n)));
      }
    } else if (const bool shared = InSharedSegment(engine, tensor, bytes);
               tensor.is_contiguous() && (shared || bytes >= engine.options().cma_min_bytes) &&
               ring->external() && Outside(*ring, at, bytes)) {
      // An ordinary tensor, reduced where it lies: the peers map its shared
      // segment (RDMAFLOW_SHARED_TENSORS) and read it in place, or read it
      // out of this process (process_vm_readv), one copy; nothing staged.
      // In the staging area's pieces, as a staged tensor on another rank
      // goes.
      engine.Count([&](BackendStats& stats) {
        ++(shared ? stats.shared_tensor_allreduces : stats.single_copy_allreduces);
        (shared ? stats.shared_tensor_bytes : stats.single_copy_bytes) +=
            static_cast<int64_t>(bytes);
      });
      auto* base = static_cast<std::byte*>(tensor.data_ptr());
      const size_t element = tensor.element_size();
      const size_t per_piece = staging / element;
      for (size_t first = 0; first < count; first += per_piece) {
        const size_t n = std::min(per_piece, count - first);
        RETURN_IF_ERROR(ring->AllReduceExternal(base + first * element, n, type,
                                                reduction.op, variant(first, n)));
      }
    } else if (!tensor.is_contiguous() && bytes <= staging) {
      // Straight from the strided tensor into staging, and back: one copy.
      engine.Count([](BackendStats& stats) { ++stats.noncontiguous_copies; });
      at::Tensor staged = at::from_blob(ring->data(), tensor.sizes(), tensor.options());
      staged.copy_(tensor);
      RETURN_IF_ERROR(ring->AllReduce(0, count, type, reduction.op, variant(0, count)));
      tensor.copy_(staged);
      engine.Count([&](BackendStats& stats) { stats.staged_bytes += bytes; });
    } else {
      at::Tensor buffer = Contiguous(engine, tensor, /*fill=*/true);
      auto* base = static_cast<std::byte*>(buffer.data_ptr());
      const size_t element = buffer.element_size();
      const size_t per_piece = staging / element;
      for (size_t first = 0; first < count; first += per_piece) {
        const size_t n = std::min(per_piece, count - first);
        std::byte* piece = base + first * element;
        std::memcpy(ring->data(), piece, n * element);
        // The result straight into the tensor: on the host paths only our
        // own segment is written twice (the group copies it out elsewhere).
        // A tensor that lies in the region (a registered one, not
        // contiguous) is copied back.
        const bool outside = Outside(*ring, piece, n * element);
        RETURN_IF_ERROR(ring->AllReduce(0, n, type, reduction.op, variant(first, n),
                                        outside ? piece : nullptr));
        if (!outside) std::memcpy(piece, ring->data(), n * element);
      }
      CopyBack(tensor, buffer);
      engine.Count([&](BackendStats& stats) { stats.staged_bytes += bytes; });
    }
  }
  if (reduction.average) tensor.div_(engine.size());
  return absl::OkStatus();
}

namespace {

// Waits, to the group's deadline, until torch's work on this thread's
// current stream of the group's device is done (the engine thread's own
// stream from torch's pool, or an inline caller's): the device
// collectives' own copies run on other streams. Nothing to wait for on
// the fake device (its tensors are CPU tensors to torch). A Record the
// device refuses costs only time: the stream's idling says instead.
absl::Status FinishTorchWork(Engine& engine, const char* what) {
  TensorDevice* device = engine.device();
  if (device == nullptr || device->fake()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, device->CallerStream());
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, device->runtime().CreateEvent());
  device::QueuedWork work;
  work.Mark(*stream, std::move(done)).IgnoreError();
  return work.WaitUntil(absl::Now() + engine.options().timeout, what);
}

}  // namespace

namespace {

// `tensor` reduced across the ranks on the device, in place (counted as
// device_allreduces), and averaged there when asked and `divide` (a
// reduce's other ranks do not divide what they throw away; their call is
// marked as the root's).
absl::Status ReduceOnDevice(Engine& engine, at::Tensor& tensor, collectives::DataType type,
                            Reduction reduction, bool divide = true) {
  DeviceAllReduce& device = *engine.device_allreduce();
  const int64_t in_pool_before = device.pool_allreduces();
  // An average is marked, so that it never pairs with a sum.
  absl::Status status = device.AllReduce(
      tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type, reduction.op,
      absl::Now() + engine.options().timeout, reduction.average ? kAverageVariant : uint8_t{0});
  const bool in_pool = device.pool_allreduces() > in_pool_before;
  engine.Count([in_pool](BackendStats& stats) {
    ++stats.device_allreduces;
    if (in_pool) ++stats.device_pool_allreduces;
  });
  RETURN_IF_ERROR(status);
  if (!reduction.average || !divide) return absl::OkStatus();
  try {
    tensor.div_(engine.size());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("averaging the device all-reduce: ", e.what()));
  }
  return FinishTorchWork(engine, "averaging the device all-reduce");
}

}  // namespace

absl::Status DeviceAllReduceTensor(Engine& engine, at::Tensor& tensor,
                                   collectives::DataType type, Reduction reduction) {
  engine.Count([](BackendStats& stats) { ++stats.allreduces; });
  return ReduceOnDevice(engine, tensor, type, reduction);
}

absl::Status DeviceAllGatherTensor(Engine& engine, const at::Tensor& input,
                                   at::Tensor& output, collectives::DataType type) {
  engine.Count([](BackendStats& stats) { ++stats.device_allgathers; });
  const int64_t n = input.numel();
  const int64_t rank = engine.rank();
  at::Tensor flat = output.view({-1});
  try {
    at::Tensor mine = flat.narrow(0, rank * n, n);
    at::Tensor source = input.view({-1});
    // In place (FSDP2's call: the input is this rank's part of the output),
    // or from elsewhere; an input overlapping the output otherwise is read
    // before the fill.
    const bool in_place = source.data_ptr() == mine.data_ptr();
    const auto* in_begin = static_cast<const std::byte*>(source.data_ptr());
    const auto* out_begin = static_cast<const std::byte*>(flat.data_ptr());
    if (!in_place && in_begin < out_begin + Bytes(flat) && out_begin < in_begin + Bytes(source)) {
      source = source.clone();
    }
    flat.narrow(0, 0, rank * n).fill_(-0.0);
    flat.narrow(0, (rank + 1) * n, (engine.size() - rank - 1) * n).fill_(-0.0);
    if (!in_place) mine.copy_(source);
  } catch (const std::exception& e) {
    // The peers are in the call already: they must not wait for us.
    return engine.device_allreduce()->Abandon(absl::InternalError(
        absl::StrCat("preparing the device all-gather's output: ", e.what())));
  }
  if (absl::Status ready =
          FinishTorchWork(engine, "preparing the device all-gather's output");
      !ready.ok()) {
    return engine.device_allreduce()->Abandon(ready);
  }
  return engine.device_allreduce()->AllReduce(flat.data_ptr(), static_cast<size_t>(flat.numel()),
                                              type, collectives::ReduceOp::kSum,
                                              absl::Now() + engine.options().timeout);
}

absl::Status DeviceReduceScatterTensor(Engine& engine, const at::Tensor& input,
                                       at::Tensor& output, collectives::DataType type,
                                       Reduction reduction) {
  engine.Count([](BackendStats& stats) { ++stats.device_reduce_scatters; });
  // An output that is this rank's part of the input is written only after
  // that part was read; one overlapping the input elsewhere gets a copy of
  // the input to read.
  at::Tensor source = input;
  const auto* in_begin = static_cast<const std::byte*>(input.data_ptr());
  const auto* out_begin = static_cast<const std::byte*>(output.data_ptr());
  if (in_begin < out_begin + Bytes(output) && out_begin < in_begin + Bytes(input) &&
      out_begin != in_begin + engine.rank() * Bytes(output)) {
    absl::Status copied;
    try {
      source = input.clone();
      copied = FinishTorchWork(engine, "copying the device reduce-scatter's input");
    } catch (const std::exception& e) {
      copied = absl::InternalError(
          absl::StrCat("copying the device reduce-scatter's input: ", e.what()));
    }
    // The peers are in the call already: they must not wait for us.
    if (!copied.ok()) return engine.device_allreduce()->Abandon(copied);
  }
  RETURN_IF_ERROR(engine.device_allreduce()->ReduceScatter(
      source.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), type,
      reduction.op, absl::Now() + engine.options().timeout));
  if (!reduction.average) return absl::OkStatus();
  try {
    output.div_(engine.size());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("averaging the device reduce-scatter: ", e.what()));
  }
  return FinishTorchWork(engine, "averaging the device reduce-scatter");
}

namespace {

// `status`; a failed collective may still copy into or out of `tensor` (a
// copy given up on at its deadline), so then it is never freed.
absl::Status KeptOnFailure(absl::Status status, const at::Tensor& tensor) {
  if (!status.ok()) new at::Tensor(tensor);
  return status;
}

// A flat device tensor of `numel` elements of `dtype` that `fill` prepares
// on the engine thread's current stream (copies into it), finished before
// it is returned; any failure gives the device all-reduce up, as the peers
// are in the call already.
absl::StatusOr<at::Tensor> PreparedFlat(Engine& engine, int64_t numel, at::ScalarType dtype,
                                        const char* what,
                                        const std::function<void(at::Tensor&)>& fill) {
  absl::StatusOr<at::Tensor> flat = engine.device()->Empty(numel, dtype, what);
  if (!flat.ok()) return engine.device_allreduce()->Abandon(flat.status());
  absl::Status ready;
  try {
    fill(*flat);
    ready = FinishTorchWork(engine, what);
  } catch (const std::exception& e) {
    ready = absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
  if (!ready.ok()) return engine.device_allreduce()->Abandon(KeptOnFailure(ready, *flat));
  return flat;
}

}  // namespace

absl::Status DeviceAllGatherListTensors(Engine& engine, const at::Tensor& input,
                                        std::vector<at::Tensor>& outputs,
                                        collectives::DataType type) {
  const int64_t n = input.numel();
  ASSIGN_OR_RETURN(at::Tensor flat,
                   PreparedFlat(engine, n * engine.size(), input.scalar_type(),
                                "the device all-gather's flat output", [](at::Tensor&) {}));
  RETURN_IF_ERROR(KeptOnFailure(DeviceAllGatherTensor(engine, input, flat, type), flat));
  try {
    for (size_t q = 0; q < outputs.size(); ++q) {
      outputs[q].view({-1}).copy_(flat.narrow(0, static_cast<int64_t>(q) * n, n));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("copying the device all-gather's parts out: ", e.what()));
  }
  // The flat tensor goes back to torch's allocator on this stream, after
  // the copies out of it.
  return KeptOnFailure(FinishTorchWork(engine, "copying the device all-gather's parts out"), flat);
}

absl::Status DeviceReduceScatterListTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                            at::Tensor& output, collectives::DataType type,
                                            Reduction reduction) {
  const int64_t n = output.numel();
  ASSIGN_OR_RETURN(at::Tensor flat,
                   PreparedFlat(engine, n * engine.size(), output.scalar_type(),
                                "copying the device reduce-scatter's inputs together",
                                [&](at::Tensor& flat) {
                                  for (size_t q = 0; q < inputs.size(); ++q) {
                                    flat.narrow(0, static_cast<int64_t>(q) * n, n)
                                        .copy_(inputs[q].view({-1}));
                                  }
                                }));
  return KeptOnFailure(DeviceReduceScatterTensor(engine, flat, output, type, reduction), flat);
}

absl::Status DeviceReduceTensor(Engine& engine, at::Tensor& tensor, int root,
                                collectives::DataType type, Reduction reduction) {
  if (engine.rank() == root) return ReduceOnDevice(engine, tensor, type, reduction);
  // The others reduce a copy: their tensors stay as they were.
  ASSIGN_OR_RETURN(at::Tensor copy,
                   PreparedFlat(engine, tensor.numel(), tensor.scalar_type(),
                                "copying the device reduce's tensor",
                                [&](at::Tensor& flat) { flat.copy_(tensor.view({-1})); }));
  return KeptOnFailure(ReduceOnDevice(engine, copy, type, reduction, /*divide=*/false), copy);
}

absl::Status DeviceBroadcastTensor(Engine& engine, at::Tensor& tensor, int root) {
  engine.Count([](BackendStats& stats) { ++stats.device_broadcasts; });
  return engine.device_allreduce()->Broadcast(tensor.data_ptr(), Bytes(tensor), root,
                                              absl::Now() + engine.options().timeout);
}

absl::Status DeviceSumBroadcastTensor(Engine& engine, at::Tensor& tensor, int root,
                                      collectives::DataType type) {
  engine.Count([](BackendStats& stats) { ++stats.device_broadcasts; });
  if (engine.rank() != root) {
    absl::Status ready;
    try {
      tensor.fill_(-0.0);
      ready = FinishTorchWork(engine, "preparing the device broadcast's tensor");
    } catch (const std::exception& e) {
      ready = absl::InternalError(
          absl::StrCat("preparing the device broadcast's tensor: ", e.what()));
    }
    // The peers are in the call already: they must not wait for us.
    if (!ready.ok()) return engine.device_allreduce()->Abandon(ready);
  }
  return engine.device_allreduce()->AllReduce(tensor.data_ptr(),
                                              static_cast<size_t>(tensor.numel()), type,
                                              collectives::ReduceOp::kSum,
                                              absl::Now() + engine.options().timeout);
}

absl::Status BroadcastTensor(Engine& engine, at::Tensor& tensor, int root) {
  at::Tensor buffer = Contiguous(engine, tensor, /*fill=*/engine.rank() == root);
  RETURN_IF_ERROR(engine.direct().Broadcast(root, buffer.data_ptr(), Bytes(buffer)));
  if (engine.rank() != root) CopyBack(tensor, buffer);
  return absl::OkStatus();
}

absl::Status ReduceTensor(Engine& engine, at::Tensor& tensor, int root,
                          collectives::DataType type, Reduction reduction) {
  at::Tensor buffer = Contiguous(engine, tensor, /*fill=*/true);
  RETURN_IF_ERROR(engine.direct().Reduce(root, buffer.data_ptr(),
                                         static_cast<size_t>(buffer.numel()), type,
                                         reduction.op));
  if (engine.rank() != root) return absl::OkStatus();
  if (reduction.average) buffer.div_(engine.size());
  CopyBack(tensor, buffer);
  return absl::OkStatus();
}

absl::Status GatherTensors(Engine& engine, const at::Tensor& input,
                           std::vector<at::Tensor>& outputs, int root) {
  at::Tensor source = Contiguous(engine, input, /*fill=*/true);
  std::vector<at::Tensor> buffers = ContiguousAll(engine, outputs, /*fill=*/false);
  RETURN_IF_ERROR(engine.direct().Gather(root, source.data_ptr(), Bytes(source),
                                         DataPointers<void*>(buffers)));
  CopyBackAll(outputs, buffers);
  return absl::OkStatus();
}

absl::Status ScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                            at::Tensor& output, int root) {
  std::vector<at::Tensor> sources = ContiguousAll(engine, inputs, /*fill=*/true);
  at::Tensor target = Contiguous(engine, output, /*fill=*/false);
  RETURN_IF_ERROR(engine.direct().Scatter(root, DataPointers<const void*>(sources),
                                          target.data_ptr(), Bytes(target)));
  CopyBack(output, target);
  return absl::OkStatus();
}

absl::Status AllGatherTensors(Engine& engine, const at::Tensor& input,
                              std::vector<at::Tensor>& outputs) {
  at::Tensor source = Contiguous(engine, input, /*fill=*/true);
  std::vector<at::Tensor> buffers = ContiguousAll(engine, outputs, /*fill=*/false);
  RETURN_IF_ERROR(engine.direct().AllGather(source.data_ptr(), Bytes(source),
                                            DataPointers<void*>(buffers)));
  CopyBackAll(outputs, buffers);
  return absl::OkStatus();
}

absl::Status ReduceScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                  at::Tensor& output, collectives::DataType type,
                                  Reduction reduction) {
  std::vector<at::Tensor> sources = ContiguousAll(engine, inputs, /*fill=*/true);
  at::Tensor result = Contiguous(engine, output, /*fill=*/false);
  RETURN_IF_ERROR(engine.direct().ReduceScatter(DataPointers<const void*>(sources),
                                                result.data_ptr(),
                                                static_cast<size_t>(result.numel()), type,
                                                reduction.op));
  if (reduction.average) result.div_(engine.size());
  CopyBack(output, result);
  return absl::OkStatus();
}

absl::Status AllToAllTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                             std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> sources = ContiguousAll(engine, inputs, /*fill=*/true);
  std::vector<at::Tensor> targets = ContiguousAll(engine, outputs, /*fill=*/false);
  std::vector<size_t> input_bytes, output_bytes;
  for (const at::Tensor& t : sources) input_bytes.push_back(Bytes(t));
  for (const at::Tensor& t : targets) output_bytes.push_back(Bytes(t));
  RETURN_IF_ERROR(engine.direct().AllToAll(DataPointers<const void*>(sources), input_bytes,
                                           DataPointers<void*>(targets), output_bytes));
  CopyBackAll(outputs, targets);
  return absl::OkStatus();
}

namespace {

// The tensors laid end to end in one new contiguous tensor (counted).
at::Tensor Concatenated(Engine& engine, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  at::Tensor joined = at::cat(flat);
  engine.Count([&](BackendStats& stats) { stats.coalesced_bytes += Bytes(joined); });
  return joined;
}

// Copies consecutive pieces of `joined` back into `tensors` (counted).
void CopyPieces(Engine& engine, const at::Tensor& joined, const std::vector<at::Tensor>& tensors) {
  int64_t at = 0;
  for (const at::Tensor& t : tensors) {
    t.copy_(joined.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
  engine.Count([&](BackendStats& stats) { stats.coalesced_bytes += Bytes(joined); });
}

}  // namespace

absl::Status AllReduceCoalescedTensors(Engine& engine, std::vector<at::Tensor>& tensors,
                                       collectives::DataType type, Reduction reduction) {
  at::Tensor joined = Concatenated(engine, tensors);
  RETURN_IF_ERROR(AllReduceTensor(engine, joined, type, reduction));
  CopyPieces(engine, joined, tensors);
  return absl::OkStatus();
}

absl::Status DeviceAllReduceCoalescedTensors(Engine& engine, std::vector<at::Tensor>& tensors,
                                             collectives::DataType type, Reduction reduction) {
  int64_t total = 0;
  for (const at::Tensor& t : tensors) total += t.numel();
  ASSIGN_OR_RETURN(at::Tensor joined,
                   PreparedFlat(engine, total, tensors[0].scalar_type(),
                                "copying the device all-reduce's tensors together",
                                [&](at::Tensor& flat) {
                                  int64_t at = 0;
                                  for (const at::Tensor& t : tensors) {
                                    flat.narrow(0, at, t.numel()).copy_(t.view({-1}));
                                    at += t.numel();
                                  }
                                }));
  engine.Count([&](BackendStats& stats) { stats.coalesced_bytes += Bytes(joined); });
  RETURN_IF_ERROR(KeptOnFailure(DeviceAllReduceTensor(engine, joined, type, reduction), joined));
  try {
    CopyPieces(engine, joined, tensors);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("copying the device all-reduce's tensors back: ", e.what()));
  }
  return KeptOnFailure(FinishTorchWork(engine, "copying the device all-reduce's tensors back"),
                       joined);
}

absl::Status AllGatherCoalescedTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                       std::vector<std::vector<at::Tensor>>& outputs) {
  at::Tensor joined = Concatenated(engine, inputs);
  std::vector<at::Tensor> gathered;
  for (int r = 0; r < engine.size(); ++r) gathered.push_back(at::empty_like(joined));
  RETURN_IF_ERROR(AllGatherTensors(engine, joined, gathered));
  for (int r = 0; r < engine.size(); ++r) CopyPieces(engine, gathered[r], outputs[r]);
  return absl::OkStatus();
}

absl::StatusOr<onesided::Messenger::OpId> PostSend(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work) {
  at::Tensor source = Contiguous(engine, tensor, /*fill=*/true);
  return engine.messenger().Send(
      peer, static_cast<uint64_t>(tag), source.data_ptr(), Bytes(source),
      // The source stays alive until the message has landed.
      [work, source](absl::Status status) { work->Complete(status); });
}

absl::StatusOr<onesided::Messenger::OpId> PostRecv(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work) {
  at::Tensor target = Contiguous(engine, tensor, /*fill=*/false);
  const size_t bytes = Bytes(target);
  return engine.messenger().Recv(
      peer, static_cast<uint64_t>(tag), target.data_ptr(), bytes,
      [work, tensor, target, bytes, peer](absl::StatusOr<size_t> got) mutable {
        if (!got.ok()) return work->Complete(got.status());
        if (*got != bytes) {
          return work->Complete(absl::InvalidArgumentError(absl::StrCat(
              "rank ", peer, " sent ", *got, " bytes to a receiving tensor of ", bytes,
              " bytes")));
        }
        // Runs inside the messenger's progress: no exception may leave it.
        try {
          CopyBack(tensor, target);
        } catch (const std::exception& e) {
          return work->Complete(absl::InternalError(absl::StrCat(
              "copying the message from rank ", peer, " into the tensor: ", e.what())));
        }
        work->Complete(absl::OkStatus());
      });
}

namespace {

// A device tensor's send: `done` fires with the receiver's answer (or the
// error that came first); the tensor stays referenced until then, pinned
// after it while the receiver maps its allocation (DeviceP2p::Answered),
// and for ever when a copy of it may still run (no answer, or the answer
// says so). An error returned: nothing went out, and `done` is never
// called.
absl::StatusOr<onesided::Messenger::OpId> SendDeviceTensor(
    Engine& engine, const at::Tensor& tensor, int peer, uint64_t tag,
    absl::AnyInvocable<void(absl::Status) &&> done) {
  const absl::Time deadline = absl::Now() + engine.options().timeout;
  absl::StatusOr<DeviceP2p::Outgoing> described =
      engine.device_p2p()->Describe(peer, tensor.data_ptr(), Bytes(tensor), deadline);
  if (absl::IsDeadlineExceeded(described.status())) {
    new at::Tensor(tensor);  // the copy given up on may still read it
  }
  if (!described.ok()) return described.status();
  auto message = std::make_shared<DeviceP2p::Outgoing>(*std::move(described));
  auto ack = std::make_shared<DeviceAck>();
  // Fires once: the answer, or the send's failure, whichever comes first.
  auto finish = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  auto fire = [finish](absl::Status status) {
    if (*finish) std::move (*finish)(std::move(status));
    *finish = nullptr;
  };
  Engine* const owner = &engine;
  onesided::Messenger& messenger = engine.messenger();
  // The answer's receive first: it may come before the send's completion.
  ASSIGN_OR_RETURN(
      const onesided::Messenger::OpId answer,
      messenger.Recv(
          peer, DeviceP2p::AckTag(tag), ack.get(), sizeof(DeviceAck),
          [owner, fire, ack, message, tensor, peer](absl::StatusOr<size_t> got) {
            // Only an answer that came (inside the engine's progress) uses
            // the engine; one given up on or a dead peer may come at its
            // teardown.
            absl::Status status = got.status();
            bool may_run = !status.ok();
            if (status.ok()) {
              const DeviceAck answer = *ack;  // the peer's bytes, copied once
              if (*got != sizeof(DeviceAck)) {
                status = absl::DataLossError(absl::StrCat(
                    "rank ", peer, " answered a CUDA tensor's send with ", *got, " bytes"));
                may_run = true;
              } else if (answer.code != 0) {
                const int code = answer.code;
                status = absl::Status(
                    code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
                        ? static_cast<absl::StatusCode>(code)
                        : absl::StatusCode::kUnknown,
                    absl::StrCat("rank ", peer,
                                 " could not take this rank's CUDA tensor (its receive says "
                                 "why)"));
                may_run = (answer.flags & DeviceAck::kCopyMayRun) != 0;
              } else {
                status = owner->device_p2p()->Answered(peer, *message, answer, tensor);
                may_run = !status.ok();
                if (status.ok()) {
                  const bool inline_bytes = message->inline_bytes;
                  const int64_t bytes = static_cast<int64_t>(Bytes(tensor));
                  const int64_t pinned =
                      static_cast<int64_t>(owner->device_p2p()->pinned());
                  owner->Count([inline_bytes, bytes, pinned](BackendStats& stats) {
                    if (inline_bytes) {
                      ++stats.device_p2p_inline;
                      stats.device_staged_bytes += bytes;
                    } else {
                      ++stats.device_p2p_ipc;
                    }
                    stats.device_p2p_pinned = pinned;
                  });
                }
              }
            }
            // The peer may still read the tensor through its mapping.
            if (may_run && !message->inline_bytes) new at::Tensor(tensor);
            fire(std::move(status));
          }));
  absl::StatusOr<onesided::Messenger::OpId> sent = messenger.Send(
      peer, DeviceP2p::DataTag(tag), message->data.get(), message->size,
      [fire, message](absl::Status status) {
        if (!status.ok()) fire(std::move(status));
      });
  if (!sent.ok()) {
    *finish = nullptr;  // the error is returned: `done` is never called
    messenger.Abandon(answer, sent.status());
    return sent.status();
  }
  return answer;
}

// A device tensor's receive: `done` fires once the tensor is in place and
// answered for, or with the error. An error returned: `done` is never
// called.
absl::StatusOr<onesided::Messenger::OpId> ReceiveDeviceTensor(
    Engine& engine, const at::Tensor& tensor, int peer, uint64_t tag,
    absl::AnyInvocable<void(absl::Status) &&> done) {
  const size_t bytes = Bytes(tensor);
  const absl::Time deadline = absl::Now() + engine.options().timeout;
  auto buffer = std::make_shared<DeviceP2p::Outgoing>(DeviceP2p::ReceiveBuffer(bytes));
  Engine* const owner = &engine;
  return engine.messenger().Recv(
      peer, DeviceP2p::DataTag(tag), buffer->data.get(), buffer->size,
      [owner, done = std::move(done), tensor, buffer, bytes, peer, tag,
       deadline](absl::StatusOr<size_t> got) mutable {
        // A message that came (or one too large for the receive) is
        // answered; one given up on, or a dead peer, is not (the engine may
        // be going).
        if (!got.ok() && !absl::IsInvalidArgument(got.status())) {
          return std::move(done)(got.status());
        }
        auto answer = std::make_shared<DeviceAck>();
        absl::Status status = got.status();
        bool inline_bytes = false;
        if (status.ok()) {
          status = owner->device_p2p()->Deliver(peer, *buffer, *got, tensor.data_ptr(), bytes,
                                                deadline, *answer, &inline_bytes);
          if ((answer->flags & DeviceAck::kCopyMayRun) != 0 ||
              absl::IsDeadlineExceeded(status)) {
            new at::Tensor(tensor);  // a copy given up on may still write it
          }
        }
        if (status.ok()) {
          owner->Count([inline_bytes, bytes](BackendStats& stats) {
            if (inline_bytes) {
              ++stats.device_p2p_inline;
              stats.device_staged_bytes += static_cast<int64_t>(bytes);
            } else {
              ++stats.device_p2p_ipc;
            }
          });
        }
        answer->code = static_cast<int32_t>(status.code());
        // The sender learns of a failure only from the answer; a dead one
        // is no matter.
        owner->messenger()
            .Send(peer, DeviceP2p::AckTag(tag), answer.get(), sizeof(DeviceAck),
                  [answer](absl::Status) {})
            .IgnoreError();
        std::move(done)(std::move(status));
      });
}

}  // namespace

absl::StatusOr<onesided::Messenger::OpId> PostDeviceSend(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work) {
  return SendDeviceTensor(engine, tensor, peer, DeviceP2p::UserTag(tag),
                          [work](absl::Status status) { work->Complete(status); });
}

absl::StatusOr<onesided::Messenger::OpId> PostDeviceRecv(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work) {
  return ReceiveDeviceTensor(engine, tensor, peer, DeviceP2p::UserTag(tag),
                             [work](absl::Status status) { work->Complete(status); });
}

namespace {

// One part of a device exchange: a tensor to or from `peer`.
struct DevicePart {
  int peer;
  at::Tensor tensor;
};

// Every receive and send of device tensors posted at once under the next
// collective tag, this rank's own part (`own_from` into `own_to`, when
// given) copied on the device meanwhile; returns once all have completed,
// or the first error. At the group's deadline, or after an error, what is
// left is given up (a part the peer may still read stays referenced).
absl::Status ExchangeOnDevice(Engine& engine, const std::vector<DevicePart>& receives,
                              const std::vector<DevicePart>& sends, const at::Tensor* own_from,
                              const at::Tensor* own_to, const char* what) {
  const uint64_t tag = engine.device_p2p()->NextCollectiveTag();
  const absl::Time deadline = absl::Now() + engine.options().timeout;
  auto left = std::make_shared<int>(0);
  auto first_error = std::make_shared<absl::Status>();
  auto done = [left, first_error](absl::Status status) {
    --*left;
    if (first_error->ok()) *first_error = std::move(status);
  };
  std::vector<onesided::Messenger::OpId> posted;
  absl::Status status;
  for (const DevicePart& part : receives) {
    ++*left;
    absl::StatusOr<onesided::Messenger::OpId> op =
        ReceiveDeviceTensor(engine, part.tensor, part.peer, tag, done);
    if (!op.ok()) {
      --*left;
      status = op.status();
      break;
    }
    posted.push_back(*op);
  }
  for (size_t i = 0; status.ok() && i < sends.size(); ++i) {
    ++*left;
    absl::StatusOr<onesided::Messenger::OpId> op =
        SendDeviceTensor(engine, sends[i].tensor, sends[i].peer, tag, done);
    if (!op.ok()) {
      --*left;
      status = op.status();
      break;
    }
    posted.push_back(*op);
  }
  // This rank's own part, while the peers' move.
  if (status.ok() && own_from != nullptr && Bytes(*own_from) > 0 &&
      own_from->data_ptr() != own_to->data_ptr()) {
    status = engine.device()->Copy(own_to->data_ptr(), own_from->data_ptr(), Bytes(*own_from),
                                   deadline, absl::StrCat("copying this rank's own part of ", what));
    if (absl::IsDeadlineExceeded(status)) {
      new at::Tensor(*own_from);
      new at::Tensor(*own_to);
    }
  }
  if (status.ok()) {
    status = engine.messenger().ProgressUntil([left] { return *left == 0; }, deadline,
                                              absl::StrCat("the parts of ", what));
  }
  if (*left > 0) {
    const absl::Status why =
        absl::AbortedError(absl::StrCat(what, " given up: ", status.message()));
    for (onesided::Messenger::OpId op : posted) engine.messenger().Abandon(op, why);
  }
  RETURN_IF_ERROR(status);
  return *first_error;
}

}  // namespace

absl::Status DeviceAllToAllTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                   std::vector<at::Tensor>& outputs) {
  engine.Count([](BackendStats& stats) { ++stats.device_alltoalls; });
  const int me = engine.rank();
  std::vector<DevicePart> receives, sends;
  for (int q = 0; q < engine.size(); ++q) {
    if (q == me) continue;
    receives.push_back({q, outputs[q]});
    sends.push_back({q, inputs[q]});
  }
  return ExchangeOnDevice(engine, receives, sends, &inputs[me], &outputs[me],
                          "a device all-to-all");
}

absl::Status DeviceGatherTensors(Engine& engine, const at::Tensor& input,
                                 std::vector<at::Tensor>& outputs, int root) {
  engine.Count([](BackendStats& stats) { ++stats.device_gathers; });
  const int me = engine.rank();
  std::vector<DevicePart> receives;
  if (me != root) return ExchangeOnDevice(engine, {}, {{root, input}}, nullptr, nullptr,
                                          "a device gather");
  for (int q = 0; q < engine.size(); ++q) {
    if (q != me) receives.push_back({q, outputs[q]});
  }
  return ExchangeOnDevice(engine, receives, {}, &input, &outputs[me], "a device gather");
}

absl::Status DeviceScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                  at::Tensor& output, int root) {
  engine.Count([](BackendStats& stats) { ++stats.device_scatters; });
  const int me = engine.rank();
  if (me != root) return ExchangeOnDevice(engine, {{root, output}}, {}, nullptr, nullptr,
                                          "a device scatter");
  std::vector<DevicePart> sends;
  for (int q = 0; q < engine.size(); ++q) {
    if (q != me) sends.push_back({q, inputs[q]});
  }
  return ExchangeOnDevice(engine, {}, sends, &inputs[me], &output, "a device scatter");
}

}  // namespace rdmaflow::torch_backend

// File: torch_communicator.cc
#include "runtime/torch/torch_communicator.h"

#include <exception>
#include <memory>

#include "ATen/ops/from_blob.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::runtime::torch {

absl::StatusOr<at::ScalarType> ToScalarType(graph::DataType dtype) {
  switch (dtype) {
    case graph::DT_FLOAT32:
      return at::kFloat;
    case graph::DT_FLOAT16:
      return at::kHalf;
    case graph::DT_BFLOAT16:
      return at::kBFloat16;
    case graph::DT_FLOAT64:
      return at::kDouble;
    case graph::DT_INT8:
      return at::kChar;
    case graph::DT_UINT8:
      return at::kByte;
    case graph::DT_INT32:
      return at::kInt;
    case graph::DT_INT64:
      return at::kLong;
    case graph::DT_BOOL:
      return at::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "no LibTorch dtype for ", graph::DataTypeName(dtype)));
  }
}

namespace {

// A plan's device tensor, which an adapter made without a device does not
// take.
absl::Status DeviceTensorError(const TransferInfo& info) {
  return absl::UnimplementedError(absl::StrCat(
      info.Describe(), " lives in device memory in the plan, and this LibTorch adapter "
      "was made for CPU tensors only (TorchCommunicator::Create without a device; "
      "docs/device.md)"));
}

}  // namespace

absl::StatusOr<TorchCommunicator> TorchCommunicator::Create(
    Communicator& communicator, const plan::TransferPlan& plan, int rank,
    std::optional<c10::Device> device) {
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, rank));
  return TorchCommunicator(communicator, std::move(rank_plan), device);
}

absl::Status TorchCommunicator::Send(int id, const at::Tensor& tensor) {
  ASSIGN_OR_RETURN(const TransferInfo* info, plan_.FindSend(id));
  if (info->device_source && !device_.has_value()) return DeviceTensorError(*info);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ToScalarType(info->spec.dtype()));
  try {
    const c10::Device expected = info->device_source ? *device_ : c10::Device(c10::kCPU);
    if (tensor.device() != expected || tensor.scalar_type() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          info->Describe(), ": got a ", tensor.toString(), " tensor on ", tensor.device().str(),
          ", the plan expects a ", c10::toString(dtype), " one on ", expected.str(),
          info->device_source ? " (held in device memory)" : ""));
    }
    if (info->device_source && !tensor.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          info->Describe(), ": a device tensor goes out from where it lies, in a send "
          "arena, and this one is not contiguous (copy it into the arena first)"));
    }
    auto kept = std::make_shared<at::Tensor>(tensor.contiguous());
    OutgoingTensor out;
    out.data = static_cast<const std::byte*>(kept->data_ptr());
    out.bytes = kept->nbytes();
    out.shape.assign(kept->sizes().begin(), kept->sizes().end());
    out.keepalive = kept;
    return communicator_->Send(id, std::move(out));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(info->Describe(), ": LibTorch: ", e.what()));
  }
}

absl::StatusOr<at::Tensor> TorchCommunicator::Recv(int id) {
  ASSIGN_OR_RETURN(const TransferInfo* info, plan_.FindRecv(id));
  if (info->device && !device_.has_value()) return DeviceTensorError(*info);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ToScalarType(info->spec.dtype()));
  ASSIGN_OR_RETURN(ReceivedTensor received, communicator_->Recv(id));
  // Never device memory wrapped as a CPU tensor, whatever the plan says.
  if (received.on_device() && !device_.has_value()) return DeviceTensorError(*info);
  const c10::Device where = received.on_device() ? *device_ : c10::Device(c10::kCPU);
  const std::vector<int64_t> shape = received.shape();
  std::byte* data = received.data();
  // from_blob's deleter must be copyable: hold the lease through a pointer.
  ReceivedTensor::Lease* lease = received.ReleaseLease().release();
  try {
    return at::from_blob(
        data, shape, [lease](void*) { delete lease; },
        at::TensorOptions().dtype(dtype).device(where));
  } catch (const std::exception& e) {
    delete lease;
    return absl::InternalError(
        absl::StrCat(info->Describe(), ": LibTorch: ", e.what()));
  }
}

}  // namespace rdmaflow::runtime::torch

// File: data_parallel.cc
#include "strategies/data_parallel.h"

#include <cstring>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/device/device_transport.h"
#include "strategies/device_tensors.h"

namespace rdmaflow::strategies {
absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Create(
    onesided::PeerLinks& links, const std::vector<int>& members,
    std::vector<Parameter> parameters, const DataParallelOptions& options) {
  std::unique_ptr<DataParallelGroup> group(new DataParallelGroup());
  const c10::Device where = TensorDeviceOf(options.device);
  if (options.device != nullptr && !options.codec.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data-parallel group '", options.name, "': codec '", options.codec,
        "' encodes on the host; device parameters take none (drop --codec, or train on the "
        "CPU)"));
  }
  RETURN_IF_ERROR(CheckParametersOn(absl::StrCat("data-parallel group '", options.name, "'"),
                                    parameters, where));
  std::vector<size_t> bytes;
  for (const Parameter& p : parameters) {
    bytes.push_back(static_cast<size_t>(p.tensor.numel()) * sizeof(float));
  }
  ASSIGN_OR_RETURN(group->layout_, collectives::LayOut(bytes, collectives::kFusionAlignment));
  ASSIGN_OR_RETURN(group->buckets_,
                   collectives::MakeBuckets(bytes, group->layout_,
                                            static_cast<size_t>(options.bucket_bytes)));
  group->parameters_ = std::move(parameters);
  if (group->layout_.total_bytes == 0) return group;

  collectives::AllReduceGroupOptions all_reduce;
  all_reduce.ring.name = options.name;
  all_reduce.ring.capacity_bytes = group->layout_.total_bytes;
  all_reduce.ring.chunk_bytes = static_cast<size_t>(options.chunk_bytes);
  all_reduce.ring.slots = options.slots;
  all_reduce.ring.timeout = options.timeout;
  all_reduce.ring.loop = &links.loop();
  all_reduce.direct = options.direct;
  all_reduce.device = options.device;
  const int64_t elements = group->layout_.total_bytes / sizeof(float);
  const at::TensorOptions flat = at::TensorOptions().dtype(at::kFloat).device(where);
  if (options.codec.empty()) {
    ASSIGN_OR_RETURN(group->ring_, collectives::AllReduceGroup::Create(links, members, all_reduce));
    group->on_device_ = group->ring_->on_device();
    group->flat_grads_ = FloatsOver(group->ring_->data(), elements, where);
  } else {
    compression::CompressedAllReduceOptions compressed;
    compressed.name = options.name;
    compressed.codec = options.codec;
    compressed.seed = options.seed;
    compressed.group = all_reduce;
    absl::StatusOr<std::unique_ptr<compression::CompressedAllReduce>> made =
        compression::CompressedAllReduce::Create(links, members,
                                                 static_cast<size_t>(elements), compressed);
    if (!made.ok()) {
      return absl::Status(made.status().code(),
                          absl::StrCat("data-parallel group '", options.name,
                                       "': ", made.status().message()));
    }
    group->compressed_ = std::move(made).value();
    group->flat_grads_ = at::zeros({elements}, at::kFloat);
  }
  group->flat_params_ = at::zeros({elements}, flat);
  group->flat_grads_.zero_();
  group->momentum_ = at::zeros({elements}, flat);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < group->parameters_.size(); ++i) {
    at::Tensor& p = group->parameters_[i].tensor;
    const int64_t at = group->layout_.offsets[i] / sizeof(float);
    at::Tensor values = group->flat_params_.narrow(0, at, p.numel()).view(p.sizes());
    values.copy_(p.detach());
    p.set_data(values);
    p.mutable_grad() = group->flat_grads_.narrow(0, at, p.numel()).view(p.sizes());
  }
  return group;
}

DataParallelGroup::~DataParallelGroup() {
  // Torch's kernels still queued on the region (the last step's SGD reads
  // the gradients) end before it is freed.
  if (on_device_) SynchronizeTorchDevice(flat_grads_.device()).IgnoreError();
  for (Parameter& p : parameters_) p.tensor.mutable_grad() = at::Tensor();
}

void DataParallelGroup::ZeroGradients() {
  if (!flat_grads_.defined()) return;
  if (on_device_) {
    // Device memory: a kernel on the caller's stream, ahead of backward.
    at::NoGradGuard no_grad;
    flat_grads_.zero_();
    return;
  }
  std::memset(flat_grads_.data_ptr(), 0, layout_.total_bytes);
}

absl::Status DataParallelGroup::AllReduceGradients(double scale, double momentum) {
  if (compressed_ != nullptr) {
    at::NoGradGuard no_grad;
    if (momentum != 0) {
      momentum_.mul_(momentum).add_(flat_grads_);
      flat_grads_.copy_(momentum_);
    }
    RETURN_IF_ERROR(compressed_->AllReduce(
        absl::MakeSpan(flat_grads_.data_ptr<float>(), static_cast<size_t>(flat_grads_.numel())),
        static_cast<float>(scale)));
    float* velocity = momentum_.data_ptr<float>();
    for (uint32_t i : compressed_->codec().sent()) velocity[i] = 0.0f;
    return absl::OkStatus();
  }
  if (ring_ == nullptr) return absl::OkStatus();
  // Torch's kernels that wrote the gradients end before the group's own
  // device work reads them: once for every bucket.
  if (on_device_) RETURN_IF_ERROR(SynchronizeTorchDevice(flat_grads_.device()));
  for (size_t b = 0; b < buckets_.size(); ++b) RETURN_IF_ERROR(AllReduceWrittenBucket(b));
  ScaleGradients(scale);
  return absl::OkStatus();
}

absl::Status DataParallelGroup::AllReduceBucket(size_t b) {
  if (on_device_) RETURN_IF_ERROR(SynchronizeTorchDevice(flat_grads_.device()));
  return AllReduceWrittenBucket(b);
}

absl::Status DataParallelGroup::AllReduceWrittenBucket(size_t b) {
  return AllReduceWrittenPart(b, 0, buckets_.at(b).bytes);
}

absl::Status DataParallelGroup::AllReduceWrittenPart(size_t b, size_t begin, size_t bytes) {
  const collectives::Bucket& bucket = buckets_.at(b);
  if (begin > bucket.bytes || bytes > bucket.bytes - begin || begin % sizeof(float) != 0 ||
      bytes % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce of bytes [", begin, ", +", bytes, ") of bucket ", b, " (", bucket.bytes,
        " bytes): the range must lie in the bucket and hold whole float32 elements"));
  }
  return ring_->AllReduce(bucket.offset + begin, bytes / sizeof(float),
                          collectives::DataType::kFloat32);
}

void DataParallelGroup::ScaleGradients(double scale) {
  if (scale == 1.0 || !flat_grads_.defined()) return;
  at::NoGradGuard no_grad;
  flat_grads_.mul_(scale);
}

void DataParallelGroup::ApplySgd(double learning_rate, double momentum) {
  if (!flat_grads_.defined()) return;
  at::NoGradGuard no_grad;
  if (compressed_ != nullptr) {
    flat_params_.add_(flat_grads_, -learning_rate);
    return;
  }
  Sgd(flat_params_, flat_grads_, momentum_, learning_rate, momentum);
}

void DataParallelGroup::Sgd(at::Tensor params, const at::Tensor& grads, at::Tensor velocity,
                            double learning_rate, double momentum) {
  velocity.mul_(momentum).add_(grads);
  params.add_(velocity, -learning_rate);
}

void DataParallelGroup::ZeroBucketGradients(size_t b) {
  const collectives::Bucket& bucket = buckets_.at(b);
  at::NoGradGuard no_grad;
  flat_grads_.narrow(0, static_cast<int64_t>(bucket.offset / sizeof(float)),
                     static_cast<int64_t>(bucket.bytes / sizeof(float)))
      .zero_();
}

void DataParallelGroup::ApplySgdToBucket(size_t b, double scale, double learning_rate,
                                         double momentum) {
  const collectives::Bucket& bucket = buckets_.at(b);
  const int64_t first = static_cast<int64_t>(bucket.offset / sizeof(float));
  const int64_t length = static_cast<int64_t>(bucket.bytes / sizeof(float));
  at::NoGradGuard no_grad;
  at::Tensor grads = flat_grads_.narrow(0, first, length);
  if (scale != 1.0) grads.mul_(scale);
  Sgd(flat_params_.narrow(0, first, length), grads, momentum_.narrow(0, first, length),
      learning_rate, momentum);
}

absl::Status DataParallelGroup::Shutdown() {
  if (compressed_ != nullptr) return compressed_->Shutdown();
  return ring_ == nullptr ? absl::OkStatus() : ring_->Shutdown();
}

collectives::RingAllReduceStats DataParallelGroup::stats() const {
  if (compressed_ != nullptr) {
    const compression::CompressionStats c = compressed_->stats();
    collectives::RingAllReduceStats stats;
    stats.calls = c.calls;
    stats.messages = c.calls;
    stats.bytes_sent = c.wire_bytes;
    return stats;
  }
  return ring_ == nullptr ? collectives::RingAllReduceStats{} : ring_->stats();
}

compression::CompressionStats DataParallelGroup::compression() const {
  return compressed_ == nullptr ? compression::CompressionStats{} : compressed_->stats();
}

}  // namespace rdmaflow::strategies

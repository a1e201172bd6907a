// File: data_parallel.h
// -----------------------------------------------------------------------------
// DataParallelGroup: replicas of (part of) a model that keep their
// parameters identical by summing gradients with the all-reduce
// (collectives/allreduce_group.h: same-host members read each other's
// memory directly, others use the ring) and applying the same SGD step. The
// `allreduce` strategy is one group over every rank; `layer_separated` has
// one over its convolutional ranks and one over its fully connected ranks.
//
// Zero copy: each parameter's .grad() is re-pointed into the ring's
// all-reduce's registered data region (fused, 64-byte aligned, in parameter order), so
// backward writes gradients where the ring reads them. The region is
// reduced in buckets of about `bucket_bytes` (gradient fusion), and the
// parameters are moved into one flat tensor so the SGD step is one
// vectorized pass.
//
// With a codec (DataParallelOptions::codec) backward writes into a plain
// flat tensor instead, and the codec encodes from it into the exchange's
// registered scratch (compression/compressed_allreduce.h).
//
// On a device (DataParallelOptions::device): the parameters are that
// device's tensors, the region is device memory (the all-reduce reduces
// it on the device: collectives/allreduce_group.h), and the flat
// parameters, gradients and momentum are device tensors, so nothing of the
// model crosses to the host. A reduction first waits for the work torch
// queued on the device (the backward that wrote the gradients); the
// group's own work is complete when its calls return.
#ifndef RDMAFLOW_STRATEGIES_DATA_PARALLEL_H_
#define RDMAFLOW_STRATEGIES_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/buckets.h"
#include "collectives/allreduce_group.h"
#include "collectives/ring_allreduce.h"
#include "compression/compressed_allreduce.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies {

struct DataParallelOptions {
  std::string name = "grads";  // unique per namespace
  int64_t bucket_bytes = int64_t{4} << 20;
  int64_t chunk_bytes = int64_t{256} << 10;
  int slots = 32;  // at most (collectives/ring_allreduce.h)
  // Same-host members reduce on direct access to each other's memory
  // where the transport maps it (collectives/allreduce_group.h).
  collectives::DirectAccess direct = collectives::DirectAccess::kAuto;
  absl::Duration timeout = absl::Seconds(120);
  // A gradient codec (compression/codec.h), or empty for none: then the
  // fused gradients go through CompressedAllReduce (the codec's scratch is
  // the registered region; gradients live in plain memory) instead of the
  // all-reduce, whole, once a step.
  std::string codec;
  uint64_t seed = 0;  // the codec's shared seed
  // Device parameters: the DeviceTransport the group's links run on (the
  // same object), whose runtime's memory the parameters lie in: CUDA
  // tensors of its device, or CPU tensors on the fake device. No codec
  // then. Null: host parameters.
  rdma::device_path::DeviceTransport* device = nullptr;
};

// Thread-compatible: the thread that drives the transport.
class DataParallelGroup {
 public:
  // Collective over `members` (global ranks, the same list everywhere),
  // all holding the same `parameters` (float32; CPU, or options.device's
  // tensors). With no parameters the group does nothing. Its all-reduce
  // runs on `links` (the transport's, shared with the strategy's other
  // protocols; they must outlive the group). kInvalidArgument for a
  // parameter of another type or device, or a codec on a device;
  // AllReduceGroup::Create's errors.
  static absl::StatusOr<std::unique_ptr<DataParallelGroup>> Create(
      onesided::PeerLinks& links, const std::vector<int>& members,
      std::vector<Parameter> parameters, const DataParallelOptions& options);
  // Points the gradients back at their own memory (the region goes away).
  ~DataParallelGroup();

  void ZeroGradients();
  // Sums the gradients over the members, bucket by bucket, then multiplies
  // them by `scale` (1/members for a mean). `momentum` matters with a codec
  // only: each member then folds its gradient into a velocity of its own
  // first (v = momentum * v + g), the codec sends the velocity, and the
  // velocity of what it sent whole is reset (DGC's momentum correction and
  // factor masking, Lin et al., ICLR 2018): momentum applied after a sparse
  // exchange, to sums that arrive in bursts, diverges.
  absl::Status AllReduceGradients(double scale, double momentum);
  // The parts of AllReduceGradients() without a codec, for a caller that
  // reduces buckets as backward fills them (bucket_pipeline.h): whether the
  // group reduces in buckets at all (false with a codec, which sends the
  // fused gradients whole, or with no parameters), bucket `b`'s sum over
  // the members (collective: every member reduces the same buckets in the
  // same order), and the final scaling.
  bool reduces_in_buckets() const { return ring_ != nullptr; }
  // Whether the parameters and gradients live on a device (options.device).
  bool on_device() const { return on_device_; }
  const collectives::Bucket& bucket(size_t b) const { return buckets_[b]; }
  absl::Status AllReduceBucket(size_t b);
  // AllReduceBucket() of a bucket whose gradients the caller knows written
  // (a device's writes seen complete: bucket_pipeline.h's marks), with no
  // wait for the rest of torch's device work.
  absl::Status AllReduceWrittenBucket(size_t b);
  // The same for bytes [begin, begin + bytes) of bucket `b` (counted from
  // its first byte): kInvalidArgument for a range outside the bucket or
  // not of whole elements.
  absl::Status AllReduceWrittenPart(size_t b, size_t begin, size_t bytes);
  void ScaleGradients(double scale);
  const std::vector<Parameter>& parameters() const { return parameters_; }
  // v = momentum * v + g; p -= lr * v (torch.optim.SGD). With a codec the
  // gradients already carry the momentum: p -= lr * g.
  void ApplySgd(double learning_rate, double momentum);
  // The same, bucket by bucket (without a codec), for a caller that updates
  // the parameters of one bucket while another is still being reduced
  // (allreduce's overlap=forward): bucket `b`'s gradients zeroed; scaled by
  // `scale` and its parameters given the SGD step. Each element gets what
  // ScaleGradients() and ApplySgd() give it.
  void ZeroBucketGradients(size_t b);
  void ApplySgdToBucket(size_t b, double scale, double learning_rate, double momentum);
  // Collective: after the last AllReduceGradients().
  absl::Status Shutdown();

  int64_t gradient_bytes() const { return static_cast<int64_t>(layout_.total_bytes); }
  int buckets() const { return static_cast<int>(buckets_.size()); }
  // What crossed between members: with a codec, its calls and wire bytes.
  collectives::RingAllReduceStats stats() const;
  // The codec's counters (zero without one).
  compression::CompressionStats compression() const;

 private:
  DataParallelGroup() = default;
  // velocity = momentum * velocity + grads; params -= lr * velocity, in place
  // (views of the flat tensors).
  static void Sgd(at::Tensor params, const at::Tensor& grads, at::Tensor velocity,
                  double learning_rate, double momentum);

  std::unique_ptr<collectives::AllReduceGroup> ring_;        // without a codec
  std::unique_ptr<compression::CompressedAllReduce> compressed_;  // with one
  std::vector<Parameter> parameters_;
  collectives::FusedLayout layout_;
  std::vector<collectives::Bucket> buckets_;
  at::Tensor flat_params_;
  at::Tensor flat_grads_;
  at::Tensor momentum_;
  bool on_device_ = false;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_DATA_PARALLEL_H_

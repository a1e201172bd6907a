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
};

// Thread-compatible: the thread that drives the transport.
class DataParallelGroup {
 public:
  // Collective over `members` (global ranks, the same list everywhere),
  // all holding the same `parameters` (float32, CPU). With no parameters
  // the group does nothing. Its ring runs on `loop` (the transport's, which
  // must outlive the group). Errors: AllReduceGroup::Create's.
  static absl::StatusOr<std::unique_ptr<DataParallelGroup>> Create(
      onesided::ProgressLoop& loop, rdma::Store& store, const std::string& ns,
      const std::vector<int>& members, std::vector<Parameter> parameters,
      const DataParallelOptions& options);
  // Points the gradients back at their own memory (the region goes away).
  ~DataParallelGroup();

  void ZeroGradients();
  // Sums the gradients over the members, bucket by bucket, then multiplies
  // them by `scale` (1/members for a mean).
  absl::Status AllReduceGradients(double scale);
  // v = momentum * v + g; p -= lr * v (torch.optim.SGD).
  void ApplySgd(double learning_rate, double momentum);
  // Collective: after the last AllReduceGradients().
  absl::Status Shutdown();

  int64_t gradient_bytes() const { return static_cast<int64_t>(layout_.total_bytes); }
  int buckets() const { return static_cast<int>(buckets_.size()); }
  collectives::RingAllReduceStats stats() const;

 private:
  DataParallelGroup() = default;

  std::unique_ptr<collectives::AllReduceGroup> ring_;
  std::vector<Parameter> parameters_;
  collectives::FusedLayout layout_;
  std::vector<collectives::Bucket> buckets_;
  torch::Tensor flat_params_;
  torch::Tensor flat_grads_;
  torch::Tensor momentum_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_DATA_PARALLEL_H_

// File: gloo_group.h
// -----------------------------------------------------------------------------
// GlooGroup: Gloo's ring all-reduce (the algorithm torch's ProcessGroupGloo
// runs for CPU tensors; TCP on 127.0.0.1), the baseline the all-reduce
// benchmark measures next to rdmaflow's ring in the same processes. It uses
// Debian's libgloo directly: a torch wheel ships no gloo headers, and
// LibTorch's C++ ProcessGroupGloo built against Debian's corrupts the heap
// (their gloo versions differ). Gloo meets the other ranks through the
// job's rdma::Store; its exceptions become absl::Status here.
#ifndef RDMAFLOW_BENCH_GLOO_GROUP_H_
#define RDMAFLOW_BENCH_GLOO_GROUP_H_

#include <memory>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/store.h"

namespace rdmaflow::bench {

class GlooGroup {
 public:
  // Collective. kUnavailable when Gloo cannot connect (the message is
  // Gloo's).
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Create(int rank, int world,
                                                           rdma::Store& store,
                                                           absl::Duration timeout);
  ~GlooGroup();

  // In-place sum of a float32 CPU tensor across the group.
  absl::Status AllReduce(at::Tensor& tensor);

 private:
  struct State;
  explicit GlooGroup(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_GLOO_GROUP_H_

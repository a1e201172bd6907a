// File: ucx_bound_read.cc
#include "rdma/ucx/ucx_bound_read.h"

#include <utility>

#include "absl/base/optimization.h"

namespace rdmaflow::rdma::ucx {

absl::Status UcxBoundRead::Post(Completion done) {
  UcxEndpointState& state = *state_;
  // As UcxBoundFlaggedWrite::Post: CanPost() says the mapping's keys live.
  if (ABSL_PREDICT_TRUE(mapped_ != nullptr && state.ep != nullptr && UcxOps::CanPost(state))) {
    UcxOps::CopyMapped(target_, mapped_, length_);
    UcxOps::CompleteNow(state, std::move(done));
    return absl::OkStatus();
  }
  if (state.closed) {
    // The endpoint may be gone: nothing of it is touched.
    return UcxOps::ClosedError(state);
  }
  return endpoint_.PostRead(slices_.local(), slices_.remote(), std::move(done));
}

absl::StatusOr<bool> UcxBoundRead::TryPostInline() {
  const UcxEndpointState& state = *state_;
  if (ABSL_PREDICT_TRUE(mapped_ != nullptr && state.ep != nullptr && UcxOps::IsOpen(state))) {
    UcxOps::CopyMapped(target_, mapped_, length_);
    return true;
  }
  if (state.closed) return UcxOps::ClosedError(state);
  if (!state.failure.ok()) return state.failure;
  return false;
}

}  // namespace rdmaflow::rdma::ucx

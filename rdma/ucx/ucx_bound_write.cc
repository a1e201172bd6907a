// File: ucx_bound_write.cc
#include "rdma/ucx/ucx_bound_write.h"

#include <utility>

#include "absl/base/optimization.h"

namespace rdmaflow::rdma::ucx {

absl::Status UcxBoundFlaggedWrite::Post(uint64_t flag, Completion done) {
  UcxEndpointState& state = *state_;
  // CanPost() says the endpoint is open and not failed, hence not released
  // (UcxOps::ReleaseEndpoint, which destroys the keys behind the mappings,
  // runs only once it is closed or failed, and clears the ep first): the
  // ep's check is a guard only.
  if (ABSL_PREDICT_TRUE(mapped_ != nullptr && state.ep != nullptr && UcxOps::CanPost(state) &&
                        !state.wrote_through_ucx)) {
    UcxOps::CopyAndFlag(state, mapped_, source_, length_, flag_mapped_, flag, std::move(done));
    return absl::OkStatus();
  }
  if (state.closed) {
    // The endpoint may be gone: nothing of it is touched.
    return UcxOps::ClosedError(state);
  }
  return endpoint_.PostWriteWithFlag(slices_.src(), slices_.dst(), slices_.flag_word(), flag,
                                     std::move(done));
}

absl::StatusOr<bool> UcxBoundFlaggedWrite::TryPostInline(uint64_t flag) {
  const UcxEndpointState& state = *state_;
  if (ABSL_PREDICT_TRUE(mapped_ != nullptr && state.ep != nullptr && UcxOps::IsOpen(state) &&
                        !state.wrote_through_ucx)) {
    UcxOps::CopyAndStoreFlag(state, mapped_, source_, length_, flag_mapped_, flag);
    return true;
  }
  if (state.closed) return UcxOps::ClosedError(state);
  if (!state.failure.ok()) return state.failure;
  return false;
}

}  // namespace rdmaflow::rdma::ucx

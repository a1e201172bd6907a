// File: ucx_bound_write.cc
#include "rdma/ucx/ucx_bound_write.h"

#include <cstring>
#include <utility>

#include "absl/base/optimization.h"
#include "common/shared_word.h"

namespace rdmaflow::rdma::ucx {

absl::Status UcxBoundFlaggedWrite::Post(uint64_t flag, Completion done) {
  UcxEndpointState& state = *state_;
  // The keys behind the mappings live while the endpoint is open and not
  // released (a released one has no ep: UcxOps::ReleaseEndpoint).
  if (ABSL_PREDICT_TRUE(mapped_ != nullptr && state.ep != nullptr && UcxOps::CanPost(state) &&
                        !state.wrote_through_ucx)) {
    std::memcpy(mapped_, slices_.src.data(), slices_.src.length);
    StoreSharedWord(flag_mapped_, flag);
    UcxOps::CompleteNow(state, std::move(done));
    return absl::OkStatus();
  }
  if (state.closed) {
    // The endpoint may be gone: nothing of it is touched.
    return UcxOps::ClosedError(state);
  }
  return endpoint_.PostWriteWithFlag(slices_.src, slices_.dst, slices_.flag_word, flag,
                                     std::move(done));
}

}  // namespace rdmaflow::rdma::ucx

// File: ucx_bound_read.h
// -----------------------------------------------------------------------------
// UcxBoundRead: a read bound once (UcxEndpoint::BindRead) out of a same-host
// peer's mapped shared memory, posted as the copy, with no look-up or slice
// check per post.
#ifndef RDMAFLOW_RDMA_UCX_UCX_BOUND_READ_H_
#define RDMAFLOW_RDMA_UCX_UCX_BOUND_READ_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/bound_slices.h"
#include "rdma/endpoint.h"
#include "rdma/slice.h"
#include "rdma/ucx/ucx_endpoint.h"
#include "rdma/ucx/ucx_internal.h"

namespace rdmaflow::rdma::ucx {

// Thread-compatible, as its endpoint. The endpoint and the local region
// must outlive it (Endpoint::BindRead); it keeps a copy of the peer's
// descriptor. As UcxBoundFlaggedWrite, it holds the endpoint's state, so a
// post after the endpoint was destroyed is refused (kFailedPrecondition).
class UcxBoundRead final : public BoundRead {
 public:
  // The slices as bound, checked by the endpoint. `mapped`: where `src`
  // lies in this process (the peer's shared memory under the endpoint's
  // remote key), or null where it does not map: every post then goes
  // through UcxEndpoint::PostRead.
  UcxBoundRead(UcxEndpoint& endpoint, std::shared_ptr<UcxEndpointState> state,
               const LocalSlice& dst, const RemoteSlice& src, const std::byte* mapped)
      : endpoint_(endpoint),
        state_(std::move(state)),
        slices_(dst, src),
        target_(dst.data()),
        length_(dst.length),
        mapped_(mapped) {}

  // Mapped, while the endpoint takes posts: the copy, its completion
  // queued. Else PostRead() with the bound slices.
  absl::Status Post(Completion done) override;
  // Mapped, while the endpoint is open: the copy, true. Else false, or the
  // endpoint's closure or failure.
  absl::StatusOr<bool> TryPostInline() override;

 private:
  UcxEndpoint& endpoint_;  // used only while state_ says it is open
  const std::shared_ptr<UcxEndpointState> state_;
  const BoundSlices slices_;
  std::byte* const target_;
  const size_t length_;
  const std::byte* const mapped_;
};

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_BOUND_READ_H_

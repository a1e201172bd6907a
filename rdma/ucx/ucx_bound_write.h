// File: ucx_bound_write.h
// -----------------------------------------------------------------------------
// UcxBoundFlaggedWrite: a flagged write bound once (UcxEndpoint::
// BindFlaggedWrite) into a same-host peer's mapped shared memory, posted as
// the copy and the flag's release store, with no look-up or slice check
// per post.
#ifndef RDMAFLOW_RDMA_UCX_UCX_BOUND_WRITE_H_
#define RDMAFLOW_RDMA_UCX_UCX_BOUND_WRITE_H_

#include <cstddef>
#include <cstdint>
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
// must outlive it (Endpoint::BindFlaggedWrite); it keeps copies of the
// peer's descriptors. As a defence, not a contract: it holds the
// endpoint's state, so a post after the endpoint was destroyed is refused
// (kFailedPrecondition) rather than a use of freed memory.
class UcxBoundFlaggedWrite final : public BoundFlaggedWrite {
 public:
  // The slices as bound, checked by the endpoint. `mapped` and
  // `flag_mapped`: where `dst` and `flag_word` lie in this process (the
  // peer's shared memory under the endpoint's remote keys), or both null
  // where they do not map: every post then goes through
  // UcxEndpoint::PostWriteWithFlag.
  UcxBoundFlaggedWrite(UcxEndpoint& endpoint, std::shared_ptr<UcxEndpointState> state,
                       const LocalSlice& src, const RemoteSlice& dst,
                       const RemoteSlice& flag_word, std::byte* mapped, std::byte* flag_mapped)
      : endpoint_(endpoint),
        state_(std::move(state)),
        slices_(src, dst, flag_word),
        source_(src.data()),
        length_(src.length),
        mapped_(mapped),
        flag_mapped_(flag_mapped) {}

  // Mapped, while the endpoint takes posts and no write of it went through
  // UCX (a flag stored here could pass such a write): UcxOps::CopyAndFlag.
  // Else PostWriteWithFlag() with the bound slices, which checks them
  // again and says why it refuses.
  absl::Status Post(uint64_t flag, Completion done) override;
  // Mapped, while the endpoint is open and no write of it went through
  // UCX: UcxOps::CopyAndStoreFlag, true. Else false, or the endpoint's
  // closure or failure.
  absl::StatusOr<bool> TryPostInline(uint64_t flag) override;

 private:
  UcxEndpoint& endpoint_;  // used only while state_ says it is open
  const std::shared_ptr<UcxEndpointState> state_;
  const BoundSlices slices_;
  const std::byte* const source_;
  const size_t length_;
  std::byte* const mapped_;
  std::byte* const flag_mapped_;
};

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_BOUND_WRITE_H_

// File: data_mover.cc
#include "collectives/data_mover.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/poll_until.h"
#include "common/status_macros.h"

namespace rdmaflow::collectives {

absl::Status PollUntil(absl::FunctionRef<absl::StatusOr<bool>()> reached, absl::Time deadline,
                       absl::string_view what) {
  ASSIGN_OR_RETURN(const bool done, rdmaflow::PollUntil(reached, deadline));
  if (done) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(what, " did not finish in time"));
}

absl::StatusOr<std::byte*> HostDataMover::MapPeer(rdma::Endpoint& endpoint,
                                                  const rdma::RemoteSlice& remote) {
  return endpoint.MapRemote(remote);
}

absl::StatusOr<std::byte*> HostDataMover::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

absl::Status HostDataMover::Copy(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostDataMover::Reduce(DataType type, ReduceOp op, std::byte* dst,
                                   const std::vector<const std::byte*>& srcs, size_t count) {
  if (srcs.empty()) return absl::InvalidArgumentError("a reduction of no sources");
  ReduceMany(type, op, dst, srcs, count);
  return absl::OkStatus();
}

}  // namespace rdmaflow::collectives

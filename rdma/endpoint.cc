// File: endpoint.cc
#include "rdma/endpoint.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma {

absl::StatusOr<std::byte*> Endpoint::MapRemote(const RemoteSlice&) {
  return absl::UnimplementedError(absl::StrCat(
      "this backend cannot map rank ", peer_rank(),
      "'s memory into this process; write and read it with posts instead"));
}

absl::Status Endpoint::PostWriteWithFlag(const LocalSlice&, const RemoteSlice&,
                                         const RemoteSlice&, uint64_t,
                                         Completion) {
  return absl::UnimplementedError(absl::StrCat(
      "this backend has no flagged writes (to rank ", peer_rank(),
      "): write with a notification instead"));
}

absl::Status Endpoint::Prepare(const RemoteRegion&) { return absl::OkStatus(); }

}  // namespace rdmaflow::rdma

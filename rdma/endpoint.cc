// File: endpoint.cc
#include "rdma/endpoint.h"

#include <memory>
#include <utility>

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

namespace {

// Where the backend resolves nothing ahead: each post is a flagged write of
// the endpoint's, which checks it.
class PostingFlaggedWrite final : public BoundFlaggedWrite {
 public:
  PostingFlaggedWrite(Endpoint& endpoint, const LocalSlice& src, const RemoteSlice& dst,
                      const RemoteSlice& flag_word)
      : endpoint_(endpoint), src_(src), dst_(dst), flag_word_(flag_word) {}

  absl::Status Post(uint64_t flag, Completion done) override {
    return endpoint_.PostWriteWithFlag(src_, dst_, flag_word_, flag, std::move(done));
  }

 private:
  Endpoint& endpoint_;
  const LocalSlice src_;
  const RemoteSlice dst_;
  const RemoteSlice flag_word_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BoundFlaggedWrite>> Endpoint::BindFlaggedWrite(
    const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word) {
  return std::make_unique<PostingFlaggedWrite>(*this, src, dst, flag_word);
}

absl::Status Endpoint::Prepare(const RemoteRegion&) { return absl::OkStatus(); }

}  // namespace rdmaflow::rdma

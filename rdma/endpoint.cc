// File: endpoint.cc
#include "rdma/endpoint.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rdma/bound_slices.h"

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
      : endpoint_(endpoint), slices_(src, dst, flag_word) {}

  absl::Status Post(uint64_t flag, Completion done) override {
    return endpoint_.PostWriteWithFlag(slices_.src(), slices_.dst(), slices_.flag_word(), flag,
                                       std::move(done));
  }

 private:
  Endpoint& endpoint_;
  const BoundSlices slices_;
};

// The same for a read.
class PostingRead final : public BoundRead {
 public:
  PostingRead(Endpoint& endpoint, const LocalSlice& dst, const RemoteSlice& src)
      : endpoint_(endpoint), slices_(dst, src) {}

  absl::Status Post(Completion done) override {
    return endpoint_.PostRead(slices_.local(), slices_.remote(), std::move(done));
  }

 private:
  Endpoint& endpoint_;
  const BoundSlices slices_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BoundRead>> Endpoint::BindRead(const LocalSlice& dst,
                                                              const RemoteSlice& src) {
  return std::make_unique<PostingRead>(*this, dst, src);
}

absl::StatusOr<std::unique_ptr<BoundFlaggedWrite>> Endpoint::BindFlaggedWrite(
    const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word) {
  return std::make_unique<PostingFlaggedWrite>(*this, src, dst, flag_word);
}

absl::Status Endpoint::Prepare(const RemoteRegion&) { return absl::OkStatus(); }

absl::StatusOr<bool> BoundFlaggedWrite::TryPostInline(uint64_t) { return false; }

absl::StatusOr<bool> BoundRead::TryPostInline() { return false; }

}  // namespace rdmaflow::rdma

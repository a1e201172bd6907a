// File: bound_slices.h
// -----------------------------------------------------------------------------
// BoundSlices: the slices of a bound flagged write (Endpoint::
// BindFlaggedWrite) or read (Endpoint::BindRead), holding copies of the
// peer's descriptors. A caller may
// drop or rewrite a RemoteRegion once a post returned (slice.h: it is read
// at post time only); a binding posts long after, so it reads its own.
#ifndef RDMAFLOW_RDMA_BOUND_SLICES_H_
#define RDMAFLOW_RDMA_BOUND_SLICES_H_

#include <optional>

#include "rdma/remote_region.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma {

// Not copyable or movable: its slices point into it.
class BoundSlices {
 public:
  // Copies the descriptors `dst` and `flag_word` name (once where they name
  // the same one; none where a slice names none, which a post refuses).
  BoundSlices(const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word)
      : src_(src), dst_(dst), flag_word_(flag_word) {
    if (dst.region != nullptr) {
      dst_region_.emplace(*dst.region);
      dst_.region = &*dst_region_;
    }
    if (flag_word.region != nullptr && flag_word.region == dst.region) {
      flag_word_.region = &*dst_region_;
    } else if (flag_word.region != nullptr) {
      flag_region_.emplace(*flag_word.region);
      flag_word_.region = &*flag_region_;
    }
  }
  // A read's: its local `dst` and the peer's `src`, with no flag word
  // (local() and remote()).
  BoundSlices(const LocalSlice& local, const RemoteSlice& remote)
      : BoundSlices(local, remote, RemoteSlice{}) {}
  BoundSlices(const BoundSlices&) = delete;
  BoundSlices& operator=(const BoundSlices&) = delete;

  const LocalSlice& src() const { return src_; }
  const RemoteSlice& dst() const { return dst_; }
  const RemoteSlice& flag_word() const { return flag_word_; }
  const LocalSlice& local() const { return src_; }
  const RemoteSlice& remote() const { return dst_; }

 private:
  std::optional<RemoteRegion> dst_region_;
  std::optional<RemoteRegion> flag_region_;
  LocalSlice src_;
  RemoteSlice dst_;
  RemoteSlice flag_word_;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_BOUND_SLICES_H_

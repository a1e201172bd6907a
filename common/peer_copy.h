// File: peer_copy.h
// -----------------------------------------------------------------------------
// CopyToPeer: the copy of a write into memory that another process on this
// host reads next (a same-host peer's shared memory, mapped here). Where the
// copy is at least `streaming_min` bytes it writes with non-temporal
// (streaming) stores, which send whole cache lines to memory without first
// taking each line out of the reader's cache; then a store fence, so that a
// release store after the call (a flag, a record: shared_word.h) is seen
// after every byte of the copy, as after memcpy. Shorter copies, a
// `streaming_min` of 0, and other architectures than x86-64 use memcpy.
//
// Why (docs/rdma.md, "Streaming copies into a peer"): a plain copy into lines
// the reader holds moves each line between the two cores twice (the writer
// takes it, the reader takes it back), at the cost of a cache-line round
// trip each; where the two cores sit on different dies that trip is 5-7
// times longer (this project's VM: 50-74 ns or 316-466 ns, as its
// hypervisor places the vCPUs), and so was every large copy. Streaming
// stores do not wait on the reader's cache; the reader then reads from
// memory.
#ifndef RDMAFLOW_COMMON_PEER_COPY_H_
#define RDMAFLOW_COMMON_PEER_COPY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmaflow {

// The default `streaming_min`: from this size streaming stores were faster
// end to end (copy, then the peer's read) in both placements of this
// project's VM; below it a plain copy was (docs/rdma.md).
inline constexpr size_t kDefaultStreamingCopyMinBytes = size_t{64} << 10;

// CopyToPeer's streamed copy, out of line (a plain one under 128 bytes).
void StreamToPeer(void* to, const void* from, size_t bytes);

// Copies `bytes` from `from` to `to` (which must not overlap), with
// streaming stores when `streaming_min` > 0 and `bytes` >= `streaming_min`
// and at least 128 (shorter copies are always plain). Inline: the short
// copies (an 8-byte flagged write's) cost no more than memcpy did.
inline void CopyToPeer(void* to, const void* from, size_t bytes, size_t streaming_min) {
  if (streaming_min > 0 && bytes >= streaming_min && bytes >= 128) {
    StreamToPeer(to, from, bytes);
    return;
  }
  std::memcpy(to, from, bytes);
}

// How many copies CopyToPeer streamed on the calling thread so far (tests
// check that a path streams).
uint64_t StreamedCopiesOnThisThread();

// Whether CopyToPeer can stream on this build (x86-64); false: it always
// copies with memcpy.
bool StreamingCopyAvailable();

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_PEER_COPY_H_

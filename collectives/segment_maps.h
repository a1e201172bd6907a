// File: segment_maps.h
// -----------------------------------------------------------------------------
// SegmentMaps: a bounded cache of same-host peers' shared segments
// (collectives/shared_segments.h), mapped read-only into this process so
// their buffers are read where they lie.
//
// A peer publishes (fd, token) for a buffer; Map() opens /proc/<pid>/fd/<fd>
// (the same ptrace permission as process_vm_readv; never blocking) and
// checks what it opened, never what the peer says: a regular file on
// tmpfs (not hugetlbfs, whose holes can fault), whose memfd name carries
// the token, whose seals forbid shrinking (else the peer could truncate it
// and turn our reads into SIGBUS), of at most kMaxSegmentBytes. The size
// comes from fstat() of our own descriptor. Pages are faulted in as they
// are read, never all at once.
//
// A mapping is kept under (pid, token) for later calls, up to `capacity`
// of them and `max_bytes` in all: past that the least recently used one is
// unmapped (a mapping keeps its segment's memory alive after its owner let
// it go), but never one returned in the current epoch: the caller's
// pointers of that epoch (a collective call) stay valid.
//
// The bytes stay the peer's to change while we read them, as in any shared
// mapping: callers use them as they would a peer's data region.
//
//   SegmentMaps maps(16, size_t{1} << 30);
//   ASSIGN_OR_RETURN(absl::Span<const std::byte> segment,
//                    maps.Map(pid, fd, token, "rank 2", call));
#ifndef RDMAFLOW_COLLECTIVES_SEGMENT_MAPS_H_
#define RDMAFLOW_COLLECTIVES_SEGMENT_MAPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rdmaflow::collectives {

// The largest segment mapped (address space, not memory: pages are
// faulted in only as read).
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 40;

struct SegmentMapsStats {
  int64_t mapped = 0;   // segments mapped (first sightings)
  int64_t hits = 0;     // Map() calls served by a kept mapping
  int64_t evicted = 0;  // mappings unmapped to make room
  int64_t refused = 0;  // Map() calls that failed
};

// Thread-compatible.
class SegmentMaps {
 public:
  // Keeps at most `capacity` (>= 1) mappings of `max_bytes` in all, but for
  // those of the current epoch.
  SegmentMaps(size_t capacity, size_t max_bytes);
  SegmentMaps(const SegmentMaps&) = delete;
  SegmentMaps& operator=(const SegmentMaps&) = delete;
  ~SegmentMaps();

  // The whole segment `token` that process `pid` holds open as `fd`,
  // mapped read-only; valid until a Map() of another `epoch` drops it (the
  // bounds), or this object goes. `who` names the peer in errors
  // ("rank 2"). kUnavailable when the descriptor cannot be opened
  // (no such process or descriptor, or the kernel refuses);
  // kDataLoss when what it opens is not that segment, is no shared-memory
  // file, is not sealed against shrinking, or is empty or too large.
  absl::StatusOr<absl::Span<const std::byte>> Map(int64_t pid, int64_t fd, uint64_t token,
                                                  absl::string_view who, uint64_t epoch);

  const SegmentMapsStats& stats() const { return stats_; }

 private:
  struct Mapping {
    int64_t pid = 0;
    uint64_t token = 0;
    const std::byte* data = nullptr;
    size_t size = 0;
    uint64_t used = 0;   // when last returned (use_)
    uint64_t epoch = 0;  // of that Map()
  };

  const size_t capacity_;
  const size_t max_bytes_;
  size_t mapped_bytes_ = 0;
  std::vector<Mapping> mappings_;
  uint64_t use_ = 0;
  SegmentMapsStats stats_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_SEGMENT_MAPS_H_

// File: shared_segments.h
// -----------------------------------------------------------------------------
// SharedSegments: this process's memory that same-host peers can map, for
// buffers the caller allocates itself (the c10d backend's opt-in CPU
// allocator serves large tensors from it). Each segment is a memfd named
// "rdmaflow-segment-<token>" (64 random bits), sealed against shrinking
// and growing, so a peer that maps it can never fault on a truncated file.
// A peer reaches it by opening /proc/<pid>/fd/<fd> (collectives/
// segment_maps.h), which needs the same ptrace permission as
// process_vm_readv, and then reads it where it lies: no system call per
// read, no copy in between.
//
// Released segments stay in a pool, bounded in bytes, for the next
// allocation of about their size: the same buffers come back step after
// step, and the peers' mappings of them stay valid (a segment keeps its
// token for life).
//
// After fork() parent and child share the segments in use at the fork
// (MAP_SHARED): neither ever hands such a segment out again. The child
// frees what it inherited without pooling and never publishes it (Find()
// does not know it); the parent unmaps it when freed instead of pooling
// it; the pool's segments stay the parent's. Each side's later
// allocations are segments of its own.
//
//   ASSIGN_OR_RETURN(std::byte* data, SharedSegments::Process().Allocate(n));
//   std::optional<SegmentRef> ref = SharedSegments::Process().Find(data, n);
//   SharedSegments::Process().Release(data);
#ifndef RDMAFLOW_COLLECTIVES_SHARED_SEGMENTS_H_
#define RDMAFLOW_COLLECTIVES_SHARED_SEGMENTS_H_

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace rdmaflow::collectives {

// "rdmaflow-segment-<16 hex digits>": a segment's memfd name.
std::string SegmentName(uint64_t token);

// Where a buffer lies: its segment's descriptor in the owner's process,
// the segment's token, and the buffer's offset in it.
struct SegmentRef {
  int fd = -1;
  uint64_t token = 0;
  size_t offset = 0;
};

struct SharedSegmentsStats {
  int64_t segments = 0;        // made (memfds created)
  int64_t reused = 0;          // allocations served from the pool
  int64_t live_bytes = 0;      // of segments in use
  int64_t pooled_bytes = 0;    // of released segments kept for reuse
};

// Thread-safe (a pthread mutex, held across fork() by the forking thread).
class SharedSegments {
 public:
  // The process's segments, with at most `kPoolBytes` pooled.
  static SharedSegments& Process();
  static constexpr size_t kPoolBytes = size_t{1} << 30;

  explicit SharedSegments(size_t pool_bytes);
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;
  ~SharedSegments();

  // A page-aligned buffer of at least `bytes` (> 0) in a segment of its
  // own: a pooled one of about that size, else a new one. kInvalidArgument
  // for 0; kResourceExhausted (with the kernel's reason) when no memfd can
  // be made or mapped.
  absl::StatusOr<std::byte*> Allocate(size_t bytes);
  // Gives back a buffer Allocate() returned (into the pool, or unmapped
  // when the pool is full); true. A pointer it did not return, or one
  // given back already, is left alone: false.
  bool Release(std::byte* data);
  // The segment that holds all of [data, data + bytes), while its buffer
  // is allocated in this process; nullopt for any other range.
  std::optional<SegmentRef> Find(const std::byte* data, size_t bytes);

  SharedSegmentsStats stats();

 private:
  struct Segment {
    size_t size = 0;
    int fd = -1;
    uint64_t token = 0;
    bool in_use = false;
    bool inherited = false;          // in the child: in use at the fork
    bool shared_with_child = false;  // in the parent: in use at a fork
  };
  // pthread_atfork's handlers, for every live instance: the parent marks
  // what is in use and holds every mutex across the fork; the child marks
  // the instances for AdoptAfterFork().
  static void PrepareFork();
  static void ParentAfterFork();
  static void ChildAfterFork();
  // In a child, on the first call after the fork: drops the pool and marks
  // every segment inherited (mutex_ held).
  void AdoptAfterFork();
  // Unmaps and closes (mutex_ held).
  void Destroy(std::map<uintptr_t, Segment>::iterator it);

  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  const size_t pool_bytes_;
  bool forked_ = false;  // set in a child by ChildAfterFork()
  std::map<uintptr_t, Segment> segments_;   // by base address
  std::multimap<size_t, uintptr_t> pool_;  // released ones, by size
  SharedSegmentsStats stats_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_SHARED_SEGMENTS_H_

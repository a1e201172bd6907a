// File: repeated_storages.h
// -----------------------------------------------------------------------------
// RepeatedStorages: which tensor storages a caller has seen before, so a
// buffer that comes back call after call (a DDP gradient bucket) is told
// apart from one seen once (the buckets DDP builds for its first step and
// rebuilds after it). The backend's DDP comm hook moves a bucket into
// registered memory at its second sighting: the trace of bucket buffers
// over the first steps, as the planner traces tensors.
//
// Storages are held by weak reference: a storage that died is forgotten,
// and a new one at the same address is a new storage.
//
//   RepeatedStorages seen(/*sightings=*/2, /*capacity=*/1024);
//   if (seen.Sighted(bucket)) MoveToRegistered(bucket);  // true once, at the 2nd
#ifndef RDMAFLOW_TORCH_BACKEND_REPEATED_STORAGES_H_
#define RDMAFLOW_TORCH_BACKEND_REPEATED_STORAGES_H_

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rdmaflow::torch_backend {

// Thread-safe.
class RepeatedStorages {
 public:
  // Sighted() answers true at a storage's `sightings`-th sighting (at least
  // 1). At most `capacity` storages are remembered (at least 1): past that,
  // dead ones are dropped, then the longest-known one.
  RepeatedStorages(int sightings, size_t capacity);

  // Counts a sighting of `tensor`'s storage; true when it is the
  // `sightings`-th. False for a tensor without storage.
  bool Sighted(const at::Tensor& tensor);
  // Makes the next sighting of `tensor`'s storage answer true again (a move
  // that could not be made this time). No effect on a storage not
  // remembered.
  void Again(const at::Tensor& tensor);
  // Storages remembered now (dead ones included until dropped).
  size_t size() const;

 private:
  struct Seen {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    int sightings = 0;
  };

  const int sightings_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Seen> seen_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_REPEATED_STORAGES_H_

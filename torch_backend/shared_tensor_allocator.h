// File: shared_tensor_allocator.h
// -----------------------------------------------------------------------------
// The shared tensor allocator: an opt-in CPU allocator for torch
// (RDMAFLOW_SHARED_TENSORS=on) that serves allocations of at least a
// threshold from shared segments (collectives/shared_segments.h), so that
// same-host ranks all-reduce ordinary tensors where they lie: each peer
// maps the segment at first sight and reads it in place, as it reads a
// registered tensor, with no copy into the staging area and no system
// call per read. Smaller allocations go where torch's default allocator
// puts them (c10::alloc_cpu).
//
// Installed once per process, for every CPU tensor allocated afterwards
// (those allocated before keep their memory). What it changes for users
// (docs/torch.md): a tensor in a segment is shared with a child forked
// after its allocation (MAP_SHARED, no copy-on-write), as a tensor after
// share_memory_() is; torch's profiler does not see these allocations.
#ifndef RDMAFLOW_TORCH_BACKEND_SHARED_TENSOR_ALLOCATOR_H_
#define RDMAFLOW_TORCH_BACKEND_SHARED_TENSOR_ALLOCATOR_H_

#include <cstddef>

#include "absl/status/status.h"

namespace rdmaflow::torch_backend {

// Makes torch allocate CPU tensors through the shared tensor allocator,
// segments from `min_bytes` (> 0) on. Later calls change the threshold.
// Raises the soft limit on open descriptors to the hard one (a segment
// holds one open).
// kFailedPrecondition when torch keeps another allocator that was set at
// a higher priority (it is then left alone).
absl::Status InstallSharedTensorAllocator(size_t min_bytes);

// Whether torch allocates through it.
bool SharedTensorAllocatorInstalled();

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_SHARED_TENSOR_ALLOCATOR_H_
